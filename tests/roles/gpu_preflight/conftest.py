"""Fixtures of the gpu_preflight tests: the role's Python loaded from its files, and a test host with
the driver packages (the shared harness, testhost and run_playbook fixtures: tests/roles/conftest.py).
"""

from __future__ import annotations

import pytest

from repo import load
from testhost import TestHost


@pytest.fixture(scope="session")
def facts():
    return load("roles/gpu_preflight/library/gpu_preflight_facts.py")


@pytest.fixture(scope="session")
def pcie_parse():
    return load("roles/gpu_preflight/module_utils/gpu_preflight_pcie_parse.py")


@pytest.fixture(scope="session")
def pcie(pcie_parse):
    """The findings module; it imports its parser by name, as loaded above (on a host: ansible.module_utils)."""
    return load("roles/gpu_preflight/module_utils/gpu_preflight_pcie_findings.py")


@pytest.fixture(scope="session")
def allreduce():
    return load("roles/gpu_preflight/files/gpu_preflight_allreduce.py")


@pytest.fixture(scope="session")
def report_module():
    return load("roles/gpu_preflight/library/gpu_preflight_report.py")


@pytest.fixture(scope="module")
def gpu_testhost(harness, request):
    """A test host with the mirror's driver packages, whose nvidia-smi is the TEST DOUBLE (8 RTX PRO 6000)."""
    host = TestHost(f"pytest-{request.module.__name__.rsplit('.', 1)[-1].replace('_', '-')}",
                    harness["image"], harness["mirror"]).start()
    host.sh("cd /srv/nvidia-mirror/debian12/x86_64 && "
            "dpkg -i nvidia-kernel-open-dkms_580.95.05-1_amd64.deb nvidia-driver-cuda_580.95.05-1_amd64.deb")
    yield host
    host.remove()
