"""Fixtures of the sglang_server tests: SGLang 0.5.9's source distribution, the release whose flags
the simulator takes (tests/harness/gen_sim_flags.py) and whose Kimi-K2.5 code it inspects.

The simulator and benchmark-client fixtures (start_sim, run_bench) are shared: tests/roles/conftest.py.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SDIST_VERSION = "0.5.9"
# sha256 of PyPI's sglang-0.5.9.tar.gz, so a corrupted or substituted cache file is caught.
SDIST_SHA256 = "11b1445bfb039c20217783850fda66a71b814391b2cf313f4e6cadc3b9fea41b"
SDIST_CACHE = Path.home() / ".cache" / "sglang-ansible" / "sdists"


@pytest.fixture(scope="session")
def sdist() -> Path:
    """SGLang 0.5.9's source distribution from PyPI, downloaded once into the shared cache."""
    path = SDIST_CACHE / f"sglang-{SDIST_VERSION}.tar.gz"
    if not path.exists():
        SDIST_CACHE.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               f"sglang=={SDIST_VERSION}", "-d", str(SDIST_CACHE)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not path.exists():
            pytest.fail(f"could not download the SGLang {SDIST_VERSION} sdist ({' '.join(cmd)}):\n{proc.stderr}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == SDIST_SHA256, f"{path} has sha256 {digest}, expected PyPI's {SDIST_SHA256}"
    return path


@pytest.fixture(scope="session")
def sdist_sglang_dir(sdist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files of the sdist's `sglang` package the simulator's Kimi check reads."""
    root = tmp_path_factory.mktemp("sglang-0.5.9")
    wanted = ("sglang/_version.py", "sglang/srt/models/kimi_k25.py",
              "sglang/srt/model_executor/model_runner.py", "sglang/srt/speculative/eagle_worker.py")
    with tarfile.open(sdist, "r:gz") as tar:
        for rel in wanted:
            member = tar.extractfile(f"sglang-{SDIST_VERSION}/{rel}")
            assert member is not None, rel
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(member.read())
    return root / "sglang"
