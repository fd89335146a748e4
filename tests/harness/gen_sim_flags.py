#!/usr/bin/env python3
"""Generate molecule/resources/roles/sglang_simulator/files/sglang_sim/flags.json: the flag table of `sglang.launch_server`.

Why: the simulator (molecule/resources/roles/sglang_simulator/files/sglang_sim/) must accept exactly the flags a real SGLang
release accepts and reject the rest, without SGLang installed (it runs on bare test
hosts).  Copying the flags by hand would drift; so this script reads SGLang's own
`ServerArgs.add_cli_args()` out of the release's source distribution with `ast`
(nothing from SGLang is imported or executed) and writes a data table that the
simulator turns back into an argparse parser.  tests/roles/sglang_server/test_sim_flags.py
regenerates the table from the pinned sdist and fails if the checked-in copy differs.

Besides the flags, the table holds the ServerArgs dataclass field names in order and the
renames of ServerArgs.from_cli_args (`--tp-size` parses into tensor_parallel_size, which
becomes the field tp_size): /get_server_info reports fields, not argparse dests.

What is recorded per `parser.add_argument(...)` call, in source order (argparse's
prefix matching depends on it): option strings, dest, kind of action, value type,
nargs, const, choices, required, and the default (`ServerArgs.x` is read from the
dataclass field; a flag without `default=` has no "default" key, i.e. argparse's None).  Choices that name constants,
class attributes or other modules (e.g. `ReasoningParser.DetectorMap.keys()`) are
resolved through the sdist's own modules.  Anything the script does not understand
(a new action class, a new type function, a choices or default expression it cannot
evaluate) is an error, so a new SGLang release cannot be mis-described silently.

Usage:
    python tests/harness/gen_sim_flags.py --sdist ~/.cache/sglang-ansible/sdists/sglang-0.5.9.tar.gz
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

from repo import ROOT

SERVER_ARGS_MODULE = "sglang.srt.server_args"
DEFAULT_OUT = ROOT / "molecule" / "resources" / "roles" / "sglang_simulator" / "files" / "sglang_sim" / "flags.json"

# argparse `type=` callables used by SGLang, by the name the simulator knows them by.
TYPE_NAMES = {
    "str": "str",
    "int": "int",
    "float": "float",
    "json.loads": "json",
    "json_list_type": "json_list",
    "nullable_str": "nullable_str",
}
# argparse `action=` values used by SGLang, by the simulator's name for them.
ACTION_KINDS = {
    None: "store",
    "store_true": "store_true",
    "DeprecatedAction": "deprecated",
    "LoRAPathAction": "lora_paths",
}
_NOTHING = object()


class Unresolvable(Exception):
    """An expression in SGLang's source that this script cannot evaluate statically."""


class SdistSources:
    """Python modules of one sdist, parsed on demand, addressed by dotted module name."""

    def __init__(self, sdist: Path) -> None:
        self._tar = tarfile.open(sdist, "r:gz")
        names = self._tar.getnames()
        self.top = names[0].split("/")[0]
        self._names = set(names)
        self._trees: dict[str, ast.Module] = {}

    def text(self, relpath: str) -> str:
        member = self._tar.extractfile(f"{self.top}/{relpath}")
        if member is None:
            raise FileNotFoundError(relpath)
        return member.read().decode("utf-8")

    def version(self) -> str:
        for line in self.text("PKG-INFO").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
        raise ValueError("PKG-INFO has no Version")

    def module(self, name: str) -> ast.Module:
        if name not in self._trees:
            rel = name.replace(".", "/")
            for cand in (f"{rel}.py", f"{rel}/__init__.py"):
                if f"{self.top}/{cand}" in self._names:
                    self._trees[name] = ast.parse(self.text(cand))
                    break
            else:
                raise Unresolvable(f"module {name} is not in the sdist")
        return self._trees[name]


