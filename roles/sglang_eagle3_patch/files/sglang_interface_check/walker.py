"""The call-site walker: a module's statements and expressions with the guards on the path to each.

A guard is one condition (with its polarity) that holds where a statement runs: the enclosing
``if``/``elif``/``else`` tests, ``and``/``or`` short-circuits, conditional expressions and earlier
``if ...: return/raise`` exits in the same block. What the guards mean is the evaluator's business
(evaluator.py); the walker only collects them and reports calls on a model, assignments and names.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Guard:
    """One condition on the path to a statement.

    ``alt_raises`` records whether the branch NOT taken ends in ``raise``: then the condition is an
    assertion (a missing method is an error), not an optional feature.
    """

    test: ast.expr
    polarity: bool
    alt_raises: bool


def exits(stmts: list[ast.stmt]) -> str | None:
    """'raise' or 'return' when a block always leaves by that statement, else None."""
    if not stmts:
        return None
    last = stmts[-1]
    if isinstance(last, ast.Raise):
        return "raise"
    if isinstance(last, (ast.Return, ast.Continue, ast.Break)):
        return "return"
    if isinstance(last, ast.If) and last.orelse:
        a, b = exits(last.body), exits(last.orelse)
        if a and b:
            return "raise" if a == b == "raise" else "return"
    return None


def chain(node: ast.expr) -> list[str]:
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


def leaf(node: ast.expr) -> str:
    names = chain(node)
    return names[-1] if names else ""


def is_model_name(name: str) -> bool:
    return name == "model" or name.endswith("_model")


def model_receiver_role(node: ast.expr) -> str | None:
    """'target', 'draft' or 'neutral' when ``node`` denotes a model, else None (rules 2 and 3)."""
    if not isinstance(node, (ast.Name, ast.Attribute)):
        return None
    names = chain(node)
    if not names or not is_model_name(names[-1]):
        return None
    if any(is_model_name(n) for n in names[:-1] if n != "self"):
        return None  # <model>.model: an inner module
    lowered = [n.lower() for n in names]
    if any("draft" in n for n in lowered):
        return "draft"
    if any("target" in n for n in lowered):
        return "target"
    return "neutral"


def target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Attribute):
        yield target.attr
    elif isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from target_names(elt)


class Walker:
    """Walks a module, tracking the guards of every statement and expression (rule 4).

    The visitor gets ``call(node, role, guards, walker)`` for calls on a model,
    ``assign(name, value, guards)`` for assignments and keyword arguments, and
    ``ref(node, guards, walker)`` for names, attributes and imports; ``walker.top`` is the
    top-level definition being walked and ``walker.classes`` the enclosing classes.
    """

    def __init__(self, call=None, assign=None, ref=None, lines: list[int] | None = None) -> None:
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
                how = exits(stmt.body)
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
            body_exit, else_exit = exits(node.body), exits(node.orelse)
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
                for name in target_names(target):
                    self.on_assign(name, node.value, guards)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            for name in target_names(node.target):
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
