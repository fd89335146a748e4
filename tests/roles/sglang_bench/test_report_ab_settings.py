"""playbooks/bench.yml's A/B of two server settings (sglang_bench_mode ab, sglang_bench_ab_settings), through
Ansible on this machine (local connection: nothing restarts, nothing is measured):

1. bad settings fail in the role's validation before any host changes, naming the variable, the value and
   the fix (an override that is no variable of role sglang_server included: a misspelt one would restart
   the server unchanged and "prove" nothing);
2. the plan (tasks_from ab_plan): the starts interleaved A/B/A/B, and per side a task file that includes role
   sglang_server with exactly that side's overrides as its vars (read back and compared);
3. the report call passes the two labels (--ab), and the play's line gives the difference with its interval.
The statistics of the A/B over starts are test_report_restarts.py's.
"""

from __future__ import annotations

import json
import re

import yaml

from repo import ROOT, load

gate = load("tests/roles/sglang_bench/test_role_gate_settings.py", "sglang_bench_gate_settings_test")
ansible_playbook, host_output = gate.ansible_playbook, gate.host_output
data = load("tests/roles/sglang_bench/benchdata.py", "sglang_bench_benchdata")

VALIDATE_PLAY = gate.VALIDATE_PLAY
NCCL = {"a": {"label": "nccl", "server": {"sglang_server_enable_torch_symm_mem": False,
                                          "sglang_server_env": {"NCCL_DEBUG": "WARN"}}},
        "b": {"label": "pcie-ipc", "server": {}}}


def test_bad_ab_settings_fail_validation_naming_them(tmp_path):
    hosts = {
        "ok": {"sglang_bench_mode": "ab", "sglang_bench_ab_settings": NCCL},
        "default": {"sglang_bench_mode": "ab"},
        "misspelt": {"sglang_bench_mode": "ab", "sglang_bench_ab_settings": {
            "a": {"label": "nccl", "server": {"sglang_server_pcie_alreduce": False}}, "b": {"label": "pcie", "server": {}}}},
        "one_side": {"sglang_bench_mode": "ab", "sglang_bench_ab_settings": {"a": {"label": "x", "server": {}}}},
        "same": {"sglang_bench_mode": "ab", "sglang_bench_ab_settings": {"a": {"label": "x"}, "b": {"label": "x"}}},
        "label": {"sglang_bench_mode": "ab", "sglang_bench_ab_settings": {"a": {"label": "a b"}, "b": {"label": "b-s2"}}},
        "starts": {"sglang_bench_mode": "ab", "sglang_bench_ab_starts": 0},
        "smoke": {"sglang_bench_ab_settings": {"a": {"label": "x"}}},  # only mode ab reads it
    }
    proc, recap = ansible_playbook(tmp_path, hosts, validate_as_bench_yml())
    out = proc.stdout + proc.stderr
    for name in ("ok", "default", "smoke"):
        assert recap[name]["failed"] == 0, (name, out[-3000:])
    expect = {
        "misspelt": "sglang_bench_ab_settings: a.server.sglang_server_pcie_alreduce is not a variable of role sglang_server",
        "one_side": "its keys are a and b, got",
        "same": "a and b have the same label x: give each its own",
        "label": "a.label must be a label of letters, digits",
        "starts": "sglang_bench_ab_starts must be at least 1 (2 measures the spread between starts), got 0",
    }
    for name, words in expect.items():
        assert recap[name]["failed"] == 1, (name, out[-3000:])
        assert words in host_output(proc.stdout, name), (name, host_output(proc.stdout, name))
    assert "b.label must be" in host_output(proc.stdout, "label")  # both sides named


def validate_as_bench_yml() -> str:
    """The role's validation with what playbooks/bench.yml hands it: sglang_server's option names, by its own
    expression (read from the playbook; the playbook's directory is the repository's playbooks/)."""
    play = yaml.safe_load((ROOT / "playbooks/bench.yml").read_text())[0]
    expression = play["vars"]["__sglang_bench_server_options"].replace("playbook_dir ~ '/..", f"'{ROOT}")
    assert "roles/sglang_server/meta/argument_specs.yml" in expression
    return VALIDATE_PLAY.replace("  tasks:\n", "  vars:\n    __sglang_bench_server_options: " + json.dumps(expression)
                                 + "\n  tasks:\n", 1)


