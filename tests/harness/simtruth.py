"""The SGLang SIMULATOR (TEST ONLY) for tests and scripts: how to start it, and what its timing
model says a benchmark must measure (molecule/resources/roles/sglang_simulator/files/sglang_sim/, engine.py).

For a batch of `batch` requests that run together for their whole life, each of N tokens:
  step     = SLOWDOWN_FACTOR / DECODE_TOK_S * (1 + BATCH_SLOWDOWN * (batch - 1))
  ttft     = TTFT_MS / 1000 * SLOWDOWN_FACTOR
  decode   = (N - 1) / A * step        (A = ACCEPT_LENGTH with speculation, else 1)
  tok_s          = N / (ttft + decode)          per request, send to last token
  decode_tok_s   = A / step                     tokens after the first / time after the first
  aggregate_tok_s = batch * N / (ttft + decode)
The simulator keeps each request's token total within 1 token of steps * A, so the only
systematic gap is the last verify step, which may be cut short by max_tokens.

The simulator is a package run by module: ``sim_command()`` is ``python -m sglang_sim`` with
``sim_path_env()`` putting the test role's files/ on PYTHONPATH; ``host_tools()`` lays out a directory
as a simulated host is laid out (the server's launcher in its tools directory, the package in the
test role's own directory on PYTHONPATH), for running it exactly as the unit does:
``sglang_launch.py --module sglang_sim -- ARGS``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from repo import ROOT

SIM_FILES = ROOT / "molecule" / "resources" / "roles" / "sglang_simulator" / "files"  # holds the package sglang_sim/
SIM_PACKAGE = SIM_FILES / "sglang_sim"
FLAGS_TABLE = SIM_PACKAGE / "flags.json"
LAUNCHER = ROOT / "roles" / "sglang_common" / "files" / "sglang_launch.py"
BENCH = ROOT / "roles" / "sglang_bench" / "files" / "sglang_bench.py"
READY_TEXT = "The server is fired up and ready to roll!"
# The reference launch line (Kimi-K2.5, EAGLE-3, 8 GPUs) as SGLang takes it.
REFERENCE_LAUNCH = (
    "--model-path moonshotai/Kimi-K2.5 --tp-size 8 --trust-remote-code --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3 --speculative-num-steps 3 "
    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --mem-fraction-static 0.9"
).split()


def sim_command() -> list[str]:
    """argv of the simulator, before SGLang's flags (needs ``sim_path_env()`` in the environment)."""
    return [sys.executable, "-m", "sglang_sim"]


def sim_path_env() -> dict[str, str]:
    """What puts the package on the path of a child process; no bytecode is left in the role."""
    return {"PYTHONPATH": str(SIM_FILES), "PYTHONDONTWRITEBYTECODE": "1"}


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without SGLang/OpenAI keys or simulator settings, plus the
    simulator's path and ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SGLANG_") and k not in ("OPENAI_API_KEY",)}
    env.update(sim_path_env())
    # Deterministic unless a test asks for noise (the simulator's own default is a real host's).
    env.update({"SGLANG_SIM_NOISE_PCT": "0", "SGLANG_SIM_START_NOISE_PCT": "0"})
    env.update(extra)
    return env


def host_tools(dest: Path) -> tuple[Path, dict[str, str]]:
    """``dest`` laid out like a simulated host: sglang_launch.py in ``dest/bin`` (the server's tools
    directory), the package in ``dest/sglang-sim/sglang_sim`` (the test role's directory). Returns the
    tools directory and the PYTHONPATH the unit gives the launch module (sglang_server_launch_env)."""
    tools, sim_dir = dest / "bin", dest / "sglang-sim"
    tools.mkdir(parents=True, exist_ok=True)
    shutil.copy2(LAUNCHER, tools / LAUNCHER.name)
    shutil.copytree(SIM_PACKAGE, sim_dir / SIM_PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__"),
                    dirs_exist_ok=True)
    return tools, {"PYTHONPATH": str(sim_dir)}


@dataclass(frozen=True)
class Truth:
    tok_s: float
    decode_tok_s: float
    ttft_ms: float
    aggregate_tok_s: float


def truth(max_tokens: int, decode_tok_s: float, ttft_ms: float, batch: int = 1, batch_slowdown: float = 0.0,
          accept_length: float = 1.0, slowdown_factor: float = 1.0) -> Truth:
    step = slowdown_factor / decode_tok_s * (1.0 + batch_slowdown * (batch - 1))
    ttft = ttft_ms / 1000.0 * slowdown_factor
    total = ttft + (max_tokens - 1) / accept_length * step
    return Truth(max_tokens / total, accept_length / step, ttft * 1000.0, batch * max_tokens / total)


def sim_env(decode_tok_s: float, ttft_ms: float, batch_slowdown: float = 0.0, accept_length: float = 2.5,
            slowdown_factor: float = 1.0) -> dict[str, str]:
    return {
        "SGLANG_SIM_LOAD_SECONDS": "0",
        "SGLANG_SIM_DECODE_TOK_S": str(decode_tok_s),
        "SGLANG_SIM_TTFT_MS": str(ttft_ms),
        "SGLANG_SIM_BATCH_SLOWDOWN": str(batch_slowdown),
        "SGLANG_SIM_ACCEPT_LENGTH": str(accept_length),
        "SGLANG_SIM_SLOWDOWN_FACTOR": str(slowdown_factor),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_sim(args: list[str], env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start the simulator (for scripts outside pytest); returns the process and its URL once ready."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    full_env.update(sim_path_env())
    full_env.update(env)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([*sim_command(), *args, "--host", "127.0.0.1", "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, env=full_env)
    deadline = time.monotonic() + 15
    while READY_TEXT not in log_path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"simulator did not start:\n{log_path.read_text(errors='replace')}")
        time.sleep(0.02)
    return proc, f"http://127.0.0.1:{port}"
