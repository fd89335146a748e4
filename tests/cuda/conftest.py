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
from testhost import TestHost  # noqa: E402


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
        inv_dir = tmp_path / "inventory"
        inv_dir.mkdir(exist_ok=True)
        host.inventory(inv_dir / "hosts.ini")
        (inv_dir / "group_vars").unlink(missing_ok=True)
        (inv_dir / "group_vars").symlink_to(ROOT / "inventory" / "demo" / "group_vars")
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), NVIDIA_MIRROR_DIR=str(harness["mirror"]),
                   ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
        return subprocess.run(["ansible-playbook", "-i", str(inv_dir), str(playbook), *args],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)

    return run
