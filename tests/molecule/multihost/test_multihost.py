"""Verifier of molecule/multihost: two GPU hosts behind the real gateway (smg, since test_gateway_migration.py
moved the converge's sglang-router to it), seen from outside.

The traffic comes from this machine (the controller) to the router container's address on
the scenario's podman network, as clients would reach a router. Figures are printed and
written to $MOLECULE_EPHEMERAL_DIRECTORY/multihost-figures.json.
"""

import configparser
import json
import os
import re
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import testinfra

from boot import reboot, starts_at_boot
from waiting import address, record_figures

ROUTER = "multihost-router"
GPUS = ["multihost-gpu1", "multihost-gpu2"]
testinfra_hosts = [f"podman://{ROUTER}"]  # cluster tests: run once, not once per host
ROOT = Path(__file__).resolve().parents[3]
KEY = "test-only-multihost-key-5e2b91"
CONTROL = "test-only-multihost-control-plane-7f3e0d"  # the gateway's control-plane key (secrets.yml)
SERVICE = "smg"
ROUTER_PORT = 30080
SERVER_PORT = 30000
FIGURES = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "multihost-figures.json"


def record(**figures):
    record_figures(FIGURES, **figures)


def call(url, body=None, key=KEY, timeout=60, method=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers=headers, method=method)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read()


def router_url():
    return f"http://{address(ROUTER)}:{ROUTER_PORT}"


def workers():
    return json.loads(call(router_url() + "/workers", key=CONTROL)[1])["workers"]


def generate(base, stream=False, tokens=16, timeout=60):
    """One /generate; True when the whole answer (every token) arrived."""
    body = {"text": "Rolling upgrades must not drop requests.", "stream": stream,
            "sampling_params": {"max_new_tokens": tokens, "temperature": 0}}
    status, raw = call(base + "/generate", body, timeout=timeout)
    if status != 200:
        return False
    if not stream:
        return json.loads(raw)["meta_info"]["completion_tokens"] == tokens
    events = [line[5:].strip() for line in raw.decode().splitlines() if line.startswith("data:")]
    return events[-1] == "[DONE]" and json.loads(events[-2])["meta_info"]["completion_tokens"] == tokens


class Traffic:
    """Clients sending requests through the router until stopped; counts every outcome."""

    def __init__(self, base, clients=4):
        self.base, self.clients = base, clients
        self.sent = self.ok = self.failed = 0
        self.errors = []
        self.min_workers = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.client, args=(i,), daemon=True) for i in range(clients)]
        self.threads.append(threading.Thread(target=self.watch, daemon=True))

    def client(self, i):
        n = 0
        while not self.stop.is_set():
            n += 1
            with self.lock:
                self.sent += 1
            try:
                good = generate(self.base, stream=(i + n) % 2 == 0, tokens=24)
                error = None if good else "incomplete answer"
            except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as exc:
                good, error = False, repr(exc)
            with self.lock:
                if good:
                    self.ok += 1
                else:
                    self.failed += 1
                    self.errors.append(error)

    def watch(self):
        """The fewest workers the router listed while traffic ran (proves hosts left it)."""
        while not self.stop.is_set():
            try:
                count = sum(1 for w in workers() if w["is_healthy"])
                self.min_workers = count if self.min_workers is None else min(self.min_workers, count)
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.3)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)


def configured_callbacks():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    return cfg.get("defaults", "callbacks_enabled", fallback="")