PLAN_PLAY = """\
---
- name: Plan an A/B (the role's ab_plan, with the facts prepare would set)
  hosts: all
  gather_facts: false
  vars:
    __sglang_bench_results: "{results}"
    __sglang_bench_env: {{session: 20261204T120000Z}}
  tasks:
    - name: Plan
      ansible.builtin.include_role:
        name: sglang_bench
        tasks_from: ab_plan

    - name: Show the plan
      ansible.builtin.debug:
        var: sglang_bench_ab_plan
"""


def test_the_plan_interleaves_the_starts_and_restarts_each_side_with_its_overrides(tmp_path):
    results = tmp_path / "results"
    proc, recap = ansible_playbook(tmp_path, {"gpu1": {"sglang_bench_mode": "ab", "sglang_bench_ab_settings": NCCL,
                                                       "sglang_bench_ab_starts": 3}},
                                   PLAN_PLAY.format(results=results))
    out = proc.stdout + proc.stderr
    assert recap["gpu1"]["failed"] == 0, out[-3000:]
    plan = json.loads(re.search(r'"sglang_bench_ab_plan": (\{.*?\n    \})', proc.stdout, re.S).group(1))
    assert [(s["label"], s["start"]) for s in plan["order"]] == [
        ("nccl", 1), ("pcie-ipc", 1), ("nccl", 2), ("pcie-ipc", 2), ("nccl", 3), ("pcie-ipc", 3)]
    assert plan["labels"] == ["nccl", "pcie-ipc"]
    side_a = yaml.safe_load((results / "gpu1" / "ab-20261204T120000Z" / "restart-a.yml").read_text())
    side_b = yaml.safe_load((results / "gpu1" / "ab-20261204T120000Z" / "restart-b.yml").read_text())
    assert side_a == [{"name": "Restart the server on the settings of nccl",
                       "ansible.builtin.include_role": {"name": "sglang_server"}, "vars": NCCL["a"]["server"]}]
    assert side_b == [{"name": "Restart the server on the settings of pcie-ipc",
                       "ansible.builtin.include_role": {"name": "sglang_server"}}]  # as configured
    assert plan["order"][0]["restart"].endswith("/restart-a.yml")
    # the default A/B is the EAGLE-3 one: no speculation against the configured settings
    default = yaml.safe_load((ROOT / "roles" / "sglang_bench" / "defaults" / "main.yml").read_text())
    assert default["sglang_bench_ab_settings"] == {
        "a": {"label": "baseline", "server": {"sglang_server_speculative_algorithm": ""}},
        "b": {"label": "eagle3", "server": {}}} and default["sglang_bench_ab_starts"] == 2


def test_the_playbook_composes_the_starts_through_role_sglang_server():
    """bench_ab.yml loops bench_ab_start.yml over the plan's order; each start includes its side's restart file
    (role sglang_server) and measures with the side's label; the server is restarted as configured in an
    always section."""
    ab = yaml.safe_load((ROOT / "playbooks" / "tasks" / "bench_ab.yml").read_text())
    block = ab[1]["block"]
    loop = block[1]["block"][0]
    assert loop["ansible.builtin.include_tasks"] == "bench_ab_start.yml"
    assert loop["loop"] == "{{ sglang_bench_ab_plan.order }}"
    assert block[1]["always"][0]["ansible.builtin.include_role"] == {"name": "sglang_server"}
    start = yaml.safe_load((ROOT / "playbooks" / "tasks" / "bench_ab_start.yml").read_text())
    assert start[0]["ansible.builtin.include_tasks"] == "{{ bench_ab_start.restart }}"
    assert start[1]["ansible.builtin.include_role"] == {"name": "sglang_bench", "tasks_from": "measure"}
    assert start[1]["vars"] == {"sglang_bench_label": "{{ bench_ab_start.label }}"}


