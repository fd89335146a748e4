"""Fixtures for role sglang_model: the real huggingface_hub client (the role's pinned version, in a
cached venv), the Hub TEST DOUBLE serving synthetic models, and a stager running the role's tool.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from model_kit import CACHE, FIGURES, HUB_VERSION, OTHER_TOKEN, PACKAGE, TOKEN, Stager

import hub_double
import synthetic_model
from repo import load


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("sglang_model figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def tool_module():
    """The staging tool's package imported (its functions: preflight, prune, the Mover)."""
    return load(PACKAGE)


@pytest.fixture(scope="session")
def hub_python() -> Path:
    """Python of a venv holding the pinned huggingface_hub (made once, cached)."""
    venv = CACHE / "sglang-model-venv" / HUB_VERSION
    python = venv / "bin" / "python"
    if not (venv / ".complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, capture_output=True)
        proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               f"huggingface_hub=={HUB_VERSION}"], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot install huggingface_hub=={HUB_VERSION} from PyPI: {proc.stderr.strip()[-300:]}")
        (venv / ".complete").write_text("")
    return python


@pytest.fixture(scope="session")
def hub_root(tmp_path_factory) -> Path:
    """Synthetic repositories: small ones for behaviour, a gated one, a branch with two commits."""
    root = tmp_path_factory.mktemp("hub")
    synthetic_model.make_repo(root, "test-org/tiny", shards=4, shard_mb=2, seed=1)
    # Shards larger than the client's 10 MB write chunk: a kill can land with part of one on disk.
    synthetic_model.make_repo(root, "test-org/small", shards=3, shard_mb=24, seed=5)
    synthetic_model.make_repo(root, "test-org/gated", shards=2, shard_mb=1, seed=2, gated="manual",
                              authorized_tokens=[TOKEN])
    synthetic_model.make_repo(root, "test-org/evolving", shards=2, shard_mb=1, seed=3)
    synthetic_model.make_repo(root, "test-org/evolving", shards=2, shard_mb=1, seed=4, branch="next")
    return root


def start_double(hub_root: Path) -> hub_double.HubDouble:
    """The Hub double over the synthetic repositories, with the test tokens (started; stop() it)."""
    return hub_double.HubDouble(hub_root, tokens=[TOKEN, OTHER_TOKEN], page_size=5).start()


@pytest.fixture
def double(hub_root):
    d = start_double(hub_root)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def module_double(hub_root):
    """The same double, shared by a module's tests (one playbook run for many cases)."""
    d = start_double(hub_root)
    yield d
    d.stop()


@pytest.fixture
def stager(hub_python, double, tmp_path) -> Stager:
    return Stager(hub_python, double, tmp_path / "models", tmp_path)
