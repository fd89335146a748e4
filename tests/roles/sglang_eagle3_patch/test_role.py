"""The sglang_eagle3_patch role, run for real with ansible-playbook on copies of real releases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repo import ROOT as REPO
from repo import load

support = load("tests/roles/sglang_eagle3_patch/patch_support.py", "sglang_eagle3_patch_support")
KIMI, PATCHED_UPSTREAM, UNPATCHED = support.KIMI, support.PATCHED_UPSTREAM, support.UNPATCHED
LAUNCH_CHECK = support.LAUNCH_CHECK

PATCH_TASK = "Add the delegation methods the wrapper lacks to srt/models/kimi_k25.py"


def playbook(tmp_path: Path, tasks_from: str = "main") -> Path:
    path = tmp_path / f"play-{tasks_from}.yml"
    path.write_text(
        "- name: Apply the role\n"
        "  hosts: all\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - name: Run sglang_eagle3_patch\n"
        "      ansible.builtin.include_role:\n"
        "        name: sglang_eagle3_patch\n"
        f"        tasks_from: {tasks_from}\n"
    )
    return path


def ansible(tmp_path: Path, play: Path, variables: dict, *options: str, inventory: str = "localhost,") -> dict:
    """Run ansible-playbook locally; return the json callback's report."""
    varfile = tmp_path / "vars.json"
    varfile.write_text(json.dumps(variables))
    # A configuration of its own: the json callback alone on stdout, this repository's roles.
    config = tmp_path / "ansible.cfg"
    config.write_text(
        f"[defaults]\nroles_path = {REPO / 'roles'}\nstdout_callback = ansible.builtin.json\n"
        f"local_tmp = {tmp_path / 'ansible-tmp'}\nretry_files_enabled = false\n"
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(config), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-c", "local", "-i", inventory, str(play),
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{varfile}", *options],
        capture_output=True, text=True, cwd=REPO, env=env,
    )
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"ansible-playbook printed no JSON (rc {done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}")


def stats(report: dict) -> dict:
    return next(iter(report["stats"].values()))


