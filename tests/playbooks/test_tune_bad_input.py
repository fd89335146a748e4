"""playbooks/tune.yml refuses bad input in its validate-first play, before any host leaves a router or
restarts, naming the variable (local connection on this machine: nothing of the host is touched,
because nothing gets past validation).

Each host's local facts are what its server recorded (ansible_local.sglang_server: a tuning restarts a server
that serves, so a tuned host has them): given as the host's ansible_local with fact gathering off
(ANSIBLE_GATHERING=explicit), since every host of this inventory is this machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from repo import ROOT

RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
BASE = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "sglang_server_preflight_checks": False, "sglang_server_model_manifest_check": False,
        "sglang_server_model_path": "/nonexistent/model", "sglang_server_speculative_draft_model_path": "/nonexistent/draft"}


def served(host: str, group: str = "", node_rank: int = 0, nnodes: int = 1) -> dict:
    """The local fact of a host whose server ran (role sglang_server's endpoint, as it records it)."""
    url = f"http://{host}:30000"
    return {"sglang_server": {"schema": 2, "serving": "", "serving_id": "", "previous": "", "previous_id": "",
                              "writable_paths": [], "starts_dir": "/var/lib/sglang/starts", "endpoint": {
                                  "host": host, "serves_http": node_rank == 0, "group": group, "node_rank": node_rank,
                                  "nnodes": nnodes, "address": host, "port": 30000, "url": url, "bind": "127.0.0.1",
                                  "local_url": "http://127.0.0.1:30000", "api_key_sha256": ""}}}


def run_tune(tmp_path: Path, hostvars: dict, groups: dict | None = None) -> subprocess.CompletedProcess:
    inventory = {"all": {"children": {"gpu_hosts": {"hosts": {
        name: {**BASE, "ansible_local": served(name), **v} for name, v in hostvars.items()}}, **(groups or {})}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_GATHERING="explicit",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(ROOT / "playbooks" / "tune.yml")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


CASES = {
    "objective": ({"sglang_bench_tune_objective": "latency"}, "sglang_bench_tune_objective"),
    "empty-grid": ({"sglang_bench_tune_num_steps": []}, "sglang_bench_tune_num_steps must be a non-empty list"),
    "topk1-draft": ({"sglang_bench_tune_start": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 3}},
                    "sglang_bench_tune_start: with eagle_topk 1 SGLang runs num_draft_tokens = num_steps + 1"),
    "budget": ({"sglang_bench_tune_budget_minutes": 20}, "sglang_bench_tune_budget_minutes (20) is too small for one candidate"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_tuning_input_fails_before_anything_changes(tmp_path, case) -> None:
    hostvars, words = CASES[case]
    proc = run_tune(tmp_path, {"gpu1": hostvars})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert words in out, out[-3000:]
    recap = {m[1]: int(m[5]) for m in RECAP.finditer(proc.stdout)}
    assert recap == {"gpu1": 1}, out[-3000:]
    # nothing of the tuning play ran: no drain, no restart, no result
    assert "Tune the EAGLE-3 settings of each GPU host" not in proc.stdout, out[-3000:]
    assert not (tmp_path / "bench-results").exists()


def test_a_multinode_member_other_than_the_head_is_refused(tmp_path) -> None:
    group = {"sglang_server_multinode_group": "pair", "sglang_server_tp_size": 16}
    proc = run_tune(tmp_path, {"node0": {**group, "ansible_local": served("node0", "pair", 0, 2)},
                               "node1": {**group, "ansible_local": served("node1", "pair", 1, 2)}},
                    groups={"pair": {"hosts": {"node0": {}, "node1": {}}}})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "node rank 1 of multi-node group pair (sglang_server_multinode_group)" in out, out[-3000:]
    assert "Tune the EAGLE-3 settings of each GPU host" not in proc.stdout, out[-3000:]


def test_a_host_whose_server_never_ran_is_refused_naming_the_server_role(tmp_path) -> None:
    proc = run_tune(tmp_path, {"gpu1": {"ansible_local": {}}})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "sglang_bench_mode tune on gpu1: its server has recorded no serving endpoint" in out, out[-3000:]
    assert "run the server role on it first (playbooks/server.yml)" in out, out[-3000:]
    assert "Tune the EAGLE-3 settings of each GPU host" not in proc.stdout, out[-3000:]
