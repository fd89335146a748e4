"""Prepare this machine to run real systemd test hosts in podman containers.

Idempotent: every step checks first and changes only what is missing or different,
and says so. Steps:

1. Debian packages: podman, runc, netavark and aardvark-dns (name resolution on podman
   networks), debootstrap, apt-utils (apt-ftparchive), gnupg.
2. /etc/containers/containers.conf: lowered default ulimits and the runc runtime
   (without them every container fails to start on this machine kind).
3. The test-host image, built with debootstrap and imported with ``podman import``;
   its tag carries a hash of the recipe, so it is rebuilt only when the recipe changes.

Run as root: ``python3 tests/harness/hostsetup.py [--image-only|--print-image]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# netavark + aardvark-dns: containers on one podman network find each other by name (multi-host
# scenarios); podman only recommends them.
APT_PACKAGES = ["podman", "runc", "netavark", "aardvark-dns", "debootstrap", "apt-utils", "gnupg", "uidmap"]
CONTAINERS_CONF = Path("/etc/containers/containers.conf")
CONTAINERS_SETTINGS = {
    "containers": {"default_ulimits": '["nofile=4096:4096", "nproc=4096:4096"]'},
    "engine": {"runtime": '"runc"'},
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
}
CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible"))


def log(msg: str) -> None:
    print(f"[hostsetup] {msg}", flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, **kw)


def ensure_packages() -> None:
    missing = [p for p in APT_PACKAGES if subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True
    ).stdout.strip() != "install ok installed"]
    if not missing:
        log("packages present: " + " ".join(APT_PACKAGES))
        return
    log("installing Debian packages: " + " ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)


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
        log(f"{CONTAINERS_CONF}: already has the ulimits and the runc runtime")
        return
    CONTAINERS_CONF.parent.mkdir(parents=True, exist_ok=True)
    tmp = CONTAINERS_CONF.with_suffix(".conf.tmp")
    tmp.write_text(wanted)
    os.replace(tmp, CONTAINERS_CONF)
    log(f"{CONTAINERS_CONF}: wrote default_ulimits and runtime=runc (host configuration changed)")


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
        run(["debootstrap", "--variant=minbase", "--include=" + ",".join(IMAGE_PACKAGES),
             SUITE, str(rootfs), MIRROR], stdout=subprocess.DEVNULL)
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
        run(["podman", "import", "--change", "CMD=/sbin/init", "-", ref],
            stdin=tar.stdout, stdout=subprocess.DEVNULL)
        if tar.wait() != 0:
            raise SystemExit("tar of the rootfs failed")
    log(f"image {ref} imported")
    return ref


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
    print(build_image())
    return 0


if __name__ == "__main__":
    sys.exit(main())
