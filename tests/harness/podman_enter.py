"""TEST HARNESS ONLY: run a command inside a local podman test host by entering its namespaces.

Why: ``podman exec`` costs about 0.35 s of latency and a tenth of a CPU-second per call on this
machine kind (the podman CLI, conmon and runc each start), and the tests run thousands of them
(boot waits, readiness polls, every testinfra check). ``nsenter`` takes milliseconds.

What runs where is what ``podman exec`` gives the harness: root, inside the container's mount,
UTS, IPC, network and PID namespaces, rooted at its root directory, in its init's working
directory, with a clean environment (nothing of the caller's leaks in). The container is found
by name; its PID is asked from podman once and again after the container restarted (a test
host rebooted from outside): a cached PID is trusted only while that process's start time is
unchanged. The cache is kept in this process and in a file per container in a private directory
(per user, under the temporary directory; one owned by someone else or not private is not used),
because Ansible runs every task in a new worker process: without the file, each task asked podman
again (``podman inspect``, about 0.035 CPU-seconds, a tenth of a task's cost). Root only, like the
harness.

Used by the Ansible connection plugin (connection_plugins/sglang_testhost.py), by TestHost.sh()
and, for the molecule verifiers, by testinfra's podman backend (tests/molecule/conftest.py).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess

ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
       "TERM=dumb"]
_PIDS: dict[str, tuple[int, str]] = {}
DIRECTORY = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"podman-enter-{os.getuid()}")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # podman's container names


class NotRunning(RuntimeError):
    """The container does not exist or is not running."""


def _started(pid: int) -> str:
    """The process's start time (field 22 of /proc/PID/stat): tells a reused PID apart."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return fh.read().rsplit(b")", 1)[1].split()[19].decode()


def _cache_file(name: str) -> str | None:
    """The cache file of a container, in the private directory; None when there is none to use."""
    if not NAME.fullmatch(name):
        return None
    try:
        os.mkdir(DIRECTORY, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    info = os.lstat(DIRECTORY)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return os.path.join(DIRECTORY, name)


def _read_cache(name: str) -> tuple[int, str] | None:
    if name in _PIDS:
        return _PIDS[name]
    path = _cache_file(name)
    try:
        with open(path, encoding="ascii") as fh:  # type: ignore[arg-type]
            pid, started = fh.read().split()
        return int(pid), started
    except (TypeError, OSError, ValueError):
        return None


def _write_cache(name: str, entry: tuple[int, str]) -> None:
    _PIDS[name] = entry
    path = _cache_file(name)
    if path:
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="ascii") as fh:
                fh.write(f"{entry[0]} {entry[1]}\n")
            os.replace(tmp, path)  # whole or not at all, for the other processes
        except OSError:
            pass


def container_pid(name: str, refresh: bool = False) -> int:
    """The host PID of the container's init, from a cache that a restart invalidates."""
    cached = None if refresh else _read_cache(name)
    if cached:
        try:
            if _started(cached[0]) == cached[1]:
                _PIDS[name] = cached
                return cached[0]
        except OSError:
            pass
    proc = subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}", name], capture_output=True, text=True)
    pid = int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0
    if pid <= 0:
        forget(name)
        raise NotRunning(f"test host {name} is not running: {proc.stderr.strip() or 'no PID'}")
    _write_cache(name, (pid, _started(pid)))
    return pid


def forget(name: str) -> None:
    _PIDS.pop(name, None)
    path = _cache_file(name)
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


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
