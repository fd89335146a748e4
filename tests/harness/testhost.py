"""A real systemd test host in a podman container, for pytest.

The container boots the project's test-host image (tests/harness/hostsetup.py) with
the local NVIDIA test mirror mounted read-only and served on its loopback, as the
molecule scenarios and `make demo` do; with MODEL_FIXTURES_DIR set (`make fixtures`), the
synthetic models too, with the Hugging Face Hub TEST DOUBLE serving them on 127.0.0.1:8090.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import podman_enter

MIRROR_UNIT = (
    "[Unit]\nDescription=TEST ONLY: local NVIDIA CUDA repository mirror\n[Service]\n"
    "ExecStart=/usr/bin/python3 -m http.server 8088 --bind 127.0.0.1 --directory /srv/nvidia-mirror\n"
    "[Install]\nWantedBy=multi-user.target\n"
)
HUB_UNIT = (
    "[Unit]\nDescription=TEST ONLY: Hugging Face Hub TEST DOUBLE (tests/harness/hub_double.py)\n[Service]\n"
    "ExecStart=/usr/bin/python3 /srv/hub-fixtures/hub_double.py --root /srv/hub-fixtures/hub --port 8090\n"
    "[Install]\nWantedBy=multi-user.target\n"
)


class TestHost:
    """Start with ``start()``, remove with ``remove()``; ``sh()`` runs a command inside."""

    __test__ = False  # not a pytest test class

    def __init__(self, name: str, image: str, mirror_dir: Path):
        self.name, self.image, self.mirror_dir = name, image, mirror_dir

    def mounts(self) -> list[str]:
        """podman run's volume arguments: the test mirror, and the model fixtures where they are set."""
        mounts = ["-v", f"{self.mirror_dir}:/srv/nvidia-mirror:ro"]
        if os.environ.get("MODEL_FIXTURES_DIR"):
            mounts += ["-v", f"{os.environ['MODEL_FIXTURES_DIR']}:/srv/hub-fixtures:ro"]
        return mounts

    def after_boot(self) -> None:
        """The TEST ONLY services of the host: the mirror, and the Hub double where its fixtures are mounted."""
        self.install_unit("test-nvidia-mirror", MIRROR_UNIT)
        if os.environ.get("MODEL_FIXTURES_DIR"):
            self.install_unit("test-hub-double", HUB_UNIT, wait_url="http://127.0.0.1:8090/_double/stats")

    def install_unit(self, name: str, unit: str, wait_url: str | None = None) -> None:
        """Install a unit, enable and start it; with wait_url, wait (10 s at most) until that URL answers."""
        wait = (f" && for i in $(seq 50); do curl -sf {wait_url} >/dev/null && exit 0; sleep 0.2; done; exit 1"
                if wait_url else "")
        self.sh(f"cat > /etc/systemd/system/{name}.service <<'EOF'\n{unit}EOF\n"
                f"systemctl daemon-reload && systemctl enable --now {name}{wait}")

    def start(self, boot_timeout: float = 90) -> TestHost:
        subprocess.run(["podman", "rm", "-f", "--ignore", self.name], check=True, capture_output=True)
        subprocess.run(["podman", "run", "-d", "--name", self.name, "--hostname", self.name,
                        # root's CAP_DAC_READ_SEARCH, as on a real host (molecule/resources/create.yml says why)
                        "--systemd=always", "--cap-add=DAC_READ_SEARCH", *self.mounts(), self.image, "/sbin/init"],
                       check=True, capture_output=True)
        deadline = time.monotonic() + boot_timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.sh("systemctl is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{self.name}: systemd not running after {boot_timeout} s ({state})")
        self.after_boot()
        return self

    def sh(self, script: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run a bash script inside, as root (nsenter: tests/harness/podman_enter.py)."""
        return podman_enter.sh(self.name, script, check=check)

    def remove(self) -> None:
        subprocess.run(["podman", "rm", "-f", "--ignore", self.name], check=False, capture_output=True)

    def inventory(self, path: Path, group: str = "gpu_hosts") -> Path:
        path.write_text(
            f"[{group}]\n{self.name} ansible_connection=sglang_testhost "
            "ansible_python_interpreter=/usr/bin/python3\n")
        return path


def run_playbook(host: TestHost, playbook: Path, inventory_dir: Path, mirror_dir: Path,
                 *args: str) -> subprocess.CompletedProcess:
    """Run a playbook against ``host`` with the demo inventory's group_vars (test mirror)."""
    import os

    root = Path(__file__).resolve().parents[2]
    inventory_dir.mkdir(parents=True, exist_ok=True)
    host.inventory(inventory_dir / "hosts.ini")
    group_vars = inventory_dir / "group_vars"
    if not group_vars.is_symlink():
        group_vars.symlink_to(root / "inventory" / "demo" / "group_vars")
    env = dict(os.environ, ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(root / "roles"),
               ANSIBLE_CONNECTION_PLUGINS=str(root / "tests" / "harness" / "connection_plugins"),
               NVIDIA_MIRROR_DIR=str(mirror_dir), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    return subprocess.run(["ansible-playbook", "-i", str(inventory_dir), str(playbook), *args],
                          cwd=root, env=env, capture_output=True, text=True, timeout=900)


# Fingerprint of what a role could touch: compared before and after a run that must fail early.
SNAPSHOT = (
    "find /etc /usr/local /usr/bin /opt /var/lib/dpkg /var/lib/nvidia-cuda /var/lib/sglang /var/cache/sglang "
    "-xdev \\( -type f -o -type l \\) -printf '%p %s %T@ %m\\n' 2>/dev/null | sort | sha256sum; "
    "apt-mark showhold | sha256sum; getent passwd | sha256sum"
)


def harness_or_skip() -> dict:
    """The test-host image and the test mirror, or a pytest skip saying what to run first.

    Shared by the conftests whose tests need a real container host.
    """
    import os
    import shutil

    import pytest

    import hostsetup
    import mirror

    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (run `make hostsetup`)")
    image = os.environ.get("TESTHOST_IMAGE") or hostsetup.image_ref()
    if not hostsetup.image_exists(image):
        pytest.skip(f"test-host image {image} missing (run `make hostsetup`)")
    return {"image": image, "mirror": Path(os.environ.get("NVIDIA_MIRROR_DIR") or mirror.ensure())}
