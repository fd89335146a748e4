"""What the simulator's timing model says a benchmark must measure (see files/sglang_sim.py).

For a batch of `batch` requests that run together for their whole life, each of N tokens:
  step     = SLOWDOWN_FACTOR / DECODE_TOK_S * (1 + BATCH_SLOWDOWN * (batch - 1))
  ttft     = TTFT_MS / 1000 * SLOWDOWN_FACTOR
  decode   = (N - 1) / A * step        (A = ACCEPT_LENGTH with speculation, else 1)
  tok_s          = N / (ttft + decode)          per request, send to last token
  decode_tok_s   = A / step                     tokens after the first / time after the first
  aggregate_tok_s = batch * N / (ttft + decode)
The simulator keeps each request's token total within 1 token of steps * A, so the only
systematic gap is the last verify step, which may be cut short by max_tokens.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SIM = Path(__file__).resolve().parents[2] / "roles" / "sglang_server" / "files" / "sglang_sim.py"
READY_TEXT = "The server is fired up and ready to roll!"


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
    full_env.update(env)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, str(SIM), *args, "--host", "127.0.0.1", "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, env=full_env)
    deadline = time.monotonic() + 15
    while READY_TEXT not in log_path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"simulator did not start:\n{log_path.read_text(errors='replace')}")
        time.sleep(0.02)
    return proc, f"http://127.0.0.1:{port}"