class Resolver:
    """Evaluates the small expression language SGLang uses for choices and defaults."""

    def __init__(self, src: SdistSources) -> None:
        self.src = src

    def _module_binding(self, module: str, name: str) -> tuple[str, ast.AST]:
        """The node bound to `name` at module level: (module it lives in, node)."""
        found: ast.AST | None = None
        for stmt in self.src.module(module).body:
            if isinstance(stmt, ast.Assign):
                if any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                    found = stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if stmt.target.id == name and stmt.value is not None:
                    found = stmt.value
            elif isinstance(stmt, ast.ClassDef) and stmt.name == name:
                found = stmt
            elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
                for alias in stmt.names:
                    if (alias.asname or alias.name) == name:
                        return self._module_binding(stmt.module, alias.name)
        if found is None:
            raise Unresolvable(f"{module}.{name}")
        return module, found

    @staticmethod
    def _class_attr(cls: ast.ClassDef, attr: str) -> ast.AST:
        value: ast.AST | None = None
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if stmt.target.id == attr:
                    value = stmt.value
            elif isinstance(stmt, ast.Assign):
                if any(isinstance(t, ast.Name) and t.id == attr for t in stmt.targets):
                    value = stmt.value
        if value is None:
            raise Unresolvable(f"{cls.name}.{attr}")
        return value

    def node(self, module: str, expr: ast.AST, local: dict[str, ast.AST]) -> tuple[str, ast.AST]:
        """Follow names and `Class.attr` references to the defining expression."""
        if isinstance(expr, ast.Name):
            if expr.id in local:
                return self.node(module, local[expr.id], local)
            mod, found = self._module_binding(module, expr.id)
            return self.node(mod, found, {}) if not isinstance(found, ast.ClassDef) else (mod, found)
        if isinstance(expr, ast.Attribute):
            mod, owner = self.node(module, expr.value, local)
            if isinstance(owner, ast.ClassDef):
                return self.node(mod, self._class_attr(owner, expr.attr), {})
            raise Unresolvable(ast.unparse(expr))
        return module, expr

    def value(self, module: str, expr: ast.AST, local: dict[str, ast.AST]) -> Any:
        module, expr = self.node(module, expr, local)
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
            out: list[Any] = []
            for elt in expr.elts:
                if isinstance(elt, ast.Starred):
                    out.extend(self.value(module, elt.value, local))
                else:
                    out.append(self.value(module, elt, local))
            return sorted(out, key=str) if isinstance(expr, ast.Set) else out
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            return -self.value(module, expr.operand, local)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Mult)):
            left = self.value(module, expr.left, local)
            right = self.value(module, expr.right, local)
            return left + right if isinstance(expr.op, ast.Add) else left * right
        if isinstance(expr, ast.Subscript):
            return self.value(module, expr.value, local)[self.value(module, expr.slice, local)]
        if isinstance(expr, ast.Call) and not expr.keywords:
            func = expr.func
            if isinstance(func, ast.Name) and func.id in ("list", "tuple", "sorted") and len(expr.args) == 1:
                items = self.value(module, expr.args[0], local)
                return sorted(items, key=str) if func.id == "sorted" else list(items)
            if isinstance(func, ast.Attribute) and func.attr == "keys" and not expr.args:
                mod, mapping = self.node(module, func.value, local)
                if isinstance(mapping, ast.Dict) and None not in mapping.keys:
                    return [self.value(mod, k, {}) for k in mapping.keys]  # type: ignore[arg-type]
        raise Unresolvable(ast.unparse(expr))


def _add_cli_args(tree: ast.Module) -> tuple[ast.ClassDef, ast.FunctionDef]:
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == "ServerArgs":
            for item in stmt.body:
                if isinstance(item, ast.FunctionDef) and item.name == "add_cli_args":
                    return stmt, item
    raise ValueError("ServerArgs.add_cli_args not found")


def _cli_renames(cls: ast.ClassDef) -> dict[str, str]:
    """`args.tp_size = args.tensor_parallel_size` lines of ServerArgs.from_cli_args: {cli dest: field}."""
    renames: dict[str, str] = {}
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "from_cli_args":
            for stmt in item.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Attribute)
                    and isinstance(stmt.value, ast.Attribute)
                ):
                    renames[stmt.value.attr] = stmt.targets[0].attr
            return renames
    raise ValueError("ServerArgs.from_cli_args not found")


def _default_dest(options: list[str]) -> str:
    """argparse's rule: the first long option, dashes to underscores."""
    longs = [o for o in options if o.startswith("--")]
    return (longs[0] if longs else options[0]).lstrip("-").replace("-", "_")


