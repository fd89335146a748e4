#!/usr/bin/env python3
"""What the roles need to know of one SGLang release, read from its own wheel: never imported.

The wheel is read with zipfile and its Python with ast, so any release can be read on the
controller (no torch, no GPU, no SGLang dependency installed). What is read, and from where:

flags          every command-line flag of `sglang.launch_server`: the `parser.add_argument` calls of
               srt/server_args.py, and the dataclass fields annotated `A[T, "help"]` / `A[T, Arg(...)]`
               that `add_cli_args_from_dataclass` turns into flags (ServerArgs itself up to 0.5.17, the
               namespace classes of srt/arg_groups/fields/ from 0.5.18 on); names, aliases, destination,
               type, default (and `fallback`, the value resolution gives a field left at None), choices,
               action; `deprecated` holds the help text of a deprecated flag (its action is a
               Deprecated*Action, or its help says so).
endpoints      the HTTP routes of srt/entrypoints/http_server.py and of the routers it includes:
               path, methods, and `deprecated` (the handler says so; `use` names its replacement).
parsers        the tool-call and reasoning parser names (FunctionCallParser.ToolCallParserEnum,
               ReasoningParser.DetectorMap) and the deprecated ones (a `deprecated_*parsers` mapping).
attention_defaults
               the automatic attention backend (the function documented "Auto select the fastest
               attention backend"), its rules for MLA and MHA models as written, and what they give
               per compute capability where the conditions name the platform alone. Model-specific
               overrides (DeepSeek-V3 on SM100: trtllm_mla) are not read.
env            for each named environment variable (those this project renders): its declaration in
               srt/environ.py, and every reference elsewhere: read (`envs.X.get()`, os.getenv ...),
               set, a removal notice, or a mention in a message.
flashinfer_sampling
               what srt/layers/sampler.py takes from `flashinfer.sampling` (FlashInfer JIT-compiles
               that module at the first non-greedy request: the build compiles it ahead of time).
architectures  every model architecture the release serves natively (EntryClass of srt/models/*.py).

A reader that finds nothing where the release must have something (no flag, no route) raises
SourceError naming the file: a release whose source it cannot read is refused, never half read.

Only the standard library: the command that makes release sets (sglang_release_set.py) uses it.
Usage: python3 sglang_release_source.py WHEEL [--env NAME ...]   (prints the JSON)
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

PKG = "sglang/srt/"
ROUTE_METHODS = {"get", "post", "put", "delete", "patch", "head", "options", "api_route", "websocket"}
# Conditions of the attention default that name a platform, and the compute capabilities they mean.
PLATFORM_WORDS = [(r"hopper|sm_?90", {"9.0"}), (r"sm_?10\d|sm10x|sm100_or_sm110", {"10.0"}),
                  (r"sm_?12\d|sm12x", {"12.0"}), (r"blackwell", {"10.0", "12.0"}),
                  (r"\bis_(?:hip|mps|npu|xpu|musa|cpu)\b|is_out_of_tree|\bis_mps\(|\bis_hip\(", {"other"})]
PLATFORM_PREDICATE = re.compile(r"(?:get_platform\(\)\.|current_platform\.)?is_(?:hopper\w*|sm\d+\w*|sm1\dx\w*|"
                                r"blackwell\w*|hip|mps|npu|xpu|musa|cpu)(?:\(\))?")
CAPABILITIES = ("9.0", "10.0", "12.0")
# A help text that says its own flag is deprecated: "Deprecated. Use ...", "[Deprecated] ...", "(Deprecated: ...",
# "Note: --this-flag is deprecated now" (not "the fallback to that flag ... is deprecated").
DEPRECATED_HELP = re.compile(r"^\W*deprecated\b|\[deprecated\]|\b(?:this (?:flag|option|argument)|{flag}) is deprecated",
                             re.I)


class SourceError(Exception):
    """The release's source does not say what the roles need; the message names the file."""