def test_the_report_compares_b_with_a_over_their_starts(tmp_path):
    """tasks/report.yml's report tasks (the gate test's probe role: its tasks and the role's defaults) on an A/B
    of two starts each, the second start's files named as measure.yml names them (<label>-s2)."""
    gate.probe_role(tmp_path)
    results = tmp_path / "bench-results"
    host = results / "gpu1"
    host.mkdir(parents=True)
    session = data.session(4)
    for i, (a_values, b_values) in enumerate([(data.exactly(1, 10, 100.0, 1.0), data.exactly(2, 10, 110.0, 1.0)),
                                              (data.exactly(3, 10, 100.5, 1.0), data.exactly(4, 10, 110.4, 1.0))]):
        suffix = "" if i == 0 else f"-s{i + 1}"
        for label, values in (("nccl", a_values), ("pcie-ipc", b_values)):
            (host / f"{session}-{label}{suffix}.json").write_text(json.dumps(data.result_doc(label, values, session)))
    proc, recap = ansible_playbook(tmp_path, {"gpu1": {"sglang_bench_mode": "ab", "sglang_bench_ab_settings": NCCL,
                                                       "sglang_bench_plot": False}},
                                   gate.REPORT_PLAY.format(results=results))
    out = proc.stdout + proc.stderr
    assert recap["gpu1"]["failed"] == 0, out[-3000:]
    line = host_output(proc.stdout, "gpu1")
    assert "A/B pcie-ipc against nccl 1.099x (significant, faster): +9.9%, 95% CI +" in line, line[-2000:]
    assert "2 start(s) each, the spread between starts" in line and "(measured)" in line, line[-2000:]
    report = (host / "report.md").read_text()
    assert "A/B, pcie-ipc against nccl: **1.099x**" in report and "2 and 2 starts, interleaved" in report


STUB_PLAY = """\
---
- name: Each side's restart as bench_ab_start.yml includes it, with a stand-in role sglang_server
  hosts: all
  gather_facts: false
  tasks:
    - name: Include the side's restart
      ansible.builtin.include_tasks: "{{{{ item }}}}"
      loop: {files}
"""


def test_each_sides_overrides_reach_role_sglang_server(tmp_path):
    """The restart files the plan writes, included as bench_ab_start.yml includes them, with a stand-in role
    sglang_server (first on the roles path) that prints what it is given: side a's overrides win over the
    inventory's values, side b (as configured) leaves them."""
    results = tmp_path / "results"
    hostvars = {"sglang_bench_mode": "ab", "sglang_bench_ab_settings": NCCL, "sglang_server_enable_torch_symm_mem": True,
                "sglang_server_env": {"NCCL_DEBUG": "INFO"}}
    proc, recap = ansible_playbook(tmp_path, {"gpu1": hostvars}, PLAN_PLAY.format(results=results))
    assert recap["gpu1"]["failed"] == 0, (proc.stdout + proc.stderr)[-3000:]
    stub = tmp_path / "roles" / "sglang_server" / "tasks"
    stub.mkdir(parents=True)
    stub.joinpath("main.yml").write_text(
        "- name: What the server role is given\n  ansible.builtin.debug:\n"
        "    msg: \"symm_mem={{ sglang_server_enable_torch_symm_mem }} env={{ sglang_server_env | to_json }}\"\n")
    files = [str(results / "gpu1" / "ab-20261204T120000Z" / f"restart-{side}.yml") for side in ("a", "b")]
    proc, recap = ansible_playbook(tmp_path, {"gpu1": hostvars}, STUB_PLAY.format(files=json.dumps(files)))
    out = proc.stdout + proc.stderr
    assert recap["gpu1"]["failed"] == 0, out[-3000:]
    seen = re.findall(r'"msg": "symm_mem=(\w+) env=(.*)"', proc.stdout)
    assert seen == [("False", '{\\"NCCL_DEBUG\\": \\"WARN\\"}'), ("True", '{\\"NCCL_DEBUG\\": \\"INFO\\"}')], out[-3000:]
