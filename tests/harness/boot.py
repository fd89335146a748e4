"""What a test host would start at boot, and a real restart of one, for the verifiers.

``systemctl is-enabled`` answers "static" (exit 0) for a unit with no [Install] section: such a
unit passes an ``is_enabled`` check and still stays down after a reboot. What systemd starts at
boot is the link in ``<target>.wants/``, so that is what ``starts_at_boot`` checks.

``reboot()`` restarts a test host's container from outside (``podman restart``): its systemd
stops every unit and boots again as PID 1, as a real reboot does; nothing Ansible did is rerun.
"""

from __future__ import annotations

import subprocess
import time

import podman_enter


def starts_at_boot(host, unit: str, target: str = "multi-user.target") -> bool:
    """True when ``unit`` is linked into ``target``'s wants, i.e. systemd starts it at boot."""
    name = unit if "." in unit else f"{unit}.service"
    link = host.file(f"/etc/systemd/system/{target}.wants/{name}")
    return link.is_symlink and host.file(link.linked_to).is_file


def reboot(container: str, timeout: float = 120) -> float:
    """Restart ``container`` (a systemd test host) and wait until its systemd finished booting.

    Returns the monotonic time at which the restart began, so callers can measure recovery.
    """
    began = time.monotonic()
    subprocess.run(["podman", "restart", "-t", "30", container], check=True, capture_output=True, text=True)
    deadline = began + timeout
    state = ""
    while time.monotonic() < deadline:
        state = podman_enter.sh(container, "systemctl is-system-running", check=False).stdout.strip()
        if state in ("running", "degraded"):
            return began
        time.sleep(0.5)
    raise AssertionError(f"{container}: systemd not up {timeout} s after the restart (state {state!r})")
