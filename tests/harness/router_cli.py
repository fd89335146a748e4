"""The router's real command line: a router release's own argument parser, run on an argv.

Why: role sglang_router renders the router's flags into its systemd unit; a misspelt flag or a
value of the wrong type is found only when the router starts on a host. This module runs the argv
through the parser of the pinned release itself, taken from its PyPI wheel: the wheel's
``<package>.router_args.RouterArgs.add_cli_args`` on a plain ``argparse.ArgumentParser`` (what the
release's ``launch_router.parse_router_args`` builds), then ``RouterArgs.from_cli_args`` (what the
router is started with). The wheels carry their Rust core (an abi3 library that ``router_args``
imports for its parser lists), so nothing is installed: the wheel is unpacked and put first on
``sys.path`` of a child Python.

argparse accepts an unambiguous prefix of a flag (``--health-check-timeout`` for
``--health-check-timeout-secs``), so a parse that succeeds does not prove the flag is spelt right:
every ``--flag`` of the argv is also looked up among the parser's own option strings, and the ones
that are not there are reported.

Wheels are cached under ~/.cache/sglang-ansible/router-wheels (SGLANG_ANSIBLE_CACHE), unpacked
once under router-cli/; ``venv()`` installs a release with its dependencies under router-venvs/, for
tests that start the router itself.

Usage: python3 tests/harness/router_cli.py sglang-router 0.3.2 -- --port 30080 ...
    prints {"unknown_flags": [...], "args": {RouterArgs field: value}} (exit 2 with argparse's
    message when the argv does not parse)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sources

WHEELS = sources.CACHE / "router-wheels"
UNPACKED = sources.CACHE / "router-cli"
VENVS = sources.CACHE / "router-venvs"

# Run in the child, with the unpacked wheel first on sys.path: argv[1] is the package, the rest the argv.
CHILD = r"""
import argparse, dataclasses, importlib, json, sys
package, argv = sys.argv[1], sys.argv[2:]
RouterArgs = importlib.import_module(package + ".router_args").RouterArgs
parser = argparse.ArgumentParser(prog=package)
RouterArgs.add_cli_args(parser, use_router_prefix=False)
known = set(parser._option_string_actions)
unknown = sorted({a.split("=", 1)[0] for a in argv if a.startswith("--")} - known)
args = RouterArgs.from_cli_args(parser.parse_args(argv), use_router_prefix=False)
print(json.dumps({"unknown_flags": unknown, "args": dataclasses.asdict(args)}, default=repr))
"""


def package_of(dist: str) -> str:
    """The import package of a router distribution (sglang-router: sglang_router, smg: smg)."""
    return dist.replace("-", "_")


def wheel(dist: str, version: str) -> Path:
    """PyPI's wheel of dist==version for this machine (x86_64 abi3), downloaded once."""
    pattern = f"{package_of(dist)}-{version}-*.whl"
    found = sorted(WHEELS.glob(pattern))
    if not found:
        WHEELS.mkdir(parents=True, exist_ok=True)
        sources.pip("download", "-q", "--no-deps", "--only-binary", ":all:", "-d", str(WHEELS), f"{dist}=={version}")
        found = sorted(WHEELS.glob(pattern))
    if not found:
        raise FileNotFoundError(f"pip downloaded no {pattern} into {WHEELS}")
    return found[0]


def unpacked(dist: str, version: str) -> Path:
    """The wheel's files in a directory of their own (made atomically, once)."""
    whl = wheel(dist, version)
    dest = UNPACKED / whl.stem
    if dest.is_dir():
        return dest
    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    with zipfile.ZipFile(whl) as zf:
        zf.extractall(part)
    part.rename(dest)
    return dest


def venv(dist: str, version: str) -> Path:
    """A venv (this Python) holding dist==version with its dependencies, to run the router itself.

    Installed with this Python's pip into the venv's site-packages (a venv made --without-pip names
    its directory nowhere, so it is built as .part and renamed), from the harness wheelhouse when
    it has the wheels (tests/harness/sources.py), else from the index.
    """
    dest = VENVS / f"{dist}-{version}-py{sys.version_info.major}.{sys.version_info.minor}"
    if (dest / "complete").exists():
        return dest
    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    VENVS.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(part)], check=True)
    site = part / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    sources.pip("install", "-q", "--no-compile", "--disable-pip-version-check", "--find-links", str(sources.WHEELS),
                "--target", str(site), f"{dist}=={version}")
    (part / "complete").touch()
    part.rename(dest)
    return dest


def parse(dist: str, version: str, argv: list[str]) -> subprocess.CompletedProcess:
    """Run argv through dist==version's parser in a child Python; its stdout is the JSON above."""
    env = dict(os.environ, PYTHONPATH=str(unpacked(dist, version)), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", CHILD, package_of(dist), *argv],
                          capture_output=True, text=True, env=env, timeout=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dist", help="sglang-router or smg")
    ap.add_argument("version")
    ap.add_argument("argv", nargs=argparse.REMAINDER, help="the router's arguments, after --")
    args = ap.parse_args(argv)
    rest = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    proc = parse(args.dist, args.version, rest)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
