"""sglang_build on a bare real (container) host, through the real playbook.

Sources are real: git repositories made from SGLang's and FlashInfer's PyPI sdists,
served on the host's loopback (tests/harness/sources.py). TEST ONLY: every
component is installed with --no-deps and torch is a CPU wheel (see
inventory/demo/group_vars/gpu_hosts/sglang_build.yml).

Here: check mode on a bare host. The build itself, its rerun and check mode, a version
bump, a build killed midway and recovered (with pruning) and bad inputs run on molecule
sglang_build's converged host (tests/molecule/sglang_build/test_sglang_build.py), which
has nvcc: one first build for both.
"""

from __future__ import annotations

import re
import time

from repo import ROOT

PLAYBOOK = ROOT / "playbooks" / "build.yml"


def recap(out: str) -> dict:
    match = re.search(r"ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", out)
    assert match, out[-3000:]
    return {"ok": int(match[1]), "changed": int(match[2]), "failed": int(match[3])}


def timed(run_playbook, host, *args):
    started = time.monotonic()
    proc = run_playbook(host, PLAYBOOK, *args)
    return proc, round(time.monotonic() - started, 1)


def test_check_mode_on_a_bare_host_changes_nothing_and_says_what_it_would_build(buildhost, run_playbook):
    before = buildhost.sh("ls -A /opt; ls /etc/ansible 2>&1; getent passwd sglang || true").stdout
    proc, _ = timed(run_playbook, buildhost, "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert recap(proc.stdout)["changed"] > 0
    assert re.search(r"Would build release sglang-0\.5\.9-[0-9a-f]{12} \(flashinfer, sglang\)", proc.stdout)
    assert buildhost.sh("ls -A /opt; ls /etc/ansible 2>&1; getent passwd sglang || true").stdout == before
