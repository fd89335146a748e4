"""TEST HARNESS ONLY: where a `make test` job's CPU time goes, for issue 41's budget.

Why: the harness's table gives each job's CPU-seconds; to cut them one has to know whether they are
Ansible's (the ansible-playbook runs, and in them the commands run on the test hosts) or the job's own
(pytest's Python, testinfra's podman calls). Two records, both written only while run_tests.py sets
SGLANG_TEST_RUN_COST to a job's file (`<logs>/<job>.cost.jsonl`), one JSON object a line:

- ``{"kind": "playbook", ...}``: at the exit of every ansible-playbook process (this module is loaded at
  every start through tests/harness/startup/sitecustomize.py): its own CPU-seconds, its children's
  (Ansible's workers and whatever they ran and waited for: the modules on this machine for a local
  connection, nsenter and the modules on a test host), its wall seconds and the end of its command line;
- ``{"kind": "host", ...}``: for every command the test connection (connection_plugins/sglang_testhost.py)
  runs in a test host: the CPU-seconds of the processes it started (nsenter and what ran inside), its
  wall seconds and whether a module came through stdin (pipelining).

``summary(path)`` adds them up for the harness's table. Appends of one short line are atomic between
processes (O_APPEND), so the concurrent workers of one run can share the file. Nothing is recorded
without the variable: `make demo`, a lone pytest or molecule run record nothing. A run killed by a signal
(molecule sglang_bench kills a tuning on purpose) writes no record: its CPU counts in the job's rest.
"""

from __future__ import annotations

import os
import sys
import time

VARIABLE = "SGLANG_TEST_RUN_COST"


def _append(record: dict) -> None:
    path = os.environ.get(VARIABLE)
    if not path:
        return
    import json  # here, not at the top: every Python the harness starts imports this module

    line = json.dumps(record, separators=(",", ":")) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def note_host_command(host: str, cpu: float, wall: float, piped: bool) -> None:
    """One command run in a test host (the connection plugin's exec_command)."""
    _append({"kind": "host", "host": host, "cpu": round(cpu, 4), "wall": round(wall, 4), "piped": piped})


def watch_playbook() -> None:
    """At exit of an ansible-playbook process, record its CPU and wall time (called at interpreter start)."""
    if not os.environ.get(VARIABLE) or os.path.basename(sys.argv[0] if sys.argv else "") != "ansible-playbook":
        return
    import atexit

    began = time.monotonic()

    def record() -> None:
        t = os.times()
        _append({"kind": "playbook", "self": round(t.user + t.system, 3),
                 "children": round(t.children_user + t.children_system, 3),
                 "wall": round(time.monotonic() - began, 3), "argv": " ".join(sys.argv[1:])[-160:]})

    atexit.register(record)


def summary(path: str | os.PathLike) -> dict:
    """Totals of one job's file: ansible-playbook runs and their CPU-seconds, commands on the test hosts
    and theirs (a part of the runs' CPU), the modules that came through stdin."""
    import json

    out = {"runs": 0, "runs_cpu": 0.0, "runs_wall": 0.0, "host_commands": 0, "host_cpu": 0.0, "piped": 0}
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("kind") == "playbook":
            out["runs"] += 1
            out["runs_cpu"] += rec["self"] + rec["children"]
            out["runs_wall"] += rec["wall"]
        elif rec.get("kind") == "host":
            out["host_commands"] += 1
            out["host_cpu"] += rec["cpu"]
            out["piped"] += bool(rec.get("piped"))
    return out
