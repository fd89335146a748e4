"""Fixtures for the nvidia_cuda tests that need a real test host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "harness"))

from testhost import TestHost, run_playbook as run_on_host, harness_or_skip  # noqa: E402


@pytest.fixture(scope="session")
def harness():
    return harness_or_skip()


@pytest.fixture(scope="module")
def testhost(harness, request):
    host = TestHost(f"pytest-{request.module.__name__.rsplit('.', 1)[-1].replace('_', '-')}",
                    harness["image"], harness["mirror"]).start()
    yield host
    host.remove()


@pytest.fixture
def run_playbook(harness, tmp_path):
    """Run a playbook against a test host with the demo inventory's group_vars."""

    def run(host: TestHost, playbook: Path, *args: str) -> subprocess.CompletedProcess:
        return run_on_host(host, playbook, tmp_path / "inventory", harness["mirror"], *args)

    return run
