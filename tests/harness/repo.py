"""Where things are in this repository, for tests and harness scripts.

``ROOT`` is the repository root; ``role_file()`` names a file a role ships; ``load()``
imports a standalone script (a role's ``files/*.py``, a filter plugin, a module), a package a
role ships (the test role sglang_simulator's ``files/sglang_sim/``) or one module of it, by its path, without touching
``sys.path``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"


def role_file(role: str, *parts: str) -> Path:
    """roles/<role>/<parts...>, which must exist."""
    path = ROLES.joinpath(role, *parts)
    if not path.exists():
        raise FileNotFoundError(path)
    return path


def load(path: Path | str, name: str | None = None) -> ModuleType:
    """Import the Python file at ``path`` (relative to ROOT or absolute) as module ``name``.

    A directory holding ``__init__.py`` is imported as a package (named after the directory
    unless ``name`` says otherwise), so that its modules import each other as they do on a host
    (``from .engine import Engine``); a file inside such a package is imported as that
    package's module (``load(".../sglang_sim/engine.py")`` is ``sglang_sim.engine``).
    """
    path = Path(path)
    if not path.is_absolute():
        path = ROOT / path
    if path.is_dir():
        return _load_package(path, name or path.name)
    if (path.parent / "__init__.py").is_file() and path.name != "__init__.py":
        if name is not None:
            raise ValueError(f"{path} is a module of package {path.parent.name}: it has no name of its own")
        package = _load_package(path.parent, path.parent.name)
        return importlib.import_module(f"{package.__name__}.{path.stem}")
    name = name or path.stem
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return module


def _load_package(directory: Path, name: str) -> ModuleType:
    init = directory / "__init__.py"
    if not init.is_file():
        raise FileNotFoundError(init)
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(init):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(directory)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
