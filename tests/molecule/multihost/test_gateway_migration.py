"""Verifier of molecule/multihost: the converge's sglang-router 0.3.2 moved to smg, the role's default, by one
run of playbooks/router.yml under continuous traffic (issue 43, item 1); first two moves that fail and leave
sglang-router serving: smg cannot start at all (its handover instance never answers: nothing was stopped), and smg's
own unit never answers on the port after sglang-router was stopped (under traffic: the port given back, 0 failed).

Its name puts it first among the scenario's verifiers: every later one runs on smg. The traffic is the rolling
upgrades' (four clients, short requests, half of them streamed) plus streams of 1200 tokens (4 to 10 s each on
the simulator), always one in flight, so that streams are on the old gateway when it is told to stop.

The move on one gateway host goes through a handover (roles/sglang_router/tasks/handover.yml): a handover instance of
smg on port 30180 serves while the units change, and an nftables table of the role redirects new connections to
port 30080 there. So no request may fail in any way: no refused connection, no connection reset before an answer,
no 404 from a gateway without workers, no cut stream, every long stream's tokens complete. After the move, and after
a move that failed, the role's nftables table and the handover instance are gone.
"""

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from test_multihost import (
    CONTROL,
    FIGURES,
    GPUS,
    KEY,
    ROUTER,
    ROUTER_PORT,
    Traffic,
    generate,
    gpu,
    playbook,
    record,
    router_url,
    wait_all_healthy,
)

testinfra_hosts = [f"podman://{ROUTER}"]  # cluster tests: run once, not once per host
LONG_TOKENS = 1200


