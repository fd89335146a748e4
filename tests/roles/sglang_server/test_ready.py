"""files/sglang_ready.py against the simulator: 'still starting' versus 'ready'.

The simulator starts as the unit starts it: the launcher with --module sglang_sim, from a
directory laid out like a simulated host (tools directory, the package on PYTHONPATH).

The unit-death path against real systemd is covered by the molecule scenario sglang_server
(rollback test); here the unit's states as ``systemctl show`` reports them decide.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from repo import load, role_file
from simtruth import free_port, host_tools

READY = role_file("sglang_server", "files", "sglang_ready.py")


def ready(port: int, seconds: float) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, str(READY), "--url", f"http://127.0.0.1:{port}", "--unit",
                           "no-such-unit-here", "--seconds", str(seconds), "--interval", "0.2"],
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_starting_then_ready(tmp_path):
    port = free_port()
    tools, path_env = host_tools(tmp_path / "host")
    env = dict(os.environ, SGLANG_SIM_LOAD_SECONDS="2", PYTHONDONTWRITEBYTECODE="1", **path_env)
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


@pytest.mark.parametrize(("state", "rc", "why"), [
    ({"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "0"}, 1,
     "crashed (systemd restarts it after RestartSec)"),
    ({"ActiveState": "activating", "SubState": "auto-restart-queued", "NRestarts": "0"}, 1,
     "crashed (systemd restarts it after RestartSec)"),
    ({"ActiveState": "activating", "SubState": "start", "NRestarts": "1"}, 1, "restarted by systemd after a crash"),
    ({"ActiveState": "failed", "SubState": "failed", "NRestarts": "0"}, 1, "failed"),
    ({"ActiveState": "activating", "SubState": "start", "NRestarts": "0"}, 3, None),  # starting: wait on
], ids=["auto-restart", "auto-restart-queued", "restarted", "failed", "starting"])
def test_a_crash_ends_the_wait_before_systemd_restarts_the_server(monkeypatch, capsys, state, rc, why):
    """A server whose process died is dead at once, not RestartSec later (30 s by default) when systemd restarts it."""
    mod = load(READY, "sglang_ready_states")
    monkeypatch.setattr(mod, "unit_state", lambda unit: state)
    started = time.monotonic()
    assert mod.main(["--url", f"http://127.0.0.1:{free_port()}", "--unit", "u", "--seconds", "0.3",
                     "--interval", "0.1"]) == rc
    out = json.loads(capsys.readouterr().out)
    assert out["ready"] is False and out["dead"] is (rc == 1) and out.get("why") == why
    assert time.monotonic() - started < 5
