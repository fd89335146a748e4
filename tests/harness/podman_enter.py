"""TEST HARNESS ONLY: run a command inside a local podman test host by entering its namespaces.

Why: ``podman exec`` costs about 0.35 s of latency and a tenth of a CPU-second per call on this
machine kind (the podman CLI, conmon and runc each start), and the tests run thousands of them
(boot waits, readiness polls, every testinfra check). ``nsenter`` takes milliseconds.

What runs where is what ``podman exec`` gives the harness: root, inside the container's mount,
UTS, IPC, network and PID namespaces, rooted at its root directory, in its init's working
directory, with a clean environment (nothing of the caller's leaks in). The container is found
by name; its PID is asked from podman once and again after the container restarted (a test
host rebooted from outside): a cached PID is trusted only while that process's start time is
unchanged. Root only, like the harness.

Used by the Ansible connection plugin (connection_plugins/sglang_testhost.py), by TestHost.sh()
and, for the molecule verifiers, by testinfra's podman backend (tests/molecule/conftest.py).
"""

from __future__ import annotations

import subprocess

ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
       "TERM=dumb"]
_PIDS: dict[str, tuple[int, str]] = {}


class NotRunning(RuntimeError):
    """The container does not exist or is not running."""


def _started(pid: int) -> str:
    """The process's start time (field 22 of /proc/PID/stat): tells a reused PID apart."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return fh.read().rsplit(b")", 1)[1].split()[19].decode()


def container_pid(name: str, refresh: bool = False) -> int:
    """The host PID of the container's init, from a cache that a restart invalidates."""
    cached = _PIDS.get(name)
    if cached and not refresh:
        try:
            if _started(cached[0]) == cached[1]:
                return cached[0]
        except OSError:
            pass
    proc = subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}", name], capture_output=True, text=True)
    pid = int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0
    if pid <= 0:
        _PIDS.pop(name, None)
        raise NotRunning(f"test host {name} is not running: {proc.stderr.strip() or 'no PID'}")
    _PIDS[name] = (pid, _started(pid))
    return pid


def forget(name: str) -> None:
    _PIDS.pop(name, None)


def argv(name: str, command: list[str]) -> list[str]:
    """The argv that runs ``command`` inside the container ``name``."""
    return ["nsenter", "--target", str(container_pid(name)), "--mount", "--uts", "--ipc", "--net", "--pid",
            "--root", "--wd", "--", "/usr/bin/env", "-i", *ENV, *command]


def sh(name: str, script: str, check: bool = True, shell: str = "bash") -> subprocess.CompletedProcess:
    """Run a shell script inside the container (text output, both streams captured).

    A container that is not running gives exit status 125, as ``podman exec`` does.
    """
    try:
        command = argv(name, [shell, "-c", script])
    except NotRunning as exc:
        if check:
            raise subprocess.CalledProcessError(125, [shell, "-c", script], "", str(exc)) from None
        return subprocess.CompletedProcess([shell, "-c", script], 125, "", str(exc))
    return subprocess.run(command, check=check, capture_output=True, text=True)
