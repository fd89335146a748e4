"""Each role README's variable table, generated from the role's meta/argument_specs.yml and defaults/main.yml.

The table sits in roles/<role>/README.md between the two marker lines BEGIN and END (below). It
documents the ``main`` entry point's options, one row each: the name, the spec's type (and element
type), the default as defaults/main.yml sets it (the spec's own default where defaults/ has none;
``required`` or unset otherwise) and the spec's ``description`` (a list of strings is joined), with the
spec's ``choices``. After it, the role's other entry points are listed by their short description and
the variables only they take. Edit the spec and defaults/, never the table: the README test
(tests/roles/test_readmes.py) fails when a README's table differs from what this makes.

Usage: python3 tests/harness/readme_vars.py [--check] [ROLE ...]
    writes the tables (every role by default); --check writes nothing and exits 1 naming each
    README whose table is out of date.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"

BEGIN = ("<!-- BEGIN VARIABLES (generated from meta/argument_specs.yml and defaults/main.yml by "
         "tests/harness/readme_vars.py; edit those) -->")
END = "<!-- END VARIABLES -->"
UNSET = object()


@dataclass
class Role:
    name: str
    specs: dict[str, Any]
    defaults: dict[str, Any]

    @classmethod
    def load(cls, name: str) -> Role:
        path = ROLES / name
        specs = yaml.safe_load((path / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        defaults_file = path / "defaults" / "main.yml"
        defaults = (yaml.safe_load(defaults_file.read_text()) or {}) if defaults_file.exists() else {}
        return cls(name, specs, defaults)

    @property
    def main_options(self) -> dict[str, Any]:
        return (self.specs.get("main") or {}).get("options") or {}

    def default(self, var: str, option: dict[str, Any]) -> Any:
        """The value a play sees when nobody sets ``var``: defaults/main.yml's, else the spec's, else UNSET."""
        if var in self.defaults:
            return self.defaults[var]
        return option.get("default", UNSET)


def role_names() -> list[str]:
    return sorted(p.parent.parent.name for p in ROLES.glob("*/meta/argument_specs.yml"))


def text(value: Any) -> str:
    """A spec description (a string or a list of strings) as one line."""
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(text(item) for item in value)
    return " ".join(str(value).split())


def cell(value: str) -> str:
    return value.replace("|", "\\|")


def code(value: str) -> str:
    """Inline code for a table cell (a backtick in the value takes a longer fence)."""
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def yaml_inline(value: Any) -> str:
    """``value`` as YAML in one line, as it would be written in an inventory (flow style, strings plain
    where YAML reads them back as the same string, else double-quoted)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{yaml_inline(key)}: {yaml_inline(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(yaml_inline(item) for item in value) + "]"
    if isinstance(value, str):
        plain = value and value == value.strip() and not value.startswith(("{", "[", "*", "&", "!", "'", '"', "%", "@", "`"))
        if plain:
            try:
                plain = yaml.safe_load(f"[{value}]") == [value]
            except yaml.YAMLError:
                plain = False
        return value if plain else json.dumps(value, ensure_ascii=False)
    return yaml.safe_dump(value).removesuffix("\n...\n").strip()


def show_default(role: Role, var: str, option: dict[str, Any]) -> str:
    if option.get("required"):
        return "required"
    value = role.default(var, option)
    if value is UNSET:
        return "unset"
    return code(yaml_inline(value))


def show_type(option: dict[str, Any]) -> str:
    kind = option.get("type", "str")
    if option.get("elements"):
        kind = f"{kind} of {option['elements']}"
    return kind


def describe(option: dict[str, Any]) -> str:
    words = text(option.get("description"))
    if option.get("choices"):
        words += " Choices: " + ", ".join(code(yaml_inline(choice)) for choice in option["choices"]) + "."
    if option.get("no_log"):
        words += " Secret (no_log): from the vault."
    return words.strip()


def table(role: Role) -> list[str]:
    lines = ["| Variable | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for var, option in role.main_options.items():
        option = option or {}
        lines.append(f"| `{var}` | {show_type(option)} | {cell(show_default(role, var, option))} | {cell(describe(option))} |")
    return lines


def other_entry_points(role: Role) -> list[str]:
    """The other entry points, one line each, and one table of the variables only they take."""
    main = role.main_options
    lines: list[str] = []
    own: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for entry, spec in role.specs.items():
        if entry == "main":
            continue
        spec = spec or {}
        options = spec.get("options") or {}
        line = f"- `tasks_from: {entry}`: {text(spec.get('short_description'))}"
        shared = [var for var in options if var in main]
        extra = [var for var in options if var not in main]
        takes = []
        if shared:
            takes.append("the variables above" if len(shared) == len(main) else f"{len(shared)} of the variables above")
        if extra:
            takes.append(", ".join(f"`{var}`" for var in extra))
        line += f" Takes {' and '.join(takes)}." if takes else " Takes no variables."
        lines.append(line)
        for var in extra:
            own.setdefault(var, (options[var] or {}, []))[1].append(entry)
    if not lines:
        return []
    lines = ["", "Other entry points (`include_role` with `tasks_from`), each with its own argument spec:", "", *lines]
    if own:
        lines += ["", "| Variable of another entry point | Entry points | Type | Default | Description |",
                  "| --- | --- | --- | --- | --- |"]
        for var, (option, entries) in own.items():
            lines.append(f"| `{var}` | {', '.join(entries)} | {show_type(option)} | "
                         f"{cell(show_default(role, var, option))} | {cell(describe(option))} |")
    return lines


def render(role: Role) -> str:
    """The generated block, markers included."""
    return "\n".join([BEGIN, "", *table(role), *other_entry_points(role), "", END])


def current_block(readme: str) -> str | None:
    """The README's block between the markers (markers included), or None without them."""
    start = readme.find(BEGIN)
    end = readme.find(END, start + 1) if start >= 0 else -1
    if start < 0 or end < 0:
        return None
    return readme[start:end + len(END)]


def updated(readme: str, block: str) -> str:
    old = current_block(readme)
    if old is None:
        raise ValueError(f"no marker lines {BEGIN!r} ... {END!r}")
    return readme.replace(old, block, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a table is out of date")
    parser.add_argument("roles", nargs="*", help="roles (default: every role with an argument spec)")
    args = parser.parse_args(argv)
    stale = []
    for name in args.roles or role_names():
        path = ROLES / name / "README.md"
        readme = path.read_text()
        block = render(Role.load(name))
        try:
            new = updated(readme, block)
        except ValueError as error:
            print(f"{path.relative_to(ROOT)}: {error}", file=sys.stderr)
            return 2
        if new != readme:
            stale.append(path)
            if not args.check:
                path.write_text(new)
    for path in stale:
        print(f"{path.relative_to(ROOT)}: {'out of date' if args.check else 'written'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
