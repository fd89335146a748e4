"""Real SGLang sources for tests: the PyPI sdist of a release, downloaded once and cached.

``python3 tests/harness/sglang_sources.py 0.5.9 --file srt/models/kimi_k25.py`` prints
the path of that file of the sglang package (extracted under the cache), downloading
``sglang==0.5.9``'s sdist first if it is not cached yet.
"""

from __future__ import annotations

import argparse
import os
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from steps import StepFailed, guarded, run

CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible"))


def sdist(version: str) -> Path:
    """Path of the cached sdist of sglang==version (downloaded from PyPI if missing)."""
    dest = CACHE / "sdists"
    path = dest / f"sglang-{version}.tar.gz"
    if not path.exists():
        dest.mkdir(parents=True, exist_ok=True)
        run(f"pip download sglang=={version}", [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                                                "--no-binary", ":all:", f"sglang=={version}", "-d", str(dest)])
    return path


def wheel(version: str, python: str = "3.11") -> Path:
    """Path of the cached wheel of sglang==version for CPython `python` on manylinux x86_64 (from PyPI if missing).

    SGLang 0.5.11 and later publish no sdist, only wheels per Python (compiled gRPC and server cores).
    """
    dest = CACHE / "sglang-wheels" / python
    found = sorted(dest.glob(f"sglang-{version}-*.whl"))
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        run(f"pip download sglang=={version} (Python {python})",
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
             "--python-version", python, "--platform", "manylinux_2_34_x86_64", "--platform", "manylinux_2_17_x86_64",
             "--platform", "manylinux2014_x86_64", f"sglang=={version}", "-d", str(dest)])
        found = sorted(dest.glob(f"sglang-{version}-*.whl"))
    return found[0]


def package_file(version: str, member: str) -> Path:
    """Extract one file of the sglang package (path relative to the package dir)."""
    out = CACHE / "sglang-files" / version / member
    if not out.exists():
        with tarfile.open(sdist(version)) as tar:
            name = next((m for m in tar.getnames() if m.endswith(f"/sglang/{member}")), None)
            if name is None:
                raise StepFailed(f"sglang {version} has no {member}")
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(out.suffix + ".part")
            tmp.write_bytes(tar.extractfile(name).read())
            os.replace(tmp, out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("version")
    ap.add_argument("--file", help="a file of the sglang package, e.g. srt/models/kimi_k25.py")
    args = ap.parse_args(argv)
    print(package_file(args.version, args.file) if args.file else sdist(args.version))
    return 0


if __name__ == "__main__":
    sys.exit(guarded("sglang_sources", main))