def playbook(name, *extra, task_times=None):
    """ansible-playbook name; with task_times (a path), every task's start and each host's result is also written
    there with its time (tests/harness/callback_plugins/sglang_task_times.py)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    if task_times:
        env.update(ANSIBLE_CALLBACK_PLUGINS=str(ROOT / "tests" / "harness" / "callback_plugins"),
                   ANSIBLE_CALLBACKS_ENABLED=",".join(filter(None, [configured_callbacks(), "sglang_task_times"])),
                   SGLANG_TEST_TASK_TIMES=str(task_times))
    started = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
                           str(ROOT / "playbooks" / name), *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    return proc, time.monotonic() - started


def gpu(name):
    return testinfra.get_host(f"podman://{name}")


def wait_all_healthy(timeout=90):
    """Until the router lists every GPU host healthy; a router that does not answer yet (just started) is waited for."""
    deadline = time.monotonic() + timeout
    ws = None
    while time.monotonic() < deadline:
        try:
            ws = workers()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            ws = repr(exc)
        else:
            if len(ws) == len(GPUS) and all(w["is_healthy"] for w in ws):
                return
        time.sleep(0.5)
    raise AssertionError(f"router workers not all healthy: {ws}")


def test_router_service_hardened_and_secret_kept_out_of_argv_and_journal(host):
    assert host.service(SERVICE).is_running and host.service(SERVICE).is_enabled
    env = host.file(f"/etc/sglang/{SERVICE}.env")
    assert env.mode == 0o600 and env.user == "root"
    assert CONTROL in host.check_output(f"cat /etc/sglang/{SERVICE}.env")
    unit = host.file(f"/etc/systemd/system/{SERVICE}.service").content_string
    assert KEY not in unit and CONTROL not in unit and "--api-key" not in unit and "control-plane" not in unit
    assert "/opt/sglang-router/smg-1.13.0/venv/bin/python" in unit and "--module smg.launch_router" in unit
    pid = host.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    cmdlines = host.run("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").stdout
    assert "smg.launch_router" in cmdlines and KEY not in cmdlines and CONTROL not in cmdlines
    journal = host.run(f"journalctl -u {SERVICE} --no-pager").stdout
    assert "Control plane API key authentication enabled (1 keys)" in journal
    assert KEY not in journal and CONTROL not in journal
    assert host.check_output(f"ps -o user= -p {pid}") == "sglang-router"


def test_router_play_again_and_in_check_mode_changes_nothing(host):
    for extra in ([], ["--check", "--diff"]):
        proc, wall = playbook("router.yml", *extra)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-4000:]
        recap = out.split("PLAY RECAP")[-1]
        assert f"{ROUTER}" in recap and "changed=0" in recap and "failed=0" in recap, recap
        assert KEY not in out and CONTROL not in out
        print(f"router play {' '.join(extra) or '(second run)'}: changed=0 in {wall:.1f} s")


def test_router_lists_both_gpu_hosts_and_requires_the_key(host):
    urls = sorted(w["url"] for w in workers())
    assert urls == [f"http://{g}:{SERVER_PORT}" for g in GPUS]
    try:
        call(router_url() + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}}, key=None)
        raise AssertionError("the router served a request without the API key")
    except urllib.error.HTTPError as exc:
        assert exc.code == 401


def control_plane_status(method, path, key, body=None):
    try:
        return call(router_url() + path, body, key=key, method=method)[0]
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_gateway_control_plane_refuses_workers_changes_without_its_own_key(host):
    """Issue 43 item 5 against the real gateway: adding or removing a worker without a key, or with the clients'
    key, is refused (401) and changes nothing; the control-plane key alone lists them."""
    wait_all_healthy()
    before = sorted((w["id"], w["url"]) for w in workers())
    first = before[0][0]
    extra = {"url": f"http://{address(GPUS[0])}:{SERVER_PORT}"}  # the same server under another name: a new worker
    for key in (None, KEY):
        assert control_plane_status("POST", "/workers", key, extra) == 401
        assert control_plane_status("DELETE", f"/workers/{first}", key) == 401
        assert control_plane_status("GET", "/workers", key) == 401
    time.sleep(3)  # the gateway applies worker jobs asynchronously: one that was queued would show by now
    assert sorted((w["id"], w["url"]) for w in workers()) == before
    assert all(w["is_healthy"] for w in workers())


def test_bad_settings_fail_before_any_host_leaves_the_router(host):
    wait_all_healthy()
    proc, wall = playbook("upgrade.yml", "--skip-tags", "build", "-e", "sglang_server_tp_size=3")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "sglang_server_tp_size" in out, out[-4000:]
    assert "Take this host out of every router" not in out
    assert len([w for w in workers() if w["is_healthy"]]) == len(GPUS)
    print(f"bad setting refused before the rollout in {wall:.1f} s")


# The simulator's speculative model (specmodel.py) and a two-candidate search: the start 3/1/4, then topk 4
# (21% faster). 10 runs per candidate: under 10% per-run noise (the simulator's 5% and two cores shared
# with the traffic) and 0.5% per start, the tuner that measures the spread between starts (a second start
# of the start, fresh starts of both at the end: about 5 restarts) serves it in 198 of 200 in-process
# trials at 6 minutes (tests/roles/sglang_bench/tunehost.py's host; 0 of 200 at the 3.5 it had before, its
# end reserve alone taking 2 of them; 174 at 4.5, 197 at 5.5).
TUNE_EXTRA = {
    "sglang_simulator_env": {"SGLANG_SIM_LOAD_SECONDS": "2", "SGLANG_SIM_DECODE_TOK_S": "120", "SGLANG_SIM_TTFT_MS": "50",
                                    "SGLANG_SIM_ACCEPT_FIRST": "0.8", "SGLANG_SIM_ACCEPT_DECAY": "0.9",
                                    "SGLANG_SIM_DRAFT_STEP_COST": "0.06", "SGLANG_SIM_VERIFY_TOKEN_COST": "0.02"},
    "sglang_bench_tune_num_steps": [3], "sglang_bench_tune_eagle_topk": [1, 4], "sglang_bench_tune_num_draft_tokens": [16],
    "sglang_bench_tune_runs": 10, "sglang_bench_tune_budget_minutes": 6, "sglang_bench_tune_restart_minutes": 0.5,
    "sglang_bench_tune_measure_minutes": 0.25,
    # EAGLE-3's lossless check of the winner (two more restarts and three probes, the host out of the routers) is
    # proven by molecule sglang_bench's tuning (pass) and its A/B (pass, and fail on a broken draft path).
    "sglang_bench_tune_lossless": False,
}


def test_tuning_one_host_under_traffic_fails_no_request(host):
    """playbooks/tune.yml on one host behind the router: it leaves, is tuned (about five restarts), serves the
    winner and rejoins; the other host serves every request meanwhile."""
    wait_all_healthy()
    results = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "bench-results"
    with Traffic(router_url()) as traffic:
        # --limit to the one GPU host: its leave and join delegate to the router (the router's own
        # validation needs every GPU host in the play, see README.md).
        proc, wall = playbook("tune.yml", "--limit", GPUS[0], "-e", json.dumps(TUNE_EXTRA),
                              "-e", f"sglang_bench_results_dir={results}")
        time.sleep(0.5)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert KEY not in out
    outcome = re.search(r'"msg": "((?:Winner|No significant gain)[^"]*)"', out)
    assert outcome, out[-5000:]
    assert outcome.group(1).startswith("Winner: tune-s3-k4-n16"), outcome.group(1)
    info = json.loads(call(f"http://{address(GPUS[0])}:{SERVER_PORT}/get_server_info")[1])
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (3, 4, 16)
    wait_all_healthy()
    record(tune_wall_s=round(wall, 1), tune_requests_sent=traffic.sent, tune_requests_failed=traffic.failed,
           tune_fewest_workers_in_router=traffic.min_workers)
    assert traffic.failed == 0, traffic.errors[:10]
    assert traffic.ok >= 10, f"too little traffic to mean anything: {traffic.ok}"
    assert traffic.min_workers == 1, "the tuned host never left the router"


def test_a_failing_host_stops_the_rollout_and_the_rest_keeps_serving(host):
    """gpu1's new release fails its patch check (a syntax error in kimi_k25.py): the rollout stops at
    gpu1, which leaves the router but keeps its server; gpu2 is never touched; no request fails.
    playbooks/router.yml then puts gpu1 back as it is."""
    wait_all_healthy()
    first, second = gpu(GPUS[0]), gpu(GPUS[1])
    serving = {h: h.file("/var/lib/sglang/serving-release").content_string.strip() for h in (first, second)}
    broken = "/opt/sglang/releases/r3-broken"
    first.run_expect([0], f"rm -rf {broken} && cp -a /opt/sglang/releases/r1-patched {broken} && "
                          f"echo 'def broken(:' >> {broken}/venv/lib/python3.11/site-packages/sglang/srt/models/kimi_k25.py && "
                          f"ln -sfnT {broken} /opt/sglang/current.new && mv -T /opt/sglang/current.new /opt/sglang/current")
    second.run_expect([0], "ln -sfnT /opt/sglang/releases/r1-patched /opt/sglang/current.new && "
                           "mv -T /opt/sglang/current.new /opt/sglang/current")
    pids = {h: h.check_output("systemctl show -p MainPID --value sglang-server") for h in (first, second)}
    results = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "bench-results"
    with Traffic(router_url()) as traffic:
        # No benchmark of the release before (upgrade_bench_before=false): the rollout stops at the patch check,
        # and the benchmark before is proven by the canary rollouts (test_multi_canary.py).
        proc, wall = playbook("upgrade.yml", "--skip-tags", "build", "-e", f"sglang_bench_results_dir={results}",
                              "-e", "upgrade_bench_before=false")
        time.sleep(1)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-5000:]
    assert f"Upgrade of {GPUS[0]} failed at" in out and "stays out of the routers" in out, out[-5000:]
    assert "TASK [sglang_router : Take this host out of every router]" in out
    assert GPUS[1] + "]" not in out.split(f"Upgrade of {GPUS[0]} failed at")[1].split("PLAY RECAP")[0]
    assert [w["url"] for w in workers()] == [f"http://{GPUS[1]}:{SERVER_PORT}"]
    for h in (first, second):  # neither server was restarted: gpu1 failed before, gpu2 never started
        assert h.check_output("systemctl show -p MainPID --value sglang-server") == pids[h]
    assert second.file("/var/lib/sglang/serving-release").content_string.strip() == serving[second]
    assert traffic.failed == 0 and traffic.ok >= 5, traffic.errors[:10]
    record(failed_rollout_wall_s=round(wall, 1), failed_rollout_requests_sent=traffic.sent,
           failed_rollout_requests_failed=traffic.failed)

    for h in (first, second):  # back to the release that serves; the router play re-registers gpu1
        h.run_expect([0], f"ln -sfnT {serving[h]} /opt/sglang/current.new && mv -T /opt/sglang/current.new /opt/sglang/current")
    proc, _ = playbook("router.yml")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "changed=1" in proc.stdout and "routes to" in proc.stdout
    wait_all_healthy()


def test_router_keeps_serving_when_one_server_is_killed(host):
    wait_all_healthy()
    victim = gpu(GPUS[0])
    pid = victim.check_output("systemctl show -p MainPID --value sglang-server")
    victim.run_expect([0], f"kill -9 {pid}")
    base, sent, failed, started = router_url(), 0, 0, time.monotonic()
    while time.monotonic() - started < 6:
        sent += 1
        try:
            failed += 0 if generate(base, stream=sent % 2 == 0, tokens=8) else 1
        except (urllib.error.URLError, OSError):
            failed += 1
    record(kill_one_server_requests_sent=sent, kill_one_server_requests_failed=failed)
    assert failed == 0 and sent >= 5
    wait_all_healthy(timeout=120)  # systemd restarts it and the router's health check takes it back


def health_settings(host):
    """The health check's settings smg runs with, read from its unit (what the role rendered)."""
    argv = host.check_output(f"systemctl show -p ExecStart --value {SERVICE}")
    flags = ("health-check-timeout-secs", "health-check-interval-secs", "health-failure-threshold",
             "health-success-threshold")
    return {flag: float(re.search(rf"--{flag} (\S+)", argv).group(1)) for flag in flags}


