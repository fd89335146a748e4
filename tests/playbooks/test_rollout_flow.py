"""The decisions of playbooks/upgrade.yml and playbooks/rollback.yml, run for real against three local
hosts whose roles are STUBS written here (never shipped): each stub keeps to its role's contract
(sglang_server: main restarts on current, records serving and previous by the role's rule or
sglang_server_previous_release, and on a failed start switches current back and fails; sglang_build: tasks_from
switch moves current; the local facts the playbooks read, ansible_local.sglang_server {serving, previous} and
ansible_local.sglang_build {root, current, releases}, are published from each host's state after every change,
with set_fact, which outranks the facts the plays gather on this controller; sglang_bench: publishes
sglang_bench_result with a verdict against the session before; sglang_router: leave and join), and
writes what it did to a file per host. The roles themselves are proven in molecule multihost
(tests/molecule/multihost/test_multi_canary.py); here, which host goes when, which one goes back to
what, what the table and the failure say, and what is left untouched.
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

from repo import ROOT

STUBS = {
    "sglang_server/tasks/validate.yml": """
- name: Publish the local facts (stub)
  ansible.builtin.include_tasks: "{{ stub_dir }}/facts.yml"
""",
    "sglang_server/tasks/main.yml": """
- name: Read the state (stub)
  ansible.builtin.set_fact:
    stub_state: "{{ lookup('ansible.builtin.file', stub_dir ~ '/' ~ inventory_hostname ~ '.json') | from_json }}"
- name: Note whether this start fails (stub)
  ansible.builtin.set_fact:
    stub_failing: "{{ stub_state.current in stub_fail_start | default([]) }}"
- name: Log the start (stub)
  ansible.builtin.include_tasks: "{{ stub_dir }}/log.yml"
  vars:
    stub_event: "start {{ stub_state.current | basename }}"
- name: A failed start switches current back and fails (stub)
  when: stub_failing | bool
  block:
    - name: Switch back (stub)
      ansible.builtin.include_tasks: "{{ stub_dir }}/save.yml"
      vars:
        stub_new: "{{ stub_state | combine({'current': stub_state.serving}) }}"
    - name: Fail (stub)
      ansible.builtin.fail:
        msg: "release {{ stub_state.current | basename }} did not become ready;
          rolled back to {{ stub_state.serving | basename }}"
- name: Record serving and previous (stub of the role's rule)
  ansible.builtin.include_tasks: "{{ stub_dir }}/save.yml"
  vars:
    stub_new:
      current: "{{ stub_state.current }}"
      serving: "{{ stub_state.current }}"
      previous: >-
        {{ sglang_server_previous_release if sglang_server_previous_release | default(none) is not none
           else (stub_state.serving if stub_state.serving and stub_state.serving != stub_state.current
                 and stub_state.current != stub_state.previous else stub_state.previous) }}
""",
    "sglang_build/tasks/switch.yml": """
- name: Switch current (stub)
  ansible.builtin.include_tasks: "{{ stub_dir }}/save.yml"
  vars:
    stub_new: "{{ lookup('ansible.builtin.file', stub_dir ~ '/' ~ inventory_hostname ~ '.json') | from_json
                  | combine({'current': sglang_build_switch_to}) }}"
""",
    "sglang_bench/tasks/main.yml": """
- name: Measure what serves (stub; speeds from the inventory)
  ansible.builtin.set_fact:
    stub_mean: "{{ stub_speeds[(lookup('ansible.builtin.file', stub_dir ~ '/' ~ inventory_hostname ~ '.json')
      | from_json).serving | basename] }}"
    stub_prev: "{{ stub_history | default([]) | last | default(none) }}"
- name: Publish the comparison (stub)
  ansible.builtin.set_fact:
    stub_history: "{{ stub_history | default([]) + [stub_mean | float] }}"
    sglang_bench_result:
      rows:
        - label: eagle3
          mean: "{{ stub_mean | float }}"
          vs_previous:
            verdict: >-
              {{ 'no history' if stub_prev is none else 'slower' if stub_mean | float < stub_prev | float * 0.95
                 else 'faster' if stub_mean | float > stub_prev | float * 1.05 else 'inconclusive' }}
      failures: "{{ ['[eagle3] 20% below the previous session'] if stub_prev is not none
                     and stub_mean | float < stub_prev | float * 0.95 else [] }}"
- name: Publish the answers' verdict (stub; a release named *wrong* answers wrong)
  ansible.builtin.set_fact:
    sglang_bench_correctness_result:
      verdict: "{{ 'fail' if 'wrong' in stub_served else 'pass' }}"
      report: "{{ 'agreement with the reference 0.0 (needs >= 0.5)' if 'wrong' in stub_served else 'all figures hold' }}"
  vars:
    stub_served: "{{ (lookup('ansible.builtin.file', stub_dir ~ '/' ~ inventory_hostname ~ '.json')
      | from_json).serving | basename }}"