def exchange(tokens, stream):
    """One /generate through the gateway: 'ok', or why not: 'refused' (nothing listens), 'reset' (the connection
    closed before any answer: queued on a listener that closed), 'HTTP <code>', 'cut' (an answer that broke off),
    'incomplete' (fewer tokens)."""
    body = {"text": "Gateways move without dropping requests.", "stream": stream,
            "sampling_params": {"max_new_tokens": tokens, "temperature": 0}}
    req = urllib.request.Request(router_url() + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    try:
        resp = urllib.request.urlopen(req, timeout=120)
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        return "refused" if isinstance(exc.reason, ConnectionRefusedError) else "reset"
    except (http.client.HTTPException, OSError):
        return "reset"
    try:
        with resp:
            raw = resp.read()
    except (http.client.HTTPException, OSError):
        return "cut"
    if not stream:
        return "ok" if json.loads(raw)["meta_info"]["completion_tokens"] == tokens else "incomplete"
    events = [line[5:].strip() for line in raw.decode().splitlines() if line.startswith("data:")]
    done = events and events[-1] == "[DONE]" and json.loads(events[-2])["meta_info"]["completion_tokens"] == tokens
    return "ok" if done else "cut"


class MigrationTraffic(Traffic):
    """The rolling upgrades' clients, each outcome kept with its times, and the long streams."""

    def __init__(self):
        super().__init__(router_url())
        self.outcomes = []  # (started, ended, kind, outcome)
        self.threads = [threading.Thread(target=self.client, args=(i,), daemon=True) for i in range(self.clients)]
        self.threads += [threading.Thread(target=self.long_streams, args=(d,), daemon=True) for d in (0, 5)]

    def note(self, started, kind, outcome):
        with self.lock:
            self.outcomes.append((started, time.time(), kind, outcome))  # epoch: beside the playbook's task times

    def client(self, i):
        n = 0
        while not self.stop.is_set():
            n += 1
            started = time.time()
            outcome = exchange(24, stream=(i + n) % 2 == 0)
            self.note(started, "short", outcome)
            if outcome != "ok":
                time.sleep(0.05)  # a refused port answers at once: do not spin

    def long_streams(self, delay):
        self.stop.wait(delay)  # two of them, staggered: one is always in flight
        while not self.stop.is_set():
            started = time.time()
            outcome = exchange(LONG_TOKENS, stream=True)
            self.note(started, "long", outcome)
            if outcome != "ok":
                time.sleep(0.05)


BAD_FLAG = "--no-such-flag-for-the-rescue-test"
HANDOVER_TABLE = "sglang_router_handover"
HANDOVER_PORTS = (30180, 29180)
STOP_OLD = "sglang_router : Stop the other gateway without waiting for the requests it carries (they finish within its grace)"
GIVE_BACK = "sglang_router : Give the port back to the gateway this run was replacing"
REDIRECT = "sglang_router : Redirect new connections to the gateway's port to the handover instance (nftables)"
# A drop-in that keeps smg's own unit (not its handover instance, whose unit has another name) from ever listening.
DEAF_DROPIN = "/etc/systemd/system/smg.service.d/zz-test-deaf.conf"


def assert_no_handover(host):
    """The handover ended: the role's nftables table, the handover instance's unit (a runtime one) and its listeners
    are gone."""
    tables = host.check_output("nft list tables")
    assert HANDOVER_TABLE not in tables, tables
    for unit in ("smg-handover", "sglang-router-handover"):
        assert not host.file(f"/run/systemd/system/{unit}.service").exists
        assert host.run(f"systemctl list-units --all --no-legend {unit}.service").stdout.strip() == ""
    for port in HANDOVER_PORTS:
        assert host.check_output(f"ss -Htln 'sport = :{port}'") == "", port


def task_events(times):
    events = [json.loads(line) for line in times.read_text().splitlines()]
    did = {(e["task"], e["event"]) for e in events if e["host"] == ROUTER}
    failure = next((e.get("msg", "") for e in events
                    if e["task"] == "sglang_router : Fail with what the router said" and e["event"] == "failed"), "")
    return did, failure


def outcome_figures(outcomes):
    """Requests sent, and those that did not end ok by kind; long streams and their durations."""
    failed = [o for o in outcomes if o[3] != "ok"]
    longs = [o for o in outcomes if o[2] == "long"]
    return {"requests": len(outcomes), "failed": len(failed),
            "refused": sum(o[3] == "refused" for o in failed), "reset": sum(o[3] == "reset" for o in failed),
            "http_404": sum(o[3] == "HTTP 404" for o in failed),
            "long_streams_ok": sum(o[3] == "ok" for o in longs),
            "long_stream_s": [round(o[1] - o[0], 1) for o in longs if o[3] == "ok"]}


def listener_unit(host, port):
    """The systemd unit of the process that listens on port (from its cgroup), or ''."""
    pids = host.check_output(f"ss -ltnpH 'sport = :{port}' | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u")
    units = {host.check_output(f"grep -o '[^/]*[.]service' /proc/{pid}/cgroup || true") for pid in pids.split()}
    return " ".join(sorted(units))


def test_a_move_to_smg_that_cannot_start_stops_nothing(host):
    """The rescue of a failed move (issue 43; tasks/service.yml): smg cannot start (a flag its parser does not
    know, through sglang_router_extra_args), so its handover instance never answers and the run fails there, saying
    so with smg's own words from its journal, before sglang-router was told to stop: it serves on, the same process,
    its unit enabled; smg is stopped and disabled, and the handover instance and the nftables table are gone. The next
    tests' moves start from there (smg's unit and venv left by this run)."""
    assert host.service("sglang-router").is_running and not host.file("/etc/systemd/system/smg.service").exists
    wait_all_healthy()
    pid = host.check_output("systemctl show -p MainPID --value sglang-router")
    bad = {"sglang_router_extra_args": [BAD_FLAG], "sglang_router_readiness_timeout": 10}
    times = FIGURES.with_name("failed-move.tasks.jsonl")
    times.unlink(missing_ok=True)
    proc, wall = playbook("router.yml", "-e", json.dumps(bad), task_times=times)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-5000:]
    did, failure = task_events(times)
    assert (STOP_OLD, "ok") not in did, sorted(did)  # the old gateway was never told to stop
    assert (REDIRECT, "ok") not in did, sorted(did)  # nor were its clients redirected
    said = " ".join(failure.split())
    assert "The move failed: sglang-router serves again on the port and smg is stopped and disabled" in said, failure
    assert 'at "Wait until the handover instance answers /liveness"' in said, failure
    assert "The handover ended" in said, failure
    assert f"unrecognized arguments: {BAD_FLAG}" in failure, failure  # smg's own words, from its journal
    assert KEY not in out and CONTROL not in out and KEY not in times.read_text()

    old, smg = host.service("sglang-router"), host.service("smg")
    assert old.is_running and old.is_enabled
    assert host.check_output("systemctl show -p MainPID --value sglang-router") == pid
    assert not smg.is_running and not smg.is_enabled
    assert_no_handover(host)
    began = time.monotonic()
    wait_all_healthy()
    assert generate(router_url(), stream=True, tokens=8) and generate(router_url(), tokens=8)
    assert listener_unit(host, ROUTER_PORT) == "sglang-router.service"
    record(failed_move_play_s=round(wall, 1), failed_move_serving_after_s=round(time.monotonic() - began, 1))