def wait_worker(url, healthy, timeout):
    """Seconds until the gateway lists worker `url` with is_healthy == healthy; fails with its list after timeout."""
    began, listed = time.monotonic(), None
    while time.monotonic() - began < timeout:
        try:
            listed = {w["url"]: w["is_healthy"] for w in workers()}
        except (urllib.error.URLError, OSError, ValueError) as exc:
            listed = repr(exc)
        else:
            if listed.get(url) is healthy:
                return time.monotonic() - began
        time.sleep(0.5)
    raise AssertionError(f"{url} not listed {'healthy' if healthy else 'unhealthy'} within {timeout:.0f} s: {listed}")


def test_a_server_that_stops_answering_leaves_the_gateway_and_returns_once_it_answers(host):
    """A hung server, not a dead one: SIGSTOP to the unit's processes (its port still accepts connections, nothing
    answers). The gateway's health check takes it out within failure_threshold probes of timeout + interval (the
    settings read from smg's unit), requests then go to the other host, and after SIGCONT the check takes it back.
    The requests that reached the hung server before it was taken out are counted, with how they ended."""
    wait_all_healthy()
    cfg = health_settings(host)
    timeout, interval = cfg["health-check-timeout-secs"], cfg["health-check-interval-secs"]
    out_bound = cfg["health-failure-threshold"] * (timeout + interval) + 30  # + 30 s: a busy test machine
    back_bound = cfg["health-success-threshold"] * interval + timeout + 30
    victim, url = gpu(GPUS[0]), f"http://{GPUS[0]}:{SERVER_PORT}"
    outcomes, lock, stop = [], threading.Lock(), threading.Event()

    def client(i):
        n = 0
        while not stop.is_set():
            n += 1
            began = time.monotonic()
            try:
                good = generate(router_url(), stream=(i + n) % 2 == 0, tokens=24, timeout=600)
                error = None if good else "incomplete answer"
            except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as exc:
                good, error = False, repr(exc)
            with lock:
                outcomes.append((began, time.monotonic(), good, error))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(3)]
    after_out = []
    try:
        for thread in threads:
            thread.start()
        time.sleep(2)
        victim.run_expect([0], "systemctl kill --signal=SIGSTOP sglang-server")
        stopped = time.monotonic()
        out_s = wait_worker(url, healthy=False, timeout=out_bound)
        # Taken out: new requests go to the other host only, each answered at once.
        for n in range(6):
            began = time.monotonic()
            after_out.append((generate(router_url(), stream=n % 2 == 0, tokens=24, timeout=60),
                              time.monotonic() - began))
    finally:
        victim.run("systemctl kill --signal=SIGCONT sglang-server")
        resumed = time.monotonic()
    try:
        back_s = wait_worker(url, healthy=True, timeout=back_bound)
        time.sleep(3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=660)
    hung = [o for o in outcomes if o[0] < stopped + out_s and o[1] > resumed]  # waited on the hung server
    failed = [o for o in outcomes if not o[2]]
    print(f"hung server: taken out {out_s:.1f} s after SIGSTOP (bound {out_bound:.0f} s: {cfg}), back {back_s:.1f} s "
          f"after SIGCONT (bound {back_bound:.0f} s); requests {len(outcomes)}, {len(hung)} waited across the hang, "
          f"{len(failed)} failed {[o[3] for o in failed][:5]}; while out: {after_out}")
    record(hung_server_out_s=round(out_s, 1), hung_server_back_s=round(back_s, 1),
           hung_server_requests=len(outcomes), hung_server_requests_across_hang=len(hung),
           hung_server_requests_failed=len(failed))
    assert all(good for good, _ in after_out), after_out
    assert all(seconds < 30 for _, seconds in after_out), after_out  # not queued behind the hung server
    assert victim.service("sglang-server").is_running
    wait_all_healthy()


