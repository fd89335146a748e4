"""Paths and pinned releases shared by the EAGLE-3 patch tests (imported by conftest and tests)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "sglang_eagle3_patch"
MODULE = ROLE / "library" / "sglang_eagle3_patch.py"
TEMPLATE = REPO / "roles" / "sglang_eagle3_patch" / "templates" / "sglang_eagle3_delegation.py.j2"
INTERFACE_CHECK = REPO / "roles" / "sglang_eagle3_patch" / "files" / "sglang_interface_check.py"
LAUNCH_CHECK = REPO / "roles" / "sglang_eagle3_patch" / "files" / "sglang_launch_check.py"
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
