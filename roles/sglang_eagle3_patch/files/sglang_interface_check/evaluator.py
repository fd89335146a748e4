"""The three-valued guard evaluator (rule 4): is a guard true, false or unknown for one algorithm?

Values are ``True``, ``False`` or ``None`` (unknown). ``not`` keeps unknown; ``and`` is false when
any operand is false, true when all are true, else unknown; ``or`` is true when any operand is true,
false when all are false, else unknown. What is understood:
  * constants (by truth value);
  * algorithm predicates, ``<...algorithm...>.is_eagle3()`` (or ``self.is_x()`` inside
    SpeculativeAlgorithm), from their definitions in spec_info.py;
  * comparisons of an expression naming the algorithm with ``==``/``!=``/``is``/``is not``/``in``/
    ``not in`` against string constants, ``SpeculativeAlgorithm.X`` members or tuples/lists/sets of
    them (aliases such as NEXTN -> EAGLE applied);
  * names and attributes as flags: ``is_draft_worker``/``is_draft`` are false (the target is
    checked), ``*model`` and ``self`` are unknown; any other name is false when none of its truthy
    assignments is reachable for the algorithm, else unknown (one level deep, MAX_FLAG_DEPTH).
Anything else is unknown, which keeps a call site. Each result also says whether the guard
mentions speculation at all.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .tree import Tree, match_lines
from .walker import Guard, Walker, chain, is_model_name, leaf

if TYPE_CHECKING:
    from .algorithms import Algorithms


# Three-valued logic: True, False or None (unknown).
Tri = bool | None

DRAFT_WORKER_NAMES = frozenset({"is_draft_worker", "is_draft"})


# How many flags deep a guard is followed: ``if self.eagle_use_aux_hidden_state`` -> the guards of
# its assignments (depth 1). Deeper chains are "unknown": following every name through SGLang costs
# seconds and, in the releases read, never decided a required method.
MAX_FLAG_DEPTH = 1


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


@dataclass
class Assignment:
    """A place that sets a flag (``x.flag = value``, ``flag: bool = False``, ``f(flag=value)``)."""

    value: ast.expr
    guards: tuple[Guard, ...]
    path: Path


def _mentions_algorithm(node: ast.expr) -> bool:
    return any("algorithm" in n.lower() or n == "SpeculativeAlgorithm" for n in chain(node))


class Evaluator:
    """Evaluates guards for one algorithm on the target model (rule 4)."""

    def __init__(self, tree: Tree, algorithms: Algorithms, algorithm: str, files: list[Path]) -> None:
        self.tree = tree
        self.algorithms = algorithms
        self.algorithm = algorithm
        self.files = files
        self._flags: dict[tuple[str, int, Path | None], tuple[Tri, bool]] = {}
        self._busy: set[str] = set()
        self._depth = 0
        self._path: Path | None = None
        self._algorithm_files: list[Path] | None = None
        self._assignments: dict[str, list[Assignment]] | None = None
        self._scanned: set[Path] = set()

    def evaluate(
        self,
        guards: Iterable[Guard],
        self_is_algorithm: bool = False,
        flags: bool = True,
        path: Path | None = None,
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
            if is_model_name(name) or name == "self":
                return (None, False)  # a None test on a model, not a flag
            scope = None
            if isinstance(node, ast.Name) and self._path is not None and _module_assigns(self.tree.text(self._path), name):
                scope = self._path  # a module global (``_is_hip = is_hip()``): only its own module sets it
            return self.flag(name, scope)
        return (None, False)

    def _algorithm_names(self, node: ast.expr) -> set[str] | None:
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

    def flag(self, name: str, scope: Path | None = None) -> tuple[Tri, bool]:
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
            truthy = [s for s in sites if not _is_falsy_constant(s.value) and leaf(s.value) != name]
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
            lines = match_lines(text, pattern)
            if not lines:
                continue

            def on_assign(target: str, value: ast.expr, guards: tuple[Guard, ...], path: Path = path) -> None:
                if target == name:
                    found.append(Assignment(value, guards, path))

            Walker(assign=on_assign, lines=lines).block(self.tree.parse_around(path, lines), ())
        return found


def _module_assigns(text: str, name: str) -> bool:
    """Whether ``name`` is a module global: assigned at column 0, or one level in (if/try at the top)."""
    return re.search(rf"^(?:    )?{re.escape(name)}\s*(?::[^=\n]*)?=(?!=)", text, re.M) is not None


def flag_names(guards: Iterable[Guard]) -> set[str]:
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
            names.add(leaf(node))
    return names


def _assignment_pattern(name: str) -> re.Pattern:
    """Text of an assignment to ``name`` (``x.name =``, ``name: T =``, ``name=`` in a call).

    The literal comes first so that the regex engine can skip ahead to it; a match may be the
    tail of a longer name, which the AST walk that follows sorts out.
    """
    return re.compile(rf"{re.escape(name)}\s*(?::[^=\n]*)?=(?!=)")


def _is_falsy_constant(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and not node.value
