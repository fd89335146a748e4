"""Build a local, GPG-signed apt repository that mirrors NVIDIA's CUDA repository.

Test hosts have no GPU and NVIDIA's repository is not reachable from here, so the
tests install from this mirror instead. It has the same layout (a flat repository per
distribution: ``<distro>/x86_64/`` with ``Packages``, ``Release``, ``InRelease``), the
same package names and versions the role installs, and a signing key that the role
verifies by fingerprint, exactly as it does NVIDIA's.

What is real and what is a test double:

* ``cuda-nvcc-13-0``, ``cuda-cudart-dev-13-0`` and ``cuda-cccl-13-0`` carry the real CUDA
  13.0 compiler, headers (CCCL: ``<nv/target>``, libcu++, CUB, Thrust) and static runtime,
  repackaged from NVIDIA's PyPI wheels (``nvidia-cuda-nvcc`` etc.) into the toolkit's own layout under
  ``/usr/local/cuda-13.0``: the role's toolkit check compiles a real kernel for
  sm_120a on a test host.
* the driver packages (two branches) ship a TEST DOUBLE ``nvidia-smi`` that reports the
  GPUs of a fixture (tests/harness/fake_nvidia_smi.py) and a stand-in
  ``nvidia-persistenced``; there is no kernel module. Their descriptions say so.

The mirror is cached under ~/.cache/sglang-ansible/mirror-<hash of its inputs> and
rebuilt only when an input changes. ``python3 tests/harness/mirror.py`` prints the
directory of the mirror (building it when needed).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from steps import guarded, run

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible"))
KEY_UID = "sglang-ansible test mirror (TEST ONLY, not NVIDIA) <test-mirror@invalid>"

# The reference host: 8x RTX PRO 6000 Blackwell Server Edition, SM120, 96 GB each.
REFERENCE_GPUS = [
    {"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0",
     "memory_mib": 97887, "uuid": "GPU-7e57d0b1-0000-4000-8000-%012d" % i}
    for i in range(8)
]

# What the mirror carries. Versions follow NVIDIA's repository for Debian 12.
FIXTURE = {
    "distro": "debian12",
    "arch": "x86_64",
    "driver_branches": {
        # branch: (driver version, highest CUDA version the driver supports)
        "580": {"version": "580.95.05", "revision": "1", "cuda": "13.0"},
        "590": {"version": "590.48.01", "revision": "1", "cuda": "13.1"},
    },
    "toolkit": {
        "13.0": {"toolkit": "13.0.2-1", "nvcc": "13.0.88-1", "cudart": "13.0.96-1", "cccl": "13.0.85-1"},
    },
    "wheels": [
        "nvidia-cuda-nvcc==13.0.88",
        "nvidia-cuda-runtime==13.0.96",
        "nvidia-cuda-crt==13.0.88",
        "nvidia-nvvm==13.0.88",
        "nvidia-cuda-cccl==13.0.85",
    ],
}


def log(msg: str) -> None:
    print(f"[mirror] {msg}", file=sys.stderr, flush=True)


def inputs_hash() -> str:
    h = hashlib.sha256()
    for src in (Path(__file__), HERE / "fake_nvidia_smi.py"):
        h.update(src.read_bytes())
    return h.hexdigest()[:12]


def fetch_wheels() -> Path:
    dest = CACHE / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    want = FIXTURE["wheels"]
    have = {p.name.split("-")[0].replace("_", "-") + "==" + p.name.split("-")[1]
            for p in dest.glob("*.whl")}
    missing = [w for w in want if w not in have]
    if missing:
        log("downloading " + " ".join(missing) + " from PyPI")
        run("pip download (toolkit wheels)", [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                                              "--only-binary=:all:", "--platform", "manylinux2014_x86_64",
                                              "-d", str(dest), *missing])
    return dest


def control(pkg: str, version: str, description: str, depends: str = "", extra: str = "") -> str:
    lines = [f"Package: {pkg}", f"Version: {version}", "Architecture: amd64",
             "Maintainer: sglang-ansible tests <test-mirror@invalid>", "Section: multiverse/devel",
             "Priority: optional"]
    if depends:
        lines.append(f"Depends: {depends}")
    if extra:
        lines.append(extra.rstrip("\n"))
    lines.append(f"Description: {description}")
    return "\n".join(lines) + "\n"


def build_deb(root: Path, ctrl: str, out: Path, scripts: dict[str, str] | None = None) -> Path:
    debian = root / "DEBIAN"
    debian.mkdir(parents=True, exist_ok=True)
    (debian / "control").write_text(ctrl)
    for name, body in (scripts or {}).items():
        p = debian / name
        p.write_text(body)
        p.chmod(0o755)
    fields = dict(line.split(": ", 1) for line in ctrl.splitlines() if ": " in line)
    deb = out / f"{fields['Package']}_{fields['Version']}_amd64.deb"
    run("dpkg-deb --build", ["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", str(root), str(deb)])
    return deb


def driver_packages(work: Path, out: Path, branch: str, spec: dict) -> None:
    ver = f"{spec['version']}-{spec['revision']}"
    double = "TEST DOUBLE (sglang-ansible test mirror): no GPU, no kernel module."
    # nvidia-kernel-open-dkms: the open kernel modules. Here: nothing to build.
    build_deb(work / f"dkms-{branch}", control(
        "nvidia-kernel-open-dkms", ver, f"NVIDIA open kernel module ({branch} branch)\n {double}",
        extra="Provides: nvidia-kernel-dkms-any (= %s)\nConflicts: nvidia-kernel-dkms" % ver), out)
    # nvidia-driver-cuda: user-space tools (nvidia-smi, nvidia-persistenced and its unit).
    root = work / f"driver-cuda-{branch}"
    smi = (HERE / "fake_nvidia_smi.py").read_text()
    smi = (smi.replace("@DRIVER_VERSION@", spec["version"]).replace("@CUDA_VERSION@", spec["cuda"])
           .replace("@DEFAULT_GPUS@", json.dumps(REFERENCE_GPUS)))
    bindir = root / "usr/bin"
    bindir.mkdir(parents=True)
    (bindir / "nvidia-smi").write_text(smi)
    (bindir / "nvidia-smi").chmod(0o755)
    (bindir / "nvidia-persistenced").write_text(
        "#!/bin/sh\n# TEST DOUBLE of nvidia-persistenced: keeps running, touches nothing.\n"
        "echo \"nvidia-persistenced TEST DOUBLE started (driver %s)\"\nexec sleep infinity\n" % spec["version"])
    (bindir / "nvidia-persistenced").chmod(0o755)
    unit = root / "usr/lib/systemd/system/nvidia-persistenced.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Unit]\nDescription=NVIDIA Persistence Daemon (TEST DOUBLE)\n\n"
                    "[Service]\nType=simple\nExecStart=/usr/bin/nvidia-persistenced\n\n"
                    "[Install]\nWantedBy=multi-user.target\n")
    build_deb(root, control("nvidia-driver-cuda", ver,
                            f"NVIDIA driver CUDA integration components ({branch} branch)\n {double}",
                            depends=f"nvidia-kernel-open-dkms (= {ver})"), out)
    # nvidia-open: the metapackage NVIDIA documents for the open kernel modules.
    build_deb(work / f"open-{branch}", control(
        "nvidia-open", ver, f"NVIDIA driver metapackage, open kernel modules ({branch} branch)\n {double}",
        depends=f"nvidia-kernel-open-dkms (= {ver}), nvidia-driver-cuda (= {ver})"), out)


def toolkit_packages(work: Path, out: Path, wheels: Path, cuda: str, spec: dict) -> None:
    dashed = cuda.replace(".", "-")
    prefix = f"usr/local/cuda-{cuda}"
    unpacked = work / "wheels"
    for whl in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(whl) as zf:
            zf.extractall(unpacked)
    cu = unpacked / "nvidia" / "cu13"
    target = f"{prefix}/targets/x86_64-linux"

    nvcc = work / "nvcc"
    shutil.copytree(cu / "bin", nvcc / prefix / "bin")
    shutil.copytree(cu / "nvvm", nvcc / prefix / "nvvm")
    # include/cccl belongs to cuda-cccl-13-0, as in NVIDIA's repository.
    shutil.copytree(cu / "include", nvcc / target / "include",
                    ignore=lambda d, names: ["cccl"] if Path(d) == cu / "include" else [])
    (nvcc / prefix / "include").symlink_to("targets/x86_64-linux/include")
    for exe in (nvcc / prefix).rglob("*"):
        if exe.is_file() and (exe.parent.name == "bin" or exe.name == "cicc"):
            exe.chmod(0o755)
    build_deb(nvcc, control(
        f"cuda-nvcc-{dashed}", spec["nvcc"],
        f"CUDA nvcc {cuda}\n The real compiler from NVIDIA's PyPI wheels, in the toolkit layout."), out)

    rt = work / "cudart"
    (rt / target / "lib").mkdir(parents=True)
    for lib in (cu / "lib").iterdir():
        if lib.is_file():  # the CCCL wheel adds lib/cmake/ (CMake configs): not the runtime's
            shutil.copy2(lib, rt / target / "lib" / lib.name)
    (rt / prefix / "lib64").parent.mkdir(parents=True, exist_ok=True)
    (rt / prefix / "lib64").symlink_to("targets/x86_64-linux/lib")
    build_deb(rt, control(f"cuda-cudart-dev-{dashed}", spec["cudart"],
                          f"CUDA runtime {cuda}: static and shared libraries"), out)

    cccl = work / "cccl"
    shutil.copytree(cu / "include" / "cccl", cccl / target / "include" / "cccl")
    build_deb(cccl, control(f"cuda-cccl-{dashed}", spec["cccl"],
                            f"CUDA CCCL {cuda}: libcu++, CUB and Thrust headers (nvcc's -isystem include/cccl)"), out)

    meta = work / "toolkit"
    meta.mkdir()
    build_deb(meta, control(
        f"cuda-toolkit-{dashed}", spec["toolkit"], f"CUDA Toolkit {cuda} meta-package",
        depends=(f"cuda-nvcc-{dashed} (>= {spec['nvcc']}), cuda-cudart-dev-{dashed} (>= {spec['cudart']}), "
                 f"cuda-cccl-{dashed} (>= {spec['cccl']})")), out)


def gpg(home: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return run("gpg " + args[0], ["gpg", "--homedir", str(home), "--batch", "--quiet", *args], **kw)


def sign_repository(repo: Path, home: Path, keys: Path) -> str:
    gpg(home, "--passphrase", "", "--quick-gen-key", KEY_UID, "rsa3072", "sign", "never")
    colons = gpg(home, "--with-colons", "--list-keys").stdout
    fingerprint = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
    keys.mkdir(parents=True, exist_ok=True)
    (keys / "test-mirror.asc").write_text(gpg(home, "--armor", "--export", fingerprint).stdout)
    (keys / "fingerprint").write_text(fingerprint + "\n")

    packages = run("apt-ftparchive packages", ["apt-ftparchive", "packages", "."], cwd=repo).stdout
    (repo / "Packages").write_text(packages)
    with gzip.open(repo / "Packages.gz", "wt") as fh:
        fh.write(packages)
    release = run(
        "apt-ftparchive release", ["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=sglang-ansible test mirror",
         "-o", "APT::FTPArchive::Release::Label=NVIDIA CUDA (test mirror)",
         "-o", "APT::FTPArchive::Release::Architectures=amd64", "release", "."],
        cwd=repo).stdout
    (repo / "Release").write_text(release)
    gpg(home, "--local-user", fingerprint, "--clearsign", "-o", str(repo / "InRelease"), str(repo / "Release"))
    gpg(home, "--local-user", fingerprint, "-abs", "-o", str(repo / "Release.gpg"), str(repo / "Release"))
    return fingerprint


def build(dest: Path) -> None:
    wheels = fetch_wheels()
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="mirror-build-") as tmp:
        work = Path(tmp)
        stage = work / "stage"
        repo = stage / FIXTURE["distro"] / FIXTURE["arch"]
        repo.mkdir(parents=True)
        for branch, spec in FIXTURE["driver_branches"].items():
            log(f"driver packages, branch {branch} ({spec['version']})")
            driver_packages(work, repo, branch, spec)
        for cuda, spec in FIXTURE["toolkit"].items():
            log(f"toolkit packages, CUDA {cuda} (real nvcc from PyPI wheels)")
            toolkit_packages(work, repo, wheels, cuda, spec)
        home = work / "gnupg"
        home.mkdir(mode=0o700)
        fingerprint = sign_repository(repo, home, stage / "keys")
        manifest = dict(FIXTURE, fingerprint=fingerprint, reference_gpus=REFERENCE_GPUS,
                        repo_path=f"{FIXTURE['distro']}/{FIXTURE['arch']}/", key_path="keys/test-mirror.asc")
        (stage / "mirror.json").write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(stage, dest)  # complete or absent: never half a mirror in the cache
    log(f"mirror ready at {dest} (key {fingerprint})")


def ensure() -> Path:
    dest = CACHE / f"mirror-{inputs_hash()}"
    if (dest / "mirror.json").exists():
        return dest
    CACHE.mkdir(parents=True, exist_ok=True)
    build(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build (or find) the local NVIDIA test mirror; print its path.")
    ap.add_argument("--manifest", action="store_true", help="print mirror.json instead of the path")
    args = ap.parse_args(argv)
    dest = ensure()
    print((dest / "mirror.json").read_text() if args.manifest else dest)
    return 0


if __name__ == "__main__":
    sys.exit(guarded("mirror", main))
