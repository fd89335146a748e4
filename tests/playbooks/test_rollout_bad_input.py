"""playbooks/upgrade.yml and playbooks/rollback.yml refuse bad input in their validate-first play, before
any host leaves a router, builds or restarts, naming the variable (local connection on this machine:
nothing of it is touched, because nothing gets past validation; the server's state lives in tmp_path).
"""

from __future__ import annotations

import json
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
# Where the plays would act once validation passed: none of them may start.
ACTING_PLAYS = ("Stage the models' revisions on every GPU host", "Canary first, then the other GPU hosts in batches",
                "Roll the GPU hosts back to their previous release")


def run(tmp_path: Path, playbook: str, hostvars: dict, groups: dict | None = None, *extra: str) -> subprocess.CompletedProcess:
    state = {"sglang_server_home": str(tmp_path / "state"), "sglang_common_release_root": str(tmp_path / "opt")}
    inventory = {"all": {"children": {"gpu_hosts": {"hosts": {name: {**BASE, **state, **v} for name, v in hostvars.items()}},
                                      **(groups or {})}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(ROOT / "playbooks" / playbook), *extra], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)


def assert_refused_in_validation(proc: subprocess.CompletedProcess, words: str, failed: dict[str, int]) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert words in out, out[-3000:]
    assert {m[1]: int(m[5]) for m in RECAP.finditer(proc.stdout)} == failed, out[-3000:]
    assert all(int(m[3]) == 0 for m in RECAP.finditer(proc.stdout)), out[-3000:]
    for play in ACTING_PLAYS:
        assert f"PLAY [{play}]" not in proc.stdout, out[-3000:]


BATCHES = {"zero": "0", "zero-percent": "0%", "above-100-percent": "101%", "a-word": "two"}


@pytest.mark.parametrize("case", sorted(BATCHES))
def test_a_bad_batch_size_fails_before_any_host_changes(tmp_path, case) -> None:
    proc = run(tmp_path, "upgrade.yml", {"gpu1": {}, "gpu2": {}}, None, "-e", json.dumps({"upgrade_batch": BATCHES[case]}))
    assert_refused_in_validation(proc, f"upgrade_batch must be a number of hosts (1 or more) or a percentage of them "
                                       f"above 0% and at most 100% (such as 1, 2 or \"25%\"), got '{BATCHES[case]}'",
                                 {"gpu1": 1, "gpu2": 0})  # checked once for the run (run_once), fatal to all


def test_a_canary_that_is_not_a_gpu_host_fails_before_any_host_changes(tmp_path) -> None:
    groups = {"canary": {"hosts": {"router1": {"ansible_connection": "local"}, "gpu1": {}}}}
    proc = run(tmp_path, "upgrade.yml", {"gpu1": {}, "gpu2": {}}, groups)
    assert_refused_in_validation(proc, "upgrade_canary_group 'canary' must be an inventory group of GPU hosts "
                                       "(gpu_hosts), upgraded first; router1 in it is not a GPU host.",
                                 {"gpu1": 1, "gpu2": 0})


def test_a_canary_group_named_on_the_command_line_is_checked_too(tmp_path) -> None:
    groups = {"first_wave": {"hosts": {"edge1": {"ansible_connection": "local"}}}}
    proc = run(tmp_path, "upgrade.yml", {"gpu1": {}}, groups, "-e", "upgrade_canary_group=first_wave")
    assert_refused_in_validation(proc, "upgrade_canary_group 'first_wave' must be an inventory group of GPU hosts",
                                 {"gpu1": 1})


def local_facts(built: dict, serving: str, previous: str) -> dict:
    """What the host's local facts would hold (role sglang_build's releases, role sglang_server's serving and
    previous), as an inventory variable: the validate-first play gathers no facts, and reads them only when
    they are missing."""
    return {"ansible_local": {"sglang_build": {"schema": 2, "root": "/opt/sglang", "current": None, "releases": built},
                              "sglang_server": {"schema": 1, "serving": serving, "previous": previous}}}


