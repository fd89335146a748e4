"""TEST ONLY: the wheels FlashInfer 0.6.3 needs to be imported, for the test hosts' Python 3.11.

The test hosts install every component with --no-deps (inventory/demo), so a release there
cannot `import flashinfer`; the FlashInfer AOT step runs the release's Python, which imports it.
These are FlashInfer's import-time dependencies besides torch and apache-tvm-ffi (both in the
harness's wheelhouse, tests/harness/sources.py), plus ninja (FlashInfer builds with it) and, for
the tests on this machine, FlashInfer's own PyPI wheel. Downloaded once with pip into
~/.cache/sglang-ansible/flashinfer-aot-wheels-<hash of this list>/ (network only then).

``python3 tests/roles/sglang_build/aot_wheels.py`` prints that directory (downloading when needed).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

# What `import flashinfer` 0.6.3 reaches (flashinfer/jit, utils, cubin_loader) and its build.
DEPENDENCIES = ["filelock==4.3.1", "jinja2==3.1.6", "markupsafe==3.0.4", "numpy==2.4.6", "nvidia-ml-py==13.615.71",
                "requests==2.34.2", "urllib3==2.8.0", "certifi==2026.10.19.post1", "ninja==1.13.2"]
# Also in the harness's wheelhouse (sources.py): the rest of the release venv's import closure.
FROM_WHEELHOUSE = ["apache-tvm-ffi", "packaging", "idna", "typing-extensions"]
FLASHINFER = "flashinfer-python==0.6.3"
PYTHON = "3.11"
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64"]
CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible"))


def ensure() -> Path:
    wanted = DEPENDENCIES + [FLASHINFER]
    dest = CACHE / f"flashinfer-aot-wheels-{hashlib.sha256(' '.join(wanted + PLATFORMS + [PYTHON]).encode()).hexdigest()[:12]}"
    if (dest / "complete").exists():
        return dest
    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version",
           PYTHON, "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS), "-d", str(part), *wanted]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pip download of FlashInfer's test wheels failed:\n{proc.stdout}{proc.stderr}")
    (part / "complete").write_text("\n".join(sorted(p.name for p in part.glob("*.whl"))) + "\n")
    part.rename(dest)
    return dest


if __name__ == "__main__":
    print(ensure())
