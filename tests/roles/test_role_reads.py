"""What a role reads of another role (issue 41): the other role's local fact (ansible_local.<role>) or the shared
settings of sglang_common, never another role's variable or a fact another role published with set_fact.

Read statically from what Jinja evaluates in every role's tasks, handlers, defaults, vars and templates (the
insides of {{ }} and {% %}, and whole conditionals; not a mapping's keys, not plain text such as a message naming
a setting for the user), and the names its filter plugins quote (they read hostvars by name): each name with another role's
prefix that the other role defines as a variable (see defined(): a metric or file name that only looks like one
is no read). Allowed: sglang_common_* (the shared settings), and the variables a task hands to the role it includes
(include_role/import_role `vars:` keys: that role's documented inputs). STILL_READ listed the reads the facts
redesign had left, each with what published it; it is empty now. The test fails on a read that is not allowed
and not listed (a new cross-role read), and on a listed read that is gone (move it off the list: it keeps the
list true).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict

import yaml

from repo import ROLES
from roles_alone import INCLUDES, included_name, role_names, tasks_of

ROLE_NAMES = role_names()
PREFIXES = sorted(ROLE_NAMES, key=len, reverse=True)
NAME = re.compile(r"(?<![\w.])(?:__)?((?:sglang_[a-z0-9]+|nvidia_cuda|gpu_preflight)_[a-z0-9_]+)")
# Still read across roles: (reader, name) -> what publishes it. Empty since issue 41's last slices (the server's
# endpoint and the router's ports are local facts): the test guards it, a new cross-role read fails.
STILL_READ: dict[tuple[str, str], str] = {}


def owner(name: str) -> str | None:
    return next((p for p in PREFIXES if name.startswith(p + "_")), None)


def defined(role: str) -> set[str]:
    """The variables a role defines: its defaults, vars, every entry point's options, its set_fact and register
    names. A name with the role's prefix that is none of them (a metric the monitoring's own exporter writes,
    sglang_bench_tokens_per_second; a file name) is no read of the role's variables."""
    base = ROLES / role
    names: set[str] = set()
    for rel in ("defaults/main.yml", "vars/main.yml"):
        path = base / rel
        if path.is_file():
            names.update(yaml.safe_load(path.read_text()) or {})
    specs = base / "meta" / "argument_specs.yml"
    if specs.is_file():
        for entry in (yaml.safe_load(specs.read_text()) or {}).get("argument_specs", {}).values():
            names.update((entry or {}).get("options") or {})
    for _path, task in tasks_of(role):
        facts = task.get("ansible.builtin.set_fact")
        names.update(facts if isinstance(facts, dict) else {})
        if isinstance(task.get("register"), str):
            names.add(task["register"])
    return {name.lstrip("_") for name in names}


DEFINED = {role: defined(role) for role in ROLE_NAMES}


# What Jinja evaluates: the insides of {{ }} and {% %}, and whole conditionals (when, that, ...). A mapping's
# keys (the settings an include passes, a fact's name) and plain text (a message that names a setting for
# the user) read nothing.
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
CONDITIONALS = {"when", "that", "until", "changed_when", "failed_when"}


def expressions(data, conditional: bool = False) -> str:
    if isinstance(data, dict):
        return " ".join(expressions(v, k in CONDITIONALS) for k, v in data.items())
    if isinstance(data, list):
        return " ".join(expressions(v, conditional) for v in data)
    if isinstance(data, str):
        return data if conditional else " ".join(JINJA.findall(data))
    return ""


