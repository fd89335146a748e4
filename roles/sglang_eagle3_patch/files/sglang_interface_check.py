#!/usr/bin/env python3
"""Tell, in seconds and before any server starts, whether a model is ready for a speculative algorithm.

Why this exists: SGLang's ``KimiK25ForConditionalGeneration`` wraps ``DeepseekV3ForCausalLM`` and (in
0.5.9) did not forward the EAGLE-3 interface, so the server died about eight minutes into every start,
one missing method per crash. This tool reads the SGLang package itself (``ast`` only, nothing is
imported, no torch needed) and answers the same question in well under five seconds.

It does NOT carry a list of required methods. It derives the list from SGLang's own call sites, so a
method that a new SGLang release starts to call is found without editing this file. The rules, each
chosen after reading 0.5.9 ... 0.5.23:

1. Where call sites are looked for: every module under ``srt/`` except ``srt/models/`` (models provide
   the interface, runners and workers use it). A text search finds the lines with
   ``model.<name>(`` first; only the top-level definitions around them are parsed (parsing is most
   of the cost: 0.5.23 has 2,000 modules).

2. Which receivers are a model: an expression whose last name is ``model`` or ends in ``_model``
   (``self.model``, ``self.model_runner.model``, ``self.target_worker.model_runner.model``,
   ``target_model``, ``self.draft_runner.model``, ``model``). ``<model>.model.X`` is an inner module of a
   model, not the model, and is skipped. Only calls ``<model>.X(...)`` count: the issue is about methods.
   A method name counts only if some class in ``srt/models/`` defines it: SGLang also calls str and
   ``torch.nn.Module`` methods on values it names ``*model`` (a model path's ``endswith``,
   ``named_modules``), which are not part of the model interface.

3. Target or draft: a name on the receiver path containing ``draft`` means the draft model
   (``draft_model_runner``, ``draft_runner_list[i]``); one containing ``target`` means the target
   (``target_worker``, ``target_model``). A receiver with neither is the runner's own model:
   inside ``srt/speculative/`` that runner is the DRAFT one (an EAGLE worker is a TpModelWorker built
   with ``is_draft_worker=True``, the draft CUDA-graph runners get the draft runner, and SGLang always
   reaches the target there through ``target_worker``/``target_model``); outside it (ModelRunner,
   CudaGraphRunner, ...) the code runs for the target as well, unless its enclosing class is named
   ``*Draft*`` or its guard says ``is_draft_worker``. So ``get_embed_and_head`` (called on
   ``target_worker.model_runner.model``) is required of the target while ``set_embed_and_head``,
   ``set_embed``, ``hot_token_id`` and ``load_lm_head_from_target`` (called on the draft runner's model)
   are not. The patch role still adds ``set_embed_and_head`` by default, as the issue asks: the Kimi
   wrapper can serve as a draft or share heads, and the method is harmless on a target.

4. Which algorithm a call site belongs to:
   * inside ``srt/speculative/``: the top-level function or class holding the call must be reached
     from a worker class that ``SpeculativeAlgorithm.create_worker`` returns for the algorithm (its
     ``if self.is_eagle() ...`` branches are evaluated per algorithm): a reached definition reaches
     every definition of ``srt/speculative/`` it names (bases, imports, calls), except under a guard
     that is false for the algorithm. The registry class itself is not followed (it names every
     worker), which keeps EAGLE3 from reaching the DFLASH or DSPARK workers through it;
   * elsewhere: the call's guard must mention the speculative algorithm, directly
     (``spec_algorithm.is_eagle3()``, ``speculative_algorithm == "EAGLE3"``) or through a flag
     (``if self.eagle_use_aux_hidden_state:``) whose truthy assignments are guarded so; flags are
     found by name (attributes and parameters anywhere, ``f(flag=self.cfg.flag)`` only forwards;
     module globals in their own module), one level deep. Unguarded
     calls (``forward``, ``load_weights``) are the generic model interface, not this check's subject.
   In both cases the guard must not be false for the algorithm. Predicates are evaluated from their
   definitions in ``spec_info.py`` (``is_eagle()`` is true for EAGLE and EAGLE3, ``is_eagle3()`` for
   EAGLE3 only, ...), aliases such as NEXTN -> EAGLE are read from SGLang too. A guard is the chain
   of enclosing ``if``/``elif``/``else`` tests, ``and``/``or`` short-circuits, conditional
   expressions and earlier ``if ...: return/raise`` exits in the same function; anything not
   understood is "unknown" (three-valued logic), which keeps the call site.

5. Optional calls: a call guarded by ``hasattr(<receiver>, "X")`` (or ``isinstance`` with a
   runtime-checkable Protocol declaring ``X``) whose other branch does not raise is optional
   (SGLang copes without it). If the other branch raises (``if not hasattr(...): raise``) the
   method is required.

6. What the model provides: the class(es) named by ``EntryClass`` in ``srt/models/<model>.py``, their
   methods and class attributes, those of their bases inside SGLang (resolved through imports), and
   those of an inner model when the class forwards ``__getattr__``. A method that forwards to
   ``self.<inner>.X`` while the inner class does not define ``X`` counts as missing.

Exit status: 0 the model provides every required method, 1 something is missing (listed with the
call sites that need it), 2 the input could not be analysed (no ``EntryClass``, class not found,
syntax error, not an sglang directory).
"""

from __future__ import annotations

import argparse
import ast
import bisect
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Optional

# Three-valued logic: True, False or None (unknown).
Tri = Optional[bool]

MODEL_CALL_TEXT = re.compile(r"model(?:\[[^\]\n]*\]|\([^)\n]*\))?\s*\.\s*([A-Za-z_]\w*)\s*\(")
TOP_LEVEL_DEF = re.compile(r"(?:async[ \t]+)?def[ \t]|class[ \t]")
DRAFT_WORKER_NAMES = frozenset({"is_draft_worker", "is_draft"})
# How many flags deep a guard is followed: ``if self.eagle_use_aux_hidden_state`` -> the guards of
# its assignments (depth 1). Deeper chains are "unknown": following every name through SGLang costs
# seconds and, in the releases read, never decided a required method.
MAX_FLAG_DEPTH = 1


class CheckError(Exception):
    """The input cannot be analysed (exit status 2)."""


@dataclass(frozen=True)
class Guard:
    """One condition on the path to a statement.

    ``alt_raises`` records whether the branch NOT taken ends in ``raise``: then the condition is an
    assertion (a missing method is an error), not an optional feature.
    """

    test: ast.expr
    polarity: bool
    alt_raises: bool


