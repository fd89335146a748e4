"""The release root and the models root are each set in one place (role sglang_common) and every role
moves with them; no role keeps a copy (issue 41).

Statically: no role but sglang_common writes either root in its defaults, vars, tasks, handlers,
templates or argument specs, and none declares a variable that defaults to one of them but
gpu_preflight_model_path (where its free-space check looks, which may be another path). Then for real,
with ansible-playbook on this machine (local connection, no host change): a play that loads every role
reads the paths each role resolves, first with the defaults, then with only sglang_common_release_root
and sglang_common_models_root set in the inventory's group_vars/all; and the check each role's
validation runs (taken from its tasks/validate.yml as written) refuses the copy an earlier version kept,
naming the shared variable to set instead.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
import yaml

from repo import ROLES
from roles_alone import tasks_of

DEFAULT_RELEASE_ROOT = "/opt/sglang"
DEFAULT_MODELS_ROOT = "/srv/models"
# The literal roots as a role would hard-code them (/opt/sglang-model and /opt/sglang-router are other trees).
LITERAL = re.compile(r"/opt/sglang(?![-\w])|/srv/models(?![-\w])")

# What each role resolves from the shared roots: (expression in the role's context, the root it must be under).
RELEASE = "release"
MODELS = "models"
RESOLVED = {
    "sglang_build_tools": ("__sglang_build_tools", RELEASE),
    "sglang_build_plan_root": ("__sglang_build_spec.root", RELEASE),
    "sglang_server_current": ("__sglang_server_current", RELEASE),
    "sglang_server_tools_dir": ("__sglang_server_tools_dir", RELEASE),
    "sglang_bench_tools_dir": ("sglang_bench_tools_dir", RELEASE),
    "gpu_preflight_model_path": ("gpu_preflight_model_path", MODELS),
}
# The copies earlier versions kept, each refused by its role's validation: (role, the old name, the shared variable).
AGREEMENT = [
    ("sglang_build", "sglang_build_root", "sglang_common_release_root"),
    ("sglang_server", "sglang_server_install_root", "sglang_common_release_root"),
    ("sglang_model", "sglang_model_root", "sglang_common_models_root"),
    ("sglang_monitoring", "sglang_monitoring_models_dir", "sglang_common_models_root"),
]
# The roles that read the shared roots.
READERS = ["gpu_preflight", "sglang_bench", "sglang_build", "sglang_model", "sglang_monitoring", "sglang_server"]


def test_no_role_but_sglang_common_writes_a_root():
    found = []
    for path in sorted(ROLES.glob("*/*/**/*")):
        rel = path.relative_to(ROLES)
        if not path.is_file() or rel.parts[0] == "sglang_common" or rel.parts[1] not in (
                "defaults", "vars", "tasks", "handlers", "templates", "meta"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if LITERAL.search(line) and not line.lstrip().startswith("#"):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []


def playbook(tmp_path, body: str, group_vars: dict) -> subprocess.CompletedProcess:
    """Run a play on localhost (local connection) with group_vars/all of the inventory."""
    tmp_path.mkdir(exist_ok=True)
    inv = tmp_path / "inventory"
    (inv / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (inv / "group_vars" / "all" / "shared.yml").write_text(yaml.safe_dump(group_vars) if group_vars else "---\n")
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}))
    play = tmp_path / "play.yml"
    play.write_text(body)
    (tmp_path / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROLES), ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    return subprocess.run(["ansible-playbook", "-i", str(inv), str(play), "--skip-tags", "loaded_only"], check=False,
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def roles_play(tasks: list) -> str:
    """Every role of RESOLVED loaded (its defaults and vars in the play), none of its tasks run."""
    return yaml.safe_dump([{
        "name": "Load the roles, run none of their tasks", "hosts": "localhost", "gather_facts": False,
        "roles": [{"role": r, "tags": ["loaded_only"]} for r in READERS],
        "tasks": tasks}], sort_keys=False)


def resolved(tmp_path, group_vars: dict) -> dict:
    out = tmp_path / "resolved.json"
    body = roles_play([{"name": "Write what each role resolves", "tags": ["always"], "ansible.builtin.copy": {
        "dest": str(out), "mode": "0644",
        "content": "{{ __resolved | to_json }}"},
        "vars": {"__resolved": {k: "{{ " + expr + " }}" for k, (expr, _) in RESOLVED.items()}}}])
    proc = playbook(tmp_path, body, group_vars)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return json.loads(out.read_text())


def test_the_roles_resolve_the_shared_defaults(tmp_path):
    values = resolved(tmp_path, {})
    roots = {RELEASE: DEFAULT_RELEASE_ROOT, MODELS: DEFAULT_MODELS_ROOT}
    for key, (_, root) in RESOLVED.items():
        assert values[key] == roots[root] or values[key].startswith(roots[root] + "/"), (key, values[key])


def test_setting_each_root_in_sglang_common_moves_every_role(tmp_path):
    roots = {RELEASE: "/data/sglang-releases", MODELS: "/data/weights"}
    values = resolved(tmp_path, {"sglang_common_release_root": roots[RELEASE],
                                 "sglang_common_models_root": roots[MODELS]})
    moved = {key: values[key] for key, (_, root) in RESOLVED.items()
             if values[key] == roots[root] or values[key].startswith(roots[root] + "/")}
    assert moved == values, f"left behind: {set(values) - set(moved)}"
    assert not [v for v in values.values() if LITERAL.search(v)]


def test_no_role_keeps_a_copy_of_a_shared_root():
    copies = []
    for path in sorted(ROLES.glob("*/defaults/main.yml")):
        if path.parts[-3] == "sglang_common":
            continue
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            if name != "gpu_preflight_model_path" and str(value).strip() in (
                    "{{ sglang_common_release_root }}", "{{ sglang_common_models_root }}"):
                copies.append(f"{path.parts[-3]}: {name}")
    assert copies == []


def old_name_task(role: str, variable: str) -> dict:
    """The check of role's tasks/validate.yml that refuses the old copy, as written."""
    tasks = yaml.safe_load((ROLES / role / "tasks" / "validate.yml").read_text())
    found = [t for t in tasks if "ansible.builtin.assert" in t
             and str(t["ansible.builtin.assert"]["that"]).strip() == f"{variable} is not defined"]
    assert len(found) == 1, f"{role}: no single check that refuses {variable}"
    return dict(found[0], tags=["always"], ignore_errors=True)


