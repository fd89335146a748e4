"""Fixtures for the sglang_build tests: a real container host with the local SGLang sources."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import sources
from repo import ROOT
from testhost import MIRROR_UNIT, TestHost, harness_or_skip

SOURCES_UNIT = (
    "[Unit]\nDescription=TEST ONLY: local SGLang sources (tests/harness/sources.py)\n[Service]\n"
    "ExecStart=/usr/bin/python3 -m http.server 8089 --bind 127.0.0.1 --directory /srv/sglang-sources\n"
    "[Install]\nWantedBy=multi-user.target\n"
)


class BuildHost(TestHost):
    """A TestHost that mounts the SGLang sources (not the model fixtures) and serves them on its loopback."""

    __test__ = False

    def __init__(self, name: str, image: str, mirror_dir: Path, sources_dir: Path):
        super().__init__(name, image, mirror_dir)
        self.sources_dir = sources_dir

    def mounts(self) -> list[str]:
        return ["-v", f"{self.mirror_dir}:/srv/nvidia-mirror:ro", "-v", f"{self.sources_dir}:/srv/sglang-sources:ro"]

    def after_boot(self) -> None:
        self.install_unit("test-nvidia-mirror", MIRROR_UNIT)
        self.install_unit("test-sglang-sources", SOURCES_UNIT, wait_url="http://127.0.0.1:8089/sources.json")

    def json(self, path: str) -> dict:
        return json.loads(self.sh(f"cat {path}").stdout)


@pytest.fixture(scope="session")
def harness():
    """The shared harness (tests/roles/conftest.py) and the SGLang sources."""
    return dict(harness_or_skip(), sources=Path(os.environ.get("SGLANG_SOURCES_DIR") or sources.ensure()))


@pytest.fixture(scope="module")
def buildhost(harness, request):
    host = BuildHost(f"pytest-{request.module.__name__.rsplit('.', 1)[-1].replace('_', '-')}",
                     harness["image"], harness["mirror"], harness["sources"]).start()
    yield host
    host.remove()


@pytest.fixture
def run_playbook(harness, tmp_path):
    """Run a playbook against a test host with the demo inventory's group_vars."""

    def run(host: TestHost, playbook: Path, *args: str):
        inv_dir = tmp_path / "inventory"
        inv_dir.mkdir(exist_ok=True)
        host.inventory(inv_dir / "hosts.ini")
        (inv_dir / "group_vars").unlink(missing_ok=True)
        (inv_dir / "group_vars").symlink_to(ROOT / "inventory" / "demo" / "group_vars")
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), NVIDIA_MIRROR_DIR=str(harness["mirror"]),
                   ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
        cmd = ["ansible-playbook", "-i", str(inv_dir), str(playbook), *args]
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)

    return run