@dataclass
class CallSite:
    """A call ``<model>.method(...)`` found in SGLang's code."""

    file: Path
    path: str
    line: int
    method: str
    receiver: str
    role: str  # "target", "draft" or "neutral" (decided from names, before guards)
    guards: tuple[Guard, ...]
    cls: str
    top: str
    optional: bool

    def as_dict(self) -> dict:
        return {"file": self.path, "line": self.line, "call": f"{self.receiver}.{self.method}(...)"}


@dataclass
class Assignment:
    """A place that sets a flag (``x.flag = value``, ``flag: bool = False``, ``f(flag=value)``)."""

    value: ast.expr
    guards: tuple[Guard, ...]
    path: Path


def _exits(stmts: list[ast.stmt]) -> Optional[str]:
    """'raise' or 'return' when a block always leaves by that statement, else None."""
    if not stmts:
        return None
    last = stmts[-1]
    if isinstance(last, ast.Raise):
        return "raise"
    if isinstance(last, (ast.Return, ast.Continue, ast.Break)):
        return "return"
    if isinstance(last, ast.If) and last.orelse:
        a, b = _exits(last.body), _exits(last.orelse)
        if a and b:
            return "raise" if a == b == "raise" else "return"
    return None


def _chain(node: ast.expr) -> list[str]:
    """Names along an attribute path, outermost first: ``self.a[i].b(x).c`` -> [self, a, b, c]."""
    names: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Name):
            names.append(node.id)
            break
        else:
            break
    return list(reversed(names))


def _is_model_name(name: str) -> bool:
    return name == "model" or name.endswith("_model")


def model_receiver_role(node: ast.expr) -> Optional[str]:
    """'target', 'draft' or 'neutral' when ``node`` denotes a model, else None (rules 2 and 3)."""
    if not isinstance(node, (ast.Name, ast.Attribute)):
        return None
    names = _chain(node)
    if not names or not _is_model_name(names[-1]):
        return None
    if any(_is_model_name(n) for n in names[:-1] if n != "self"):
        return None  # <model>.model: an inner module
    lowered = [n.lower() for n in names]
    if any("draft" in n for n in lowered):
        return "draft"
    if any("target" in n for n in lowered):
        return "target"
    return "neutral"


class Walker:
    """Walks a module, tracking the guards of every statement and expression (rule 4).

    The visitor gets ``call(node, role, guards, walker)`` for calls on a model,
    ``assign(name, value, guards)`` for assignments and keyword arguments, and
    ``ref(node, guards, walker)`` for names, attributes and imports; ``walker.top`` is the
    top-level definition being walked and ``walker.classes`` the enclosing classes.
    """

    def __init__(self, call=None, assign=None, ref=None, lines: Optional[list[int]] = None) -> None:
        self.on_call = call
        self.on_assign = assign
        self.on_ref = ref
        self.classes: list[str] = []
        self.top = ""
        self.depth = 0
        # Only statements spanning one of these lines are entered: a text search found the lines,
        # this keeps the walk of a 5000-line module to the few statements that matter.
        self.lines = lines

    def _relevant(self, stmt: ast.stmt) -> bool:
        if self.lines is None:
            return True
        end = stmt.end_lineno or stmt.lineno
        index = bisect.bisect_left(self.lines, stmt.lineno)
        return index < len(self.lines) and self.lines[index] <= end

    def block(self, stmts: list[ast.stmt], guards: tuple[Guard, ...]) -> None:
        for stmt in stmts:
            if self._relevant(stmt):
                self.stmt(stmt, guards)
            if isinstance(stmt, ast.If) and not stmt.orelse:
                how = _exits(stmt.body)
                if how:
                    guards = guards + (Guard(stmt.test, False, how == "raise"),)

    def definition(self, node: ast.stmt, guards: tuple[Guard, ...]) -> None:
        """Walk one class or function definition (used directly to walk a single top-level one)."""
        outer_top = self.top
        if self.depth == 0:
            self.top = node.name
        self.depth += 1
        if isinstance(node, ast.ClassDef):
            for expr in node.bases + node.decorator_list:
                self.expr(expr, guards)
            self.classes.append(node.name)
            self.block(node.body, guards)
            self.classes.pop()
        else:
            for expr in node.decorator_list:
                self.expr(expr, guards)
            self.block(node.body, guards)
        self.depth -= 1
        self.top = outer_top

    def stmt(self, node: ast.stmt, guards: tuple[Guard, ...]) -> None:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            self.definition(node, guards)
        elif isinstance(node, ast.If):
            self.expr(node.test, guards)
            body_exit, else_exit = _exits(node.body), _exits(node.orelse)
            self.block(node.body, guards + (Guard(node.test, True, else_exit == "raise"),))
            self.block(node.orelse, guards + (Guard(node.test, False, body_exit == "raise"),))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            self.expr(node.iter if not isinstance(node, ast.While) else node.test, guards)
            self.block(node.body, guards)
            self.block(node.orelse, guards)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self.expr(item.context_expr, guards)
            self.block(node.body, guards)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            self.block(node.body, guards)
            for handler in node.handlers:
                self.block(handler.body, guards)
            self.block(node.orelse, guards)
            self.block(node.finalbody, guards)
        elif isinstance(node, ast.Match):
            self.expr(node.subject, guards)
            for case in node.cases:
                self.block(case.body, guards)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if self.on_ref is not None:
                self.on_ref(node, guards, self)
        else:
            if self.on_assign is not None:
                self._assignments(node, guards)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child, guards)

    def _assignments(self, node: ast.stmt, guards: tuple[Guard, ...]) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for name in _target_names(target):
                    self.on_assign(name, node.value, guards)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            for name in _target_names(node.target):
                self.on_assign(name, node.value, guards)

    def expr(self, node: ast.expr, guards: tuple[Guard, ...]) -> None:
        if isinstance(node, ast.BoolOp):
            seen: tuple[Guard, ...] = ()
            for value in node.values:
                self.expr(value, guards + seen)
                seen += (Guard(value, isinstance(node.op, ast.And), False),)
            return
        if isinstance(node, ast.IfExp):
            self.expr(node.test, guards)
            self.expr(node.body, guards + (Guard(node.test, True, False),))
            self.expr(node.orelse, guards + (Guard(node.test, False, False),))
            return
        if isinstance(node, ast.Lambda):
            self.expr(node.body, guards)
            return
        if self.on_ref is not None and isinstance(node, (ast.Name, ast.Attribute)):
            self.on_ref(node, guards, self)
        if isinstance(node, ast.Call):
            if self.on_call is not None and isinstance(node.func, ast.Attribute):
                role = model_receiver_role(node.func.value)
                if role is not None:
                    self.on_call(node, role, guards, self)
            if self.on_assign is not None:
                for kw in node.keywords:
                    if kw.arg:
                        self.on_assign(kw.arg, kw.value, guards)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child, guards)
            elif isinstance(child, ast.comprehension):
                self.expr(child.iter, guards)
                for cond in child.ifs:
                    self.expr(cond, guards)