class Wheel:
    """A wheel's members, its Python files parsed on demand."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.zf = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile) as err:
            raise SourceError(f"{self.path.name} is not a readable wheel: {err}") from err
        self.names = set(self.zf.namelist())
        self._trees: dict[str, ast.Module] = {}

    def has(self, member: str) -> bool:
        return member in self.names

    def text(self, member: str) -> str:
        if member not in self.names:
            raise SourceError(f"{self.path.name} has no {member}")
        return self.zf.read(member).decode("utf-8-sig", errors="replace")

    def tree(self, member: str) -> ast.Module:
        if member not in self._trees:
            try:
                self._trees[member] = ast.parse(self.text(member), filename=member)
            except SyntaxError as err:
                raise SourceError(f"{self.path.name}: {member} does not parse: {err}") from err
        return self._trees[member]

    def py_files(self, prefix: str) -> list[str]:
        return sorted(n for n in self.names if n.startswith(prefix) and n.endswith(".py"))


def short(member: str) -> str:
    """sglang/srt/server_args.py -> srt/server_args.py (as the README and notes name files)."""
    return member.split("/", 1)[1] if member.startswith("sglang/") else member


def string_of(node: ast.AST | None) -> str | None:
    """A string literal, an implicit concatenation of them, or an f-string (its text with {expr})."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = string_of(node.left), string_of(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                       for v in node.values)
    return None