def test_router_overhead_per_request(host):
    wait_all_healthy()
    direct, routed = f"http://{address(GPUS[1])}:{SERVER_PORT}", router_url()

    def median_latency(base, n=40):
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            assert generate(base, tokens=1)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    median_latency(routed, 5)  # warm connections and the router's policy state
    d, r = median_latency(direct), median_latency(routed)
    record(direct_request_median_ms=round(d * 1000, 2), routed_request_median_ms=round(r * 1000, 2),
           router_overhead_ms=round((r - d) * 1000, 2))
    assert r - d < 0.05, f"router adds {1000 * (r - d):.1f} ms per request"


def test_every_service_starts_at_boot(host):
    assert starts_at_boot(host, SERVICE)
    for name in GPUS:
        assert starts_at_boot(gpu(name), "sglang-server"), name


def test_the_whole_site_restarted_routes_again_without_ansible(host):
    """All three hosts restarted at once from outside (a power cut): with no Ansible run, the router
    comes back with its workers from its unit, the servers load again, and requests succeed."""
    wait_all_healthy()
    began = time.monotonic()
    threads = [threading.Thread(target=reboot, args=(name,)) for name in [ROUTER, *GPUS]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deadline = began + 180
    while time.monotonic() < deadline:
        try:
            if len(workers()) == len(GPUS) and all(w["is_healthy"] for w in workers()) and generate(router_url(), tokens=4):
                break
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError):
            pass
        time.sleep(0.5)
    else:
        raise AssertionError(f"the router is not routing {180} s after the restart: {workers()}")
    routing = time.monotonic() - began
    with Traffic(router_url()) as traffic:
        time.sleep(5)
    record(site_restart_to_routing_s=round(routing, 1), after_restart_requests_sent=traffic.sent,
           after_restart_requests_failed=traffic.failed)
    assert traffic.failed == 0 and traffic.ok >= 5, traffic.errors[:10]