def _target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Attribute):
        yield target.attr
    elif isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt)


def _hasattr_of(node: ast.expr) -> Optional[tuple[str, str]]:
    """(receiver source, attribute) for ``hasattr(receiver, "attr")``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "hasattr"
        and len(node.args) == 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        return ast.unparse(node.args[0]), node.args[1].value
    return None


def _positive_facts(test: ast.expr, polarity: bool) -> Iterator[ast.expr]:
    """Sub-conditions known to be true when ``test`` has ``polarity``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from _positive_facts(test.operand, not polarity)
    elif isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and polarity:
        for value in test.values:
            yield from _positive_facts(value, True)
    elif isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and not polarity:
        for value in test.values:
            yield from _positive_facts(value, False)
    elif polarity:
        yield test


def _protocol_has(text: str, name: str, method: str) -> bool:
    """Whether module ``text`` defines ``class name(...Protocol...)`` declaring ``method``."""
    found = re.search(rf"^class {re.escape(name)}\(([^)]*)\):\n((?:[ \t]+.*\n|\n)*)", text, re.M)
    return bool(found and "Protocol" in found.group(1) and re.search(rf"def {re.escape(method)}\(", found.group(2)))


def is_optional(receiver: str, method: str, guards: Iterable[Guard], text: str) -> bool:
    """Rule 5: guarded by hasattr(receiver, method), or by isinstance(receiver, P) with P a
    runtime-checkable Protocol declaring the method, while the other branch does not raise."""
    for guard in guards:
        if guard.alt_raises:
            continue
        for fact in _positive_facts(guard.test, guard.polarity):
            found = _hasattr_of(fact)
            if found and found[1] == method and found[0] == receiver:
                return True
            if (
                isinstance(fact, ast.Call)
                and isinstance(fact.func, ast.Name)
                and fact.func.id == "isinstance"
                and len(fact.args) == 2
                and ast.unparse(fact.args[0]) == receiver
                and isinstance(fact.args[1], ast.Name)
                and _protocol_has(text, fact.args[1].id, method)
            ):
                return True
    return False