def name_of(node: ast.AST | None) -> str | None:
    """`x` or `a.b.x` -> the source text; None for anything else."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return ast.unparse(node)
    return None


class Constants:
    """Module-level constant collections (choice lists), resolved across the files read."""

    def __init__(self):
        self.raw: dict[str, ast.AST] = {}

    def add(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.raw.setdefault(node.targets[0].id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.raw.setdefault(node.target.id, node.value)

    def value(self, node: ast.AST, depth: int = 0):
        """A JSON value for node: a literal, a resolvable constant, else {"expr": its source}."""
        got = self._resolve(node, depth)
        return got if got is not _UNKNOWN else {"expr": ast.unparse(node)}

    def _resolve(self, node: ast.AST, depth: int):
        if depth > 8:
            return _UNKNOWN
        try:
            value = ast.literal_eval(node)
            if isinstance(value, (set, frozenset, tuple)):
                value = sorted(value, key=str) if isinstance(value, (set, frozenset)) else list(value)
            json.dumps(value)
            return value
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
        if isinstance(node, ast.Name) and node.id in self.raw:
            return self._resolve(self.raw[node.id], depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Sub, ast.Pow, ast.FloorDiv)):
            left, right = self._resolve(node.left, depth + 1), self._resolve(node.right, depth + 1)
            if all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right)) \
                    and not (isinstance(node.op, ast.Pow) and abs(right) > 64):
                ops = {ast.Mult: lambda a, b: a * b, ast.Sub: lambda a, b: a - b, ast.Pow: lambda a, b: a ** b,
                       ast.FloorDiv: lambda a, b: a // b if b else _UNKNOWN}
                return ops[type(node.op)](left, right)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
            seq = self._resolve(node.value, depth + 1)
            if isinstance(seq, list) and -len(seq) <= node.slice.value < len(seq):
                return seq[node.slice.value]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.BitOr)):
            left, right = self._resolve(node.left, depth + 1), self._resolve(node.right, depth + 1)
            if all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right)):
                return left + right
            if isinstance(left, list) and isinstance(right, list):
                return left + [v for v in right if v not in left] if isinstance(node.op, ast.BitOr) else left + right
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    inner = self._resolve(elt.value, depth + 1)
                    if not isinstance(inner, list):
                        return _UNKNOWN
                    items += inner
                else:
                    inner = self._resolve(elt, depth + 1)
                    if inner is _UNKNOWN:
                        return _UNKNOWN
                    items.append(inner)
            return sorted(set(items), key=str) if isinstance(node, ast.Set) else items
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple", "sorted") \
                and len(node.args) == 1 and not node.keywords:
            inner = self._resolve(node.args[0], depth + 1)
            if isinstance(inner, dict):
                inner = list(inner)
            return sorted(inner, key=str) if node.func.id == "sorted" and isinstance(inner, list) else inner
        if isinstance(node, ast.Call) and (name_of(node.func) or "").split(".")[-1] == "field":
            kw = _kw(node)
            if "default" in kw:
                return self._resolve(kw["default"], depth + 1)
            factory = name_of(kw.get("default_factory"))
            if factory in ("list", "dict", "tuple", "set"):
                return {} if factory == "dict" else []
        if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
            keys = [self._resolve(k, depth + 1) for k in node.keys]
            if all(isinstance(k, str) for k in keys):
                return {k: True for k in keys}
        return _UNKNOWN


_UNKNOWN = object()


# ----- flags -----
def _kw(call: ast.Call) -> dict[str, ast.AST]:
    return {k.arg: k.value for k in call.keywords if k.arg}


def _deprecation(action: str | None, help_text: str | None, flag: str) -> str | None:
    said = re.compile(DEPRECATED_HELP.pattern.replace("{flag}", re.escape(flag)), re.I)
    if (action and "deprecat" in action.lower()) or (help_text and said.search(help_text)):
        return (help_text or f"deprecated ({action})").strip()
    return None


def _compact(entry: dict) -> dict:
    """The entry without its unset keys (None) and without an empty alias list."""
    return {k: v for k, v in entry.items() if v is not None and not (k == "aliases" and not v)}


def _argparse_implied(name: str, entry: dict, has_default: bool) -> dict:
    """What argparse adds by itself: a store_true flag's False default (store_false: True), and
    the --no-X spelling of a BooleanOptionalAction."""
    action = entry.get("action") or ""
    kind = re.sub(r"(?i)action$", "", action.split(".")[-1]).lower()
    if not has_default and kind.endswith(("store_true", "storetrue", "store_false", "storefalse")):
        entry["default"] = not kind.endswith(("store_true", "storetrue"))
    if action.endswith("BooleanOptionalAction"):
        entry["aliases"] = [*entry.get("aliases", []), "--no-" + name.lstrip("-")]
    return entry


def _field_defaults(cls: ast.ClassDef, consts: Constants) -> dict:
    out = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = consts.value(node.value)
    return out


def _annotated_field(node: ast.AnnAssign) -> tuple[ast.AST, ast.AST | None] | None:
    """`name: A[T, meta...] = v` -> (T, the help string or Arg(...) call); None when not annotated so."""
    ann = node.annotation
    if not (isinstance(ann, ast.Subscript) and (name_of(ann.value) or "").split(".")[-1] in ("A", "Annotated")):
        return None
    parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    if len(parts) < 2:
        return None
    for meta in parts[1:]:
        if string_of(meta) is not None:
            return parts[0], meta
        if isinstance(meta, ast.Call) and (name_of(meta.func) or "").split(".")[-1] == "Arg":
            return parts[0], meta
    return parts[0], None


def _field_flag(name: str, node: ast.AnnAssign, typ: ast.AST, meta: ast.AST, consts: Constants,
                where: str) -> dict | None:
    """The flag add_cli_args_from_dataclass registers for one annotated field (None: no_cli)."""
    kw = _kw(meta) if isinstance(meta, ast.Call) else {}
    if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value is True:
        return None
    help_text = string_of(meta) if not isinstance(meta, ast.Call) else string_of(kw.get("help"))
    cli = string_of(kw.get("cli_name")) or "--" + name.replace("_", "-")
    aliases = consts.value(kw["aliases"]) if "aliases" in kw else []
    type_text = ast.unparse(typ)
    action = name_of(kw.get("action")) or string_of(kw.get("action"))
    if action is None and re.fullmatch(r"(Optional\[)?bool\]?", type_text.replace(" ", "")):
        action = "store_true"
    choices = consts.value(kw["choices"]) if "choices" in kw else None
    literal = next((n for n in ast.walk(typ) if isinstance(n, ast.Subscript)
                    and (name_of(n.value) or "").split(".")[-1] == "Literal"), None)
    if choices is None and literal is not None:
        choices = consts.value(literal.slice)
        choices = choices if isinstance(choices, list) else [choices] if not isinstance(choices, dict) else choices
    entry = {"name": cli, "aliases": aliases if isinstance(aliases, list) else [], "dest": name,
             "type": type_text, "action": action,
             "default": consts.value(node.value) if node.value is not None else None,
             "choices": choices, "nargs": string_of(kw.get("nargs")),
             # Arg(fallback=...): the value resolution gives a field left at None (0.5.18 on).
             "fallback": consts.value(kw["fallback"]) if "fallback" in kw else None,
             "deprecated": _deprecation(action, help_text, cli), "file": short(where)}
    return _compact(_argparse_implied(cli, entry, node.value is not None))


def server_flags(w: Wheel) -> dict:
    """Every flag of the release's server, keyed by its first (long) name."""
    main = PKG + "server_args.py"
    files = [main] + w.py_files(PKG + "arg_groups/")
    consts = Constants()
    for member in files:
        consts.add(w.tree(member))
    trees = {m: w.tree(m) for m in files}
    # The classes whose annotated fields become flags: ServerArgs itself, and the namespace classes
    # ServerArgs collects (0.5.18 on: _INPUT_NAMESPACES, each a class with _NS_PATH).
    field_classes: list[tuple[str, ast.ClassDef]] = []
    for member, tree in trees.items():
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            has_ns = any(isinstance(s, ast.Assign) and any(getattr(t, "id", "") == "_NS_PATH" for t in s.targets)
                         for s in cls.body)
            if (member == main and cls.name == "ServerArgs") or (member.startswith(PKG + "arg_groups/fields/") and has_ns):
                field_classes.append((member, cls))
    defaults: dict = {}
    for _, cls in field_classes:
        defaults.update(_field_defaults(cls, consts))
    flags: dict[str, dict] = {}
    for member, cls in field_classes:
        for node in cls.body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            found = _annotated_field(node)
            if not found or found[1] is None:
                continue
            flag = _field_flag(node.target.id, node, found[0], found[1], consts, member)
            if flag:
                flags.setdefault(flag.pop("name"), flag)
    for call in (n for n in ast.walk(trees[main]) if isinstance(n, ast.Call)):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        names = [string_of(a) for a in call.args]
        if not names or any(n is None or not n.startswith("-") for n in names):
            continue
        kw = _kw(call)
        default = kw.get("default")
        if default is not None:
            ref = None
            if isinstance(default, ast.Attribute) and name_of(default.value) == "ServerArgs":
                ref = default.attr
            elif isinstance(default, ast.Call) and default.args and string_of(default.args[0]) \
                    and "default" in (name_of(default.func) or ""):
                ref = string_of(default.args[0])
            default_value = defaults.get(ref, consts.value(default)) if ref else consts.value(default)
        else:
            default_value = None
        action = name_of(kw.get("action")) or string_of(kw.get("action"))
        help_text = string_of(kw.get("help"))
        entry = {
            "aliases": names[1:], "dest": string_of(kw.get("dest")) or names[0].lstrip("-").replace("-", "_"),
            "type": name_of(kw.get("type")), "action": action, "default": default_value,
            "choices": consts.value(kw["choices"]) if "choices" in kw else None,
            "nargs": string_of(kw.get("nargs")) or (consts.value(kw["nargs"]) if "nargs" in kw else None),
            "deprecated": _deprecation(action, help_text, names[0]), "file": short(main)}
        flags[names[0]] = _compact(_argparse_implied(names[0], entry, default is not None))
    if not flags or "--model-path" not in flags:
        raise SourceError(f"{w.path.name}: read {len(flags)} flags from {short(main)} and srt/arg_groups/, "
                          "none of them --model-path: this release declares its flags in a way this reader does "
                          "not know (sglang_release_source.py, server_flags)")
    return dict(sorted(flags.items()))