- name: Log the benchmark (stub)
  ansible.builtin.include_tasks: "{{ stub_dir }}/log.yml"
  vars:
    stub_event: "bench {{ stub_mean }}"
""",
    "sglang_router/tasks/leave.yml": """
- name: Leave (stub)
  ansible.builtin.include_tasks: "{{ stub_dir }}/log.yml"
  vars:
    stub_event: leave
""",
    "sglang_router/tasks/join.yml": """
- name: Join (stub)
  ansible.builtin.include_tasks: "{{ stub_dir }}/log.yml"
  vars:
    stub_event: join
""",
    "sglang_eagle3_patch/tasks/check.yml": """
- name: Check the patch (stub)
  ansible.builtin.fail:
    msg: kimi_k25.py has a syntax error
  when: stub_patch_fails | default(false)
""",
}
HELPERS = {
    "save.yml": """
- name: Save the state (stub)
  ansible.builtin.copy:
    content: "{{ stub_new | to_json }}"
    dest: "{{ stub_dir }}/{{ inventory_hostname }}.json"
    mode: "0644"
  check_mode: false
  when: not ansible_check_mode
- name: Move the host's current link (stub; upgrade.yml and the patch check read the link itself)
  ansible.builtin.file:
    path: "{{ stub_roots }}/{{ inventory_hostname }}/current"
    src: "{{ stub_new.current }}"
    state: link
    force: true
  when: not ansible_check_mode
- name: Publish the local facts (stub)
  ansible.builtin.include_tasks: "{{ stub_dir }}/facts.yml"
""",
    "facts.yml": """
- name: Publish what the host's local facts would hold (stub; set_fact outranks what the plays gather here)
  ansible.builtin.set_fact:
    ansible_local:
      sglang_build: "{{ stub_build | combine({'root': stub_roots ~ '/' ~ inventory_hostname,
                                              'current': {'id': stub_s.current | basename, 'dir': stub_s.current}}) }}"
      sglang_server: {schema: 1, serving: "{{ stub_s.serving }}", previous: "{{ stub_s.previous }}"}
  vars:
    stub_s: "{{ lookup('ansible.builtin.file', stub_dir ~ '/' ~ inventory_hostname ~ '.json') | from_json }}"
""",
    "log.yml": """
- name: Note the event (stub)
  ansible.builtin.set_fact:
    stub_events: "{{ stub_events | default([]) + [stub_event] }}"
- name: Write the events (stub)
  ansible.builtin.copy:
    content: "{{ stub_events | join('\\n') }}\\n"
    dest: "{{ stub_dir }}/{{ inventory_hostname }}.log"
    mode: "0644"
  when: not ansible_check_mode