class Tree:
    """The sglang package being analysed: file texts and parsed modules, read at most once."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.srt = self.root / "srt"
        if not self.srt.is_dir():
            raise CheckError(f"{root}: not an sglang package directory (no srt/ inside)")
        self._text: dict[Path, str] = {}
        self._ast: dict[Path, ast.Module] = {}
        self._chunks: dict[tuple[Path, int], list[ast.stmt]] = {}

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def text(self, path: Path) -> str:
        if path not in self._text:
            self._text[path] = path.read_text(encoding="utf-8", errors="replace")
        return self._text[path]

    def parse(self, path: Path) -> ast.Module:
        if path not in self._ast:
            try:
                self._ast[path] = ast.parse(self.text(path), filename=str(path))
            except SyntaxError as exc:
                raise CheckError(f"{self.rel(path)}:{exc.lineno}: syntax error: {exc.msg}") from exc
        return self._ast[path]

    def parse_around(self, path: Path, lines: list[int]) -> list[ast.stmt]:
        """The top-level statements that span ``lines``, parsing only those parts of the file.

        Parsing is most of this tool's time, and a 5000-line module is usually needed for a few
        lines. A top-level ``def``/``class`` (with its decorators) starts at column 0 and runs to
        the next one; each such chunk is parsed on its own. If a chunk does not parse (a string
        that holds "class " at column 0, a decorator spread oddly) the whole file is parsed.
        """
        if path in self._ast:
            return self._ast[path].body
        text = self.text(path)
        all_lines = text.splitlines(keepends=True)
        starts = [i + 1 for i, line in enumerate(all_lines) if TOP_LEVEL_DEF.match(line)]
        statements: list[ast.stmt] = []
        done: set[int] = set()
        for line in lines:
            index = bisect.bisect_right(starts, line) - 1
            begin = starts[index] if index >= 0 else 1
            end = starts[index + 1] - 1 if index + 1 < len(starts) else len(all_lines)
            while begin > 1 and all_lines[begin - 2].startswith("@"):
                begin -= 1
            if begin in done:
                continue
            done.add(begin)
            key = (path, begin)
            if key not in self._chunks:
                # Blank lines in front keep the line numbers right (cheaper than renumbering).
                try:
                    chunk = ast.parse("\n" * (begin - 1) + "".join(all_lines[begin - 1 : end]))
                except SyntaxError:
                    return self.parse(path).body
                self._chunks[key] = chunk.body
            statements.extend(self._chunks[key])
        return sorted(statements, key=lambda n: n.lineno)

    def runtime_files(self) -> list[Path]:
        """Rule 1: every module under srt/ except the model implementations."""
        models = self.srt / "models"
        return sorted(p for p in self.srt.rglob("*.py") if models not in p.parents)

    def module_path(self, dotted: str) -> Optional[Path]:
        """File of an absolute ``sglang.…`` module name, if it is part of this tree."""
        parts = dotted.split(".")
        if not parts or parts[0] != "sglang":
            return None
        base = self.root.joinpath(*parts[1:])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def dotted(self, path: Path) -> str:
        rel = path.relative_to(self.root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(["sglang", *parts])

    def version(self) -> str:
        """The release, from the files a build writes (``_version.py``, PKG-INFO, dist-info)."""
        pattern = re.compile(r"^(?:__version__\s*=\s*(?:version\s*=\s*)?['\"]|Version:\s*)([^'\"\s]+)", re.M)
        candidates = [self.root / "_version.py", self.root / "version.py", self.root.parent / "PKG-INFO"]
        candidates += sorted(self.root.parent.glob("sglang-*.dist-info/METADATA"))
        for path in candidates:
            if path.is_file():
                found = pattern.search(self.text(path))
                if found and not found.group(1).startswith("0.0.0"):
                    return found.group(1)
        return "unknown"


def _import_from_module(tree: Tree, path: Path, node: ast.ImportFrom) -> Optional[str]:
    if node.level == 0:
        return node.module
    package = tree.dotted(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(package + ([node.module] if node.module else []))


class Algorithms:
    """The speculative algorithms and their ``is_*`` predicates, read from ``spec_info.py``."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.path = tree.srt / "speculative" / "spec_info.py"
        if not self.path.is_file():
            raise CheckError(f"{tree.rel(self.path)} not found: cannot tell which speculative algorithms exist")
        module = tree.parse(self.path)
        cls = next(
            (n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "SpeculativeAlgorithm"),
            None,
        )
        if cls is None:
            raise CheckError(f"{tree.rel(self.path)}: class SpeculativeAlgorithm not found")
        self.cls = cls
        self.members = [
            t.id
            for n in cls.body
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Name) and not t.id.startswith("_")
        ]
        self._methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        self.predicates: dict[str, frozenset[str]] = {}
        for name in self._methods:
            members = self._predicate(name, set())
            if members is not None:
                self.predicates[name] = members
        self.aliases = self._aliases()

    def _predicate(self, name: str, busy: set[str]) -> Optional[frozenset[str]]:
        if name in self.predicates:
            return self.predicates[name]
        func = self._methods.get(name)
        if func is None or name in busy or len(func.args.args) != 1:
            return None
        body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            return None
        busy = busy | {name}
        result = set()
        for member in self.members:
            value = self._eval_self(body[0].value, member, busy)
            if value is None:
                return None
            if value:
                result.add(member)
        return frozenset(result)

    def _member_ref(self, node: ast.expr) -> Optional[str]:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in ("SpeculativeAlgorithm", "cls") and node.attr in self.members:
                return node.attr
        return None

    def _eval_self(self, node: ast.expr, member: str, busy: set[str]) -> Tri:
        """Value of a predicate body for ``self == member``."""
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self._eval_self(node.operand, member, busy)
            return None if inner is None else not inner
        if isinstance(node, ast.BoolOp):
            values = [self._eval_self(v, member, busy) for v in node.values]
            return tri_and(values) if isinstance(node.op, ast.And) else tri_or(values)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
            and not node.args
        ):
            members = self._predicate(node.func.attr, busy)
            return None if members is None else member in members
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, op, right = node.left, node.ops[0], node.comparators[0]
            if isinstance(left, ast.Name) and left.id == "self":
                if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
                    ref = self._member_ref(right)
                    if ref is not None:
                        return (ref == member) == isinstance(op, (ast.Eq, ast.Is))
                if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                    refs = [self._member_ref(e) for e in right.elts]
                    if all(r is not None for r in refs):
                        return (member in refs) == isinstance(op, ast.In)
        return None

    def _aliases(self) -> dict[str, str]:
        """Alternative names SGLang accepts for an algorithm (e.g. NEXTN -> EAGLE)."""
        aliases: dict[str, str] = {}
        # Style 1 (0.5.9 ... 0.5.13): server_args rewrites `speculative_algorithm == "A"` to "B".
        server_args = self.tree.srt / "server_args.py"
        if server_args.is_file() and re.search(r"speculative_algorithm\s*==\s*\"\w+\"", self.tree.text(server_args)):
            for node in ast.walk(self.tree.parse(server_args)):
                if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
                    continue
                test = node.test
                if not (
                    _chain(test.left)[-1:] == ["speculative_algorithm"]
                    and len(test.ops) == 1
                    and isinstance(test.ops[0], ast.Eq)
                    and isinstance(test.comparators[0], ast.Constant)
                ):
                    continue
                for stmt in node.body:
                    if (
                        isinstance(stmt, ast.Assign)
                        and _chain(stmt.targets[0])[-1:] == ["speculative_algorithm"]
                        and isinstance(stmt.value, ast.Constant)
                    ):
                        aliases[str(test.comparators[0].value).upper()] = str(stmt.value.value).upper()
        # Style 2 (newer): from_string returns cls.X when the name is in a constant set.
        from_string = self._methods.get("from_string")
        if from_string is not None:
            constants = self._string_sets()
            for node in ast.walk(from_string):
                if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
                    continue
                ret = next((s for s in node.body if isinstance(s, ast.Return)), None)
                target = self._member_ref(ret.value) if ret is not None and ret.value is not None else None
                right = node.test.comparators[0]
                if target and isinstance(node.test.ops[0], ast.In) and isinstance(right, ast.Name):
                    for name in constants.get(right.id, ()):
                        aliases[name.upper()] = target
        return aliases

    def _string_sets(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for path in sorted((self.tree.srt / "speculative").glob("*.py")):
            if "frozenset(" not in self.tree.text(path) and "ALIAS" not in self.tree.text(path):
                continue
            for node in self.tree.parse(path).body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    strings = {
                        c.value
                        for c in ast.walk(node.value)
                        if isinstance(c, ast.Constant) and isinstance(c.value, str)
                    }
                    if strings:
                        found.setdefault(node.targets[0].id, set()).update(strings)
        return found

    def canonical(self, name: str) -> str:
        upper = name.upper()
        if upper in self.members:
            return upper
        if upper in self.aliases:
            return self.aliases[upper]
        known = sorted(set(self.members) - {"NONE"} | set(self.aliases))
        raise CheckError(f"unknown speculative algorithm {name!r}; this SGLang knows: {', '.join(known)}")

    def create_worker_classes(self, evaluator: "Evaluator") -> Optional[list[tuple[Path, str]]]:
        """Worker classes ``create_worker`` can return for the evaluator's algorithm."""
        func = self._methods.get("create_worker")
        if func is None:
            return None
        imported: dict[str, tuple[str, str]] = {}
        for node in ast.walk(func):
            if isinstance(node, ast.ImportFrom):
                module = _import_from_module(self.tree, self.path, node)
                for alias in node.names:
                    imported[alias.asname or alias.name] = (module or "", alias.name)
        classes: list[tuple[Path, str]] = []

        def on_return(value: ast.expr, guards: tuple[Guard, ...]) -> None:
            if isinstance(value, ast.Name) and value.id in imported:
                if evaluator.evaluate(guards, self_is_algorithm=True, flags=False)[0] is not False:
                    module, name = imported[value.id]
                    path = self.tree.module_path(module)
                    if path is not None and (path, name) not in classes:
                        classes.append((path, name))

        _walk_returns(func.body, (), on_return)
        return classes


def _walk_returns(stmts: list[ast.stmt], guards: tuple[Guard, ...], on_return) -> None:
    for stmt in stmts:
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            on_return(stmt.value, guards)
        elif isinstance(stmt, ast.If):
            _walk_returns(stmt.body, guards + (Guard(stmt.test, True, False),), on_return)
            _walk_returns(stmt.orelse, guards + (Guard(stmt.test, False, False),), on_return)
            if not stmt.orelse and _exits(stmt.body):
                guards = guards + (Guard(stmt.test, False, False),)
        elif isinstance(stmt, (ast.With, ast.For, ast.While, ast.Try)):
            _walk_returns(stmt.body, guards, on_return)


def tri_and(values: Iterable[Tri]) -> Tri:
    values = list(values)
    if any(v is False for v in values):
        return False
    return True if all(v is True for v in values) else None


def tri_or(values: Iterable[Tri]) -> Tri:
    values = list(values)
    if any(v is True for v in values):
        return True
    return False if all(v is False for v in values) else None


def _mentions_algorithm(node: ast.expr) -> bool:
    return any("algorithm" in n.lower() or n == "SpeculativeAlgorithm" for n in _chain(node))


class Evaluator:
    """Evaluates guards for one algorithm on the target model (rule 4)."""

    def __init__(self, tree: Tree, algorithms: Algorithms, algorithm: str, files: list[Path]) -> None:
        self.tree = tree
        self.algorithms = algorithms
        self.algorithm = algorithm
        self.files = files
        self._flags: dict[tuple[str, int, Optional[Path]], tuple[Tri, bool]] = {}
        self._busy: set[str] = set()
        self._depth = 0
        self._path: Optional[Path] = None
        self._algorithm_files: Optional[list[Path]] = None
        self._assignments: Optional[dict[str, list[Assignment]]] = None
        self._scanned: set[Path] = set()

    def evaluate(
        self,
        guards: Iterable[Guard],
        self_is_algorithm: bool = False,
        flags: bool = True,
        path: Optional[Path] = None,
    ) -> tuple[Tri, bool]:
        """(value, mentions-speculation) of the conjunction of ``guards``.

        With ``flags=False`` names are not looked up (unknown): cheap, and enough where only the
        algorithm predicates decide (dispatch on the algorithm, worker reach).
        """
        if not flags:
            saved, self._depth = self._depth, MAX_FLAG_DEPTH
            try:
                return self.evaluate(guards, self_is_algorithm, path=path)
            finally:
                self._depth = saved
        saved_path, self._path = self._path, path
        try:
            values, spec = [], False
            for guard in guards:
                value, mentions = self.expr(guard.test, self_is_algorithm)
                spec = spec or mentions
                values.append(value if guard.polarity or value is None else not value)
            return tri_and(values), spec
        finally:
            self._path = saved_path

    def expr(self, node: ast.expr, self_is_algorithm: bool = False) -> tuple[Tri, bool]:
        if isinstance(node, ast.Constant):
            return (bool(node.value), False)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            value, spec = self.expr(node.operand, self_is_algorithm)
            return (None if value is None else not value, spec)
        if isinstance(node, ast.BoolOp):
            results = [self.expr(v, self_is_algorithm) for v in node.values]
            combine = tri_and if isinstance(node.op, ast.And) else tri_or
            return combine(r[0] for r in results), any(r[1] for r in results)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
            receiver = node.func.value
            is_self = isinstance(receiver, ast.Name) and receiver.id == "self" and self_is_algorithm
            predicate = self.algorithms.predicates.get(node.func.attr)
            if predicate is not None and (is_self or _mentions_algorithm(receiver)):
                return (self.algorithm in predicate, True)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and _mentions_algorithm(node.left):
            names = self._algorithm_names(node.comparators[0])
            if names is not None:
                op = node.ops[0]
                inside = self.algorithm in names
                if isinstance(op, (ast.Eq, ast.Is, ast.In)):
                    return (inside, True)
                if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)):
                    return (not inside, True)
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name in DRAFT_WORKER_NAMES:
                return (False, False)  # this check is about the target model
            if _is_model_name(name) or name == "self":
                return (None, False)  # a None test on a model, not a flag
            scope = None
            if isinstance(node, ast.Name) and self._path is not None and _module_assigns(self.tree.text(self._path), name):
                scope = self._path  # a module global (``_is_hip = is_hip()``): only its own module sets it
            return self.flag(name, scope)
        return (None, False)

    def _algorithm_names(self, node: ast.expr) -> Optional[set[str]]:
        elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        names = set()
        for elt in elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                upper = elt.value.upper()
                names.add(self.algorithms.aliases.get(upper, upper))
            elif isinstance(elt, ast.Attribute) and elt.attr in self.algorithms.members:
                names.add(elt.attr)
            else:
                return None
        return names

    def may_mention_algorithm(self, name: str) -> bool:
        """Whether a flag of this name is assigned in a module that mentions the algorithm.

        A flag can make a guard speculative only through an assignment guarded by an algorithm
        test, which needs the word in that module: a cheap text test that spares the flag lookup
        (and its parsing) for the many guards that have nothing to do with speculation.
        """
        if self._algorithm_files is None:
            self._algorithm_files = [p for p in self.files if "lgorithm" in self.tree.text(p)]
        pattern = _assignment_pattern(name)
        return any(name in self.tree.text(p) and pattern.search(self.tree.text(p)) for p in self._algorithm_files)

    def flag(self, name: str, scope: Optional[Path] = None) -> tuple[Tri, bool]:
        """A flag is possibly true when one of its truthy assignments is reachable.

        Attributes (``self.x``, ``cfg.x``) and parameters are looked up by name in every module,
        since SGLang hands flags around as ``f(x=self.config.x)``; module globals in ``scope`` only.
        """
        if name in self._busy or self._depth >= MAX_FLAG_DEPTH:
            return (None, False)
        key = (name, self._depth, scope)
        if key in self._flags:
            return self._flags[key]
        self._busy.add(name)
        self._depth += 1
        sites = self._assignments_of(name, [scope] if scope is not None else self.files)
        result: tuple[Tri, bool] = (None, False)
        if sites:
            # ``f(flag=self.config.flag)`` only forwards the flag: not an assignment of its own.
            truthy = [s for s in sites if not _is_falsy_constant(s.value) and _leaf(s.value) != name]
            spec = False
            reachable = False
            for site in truthy:
                value, mentions = self.evaluate(site.guards, path=site.path)
                if isinstance(site.value, (ast.Name, ast.Attribute)):
                    inner, inner_spec = self.evaluate([Guard(site.value, True, False)], path=site.path)
                    mentions = mentions or inner_spec
                    value = tri_and([value, inner if inner is not False else False])
                spec = spec or mentions
                reachable = reachable or value is not False
            result = (None if reachable else False, spec)
        self._depth -= 1
        self._busy.discard(name)
        self._flags[key] = result
        return result

    def _assignments_of(self, name: str, files: list[Path]) -> list[Assignment]:
        found: list[Assignment] = []
        pattern = _assignment_pattern(name)
        for path in files:
            text = self.tree.text(path)
            if name not in text:
                continue
            lines = _match_lines(text, pattern)
            if not lines:
                continue

            def on_assign(target: str, value: ast.expr, guards: tuple[Guard, ...], path: Path = path) -> None:
                if target == name:
                    found.append(Assignment(value, guards, path))

            Walker(assign=on_assign, lines=lines).block(self.tree.parse_around(path, lines), ())
        return found


