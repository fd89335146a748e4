"""Fixtures shared by the role tests (tests/roles/<role>/): real container hosts, the SGLang
simulator and the benchmark client as subprocesses.

Each role's own conftest.py adds or overrides what only that role needs (sglang_build's hosts
also serve the SGLang sources; gpu_preflight's carry the driver packages). The molecule
verifiers (tests/molecule) are outside this directory: their testinfra runs never load this file.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from simtruth import BENCH, READY_TEXT, clean_env, free_port, sim_command
from testhost import TestHost, harness_or_skip
from testhost import run_playbook as run_on_host

# --------------------------------------------------------------------------- container hosts


@pytest.fixture(scope="session")
def harness() -> dict:
    """The test-host image and the test mirror (or a skip saying what to run first)."""
    return harness_or_skip()


@pytest.fixture(scope="module")
def testhost(harness, request) -> Iterator[TestHost]:
    """A fresh test host for the module, named after it (pytest-<module>)."""
    host = TestHost(f"pytest-{request.module.__name__.rsplit('.', 1)[-1].replace('_', '-')}",
                    harness["image"], harness["mirror"]).start()
    yield host
    host.remove()


@pytest.fixture
def run_playbook(harness, tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    """Run a playbook against a test host with the demo inventory's group_vars."""

    def run(host: TestHost, playbook: Path, *args: str) -> subprocess.CompletedProcess:
        return run_on_host(host, playbook, tmp_path / "inventory", harness["mirror"], *args)

    return run


# --------------------------------------------------------------------------- simulator and bench client
# The simulator runs as a real subprocess on a free loopback port (as on a test host), with its
# settings in the environment; the benchmark client runs as a subprocess too, exactly as users run
# it. Logs go to files under tmp_path, so a chatty server never blocks on a pipe and a failing
# test can show them.


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
    """Start the simulator (python -m sglang_sim); by default waits until it logs SGLang's ready line."""
    procs: list[SimProcess] = []

    def start(args: list[str] | None = None, env: dict[str, str] | None = None,
              wait: str | None = READY_TEXT, model: str = "moonshotai/Kimi-K2.5") -> SimProcess:
        port = free_port()
        name = f"sim{len(procs)}"
        out_path, err_path = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        settings = {"SGLANG_SIM_LOAD_SECONDS": "0", "PYTHONUNBUFFERED": "1"}
        settings.update(env or {})
        argv = [*sim_command(), "--model-path", model, *(args or []), "--host", "127.0.0.1", "--port", str(port)]
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
    """Run the role's files/sglang_bench.py like a user would; returns exit status, output and the JSON file."""
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
