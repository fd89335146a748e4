# TEST HARNESS ONLY: how Ansible reaches the project's podman test hosts (never a user's host).
"""Connection to a local podman test host by entering its namespaces (nsenter), with pipelining.

Why: the test hosts are systemd containers on this machine, and Ansible's podman connection
runs ``podman mount`` and two or three ``podman exec`` per task, about 0.3 s each here: more
than a second per task before the module does anything, most of ``make test``'s time. Entering
the container's namespaces directly takes milliseconds, and with pipelining the module goes
through stdin in the same call: one process per task, as over SSH with pipelining.

What runs where is the same as with ``podman exec``: commands run as root inside the
container's mount, UTS, IPC, network and PID namespaces, rooted at its root directory, with a
clean environment (nothing of the controller's leaks in); ``become`` (sudo) works inside as
usual. Files go in and out through ``cat`` inside the container, so paths resolve as the
container sees them. The container is found by name (``ansible_host``, else the inventory
name); its PID is asked from podman once and asked again after the container restarted (a
test host rebooted from outside).

Pipelining is on unless turned off (option ``pipelining``): the project's ansible.cfg turns it on for SSH,
so the tests run modules the way a user's hosts get them. Under run_tests.py each command's CPU time is
recorded for the table of where a job's time went (tests/harness/run_cost.py).

Enable with ``ANSIBLE_CONNECTION_PLUGINS=tests/harness/connection_plugins`` (the Makefile does)
and ``ansible_connection: sglang_testhost``. Root only, like the harness.
"""

from __future__ import annotations

DOCUMENTATION = """
    name: sglang_testhost
    short_description: TEST HARNESS ONLY - run tasks in a local podman container through nsenter
    description:
      - Enters a running podman container's namespaces with nsenter; pipelining supported.
    author: sglang-ansible tests
    options:
      remote_addr:
        description: Name or ID of the container.
        default: inventory_hostname
        vars:
          - name: inventory_hostname
          - name: ansible_host
      pipelining:
        description:
          - Send each module through stdin in the command that runs it (one process per task, as the
            project's ansible.cfg has it for SSH) instead of copying it to a temporary directory first.
          - On by default; C(ANSIBLE_PIPELINING=false) turns it off, to compare.
        type: boolean
        default: true
        env:
          - name: ANSIBLE_PIPELINING
        ini:
          - section: connection
            key: pipelining
        vars:
          - name: ansible_pipelining
"""

import os
import resource
import shlex
import subprocess
import sys
import time

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.connection import ConnectionBase

# The namespaces, the clean environment and the PID cache: tests/harness/podman_enter.py, shared with
# the pytest test hosts and the molecule verifiers.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import podman_enter as enter  # tests/harness
import run_cost  # tests/harness: each command's CPU time, for the harness's table (only under run_tests.py)


class Connection(ConnectionBase):
    transport = "sglang_testhost"
    has_pipelining = True
    default_user = "root"

    def _container_pid(self, refresh: bool = False) -> int:
        try:
            return enter.container_pid(self.get_option("remote_addr"), refresh=refresh)
        except enter.NotRunning as exc:
            raise AnsibleConnectionFailure(str(exc)) from None

    def _enter(self, argv: list[str]) -> list[str]:
        self._container_pid()
        return enter.argv(self.get_option("remote_addr"), argv)

    def _connect(self):
        if not self._connected:
            self._container_pid()
            self._connected = True
        return self

    def exec_command(self, cmd, in_data=None, sudoable=True):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        argv = self._enter(["/bin/sh", "-c", cmd])
        before, began = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        proc = subprocess.run(argv, input=in_data, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        run_cost.note_host_command(self.get_option("remote_addr"),
                                   (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
                                   time.monotonic() - began, piped=bool(in_data))
        return proc.returncode, proc.stdout, proc.stderr

    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        if not os.path.exists(to_bytes(in_path, errors="surrogate_or_strict")):
            raise AnsibleError(f"file or module does not exist: {in_path}")
        with open(in_path, "rb") as src:
            proc = subprocess.run(self._enter(["/bin/sh", "-c", f"cat > {shlex.quote(out_path)}"]),
                                  stdin=src, capture_output=True)
        if proc.returncode != 0:
            raise AnsibleError(f"failed to put {out_path}: {proc.stderr.decode(errors='replace')}")

    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        with open(out_path, "wb") as dest:
            proc = subprocess.run(self._enter(["/bin/cat", in_path]), stdout=dest, stderr=subprocess.PIPE)
        if proc.returncode != 0:
            raise AnsibleError(f"failed to fetch {in_path}: {proc.stderr.decode(errors='replace')}")

    def reset(self):
        enter.forget(self.get_option("remote_addr"))

    def close(self):
        self._connected = False