def _match_lines(text: str, pattern: re.Pattern, keep: Optional[set[str]] = None) -> list[int]:
    """Sorted line numbers (1-based) where ``pattern`` matches (and its group 1 is in ``keep``)."""
    lines: list[int] = []
    line, position = 1, 0
    for match in pattern.finditer(text):
        if keep is not None and match.group(1) not in keep:
            continue
        line += text.count("\n", position, match.start())
        position = match.start()
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines


def _module_assigns(text: str, name: str) -> bool:
    """Whether ``name`` is a module global: assigned at column 0, or one level in (if/try at the top)."""
    return re.search(rf"^(?:    )?{re.escape(name)}\s*(?::[^=\n]*)?=(?!=)", text, re.M) is not None


def _flag_names(guards: Iterable[Guard]) -> set[str]:
    """Names tested for truth in guards (``if x.flag``, ``not flag``, ``a and b``): possible flags."""
    names: set[str] = set()
    todo = [guard.test for guard in guards]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.BoolOp):
            todo.extend(node.values)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            todo.append(node.operand)
        elif isinstance(node, (ast.Name, ast.Attribute)):
            names.add(_leaf(node))
    return names


def _assignment_pattern(name: str) -> re.Pattern:
    """Text of an assignment to ``name`` (``x.name =``, ``name: T =``, ``name=`` in a call).

    The literal comes first so that the regex engine can skip ahead to it; a match may be the
    tail of a longer name, which the AST walk that follows sorts out.
    """
    return re.compile(rf"{re.escape(name)}\s*(?::[^=\n]*)?=(?!=)")


