"""The launch check reaches the tuner's plan through the local facts (issue 32, issue 41): role
sglang_eagle3_patch records the launch check it ran and passed before the server's last start
(ansible_local.sglang_eagle3_patch.launch), and sglang_bench's tune_plan brings that checker from the host and
asks it about every candidate, when the record is of the release that serves (local connection on this
machine, no container: the record is an inventory variable, as the validate-first play would find it).

Kimi-K2.5 (MLA) with the default attention backend: on SM100 the release's backend has no tree
attention, so the plan leaves out every topk > 1 point and names the fact; on SM120 (triton) it keeps them.
The role writing the record for real is proven in molecule sglang_server (test_sglang_server.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from repo import ROOT

SERVER = {"tp_size": 8, "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/models/draft",
          "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
          # sglang_server's default: playbooks/tasks/tune_step.yml leaves it out for a topk > 1 candidate.
          "env": {"SGLANG_ENABLE_SPEC_V2": "1"}}

CHECKER = ROOT / "roles" / "sglang_eagle3_patch" / "files"
TUNE_START = {"sglang_bench_tune_start": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}}
PLAY = """\
---
- name: The tuner's plan from the recorded launch check, as tune_host.yml asks for it
  hosts: all
  gather_facts: false
  tasks:
    - name: Plan the search (role sglang_bench, tune_plan)
      ansible.builtin.include_role:
        name: sglang_bench
        tasks_from: tune_plan

    - name: Keep the plan for the test
      ansible.builtin.copy:
        content: "{{ sglang_bench_tune_plan | to_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
      delegate_to: localhost
