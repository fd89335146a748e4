"""TEST HARNESS for the molecule verifiers (testinfra): reach the podman test hosts through nsenter.

testinfra's podman backend runs every check as ``podman exec`` (about 0.35 s and a tenth of a
CPU-second each here); the verifiers run thousands of checks and polls. The backend's ``run``
is replaced for this pytest process only: the same command, as root, inside the same container,
entered with nsenter (tests/harness/podman_enter.py, as the Ansible connection plugin does).
A host given with a user (``podman://user@name``) keeps ``podman exec -u``.
"""

from __future__ import annotations

import shlex

from testinfra.backend import podman

import podman_enter

_podman_exec = podman.PodmanBackend.run


def _run(self, command, *args, **kwargs):
    if self.user is not None:
        return _podman_exec(self, command, *args, **kwargs)
    cmd = self.get_command(command, *args)
    try:
        argv = podman_enter.argv(self.name, ["/bin/sh", "-c", cmd])
    except podman_enter.NotRunning:
        return _podman_exec(self, command, *args, **kwargs)  # podman's own error and exit status
    out = self.run_local(shlex.join(argv))  # no arguments: run_local does no %-formatting
    out.command = self.encode(cmd)
    return out


podman.PodmanBackend.run = _run
