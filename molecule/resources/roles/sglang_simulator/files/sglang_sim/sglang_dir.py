"""What the SIMULATOR (TEST ONLY) reads from a real SGLang package (SGLANG_SIM_SGLANG_DIR).

Its version (``_version.py``), and whether ``KimiK25ForConditionalGeneration`` defines the
methods SGLang 0.5.9 calls on an EAGLE-3 target: if not, the simulator dies at start-up with
SGLang's own traceback, as the real server does (``ast`` only; nothing is imported). And, from
the release the package belongs to (the directory holding the venv the package is installed in),
the release's own slowdown factor: ``<release>/sim-slowdown-factor``, a TEST ONLY file a test
writes to make one release slower than another (no real release has it).
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import re
from pathlib import Path

RELEASE_SLOWDOWN_FILE = "sim-slowdown-factor"

KIMI_K25_NAME = re.compile(r"kimi[-_.]?k2[-_.]?5", re.IGNORECASE)
KIMI_CLASS = "KimiK25ForConditionalGeneration"
# Methods SGLang 0.5.9 calls on the EAGLE-3 target model during start-up, in call order,
# with the file and source text of the call site (used to build a faithful traceback).
TARGET_MODEL_CALLS = (
    ("set_eagle3_layers_to_capture", "srt/model_executor/model_runner.py", "initialize",
     "self.model.set_eagle3_layers_to_capture("),
    ("get_embed_and_head", "srt/speculative/eagle_worker.py", "__init__",
     "self.target_worker.model_runner.model.get_embed_and_head()"),
)


def installed_sglang_dir() -> str | None:
    """The sglang package the running Python would import (found, not imported), or None: on a host,
    the serving release's, since the unit runs its venv's Python (as role sglang_build's release
    entry point asks that Python)."""
    spec = importlib.util.find_spec("sglang")
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def missing_target_method(kimi_file: Path) -> str | None:
    """The first method SGLang calls on the EAGLE-3 target that KimiK25ForConditionalGeneration lacks.

    Only methods defined in the class body count (what the upstream fix and this project's
    patch add); a class missing from the file counts as lacking every method.
    """
    tree = ast.parse(kimi_file.read_text(encoding="utf-8"), filename=str(kimi_file))
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == KIMI_CLASS:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    defined.add(item.name)
                elif isinstance(item, ast.Assign):
                    defined.update(t.id for t in item.targets if isinstance(t, ast.Name))
    for method, *_ in TARGET_MODEL_CALLS:
        if method not in defined:
            return method
    return None


def kimi_crash_traceback(sglang_dir: Path, method: str) -> str:
    """SGLang's start-up traceback for a missing target-model method, with real paths/lines."""
    _, rel, func, call = next(c for c in TARGET_MODEL_CALLS if c[0] == method)
    frames = []
    source = sglang_dir / rel
    if source.is_file():
        for lineno, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
            if call in line:
                frames.append(f'  File "{source}", line {lineno}, in {func}\n    {line.strip()}')
                break
    frames.append('  File "torch/nn/modules/module.py", line 1964, in __getattr__\n    raise AttributeError(')
    return (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        + "\n".join(frames)
        + f"\nAttributeError: '{KIMI_CLASS}' object has no attribute '{method}'"
    )


def read_sglang_version(sglang_dir: Path | None, fallback: str) -> str:
    """`__version__` from DIR/_version.py (written by setuptools-scm into wheels and sdists)."""
    if sglang_dir is None or not (sglang_dir / "_version.py").is_file():
        return fallback
    for node in ast.parse((sglang_dir / "_version.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            if any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
                return str(node.value.value)
    return fallback


def release_of(sglang_dir: Path | None) -> Path | None:
    """The release an installed sglang package belongs to: the parent of the venv that holds it.

    Symbolic links are resolved first (the unit reaches the package through ``<root>/current``),
    so this is the release that ``current`` pointed at when the simulator started. None when the
    package is not inside a venv (no ``pyvenv.cfg`` above it).
    """
    if sglang_dir is None:
        return None
    for parent in sglang_dir.resolve().parents:
        if (parent / "pyvenv.cfg").is_file():
            return parent.parent
    return None


def read_release_file(release: Path | None, name: str) -> str | None:
    """The stripped text of ``<release>/<name>`` (a TEST ONLY file a test writes), None without it."""
    if release is None or not (release / name).is_file():
        return None
    return (release / name).read_text(encoding="utf-8").strip()


def read_release_slowdown(release: Path | None) -> float | None:
    """The number in ``<release>/sim-slowdown-factor`` (None without the file).

    Raises ValueError on anything but a finite number above 0.
    """
    if release is None or not (release / RELEASE_SLOWDOWN_FILE).is_file():
        return None
    raw = (release / RELEASE_SLOWDOWN_FILE).read_text(encoding="utf-8").strip()
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{release / RELEASE_SLOWDOWN_FILE} holds {raw!r}, not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{release / RELEASE_SLOWDOWN_FILE} holds {raw!r}: it must be a number above 0")
    return value