def reads(role: str) -> dict[str, set[str]]:
    """Each name with another role's prefix the role reads, and the files it is read in."""
    found: dict[str, set[str]] = defaultdict(set)

    def scan(text: str, where: str) -> None:
        for name in NAME.findall(text):
            who = owner(name)
            if who and who != role and who != "sglang_common" and name in DEFINED.get(who, ()):
                found[name].add(where)

    for path, task in tasks_of(role):
        task = {k: v for k, v in task.items() if k not in ("block", "rescue", "always")}  # their tasks come one by one
        for module in INCLUDES:
            args = task.get(module)
            if isinstance(args, dict) and isinstance(task.get("vars"), dict):
                target = included_name(role, args["name"])
                # the included role's inputs: their names are allowed, their values are read here
                task["vars"] = {("" if k.startswith(target + "_") else k): v for k, v in task["vars"].items()}
        scan(expressions(task), f"tasks/{path.name}")
    base = ROLES / role
    for folder in ("handlers", "defaults", "vars", "templates"):
        for path in sorted((base / folder).rglob("*")) if (base / folder).is_dir() else []:
            if path.is_file():
                text = path.read_text()
                if path.suffix in (".yml", ".yaml"):
                    text = expressions(yaml.safe_load(text))  # comments are not reads
                else:
                    text = " ".join(JINJA.findall(re.sub(r"\{#.*?#\}", "", text, flags=re.S)))
                scan(text, f"{folder}/{path.name}")
    # Filters get hostvars and read other hosts' variables by name: the names they quote.
    for path in sorted((base / "filter_plugins").glob("*.py")) if (base / "filter_plugins").is_dir() else []:
        scan(" ".join(re.findall(r"""["']([a-z0-9_]+)["']""", path.read_text())), f"filter_plugins/{path.name}")
    return found


def test_roles_read_no_other_roles_variables_but_those_still_listed():
    seen = {}
    for role in ROLE_NAMES:
        for name, where in reads(role).items():
            seen[(role, name)] = sorted(where)
    new = {k: v for k, v in seen.items() if k not in STILL_READ}
    assert new == {}, ("a role reads another role's variable (read its ansible_local fact or sglang_common "
                       f"instead): {new}")
    gone = sorted(set(STILL_READ) - set(seen))
    assert gone == [], f"no longer read across roles: take them off STILL_READ: {gone}"


def test_no_role_sets_a_fact_under_another_roles_prefix():
    wrong = []
    for role in ROLE_NAMES:
        for path, task in tasks_of(role):
            facts = task.get("ansible.builtin.set_fact")
            for name in facts if isinstance(facts, dict) else {}:
                who = owner(name.lstrip("_"))
                if who and who != role:
                    wrong.append(f"{role}/tasks/{path.name}: {name}")
    assert wrong == []


# A read of the endpoint role sglang_server records (ansible_local.sglang_server.endpoint): a template's
# `.sglang_server | default({})).endpoint`, a filter's `['sglang_server']['endpoint']` or `'sglang_server').get('endpoint'`.
ENDPOINT_READ = re.compile(r"sglang_server\W{1,30}?(?:(?:default\(\{\}\)|get)\W{1,6})?endpoint\b")


def endpoint_readers(role: str) -> set[str]:
    """The files of a role that read the server's recorded endpoint: what Jinja evaluates in its tasks, defaults,
    vars and templates (comments and messages aside), and the code of its Python (docstrings and comments aside)."""
    base = ROLES / role
    files = set()
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(base)
        if not path.is_file() or rel.parts[0] in ("meta", "files") or path.name == "README.md":
            continue
        if path.suffix in (".yml", ".yaml"):
            text = expressions(yaml.safe_load(path.read_text()))
        elif path.suffix == ".py":
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                body = getattr(node, "body", None)
                if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                        and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                    body[0] = ast.Pass()  # the docstring
            text = ast.unparse(tree)
        else:
            text = " ".join(JINJA.findall(re.sub(r"\{#.*?#\}", "", path.read_text())))
        if ENDPOINT_READ.search(text):
            files.add(str(rel))
    return files


def test_each_role_reads_the_servers_endpoint_in_one_place():
    """Issue 41's walk of the endpoint: a role that needs where a server serves reads role sglang_server's record in
    one file (a filter plugin or its vars) and hands on what it found; its tasks never read the record again."""
    readers = {role: endpoint_readers(role) for role in ROLE_NAMES if role != "sglang_server"}
    assert {role: files for role, files in readers.items() if len(files) > 1} == {}
    # The scan finds the readers there are (were the pattern to miss them, the check above would pass on nothing).
    assert readers["sglang_router"] == {"filter_plugins/sglang_router.py"}
    assert readers["sglang_monitoring"] == {"filter_plugins/sglang_monitoring.py"}
    assert readers["sglang_bench"] == {"vars/main.yml"}