def test_a_move_whose_new_unit_never_answers_gives_the_port_back_under_traffic(host):
    """The rescue after the old gateway was told to stop (tasks/service.yml), under traffic: smg's own unit never
    listens (a drop-in of the test replaces its command; the handover instance, another unit, is not touched), so
    the run fails waiting for it on the port. sglang-router gets the port back, the redirect stays until it routes,
    then the handover instance finishes what it carries and goes with the nftables table. No request failed."""
    host.run_expect([0], f"mkdir -p {Path(DEAF_DROPIN).parent} && printf '%s\\n' '[Service]' 'ExecStart=' "
                         f"'ExecStart=/bin/sleep 600' > {DEAF_DROPIN} && systemctl daemon-reload")
    try:
        wait_all_healthy()
        times = FIGURES.with_name("failed-move-2.tasks.jsonl")
        times.unlink(missing_ok=True)
        with MigrationTraffic() as traffic:
            time.sleep(5)
            proc, wall = playbook("router.yml", "-e", json.dumps({"sglang_router_readiness_timeout": 30}),
                                  task_times=times)
            time.sleep(10)  # the long streams of the handover instance and of sglang-router end
    finally:
        host.run_expect([0], f"rm -f {DEAF_DROPIN} && rmdir --ignore-fail-on-non-empty {Path(DEAF_DROPIN).parent}"
                             " && systemctl daemon-reload")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-5000:]
    did, failure = task_events(times)
    assert (STOP_OLD, "ok") in did and (REDIRECT, "ok") in did and (GIVE_BACK, "ok") in did, sorted(did)
    said = " ".join(failure.split())
    assert 'at "Wait until the router answers /liveness"' in said, failure
    assert "The move failed: sglang-router serves again on the port and smg is stopped and disabled" in said, failure
    assert "did not route within" not in said and "Giving the port back failed" not in said, failure
    assert "The handover ended" in said, failure
    assert KEY not in out and CONTROL not in out

    old, smg = host.service("sglang-router"), host.service("smg")
    assert old.is_running and old.is_enabled
    assert not smg.is_running and not smg.is_enabled
    assert_no_handover(host)
    assert listener_unit(host, ROUTER_PORT) == "sglang-router.service"
    figures = outcome_figures(traffic.outcomes)
    record(**{f"failed_move_under_traffic_{k}": v for k, v in figures.items() if k != "long_stream_s"},
           failed_move_under_traffic_play_s=round(wall, 1))
    print(f"failed move under traffic: {figures}")
    failed = [o for o in traffic.outcomes if o[3] != "ok"]
    assert failed == [], failed[:10]
    assert figures["long_streams_ok"] >= 2, figures
    wait_all_healthy()