def _leaf(node: ast.expr) -> str:
    names = _chain(node)
    return names[-1] if names else ""


def _is_falsy_constant(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and not node.value


def collect_call_sites(tree: Tree, files: list[Path], interface: set[str]) -> list[CallSite]:
    """Calls on a model whose method name some model defines (see ``model_method_names``)."""
    sites: list[CallSite] = []
    for path in files:
        lines = _match_lines(tree.text(path), MODEL_CALL_TEXT, interface)
        if not lines:
            continue
        rel = tree.rel(path)

        def on_call(node: ast.Call, role: str, guards: tuple[Guard, ...], walker: Walker, path=path, rel=rel) -> None:
            receiver = ast.unparse(node.func.value)
            method = node.func.attr
            cls = walker.classes[-1] if walker.classes else ""
            if method not in interface:
                return
            optional = is_optional(receiver, method, guards, tree.text(path))
            sites.append(CallSite(path, rel, node.lineno, method, receiver, role, guards, cls, walker.top, optional))

        Walker(call=on_call, lines=lines).block(tree.parse_around(path, lines), ())
    return sites


class SpeculativeReach:
    """Top-level definitions in srt/speculative/ that a worker class of the algorithm uses (rule 4).

    Starting from the worker classes, every name a reached definition refers to (bases included)
    is followed when it is defined or imported in srt/speculative/, unless its guard is false for
    the algorithm (``if self.speculative_algorithm.is_dflash(): ...``). The algorithm registry
    class itself is not followed: it names every worker and is evaluated on its own.
    """

    def __init__(self, tree: Tree, evaluator: "Evaluator", skip: tuple[Path, str]) -> None:
        self.tree = tree
        self.evaluator = evaluator
        self.spec_dir = tree.srt / "speculative"
        self.skip = skip
        self.reached: set[tuple[Path, str]] = set()

    def _definitions(self, path: Path) -> dict[str, ast.stmt]:
        return {
            n.name: n
            for n in self.tree.parse(path).body
            if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        }

    def _module_imports(self, path: Path) -> dict[str, tuple[str, str]]:
        found: dict[str, tuple[str, str]] = {}
        for node in self.tree.parse(path).body:
            for sub in [node] + (node.body + node.orelse if isinstance(node, (ast.If, ast.Try)) else []):
                if isinstance(sub, ast.ImportFrom):
                    module = _import_from_module(self.tree, path, sub)
                    for alias in sub.names:
                        found[alias.asname or alias.name] = (module or "", alias.name)
        return found

    def _target(self, module: str, name: str) -> Optional[tuple[Path, str]]:
        """(file, definition) for ``from module import name`` when it lies in srt/speculative/."""
        as_module = self.tree.module_path(f"{module}.{name}")
        if as_module is not None and self.spec_dir in as_module.parents:
            return (as_module, "*")
        path = self.tree.module_path(module)
        if path is not None and self.spec_dir in path.parents:
            return (path, name)
        return None

    def compute(self, start: list[tuple[Path, str]]) -> set[tuple[Path, str]]:
        todo = list(start)
        while todo:
            path, name = todo.pop()
            if (path, name) in self.reached or (path, name) == self.skip:
                continue
            self.reached.add((path, name))
            definitions = self._definitions(path)
            imports = self._module_imports(path)
            if name == "*":
                continue  # a module imported as a whole: its attributes are followed where used
            node = definitions.get(name)
            if node is None:
                origin = imports.get(name)
                target = self._target(*origin) if origin else None
                if target is not None:
                    todo.append(target)
                continue
            local_imports: dict[str, tuple[str, str]] = {}
            modules_used: dict[str, Path] = {}

            def on_ref(ref: ast.AST, guards: tuple[Guard, ...], walker: Walker) -> None:
                if isinstance(ref, ast.ImportFrom):
                    if self.evaluator.evaluate(guards, flags=False)[0] is False:
                        return
                    module = _import_from_module(self.tree, path, ref)
                    for alias in ref.names:
                        local_imports[alias.asname or alias.name] = (module or "", alias.name)
                    return
                if isinstance(ref, ast.Attribute) and isinstance(ref.value, ast.Name):
                    module_file = modules_used.get(ref.value.id)
                    if module_file is not None and self.evaluator.evaluate(guards, flags=False)[0] is not False:
                        todo.append((module_file, ref.attr))
                    return
                if not isinstance(ref, ast.Name):
                    return
                ident = ref.id
                target: Optional[tuple[Path, str]] = None
                if ident in local_imports or ident in imports:
                    target = self._target(*(local_imports.get(ident) or imports[ident]))
                elif ident in definitions and ident != name:
                    target = (path, ident)
                if target is None:
                    return
                if target[1] == "*":
                    modules_used[ident] = target[0]
                    todo.append(target)
                elif target not in self.reached and self.evaluator.evaluate(guards, flags=False)[0] is not False:
                    todo.append(target)

            Walker(ref=on_ref).definition(node, ())
        return self.reached


def model_method_names(tree: Tree) -> set[str]:
    """Every method name some SGLang model defines: the vocabulary of the model interface.

    SGLang also calls str and torch.nn.Module methods on values it names ``*model`` (a model path's
    ``endswith``, ``named_modules``); no model defines those, so they are not interface methods.
    """
    pattern = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+([A-Za-z_]\w*)", re.M)
    names: set[str] = set()
    for path in (tree.srt / "models").rglob("*.py"):
        names.update(pattern.findall(tree.text(path)))
    return names


@dataclass
class ClassInfo:
    """What a model class provides: its own members, its bases and delegations.

    Inner models (``self.language_model = DeepseekV3ForCausalLM(...)`` in ``__init__``) are kept as
    names and resolved only when a delegation needs them: resolving every layer a model builds would
    parse half of SGLang.
    """

    name: str
    path: Path
    rel: str
    resolver: "ClassResolver"
    own: dict[str, ast.AST] = field(default_factory=dict)
    bases: list["ClassInfo"] = field(default_factory=list)
    external_bases: list[str] = field(default_factory=list)
    inner_names: dict[str, list[str]] = field(default_factory=dict)
    getattr_inner: list[str] = field(default_factory=list)

    def provider(self, method: str, depth: int = 0) -> Optional["ClassInfo"]:
        """The class (here, a base, or a __getattr__ delegate) that defines ``method``."""
        if depth > 20:
            return None
        if method in self.own:
            return self
        for base in self.bases:
            found = base.provider(method, depth + 1)
            if found is not None:
                return found
        for attr in self.getattr_inner:
            for inner in self.inner(attr):
                found = inner.provider(method, depth + 1)
                if found is not None:
                    return found
        return None

    def inner(self, attr: str) -> list["ClassInfo"]:
        """Classes assigned to ``self.<attr>`` in this class's or a base's ``__init__``."""
        found = [c for base in self.bases for c in base.inner(attr)]
        for name in self.inner_names.get(attr, []):
            resolved = self.resolver.resolve(self.path, name)
            if resolved is not None:
                found.append(resolved)
        return found


class ClassResolver:
    """Resolves model classes and their bases inside the sglang tree (rule 6)."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self._cache: dict[tuple[Path, str], ClassInfo] = {}
        self._busy: set[tuple[Path, str]] = set()
        self._imports: dict[Path, dict[str, tuple[str, str]]] = {}

    def imports(self, path: Path) -> dict[str, tuple[str, str]]:
        """Local name -> (module, name) for module-level ``from X import Y [as Z]`` (also in if/try)."""
        if path in self._imports:
            return self._imports[path]
        found: dict[str, tuple[str, str]] = {}
        todo: list[ast.stmt] = list(self.tree.parse(path).body)
        while todo:
            node = todo.pop()
            if isinstance(node, ast.ImportFrom):
                module = _import_from_module(self.tree, path, node)
                for alias in node.names:
                    found.setdefault(alias.asname or alias.name, (module or "", alias.name))
            elif isinstance(node, ast.If):
                todo.extend(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                todo.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
        self._imports[path] = found
        return found

    def resolve(self, path: Path, name: str) -> Optional[ClassInfo]:
        key = (path, name)
        if key in self._cache:
            return self._cache[key]
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            module = self.tree.parse(path)
            node = next((n for n in module.body if isinstance(n, ast.ClassDef) and n.name == name), None)
            if node is None:
                origin = self.imports(path).get(name)
                target = self.tree.module_path(origin[0]) if origin else None
                return self.resolve(target, origin[1]) if target is not None else None
            info = self._build(path, node)
            self._cache[key] = info
            return info
        finally:
            self._busy.discard(key)

    def _build(self, path: Path, node: ast.ClassDef) -> ClassInfo:
        info = ClassInfo(node.name, path, self.tree.rel(path), self)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                info.own[stmt.name] = stmt
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    for name in _target_names(target):
                        info.own[name] = stmt
        for base in node.bases:
            resolved = self.resolve(path, base.id) if isinstance(base, ast.Name) else None
            if resolved is not None:
                info.bases.append(resolved)
            else:
                info.external_bases.append(ast.unparse(base))
        init = info.own.get("__init__")
        if isinstance(init, ast.FunctionDef):
            for stmt in ast.walk(init):
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Call):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    func = stmt.value.func
                    if not isinstance(func, ast.Name):
                        continue
                    for target in targets:
                        if isinstance(target, ast.Attribute) and _chain(target)[:1] == ["self"]:
                            info.inner_names.setdefault(target.attr, []).append(func.id)
        getattr_func = info.own.get("__getattr__")
        if isinstance(getattr_func, ast.FunctionDef):
            for sub in ast.walk(getattr_func):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    info.getattr_inner.append(sub.attr)
        return info


def _self_attr(node: ast.expr) -> Optional[str]:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def delegation_gap(cls: ClassInfo, method: str) -> Optional[str]:
    """When ``method`` forwards to ``self.<inner>.method`` (directly or through a local name
    bound to ``self.<inner>``) and the inner class does not define it."""
    provider = cls.provider(method)
    func = provider.own.get(method) if provider is not None else None
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    aliases = {
        target.id: _self_attr(node.value)
        for node in ast.walk(func)
        if isinstance(node, ast.Assign) and _self_attr(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method):
            continue
        receiver = node.func.value
        attr = _self_attr(receiver) or (aliases.get(receiver.id) if isinstance(receiver, ast.Name) else None)
        inners = cls.inner(attr) if attr else []
        if inners and all(inner.provider(method) is None for inner in inners):
            names = ", ".join(i.name for i in inners)
            return f"{cls.name}.{method} forwards to self.{attr}.{method}, which {names} does not define"
    return None


def entry_classes(tree: Tree, model: str) -> tuple[Path, list[str]]:
    path = tree.srt / "models" / f"{model}.py"
    if not path.is_file():
        raise CheckError(f"model file {tree.rel(path) if path.parent.exists() else path} not found")
    module = tree.parse(path)
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            names = [v.id for v in values if isinstance(v, ast.Name)]
            if not names:
                raise CheckError(f"{tree.rel(path)}:{node.lineno}: EntryClass names no class")
            return path, names
    raise CheckError(f"{tree.rel(path)}: no EntryClass assignment; SGLang would not register this model")


def check(sglang_dir: Path, model: str, algorithm: str, only_class: Optional[str] = None) -> dict:
    """Run the whole analysis; return the report as a dict (``ok`` tells the verdict)."""
    started = time.monotonic()
    tree = Tree(sglang_dir)
    model_path, class_names = entry_classes(tree, model)
    if only_class is not None:
        if only_class not in class_names:
            raise CheckError(f"{tree.rel(model_path)}: EntryClass does not name {only_class} ({', '.join(class_names)})")
        class_names = [only_class]
    algorithms = Algorithms(tree)
    canonical = algorithms.canonical(algorithm)
    if canonical == "NONE":
        raise CheckError("algorithm NONE: there is no speculative interface to check")
    files = tree.runtime_files()
    evaluator = Evaluator(tree, algorithms, canonical, files)
    workers = algorithms.create_worker_classes(evaluator)
    spec_dir = tree.srt / "speculative"
    notes: list[str] = []
    reach: Optional[set[tuple[Path, str]]] = None
    if workers is None:
        notes.append("SpeculativeAlgorithm.create_worker not found: every module in srt/speculative counts")
    else:
        reach = SpeculativeReach(tree, evaluator, (algorithms.path, algorithms.cls.name)).compute(workers)
    interface = model_method_names(tree)

    required: dict[str, list[CallSite]] = {}
    for site in collect_call_sites(tree, files, interface):
        in_spec = spec_dir in site.file.parents
        role = site.role
        if role == "neutral":
            role = "draft" if in_spec or "draft" in site.cls.lower() else "target"
        if role != "target" or site.optional:
            continue
        if in_spec and reach is not None and not {(site.file, site.top), (site.file, "*")} & reach:
            continue
        value, spec = evaluator.evaluate(site.guards, flags=False, path=site.file)
        if value is False:
            continue
        if not in_spec and not spec and not any(evaluator.may_mention_algorithm(n) for n in _flag_names(site.guards)):
            continue
        value, spec = evaluator.evaluate(site.guards, path=site.file)
        if value is False or (not in_spec and not spec):
            continue
        required.setdefault(site.method, []).append(site)

    resolver = ClassResolver(tree)
    classes = []
    ok = True
    for name in class_names:
        info = resolver.resolve(model_path, name)
        if info is None:
            raise CheckError(f"{tree.rel(model_path)}: EntryClass names {name}, which is neither defined nor imported from sglang")
        missing = {}
        provided = {}
        for method in sorted(required):
            provider = info.provider(method)
            gap = delegation_gap(info, method) if provider is not None else None
            if provider is None or gap:
                missing[method] = {
                    "reason": gap or f"{name} does not define {method} (nor do its sglang bases)",
                    "call_sites": [s.as_dict() for s in required[method]],
                }
            else:
                provided[method] = f"{provider.name} ({provider.rel})"
        ok = ok and not missing
        classes.append(
            {
                "class": name,
                "external_bases": info.external_bases,
                "provided": provided,
                "missing": missing,
            }
        )
    return {
        "ok": ok,
        "sglang_dir": str(tree.root),
        "sglang_version": tree.version(),
        "model": model,
        "model_file": tree.rel(model_path),
        "algorithm": canonical,
        "algorithm_requested": algorithm,
        "worker_classes": [f"{tree.rel(p)}:{n}" for p, n in workers or []],
        "required": {m: [s.as_dict() for s in sites] for m, sites in sorted(required.items())},
        "classes": classes,
        "notes": notes,
        "elapsed_s": round(time.monotonic() - started, 3),
    }


def render_text(report: dict) -> str:
    lines = [
        f"sglang {report['sglang_version']} at {report['sglang_dir']}",
        f"model {report['model_file']}, algorithm {report['algorithm']}"
        + (f" (from {report['algorithm_requested']})" if report["algorithm_requested"].upper() != report["algorithm"] else ""),
        f"target-model methods SGLang calls for {report['algorithm']}: {', '.join(report['required']) or 'none'}",
    ]
    for cls in report["classes"]:
        for method, where in cls["provided"].items():
            lines.append(f"  ok       {cls['class']}.{method}  (defined in {where})")
        for method, info in cls["missing"].items():
            lines.append(f"  MISSING  {cls['class']}.{method}: {info['reason']}")
            for site in info["call_sites"]:
                lines.append(f"           needed by {site['file']}:{site['line']}  {site['call']}")
    lines.extend(f"note: {n}" for n in report["notes"])
    missing = sorted({m for c in report["classes"] for m in c["missing"]})
    verdict = "OK: the model provides every required method" if report["ok"] else f"FAIL: missing {', '.join(missing)}"
    lines.append(f"{verdict} ({report['elapsed_s']:.2f} s)")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sglang_dir", type=Path, help="the sglang package directory (the one holding srt/)")
    parser.add_argument("--model", default="kimi_k25", help="module name under srt/models (default: kimi_k25)")
    parser.add_argument("--algorithm", default="EAGLE3", help="speculative algorithm (default: EAGLE3)")
    parser.add_argument("--class", dest="only_class", help="check only this EntryClass class")
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    args = parser.parse_args(argv)
    try:
        report = check(args.sglang_dir, args.model, args.algorithm, args.only_class)
    except CheckError as exc:
        if args.json:
            print(json.dumps({"ok": False, "error": str(exc)}, indent=2))
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else render_text(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
