"""The correctness verdict's settings and gate through Ansible itself, on this machine (local connection):
bad teacher-forcing thresholds and chat_template_kwargs fail sglang_bench's validation naming the variable
and the value; the correctness gate of tasks/report.yml and playbooks/tasks/rollout_bench.yml (their tasks,
taken from the files) fails on a failed verdict, and on an inconclusive one unless
sglang_bench_correctness_fail_inconclusive is off."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from repo import ROOT, load

gate = load("tests/roles/sglang_bench/test_role_gate_settings.py", "sglang_bench_gate_settings")

BAD = {
    "tie": ({"sglang_bench_correctness_tie_nats": -0.1}, "sglang_bench_correctness_tie_nats at least 0 (got -0.1)"),
    "top1": ({"sglang_bench_correctness_max_top1_loss": 1.5}, "sglang_bench_correctness_max_top1_loss in [0, 1] (got 1.5)"),
    "share": ({"sglang_bench_correctness_max_confident_share": -0.01},
              "sglang_bench_correctness_max_confident_share in [0, 1] (got -0.01)"),
    "unexplained": ({"sglang_bench_correctness_max_unexplained": -1},
                    "sglang_bench_correctness_max_unexplained a whole number at least 0 (got -1)"),
    "kwargs": ({"sglang_bench_correctness_chat_template_kwargs": "thinking=false"},
               "sglang_bench_correctness_chat_template_kwargs must be a mapping such as {thinking: false} "
               '(got \\"thinking=false\\")'),
}


def test_bad_teacher_forcing_settings_fail_validation_naming_the_variable_and_value(tmp_path):
    hosts = {"ok_default": {}, "ok_set": {"sglang_bench_correctness_tie_nats": 1.0,
                                          "sglang_bench_correctness_chat_template_kwargs": {"enable_thinking": False},
                                          "sglang_bench_correctness_max_unexplained": 2}}
    hosts.update({name: hvars for name, (hvars, _) in BAD.items()})
    proc, recap = gate.ansible_playbook(tmp_path, hosts, gate.VALIDATE_PLAY)
    out = proc.stdout + proc.stderr
    assert recap["ok_default"]["failed"] == 0 and recap["ok_set"]["failed"] == 0, out[-3000:]
    for name, (_, message) in BAD.items():
        assert recap[name]["failed"] == 1, (name, out[-3000:])
        assert message in " ".join(gate.host_output(proc.stdout, name).split()), (name, out[-3000:])


def gate_task(path: Path, name_start: str) -> dict:
    tasks = yaml.safe_load(path.read_text())
    return next(t for t in tasks if t["name"].startswith(name_start))


@pytest.mark.parametrize("source", ["report", "rollout"])
def test_the_correctness_gate_fails_on_fail_and_on_inconclusive_unless_turned_off(tmp_path, source):
    if source == "report":
        task = gate_task(ROOT / "roles/sglang_bench/tasks/report.yml", "Fail on wrong answers")
        common = {"sglang_bench_mode": "smoke", "sglang_bench_correctness": True, "sglang_bench_correctness_gate": True}
    else:
        task = gate_task(ROOT / "playbooks/tasks/rollout_bench.yml", "Fail on wrong answers")
        common = {"rollout_bench_gate": True}
    task.pop("tags", None)
    play = [{"name": "The correctness gate", "hosts": "all", "gather_facts": False, "tasks": [task]}]
    report = "Correctness of r2: {}"
    cases = {"passed": ("pass", True), "failed": ("fail", True), "unchecked": ("inconclusive", True),
             "unchecked_allowed": ("inconclusive", False), "first": ("no reference", True)}
    hosts = {name: {**common, "sglang_bench_correctness_fail_inconclusive": flag,
                    "sglang_bench_correctness_result": {"verdict": verdict, "report": report.format(verdict)}}
             for name, (verdict, flag) in cases.items()}
    if source == "rollout":  # its default, where the role's defaults are not loaded
        del hosts["unchecked"]["sglang_bench_correctness_fail_inconclusive"]
    proc, recap = gate.ansible_playbook(tmp_path, hosts, yaml.safe_dump(play, sort_keys=False))
    out = proc.stdout + proc.stderr
    assert {name: recap[name]["failed"] for name in cases} == {
        "passed": 0, "failed": 1, "unchecked": 1, "unchecked_allowed": 0, "first": 0}, out[-3000:]
    assert '"msg": "Wrong answers on failed: Correctness of r2: fail"' in gate.host_output(proc.stdout, "failed")
    assert ('"msg": "Answers not checked (sglang_bench_correctness_fail_inconclusive) on unchecked: Correctness of r2: '
            'inconclusive"') in gate.host_output(proc.stdout, "unchecked"), out[-3000:]