def test_sglang_router_moves_to_smg_in_one_run_under_traffic(host):
    assert host.service("sglang-router").is_running
    assert not host.service("smg").is_running and not host.service("smg").is_enabled  # the failed move's unit
    # This role's layout before <root>/<distribution>-<version>: sglang-router's venv in <root>/<version>.
    host.run_expect([0], "mkdir -p /opt/sglang-router/0.3.2/venv/bin && touch /opt/sglang-router/0.3.2/venv/pyvenv.cfg"
                         " && ln -sfn /usr/bin/python3 /opt/sglang-router/0.3.2/venv/bin/python")
    wait_all_healthy()
    times = FIGURES.with_name("migration.tasks.jsonl")
    times.unlink(missing_ok=True)
    with MigrationTraffic() as traffic:
        time.sleep(5)
        proc, wall = playbook("router.yml", task_times=times)
        time.sleep(15)  # requests on the new gateway, and the last long streams of the old one finish
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "Stop the other gateway without waiting for the requests it carries" in out, out[-5000:]
    assert KEY not in out
    did, _ = task_events(times)
    assert (REDIRECT, "ok") in did and (STOP_OLD, "ok") in did, sorted(did)  # through the handover

    # One run: the old gateway's unit, environment file (it held the key) and venv are gone; smg serves.
    assert host.service("smg").is_running and host.service("smg").is_enabled
    assert not host.file("/etc/systemd/system/sglang-router.service").exists
    assert not host.file("/etc/sglang/sglang-router.env").exists
    assert host.run("systemctl list-unit-files sglang-router.service --no-legend").stdout.strip() == ""
    assert not host.file("/opt/sglang-router/0.3.2").exists  # the old layout's venv
    assert listener_unit(host, ROUTER_PORT) == "smg.service"
    assert host.check_output("ls /opt/sglang-router").split() == ["bin", "smg-1.13.0"]
    wait_all_healthy()

    assert_no_handover(host)

    outcomes = traffic.outcomes
    failed = [o for o in outcomes if o[3] != "ok"]
    longs = [o for o in outcomes if o[2] == "long"]
    figures = outcome_figures(outcomes)
    # Long streams crossed the move and finished, every token: some started before the old gateway was told to stop
    # and ended after (served to the end by sglang-router, in its grace).
    stop = next(e["t"] for e in map(json.loads, times.read_text().splitlines())
                if e["task"] == STOP_OLD and e["host"] == ROUTER and e["event"] == "ok")
    crossing = [o for o in longs if o[3] == "ok" and o[0] < stop < o[1]]
    record(**{f"migration_{k}": v for k, v in figures.items() if k != "long_stream_s"},
           migration_long_streams_crossing=len(crossing), migration_play_s=round(wall, 1))
    print(f"migration: {figures['requests']} requests, {len(failed)} failed ({figures['refused']} refused, "
          f"{figures['reset']} reset before an answer, {figures['http_404']} answered 404); {figures['long_streams_ok']} "
          f"long streams complete ({figures['long_stream_s']} s), {len(crossing)} of them across the move; play {wall:.1f} s")
    # Nothing failed, of any kind: no refused connection, no reset, no 404, no cut stream, no incomplete answer.
    assert failed == [], failed[:10]
    assert figures["long_streams_ok"] >= 2 and crossing, longs
    for name in GPUS:  # the servers were never touched
        assert gpu(name).service("sglang-server").is_running


def test_a_restart_for_a_changed_setting_hands_the_port_over_under_traffic(host):
    """A restart of the running gateway for a new unit (a changed setting) goes through the same handover: the handover
    instance with the new setting serves while smg's unit restarts (its old process finishing what it carries), then
    the real port again. Under traffic, changed and back: 0 failed requests, the handover gone each time."""
    for interval in (3, 2):  # 2: the scenario's own (group_vars), so that the later idempotence test finds it so
        pid = host.check_output("systemctl show -p MainPID --value smg")
        times = FIGURES.with_name(f"restart-{interval}.tasks.jsonl")
        times.unlink(missing_ok=True)
        wait_all_healthy()
        with MigrationTraffic() as traffic:
            time.sleep(3)
            proc, wall = playbook("router.yml", "-e", json.dumps({"sglang_router_health_check_interval_secs": interval}),
                                  task_times=times)
            time.sleep(8)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-5000:]
        did, _ = task_events(times)
        assert (REDIRECT, "ok") in did and (STOP_OLD, "ok") not in did, sorted(did)
        assert ("sglang_router : Restart sglang-router", "ok") in did, sorted(did)
        assert host.check_output("systemctl show -p MainPID --value smg") != pid  # restarted
        assert f" --health-check-interval-secs {interval} " in host.check_output("systemctl show -p ExecStart smg")
        assert_no_handover(host)
        assert listener_unit(host, ROUTER_PORT) == "smg.service"
        figures = outcome_figures(traffic.outcomes)
        print(f"restart for interval {interval}: {figures['requests']} requests, {figures['failed']} failed; play {wall:.1f} s")
        record(**{f"restart_{interval}_{k}": v for k, v in figures.items() if k != "long_stream_s"},
               **{f"restart_{interval}_play_s": round(wall, 1)})
        failed = [o for o in traffic.outcomes if o[3] != "ok"]
        assert failed == [], failed[:10]
        assert figures["long_streams_ok"] >= 2, figures
    wait_all_healthy()
