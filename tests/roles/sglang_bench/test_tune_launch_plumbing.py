"""The launch check reaches the tuner's plan through Ansible (issue 32): role sglang_eagle3_patch's
launch_facts publishes sglang_eagle3_patch_launch, which playbooks/tasks/tune_host.yml passes to
sglang_bench's tune_plan as sglang_bench_tune_launch, which vars/main.yml puts into the tuner's settings
as `launch` (local connection on this machine, no container; the sglang package directory is a folder
holding only SGLang's version file).

Kimi-K2.5 (MLA) with the default attention backend: on SM100 the release's backend has no tree
attention, so the plan leaves out every topk > 1 point and names the fact; on SM120 (triton) it keeps them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import sglang_sources
from repo import ROOT

SERVER = {"tp_size": 8, "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/models/draft",
          "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
          # sglang_server's default: playbooks/tasks/tune_step.yml leaves it out for a topk > 1 candidate.
          "env": {"SGLANG_ENABLE_SPEC_V2": "1"}}

# Both plays end as tune_host.yml does: tune_plan given what launch_facts published; the test keeps both.
PLAN_TASKS = """
    - name: Plan the search (role sglang_bench, tune_plan)
      ansible.builtin.include_role:
        name: sglang_bench
        tasks_from: tune_plan
      vars:
        sglang_bench_tune_launch: "{{ sglang_eagle3_patch_launch }}"

    - name: Keep the plan and the launch facts for the test
      ansible.builtin.copy:
        content: "{{ {'plan': sglang_bench_tune_plan, 'launch': sglang_eagle3_patch_launch} | to_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
      delegate_to: localhost
"""
TUNE_START = {"sglang_bench_tune_start": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}}

PLAY = """\
---
- name: The launch facts into the tuner's plan, as tune_host.yml passes them
  hosts: all
  gather_facts: false
  tasks:
    - name: Describe the launch check (role sglang_eagle3_patch, launch_facts)
      ansible.builtin.include_role:
        name: sglang_eagle3_patch
        tasks_from: launch_facts
      vars:
        sglang_eagle3_patch_source_dir: "{{ sglang_dir }}"
        sglang_eagle3_patch_check_model: kimi_k25
        sglang_eagle3_patch_launch_args: "{{ server_args }}"
        sglang_eagle3_patch_gpu_arch: "{{ arch }}"
        sglang_eagle3_patch_gpu_count: 8