def test_rollback_on_a_host_with_no_previous_release_fails_before_any_host_changes(tmp_path) -> None:
    """gpu2 has a previous release on disk; gpu1 never served another one: the whole run stops, naming gpu1."""
    previous = fake_release(tmp_path / "opt" / "releases" / "r1")  # a release gpu2 can go back to
    built = {"r1": {"dir": str(previous), "python": f"{previous}/venv/bin/python",
                    "sglang_dir": str(previous / "venv" / "lib" / "site-packages" / "sglang")}}
    hosts = {"gpu1": local_facts(built, "/opt/sglang/releases/r2", ""),
             "gpu2": local_facts(built, "/opt/sglang/releases/r2", str(previous))}
    proc = run(tmp_path, "rollback.yml", hosts)
    assert_refused_in_validation(proc, "gpu1 has no previous release to roll back to: ansible_local.sglang_server.previous "
                                       "(role sglang_server's record of the release that served before the one serving "
                                       "now, written when a different release becomes ready) is empty; it serves "
                                       "/opt/sglang/releases/r2", {"gpu1": 1, "gpu2": 1})
    # gpu2's own checks passed; the end of the validate-first play stops it, naming gpu1 alone.
    assert "The settings checks failed on gpu1 (each host's reason is above)" in proc.stdout, proc.stdout[-3000:]
    assert not (tmp_path / "opt" / "current").exists()


def test_rollback_to_a_previous_release_that_is_gone_fails_before_any_host_changes(tmp_path) -> None:
    gone = tmp_path / "opt" / "releases" / "r0-pruned"
    proc = run(tmp_path, "rollback.yml", {"gpu1": local_facts({}, "/opt/sglang/releases/r2", str(gone))})
    assert_refused_in_validation(proc, f"gpu1's previous release {gone} (ansible_local.sglang_server.previous) is not among "
                                       "the complete releases with SGLang that role sglang_build recorded "
                                       "(ansible_local.sglang_build: pruned or removed): it cannot be rolled back to.",
                                 {"gpu1": 1})


def fake_release(path: Path) -> Path:
    """A release directory whose venv holds an sglang package."""
    site = path / "venv" / "lib" / "site-packages"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    return path


@pytest.mark.parametrize("batch", ["2", "100%"])
def test_good_rollout_settings_pass_the_same_checks(tmp_path, batch) -> None:
    """So each refusal above is its value's own: the same checks pass good values (validate.yml alone, rollout only)."""
    groups = {"canary": {"hosts": {"gpu2": {}}}}
    proc = run(tmp_path, "validate.yml", {"gpu1": {}, "gpu2": {}}, groups, "-e",
               json.dumps({"sglang_validate_rollout": "upgrade", "sglang_validate_roles": [], "upgrade_batch": batch}))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "TASK [Check the rollout's batch size (upgrade_batch)]" in proc.stdout
    assert "TASK [Check that every canary is a GPU host (upgrade_canary_group)]" in proc.stdout


def test_a_host_with_its_previous_release_on_disk_passes_the_rollback_checks(tmp_path) -> None:
    previous = fake_release(tmp_path / "opt" / "releases" / "r1")
    built = {"r1": {"dir": str(previous), "sglang_dir": str(previous / "venv" / "lib" / "site-packages" / "sglang")}}
    proc = run(tmp_path, "validate.yml", {"gpu1": local_facts(built, "/opt/sglang/releases/r2", str(previous))}, None,
               "-e", json.dumps({"sglang_validate_rollout": "rollback", "sglang_validate_roles": []}))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "TASK [Check that the previous release is still on the host (ansible_local.sglang_build)]" in proc.stdout
    assert re.search(r"gpu1\s*:\s*ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", proc.stdout), proc.stdout[-2000:]
