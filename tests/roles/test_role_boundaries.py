"""Every file a role uses comes from that role or from a role it declares (issue 14).

Read statically from the roles' task files: every `src:` of copy/template/script/unarchive and
every file or template lookup names a file of the role itself; every role a task includes is
declared (meta/main.yml dependencies, or an include_role/import_role by name, whose entry point has
an argument spec: its documented inputs); nothing reaches outside with role_path ~ '/..' and no
role holds a symlink. Then each role is copied alone with the roles it declares, transitively
(tests/harness/roles_alone.py), into an empty roles path, and runs against a test host in check mode.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
import yaml

from repo import ROLES, ROOT
from roles_alone import INCLUDES, copy_closure, included_name, role_names, tasks_of
from testhost import SNAPSHOT

ROLE_NAMES = role_names()
FILE_MODULES = {"ansible.builtin.copy": "files", "ansible.builtin.script": "files", "ansible.builtin.unarchive": "files",
                "ansible.builtin.template": "templates"}


def test_no_symlinks_and_no_reach_outside_a_role():
    links = [str(p.relative_to(ROOT)) for p in ROLES.rglob("*") if p.is_symlink()]
    assert links == []
    reaching = [str(p.relative_to(ROOT)) for p in ROLES.rglob("*.yml")
                if re.search(r"role_path\s*~\s*'/\.\.", p.read_text())]
    assert reaching == []


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_every_file_a_role_uses_is_its_own(role):
    missing = []
    for path, task in tasks_of(role):
        for module, folder in FILE_MODULES.items():
            args = task.get(module)
            if not isinstance(args, dict):
                continue
            src = args.get("src") or (args.get("cmd", "").split()[0] if module == "ansible.builtin.script" else None)
            if not src and "content" in args:  # written from content: no file of the role
                continue
            if not src or "{{" in src and src.strip().startswith("{{ item"):
                srcs = [i if isinstance(i, str) else i.get("name") for i in task.get("loop", []) or []] \
                    if isinstance(task.get("loop"), list) else []
            else:
                srcs = [src]
            for s in srcs:
                if not s or "{{" in s:
                    continue
                if not (ROLES / role / folder / s).exists():
                    missing.append(f"{path.name}: {module} {s}")
        for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks"):
            target = task.get(key)
            target = target.get("file") if isinstance(target, dict) else target
            if target and "{{" not in target and not (ROLES / role / "tasks" / target).is_file():
                missing.append(f"{path.name}: {key} {target}")
    assert missing == [], f"{role} uses files it does not hold: {missing}"


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_included_roles_are_roles_with_a_documented_entry_point(role):
    for path, task in tasks_of(role):
        for module in INCLUDES:
            if module not in task:
                continue
            args = task[module]
            name = included_name(role, args["name"])
            entry = args.get("tasks_from", "main")
            specs = yaml.safe_load((ROLES / name / "meta" / "argument_specs.yml").read_text())["argument_specs"]
            assert entry in specs, f"{role} ({path.name}) includes {name} tasks_from {entry}: no argument spec for it"


VALIDATE_PLAY = """
- hosts: gpu_hosts
  become: false
  tasks:
    - ansible.builtin.include_role:
        name: {role}
        tasks_from: {entry}
"""
# What a role's validation reads from outside the role: the demo inventory's settings (its Hub is
# the TEST DOUBLE the test host serves on its loopback), and the local facts the test host has (none of
# another role's here: the readers' checks leave what is not recorded yet to their own runs).


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_a_role_copied_with_only_what_it_declares_runs_against_a_test_host(role, tmp_path, testhost):
    """Copied into an empty roles path with its declared roles (transitively), the role's validate
    entry point (or main, for a role without one) runs in check mode against a test host (one
    container for the module): every file and role it needs is there, and the host is unchanged.
    molecule sglang_server converges and verifies a role this way for real."""
    roles = tmp_path / "roles"
    copy_closure(role, roles)
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    # sglang_common runs nothing by itself: its tools entry point is what other roles call.
    entry = "validate" if "validate" in specs else "tools" if role == "sglang_common" else "main"
    (tmp_path / "play.yml").write_text(VALIDATE_PLAY.format(role=role, entry=entry)
                                       + "      vars: {sglang_common_tools_dir: /opt/roles-alone-tools}\n")
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "group_vars").symlink_to(ROOT / "inventory" / "demo" / "group_vars")
    host = {"ansible_connection": "sglang_testhost", "ansible_python_interpreter": "/usr/bin/python3"}
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "gpu_hosts": {"hosts": {testhost.name: host}},
        "sglang_routers": {"hosts": {testhost.name: {"sglang_router_host": "127.0.0.1",
                                                     "sglang_router_port": 30080}}}}}}))
    (tmp_path / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(roles), ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"),
               ANSIBLE_CONNECTION_PLUGINS=str(ROOT / "tests" / "harness" / "connection_plugins"),
               ANSIBLE_NOCOLOR="1")
    before = testhost.sh(SNAPSHOT).stdout
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), "--check", str(tmp_path / "play.yml")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "was not found" not in out and "Could not find or access" not in out
    assert testhost.sh(SNAPSHOT).stdout == before, "check mode changed the host"
