"""Rule 6: what the model provides -- the EntryClass classes, their bases inside SGLang (resolved
through imports), inner models reached through ``__getattr__``, and delegations that forward to an
inner model lacking the method.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from .tree import CheckError, Tree, import_from_module
from .walker import chain, target_names


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
    resolver: ClassResolver
    own: dict[str, ast.AST] = field(default_factory=dict)
    bases: list[ClassInfo] = field(default_factory=list)
    external_bases: list[str] = field(default_factory=list)
    inner_names: dict[str, list[str]] = field(default_factory=dict)
    getattr_inner: list[str] = field(default_factory=list)

    def provider(self, method: str, depth: int = 0) -> ClassInfo | None:
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

    def inner(self, attr: str) -> list[ClassInfo]:
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
                module = import_from_module(self.tree, path, node)
                for alias in node.names:
                    found.setdefault(alias.asname or alias.name, (module or "", alias.name))
            elif isinstance(node, ast.If):
                todo.extend(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                todo.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
        self._imports[path] = found
        return found

    def resolve(self, path: Path, name: str) -> ClassInfo | None:
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
                    for name in target_names(target):
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
                        if isinstance(target, ast.Attribute) and chain(target)[:1] == ["self"]:
                            info.inner_names.setdefault(target.attr, []).append(func.id)
        getattr_func = info.own.get("__getattr__")
        if isinstance(getattr_func, ast.FunctionDef):
            for sub in ast.walk(getattr_func):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                    info.getattr_inner.append(sub.attr)
        return info


def _self_attr(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def delegation_gap(cls: ClassInfo, method: str) -> str | None:
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
