"""sglang_bench's gate settings through Ansible itself, on this machine (local connection).

1. sglang_bench_confidence outside (0, 1) and a non-boolean sglang_bench_fail_inconclusive
   fail before anything runs, naming the variable: in tasks/validate.yml (what upgrade.yml
   runs for every host first) and in meta/argument_specs.yml (the role's entry point).
2. The report call of tasks/report.yml as the role runs it (its three tasks, taken from the
   file, with the role's defaults): the new settings reach the script, the play shows the
   verdicts, and the gate fails the play only when it should.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from repo import ROOT, load, role_file

data = load("tests/roles/sglang_bench/benchdata.py", "sglang_bench_benchdata")
REPORT = ROOT / "roles" / "sglang_bench" / "files" / "sglang_bench_report.py"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def ansible_playbook(tmp_path: Path, hosts: dict[str, dict], play: str,
                     *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    inventory = {"all": {"hosts": {name: dict(hvars, ansible_connection="local",
                                              ansible_python_interpreter=sys.executable)
                                   for name, hvars in hosts.items()}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(play)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_ROLES_PATH=f"{tmp_path / 'roles'}{os.pathsep}{ROOT / 'roles'}",
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    recap = {m[1]: {"ok": int(m[2]), "failed": int(m[5])} for m in RECAP.finditer(proc.stdout)}
    return proc, recap


def host_output(stdout: str, host: str) -> str:
    """The lines of the play's output that name this host (task results are printed per host)."""
    blocks = re.split(r"\n(?=(?:ok|fatal|failed|changed|skipping): \[)", stdout)
    return "\n".join(b for b in blocks if re.match(rf"(?:ok|fatal|failed|changed|skipping): \[{re.escape(host)}\]", b))


# ------------------------------------------------------------------ 1. bad settings

VALIDATE_PLAY = """\
---
- name: Validate the benchmark settings
  hosts: all
  gather_facts: false
  tasks:
    - name: Run sglang_bench's validation
      ansible.builtin.include_role:
        name: sglang_bench
        tasks_from: validate
"""

ROLE_CHECK_PLAY = """\
---
- name: The role's entry point in check mode (argument specs, validation; check mode measures nothing)
  hosts: all
  gather_facts: false
  roles:
    - role: sglang_bench
"""

BAD_CONFIDENCE = {"c_zero": 0, "c_one": 1, "c_big": 1.5, "c_negative": -0.2, "c_percent": 95}


def test_confidence_outside_zero_one_fails_validation_naming_the_variable(tmp_path):
    hosts = {"c_ok": {"sglang_bench_confidence": 0.9}, "c_default": {}}
    hosts.update({name: {"sglang_bench_confidence": value} for name, value in BAD_CONFIDENCE.items()})
    proc, recap = ansible_playbook(tmp_path, hosts, VALIDATE_PLAY)
    out = proc.stdout + proc.stderr
    assert recap["c_ok"]["failed"] == 0 and recap["c_default"]["failed"] == 0, out[-3000:]
    for name, value in BAD_CONFIDENCE.items():
        assert recap[name]["failed"] == 1, (name, out[-3000:])
        assert f"sglang_bench_confidence ({value}) must be a number between 0 and 1" in host_output(proc.stdout, name)


def test_poll_interval_outside_one_to_the_timeout_fails_validation_naming_it(tmp_path):
    """A benchmark is polled every sglang_bench_poll_interval seconds (tasks/run.yml): 0 would never poll,
    longer than sglang_bench_timeout would never see the timeout."""
    hosts = {"p_ok": {"sglang_bench_poll_interval": 2}, "p_default": {},
             "p_zero": {"sglang_bench_poll_interval": 0},
             "p_long": {"sglang_bench_poll_interval": 700, "sglang_bench_timeout": 600}}
    proc, recap = ansible_playbook(tmp_path, hosts, VALIDATE_PLAY)
    out = proc.stdout + proc.stderr
    assert recap["p_ok"]["failed"] == 0 and recap["p_default"]["failed"] == 0, out[-3000:]
    for name, value in (("p_zero", 0), ("p_long", 700)):
        assert recap[name]["failed"] == 1, (name, out[-3000:])
        assert f"sglang_bench_poll_interval ({value}) between 1 and sglang_bench_timeout" in host_output(proc.stdout, name)


