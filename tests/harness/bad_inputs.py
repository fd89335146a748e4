"""Bad-input cases of a role in one playbook run: one inventory host per case.

Each case becomes its own inventory host, an alias of the same test host (``ansible_host`` is the
container), with the case's variables as host variables. The validate-first plays
(playbooks/validate.yml) run every role's checks on every host to the end before they stop the run,
so one run shows each case's own failure: one Ansible start, one playbook parse and one snapshot pair instead of
one of each per case (a case costs about a second instead of three or four). What each case must
show is unchanged: its own failure naming the variable, no change on the host, and the host's
snapshot identical before and after.

A case that must get past validation to fail (a value only the host can refute, such as a key that
does not match its fingerprint) needs a run of its own: the other cases' failures stop the run first.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from repo import ROOT
from testhost import SNAPSHOT, TestHost

# The first line of a host's failure in the default callback's output, and where that block ends.
FAILED = re.compile(r"^(?:fatal|failed): \[(?P<host>[^\]]+)\]")
BLOCK_END = re.compile(r"^(?:TASK |PLAY |RUNNING HANDLER |ok: |changed: |skipping: |fatal: |failed: |included: |"
                       r"\[ERROR\]|\[WARNING\]|\.\.\.ignoring|NO MORE HOSTS|\S+\s*:\s*ok=)")
RECAP = re.compile(r"^(?P<host>\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@dataclass
class Batch:
    returncode: int
    out: str  # stdout and stderr of the run
    failures: dict[str, str]  # inventory host -> the text of its failures
    recap: dict[str, dict[str, int]]
    unchanged: bool  # the test host's snapshot is the same after the run
    plays: list[str]

    def failure(self, case: str) -> str:
        return self.failures.get(alias(case), "")


def alias(case: str) -> str:
    """The inventory name of a case (its id, in the characters a host name may have)."""
    return "case-" + re.sub(r"[^A-Za-z0-9_-]+", "-", case).strip("-")


def failures_by_host(out: str) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in out.splitlines():
        match = FAILED.match(line)
        if match:
            current = found.setdefault(match["host"], [])
            current.append(line)
        elif current is not None and BLOCK_END.match(line):
            current = None
        elif current is not None:
            current.append(line)
    return {host: "\n".join(lines) for host, lines in found.items()}


def inventory(path: Path, host: TestHost, cases: dict[str, dict]) -> Path:
    """An inventory directory: each case a GPU host (an alias of ``host``), the demo group_vars."""
    path.mkdir(parents=True, exist_ok=True)
    link = path / "group_vars"
    if not link.is_symlink():
        link.symlink_to(ROOT / "inventory" / "demo" / "group_vars")
    hosts = {alias(case): dict(variables, ansible_host=host.name, ansible_connection="sglang_testhost",
                               ansible_python_interpreter="/usr/bin/python3")
             for case, variables in cases.items()}
    if len(hosts) != len(cases):
        raise ValueError("two cases have the same inventory name")
    doc = {"gpu_hosts": {"hosts": hosts}}
    (path / "hosts.yml").write_text(json.dumps(doc, indent=1))  # JSON is YAML: the values keep their types
    return path


def run(host: TestHost, playbook: Path, cases: dict[str, dict], inventory_dir: Path, *args: str,
        snapshot: str = SNAPSHOT, timeout: int = 900, env: dict[str, str] | None = None) -> Batch:
    """Run ``playbook`` once over every case (``env``: more environment for ansible-playbook); the host's
    snapshot is taken before and after."""
    inventory(inventory_dir, host, cases)
    before = host.sh(snapshot).stdout
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_CONNECTION_PLUGINS=str(ROOT / "tests" / "harness" / "connection_plugins"),
               NVIDIA_MIRROR_DIR=str(host.mirror_dir), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1") | (env or {})
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory_dir), str(playbook), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    recap = {m["host"]: dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m.groups()[1:]), strict=True))
             for m in RECAP.finditer(proc.stdout)}
    return Batch(proc.returncode, out, failures_by_host(proc.stdout), recap, host.sh(snapshot).stdout == before,
                 re.findall(r"^PLAY \[(.+?)\]", proc.stdout, re.M))
