"""Fixtures of the gpu_preflight tests: the role's Python loaded from its files, and a real test host."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "gpu_preflight"
FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(ROOT / "tests" / "harness"))

from testhost import TestHost, run_playbook as run_on_host, harness_or_skip  # noqa: E402


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def facts():
    return load("gpu_preflight_facts", ROLE / "library" / "gpu_preflight_facts.py")


@pytest.fixture(scope="session")
def allreduce():
    return load("gpu_preflight_allreduce", ROLE / "files" / "gpu_preflight_allreduce.py")


@pytest.fixture(scope="session")
def report_module():
    return load("gpu_preflight_report", ROLE / "library" / "gpu_preflight_report.py")


@pytest.fixture(scope="session")
def harness():
    return harness_or_skip()


@pytest.fixture(scope="module")
def gpu_testhost(harness, request):
    """A test host with the mirror's driver packages, whose nvidia-smi is the TEST DOUBLE (8 RTX PRO 6000)."""
    host = TestHost(f"pytest-{request.module.__name__.rsplit('.', 1)[-1].replace('_', '-')}",
                    harness["image"], harness["mirror"]).start()
    host.sh("cd /srv/nvidia-mirror/debian12/x86_64 && "
            "dpkg -i nvidia-kernel-open-dkms_580.95.05-1_amd64.deb nvidia-driver-cuda_580.95.05-1_amd64.deb")
    yield host
    host.remove()


@pytest.fixture
def run_playbook(harness, tmp_path):
    """Run a playbook against a test host with the demo inventory's group_vars."""

    def run(host: TestHost, playbook: Path, *args: str) -> subprocess.CompletedProcess:
        return run_on_host(host, playbook, tmp_path / "inventory", harness["mirror"], *args)

    return run
