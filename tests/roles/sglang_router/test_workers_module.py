"""Module sglang_router_workers against the real gateway the role pins (smg, its PyPI wheel with its
dependencies in a venv), started here as its unit starts it (the project's secret-masking launcher, the
clients' key and a control-plane key of its own), in front of two labelled SGLang simulators."""

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

import router_cli
import server_facts
from repo import ROOT
from simtruth import sim_command, sim_path_env

KEY = "test-only-router-module-key-41d7"  # the clients' (and the servers') key
CONTROL = "test-only-router-module-control-plane-key-9c3a"  # the gateway's control-plane key
DEFAULTS = yaml.safe_load((ROOT / "roles/sglang_router/defaults/main.yml").read_text())
PINNED = (DEFAULTS["sglang_router_distribution"], DEFAULTS["sglang_router_version"])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer in {timeout} s")


def request(url, body=None, method=None, key=KEY):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, method=method,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    logs = tmp_path_factory.mktemp("router")
    procs, workers = [], []
    env = dict(os.environ, **sim_path_env(), SGLANG_SIM_LOAD_SECONDS="0.5", SGLANG_SIM_DECODE_TOK_S="50",
               SGLANG_SIM_TTFT_MS="20")
    try:
        for i in range(2):
            port = free_port()
            procs.append(subprocess.Popen(
                [*sim_command(), "--model-path", "sim-model", "--host",
                 "127.0.0.1", "--port", str(port), "--api-key", KEY],
                env=env, stdout=open(logs / f"sim{i}.log", "wb"), stderr=subprocess.STDOUT))
            workers.append(f"http://127.0.0.1:{port}")
        for url in workers:
            wait_http(url + "/health")
        port = free_port()
        router_log = logs / "router.log"
        python = router_cli.venv(*PINNED) / "bin" / "python"
        router = subprocess.Popen(
            [str(python), str(ROOT / "roles" / "sglang_common" / "files" / "sglang_launch.py"),
             "--module", "smg.launch_router", "--",
             "--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin",
             "--prometheus-port", str(free_port()), "--health-check-interval-secs", "1",
             "--worker-startup-timeout-secs", "5", "--worker-urls", *workers],
            env=dict(os.environ, SGLANG_LAUNCH_API_KEY=KEY, SGLANG_LAUNCH_CONTROL_PLANE_API_KEY=CONTROL,
                     HF_HUB_OFFLINE="1"),
            stdout=open(router_log, "wb"), stderr=subprocess.STDOUT)
        procs.append(router)
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/liveness")
        deadline = time.monotonic() + 30
        while len(request(base + "/workers", key=CONTROL)["workers"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        yield {"router": base, "workers": workers, "pid": router.pid, "log": router_log}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def module(router, workers, check=False, key=CONTROL, **params):
    args = {"router_url": router, "api_key": key, "worker_api_key": KEY, "workers": workers, **params}
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1")
    cmd = ["ansible", "localhost", "-c", "local", "-M", str(ROOT / "roles" / "sglang_router" / "library"),
           "-m", "sglang_router_workers", "-a", json.dumps(args)] + (["--check"] if check else [])
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    text = proc.stdout
    out = json.JSONDecoder().raw_decode(text[text.index("{\n"):])[0]  # between profile_tasks' lines
    result = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return result, proc.stdout + proc.stderr


def registered(cluster):
    return sorted(w["url"] for w in request(cluster["router"] + "/workers", key=CONTROL)["workers"])


def test_removal_stops_new_requests_but_lets_streams_finish_and_is_idempotent(cluster):
    one, two = cluster["workers"]
    result, out = module(cluster["router"], cluster["workers"])
    assert result["changed"] is False and not result.get("failed"), out

    done = {}

    def stream():  # ~2 s of tokens, started before the removal
        req = urllib.request.Request(cluster["router"] + "/generate", headers={
            "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}, data=json.dumps(
            {"text": "x", "stream": True, "sampling_params": {"max_new_tokens": 100}}).encode())
        with urllib.request.urlopen(req, timeout=30) as resp:
            events = [line for line in resp.read().decode().splitlines() if line.startswith("data:")]
        done["last"] = json.loads(events[-2][5:])["meta_info"]["completion_tokens"]

    streams = [threading.Thread(target=stream) for _ in range(2)]  # round robin: one on each worker
    for t in streams:
        t.start()
    time.sleep(0.5)
    result, out = module(cluster["router"], [two + "/"], state="absent")
    assert result["changed"] is True and result["removed"] == [two], out
    assert registered(cluster) == [one]
    for t in streams:
        t.join(timeout=30)
    assert done["last"] == 100
    result, out = module(cluster["router"], [two], state="absent")
    assert result["changed"] is False, out


def test_check_mode_reports_without_registering_then_present_waits_for_health(cluster):
    one, two = cluster["workers"]
    module(cluster["router"], [two], state="absent")
    result, out = module(cluster["router"], cluster["workers"], check=True, wait_healthy=True)
    assert result["changed"] is True and result["added"] == [two], out
    assert registered(cluster) == [one]
    result, out = module(cluster["router"], cluster["workers"], wait_healthy=True, timeout=30)
    assert result["changed"] is True and result["added"] == [two], out
    assert sorted(w["url"] for w in result["workers"] if w["healthy"]) == sorted([one, two])
    assert registered(cluster) == sorted([one, two])


def test_wrong_key_fails_clearly_and_no_key_is_shown(cluster):
    result, out = module(cluster["router"], cluster["workers"], key="not-the-key")
    assert result.get("failed") and "HTTP 401" in result["msg"], out
    assert "sglang_router_control_plane_api_key must be the one" in result["msg"]
    assert "not-the-key" not in out and KEY not in out and CONTROL not in out


@pytest.mark.parametrize("key", ["", KEY], ids=["no key", "the clients' key"])
@pytest.mark.parametrize("state", ["absent", "present"])
def test_without_the_control_plane_key_no_worker_is_added_or_removed(cluster, key, state):
    """The gateway's control plane takes its own key only: the module with the clients' key, or none, is refused
    (401) and the gateway's workers stay as they were, whichever change it asked for."""
    one, two = cluster["workers"]
    module(cluster["router"], cluster["workers"], wait_healthy=True)
    if state == "present":
        module(cluster["router"], [two], state="absent")
    before = registered(cluster)
    result, out = module(cluster["router"], [two], key=key, state=state)
    assert result.get("failed") and "HTTP 401" in result["msg"], out
    assert registered(cluster) == before
    module(cluster["router"], cluster["workers"], wait_healthy=True)


def test_a_worker_added_through_the_api_gets_the_servers_key(cluster):
    """Neither release gives a worker added through its API the gateway's own --api-key (smg warns "Adding worker
    ... without API key"): the module registers the servers' key with it, so the gateway's own calls to the
    worker carry it, not only the clients' requests it forwards."""
    one, two = cluster["workers"]
    module(cluster["router"], [two], state="absent")
    mark = len(cluster["log"].read_bytes())
    result, out = module(cluster["router"], cluster["workers"], wait_healthy=True, timeout=30)
    assert result["added"] == [two], out
    log = cluster["log"].read_bytes()[mark:].decode(errors="replace")
    assert "worker_registration" in log and "without API key" not in log, log[-3000:]


def test_a_worker_that_never_comes_up_times_out_naming_it(cluster):
    dead = f"http://127.0.0.1:{free_port()}"
    result, out = module(cluster["router"], [dead], wait_healthy=True, timeout=3)
    assert result.get("failed") and "timed out after 3 s" in result["msg"] and dead in result["msg"], out


def test_the_launcher_keeps_the_keys_out_of_argv_and_the_log(cluster):
    pid = cluster["pid"]
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert children, "the launcher runs the gateway in a child"
    cmdlines = b"\n".join(Path(f"/proc/{p}/cmdline").read_bytes() for p in [pid, *children])
    assert b"smg.launch_router" in cmdlines
    assert KEY.encode() not in cmdlines and CONTROL.encode() not in cmdlines
    log = cluster["log"].read_text(errors="replace")
    assert "Control plane API key authentication enabled (1 keys)" in log
    assert KEY not in log and CONTROL not in log
    assert request(cluster["router"] + "/readiness")["status"] == "ready"


def leave_or_join(cluster, tmp_path, entry, with_router=True, **variables):
    """roles/sglang_router tasks_from leave/join on a 'GPU host' that is this machine (local
    connection), its server being the second simulator, the router the real one above."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    server_port = int(cluster["workers"][1].rsplit(":", 1)[1])
    router_port = int(cluster["router"].rsplit(":", 1)[1])
    groups = {"gpu_hosts": {"hosts": {"gpu": {}}}}
    if with_router:
        groups["sglang_routers"] = {"hosts": {"rt": {}}}
    inventory = {"all": {"hosts": {"gpu": local, "rt": local}, "children": groups, "vars": {
        "sglang_server_port": server_port, "sglang_common_api_key": KEY, "sglang_router_control_plane_api_key": CONTROL,
        "sglang_router_host": "127.0.0.1", "sglang_router_port": router_port,
        "sglang_server_advertise_address": "127.0.0.1", "sglang_router_drain_timeout": 30, **variables}}}
    (tmp_path / "hosts.json").write_text(json.dumps(inventory))
    # The GPU host's server has run: its endpoint recorded as role sglang_server records it (tests/harness/server_facts.py).
    (tmp_path / "play.yml").write_text(server_facts.RECORD_PLAY.format(hosts="gpu_hosts") + yaml.safe_dump([{
        "name": "leave or join", "hosts": "gpu_hosts", "gather_facts": False,
        "tasks": [{"name": "entry", "ansible.builtin.include_role": {"name": "sglang_router", "tasks_from": entry}}]}]))
    proc = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.json"), str(tmp_path / "play.yml"),
                           "-e", f"facts_root={tmp_path / 'hosts'}"],
                          cwd=ROOT, env=server_facts.env(), capture_output=True, text=True, timeout=180)
    return proc, time.monotonic()


def long_request(base, tokens, done):
    req = urllib.request.Request(base + "/generate", headers={"Authorization": f"Bearer {KEY}",
                                                              "Content-Type": "application/json"},
                                 data=json.dumps({"text": "x", "sampling_params": {"max_new_tokens": tokens}}).encode())
    with urllib.request.urlopen(req, timeout=60) as resp:
        done["tokens"] = json.loads(resp.read())["meta_info"]["completion_tokens"]
    done["at"] = time.monotonic()


def test_leave_takes_the_host_out_and_waits_for_its_requests_then_join_puts_it_back(cluster, tmp_path):
    one, two = cluster["workers"]
    module(cluster["router"], cluster["workers"], wait_healthy=True)
    done = {}
    t = threading.Thread(target=long_request, args=(two, 150, done))  # ~3 s on the host itself
    t.start()
    time.sleep(0.3)
    proc, ended = leave_or_join(cluster, tmp_path, "leave")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert registered(cluster) == [one]
    assert done.get("tokens") == 150 and done["at"] <= ended, "leave returned before the host had drained"
    assert "gpu drained in " in out and "zero for the last 5 s (sglang_router_drain_settle: 5 s)" in out, out[-3000:]
    assert KEY not in out and CONTROL not in out
    t.join()
    proc, _ = leave_or_join(cluster, tmp_path, "join")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert registered(cluster) == sorted([one, two])
    assert all(w["is_healthy"] for w in request(cluster["router"] + "/workers", key=CONTROL)["workers"])


def test_a_drain_that_times_out_says_what_was_in_flight_and_restarts_nothing(cluster, tmp_path):
    """The drain task keeps no_log (the key is a header); its failure, said by the assert after it, names
    the count and kind still in flight and what SGLang does not count; the host stays out of the router."""
    one, two = cluster["workers"]
    module(cluster["router"], cluster["workers"], wait_healthy=True)
    done = {}
    t = threading.Thread(target=long_request, args=(two, 1000, done))  # ~20 s: well past ansible-playbook's start and the 2 s
    t.start()
    time.sleep(0.5)
    proc, _ = leave_or_join(cluster, tmp_path, "leave", sglang_router_drain_timeout=2, sglang_router_drain_settle=1)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "gpu left the router, but after sglang_router_drain_timeout (2 s) it still had 1 request in flight " \
           "(1 running, 0 waiting)" in out, out[-3000:]
    assert "counts no request its tokenizer manager still tokenizes" in out and "Nothing was restarted" in out
    assert KEY not in out and registered(cluster) == [one]
    t.join()
    assert done.get("tokens") == 1000
    proc, _ = leave_or_join(cluster, tmp_path, "join")
    assert proc.returncode == 0 and registered(cluster) == sorted([one, two]), (proc.stdout + proc.stderr)[-3000:]


def test_without_routers_leave_does_not_wait_for_a_drain_that_cannot_happen(cluster, tmp_path):
    done = {}
    t = threading.Thread(target=long_request, args=(cluster["workers"][1], 400, done))  # ~8 s
    t.start()
    time.sleep(0.3)
    proc, ended = leave_or_join(cluster, tmp_path, "leave", with_router=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Wait until the server has finished its in-flight requests (drain)" in out
    assert "at" not in done, "leave waited for the request although no router could stop new ones"
    t.join()
    assert registered(cluster) == sorted(cluster["workers"])


def test_a_worker_the_gateway_knows_already_is_no_failure(cluster):
    """The real gateway answers 409 to adding a worker it knows; a gateway just started registers the workers of its
    command line after it listens, so the module's list can miss one the gateway is registering (molecule
    multihost's move to smg failed on this once): the module goes on and waits for it registered."""
    one, _two = cluster["workers"]
    assert one in registered(cluster)
    with pytest.raises(urllib.error.HTTPError) as conflict:
        request(cluster["router"] + "/workers", {"url": one, "api_key": KEY}, method="POST", key=CONTROL)
    assert conflict.value.code == 409
    spec = importlib.util.spec_from_file_location("sglang_router_workers_409",
                                                  ROOT / "roles/sglang_router/library/sglang_router_workers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    class StaleFirst(mod.Router):
        """The first read misses every worker, as just after the gateway started."""
        reads = 0

        def workers(self):
            self.reads += 1
            return {} if self.reads == 1 else super().workers()

    class Module:
        params = {"router_url": cluster["router"], "api_key": CONTROL, "worker_api_key": KEY, "workers": [one],
                  "state": "present", "wait_healthy": True, "timeout": 30}
        check_mode = False

    mod.Router = StaleFirst
    result = mod.run(Module())
    assert result["added"] == [one] and {"url": one, "healthy": True} in result["workers"], result
    assert registered(cluster).count(one) == 1
