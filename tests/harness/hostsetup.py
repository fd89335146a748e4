"""Prepare this machine to run real systemd test hosts in podman containers.

Idempotent: every step checks first and changes only what is missing or different,
and says so. Steps:

1. Debian packages: podman, runc, netavark and aardvark-dns (name resolution on podman
   networks), iptables (netavark's firewall backend on Debian 12, which it does not
   depend on: without it every ``podman run`` fails with "netavark: No such file or
   directory"), debootstrap, apt-utils (apt-ftparchive), gnupg, uidmap.
2. /etc/containers/containers.conf: lowered default ulimits and the runc runtime
   (without them every container fails to start on this machine kind), and netavark named
   as the network backend (podman 4.3 otherwise guesses it on its first run, warning about
   Debian's CNI example file, and would pick CNI, which has no name resolution, on a machine
   that has CNI networks).
3. The test-host image, built with debootstrap and imported with ``podman import``;
   its tag carries a hash of the recipe, so it is rebuilt only when the recipe changes.
4. Proof, before saying ready: two throwaway containers on a throwaway podman network,
   the second resolving the first by name (what the multi-host scenarios need), then
   both removed.

A step that fails says so in one line with the tool's own stderr (tests/harness/steps.py).

Run as root: ``python3 tests/harness/hostsetup.py [--image-only|--print-image]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from steps import StepFailed, guarded, run

# netavark + aardvark-dns: containers on one podman network find each other by name (multi-host
# scenarios); podman only recommends them. iptables: netavark 1.4 (Debian 12) sets up every
# network's NAT and firewall rules with it and fails without it, yet does not depend on it.
APT_PACKAGES = ["podman", "runc", "netavark", "aardvark-dns", "iptables", "debootstrap", "apt-utils", "gnupg",
                "uidmap"]
CONTAINERS_CONF = Path("/etc/containers/containers.conf")
CONTAINERS_SETTINGS = {
    "containers": {"default_ulimits": '["nofile=4096:4096", "nproc=4096:4096"]'},
    "engine": {"runtime": '"runc"'},
    "network": {"network_backend": '"netavark"'},
}

IMAGE_NAME = "localhost/sglang-testhost"
SUITE = "bookworm"
MIRROR = os.environ.get("TESTHOST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# What a bare Ubuntu/Debian server has, plus systemd as PID 1. The roles install
# anything else they need themselves; g++ is here because the CUDA toolkit needs a
# host compiler and downloading it in every scenario would dominate test time.
IMAGE_PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "sudo", "ca-certificates", "python3", "python3-apt",
    "python3-venv", "python3-debian", "gpg", "gpg-agent", "procps", "iproute2", "kmod",
    "g++", "git", "curl", "less",
]
# Files written into the rootfs after debootstrap; part of the recipe hash.
IMAGE_FILES = {
    # No getty on a container console; quieter boot and faster `is-system-running`.
    "etc/systemd/system/getty.target": None,
    "etc/hostname": "testhost\n",
    # TEST HARNESS ONLY: the system Python keeps the bytecode of Ansible's module zips
    # (tests/harness/zip_pycache.py): about a third of each task's CPU time on these hosts.
    "usr/lib/python3/dist-packages/zip_pycache.py": (Path(__file__).parent / "zip_pycache.py").read_text(),
    "usr/lib/python3/dist-packages/zip_pycache.pth": "import zip_pycache\n",
}
CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible"))


def log(msg: str) -> None:
    print(f"[hostsetup] {msg}", flush=True)


def ensure_packages() -> None:
    missing = [p for p in APT_PACKAGES if subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True
    ).stdout.strip() != "install ok installed"]
    if not missing:
        log("packages present: " + " ".join(APT_PACKAGES))
        return
    log("installing Debian packages: " + " ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run("apt-get update", ["apt-get", "update", "-qq"], env=env)
    run("installing " + " ".join(missing),
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)


def merge_ini(text: str, settings: dict[str, dict[str, str]]) -> str:
    """Set key = value in [section]s of a TOML-ish containers.conf, keeping the rest.

    A key already set to the wanted value is left alone; a key set otherwise is
    replaced in place; a missing key is added at the top of its section; a missing
    section is appended.
    """
    lines = text.splitlines()
    out: list[str] = []
    pending = {s: dict(kv) for s, kv in settings.items()}
    section = None

    def flush_missing(sec):
        if sec in pending:
            for k, v in pending.pop(sec).items():
                out.append(f"{k} = {v}")

    for line in lines:
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]") and not stripped.startswith("[["):
            section = stripped[1:-1].strip()
            out.append(line)
            flush_missing(section)
            continue
        if section in settings and "=" in stripped and not stripped.startswith("#"):
            key = stripped.split("=", 1)[0].strip()
            if key in settings[section]:
                out.append(f"{key} = {settings[section][key]}")
                continue
        out.append(line)
    for sec in list(pending):
        out.append("")
        out.append(f"[{sec}]")
        flush_missing(sec)
    # Keys added at section start by flush_missing may duplicate a later in-place one.
    result, seen = [], set()
    section = None
    for line in out:
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1].strip()
        elif section in settings and "=" in s and not s.startswith("#"):
            key = (section, s.split("=", 1)[0].strip())
            if key in seen:
                continue
            seen.add(key)
        result.append(line)
    return "\n".join(result).strip("\n") + "\n"


def ensure_containers_conf() -> None:
    current = CONTAINERS_CONF.read_text() if CONTAINERS_CONF.exists() else ""
    wanted = merge_ini(current, CONTAINERS_SETTINGS)
    if wanted == current:
        log(f"{CONTAINERS_CONF}: already has the ulimits, the runc runtime and the netavark backend")
        return
    CONTAINERS_CONF.parent.mkdir(parents=True, exist_ok=True)
    tmp = CONTAINERS_CONF.with_suffix(".conf.tmp")
    tmp.write_text(wanted)
    os.replace(tmp, CONTAINERS_CONF)
    log(f"{CONTAINERS_CONF}: wrote default_ulimits, runtime=runc and network_backend=netavark "
        "(host configuration changed)")


def recipe_hash() -> str:
    h = hashlib.sha256()
    h.update(SUITE.encode())
    h.update(",".join(sorted(IMAGE_PACKAGES)).encode())
    for k, v in sorted(IMAGE_FILES.items()):
        h.update(f"{k}={v!r}".encode())
    return h.hexdigest()[:12]


def image_ref() -> str:
    return f"{IMAGE_NAME}:{SUITE}-{recipe_hash()}"


def image_exists(ref: str) -> bool:
    return subprocess.run(["podman", "image", "exists", ref]).returncode == 0


def build_image() -> str:
    ref = image_ref()
    if image_exists(ref):
        log(f"image {ref} present (recipe unchanged)")
        return ref
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        log(f"building {ref} with debootstrap ({SUITE}, about a minute)")
        run("debootstrap", ["debootstrap", "--variant=minbase", "--include=" + ",".join(IMAGE_PACKAGES),
                            SUITE, str(rootfs), MIRROR])
        for rel, content in IMAGE_FILES.items():
            path = rootfs / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if content is None:
                if path.exists() or path.is_symlink():
                    path.unlink()
                path.symlink_to("/dev/null")
            else:
                path.write_text(content)
        for deb in (rootfs / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        run("podman import", ["podman", "import", "--change", "CMD=/sbin/init", "-", ref], stdin=tar.stdout)
        if tar.wait() != 0:
            raise StepFailed(f"tar of the rootfs {rootfs} failed (exit {tar.returncode})")
    log(f"image {ref} imported")
    return ref


def prune_old_images(current: str) -> list[str]:
    """Remove the test-host images of earlier recipes (about 600 MB each): every other tag of
    IMAGE_NAME. An image a container still uses is kept (podman refuses; said in one line)."""
    listed = subprocess.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", IMAGE_NAME],
                            capture_output=True, text=True)
    removed = []
    for ref in sorted(set(listed.stdout.split()) - {current}):
        if not ref.startswith(IMAGE_NAME + ":"):
            continue
        proc = subprocess.run(["podman", "rmi", ref], capture_output=True, text=True)
        if proc.returncode == 0:
            removed.append(ref)
        else:
            log(f"kept {ref}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'podman rmi failed'}")
    if removed:
        log("removed the images of earlier recipes: " + " ".join(removed))
    return removed


CHECK_NET = "sglang-hostcheck"
CHECK_A, CHECK_B = "sglang-hostcheck-a", "sglang-hostcheck-b"


def _remove_check_leftovers() -> None:
    subprocess.run(["podman", "rm", "-f", "-t", "0", "--ignore", CHECK_A, CHECK_B], capture_output=True)
    subprocess.run(["podman", "network", "rm", "-f", CHECK_NET], capture_output=True)


def prove_networking(image: str) -> float:
    """Start a container on a podman network and resolve it by name from a second one.

    This is what every test host needs (a container that starts) and what the multi-host
    scenarios need (names resolved by aardvark-dns). Both containers and the network are
    removed whatever happens. Returns the seconds it took.
    """
    started = time.monotonic()
    _remove_check_leftovers()
    try:
        run("podman network create (self-check)", ["podman", "network", "create", CHECK_NET])
        run("podman run (self-check: first container)",
            ["podman", "run", "-d", "--name", CHECK_A, "--network", CHECK_NET, image, "sleep", "120"])
        proc = run("podman run (self-check: name resolution on a podman network)",
                   ["podman", "run", "--rm", "--name", CHECK_B, "--network", CHECK_NET, image,
                    "getent", "hosts", CHECK_A])
        if CHECK_A not in proc.stdout:
            raise StepFailed(f"self-check: {CHECK_B} did not resolve {CHECK_A} ({proc.stdout.strip()!r})")
    finally:
        _remove_check_leftovers()
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print-image", action="store_true",
                    help="print the image reference for the current recipe and exit")
    args = ap.parse_args(argv)
    if args.print_image:
        print(image_ref())
        return 0
    if os.geteuid() != 0:
        log("must run as root (installs packages and writes /etc/containers)")
        return 2
    ensure_packages()
    ensure_containers_conf()
    ref = build_image()
    prune_old_images(ref)
    took = prove_networking(ref)
    log(f"ready: a container started on a podman network and a second one resolved it by name ({took:.1f} s)")
    print(ref)
    return 0


if __name__ == "__main__":
    sys.exit(guarded("hostsetup", main))