def test_role_entry_point_checks_the_types(tmp_path):
    hosts = {"ok": {"sglang_bench_confidence": 0.99, "sglang_bench_fail_inconclusive": True},
             "word": {"sglang_bench_confidence": "high"},
             "flag": {"sglang_bench_fail_inconclusive": "maybe"},
             "one": {"sglang_bench_confidence": 1.0}}
    proc, recap = ansible_playbook(tmp_path, hosts, ROLE_CHECK_PLAY, "--check")
    out = proc.stdout + proc.stderr
    assert recap["ok"]["failed"] == 0 and "Check mode measures nothing" in host_output(proc.stdout, "ok"), out[-3000:]
    assert recap["word"]["failed"] == 1 and "sglang_bench_confidence" in host_output(proc.stdout, "word"), out[-3000:]
    assert recap["flag"]["failed"] == 1 and "sglang_bench_fail_inconclusive" in host_output(proc.stdout, "flag")
    assert recap["one"]["failed"] == 1 and "between 0 and 1" in host_output(proc.stdout, "one")


# ------------------------------------------------------------------ 2. the report call

REPORT_PLAY = """\
---
- name: The report call of sglang_bench's tasks/report.yml
  hosts: all
  gather_facts: false
  roles:
    - role: bench_report_probe
      vars:
        __sglang_bench_results: "{results}"
"""

REPORT_TASKS = ("Compare with the history and the baseline; render the report and the plot",
                "Show the benchmark report", "Fail on a regression (the gate)")


def probe_role(tmp_path: Path) -> None:
    """roles/bench_report_probe: report.yml's report tasks and the role's defaults, laid out so that
    the task finds the script where it does in this repository."""
    tasks = yaml.safe_load(role_file("sglang_bench", "tasks", "report.yml").read_text())
    wanted = [t for t in tasks if t.get("name") in REPORT_TASKS]
    assert [t["name"] for t in wanted] == list(REPORT_TASKS)
    role = tmp_path / "roles" / "bench_report_probe"
    (role / "tasks").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump(wanted, sort_keys=False))
    shutil.copy(role_file("sglang_bench", "defaults", "main.yml"), role / "defaults" / "main.yml")
    # Where report.yml looks for the script: next to the roles (files/) or in the role's own files/.
    for files in (tmp_path / "files", role / "files"):
        files.mkdir()
        (files / "sglang_bench_report.py").symlink_to(REPORT)


def test_report_call_passes_the_settings_and_gates(tmp_path):
    probe_role(tmp_path)
    results = tmp_path / "bench-results"
    old, new = data.exactly(21, 10, 100.0, 10.0), data.exactly(22, 10, 94.0, 9.4)  # an inconclusive 6% drop
    s1, s2 = data.session(1), data.session(2)
    for host in ("lenient", "strict"):
        data.write(results / host, s1, "eagle3", old, release="r1")
        data.write(results / host, s2, "eagle3", new, release="r2")
    data.write(results / "ab", s2, "baseline", data.SEED_BASELINE)
    data.write(results / "ab", s2, "eagle3", data.SEED_EAGLE3)
    data.write(results / "ab80", s2, "baseline", data.SEED_BASELINE)
    data.write(results / "ab80", s2, "eagle3", data.SEED_EAGLE3)
    hosts = {"lenient": {"sglang_bench_plot": False},
             "strict": {"sglang_bench_plot": False, "sglang_bench_fail_inconclusive": True},
             "ab": {"sglang_bench_baseline_tok_s": 96.1},
             "ab80": {"sglang_bench_confidence": 0.8, "sglang_bench_plot": False}}
    proc, recap = ansible_playbook(tmp_path, hosts, REPORT_PLAY.format(results=results))
    out = proc.stdout + proc.stderr
    lenient, strict = host_output(proc.stdout, "lenient"), host_output(proc.stdout, "strict")
    assert recap["lenient"]["failed"] == 0, out[-4000:]
    assert "-6.0% vs previous (inconclusive)" in lenient and "Note: [eagle3]" in lenient, lenient
    assert recap["strict"]["failed"] == 1 and "Benchmark regression on strict" in strict, strict
    assert "--fail-inconclusive" in strict
    ab, ab80 = host_output(proc.stdout, "ab"), host_output(proc.stdout, "ab80")
    assert recap["ab"]["failed"] == 0 and recap["ab80"]["failed"] == 0, out[-4000:]
    assert f"EAGLE-3 speedup {96.1 / 92.6:.3f}x (inconclusive)" in ab, ab
    assert "+0.0% vs baseline (inconclusive)" in ab
    assert f"EAGLE-3 speedup {96.1 / 92.6:.3f}x (significant, faster)" in ab80, ab80
    assert (results / "ab" / "history.png").exists() and not (results / "ab80" / "history.png").exists()
    assert "at 80% confidence" in (results / "ab80" / "report.md").read_text()
    assert json.loads((results / "lenient" / f"{s2}-eagle3.json").read_text())["ok_runs"] == 10
