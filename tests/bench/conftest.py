"""Fixtures for the simulator and benchmark-client tests.

The simulator runs as a real subprocess on a free loopback port (as on a test host), with
its settings in the environment; the benchmark client runs as a subprocess too, exactly as
users run it.  Logs go to files under tmp_path, so a chatty server never blocks on a pipe
and a failing test can show them.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
# gen_sim_flags and simtruth next to this file, sglang_sim in files/: importable in any pytest import mode
sys.path[:0] = [str(Path(__file__).resolve().parent), str(REPO / "roles" / "sglang_server" / "files")]
from simtruth import READY_TEXT, SIM, free_port  # noqa: E402

BENCH = REPO / "roles" / "sglang_bench" / "files" / "sglang_bench.py"
FLAGS_TABLE = REPO / "roles" / "sglang_server" / "files" / "sglang_sim_flags.json"
SDIST_VERSION = "0.5.9"
# sha256 of PyPI's sglang-0.5.9.tar.gz, so a corrupted or substituted cache file is caught.
SDIST_SHA256 = "11b1445bfb039c20217783850fda66a71b814391b2cf313f4e6cadc3b9fea41b"
SDIST_CACHE = Path.home() / ".cache" / "sglang-ansible" / "sdists"
REFERENCE_LAUNCH = (
    "--model-path moonshotai/Kimi-K2.5 --tp-size 8 --trust-remote-code --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3 --speculative-num-steps 3 "
    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --mem-fraction-static 0.9"
).split()


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """The test process's environment without SGLang/OpenAI keys or simulator settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SGLANG_") and k not in ("OPENAI_API_KEY",)}
    env.update(extra)
    return env


@dataclass
class SimProcess:
    proc: subprocess.Popen[bytes]
    port: int
    out_path: Path
    err_path: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stdout(self) -> str:
        return self.out_path.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    def wait_for_log(self, text: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.stdout():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"simulator exited {self.proc.returncode} before {text!r}:\n"
                                     f"{self.stdout()}\n{self.stderr()}")
            time.sleep(0.02)
        raise AssertionError(f"simulator never logged {text!r}:\n{self.stdout()}\n{self.stderr()}")

    def wait_exit(self, timeout: float = 15.0) -> int:
        return self.proc.wait(timeout=timeout)


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., SimProcess]]:
    """Start files/sglang_sim.py; by default waits until it logs SGLang's ready line."""
    procs: list[SimProcess] = []

    def start(args: list[str] | None = None, env: dict[str, str] | None = None,
              wait: str | None = READY_TEXT, model: str = "moonshotai/Kimi-K2.5") -> SimProcess:
        port = free_port()
        name = f"sim{len(procs)}"
        out_path, err_path = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        settings = {"SGLANG_SIM_LOAD_SECONDS": "0", "PYTHONUNBUFFERED": "1"}
        settings.update(env or {})
        argv = [sys.executable, str(SIM), "--model-path", model, *(args or []), "--host", "127.0.0.1",
                "--port", str(port)]
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, env=clean_env(settings))
        sim = SimProcess(proc, port, out_path, err_path)
        procs.append(sim)
        if wait:
            sim.wait_for_log(wait)
        return sim

    yield start
    for sim in procs:
        if sim.proc.poll() is None:
            sim.proc.send_signal(signal.SIGTERM)
            try:
                sim.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                sim.proc.kill()
                sim.proc.wait()


@dataclass
class BenchResult:
    returncode: int
    stdout: str
    stderr: str
    json: dict[str, Any] | None


@pytest.fixture
def run_bench(tmp_path: Path) -> Callable[..., BenchResult]:
    """Run files/sglang_bench.py like a user would; returns exit status, output and the JSON file."""
    count = 0

    def run(url: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> BenchResult:
        nonlocal count
        count += 1
        out = tmp_path / f"bench{count}.json"
        proc = subprocess.run([sys.executable, str(BENCH), "--url", url, "--json", str(out), *args],
                              capture_output=True, text=True, env=clean_env(env or {}), timeout=timeout)
        data = json.loads(out.read_text(encoding="utf-8")) if out.exists() else None
        return BenchResult(proc.returncode, proc.stdout, proc.stderr, data)

    return run


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
