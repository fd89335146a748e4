"""Paths and pinned releases shared by the EAGLE-3 patch tests.

Loaded by conftest and tests with ``repo.load`` (no sys.path changes):
``support = load("tests/roles/sglang_eagle3_patch/patch_support.py", "sglang_eagle3_patch_support")``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from repo import ROOT

REPO = ROOT
ROLE = ROOT / "roles" / "sglang_eagle3_patch"
MODULE = ROLE / "library" / "sglang_eagle3_patch.py"
TEMPLATE = ROLE / "templates" / "sglang_eagle3_delegation.py.j2"
CHECKERS = ROLE / "files"  # as the host's tools directory: the package sglang_interface_check/ and the rest
INTERFACE_CHECK = CHECKERS / "sglang_interface_check"
LAUNCH_CHECK = CHECKERS / "sglang_launch_check.py"
KIMI = "srt/models/kimi_k25.py"

CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible"))
SDISTS = CACHE / "sdists"
TREES = CACHE / "patch-trees"

# The releases the tests read. 0.5.9 lacks the delegation, 0.5.10 added it upstream. NEWEST is the
# newest release on PyPI when these tests were written (2026-11-29), pinned on purpose: a floating
# "latest" would change what the tests assert without a change here. PyPI has no sdist after
# 0.5.10.post1, so NEWEST comes as a wheel (its Python sources are the same on every platform).
PATCHED_UPSTREAM = "0.5.10"
UNPATCHED = "0.5.9"
NEWEST = "0.5.23"
WHEEL_TAGS = ["--python-version", "3.11", "--platform", "manylinux_2_34_x86_64", "--implementation", "cp", "--abi", "cp311"]


def run_interface_check(*args: str) -> subprocess.CompletedProcess[str]:
    """The model-interface check as the role runs it on a host: ``python3 -B -m sglang_interface_check``
    from the directory holding the package."""
    return subprocess.run([sys.executable, "-B", "-m", "sglang_interface_check", *args], cwd=CHECKERS,
                          capture_output=True, text=True)
