"""files/sglang_launch.py: secrets out of argv and logs, exit codes and signals kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "roles" / "sglang_common" / "files" / "sglang_launch.py"
KEY = "key-5b1e-secret"
HF = "hf_secret_token_9"


@pytest.fixture
def server(tmp_path):
    """A stand-in server script that prints what SGLang would print, and more."""
    script = tmp_path / "server.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, time
        key = sys.argv[sys.argv.index("--api-key") + 1] if "--api-key" in sys.argv else None
        print(f"server_args=ServerArgs(model_path='m', api_key={{key!r}})", flush=True)
        print("token in env:", os.environ.get("HF_TOKEN"), file=sys.stderr, flush=True)
        print("cmdline:", open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode(), flush=True)
        print("launcher key left in env:", "SGLANG_LAUNCH_API_KEY" in os.environ, flush=True)
        if os.environ.get("SLEEP"):
            open(os.environ["PIDFILE"], "w").write(str(os.getpid()))
            time.sleep(float(os.environ["SLEEP"]))
        sys.exit(int(os.environ.get("EXIT", "0")))
    """))
    return script


def launch(script, *args, env=None, **kw):
    env = dict(os.environ, SGLANG_LAUNCH_API_KEY=KEY, HF_TOKEN=HF, **(env or {}))
    return subprocess.run([sys.executable, str(LAUNCH), "--script", str(script), "--", "--model-path", "m", *args],
                          env=env, capture_output=True, text=True, timeout=30, **kw)


def test_key_reaches_the_server_but_not_argv_or_output(server):
    proc = launch(server)
    assert proc.returncode == 0
    assert "api_key='***'" in proc.stdout  # the server got a key, and its log line was masked
    assert "token in env: ***" in proc.stdout  # stderr is captured and masked too
    cmdline = next(line for line in proc.stdout.splitlines() if line.startswith("cmdline:"))
    assert "--api-key" not in cmdline
    assert "launcher key left in env: False" in proc.stdout
    assert KEY not in proc.stdout + proc.stderr and HF not in proc.stdout + proc.stderr


def test_exit_status_of_the_server_is_the_launchers(server):
    assert launch(server, env={"EXIT": "3"}).returncode == 3


def test_key_on_the_command_line_is_refused(server):
    proc = launch(server, "--api-key", "x")
    assert proc.returncode == 2 and "SGLANG_LAUNCH_API_KEY" in proc.stderr


def test_no_key_no_api_key_argument(server):
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_LAUNCH_API_KEY"}
    proc = subprocess.run([sys.executable, str(LAUNCH), "--script", str(server), "--"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert "api_key=None" in proc.stdout


def start_sleeping(server, tmp_path):
    """Launch a server that sleeps; return the launcher process and the server's pid."""
    pidfile = tmp_path / "pid"
    env = dict(os.environ, SGLANG_LAUNCH_API_KEY=KEY, SLEEP="60", PIDFILE=str(pidfile))
    proc = subprocess.Popen([sys.executable, str(LAUNCH), "--script", str(server), "--"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, int(pidfile.read_text())


def test_server_dies_with_a_killed_launcher(server, tmp_path):
    proc, child = start_sleeping(server, tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the server outlived its launcher")


def test_sigterm_is_forwarded_and_reported(server, tmp_path):
    proc, _ = start_sleeping(server, tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM
