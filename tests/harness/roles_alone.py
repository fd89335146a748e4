"""Each role copied alone with the roles it declares, for tests that run a role without the rest.

A role declares another by ``meta/main.yml`` dependencies or by an ``include_role``/``import_role``
naming it (directly or through a variable of its defaults). ``closure(role)`` is the role and every
role it declares, transitively. ``main()`` writes a roles path holding exactly one role's closure:
molecule's create step (molecule/resources/create.yml) writes
``<ephemeral>/harness/roles-alone/sglang_server`` and molecule/sglang_server runs with that
``ANSIBLE_ROLES_PATH``, so its converge, idempotence and verify prove that the role works with only
what it declares (issue 14). The copy is made fresh on every call (small: the server role's closure
is under 1 MB).

Usage: python3 tests/harness/roles_alone.py ROLE DEST   # DEST: the roles path to write
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import yaml

from repo import ROLES
from steps import StepFailed, guarded

INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role")


def role_names() -> list[str]:
    return sorted(p.name for p in ROLES.iterdir() if (p / "meta" / "main.yml").is_file())


def tasks_of(role: str):
    """(file, task) for every task of the role, blocks flattened."""
    def walk(items, path):
        for task in items or []:
            if not isinstance(task, dict):
                continue
            yield path, task
            for key in ("block", "rescue", "always"):
                yield from walk(task.get(key), path)
    for path in sorted((ROLES / role / "tasks").glob("*.yml")):
        yield from walk(yaml.safe_load(path.read_text()), path)


def defaults_of(role: str) -> dict:
    path = ROLES / role / "defaults" / "main.yml"
    return yaml.safe_load(path.read_text()) or {} if path.is_file() else {}


def included_name(role: str, name: str) -> str:
    """The role an include names: literally, or through one variable of the role's defaults."""
    match = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", name)
    return defaults_of(role)[match.group(1)] if match else name


def included_roles(role: str) -> set[str]:
    return {included_name(role, task[module]["name"])
            for _path, task in tasks_of(role) for module in INCLUDES if module in task}


def meta_dependencies(role: str) -> set[str]:
    meta = yaml.safe_load((ROLES / role / "meta" / "main.yml").read_text())
    return {d["role"] if isinstance(d, dict) else d for d in meta.get("dependencies") or []}


def declared(role: str) -> set[str]:
    return meta_dependencies(role) | included_roles(role)


def closure(role: str) -> set[str]:
    seen, todo = set(), [role]
    while todo:
        r = todo.pop()
        if r not in seen:
            seen.add(r)
            todo.extend(declared(r))
    return seen


def copy_closure(role: str, dest: Path) -> None:
    """dest/<name> for every role of role's closure, nothing else."""
    for name in sorted(closure(role)):
        shutil.copytree(ROLES / name, dest / name, symlinks=True)


def build(role: str, dest: Path) -> Path:
    if role not in role_names():
        raise StepFailed(f"no role {role!r} under {ROLES}")
    shutil.rmtree(dest, ignore_errors=True)
    copy_closure(role, dest)
    return dest


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    print(build(sys.argv[1], Path(sys.argv[2])))
    return 0


if __name__ == "__main__":
    sys.exit(guarded("roles-alone", main))
