"""sglang_common's files/sglang_launch.py as the server's unit runs it: secrets out of argv and logs,
exit codes and signals kept; and the simulator package run by it with --module sglang_sim."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import pytest

from simtruth import LAUNCHER as LAUNCH
from simtruth import READY_TEXT, free_port, host_tools

KEY = "key-5b1e-secret"
HF = "hf_secret_token_9"


@pytest.fixture
def server(tmp_path):
    """A stand-in server script that prints what SGLang would print, and more."""
    script = tmp_path / "server.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        key = sys.argv[sys.argv.index("--api-key") + 1] if "--api-key" in sys.argv else None
        print(f"server_args=ServerArgs(model_path='m', api_key={key!r})", flush=True)
        print("token in env:", os.environ.get("HF_TOKEN"), file=sys.stderr, flush=True)
        print("cmdline:", open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode(), flush=True)
        print("launcher key left in env:", "SGLANG_LAUNCH_API_KEY" in os.environ, flush=True)
        if os.environ.get("SLEEP"):
            # atomically: the test polls for the file and reads it at once
            open(os.environ["PIDFILE"] + ".tmp", "w").write(str(os.getpid()))
            os.replace(os.environ["PIDFILE"] + ".tmp", os.environ["PIDFILE"])
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
    deadline = time.monotonic() + 30
    while not pidfile.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"the launched server wrote no pid within 30 s (launcher exit: {proc.poll()})")
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


def get(url, key=None):
    """(status, JSON body or None) of a GET."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def test_the_simulator_package_runs_under_the_launcher_as_the_unit_starts_it(tmp_path):
    """ExecStart of a simulated host: <tools>/sglang_launch.py --module sglang_sim -- ARGS, with the
    package copied whole into its own directory, that directory alone on PYTHONPATH (as
    sglang_server_launch_env puts it)."""
    tools, path_env = host_tools(tmp_path / "host")
    port = free_port()
    log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_") and k != "PYTHONPATH"}
    env.update(SGLANG_LAUNCH_API_KEY=KEY, HF_TOKEN=HF, SGLANG_SIM_LOAD_SECONDS="0", PYTHONDONTWRITEBYTECODE="1",
               **path_env)
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(tools / "sglang_launch.py"), "--module", "sglang_sim", "--",
                                 "--model-path", "m", "--speculative-algorithm", "EAGLE3", "--host", "127.0.0.1",
                                 "--port", str(port)], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while READY_TEXT not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.05)
        status, info = get(f"http://127.0.0.1:{port}/get_server_info", KEY)
        assert status == 200 and info["simulator"] is True and info["api_key"] == KEY  # the key reached it
        assert info["speculative_num_draft_tokens"] == 4  # SGLang's defaults, from the package's flags.json
        assert get(f"http://127.0.0.1:{port}/get_server_info")[0] == 401
        text = log.read_text(errors="replace")
        assert text.splitlines()[0].split("] ", 1)[1].startswith("SGLang SIMULATOR (test double")
        assert "api_key='***'" in text and KEY not in text  # server_args=ServerArgs(...) masked
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

