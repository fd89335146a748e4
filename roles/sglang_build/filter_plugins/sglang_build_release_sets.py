"""The supported release sets, read from the role's files/release_sets/<version>.json.

    {{ '0.5.23' | sglang_build_release_set }}            -> that set's data (install, resolution, source, ...)
    {{ 'x.y.z' | sglang_build_release_set('0.5.9') }}    -> 0.5.9's data: the role's choices refuse an
                                                            unknown set, naming it, before this matters

A filter, not a file lookup: a lookup's relative path is searched where the task that evaluates the
variable lives, which is not this role when its variables are read after a public include. The
files are made by files/sglang_release_set.py (README, "Release sets"); each is parsed once.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - unit tests import the module without Ansible too
    class AnsibleFilterError(Exception):
        pass

SETS_DIR = Path(__file__).resolve().parent.parent / "files" / "release_sets"


def release_set_names() -> list[str]:
    return sorted((p.stem for p in SETS_DIR.glob("*.json")),
                  key=lambda v: tuple(int(x) if x.isdigit() else x for x in v.split(".")))


@lru_cache(maxsize=16)
def _load(path: str, mtime: float) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def sglang_build_release_set(name, fallback=None) -> dict:
    """The data of release set `name` (else of `fallback`, when given)."""
    name = str(name)
    path = SETS_DIR / f"{name}.json"
    if not path.is_file() and fallback is not None:
        path = SETS_DIR / f"{fallback}.json"
    if not path.is_file():
        raise AnsibleFilterError(f"sglang_build_release_set: no release set {name!r} in {SETS_DIR} "
                                 f"(supported: {', '.join(release_set_names())})")
    return _load(str(path), path.stat().st_mtime)


class FilterModule:
    def filters(self):
        return {"sglang_build_release_set": sglang_build_release_set}
