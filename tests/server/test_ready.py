"""files/sglang_ready.py against the simulator: 'still starting' versus 'ready'.

The unit-death path (systemd restarted the server) needs systemd and is covered by the
molecule scenario sglang_server (rollback test).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READY = ROOT / "roles" / "sglang_server" / "files" / "sglang_ready.py"
SIM = ROOT / "roles" / "sglang_server" / "files" / "sglang_sim.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ready(port: int, seconds: float) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, str(READY), "--url", f"http://127.0.0.1:{port}", "--unit",
                           "no-such-unit-here", "--seconds", str(seconds), "--interval", "0.2"],
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_starting_then_ready():
    port = free_port()
    env = dict(os.environ, SGLANG_SIM_LOAD_SECONDS="2")
    sim = subprocess.Popen([sys.executable, str(SIM), "--model-path", "m", "--port", str(port)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        rc, out = ready(port, 0.5)
        assert rc == 3 and out["ready"] is False and out["dead"] is False
        assert out["health_generate"] in (503, "ConnectionRefusedError", "URLError")
        rc, out = ready(port, 15)
        assert rc == 0 and out["ready"] is True
    finally:
        sim.terminate()
        sim.wait(timeout=10)


def test_nothing_listening_is_still_starting_not_ready():
    rc, out = ready(free_port(), 0.5)
    assert rc == 3 and out["ready"] is False