# The two GPU hosts as one multi-node tensor-parallel group (inventory group kimi): tp 16 over two
# nodes of 8 GPUs; the router is left as it is (it is not part of these plays).
GROUP = ["-e", json.dumps({"sglang_server_multinode_group": "kimi", "sglang_server_tp_size": 16,
                           "sglang_server_nccl_socket_ifname": "eth0"})]
PORT = 20000


def started_at(h):
    return float(h.check_output("systemctl show -p ExecMainStartTimestampMonotonic --value sglang-server"))


def unit_flags(h):
    args = [line.strip().rstrip(" \\").strip('"') for line in
            h.file("/etc/systemd/system/sglang-server.service").content_string.splitlines()]
    return {flag: args[args.index(flag) + 1] for flag in ("--nnodes", "--node-rank", "--dist-init-addr") if flag in args}


def head_ready(timeout=120):
    head = gpu(GPUS[0])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = head.run(f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 -H 'Authorization: Bearer {KEY}' "
                        f"http://127.0.0.1:{SERVER_PORT}/health_generate").stdout
        if code == "200":
            return time.monotonic()
        time.sleep(0.5)
    raise AssertionError("the group's head is not serving")


def test_multinode_group_starts_head_first_restarts_and_rolls_back_together(host):
    head, other = gpu(GPUS[0]), gpu(GPUS[1])
    proc, wall = playbook("server.yml", *GROUP)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    for rank, h in enumerate((head, other)):
        assert unit_flags(h) == {"--nnodes": "2", "--node-rank": str(rank), "--dist-init-addr": f"{GPUS[0]}:{PORT}"}
        assert h.service("sglang-server").is_running
    assert started_at(head) < started_at(other)
    record(multinode_group_converge_s=round(wall, 1))

    # A change on one node only (its environment file drifted) restarts the whole group, head first.
    before = {h: started_at(h) for h in (head, other)}
    other.run_expect([0], "echo '# drift' >> /etc/sglang/sglang-server.env")
    proc, _ = playbook("server.yml", *GROUP)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    after = {h: started_at(h) for h in (head, other)}
    assert all(after[h] > before[h] for h in after), (before, after)
    assert after[head] < after[other]

    # A release that crashes on one node (no EAGLE-3 delegation, checks off): every node goes back.
    serving = other.file("/var/lib/sglang/serving-release").content_string.strip()
    bad = "/opt/sglang/releases/r4-unpatched"
    other.run_expect([0], f"rm -rf {bad} && cp -a {serving} {bad} && sed -i '/# BEGIN sglang_eagle3_patch/,"
                          f"/# END sglang_eagle3_patch/d' {bad}/venv/lib/python3.11/site-packages/sglang/srt/models/kimi_k25.py"
                          f" && ln -sfnT {bad} /opt/sglang/current.new && mv -T /opt/sglang/current.new /opt/sglang/current")
    proc, _ = playbook("server.yml", *GROUP, "-e", "sglang_server_preflight_checks=false")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-5000:]
    assert f"multi-node group kimi did not become ready (not ready: {GPUS[1]})" in out, out[-5000:]
    for h in (head, other):
        assert h.file("/opt/sglang/current").linked_to == serving
        assert h.service("sglang-server").is_running
    head_ready()


def test_multinode_group_comes_back_after_both_hosts_restart(host):
    other = gpu(GPUS[1])
    began = time.monotonic()
    threads = [threading.Thread(target=reboot, args=(name,)) for name in GPUS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ready = head_ready(timeout=180) - began
    assert other.service("sglang-server").is_running
    assert unit_flags(other)["--node-rank"] == "1"
    record(multinode_group_restart_to_head_ready_s=round(ready, 1))
