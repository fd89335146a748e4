"""Build (or find) the local SGLang build sources for test hosts; print their path.

Why: the sglang_build role must be tested against real upstream sources, not fakes,
while the test hosts reach nothing outside their own loopback. This module turns
the real PyPI source distributions into git repositories laid out and tagged like
upstream, next to a pre-filled pip wheelhouse, in one directory that the test hosts
bind-mount read-only at /srv/sglang-sources and serve on 127.0.0.1:8089
(git over "dumb HTTP" after `git update-server-info`, pip with --find-links):

    git/sglang.git      python/ = sglang 0.5.9 sdist, tag v0.5.9;
                        next commit python/ = sglang 0.5.10 sdist, tag v0.5.10
    git/flashinfer.git  flashinfer-python 0.6.3 sdist + version.txt, tag v0.6.3
    wheelhouse/         build requirements (setuptools, setuptools-scm, wheel,
                        packaging, apache-tvm-ffi), the real sgl-kernel 0.3.21
                        wheel, a torch CPU wheel (TEST ONLY: CUDA torch does
                        not fit here), NVIDIA's CCCL headers wheel, the
                        router hosts' gateways (smg and sglang-router) with their dependencies,
                        the current release set's wheels: sglang 0.5.17
                        (Python 3.11), flashinfer-python 0.6.15.post1, and
                        sglang-kernel 0.4.5 and 0.4.1 (0.5.10's) without
                        their CUDA libraries (TEST ONLY), and what each
                        release's sglang.srt.server_args imports
                        (SERVER_ARGS_CLOSURE, with a torchvision TEST DOUBLE)

Downloads are cached under ~/.cache/sglang-ansible (SGLANG_ANSIBLE_CACHE); the
result lives in a directory named after a hash of this recipe and is rebuilt only
when the recipe changes. Commits have fixed dates, so the repositories are the
same byte for byte on every machine.

Usage: python3 tests/harness/sources.py [--print-recipe]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_sources  # the same sdist cache as the patch tests
import torchvision_double
from steps import StepFailed, guarded, run

CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible"))
SDISTS = CACHE / "sdists"
WHEELS = CACHE / "sglang-build-wheels"

SGLANG_VERSIONS = ["0.5.9", "0.5.10"]
# The current release set's SGLang (roles/sglang_build, sglang_build_release_set 0.5.17): PyPI publishes
# wheels only (no sdist) from 0.5.11 on; its Python 3.11 wheel goes into the wheelhouse, with the
# FlashInfer wheel it pins (a JIT package: pure Python and headers).
CURRENT_SGLANG = "0.5.17"
CURRENT_FLASHINFER_WHEEL = "flashinfer-python==0.6.15.post1"
# TEST ONLY: the kernel packages SGLang 0.5.17 and 0.5.10 pin, with their CUDA libraries left out (383 and
# 352 MB of CUDA code that has nothing to run on a test host; nothing there imports them): the real wheels'
# other files, metadata and names, read from PyPI by HTTP range requests without downloading the libraries.
STRIPPED_KERNELS = [("sglang-kernel", "0.4.5"), ("sglang-kernel", "0.4.1")]
FLASHINFER_VERSION = "0.6.3"
SGL_KERNEL_WHEEL = "sgl-kernel==0.3.21"
# TEST ONLY: the CCCL headers (nv/target, cub, thrust) a real CUDA 13.0 toolkit has in
# targets/x86_64-linux/include/cccl and the test mirror's toolkit lacks; molecule's prepare
# puts them there so FlashInfer's headers compile (cuda_fp16.h includes <nv/target>).
CCCL_WHEEL = "nvidia-cuda-cccl==13.0.85"
# TEST ONLY: the reference host gets torch 2.9.1+cu130 from PyTorch's cu130 index.
TORCH_WHEEL = "torch==2.13.0+cpu"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# The router hosts' pinned gateway and its dependencies (role sglang_router's default distribution and
# version), and sglang-router 0.3.2 (what molecule multihost's converge installs first: its verifier
# migrates it to the default).
ROUTER_DEFAULTS = Path(__file__).resolve().parents[2] / "roles" / "sglang_router" / "defaults" / "main.yml"
ROUTER_DIST = re.search(r"^sglang_router_distribution: (\S+)", ROUTER_DEFAULTS.read_text(), re.M).group(1)
ROUTER_VERSION = re.search(r'^sglang_router_version: "([^"]+)"', ROUTER_DEFAULTS.read_text(), re.M).group(1)
LEGACY_ROUTER_WHEEL = "sglang-router==0.3.2"
ROUTER_WHEELS = [f"{ROUTER_DIST}=={ROUTER_VERSION}", LEGACY_ROUTER_WHEEL]
# TEST ONLY: what `import sglang.srt.server_args` needs besides torch, per test release. The server
# role's pre-start check imports it with the release's Python; the test releases are installed with
# --no-deps and hold none of it. The smallest set that imports (found by importing it in a venv with
# only torch and adding what failed), at the versions each release pins (transformers, openai,
# xgrammar, apache-tvm-ffi), triton at its torch's pin (2.9.1: 3.5.1; 2.11.0: 3.6.0), the rest as pip
# resolves them for Python 3.11 (2026-12-03). Installed by molecule/sglang_server/prepare.yml and
# tests/harness/serverargs_release.py.
SERVER_ARGS_COMMON = [
    "aiohappyeyeballs==2.7.1", "aiohttp==3.14.5", "aiosignal==1.4.0", "annotated-types==0.8.0", "anyio==4.16.0",
    "attrs==26.1.0", "certifi==2026.10.19.post1", "dill==0.4.1", "distro==1.9.0", "filelock==4.3.2",
    "frozenlist==1.8.0", "httpx==0.29.0", "idna==3.20", "ipython==9.18.1", "mpmath==1.3.0", "multidict==7.2.1",
    "numpy==2.4.6", "openai==2.6.1", "orjson==3.13.0", "packaging==26.4", "partial-json-parser==0.2.1.1.post7",
    "pillow==13.0.0", "propcache==0.5.4", "psutil==7.2.2", "pybase64==1.5.1", "pydantic==2.14.4",
    "pydantic-core==2.50.5", "pygments==2.21.0", "pyyaml==6.0.4", "pyzmq==27.3.0", "regex==2026.11.19",
    "requests==2.34.2", "safetensors==0.8.0", "sentencepiece==0.2.3", "sniffio==1.3.1", "starlette==1.10.0",
    "sympy==1.14.0", "tokenizers==0.22.2", "tqdm==4.70.1", "traitlets==5.16.1", "typing-extensions==4.16.0",
    "typing-inspection==0.4.5", "urllib3==2.8.0", "yarl==1.25.1",
]
SERVER_ARGS_CLOSURE = {
    "0.5.9": SERVER_ARGS_COMMON + ["huggingface-hub==0.36.2", "transformers==4.57.1", "triton==3.5.1"],
    "0.5.10": SERVER_ARGS_COMMON + ["h11==0.16.0", "httpcore==1.0.9", "huggingface-hub==1.33.0",
                                    "transformers==5.3.0", "triton==3.5.1"],
    "0.5.17": SERVER_ARGS_COMMON + ["apache-tvm-ffi==0.1.11", "h11==0.16.0", "httpcore==1.0.9",
                                    "huggingface-hub==1.33.0", "msgspec==0.23.0", "transformers==5.12.1",
                                    "triton==3.6.0", "xgrammar==0.2.1"],
    # 0.5.23 pins openai, tokenizers and sentencepiece at other versions than the common set's; its torch
    # (2.14.1) pins triton ~=3.8.0. Nothing else beyond 0.5.17's (imported on Python 3.11, 2026-12-04).
    "0.5.23": [r for r in SERVER_ARGS_COMMON if r.split("==")[0] not in ("openai", "tokenizers", "sentencepiece")]
    + ["apache-tvm-ffi==0.1.11", "h11==0.16.0", "httpcore==1.0.9", "huggingface-hub==1.33.0", "msgspec==0.23.0",
       "openai==2.8.0", "sentencepiece==0.2.1", "tokenizers==0.23.2", "transformers==5.19.0", "triton==3.8.0",
       "xgrammar==0.2.7"],
}
# TEST DOUBLE: the real torchvision paired with the test torch, without its native operators
# (tests/harness/torchvision_double.py says why); part of every closure above.
TORCHVISION_DOUBLE = f"torchvision==0.28.0+{torchvision_double.LABEL}"
# What the isolated source builds of sglang and flashinfer ask for (their pyproject.toml).
BUILD_REQUIREMENTS = ["setuptools>=77", "setuptools-scm>=8", "wheel", "packaging>=24",
                      "apache-tvm-ffi>=0.1.6,!=0.1.8,!=0.1.8.post0,<0.2"]
# sdist files that upstream's git tree does not have (generated by the sdist build).
NOT_IN_GIT = ["PKG-INFO", "setup.cfg", "*.egg-info", "sglang/_version.py", "flashinfer/_build_meta.py"]
GIT_ENV = {"GIT_AUTHOR_NAME": "sglang-ansible tests", "GIT_AUTHOR_EMAIL": "tests@localhost",
           "GIT_COMMITTER_NAME": "sglang-ansible tests", "GIT_COMMITTER_EMAIL": "tests@localhost",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def log(msg: str) -> None:
    print(f"[sources] {msg}", file=sys.stderr, flush=True)


def recipe() -> dict:
    return {"sglang": SGLANG_VERSIONS, "flashinfer": FLASHINFER_VERSION, "sgl_kernel": SGL_KERNEL_WHEEL,
            "torch": TORCH_WHEEL, "cccl": CCCL_WHEEL, "router": ROUTER_WHEELS, "build": BUILD_REQUIREMENTS,
            "not_in_git": NOT_IN_GIT, "current": [CURRENT_SGLANG, CURRENT_FLASHINFER_WHEEL, STRIPPED_KERNELS],
            "server_args": SERVER_ARGS_CLOSURE, "torchvision_double": TORCHVISION_DOUBLE, "layout": 4}


def recipe_hash() -> str:
    return hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()[:12]


def pip(*args: str) -> None:
    run("pip " + args[0], [sys.executable, "-m", "pip", *args])


def reachable(url: str, timeout: float = 10) -> str | None:
    """None when ``url`` answers at all (any HTTP status), else why not, asked once.

    pip retries an unreachable index five times per requirement, with its default
    timeout each time (minutes on a closed network); asking once first avoids that.
    """
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, "reason", exc))
    return None


def sdist(name: str, version: str) -> Path:
    """The real upstream sdist from PyPI, cached (sglang's through sglang_sources.py).

    `pip download --no-binary :all:` would also prepare its metadata, which for
    flashinfer installs its build requirements (minutes); PyPI's JSON simple API
    gives the same file with its sha256 directly.
    """
    if name == "sglang":
        return sglang_sources.sdist(version)
    dist = name.replace("-", "_")
    path = SDISTS / f"{dist}-{version}.tar.gz"
    if path.exists():
        return path
    SDISTS.mkdir(parents=True, exist_ok=True)
    req = urllib.request.Request(f"https://pypi.org/simple/{name}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = json.load(resp)["files"]
    entry = next(f for f in files if f["filename"] in (f"{dist}-{version}.tar.gz", f"{name}-{version}.tar.gz"))
    log(f"downloading {entry['filename']}")
    with urllib.request.urlopen(entry["url"], timeout=300) as resp:
        data = resp.read()
    if hashlib.sha256(data).hexdigest() != entry["hashes"]["sha256"]:
        raise StepFailed(f"sha256 mismatch for {entry['filename']}")
    tmp = path.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.rename(path)
    return path


def wheels() -> Path:
    """Build requirements, sgl-kernel, torch and the router hosts' wheels for the test hosts' Python 3.11."""
    stamp = WHEELS / f".complete-{recipe_hash()}"
    if stamp.exists():
        return WHEELS
    WHEELS.mkdir(parents=True, exist_ok=True)
    log("downloading wheels into " + str(WHEELS))
    common = ["download", "-q", "-d", str(WHEELS), "--only-binary", ":all:"]
    pip(*common, *BUILD_REQUIREMENTS)
    pip(*common, "--no-deps", SGL_KERNEL_WHEEL, CCCL_WHEEL)
    why = reachable(TORCH_INDEX)
    if why is None:
        pip(*common, "--no-deps", "--extra-index-url", TORCH_INDEX, TORCH_WHEEL)
    else:  # a closed network with the CPU wheel on a local index or --find-links (pip's configuration)
        log(f"{TORCH_INDEX} unreachable ({why}): {TORCH_WHEEL} from pip's configured indexes only")
        pip(*common, "--no-deps", TORCH_WHEEL)
    for router in ROUTER_WHEELS:  # one call each: they need not resolve together
        pip(*common, router)
    pip(*common, "--no-deps", CURRENT_FLASHINFER_WHEEL)
    shutil.copy2(sglang_sources.wheel(CURRENT_SGLANG, "3.11"), WHEELS)
    for name, version in STRIPPED_KERNELS:
        stripped_wheel(name, version, WHEELS)
    for closure in SERVER_ARGS_CLOSURE.values():  # one call each: the releases pin different versions
        pip(*common, "--no-deps", *closure)
    torchvision_double.build(torchvision_real(), WHEELS)
    stamp.touch()
    return WHEELS


class _RangeFile(io.RawIOBase):
    """A remote file read by HTTP range requests (enough of one for zipfile to read a central directory)."""

    def __init__(self, url: str):
        self.url, self.pos = url, 0
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as resp:
            self.size = int(resp.headers["Content-Length"])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buf) -> int:
        n = min(len(buf), self.size - self.pos)
        if n <= 0:
            return 0
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{self.pos + n - 1}"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            data = resp.read()
        buf[:len(data)] = data
        self.pos += len(data)
        return len(data)


NOTE_LAYOUT = "TEST-ONLY-STRIPPED.v2"  # marks a stripped wheel made with a note in every package that lost a member


def stripped_wheel(name: str, version: str, dest: Path, limit: int = 1 << 20) -> Path:
    """TEST ONLY: PyPI's x86_64 wheel of name==version without its members over `limit` bytes (the
    compiled libraries), the same file name; RECORD rewritten for what is kept, and the left-out
    members named in TEST-ONLY-STRIPPED.txt in every package that lost one (sglang-kernel 0.4.1 holds
    sgl_kernel and deep_gemm: the import check reads the note of the package it imports)."""
    req = urllib.request.Request(f"https://pypi.org/simple/{name}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = json.load(resp)["files"]
    prefix = f"{name.replace('-', '_')}-{version}-"
    entry = next(f for f in files if f["filename"].startswith(prefix) and f["filename"].endswith("x86_64.whl"))
    out = dest / entry["filename"]
    if out.exists():
        with zipfile.ZipFile(out) as zf:
            if any(n.endswith(NOTE_LAYOUT) for n in zf.namelist()):
                return out
        out.unlink()  # made before the notes went into every package that lost a member
    log(f"reading {entry['filename']} by range requests (its libraries left out: TEST ONLY)")
    remote = zipfile.ZipFile(io.BufferedReader(_RangeFile(entry["url"]), 1 << 20))
    kept = [i for i in remote.infolist() if i.file_size <= limit and not i.filename.endswith(".dist-info/RECORD")]
    dropped = [i.filename for i in remote.infolist() if i.file_size > limit]
    record_name = next(i.filename for i in remote.infolist() if i.filename.endswith(".dist-info/RECORD"))
    packages = sorted({i.filename.split("/")[0] for i in kept if i.filename.count("/") == 1
                       and i.filename.endswith("/__init__.py")})
    losing = [p for p in packages if any(d.startswith(p + "/") for d in dropped)] or packages[:1]
    tmp = out.with_suffix(".part")
    rows = []
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        members = [(i.filename, remote.read(i)) for i in kept]
        text = ("TEST ONLY (tests/harness/sources.py): left out of PyPI's wheel:\n" + "\n".join(dropped) + "\n").encode()
        members += [(f"{package}/TEST-ONLY-STRIPPED.txt", text) for package in losing]
        members.append((f"{losing[0]}/{NOTE_LAYOUT}", b""))
        for member, data in members:
            zf.writestr(member, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{member},sha256={digest},{len(data)}")
        zf.writestr(record_name, "\n".join(rows + [f"{record_name},,"]) + "\n")
    os.replace(tmp, out)
    return out


def torchvision_real() -> Path:
    """The real torchvision wheel the TEST DOUBLE is made of (cached apart: never in the wheelhouse)."""
    dest = CACHE / "torchvision-real"
    requirement = TORCHVISION_DOUBLE.split("+")[0]
    found = sorted(dest.glob(f"torchvision-{requirement.split('==')[1]}-*.whl"))
    if not found:
        pip("download", "-q", "-d", str(dest), "--only-binary", ":all:", "--no-deps", requirement)
        found = sorted(dest.glob("torchvision-*.whl"))
    return found[0]


def git(repo: Path, *args: str) -> str:
    return run("git " + args[0], ["git", "-C", str(repo), *args], env=dict(os.environ, **GIT_ENV)).stdout.strip()


def unpack(archive: Path, dest: Path) -> None:
    """Unpack an sdist's single top directory into dest (replacing dest's files)."""
    if dest.exists():
        shutil.rmtree(dest)
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
        (top,) = Path(tmp).iterdir()
        shutil.move(str(top), dest)


def commit_and_tag(work: Path, tag: str, message: str) -> None:
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", message)
    git(work, "tag", "-a", tag, "-m", message)


def publish(work: Path, bare: Path) -> None:
    run("git clone --bare", ["git", "clone", "-q", "--bare", str(work), str(bare)], env=dict(os.environ, **GIT_ENV))
    git(bare, "update-server-info")  # what git's "dumb HTTP" transport reads


def build(dest: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "sglang"
        git(Path(tmp), "init", "-q", "-b", "main", str(work))
        (work / ".gitignore").write_text("\n".join(f"python/{p}" for p in NOT_IN_GIT) + "\n")
        for version in SGLANG_VERSIONS:
            unpack(sdist("sglang", version), work / "python")
            commit_and_tag(work, f"v{version}", f"sglang {version} (python/ from the PyPI sdist)")
        publish(work, dest / "git" / "sglang.git")

        work = Path(tmp) / "flashinfer"
        unpack(sdist("flashinfer-python", FLASHINFER_VERSION), work)
        git(Path(tmp), "init", "-q", "-b", "main", str(work))
        (work / ".gitignore").write_text("\n".join(NOT_IN_GIT) + "\n")
        (work / "version.txt").write_text(FLASHINFER_VERSION + "\n")  # upstream's tree has it, the sdist not
        commit_and_tag(work, f"v{FLASHINFER_VERSION}", f"flashinfer {FLASHINFER_VERSION} from the PyPI sdist")
        publish(work, dest / "git" / "flashinfer.git")

    house = dest / "wheelhouse"
    house.mkdir()
    for whl in wheels().glob("*.whl"):
        os.link(whl, house / whl.name) if whl.stat().st_dev == house.stat().st_dev else shutil.copy2(whl, house)
    (dest / "sources.json").write_text(json.dumps(
        {"recipe": recipe(), "wheels": sorted(p.name for p in house.glob("*.whl"))}, indent=2) + "\n")
    for path in [dest, *dest.rglob("*")]:  # readable by the unprivileged build user in the host
        path.chmod(0o755 if path.is_dir() else 0o644)


def ensure() -> Path:
    dest = CACHE / f"sources-{recipe_hash()}"
    if (dest / "sources.json").exists():
        return dest
    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    build(part)
    part.rename(dest)
    log(f"built {dest}")
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print-recipe", action="store_true", help="print the recipe instead of building")
    args = ap.parse_args(argv)
    if args.print_recipe:
        print(json.dumps(recipe(), indent=2))
        return 0
    print(ensure())
    return 0


if __name__ == "__main__":
    sys.exit(guarded("sources", main))
