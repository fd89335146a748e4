"""Fixtures for the EAGLE-3 patch tests: real SGLang releases from PyPI, cached, and trees to patch.

The tests read SGLang's real code, never a copy kept in this repository: each release is downloaded
once with pip (sdist where PyPI has one, else the wheel, pinned to one platform tag since only
the Python sources are read) into ``~/.cache/sglang-ansible/sdists`` (``SGLANG_ANSIBLE_CACHE``
moves it), and only its ``sglang/`` package directory is unpacked, under ``patch-trees/``.
A test that changes files gets a tree in tmp_path made of directories and symlinks to the cached
files, with the files it changes copied for real: a full copy of 0.5.23 would cost seconds per test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType

import jinja2
import pytest
import yaml

from repo import load

support = load("tests/roles/sglang_eagle3_patch/patch_support.py", "sglang_eagle3_patch_support")
INTERFACE_CHECK, KIMI, LAUNCH_CHECK, MODULE, NEWEST = (support.INTERFACE_CHECK, support.KIMI, support.LAUNCH_CHECK,
                                                       support.MODULE, support.NEWEST)
ROLE, SDISTS, TEMPLATE, TREES, WHEEL_TAGS = support.ROLE, support.SDISTS, support.TEMPLATE, support.TREES, support.WHEEL_TAGS


def _pip_download(version: str, binary: bool) -> Path:
    SDISTS.mkdir(parents=True, exist_ok=True)
    pattern = f"sglang-{version}-*.whl" if binary else f"sglang-{version}.tar.gz"
    found = sorted(SDISTS.glob(pattern))
    if found:
        return found[0]
    kind = ["--only-binary", ":all:", *WHEEL_TAGS] if binary else ["--no-binary", ":all:"]
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *kind, f"sglang=={version}", "-d", str(SDISTS)]
    result = subprocess.run(command, capture_output=True, text=True)
    found = sorted(SDISTS.glob(pattern))
    if result.returncode != 0 or not found:
        pytest.fail(f"could not download sglang=={version} from PyPI: {result.stderr.strip()[-800:]}")
    return found[0]


def _unpack(version: str) -> Path:
    """The cached ``sglang`` package directory of a release (unpacked once)."""
    tree = TREES / version / "sglang"
    if (TREES / version / ".complete").exists():
        return tree
    archive = _pip_download(version, binary=version == NEWEST)
    staging = TREES / f".{version}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            # Compiled extensions are not read and make up most of the wheel.
            members = [n for n in wheel.namelist() if n.startswith("sglang/") and not n.endswith(".so")]
            wheel.extractall(staging, members)
    else:
        prefix = f"sglang-{version}/sglang/"
        with tarfile.open(archive) as sdist:
            members = []
            for member in sdist.getmembers():
                if member.name.startswith(prefix) and (member.isfile() or member.isdir()):
                    member.name = member.name[len(f"sglang-{version}/") :]
                    members.append(member)
            sdist.extractall(staging, members, filter="data")
    shutil.rmtree(TREES / version, ignore_errors=True)
    staging.rename(TREES / version)
    (TREES / version / ".complete").touch()
    return tree


_TIMINGS: list[str] = []


@pytest.fixture(scope="session")
def timings() -> list[str]:
    """Lines that the terminal summary prints after the run (measured check times)."""
    return _TIMINGS


def pytest_terminal_summary(terminalreporter) -> None:
    if _TIMINGS:
        terminalreporter.write_sep("-", "sglang interface check timings")
        for line in _TIMINGS:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def release() -> Callable[[str], Path]:
    """``release("0.5.9")`` -> the cached, read-only sglang package directory of that release."""
    return _unpack


def _farm(source: Path, dest: Path, real: Iterable[str]) -> Path:
    for root, _dirs, files in os.walk(source):
        rel = Path(root).relative_to(source)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            os.symlink(Path(root) / name, dest / rel / name)
    for member in real:
        target = dest / member
        target.unlink()
        shutil.copy2(source / member, target)
        target.chmod(0o644)
    return dest


@pytest.fixture
def tree_copy(release, tmp_path) -> Callable[..., Path]:
    """``tree_copy("0.5.9", real=[files])`` -> a writable tree in tmp_path (symlinks + real copies)."""

    def make(version: str, real: Iterable[str] = (KIMI,)) -> Path:
        return _farm(release(version), tmp_path / f"sglang-{version}" / "sglang", real)

    return make


@pytest.fixture(scope="session")
def farm(release) -> Callable[..., Path]:
    """``farm("0.5.9", dest)`` -> a writable tree under dest, as tree_copy makes one, for a fixture wider than a test."""

    def make(version: str, dest: Path, real: Iterable[str] = (KIMI,)) -> Path:
        return _farm(release(version), dest / f"sglang-{version}" / "sglang", real)

    return make


@pytest.fixture(scope="session")
def interface_check() -> ModuleType:
    """The package, imported as on a host (its modules import each other: ``from .tree import Tree``)."""
    return load(INTERFACE_CHECK)


@pytest.fixture(scope="session")
def launch_check() -> ModuleType:
    return load(LAUNCH_CHECK, "sglang_launch_check")


@pytest.fixture(scope="session")
def patch_module() -> ModuleType:
    return load(MODULE, "sglang_eagle3_patch_module")


@pytest.fixture(scope="session")
def role_defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


@pytest.fixture(scope="session")
def rendered_block(role_defaults) -> str:
    """The template rendered with the role's defaults, as Ansible's template lookup would."""
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    values = {k: v for k, v in role_defaults.items() if "{{" not in str(v)}
    return env.from_string(TEMPLATE.read_text()).render(**values)


@pytest.fixture
def run_module(tmp_path) -> Callable[..., tuple[int, dict]]:
    """Run the Ansible module as Ansible would (an args file), return (rc, result)."""

    def run(check_mode: bool = False, diff: bool = False, **params) -> tuple[int, dict]:
        args = dict(params, _ansible_check_mode=check_mode, _ansible_diff=diff)
        args_file = tmp_path / "module-args.json"
        args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        done = subprocess.run([sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True)
        return done.returncode, json.loads(done.stdout)

    return run
