"""What the SIMULATOR (TEST ONLY) reads from a real SGLang package (SGLANG_SIM_SGLANG_DIR).

Its version (``_version.py``), and whether ``KimiK25ForConditionalGeneration`` defines the
methods SGLang 0.5.9 calls on an EAGLE-3 target: if not, the simulator dies at start-up with
SGLang's own traceback, as the real server does (``ast`` only; nothing is imported).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

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