"""


def run_play(tmp_path: Path, play: str, hosts: dict[str, dict], common: dict,
             extra_vars: dict | None = None) -> dict[str, dict]:
    """ansible-playbook on this machine (local connection) with this repository's roles; each host's kept
    plan and launch facts."""
    out = tmp_path / "out"
    out.mkdir()
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "out_dir": str(out),
              "__sglang_bench_results": str(tmp_path / "bench-results"), "__sglang_bench_env": {"session": "s1"},
              **TUNE_START, **common}
    inventory = {"all": {"hosts": {name: {**common, **hvars} for name, hvars in hosts.items()}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(play + PLAN_TASKS)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    extra = []
    if extra_vars:
        (tmp_path / "extra.json").write_text(json.dumps(extra_vars))
        extra = ["-e", f"@{tmp_path / 'extra.json'}"]
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml"), *extra], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    results = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(results) == sorted(hosts), proc.stdout[-4000:]
    return results


def test_the_plan_leaves_out_topk_above_1_where_the_launch_check_refuses_it(tmp_path):
    hosts = {"sm100": {"arch": "10.0", "server_args": SERVER},
             "sm120": {"arch": "12.0", "server_args": SERVER},
             "nocheck": {"arch": "10.0", "server_args": {}}}
    sglang = tmp_path / "release" / "sglang"
    sglang.mkdir(parents=True)
    # What a pip install of the release writes: sglang/version.py.
    (sglang / "version.py").write_text('__version__ = "0.5.9"\n')
    results = run_play(tmp_path, PLAY, hosts, {"sglang_dir": str(sglang)})

    sm100, sm120, nocheck = results["sm100"], results["sm120"], results["nocheck"]
    # What launch_facts published: the role's own checker, the release from the version file.
    launch = sm100["launch"]
    assert launch["check"] == str(ROOT / "roles" / "sglang_eagle3_patch" / "files" / "sglang_launch_check.py")
    assert (launch["sglang_version"], launch["arch"], launch["gpu_count"], launch["model"]) == ("0.5.9", "10.0", 8,
                                                                                                "kimi_k25")
    assert launch["args"]["tp_size"] == 8
    assert nocheck["launch"] == {}

    # SM100, release 0.5.9: the default MLA backend has no tree attention, so only the chain is left.
    plan = sm100["plan"]
    assert plan["launch_rule"].startswith("checked against the launch facts for sglang 0.5.9 on compute capability 10.0")
    assert plan["grid_points"] == 8  # steps 1-8 at topk 1
    refused = [line for line in plan["rejected"] if "spec-topk-above-1-mla-backend" in line]
    assert refused and any(line.startswith("tune-s3-k2-n6: ") for line in refused), plan["rejected"]
    # SM120 (triton has tree attention) and no launch check at all: the same grid, topk > 1 kept.
    for other in (sm120["plan"], nocheck["plan"]):
        assert other["grid_points"] > 8
        assert not any("spec-topk-above-1-mla-backend" in line for line in other["rejected"])
    assert sm120["plan"]["grid_points"] == nocheck["plan"]["grid_points"]
    assert sm120["plan"]["launch_rule"].startswith("checked against the launch facts for sglang 0.5.9 on compute "
                                                   "capability 12.0")
    assert nocheck["plan"]["launch_rule"].startswith("not checked here")


def test_the_tune_playbook_asks_the_server_for_the_launch_facts_before_planning():
    """playbooks/tasks/tune_host.yml: sglang_server's launch_facts, then tune_plan given what it published."""
    tasks = yaml.safe_load((ROOT / "playbooks" / "tasks" / "tune_host.yml").read_text())
    block = next(t for t in tasks if "block" in t and t.get("when") == "not ansible_check_mode")["block"]
    roles = [(t["ansible.builtin.include_role"]["name"], t["ansible.builtin.include_role"]["tasks_from"], t.get("vars", {}))
             for t in block if "ansible.builtin.include_role" in t]
    assert roles[0][:2] == ("sglang_server", "launch_facts")
    assert roles[1][:2] == ("sglang_bench", "tune_plan")
    assert roles[1][2] == {"sglang_bench_tune_launch": "{{ sglang_eagle3_patch_launch }}"}
    server = yaml.safe_load((ROOT / "roles" / "sglang_server" / "tasks" / "launch_facts.yml").read_text())
    include = next(t for t in server if "ansible.builtin.include_role" in t)
    assert include["ansible.builtin.include_role"] == {"name": "sglang_eagle3_patch", "tasks_from": "launch_facts"}
    checks = yaml.safe_load((ROOT / "roles" / "sglang_server" / "tasks" / "checks.yml").read_text())
    check = next(t for t in checks[-1]["block"] if "ansible.builtin.include_role" in t)
    # The same release, model, GPU count and arch as the check before every start; the same settings when it runs.
    for name in ("sglang_eagle3_patch_source_dir", "sglang_eagle3_patch_check_model", "sglang_eagle3_patch_gpu_arch",
                 "sglang_eagle3_patch_gpu_count"):
        assert include["vars"][name] == check["vars"][name], name
    assert check["vars"]["sglang_eagle3_patch_launch_args"] == "{{ __sglang_server_settings }}"
    assert include["vars"]["sglang_eagle3_patch_launch_args"].startswith("{{ __sglang_server_settings\n")