# ----- endpoints -----
def _route_path(node: ast.AST, consts: Constants) -> tuple[str | None, str | None]:
    """A route's path (and the environment variable that can move it)."""
    text = string_of(node)
    if text is not None:
        return text, None
    if isinstance(node, ast.Call) and (name_of(node.func) or "").endswith(("environ.get", "getenv")) and len(node.args) == 2:
        return string_of(node.args[1]), string_of(node.args[0])
    value = consts.value(node)
    return (value, None) if isinstance(value, str) else (None, None)


def _deprecated_handler(func: ast.AST) -> dict | None:
    texts = [n.value for n in ast.walk(func) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    note = next((t for t in texts if re.search(r"\bdeprecated\b", t, re.I)), None)
    if note is None:
        return None
    use = re.search(r"use\s+[`']?(/[\w/{}.:-]+)", " ".join(texts), re.I)
    return _compact({"note": " ".join(note.split())[:200], "use": use.group(1) if use else None})


def _routes(tree: ast.Module, owners: set[str], consts: Constants, where: str, prefix: str = "") -> dict:
    out: dict[str, dict] = {}

    def add(path, methods, env, handler):
        if path is None:
            return
        entry = out.setdefault(prefix + path, {"methods": [], "file": short(where)})
        entry["methods"] = sorted(set(entry["methods"]) | set(methods))
        if env:
            entry["path_env"] = env
        dep = _deprecated_handler(handler) if handler is not None else None
        if dep:
            entry["deprecated"] = dep

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                        and deco.func.attr in ROUTE_METHODS and name_of(deco.func.value) in owners and deco.args):
                    continue
                path, env = _route_path(deco.args[0], consts)
                kw = _kw(deco)
                if deco.func.attr == "api_route":
                    methods = consts.value(kw["methods"]) if "methods" in kw else ["GET"]
                    methods = methods if isinstance(methods, list) else ["?"]
                else:
                    methods = ["WEBSOCKET" if deco.func.attr == "websocket" else deco.func.attr.upper()]
                add(path, [str(m).upper() for m in methods], env, node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_api_route" \
                and name_of(node.func.value) in owners and node.args:
            path, env = _route_path(node.args[0], consts)
            kw = _kw(node)
            methods = consts.value(kw["methods"]) if "methods" in kw else ["GET"]
            add(path, [str(m).upper() for m in methods] if isinstance(methods, list) else ["?"], env, None)
    return out


def endpoints(w: Wheel) -> dict:
    """The HTTP routes of the server (http_server.py's app and the routers it includes)."""
    main = PKG + "entrypoints/http_server.py"
    tree = w.tree(main)
    consts = Constants()
    consts.add(tree)
    routes = _routes(tree, {"app"}, consts, main)
    imports = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang."):
            for alias in node.names:
                imports[alias.asname or alias.name] = (node.module, alias.name)
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "include_router"
                and name_of(call.func.value) == "app" and call.args and isinstance(call.args[0], ast.Name)):
            continue
        module, name = imports.get(call.args[0].id, (None, None))
        member = module.replace(".", "/") + ".py" if module else None
        if not member or not w.has(member):
            raise SourceError(f"{w.path.name}: {short(main)} includes router {call.args[0].id} from {module}, "
                              "which this reader cannot find")
        sub = w.tree(member)
        sub_consts = Constants()
        sub_consts.add(sub)
        for path, entry in _routes(sub, {name}, sub_consts, member, string_of(_kw(call).get("prefix")) or "").items():
            routes.setdefault(path, entry)
    # Sub-applications mounted by a function http_server.py calls with the app (Prometheus' /metrics:
    # add_prometheus_middleware(app), with --enable-metrics), found where the imported module defines it.
    called = {name_of(c.func) for c in ast.walk(tree) if isinstance(c, ast.Call)
              and any(isinstance(a, ast.Name) and a.id == "app" for a in c.args)}
    for name in sorted(n for n in called if n in imports):
        base = imports[name][0].replace(".", "/")
        candidates = [base + ".py"] + w.py_files(base + "/")
        for member in (m for m in candidates if w.has(m) and f"def {imports[name][1]}(" in w.text(m)):
            for func in (n for n in w.tree(member).body if isinstance(n, ast.FunctionDef) and n.name == imports[name][1]):
                for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
                    if (name_of(call.func) or "").split(".")[-1] == "Mount" and call.args and string_of(call.args[0]):
                        routes.setdefault(string_of(call.args[0]), {"methods": ["GET"], "file": short(member),
                                                                    "mounted_by": func.name})
    if "/generate" not in routes or "/health" not in routes:
        raise SourceError(f"{w.path.name}: found {len(routes)} routes in {short(main)}, not /generate and /health: "
                          "this release declares its routes in a way this reader does not know")
    return dict(sorted(routes.items()))