""",
}
ROLES = ["sglang_server", "sglang_build", "sglang_bench", "sglang_router", "sglang_model", "sglang_eagle3_patch"]
HOSTS = ["gpu1", "gpu2", "gpu3"]
PLAY = "PLAY [Canary first, then the other GPU hosts in batches]"


def setup(tmp_path: Path, state: dict, hostvars: dict | None = None, groups: dict | None = None) -> Path:
    stub_dir = tmp_path / "stub"
    for role in ROLES:  # every entry point a playbook reaches: validate does nothing
        for entry in ("validate", "main", "endpoint"):
            path = tmp_path / "roles" / role / "tasks" / f"{entry}.yml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"- name: {entry} (stub)\n  ansible.builtin.debug:\n    msg: stub\n")
    for rel, text in STUBS.items():
        (tmp_path / "roles" / rel).write_text(text)
    stub_dir.mkdir()
    for name, text in HELPERS.items():
        (stub_dir / name).write_text(text)
    releases = set()
    for host, (current, serving, previous) in state.items():
        (stub_dir / f"{host}.json").write_text(json.dumps({"current": current, "serving": serving, "previous": previous}))
        releases.update(r for r in (current, serving, previous) if r)
    built = {Path(r).name: {"dir": r, "python": f"{r}/venv/bin/python", "sglang_dir": "/stub/sglang"} for r in releases}
    # Each host's release root with its current link (to the stub release path, which need not exist): the
    # patch check and upgrade.yml read the link itself; save.yml moves it with the host's state.
    roots = tmp_path / "opt"
    for host, (current, _, _) in state.items():
        (roots / host).mkdir(parents=True)
        if current:
            (roots / host / "current").symlink_to(current)
    # The base of the stub's ansible_local.sglang_build (facts.yml adds each host's root and current).
    (tmp_path / "stub_facts.json").write_text(json.dumps({"stub_build": {"schema": 2, "releases": built},
                                                          "stub_roots": str(roots)}))
    shutil.copytree(ROOT / "playbooks", tmp_path / "playbooks")
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "stub_dir": str(stub_dir),
              "stub_speeds": {"r1": 100, "r5-slow": 80, "r6": 100, "r7": 101, "r8-wrong": 100}}
    # The first play (validate.yml's rollout checks) gathers no facts: there the local facts are the inventory's,
    # as facts.yml would publish them; from the roles' validation on, facts.yml's.
    base = {"schema": 2, "releases": built}
    facts = {h: {"ansible_local": {"sglang_build": dict(base, root=str(roots / h), current={"id": Path(c).name, "dir": c}),
                                   "sglang_server": {"schema": 1, "serving": s, "previous": p}}}
             for h, (c, s, p) in state.items()}
    inventory = {"all": {"vars": common, "children": {
        "gpu_hosts": {"hosts": {h: {**facts[h], **(hostvars or {}).get(h, {})} for h in state}}, **(groups or {})}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    return stub_dir


def play(tmp_path: Path, playbook: str, *extra: str) -> tuple[subprocess.CompletedProcess, str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(tmp_path / "roles"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "playbooks" / playbook), "-e", f"@{tmp_path / 'stub_facts.json'}", *extra],
                          cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    return proc, proc.stdout + proc.stderr


def state(stub_dir: Path, host: str) -> tuple[str, str, str]:
    s = json.loads((stub_dir / f"{host}.json").read_text())
    return s["current"], s["serving"], s["previous"]


def log(stub_dir: Path, host: str) -> list[str]:
    path = stub_dir / f"{host}.log"
    return path.read_text().split("\n")[:-1] if path.exists() else []


def row(out: str, host: str) -> list[str]:
    match = re.search(rf'"\| {host} \| ([^"]*) \|"', out)
    assert match, out[-3000:]
    return [cell.strip() for cell in match.group(1).split("|")]


def batches(out: str) -> list[list[str]]:
    """The hosts each batch of the rollout play ran on, in order."""
    parts = out.split(PLAY)[1:]
    parts[-1] = parts[-1].split("PLAY [Report the rollout]")[0]
    return [sorted(set(re.findall(r"\[(gpu\d)[\] ]", part))) for part in parts]


def test_a_slower_canary_goes_back_and_stops_the_rollout(tmp_path) -> None:
    stub = setup(tmp_path, {h: ("/r/r5-slow", "/r/r1", "/r/r0") for h in HOSTS})
    proc, out = play(tmp_path, "upgrade.yml")
    assert proc.returncode != 0, out[-3000:]
    assert batches(out) == [["gpu1"]]
    assert log(stub, "gpu1") == ["leave", "bench 100", "start r5-slow", "bench 80", "start r1", "bench 100", "join"]
    assert state(stub, "gpu1") == ("/r/r1", "/r/r1", "/r/r0")  # the previous release it had before the upgrade
    for host in ("gpu2", "gpu3"):
        assert log(stub, host) == [] and state(stub, host) == ("/r/r5-slow", "/r/r1", "/r/r0")
    assert row(out, "gpu1") == ["r1", "r5-slow", "slower", "pass", "100.0", "80.0", "rolled back to r1, 100.0 tok/s"]
    assert row(out, "gpu2") == ["-", "-", "-", "-", "-", "-", "not reached"]
    assert ("Rollout stopped at gpu1: release r5-slow slower (tok/s: 100.0 on r1 before, 80.0 on r5-slow after) "
            "(Benchmark regression on gpu1: [eagle3] 20% below the previous session). Rolled back to r1, which serves "
            "again (100.0 tok/s) and is back in the routers. Not upgraded, serving as before: gpu2, gpu3.") in out


def test_a_canary_that_answers_wrong_at_equal_speed_goes_back_and_stops_the_rollout(tmp_path) -> None:
    stub = setup(tmp_path, {h: ("/r/r8-wrong", "/r/r1", "/r/r0") for h in HOSTS})
    proc, out = play(tmp_path, "upgrade.yml")
    assert proc.returncode != 0, out[-3000:]
    assert log(stub, "gpu1") == ["leave", "bench 100", "start r8-wrong", "bench 100", "start r1", "bench 100", "join"]
    assert state(stub, "gpu1") == ("/r/r1", "/r/r1", "/r/r0")
    for host in ("gpu2", "gpu3"):
        assert log(stub, host) == []
    assert row(out, "gpu1") == ["r1", "r8-wrong", "inconclusive", "fail", "100.0", "100.0", "rolled back to r1, 100.0 tok/s"]
    assert "(Wrong answers on gpu1: agreement with the reference 0.0 (needs >= 0.5)). Rolled back to r1" in out


def test_the_canary_group_goes_first_then_batches_of_the_given_size(tmp_path) -> None:
    stub = setup(tmp_path, {h: ("/r/r6", "/r/r1", "") for h in HOSTS}, groups={"canary": {"hosts": {"gpu3": {}}}})
    proc, out = play(tmp_path, "upgrade.yml", "-e", "upgrade_batch=2")
    assert proc.returncode == 0, out[-3000:]
    assert batches(out) == [["gpu3"], ["gpu1", "gpu2"]]
    for host in HOSTS:
        assert log(stub, host) == ["leave", "bench 100", "start r6", "bench 100", "join"]
        assert state(stub, host) == ("/r/r6", "/r/r6", "/r/r1")
        assert row(out, host) == ["r1", "r6", "inconclusive", "pass", "100.0", "100.0", "upgraded"]


def test_a_later_host_that_does_not_start_goes_back_and_the_rest_stays(tmp_path) -> None:
    """Batches of 34% of three hosts are one host each: gpu1 (the canary), then gpu2, which fails to start."""
    stub = setup(tmp_path, {h: ("/r/r7", "/r/r1", "/r/r0") for h in HOSTS}, hostvars={"gpu2": {"stub_fail_start": ["/r/r7"]}})
    proc, out = play(tmp_path, "upgrade.yml", "-e", "upgrade_batch=34%")
    assert proc.returncode != 0, out[-3000:]
    assert batches(out) == [["gpu1"], ["gpu2"]]
    assert state(stub, "gpu1") == ("/r/r7", "/r/r7", "/r/r1")
    assert log(stub, "gpu2") == ["leave", "bench 100", "start r7", "start r1", "bench 100", "join"]
    assert state(stub, "gpu2") == ("/r/r1", "/r/r1", "/r/r0")
    assert log(stub, "gpu3") == []
    assert row(out, "gpu1")[-1] == "upgraded"
    assert row(out, "gpu2") == ["r1", "r7", "did not start", "-", "100.0", "-", "rolled back to r1, 100.0 tok/s"]
    assert "Rollout stopped at gpu2: release r7 did not start (tok/s: 100.0 on r1 before) (release r7 did not become ready" in out


def test_a_host_that_fails_before_its_restart_stays_out_of_the_routers(tmp_path) -> None:
    stub = setup(tmp_path, {h: ("/r/r6", "/r/r1", "") for h in HOSTS}, hostvars={"gpu1": {"stub_patch_fails": True}})
    proc, out = play(tmp_path, "upgrade.yml")
    assert proc.returncode != 0, out[-3000:]
    assert log(stub, "gpu1") == ["leave", "bench 100"]  # no restart, no join
    assert state(stub, "gpu1") == ("/r/r6", "/r/r1", "")
    assert log(stub, "gpu2") == [] and log(stub, "gpu3") == []
    assert ('Upgrade of gpu1 failed at "Check the patch (stub)": kimi_k25.py has a syntax error (tok/s: 100.0 on r1 before). '
            "gpu1 stays out of the routers") in out


def test_check_mode_changes_nothing_and_reports(tmp_path) -> None:
    stub = setup(tmp_path, {h: ("/r/r6", "/r/r1", "") for h in HOSTS})
    proc, out = play(tmp_path, "upgrade.yml", "--check")
    assert proc.returncode == 0, out[-3000:]
    for host in HOSTS:
        assert log(stub, host) == [] and state(stub, host) == ("/r/r6", "/r/r1", "")
        assert row(out, host)[:2] == ["r1", "r6"]


def test_rollback_goes_back_to_the_previous_release_once(tmp_path) -> None:
    stub = setup(tmp_path, {"gpu1": ("/r/r6", "/r/r6", "/r/r1"), "gpu2": ("/r/r6", "/r/r6", "/r/r1"),
                            "gpu3": ("/r/r1", "/r/r1", "/r/r1")})
    proc, out = play(tmp_path, "rollback.yml")
    assert proc.returncode == 0, out[-3000:]
    for host in ("gpu1", "gpu2"):
        assert log(stub, host) == ["leave", "start r1", "bench 100", "join"]
        assert state(stub, host) == ("/r/r1", "/r/r1", "/r/r1")
        assert f"{host}: r6 -> r1, serving again, 100.0 tok/s" in out
    assert log(stub, "gpu3") == [] and "gpu3 already serves its previous release /r/r1: nothing to do." in out

    again, out = play(tmp_path, "rollback.yml")
    assert again.returncode == 0, out[-3000:]
    assert [log(stub, h) for h in HOSTS] == [["leave", "start r1", "bench 100", "join"]] * 2 + [[]]
    assert all(f"{h} already serves its previous release" in out for h in HOSTS)
