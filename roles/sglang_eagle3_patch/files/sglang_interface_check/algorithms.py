"""The speculative algorithms of this SGLang, read from ``srt/speculative/spec_info.py``.

Members of ``SpeculativeAlgorithm``, its ``is_*`` predicates evaluated for every member, the
aliases SGLang accepts (NEXTN -> EAGLE, read from server_args.py or ``from_string``) and the
worker classes ``create_worker`` returns for an algorithm.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TYPE_CHECKING

from .evaluator import Tri, tri_and, tri_or
from .tree import CheckError, Tree, import_from_module
from .walker import Guard, chain, exits

if TYPE_CHECKING:
    from .evaluator import Evaluator


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

    def _predicate(self, name: str, busy: set[str]) -> frozenset[str] | None:
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

    def _member_ref(self, node: ast.expr) -> str | None:
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
                    chain(test.left)[-1:] == ["speculative_algorithm"]
                    and len(test.ops) == 1
                    and isinstance(test.ops[0], ast.Eq)
                    and isinstance(test.comparators[0], ast.Constant)
                ):
                    continue
                for stmt in node.body:
                    if (
                        isinstance(stmt, ast.Assign)
                        and chain(stmt.targets[0])[-1:] == ["speculative_algorithm"]
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

    def create_worker_classes(self, evaluator: Evaluator) -> list[tuple[Path, str]] | None:
        """Worker classes ``create_worker`` can return for the evaluator's algorithm."""
        func = self._methods.get("create_worker")
        if func is None:
            return None
        imported: dict[str, tuple[str, str]] = {}
        for node in ast.walk(func):
            if isinstance(node, ast.ImportFrom):
                module = import_from_module(self.tree, self.path, node)
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
            if not stmt.orelse and exits(stmt.body):
                guards = guards + (Guard(stmt.test, False, False),)
        elif isinstance(stmt, (ast.With, ast.For, ast.While, ast.Try)):
            _walk_returns(stmt.body, guards, on_return)
