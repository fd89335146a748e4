"""Where things are in this repository, for tests and harness scripts.

``ROOT`` is the repository root; ``role_file()`` names a file a role ships; ``load()``
imports a standalone script (a role's ``files/*.py``, a filter plugin, a module) as a
Python module by its path, without touching ``sys.path``.
"""

from __future__ import annotations

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
    """Import the Python file at ``path`` (relative to ROOT or absolute) as module ``name``."""
    path = Path(path)
    if not path.is_absolute():
        path = ROOT / path
    name = name or path.stem
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return module