# ----- parsers -----
def _class_dict_keys(w: Wheel, member: str, cls_name: str, attr: str) -> list[str] | None:
    if not w.has(member):
        return None
    for cls in (n for n in ast.walk(w.tree(member)) if isinstance(n, ast.ClassDef) and n.name == cls_name):
        for node in cls.body:
            target = node.target if isinstance(node, ast.AnnAssign) else \
                node.targets[0] if isinstance(node, ast.Assign) else None
            if getattr(target, "id", None) == attr and isinstance(node.value, ast.Dict):
                keys = [string_of(k) for k in node.value.keys if k is not None]
                if keys and all(k is not None for k in keys):
                    return sorted(keys)
    return None


def parsers(w: Wheel) -> dict:
    tool = _class_dict_keys(w, PKG + "function_call/function_call_parser.py", "FunctionCallParser", "ToolCallParserEnum")
    reasoning = next((k for m in (PKG + "parser/reasoning_parser.py", PKG + "reasoning_parser.py")
                      if (k := _class_dict_keys(w, m, "ReasoningParser", "DetectorMap"))), None)
    if not tool or not reasoning:
        raise SourceError(f"{w.path.name}: the tool-call parsers (FunctionCallParser.ToolCallParserEnum) or the "
                          "reasoning parsers (ReasoningParser.DetectorMap) are not a literal mapping where this "
                          "reader looks (srt/function_call/function_call_parser.py, srt/parser/reasoning_parser.py)")
    deprecated: dict[str, dict] = {}
    for member in [PKG + "server_args.py"] + w.py_files(PKG + "arg_groups/"):
        for node in ast.walk(w.tree(member)):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and re.fullmatch(r"deprecated_(\w+)_parsers", node.targets[0].id) and isinstance(node.value, ast.Dict):
                kind = re.fullmatch(r"deprecated_(\w+)_parsers", node.targets[0].id).group(1)
                pairs = {string_of(k): string_of(v) for k, v in zip(node.value.keys, node.value.values, strict=True)}
                deprecated.setdefault(kind, {}).update({k: v for k, v in pairs.items() if k and v})
    return {"tool_call": tool, "reasoning": reasoning,
            "deprecated": {k: dict(sorted(v.items())) for k, v in sorted(deprecated.items())}}


