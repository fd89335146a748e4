"""Rules 1-5 of the check (see the package docstring): which calls on a model SGLang makes.

Rule 1 (where) and 2 (which receivers, which names) pick the call sites; rule 3 (target or draft)
is the receiver's role, decided in analysis.py with the enclosing module and class; rule 4's reach
of a speculative worker is ``SpeculativeReach``; rule 5 (optional calls) is ``is_optional``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .tree import Tree, import_from_module, match_lines
from .walker import Guard, Walker

if TYPE_CHECKING:
    from .evaluator import Evaluator


MODEL_CALL_TEXT = re.compile(r"model(?:\[[^\]\n]*\]|\([^)\n]*\))?\s*\.\s*([A-Za-z_]\w*)\s*\(")


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


def collect_call_sites(tree: Tree, files: list[Path], interface: set[str]) -> list[CallSite]:
    """Calls on a model whose method name some model defines (see ``model_method_names``)."""
    sites: list[CallSite] = []
    for path in files:
        lines = match_lines(tree.text(path), MODEL_CALL_TEXT, interface)
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


def _hasattr_of(node: ast.expr) -> tuple[str, str] | None:
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


class SpeculativeReach:
    """Top-level definitions in srt/speculative/ that a worker class of the algorithm uses (rule 4).

    Starting from the worker classes, every name a reached definition refers to (bases included)
    is followed when it is defined or imported in srt/speculative/, unless its guard is false for
    the algorithm (``if self.speculative_algorithm.is_dflash(): ...``). The algorithm registry
    class itself is not followed: it names every worker and is evaluated on its own.
    """

    def __init__(self, tree: Tree, evaluator: Evaluator, skip: tuple[Path, str]) -> None:
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
                    module = import_from_module(self.tree, path, sub)
                    for alias in sub.names:
                        found[alias.asname or alias.name] = (module or "", alias.name)
        return found

    def _target(self, module: str, name: str) -> tuple[Path, str] | None:
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

            # This class's own state, bound now: the walker calls back within this iteration only.
            def on_ref(ref: ast.AST, guards: tuple[Guard, ...], walker: Walker, path=path, name=name, imports=imports,
                       definitions=definitions, local_imports=local_imports, modules_used=modules_used) -> None:
                if isinstance(ref, ast.ImportFrom):
                    if self.evaluator.evaluate(guards, flags=False)[0] is False:
                        return
                    module = import_from_module(self.tree, path, ref)
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
                target: tuple[Path, str] | None = None
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