def task_result(report: dict, name: str) -> dict:
    for play in report["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].endswith(name):
                return next(iter(task["hosts"].values()))
    raise AssertionError(f"task {name!r} did not run")


def failure_message(report: dict) -> str:
    for play in report["plays"]:
        for task in play["tasks"]:
            for result in task["hosts"].values():
                if result.get("failed"):
                    return result.get("msg", "")
    return ""


def role_vars(tree: Path, tmp_path: Path, **extra) -> dict:
    return {
        "sglang_eagle3_patch_source_dir": str(tree),
        "sglang_eagle3_patch_python": sys.executable,
        "sglang_eagle3_patch_tools_dir": str(tmp_path / "tools"),
        # The role's local fact here, not in this machine's /etc/ansible/facts.d (an extra variable outranks vars/).
        "__sglang_eagle3_patch_fact_file": str(tmp_path / "facts.d" / "sglang_eagle3_patch.fact"),
        **extra,
    }


def test_role_patches_once_then_changes_nothing(tree_copy, tmp_path):
    tree = tree_copy(UNPATCHED)
    play = playbook(tmp_path)
    first = ansible(tmp_path, play, role_vars(tree, tmp_path))
    assert stats(first)["failures"] == 0, failure_message(first)
    assert task_result(first, PATCH_TASK)["changed"] is True
    checked = task_result(first, "Check that the model provides what SGLang calls for the algorithm")
    assert "kimi_k25 is ready for EAGLE3 (sglang 0.5.9)" in checked["msg"]
    patched = (tree / KIMI).read_bytes()
    assert b"# BEGIN sglang_eagle3_patch" in patched
    second = ansible(tmp_path, play, role_vars(tree, tmp_path))
    assert stats(second)["failures"] == 0
    assert stats(second)["changed"] == 0
    assert (tree / KIMI).read_bytes() == patched


def test_check_mode_reports_the_change_and_leaves_the_file(tree_copy, tmp_path):
    tree = tree_copy(UNPATCHED)
    before = (tree / KIMI).read_bytes()
    report = ansible(tmp_path, playbook(tmp_path), role_vars(tree, tmp_path), "--check", "--diff")
    assert stats(report)["failures"] == 0, failure_message(report)
    result = task_result(report, PATCH_TASK)
    assert result["changed"] is True
    assert "def set_eagle3_layers_to_capture(self, layer_ids=None):" in result["diff"]["after"]
    assert (tree / KIMI).read_bytes() == before
    assert not (tmp_path / "tools").exists()


def test_release_with_upstream_methods_is_left_alone(tree_copy, tmp_path):
    tree = tree_copy(PATCHED_UPSTREAM)
    before = (tree / KIMI).read_bytes()
    report = ansible(tmp_path, playbook(tmp_path), role_vars(tree, tmp_path))
    assert stats(report)["failures"] == 0, failure_message(report)
    assert task_result(report, PATCH_TASK)["changed"] is False
    assert (tree / KIMI).read_bytes() == before


# Bad inputs: (the inventory's values, the variable the failure must name). One run for all of them (below).
BAD_INPUTS = {
    "empty-class": ({"sglang_eagle3_patch_class": ""}, "sglang_eagle3_patch_class"),
    "missing-dir": ({"sglang_eagle3_patch_source_dir": "/nonexistent/sglang"}, "sglang_eagle3_patch_source_dir"),
    "missing-file": ({"sglang_eagle3_patch_file": "srt/models/no_such_model.py"}, "sglang_eagle3_patch_file"),
    "methods-not-a-list": ({"sglang_eagle3_patch_methods": "set_eagle3_layers_to_capture"}, "sglang_eagle3_patch_methods"),
}
NO_SOURCE_DIR = "no-source-dir"  # sglang_eagle3_patch_source_dir not set at all


def host_failure(report: dict, host: str) -> str:
    """The message of the host's failed task in a run of several hosts."""
    for play in report["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get(host) or {}
            if result.get("failed"):
                return result.get("msg", "")
    return ""


@pytest.fixture(scope="module")
def bad_batch(farm, tmp_path_factory):
    """Every bad input in one ansible-playbook run, one local inventory host per case with the case's values as
    its host variables (its own tree and tools directory), as tests/harness/bad_inputs.py runs a role's bad inputs
    on the test hosts: (the json callback's report, the run's directory, {case: (tree, the patched file's bytes)}).
    The role's fact file is an extra variable (it is the role's vars/, which an inventory does not outrank), one
    for every host: no case may write it."""
    tmp = tmp_path_factory.mktemp("bad-inputs")
    hosts, trees = {}, {}
    for case, (override, _named) in BAD_INPUTS.items():
        tree = farm(UNPATCHED, tmp / case)
        trees[case] = (tree, (tree / KIMI).read_bytes())
        hosts[case] = {"sglang_eagle3_patch_source_dir": str(tree), "sglang_eagle3_patch_python": sys.executable,
                       "sglang_eagle3_patch_tools_dir": str(tmp / case / "tools"), **override}
    hosts[NO_SOURCE_DIR] = {"sglang_eagle3_patch_tools_dir": str(tmp / NO_SOURCE_DIR / "tools")}
    inventory = tmp / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": hosts, "vars": {"ansible_connection": "local"}}}))
    report = ansible(tmp, playbook(tmp), {"__sglang_eagle3_patch_fact_file": str(tmp / "facts.d" / "sglang_eagle3_patch.fact")},
                     inventory=str(inventory))
    return report, tmp, trees


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_fails_before_any_change_naming_the_variable(bad_batch, case):
    report, tmp, trees = bad_batch
    assert report["stats"][case]["failures"] == 1, report["stats"]
    assert BAD_INPUTS[case][1] in host_failure(report, case)
    assert report["stats"][case]["changed"] == 0
    tree, before = trees[case]
    assert (tree / KIMI).read_bytes() == before
    assert not (tmp / case / "tools").exists()
    assert not (tmp / "facts.d").exists()


def test_missing_source_dir_is_named(bad_batch):
    report, _tmp, _trees = bad_batch
    assert report["stats"][NO_SOURCE_DIR]["failures"] == 1, report["stats"]
    assert "sglang_eagle3_patch_source_dir" in host_failure(report, NO_SOURCE_DIR)


def test_check_entry_point_stops_a_known_crash(tree_copy, tmp_path):
    tree = tree_copy(PATCHED_UPSTREAM)
    launch = {
        "tp_size": 8,
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "/models/draft",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "enable_flashinfer_allreduce_fusion": True,
        "extra_args": ["--enable-torch-symm-mem"],
    }
    variables = role_vars(
        tree, tmp_path, sglang_eagle3_patch_launch_args=launch, sglang_eagle3_patch_gpu_arch="12.0",
        sglang_eagle3_patch_gpu_count=8
    )
    report = ansible(tmp_path, playbook(tmp_path, "check"), variables)
    assert stats(report)["failures"] == 1
    assert failure_message(report).startswith("Launch settings known to fail: torch-symm-mem-keyerror-sm120:")
    warning = task_result(report, "Show launch settings that SGLang ignores")
    assert "flashinfer-allreduce-fusion-noop-sm120" in json.dumps(warning)
    launch["extra_args"] = []
    passing = ansible(tmp_path, playbook(tmp_path, "check"), variables)
    assert stats(passing)["failures"] == 0, failure_message(passing)


def test_check_entry_point_refuses_a_draft_tree_the_backend_cannot_run(tree_copy, tmp_path):
    """The model (sglang_eagle3_patch_check_model, kimi_k25: MLA) reaches the launch check: topk 4 on SM100,
    where the release's default MLA backend has no tree attention, fails naming the variable, and records nothing
    for the tuner (the role's local fact is written only after a launch check that passed); on SM120 (triton) it
    passes."""
    tree = tree_copy(PATCHED_UPSTREAM)
    launch = {"tp_size": 8, "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/models/draft",
              "speculative_num_steps": 3, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}
    report = ansible(tmp_path, playbook(tmp_path, "check"), role_vars(
        tree, tmp_path, sglang_eagle3_patch_launch_args=launch, sglang_eagle3_patch_gpu_arch="10.0",
        sglang_eagle3_patch_gpu_count=8))
    assert stats(report)["failures"] == 1
    message = failure_message(report)
    assert message.startswith("Launch settings known to fail: spec-topk-above-1-mla-backend:")
    assert "sglang_server_speculative_eagle_topk" in message
    assert not (tmp_path / "facts.d" / "sglang_eagle3_patch.fact").exists()
    passing = ansible(tmp_path, playbook(tmp_path, "check"), role_vars(
        tree, tmp_path, sglang_eagle3_patch_launch_args=launch, sglang_eagle3_patch_gpu_arch="12.0",
        sglang_eagle3_patch_gpu_count=8))
    assert stats(passing)["failures"] == 0, failure_message(passing)


def test_the_check_records_the_launch_check_it_passed_for_the_tuner(tree_copy, tmp_path):
    """After a launch check that passed, the role's local fact holds what the check was asked (the tuner of role
    sglang_bench asks it again about its candidates), 0600; a check without launch settings (the patch playbook's)
    leaves the record as it is. (A refused launch check records nothing:
    test_check_entry_point_refuses_a_draft_tree_the_backend_cannot_run.)"""
    tree = tree_copy(PATCHED_UPSTREAM)
    fact_file = tmp_path / "facts.d" / "sglang_eagle3_patch.fact"
    launch = {"tp_size": 8, "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/models/draft",
              "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    report = ansible(tmp_path, playbook(tmp_path, "check"), role_vars(
        tree, tmp_path, sglang_eagle3_patch_launch_args=launch, sglang_eagle3_patch_gpu_arch="10.0",
        sglang_eagle3_patch_gpu_count=8))
    assert stats(report)["failures"] == 0, failure_message(report)
    tools = tmp_path / "tools"
    assert json.loads(fact_file.read_text()) == {"schema": 1, "launch": {
        "check": str(tools / "sglang_launch_check.py"), "facts": str(tools / "sglang_launch_facts.json"),
        "sglang_dir": str(tree), "sglang_version": PATCHED_UPSTREAM, "arch": "10.0", "gpu_count": 8,
        "model": "kimi_k25", "args": launch}}
    assert oct(fact_file.stat().st_mode & 0o777) == "0o600"
    again = ansible(tmp_path, playbook(tmp_path, "check"), role_vars(
        tree, tmp_path, sglang_eagle3_patch_launch_args=launch, sglang_eagle3_patch_gpu_arch="10.0",
        sglang_eagle3_patch_gpu_count=8))
    assert stats(again)["failures"] == 0 and stats(again)["changed"] == 0, failure_message(again)
    none = ansible(tmp_path, playbook(tmp_path, "check"), role_vars(tree, tmp_path))
    assert stats(none)["failures"] == 0 and json.loads(fact_file.read_text())["launch"]["args"] == launch


def test_check_entry_point_names_missing_methods(tree_copy, tmp_path):
    tree = tree_copy(UNPATCHED)
    report = ansible(tmp_path, playbook(tmp_path, "check"), role_vars(tree, tmp_path))
    assert stats(report)["failures"] == 1
    message = failure_message(report)
    assert "KimiK25ForConditionalGeneration.set_eagle3_layers_to_capture is missing" in message
    assert "srt/model_executor/model_runner.py:" in message


def test_patch_playbook_checks_the_current_release_and_patches_nothing(tree_copy, tmp_path):
    """playbooks/patch.yml finds where the current release's sglang is (this release is not in role sglang_build's
    record: its Python is asked) and checks its model interface. The
    build is the one place a release is patched: an unpatched release fails here, naming the missing
    method, and stays byte-identical; once patched (the role's main entry, as the build runs it), it passes."""
    tree = tree_copy(UNPATCHED)
    release_dir = tmp_path / "opt" / "releases" / "r1"
    python = release_dir / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\nPYTHONPATH={tree.parent} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    (tmp_path / "opt" / "current").symlink_to(release_dir)  # linked by hand: role sglang_build recorded nothing
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu_hosts]\nlocalhost\n")
    variables = {
        "sglang_common_release_root": str(tmp_path / "opt"),
        "sglang_eagle3_patch_python": sys.executable,
        "sglang_eagle3_patch_tools_dir": str(tmp_path / "tools"),
        "ansible_become": False,
    }
    unpatched = (tree / KIMI).read_bytes()
    report = ansible(tmp_path, REPO / "playbooks" / "patch.yml", variables, inventory=str(inventory))
    assert stats(report)["failures"] == 1
    assert "KimiK25ForConditionalGeneration.set_eagle3_layers_to_capture is missing" in failure_message(report)
    assert (tree / KIMI).read_bytes() == unpatched
    built = ansible(tmp_path, playbook(tmp_path), role_vars(tree, tmp_path))
    assert stats(built)["failures"] == 0, failure_message(built)
    patched = (tree / KIMI).read_bytes()
    report = ansible(tmp_path, REPO / "playbooks" / "patch.yml", variables, inventory=str(inventory))
    assert stats(report)["failures"] == 0, failure_message(report)
    assert "kimi_k25 is ready for EAGLE3 (sglang 0.5.9)" in json.dumps(report)
    assert (tree / KIMI).read_bytes() == patched