# ----- attention backend defaults -----
def _platforms(cond: str) -> set[str] | None:
    found: set[str] = set()
    for pattern, caps in PLATFORM_WORDS:
        if re.search(pattern, cond, re.I):
            found |= caps
    return found or None


def _backend_values(stmts: list[ast.stmt]) -> str | None:
    """What a branch sets the backend to: `x`, `x if c else y`, or its rules in one line (`x if c; y`)."""
    rules = _rules(stmts)
    if not rules:
        return None
    return "; ".join(r["backend"] if r["when"] in ("else", "always") else f"{r['backend']} if {r['when']}"
                     for r in rules)


def _value_text(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.IfExp):
        return f"{_value_text(node.body)} if {ast.unparse(node.test)} else {_value_text(node.orelse)}"
    return ast.unparse(node)


def _rules(stmts: list[ast.stmt]) -> list[dict]:
    """The backend rules of a block, in order: {when: condition | else | always, backend}. A block
    ends at its first unconditional rule (a return or an assignment outside any if)."""
    out = []
    for st in stmts:
        if isinstance(st, ast.If):
            node: ast.stmt | None = st
            while isinstance(node, ast.If):
                value = _backend_values(node.body)
                if value is not None:
                    out.append({"when": ast.unparse(node.test), "backend": value})
                if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                    node = node.orelse[0]
                else:
                    value = _backend_values(node.orelse) if node.orelse else None
                    if value is not None:
                        out.append({"when": "else", "backend": value})
                    node = None
        elif isinstance(st, ast.Return) and st.value is not None:
            out.append({"when": "always", "backend": _value_text(st.value)})
            break
        elif isinstance(st, ast.Assign) and any(ast.unparse(t).endswith("attention_backend") for t in st.targets):
            out.append({"when": "always", "backend": _value_text(st.value)})
            break
    return out