@pytest.mark.parametrize(("role", "variable", "shared"), AGREEMENT)
def test_the_copy_an_earlier_version_kept_fails_validation_naming_the_shared_root(tmp_path, role, variable, shared):
    task = old_name_task(role, variable)
    play = yaml.safe_dump([{"name": "Run the check", "hosts": "localhost", "gather_facts": False,
                            "roles": [{"role": role, "tags": ["loaded_only"]}], "tasks": [task]}], sort_keys=False)
    shared_only = playbook(tmp_path / "shared", play, {shared: "/data/x"})
    assert shared_only.returncode == 0 and "failed=0" in shared_only.stdout and "...ignoring" not in shared_only.stdout, \
        shared_only.stdout[-3000:]
    old = playbook(tmp_path / "old", play, {shared: "/data/x", variable: "/data/y"})
    text = " ".join(old.stdout.split())
    assert "...ignoring" in text, text[-3000:]
    assert f"{variable} is no longer read: set {shared} instead" in text, text[-3000:]


# The names a task can reach the release root's current link through.
RELEASE_ROOT_NAMES = re.compile(r"__sglang_server_current|"
                                r"sglang_common_release_root|/opt/sglang(?![-\w])")
LINK_WRITERS = ("ansible.builtin.file", "ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.copy")


def test_only_sglang_build_writes_the_release_roots_current_link():
    """<release root>/current has one writer, role sglang_build (activation and tasks_from: switch); the
    server's rollback and the playbooks go through that entry point."""
    writers = []
    for role in sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir()):
        for path, task in tasks_of(role):
            for module in LINK_WRITERS:
                args = task.get(module)
                text = json.dumps(args)
                if args is None or "current" not in text or not RELEASE_ROOT_NAMES.search(text):
                    continue
                if module == "ansible.builtin.file" and args.get("state") != "link":
                    continue
                if module in ("ansible.builtin.command", "ansible.builtin.shell") and not re.search(r"\b(mv|ln)\b", text):
                    continue
                if module == "ansible.builtin.copy" and "current" not in str(args.get("dest", "")):
                    continue
                writers.append(f"{role}/tasks/{path.name}: {task.get('name')}")
    assert writers and all(w.startswith("sglang_build/") for w in writers), writers
    assert sorted({w.split(":")[0] for w in writers}) == ["sglang_build/tasks/activate.yml", "sglang_build/tasks/switch.yml"]
