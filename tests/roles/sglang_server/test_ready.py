"""files/sglang_ready.py against the simulator: 'still starting' versus 'ready'.

The simulator starts as the unit starts it: the launcher with --module sglang_sim, from a
directory laid out like the host's tools directory.

The unit-death path (systemd restarted the server) needs systemd and is covered by the
molecule scenario sglang_server (rollback test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from repo import role_file
from simtruth import free_port, host_tools

READY = role_file("sglang_server", "files", "sglang_ready.py")


def ready(port: int, seconds: float) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, str(READY), "--url", f"http://127.0.0.1:{port}", "--unit",
                           "no-such-unit-here", "--seconds", str(seconds), "--interval", "0.2"],
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_starting_then_ready(tmp_path):
    port = free_port()
    tools = host_tools(tmp_path / "bin")
    env = dict(os.environ, SGLANG_SIM_LOAD_SECONDS="2", PYTHONDONTWRITEBYTECODE="1")
    sim = subprocess.Popen([sys.executable, str(tools / "sglang_launch.py"), "--module", "sglang_sim", "--",
                            "--model-path", "m", "--port", str(port)], env=env,
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