SERVER_PLAY = """\
---
- name: Role sglang_server's launch facts into the tuner's plan, the tasks of tune_host.yml
  hosts: all
  gather_facts: false
  tasks:
    - name: Publish the serving endpoint and the multi-node plan (as the validate-first play does)
      ansible.builtin.include_role:
        name: sglang_server
        tasks_from: endpoint

    - name: Describe the server's pre-start launch check (role sglang_server, launch_facts)
      ansible.builtin.include_role:
        name: sglang_server
        tasks_from: launch_facts
"""


def fake_release(root: Path, version: str) -> dict:
    """<root>/current -> a release whose venv's Python finds a sglang package holding only its version file and
    the real files of that release that sglang_server asks what it takes and reads (srt/environ.py,
    srt/server_args.py, from its PyPI sdist): a double of an installed release, what release.yml and
    launch_facts read of it, nothing else. Returns what role sglang_build would record of it (its local fact
    ansible_local.sglang_build), for an extra variable: it outranks the facts of this controller."""
    release = root / "releases" / "r1"
    site = release / "site"
    (site / "sglang" / "srt").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "version.py").write_text(f'__version__ = "{version}"\n')
    for member in ("srt/environ.py", "srt/server_args.py"):
        shutil.copyfile(sglang_sources.package_file(version, member), site / "sglang" / member)
    python = release / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    (root / "current").symlink_to(release)
    entry = {"dir": str(release.resolve()), "python": str(python), "sglang_dir": str(site / "sglang"), "version": version}
    return {"ansible_local": {"sglang_build": {
        "schema": 2, "root": str(root), "previous": None, "releases": {"r1": entry},
        "current": dict(entry, id="r1", python=str(root / "current" / "venv" / "bin" / "python"))}}}


def test_the_server_role_publishes_the_launch_facts_its_pre_start_check_uses(tmp_path):
    root = tmp_path / "opt"
    built = fake_release(root, "0.5.9")
    for name in ("model", "draft"):
        (tmp_path / name).mkdir()
    common = {"sglang_common_release_root": str(root), "sglang_server_model_path": str(tmp_path / "model"),
              "sglang_server_speculative_draft_model_path": str(tmp_path / "draft"),
              "sglang_server_model_manifest_check": False, "sglang_server_speculative_algorithm": "EAGLE3",
              "sglang_server_speculative_num_steps": 3, "sglang_server_speculative_eagle_topk": 1,
              "sglang_server_speculative_num_draft_tokens": 4, "sglang_server_gpu_count": 8, "sglang_server_tp_size": 8}
    hosts = {"sm100": {"sglang_server_gpu_arch": "10.0"},
             "sm100_triton": {"sglang_server_gpu_arch": "10.0", "sglang_server_attention_backend": "triton"},
             "unchecked": {"sglang_server_gpu_arch": "10.0", "sglang_server_preflight_checks": False}}
    results = run_play(tmp_path, SERVER_PLAY, hosts, common, built)
    launch = results["sm100"]["launch"]
    assert (launch["sglang_version"], launch["arch"], launch["gpu_count"], launch["model"]) == ("0.5.9", "10.0", 8,
                                                                                                "kimi_k25")
    args = launch["args"]
    assert (args["speculative_algorithm"], args["tp_size"], args["speculative_draft_model_path"]) == (
        "EAGLE3", 8, str(tmp_path / "draft"))
    assert results["sm100"]["plan"]["grid_points"] == 8
    assert any("spec-topk-above-1-mla-backend" in line for line in results["sm100"]["plan"]["rejected"])
    # The server's own backend choice reaches the check: triton has tree attention on SM100 (and the
    # server's SGLANG_ENABLE_SPEC_V2=1 does not refuse topk > 1: the restart leaves it out for those).
    assert results["sm100_triton"]["launch"]["args"]["env"] == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert results["sm100_triton"]["launch"]["args"]["attention_backend"] == "triton"
    assert results["sm100_triton"]["plan"]["grid_points"] > 8
    # No pre-start launch check on this server: none asked before the search either.
    assert results["unchecked"]["launch"] == {}
    assert results["unchecked"]["plan"]["launch_rule"].startswith("not checked here")