def _flag_entry(call: ast.Call, cls: ast.ClassDef, res: Resolver, local: dict[str, ast.AST]) -> dict[str, Any]:
    options = [res.value(SERVER_ARGS_MODULE, a, local) for a in call.args]
    kw = {k.arg: k.value for k in call.keywords}
    unknown = set(kw) - {"help", "type", "default", "action", "choices", "nargs", "required", "dest", "const"}
    if unknown:
        raise Unresolvable(f"{options}: unsupported add_argument keywords {sorted(unknown)}")

    action_src = None
    if "action" in kw:
        action_node = kw["action"]
        action_src = action_node.value if isinstance(action_node, ast.Constant) else ast.unparse(action_node)
    if action_src not in ACTION_KINDS:
        raise Unresolvable(f"{options}: unknown action {action_src!r}")
    entry: dict[str, Any] = {
        "options": options,
        "dest": res.value(SERVER_ARGS_MODULE, kw["dest"], local) if "dest" in kw else _default_dest(options),
        "kind": ACTION_KINDS[action_src],
    }
    if "type" in kw:
        type_src = ast.unparse(kw["type"])
        if type_src not in TYPE_NAMES:
            raise Unresolvable(f"{options}: unknown type {type_src}")
        entry["type"] = TYPE_NAMES[type_src]
    for key in ("nargs", "const", "choices", "required"):
        if key in kw:
            entry[key] = res.value(SERVER_ARGS_MODULE, kw[key], local)
    default = _resolve_default(kw.get("default"), cls, res, local)
    if entry["kind"] == "store_true" and default is _NOTHING:
        default = False
    if default is not _NOTHING:
        entry["default"] = default
    return entry


def _resolve_default(node: ast.AST | None, cls: ast.ClassDef, res: Resolver, local: dict[str, ast.AST]) -> Any:
    """The default's value, or _NOTHING where add_argument() sets none (argparse: None)."""
    if node is None:
        return _NOTHING
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ServerArgs":
        node = Resolver._class_attr(cls, node.attr)
    return res.value(SERVER_ARGS_MODULE, node, local)


def build_table(sdist: Path) -> dict[str, Any]:
    """The flag table of the sdist's `sglang.launch_server`, as JSON-ready data."""
    src = SdistSources(sdist)
    res = Resolver(src)
    server_args_text = src.text("sglang/srt/server_args.py")
    cls, func = _add_cli_args(src.module(SERVER_ARGS_MODULE))
    local: dict[str, ast.AST] = {}
    flags: list[dict[str, Any]] = []
    for stmt in func.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            local[stmt.targets[0].id] = stmt.value
            continue
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr == "add_argument"
        ):
            flags.append(_flag_entry(stmt.value, cls, res, local))
            continue
        raise Unresolvable(f"line {stmt.lineno}: unexpected statement in add_cli_args")
    fields = [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    renames = _cli_renames(cls)
    dests = {f["dest"] for f in flags} | set(renames.values())
    missing = [f for f in fields if f not in dests]
    if missing:  # from_cli_args() reads every field from the namespace
        raise Unresolvable(f"ServerArgs fields without a flag: {missing}")
    return {
        "generated_by": "tests/harness/gen_sim_flags.py",
        "sglang_version": src.version(),
        "source": f"{sdist.name}:sglang/srt/server_args.py",
        "server_args_sha256": hashlib.sha256(server_args_text.encode("utf-8")).hexdigest(),
        "flags": flags,
        "cli_renames": renames,
        "server_args_fields": fields,
    }


def render(table: dict[str, Any]) -> str:
    """Stable text form (one flag per line) so diffs between releases stay readable."""
    head = {k: v for k, v in table.items() if k not in ("flags", "server_args_fields")}
    lines = [json.dumps(f, sort_keys=True) for f in table["flags"]]
    body = json.dumps(head, indent=1, sort_keys=True)[:-2]
    fields = json.dumps(table["server_args_fields"])
    return body + ',\n "flags": [\n  ' + ",\n  ".join(lines) + '\n ],\n "server_args_fields": ' + fields + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, required=True, help="sglang-X.tar.gz from `pip download --no-binary :all:`")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output file (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    try:
        table = build_table(args.sdist)
    except Unresolvable as exc:
        print(f"gen_sim_flags: cannot describe a flag statically: {exc}", file=sys.stderr)
        return 1
    args.out.write_text(render(table), encoding="utf-8")
    print(f"wrote {len(table['flags'])} flags of sglang {table['sglang_version']} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
