"""The role READMEs against the roles: their variable tables, defaults and examples.

- Each roles/<role>/README.md carries the variable table tests/harness/readme_vars.py generates from
  meta/argument_specs.yml and defaults/main.yml, unchanged (rewrite it with
  `python3 tests/harness/readme_vars.py`).
- Read back from the README itself (not through the generator): every variable of defaults/main.yml
  and of every entry point's argument spec has a row, and the default a row shows is the one
  defaults/main.yml sets; the spec's own defaults agree with defaults/main.yml.
- Every YAML example in the READMEs (the roles', the top-level one, files/ and templates/) parses,
  names only variables the role declares, and its literal values pass the role's argument spec
  (type, choices) and say no Hub id where the spec wants an absolute path.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import pytest
import yaml

import readme_vars
from repo import ROOT

ROLE_NAMES = readme_vars.role_names()
ROLES = {name: readme_vars.Role.load(name) for name in ROLE_NAMES}
# Longest first: sglang_server_* is sglang_server's, not a role "sglang"'s.
PREFIXES = sorted(ROLE_NAMES, key=len, reverse=True)
READMES = sorted([ROOT / "README.md", ROOT / "files" / "README.md", ROOT / "templates" / "README.md",
                  *(ROOT / "roles" / name / "README.md" for name in ROLE_NAMES)])
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)


def all_options(role: readme_vars.Role) -> dict[str, dict[str, Any]]:
    """Every entry point's options, the first spec of each name."""
    options: dict[str, dict[str, Any]] = {}
    for spec in role.specs.values():
        for var, option in ((spec or {}).get("options") or {}).items():
            options.setdefault(var, option or {})
    return options


def readme(name: str) -> str:
    return (ROOT / "roles" / name / "README.md").read_text()


def table_rows(text: str) -> dict[str, list[str]]:
    """The README's table rows that start with a variable name: {name: [cells...]}."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"^\| `([a-z][a-z0-9_]*)` \|", line)
        if match:
            cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows.setdefault(match.group(1), cells)
    return rows


def shown_default(cells: list[str]) -> Any:
    """The value a row's Default column shows (the column left of the description)."""
    default = cells[-2]
    if default in ("required", "unset"):
        return default
    match = re.fullmatch(r"(`+) ?(.*?) ?\1", default)
    if not match:
        return f"(not one code span) {default}"
    try:
        return yaml.safe_load(match.group(2))
    except yaml.YAMLError:
        return f"(not YAML) {default}"


@pytest.mark.parametrize("name", ROLE_NAMES)
def test_variable_table_is_generated(name: str) -> None:
    text = readme(name)
    block = readme_vars.current_block(text)
    assert block is not None, (f"roles/{name}/README.md has no generated variable table: put the lines "
                               f"{readme_vars.BEGIN} and {readme_vars.END} where it goes and run "
                               "python3 tests/harness/readme_vars.py")
    expected = readme_vars.render(ROLES[name])
    diff = "\n".join(difflib.unified_diff(block.splitlines(), expected.splitlines(), "README.md", "generated", lineterm="", n=0))
    assert block == expected, (f"roles/{name}/README.md's variable table differs from its argument spec and defaults "
                               f"(run python3 tests/harness/readme_vars.py {name}):\n{diff[:4000]}")


@pytest.mark.parametrize("name", ROLE_NAMES)
def test_every_variable_has_a_row_with_its_default(name: str) -> None:
    role = ROLES[name]
    rows = table_rows(readme(name))
    options = all_options(role)
    missing = sorted({var for var in [*options, *role.defaults] if var not in rows})
    wrong = {}
    for var, value in role.defaults.items():
        if var in rows and shown_default(rows[var]) != value:
            wrong[var] = (shown_default(rows[var]), value)
    for var, option in options.items():
        if var in rows and var not in role.defaults and option.get("required") and shown_default(rows[var]) != "required":
            wrong[var] = (shown_default(rows[var]), "required")
    problems = []
    if missing:
        problems.append(f"no row for {missing}")
    if wrong:
        problems.append(f"wrong defaults (shown, defaults/main.yml): {wrong}")
    assert not problems, f"roles/{name}/README.md: " + "; ".join(problems)


@pytest.mark.parametrize("name", ROLE_NAMES)
def test_spec_defaults_agree_with_defaults_file(name: str) -> None:
    role = ROLES[name]
    options = all_options(role)
    undeclared = sorted(set(role.defaults) - set(options))
    assert not undeclared, f"roles/{name}/defaults/main.yml sets variables no argument spec declares: {undeclared}"
    differ = {var: (option["default"], role.defaults[var]) for var, option in options.items()
              if "default" in option and var in role.defaults and option["default"] != role.defaults[var]}
    assert not differ, f"roles/{name}: spec default and defaults/main.yml differ (spec, defaults): {differ}"


def owner(var: str) -> str | None:
    for name in PREFIXES:
        if var.startswith(name + "_"):
            return name
    return None


def assignments(node: Any) -> list[tuple[str, Any]]:
    """Every (key, value) of a mapping key that is a role's variable name, at any depth."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and owner(key):
                found.append((key, value))
            found.extend(assignments(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(assignments(item))
    return found


def templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(templated(key) or templated(item) for key, item in value.items())
    if isinstance(value, list):
        return any(templated(item) for item in value)
    return False


def spec_errors(var: str, value: Any, option: dict[str, Any]) -> list[str]:
    """What the role's argument spec says about a literal value (ansible-core's own validator)."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    spec = {key: item for key, item in option.items() if key not in ("description", "default", "required", "no_log")}
    result = ArgumentSpecValidator({var: spec}).validate({var: value})
    errors = [str(error) for error in result.errors]
    words = readme_vars.text(option.get("description")).lower()
    # "absolute" as the rule (not one alternative: "a name ... or an absolute path").
    if "absolute" in words and not re.search(r"\bor (an )?absolute", words):
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item and not item.startswith("/"):
                errors.append(f"{var}: {item!r} is not an absolute path (the spec: {option.get('description')})")
    return errors


def examples() -> list[tuple[str, str, str]]:
    found = []
    for path in READMES:
        for number, match in enumerate(FENCE.finditer(path.read_text())):
            found.append((f"{path.relative_to(ROOT)}#{number}", match.group(1), match.group(2)))
    return found


EXAMPLES = examples()


@pytest.mark.parametrize(("where", "body"), [(where, body) for where, lang, body in EXAMPLES if lang == "yaml"],
                         ids=[where for where, lang, _ in EXAMPLES if lang == "yaml"])
def test_yaml_example(where: str, body: str) -> None:
    documents = list(yaml.safe_load_all(body))
    errors = []
    for var, value in assignments(documents):
        name = owner(var)
        option = all_options(ROLES[name]).get(var)
        if option is None:
            errors.append(f"{var}: role {name} declares no such variable")
        elif not templated(value):
            errors.extend(spec_errors(var, value, option))
    assert not errors, f"{where}: " + "; ".join(errors)


def test_extra_vars_in_readmes_exist() -> None:
    """`-e name=value` in the READMEs' prose and commands names a variable a role declares."""
    unknown = []
    for path in READMES:
        for var in re.findall(r"-e ([a-z][a-z0-9_]*)=", path.read_text()):
            name = owner(var)
            if name and var not in all_options(ROLES[name]):
                unknown.append(f"{path.relative_to(ROOT)}: {var}")
    assert not unknown, f"-e with variables no role declares: {unknown}"
