"""The entry points other plays use: tasks_from validate (a validate-first play, before any host changes)
and tasks_from check (the server's pre-start check of a model directory), run with Ansible on a local host."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml
from model_kit import ALLOW, IGNORE

from repo import ROOT

ANSIBLE = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin" / "ansible-playbook"


def play(tmp_path, tasks_from, play_vars, check=False):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_hosts": {"hosts": {"gpu1": {
        "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}}}}}}))
    book = tmp_path / f"{tasks_from}.yml"
    book.write_text(yaml.safe_dump([{"name": f"sglang_model {tasks_from}", "hosts": "gpu_hosts", "gather_facts": False,
                                     "tasks": [{"name": "Include", "ansible.builtin.include_role": {
                                         "name": "sglang_model", "tasks_from": tasks_from}, "vars": play_vars}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run([str(ANSIBLE), "-i", str(inv), str(book), *(["--check"] if check else [])], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_validate_on_its_own_changes_nothing(tmp_path, double):
    settings = {"sglang_common_models_root": str(tmp_path / "models"), "sglang_model_hub_endpoint": double.url,
                "sglang_model_min_free_gb": 0, "sglang_model_server_writable_paths": [str(tmp_path / "home")],
                "sglang_model_models": [{"name": "target", "repo_id": "test-org/tiny", "revision": "main",
                                         "allow_patterns": ALLOW, "ignore_patterns": IGNORE}]}
    rc, out = play(tmp_path, "validate", settings)  # not even check mode: it only reads
    assert rc == 0, out[-3000:]
    assert "changed=0" in out and not (tmp_path / "models").exists()
    rc, out = play(tmp_path, "validate", {**settings, "sglang_model_models": [
        {"name": "target", "repo_id": "test-org/tiny", "revision": "nope"}]})
    assert rc != 0 and "revision 'nope' does not exist in test-org/tiny" in out


def test_check_accepts_a_staged_directory_and_refuses_others(stager, hub_root, tmp_path):
    import synthetic_model
    rev = synthetic_model.load_revision(hub_root, "test-org/tiny")
    staged = Path(stager.ok(stager.spec(rev))["path"])
    current = staged.parent / "current"
    current.symlink_to(rev.sha)
    rc, out = play(tmp_path, "check", {"sglang_model_check_paths": [str(current), str(staged)]}, check=True)
    assert rc == 0, out[-3000:]
    assert "changed=0" in out
    plain = tmp_path / "downloaded-by-hand"
    plain.mkdir()
    rc, out = play(tmp_path, "check", {"sglang_model_check_paths": [str(current), str(plain)]})
    assert rc != 0
    assert f"{plain}: no manifest beside it (not staged by sglang_model, or its staging is incomplete)" in out
    assert "stage it first (playbooks/model.yml)" in out
    os.chmod(staged / "config.json", 0o644)
    (staged / "config.json").write_text("{}")
    rc, out = play(tmp_path, "check", {"sglang_model_check_paths": [str(current)]})
    assert rc != 0 and re.search(r"1 of \d+ files differ from the manifest", out) and "config.json (size" in out


def test_check_mode_on_a_new_host_reports_what_it_would_stage_and_changes_nothing(tmp_path, double):
    """The whole playbooks/model.yml with --check --diff against a host that has nothing yet."""
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {
        "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3", "ansible_become": False,
        "sglang_common_models_root": str(tmp_path / "models"), "sglang_model_install_root": str(tmp_path / "opt"),
        "sglang_model_hub_endpoint": double.url, "sglang_model_min_free_gb": 0,
        "sglang_model_server_writable_paths": [str(tmp_path / "home")],
        "sglang_model_models": [{"name": "target", "repo_id": "test-org/tiny", "revision": "main",
                                 "allow_patterns": ALLOW, "ignore_patterns": IGNORE}]},
        "children": {"gpu_hosts": {"hosts": {"gpu1": {}}}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run([str(ANSIBLE), "-i", str(inv), str(ROOT / "playbooks" / "model.yml"), "--check", "--diff"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Would stage target (test-org/tiny@" in out and "to fetch) into " + str(tmp_path / "models") in out
    assert not (tmp_path / "models").exists() and not (tmp_path / "opt").exists()
    assert double.stats()["total_bytes"] == 0
