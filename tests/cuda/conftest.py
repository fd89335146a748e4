"""Fixtures for the nvidia_cuda tests that need a real test host."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "harness"))

import hostsetup  # noqa: E402
import mirror  # noqa: E402
from testhost import TestHost, run_playbook as run_on_host  # noqa: E402


@pytest.fixture(scope="session")
def harness():
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (run `make hostsetup`)")
    image = os.environ.get("TESTHOST_IMAGE") or hostsetup.image_ref()
    if not hostsetup.image_exists(image):
        pytest.skip(f"test-host image {image} missing (run `make hostsetup`)")
    return {"image": image, "mirror": Path(os.environ.get("NVIDIA_MIRROR_DIR") or mirror.ensure())}


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