def _per_capability(rules: list[dict]) -> dict:
    """For each compute capability: the rules that apply to it, up to the first unconditional one."""
    out = {}
    for cap in CAPABILITIES:
        parts = []
        for rule in rules:
            plats = _platforms(rule["when"]) if rule["when"] not in ("else", "always") else None
            if plats is not None and cap not in plats:
                continue
            rest = PLATFORM_PREDICATE.sub("", rule["when"]) if plats else rule["when"]
            pure = rule["when"] in ("else", "always") or not re.sub(r"[\s()]|\band\b|\bor\b", "", rest)
            parts.append(rule["backend"] if pure else f"{rule['backend']} if {rule['when']}")
            if pure:
                break
        out[cap] = "; else ".join(parts) if parts else None
    return out


def attention_defaults(w: Wheel) -> dict:
    marker = "Auto select the fastest attention backend"
    for member in [PKG + "server_args.py"] + w.py_files(PKG + "arg_groups/"):
        if marker not in w.text(member):
            continue
        for func in (n for n in ast.walk(w.tree(member)) if isinstance(n, (ast.FunctionDef, ast.If))):
            body = func.body
            if not any(isinstance(s, ast.Expr) and marker in (string_of(s.value) or "") for s in body):
                continue
            branch = next((s for s in body if isinstance(s, ast.If) and "use_mla_backend" in ast.unparse(s.test)), None)
            if branch is None:
                continue
            negated = ast.unparse(branch.test).replace(" ", "").startswith("not")
            mha, mla = (branch.body, branch.orelse) if negated else (branch.orelse, branch.body)
            where = f"{short(member)}:{func.lineno}" + (f" ({func.name})" if isinstance(func, ast.FunctionDef) else "")
            out = {"source": where, "note": "the automatic choice only: model-specific overrides are not read"}
            for arch, stmts in (("mla", mla), ("mha", mha)):
                rules = _rules(stmts)
                out[arch] = {"rules": rules, "per_compute_capability": _per_capability(rules)}
            return out
    return {"source": None, "note": f"no function documented '{marker}' was found: not read"}


# ----- environment variables -----
def env_reads(w: Wheel, names: list[str]) -> dict:
    out = {}
    environ = PKG + "environ.py"
    files = [n for n in w.names if n.startswith("sglang/") and n.endswith(".py") and "/test" not in n]
    texts = {}
    for name in names:
        declared = None
        if w.has(environ):
            for node in ast.walk(w.tree(environ)):
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
                    declared = {"file": short(environ), "line": node.lineno, "as": ast.unparse(node.value)}
        refs = []
        for member in sorted(files):
            if member == environ:
                continue
            if member not in texts:
                texts[member] = w.zf.read(member).decode("utf-8-sig", errors="replace")
            if name not in texts[member]:
                continue
            refs += _env_refs(w.tree(member), name, short(member))
        kinds = {r["kind"] for r in refs}
        status = ("read" if kinds & {"envs.get", "getenv"} else "removed" if "removal-notice" in kinds
                  else "declared, not read" if declared else "mentioned only" if refs else "absent")
        out[name] = _compact({"status": status, "declared": declared, "references": refs})
    return out