"""


def recorded(arch: str, sglang_dir: str = "/opt/sglang/releases/r1/site/sglang", args: dict | None = None) -> dict:
    """What role sglang_eagle3_patch records after the launch check before a start (check.yml)."""
    return {"check": str(CHECKER / "sglang_launch_check.py"), "facts": str(CHECKER / "sglang_launch_facts.json"),
            "sglang_dir": sglang_dir, "sglang_version": "0.5.9", "arch": arch, "gpu_count": 8, "model": "kimi_k25",
            "args": SERVER if args is None else args}


def local_facts(launch: dict | None) -> dict:
    build = {"schema": 2, "root": "/opt/sglang", "current": None,
             "releases": {"r1": {"dir": "/opt/sglang/releases/r1", "sglang_dir": "/opt/sglang/releases/r1/site/sglang"}}}
    facts = {"sglang_build": build, "sglang_server": {"schema": 1, "serving": "/opt/sglang/releases/r1", "serving_id": "r1",
                                                      "previous": "", "previous_id": ""}}
    if launch is not None:
        facts["sglang_eagle3_patch"] = {"schema": 1, "launch": launch}
    return {"ansible_local": facts}


def run_play(tmp_path: Path, hosts: dict[str, dict]) -> tuple[dict[str, dict], str]:
    """ansible-playbook on this machine (local connection) with this repository's roles; each host's plan."""
    out = tmp_path / "out"
    out.mkdir()
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "out_dir": str(out),
              "__sglang_bench_results": str(tmp_path / "bench-results"), "__sglang_bench_env": {"session": "s1"},
              **TUNE_START}
    inventory = {"all": {"hosts": {name: {**common, **hvars} for name, hvars in hosts.items()}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    results = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(results) == sorted(hosts), proc.stdout[-4000:]
    return results, proc.stdout


def test_the_plan_leaves_out_topk_above_1_where_the_recorded_launch_check_refuses_it(tmp_path):
    hosts = {"sm100": local_facts(recorded("10.0")), "sm120": local_facts(recorded("12.0")),
             "nocheck": local_facts(None),
             "stale": local_facts(recorded("10.0", sglang_dir="/opt/sglang/releases/r0/site/sglang"))}
    results, out = run_play(tmp_path, hosts)
    sm100, sm120, nocheck, stale = (results[h] for h in ("sm100", "sm120", "nocheck", "stale"))
    # SM100, release 0.5.9: the default MLA backend has no tree attention, so only the chain is left.
    assert sm100["launch_rule"].startswith("checked against the launch facts for sglang 0.5.9 on compute capability 10.0")
    assert sm100["grid_points"] == 8  # steps 1-8 at topk 1
    refused = [line for line in sm100["rejected"] if "spec-topk-above-1-mla-backend" in line]
    assert refused and any(line.startswith("tune-s3-k2-n6: ") for line in refused), sm100["rejected"]
    # The checker the plan asked is the host's, brought to the controller beside the tuning's state.
    tune_dir = tmp_path / "bench-results" / "sm100" / "tune-s1" / "launch"
    assert (tune_dir / "sglang_launch_check.py").read_bytes() == (CHECKER / "sglang_launch_check.py").read_bytes()
    assert (tune_dir / "sglang_launch_facts.json").is_file()
    # SM120 (triton has tree attention), no record, and a record of another release: topk > 1 kept.
    for other in (sm120, nocheck, stale):
        assert other["grid_points"] > 8
        assert not any("spec-topk-above-1-mla-backend" in line for line in other["rejected"])
    assert sm120["grid_points"] == nocheck["grid_points"] == stale["grid_points"]
    assert sm120["launch_rule"].startswith("checked against the launch facts for sglang 0.5.9 on compute capability 12.0")
    assert nocheck["launch_rule"].startswith("not checked here") and stale["launch_rule"].startswith("not checked here")
    assert ("Not asked before the search: the launch check recorded on the host was of "
            "/opt/sglang/releases/r0/site/sglang, not of the release that serves") in out


def test_the_recorded_launch_check_is_the_one_the_server_ran():
    """tune_host.yml asks no role to describe the check (the record is read by tune_plan); the server asks the
    check about its own settings before every start, and the record holds the very values the check ran with."""
    tasks = yaml.safe_load((ROOT / "playbooks" / "tasks" / "tune_host.yml").read_text())
    block = next(t for t in tasks if "block" in t and t.get("when") == "not ansible_check_mode")["block"]
    roles = [(t["ansible.builtin.include_role"]["name"], t["ansible.builtin.include_role"]["tasks_from"], t.get("vars"))
             for t in block if "ansible.builtin.include_role" in t]
    assert roles[0] == ("sglang_bench", "tune_plan", None)
    checks = yaml.safe_load((ROOT / "roles" / "sglang_server" / "tasks" / "checks.yml").read_text())
    check = next(t for t in checks[-1]["block"] if "ansible.builtin.include_role" in t)
    assert check["vars"]["sglang_eagle3_patch_launch_args"] == "{{ __sglang_server_settings }}"

    def walk(tasks):
        for task in tasks:
            yield task
            yield from walk(task.get("block", []))

    patch = list(walk(yaml.safe_load((ROOT / "roles" / "sglang_eagle3_patch" / "tasks" / "check.yml").read_text())))
    command = next(t for t in patch if t.get("name") == "Check the launch settings against known facts")
    record = next(t for t in patch if t.get("name", "").startswith("Record the launch check this host passed"))
    argv, launch = command["ansible.builtin.command"]["argv"], record["vars"]["__launch"]
    given = dict(zip(argv[2::2], argv[3::2], strict=False))
    assert launch["sglang_version"] == given["--sglang-version"] and launch["arch"] == given["--arch"]
    assert launch["gpu_count"] == given["--gpu-count"].replace(" }}", " | int }}")
    assert launch["model"] == given["--model"]
    assert command["ansible.builtin.command"]["stdin"] == launch["args"].replace(" }}", " | to_json }}")
    assert launch["check"] == argv[1] and launch["check"].endswith("/sglang_launch_check.py")
    assert record["ansible.builtin.copy"]["mode"] == "0600"  # the settings carry the server's environment
