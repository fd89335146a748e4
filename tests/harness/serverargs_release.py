"""TEST ONLY: a local release tree that can import its own ``sglang.srt.server_args``.

A venv (this machine's Python 3.11, as on the test hosts) holding the test torch, the release's
import closure and the torchvision TEST DOUBLE from the harness wheelhouse (sources.py:
SERVER_ARGS_CLOSURE), and SGLang's real package: unpacked from its PyPI sdist into site-packages,
as molecule's hand-made releases hold it, or, for a release that publishes wheels only (0.5.11 on),
its Python 3.11 wheel installed. Built once per release and recipe under
~/.cache/sglang-ansible/serverargs-releases/ (SGLANG_ANSIBLE_CACHE), atomically; what the build
cost is kept in its build.json.

Usage: python3 tests/harness/serverargs_release.py 0.5.9   (prints the venv's directory)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_sources
import sources
from steps import guarded

ROOT = sources.CACHE / "serverargs-releases"


def requirements(version: str) -> list[str]:
    own = [] if version in sources.SGLANG_VERSIONS else [str(sglang_sources.wheel(version, "3.11"))]
    return [sources.TORCH_WHEEL, sources.TORCHVISION_DOUBLE, *sources.SERVER_ARGS_CLOSURE[version], *own]


def wheelhouse() -> Path:
    """The harness wheelhouse (the built sources' copy when the Makefile named it)."""
    named = os.environ.get("SGLANG_SOURCES_DIR")
    return Path(named) / "wheelhouse" if named else sources.ensure() / "wheelhouse"


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


# What the tests run in these venvs imports sglang.srt.server_args (the role's ServerArgs check, with -B: it writes
# no bytecode into a release). Installed with --no-compile and unpacked from the sdist, the venv had no bytecode,
# so every such process compiled the whole closure again: 16-18 CPU-s instead of about 6 here. A release pip
# installs has its bytecode; these get that of the closure once, by importing it (bytecode.json says so).
WARM = "import sglang; from sglang.srt import server_args; from sglang.version import __version__"


def warm(venv: Path) -> None:
    """Write the bytecode of the ServerArgs import closure into the venv, once (the outcome in bytecode.json)."""
    marker = venv / "bytecode.json"
    if marker.exists():
        return
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # the Makefile sets it
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", WARM], capture_output=True, text=True, check=False,
                          env=dict(env, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    tmp = marker.with_name(f"bytecode.json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"import": WARM, "rc": proc.returncode, "stderr": proc.stderr[-2000:],
                               "seconds": round(time.monotonic() - started, 1)}, indent=2) + "\n")
    tmp.replace(marker)


def ensure(version: str) -> Path:
    """The venv of release `version` (built if missing, its ServerArgs closure's bytecode written once); its
    bin/python imports sglang."""
    key = hashlib.sha256(json.dumps([requirements(version), sys.version_info[:2]]).encode()).hexdigest()[:12]
    dest = ROOT / f"sglang-{version}-{key}"
    if (dest / "build.json").exists():
        warm(dest)
        return dest
    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    ROOT.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(part)], check=True)
    venv_made = time.monotonic()
    # The venv's interpreter path is fixed at creation: install with this Python's pip into it.
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile",
                    "--disable-pip-version-check", "--find-links", str(wheelhouse()),
                    "--target", str(site_packages(part)), *requirements(version)], check=True)
    installed = time.monotonic()
    if version in sources.SGLANG_VERSIONS:  # the sdist's package, as the hand-made releases hold it
        with tarfile.open(sglang_sources.sdist(version)) as tar:
            prefix = f"sglang-{version}/sglang/"
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
            for member in members:
                member.name = member.name[len(f"sglang-{version}/"):]
            tar.extractall(site_packages(part), members=members, filter="data")
    (part / "build.json").write_text(json.dumps({
        "version": version, "requirements": requirements(version),
        "install_seconds": round(installed - venv_made, 1), "total_seconds": round(time.monotonic() - started, 1),
    }, indent=2) + "\n")
    part.rename(dest)  # nothing in a venv made --without-pip names its own directory
    warm(dest)  # after the rename: the bytecode records where its sources are
    return dest


def main(argv: list[str] | None = None) -> int:
    print(ensure((argv or sys.argv[1:])[0]))
    return 0


if __name__ == "__main__":
    sys.exit(guarded("serverargs_release", main))