def _env_refs(tree: ast.Module, name: str, where: str) -> list[dict]:
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    refs = []
    for node in ast.walk(tree):
        kind = None
        if isinstance(node, ast.Attribute) and node.attr == name:
            up = parents.get(node)
            attr = up.attr if isinstance(up, ast.Attribute) else None
            kind = {"get": "envs.get", "set": "envs.set", "override": "envs.set"}.get(attr, "envs.get")
        elif isinstance(node, ast.Constant) and node.value == name:
            call = parents.get(node)
            fn = name_of(call.func) if isinstance(call, ast.Call) else ""
            kind = "getenv" if fn and re.search(r"getenv|environ\.get|env_var|environ\.pop", fn) else \
                "getenv" if isinstance(call, ast.Subscript) else "mention"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and name in node.value:
            kind = "mention"
        if kind is None:
            continue
        if kind == "getenv":  # a read whose only effect is to say the variable is gone
            stmt = node
            while stmt in parents and not isinstance(stmt, ast.stmt):
                stmt = parents[stmt]
            if isinstance(stmt, ast.If):
                said = " ".join(string_of(n) or "" for n in ast.walk(ast.Module(body=stmt.body, type_ignores=[])))
                if re.search(r"\bremoved\b|no longer", said, re.I):
                    kind = "removal-notice"
        refs.append({"file": where, "line": getattr(node, "lineno", 0), "kind": kind})
    return refs


# ----- what the build needs to know -----
def flashinfer_sampling(w: Wheel) -> list[str]:
    """The names srt/layers/sampler.py takes from flashinfer.sampling (imported or lazily imported)."""
    member = PKG + "layers/sampler.py"
    if not w.has(member):
        return []
    names = set()
    for node in ast.walk(w.tree(member)):
        if isinstance(node, ast.ImportFrom) and node.module == "flashinfer.sampling":
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.Call) and (name_of(node.func) or "").endswith("LazyImport") and len(node.args) >= 2 \
                and string_of(node.args[0]) == "flashinfer.sampling":
            names.add(string_of(node.args[1]) or "?")
    return sorted(names)


def architectures(w: Wheel) -> dict:
    out = {}
    for member in w.py_files(PKG + "models/"):
        if member.count("/") != 3:
            continue
        for node in w.tree(member).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EntryClass" for t in node.targets):
                values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                for v in values:
                    if isinstance(v, ast.Name):
                        out[v.id] = short(member)
    if not out:
        raise SourceError(f"{w.path.name}: no EntryClass in srt/models/")
    return dict(sorted(out.items()))


def read_release(wheel: Path, env_names: list[str]) -> dict:
    """Everything above, for one release's wheel."""
    w = Wheel(wheel)
    digest = hashlib.sha256(Path(wheel).read_bytes()).hexdigest()
    return {"wheel": Path(wheel).name, "sha256": digest, "flags": server_flags(w), "endpoints": endpoints(w),
            "parsers": parsers(w), "attention_defaults": attention_defaults(w), "env": env_reads(w, env_names),
            "flashinfer_sampling": flashinfer_sampling(w), "architectures": architectures(w)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--env", action="append", default=[], help="an environment variable to look up (repeatable)")
    args = ap.parse_args(argv)
    try:
        print(json.dumps(read_release(args.wheel, args.env), indent=1))
    except SourceError as err:
        print(json.dumps({"failed": True, "msg": str(err)}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
