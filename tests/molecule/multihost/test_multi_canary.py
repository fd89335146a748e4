"""Verifier of molecule/multihost: the canary rollout of playbooks/upgrade.yml and playbooks/rollback.yml,
under continuous traffic through the real sglang-router (issue 17).

Its name puts it after test_monitoring.py (whose alert tests expect no real benchmark result on the
hosts) and before test_multihost.py (which ends with the two hosts as one multi-node group); it starts
from the converged fleet, both hosts serving the release current points at, and leaves it so. A new
release is a copy of a release on the host with current pointed at it (the build is skipped): the
slower one a copy of the serving release with the factor in its sim-slowdown-factor file (the
simulator, TEST ONLY, runs that much slower); the one of equal speed a copy of r1-patched (patched, as
the build makes every release), whose patch the rollout checks on each host before its restart.
"""

import json
import os
import re
import threading
import time
import urllib.error
from pathlib import Path

from test_gateway_migration import exchange
from test_multihost import (
    GPUS,
    KEY,
    ROUTER,
    SERVER_PORT,
    Traffic,
    call,
    gpu,
    playbook,
    record,
    router_url,
    wait_all_healthy,
    workers,
)

import rollout_timeline
from waiting import address

testinfra_hosts = [f"podman://{ROUTER}"]  # cluster tests: run once, not once per host
RELEASES = "/opt/sglang/releases"
SLOW, SAME = f"{RELEASES}/r5-slow", f"{RELEASES}/r6-same"
RESULTS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "bench-results-canary"
# 12 runs per benchmark and a gate at 99.9%: under the simulator's 5% per run and the noise of two cores
# shared with the traffic (10% per run: t about 4.9), 20% slower is still called slower, and two sessions
# of equal speed get a false verdict once in 1000; a 10% gate leaves room for that noise.
EXTRA = ["--skip-tags", "build,model", "-e", json.dumps({"sglang_bench_results_dir": str(RESULTS), "sglang_bench_runs": 12,
                                                         "sglang_bench_max_drop_pct": 10, "sglang_bench_confidence": 0.999})]
# For the releases caught on their answers: speed is not what is measured there, so fewer runs.
FEW_RUNS = ["--skip-tags", "build,model", "-e", json.dumps({"sglang_bench_results_dir": str(RESULTS), "sglang_bench_runs": 4,
                                                            "sglang_bench_max_drop_pct": 10, "sglang_bench_confidence": 0.999})]
URLS = {name: f"http://{name}:{SERVER_PORT}" for name in GPUS}
PLAY = "PLAY [Canary first, then the other GPU hosts in batches]"
# The rollout's long streams: each must outlast a host's restart (its server stopped until ready again: 5.4 s in the
# timeline of 2026-12-07, more on a busy machine). 1200 tokens took 4 to 10 s on the simulator (120 steps/s, 2.4
# tokens a step, the batch shared): not reliably longer. 3600 tokens take 12 to 30 s.
ROLLOUT_LONG_TOKENS = 3600


class WatchedTraffic(Traffic):
    """Traffic that also notes which servers ever left the router's healthy workers."""

    def __init__(self, base, clients=4):
        super().__init__(base, clients)
        self.left = set()

    def watch(self):
        while not self.stop.is_set():
            try:
                healthy = {w["url"] for w in workers() if w["is_healthy"]}
                self.left |= set(URLS.values()) - healthy
                self.min_workers = len(healthy) if self.min_workers is None else min(self.min_workers, len(healthy))
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.3)


class TimelineTraffic(WatchedTraffic):
    """The rollout's clients and one long stream after another (ROLLOUT_LONG_TOKENS, longer than a host's restart), with a
    sample every quarter second of what the gateway routes to and what each server has in flight, for the
    timeline of one host's leave, drain, restart and return (tests/harness/rollout_timeline.py)."""

    def __init__(self, base, clients=4):
        super().__init__(base, clients)
        self.servers = {name: f"http://{address(name)}:{SERVER_PORT}" for name in GPUS}
        self.samples = []
        self.long_outcomes = []
        self.long_streams_at = []  # (started, ended, outcome), epoch seconds: beside the playbook's task times
        self.long_in_flight = 0
        self.threads.append(threading.Thread(target=self.long_streams, daemon=True))

    def long_streams(self):
        while not self.stop.is_set():
            with self.lock:
                self.long_in_flight += 1
            started = time.time()
            outcome = exchange(ROLLOUT_LONG_TOKENS, stream=True)
            with self.lock:
                self.long_in_flight -= 1
                self.long_outcomes.append(outcome)
                self.long_streams_at.append((started, time.time(), outcome))
            if outcome != "ok":
                time.sleep(0.05)  # a refusal answers at once: do not spin

    def in_flight(self, name):
        """The server's own count of the requests it runs or queues (/v1/loads), None when it does not answer."""
        try:
            loads = json.loads(call(self.servers[name] + "/v1/loads", timeout=2)[1])["loads"]
            return sum(int(rank["num_running_reqs"]) + int(rank["num_waiting_reqs"]) for rank in loads)
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
            return None

    def watch(self):
        while not self.stop.is_set():
            sample = {"t": time.time(), "listed": None, "healthy": None}
            try:
                listed = workers()
                sample["listed"] = [w["url"] for w in listed]
                sample["healthy"] = [w["url"] for w in listed if w["is_healthy"]]
                self.left |= set(URLS.values()) - set(sample["healthy"])
                count = len(sample["healthy"])
                self.min_workers = count if self.min_workers is None else min(self.min_workers, count)
            except (urllib.error.URLError, OSError, ValueError):
                pass
            sample["loads"] = {name: self.in_flight(name) for name in GPUS}
            with self.lock:
                sample["clients"] = self.sent - self.ok - self.failed + self.long_in_flight
                sample["long"] = self.long_in_flight
            self.samples.append(sample)
            time.sleep(0.25)


def read(h, path):
    f = h.file(path)
    return f.content_string.strip() if f.exists else ""


def state(name):
    """current, serving, previous release and the server's process of one GPU host (taken between plays), and
    that role sglang_server's local fact (what the upgrade, rollback, bench and pruning read) says the same."""
    h = gpu(name)
    s = {"current": h.file("/opt/sglang/current").linked_to, "serving": read(h, "/var/lib/sglang/serving-release"),
         "previous": read(h, "/var/lib/sglang/previous-release"),
         "pid": h.check_output("systemctl show -p MainPID --value sglang-server")}
    fact = json.loads(read(h, "/etc/ansible/facts.d/sglang_server.fact") or "{}")
    assert (fact.get("serving"), fact.get("previous")) == (s["serving"], s["previous"]), (name, fact, s)
    return s


def new_release(name, path, slowdown=None, source=None):
    """A copy of source (default: the release the host serves) made current (the server keeps running
    the old one); returns the release that serves."""
    serving = state(name)["serving"]
    extra = f" && echo {slowdown} > {path}/sim-slowdown-factor" if slowdown else ""
    gpu(name).run_expect([0], f"rm -rf {path} && cp -a {source or serving} {path}{extra} && "
                              f"ln -sfnT {path} /opt/sglang/current.new && mv -T /opt/sglang/current.new /opt/sglang/current")
    return serving


def run_under_traffic(name, *extra):
    wait_all_healthy()
    with WatchedTraffic(router_url()) as traffic:
        # No head start: the playbook validates for 10 s and more before any host leaves the routers.
        proc, wall = playbook(name, *extra)
        time.sleep(0.5)
    return proc, wall, traffic


def table_row(out, host):
    """The cells of host's row in the rollout table (host, old, new, verdict, answers, before, after, outcome)."""
    match = re.search(rf'"\| {re.escape(host)} \| ([^"]*) \|"', out)
    assert match, out[-4000:]
    return [cell.strip() for cell in match.group(1).split("|")]


def assert_no_failed_request(traffic, minimum=20):
    assert traffic.failed == 0, traffic.errors[:10]
    assert traffic.ok >= minimum, f"too little traffic to mean anything: {traffic.ok}"


def test_a_slower_release_is_caught_on_the_canary_and_rolled_back(host):
    """The canary (the first GPU host: no canary group here) gets a release 20% slower: the verdict says
    slower, the host goes back to the release it served, is confirmed by a benchmark and rejoins; the
    rollout stops, and the other host is never touched."""
    canary, other = GPUS
    before = {name: state(name) for name in GPUS}
    old = new_release(canary, SLOW, slowdown=1.25)
    proc, wall, traffic = run_under_traffic("upgrade.yml", *EXTRA)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-5000:]
    assert KEY not in out
    stop = re.search(rf"Rollout stopped at {canary}: release r5-slow slower \(tok/s: ([\d.]+) on {Path(old).name} before, "
                     rf"([\d.]+) on r5-slow after\) \(.*?\)\. Rolled back to {Path(old).name}, which serves again "
                     rf"\(([\d.]+) tok/s\) and is back in the routers\. Not upgraded, serving as before: {other}\.", out)
    assert stop, out[-5000:]
    tok_before, tok_slow, tok_back = (float(g) for g in stop.groups())
    assert 0.7 < tok_slow / tok_before < 0.9, (tok_before, tok_slow)  # 1 / 1.25 = 0.8
    assert 0.9 < tok_back / tok_before < 1.1, (tok_before, tok_back)
    assert table_row(out, canary)[:3] == [Path(old).name, "r5-slow", "slower"]
    assert table_row(out, canary)[-1].startswith(f"rolled back to {Path(old).name}")
    assert table_row(out, other) == ["-", "-", "-", "-", "-", "-", "not reached"]

    after = state(canary)
    assert (after["current"], after["serving"]) == (old, old)
    assert after["previous"] == before[canary]["previous"]  # the failed release is forgotten
    assert after["pid"] != before[canary]["pid"]
    # the simulator's own word: the slow release ran with its file's factor, the one serving now without
    starts = gpu(canary).check_output("journalctl -u sglang-server --no-pager -o cat | grep 'SIMULATOR.*settings {'")
    assert '"release_slowdown_factor": 1.25' in starts, starts[-2000:]
    assert '"release_slowdown_factor": null' in starts.splitlines()[-1], starts[-2000:]
    assert state(other) == before[other]  # never restarted, never switched
    rollout = out.split(PLAY)[1].split("PLAY [Report the rollout]")[0]
    assert f"[{other}]" not in rollout, rollout[-3000:]
    assert traffic.left == {URLS[canary]}, traffic.left
    assert_no_failed_request(traffic)
    wait_all_healthy()
    record(canary_rolled_back_wall_s=round(wall, 1), canary_tok_s_before=tok_before, canary_tok_s_slow=tok_slow,
           canary_tok_s_rolled_back=tok_back, canary_requests_sent=traffic.sent, canary_requests_failed=traffic.failed)


# A release of equal speed that answers wrong (the simulator's per-release files, TEST ONLY): a share of the
# answers' words and numbers replaced, and tool calls written so that Kimi's parser cannot read them. One
# release carries both: each defect alone failing the verdict is proven against the simulator by
# tests/roles/sglang_bench/test_correctness_probe.py; here, the rollout's path for a failed verdict (one
# upgrade run, not one per defect) and that the simulator reads both files of the release.
WRONG = {"sim-output-corruption": "0.5", "sim-tool-format": "broken"}
WRONG_FIGURES = ["agreement with the reference", "valid tool calls"]


def test_a_release_that_answers_wrong_at_equal_speed_is_caught_on_the_canary_and_rolled_back(host):
    """The canary's new release is as fast as the old one but answers wrong: the correctness probe's
    verdict fails, the host goes back to the release it served and rejoins; the rollout stops there,
    the other host untouched, no request failed."""
    canary, other = GPUS
    before = {name: state(name) for name in GPUS}
    path = f"{RELEASES}/r7-wrong"
    old = new_release(canary, path)
    gpu(canary).run_expect([0], " && ".join(f"echo {content} > {path}/{filename}" for filename, content in WRONG.items()))
    proc, wall, traffic = run_under_traffic("upgrade.yml", *FEW_RUNS)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-5000:]
    row = table_row(out, canary)
    assert row[:2] == [Path(old).name, "r7-wrong"] and row[3] == "fail", row
    assert row[2] != "slower", row  # caught for its answers, not its speed
    assert row[-1].startswith(f"rolled back to {Path(old).name}"), row
    # each defect's figure among the failed ones
    for figure in WRONG_FIGURES:
        assert re.search(rf"Wrong answers on {canary}: Correctness of r7-wrong: fail \([^)\n]*{figure}", out), out[-5000:]
    assert table_row(out, other) == ["-", "-", "-", "-", "-", "-", "not reached"]
    after = state(canary)
    assert (after["current"], after["serving"]) == (old, old)
    assert state(other) == before[other]
    assert traffic.left == {URLS[canary]}, traffic.left
    assert_no_failed_request(traffic, minimum=10)
    wait_all_healthy()
    gpu(canary).run_expect([0], f"rm -rf {path}")
    record(canary_wrong_rolled_back_wall_s=round(wall, 1))


def test_a_release_of_equal_speed_rolls_through_both_hosts(host):
    """The canary first (a batch of its own), then the other host, each gated and its EAGLE-3 patch
    checked on the way (the new release is a patched copy, as the build makes it); 0 failed requests."""
    olds = {name: new_release(name, SAME, source=f"{RELEASES}/r1-patched") for name in GPUS}
    times = TIMELINE.with_suffix(".tasks.jsonl")
    times.unlink(missing_ok=True)
    wait_all_healthy()
    with TimelineTraffic(router_url()) as traffic:
        proc, wall = playbook("upgrade.yml", *EXTRA, task_times=times)
        time.sleep(0.5)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert KEY not in out
    batches = out.split(PLAY)[1:]
    assert len(batches) == 2, "the canary alone, then the other host"
    assert f"[{GPUS[0]}]" in batches[0] and f"[{GPUS[1]}]" not in batches[0]
    assert f"[{GPUS[1]}]" in batches[1].split("PLAY [Report the rollout]")[0]
    for name in GPUS:
        row = table_row(out, name)
        assert row[:2] == [Path(olds[name]).name, "r6-same"] and row[-1] == "upgraded", row
        assert row[2] == "inconclusive", row  # equal speed: a difference the runs cannot tell from noise
        assert row[3] == "pass", row  # the same answers as the release before (the correctness probe)
        assert 0.85 < float(row[5]) / float(row[4]) < 1.15, row
        s = state(name)
        assert (s["current"], s["serving"], s["previous"]) == (SAME, SAME, olds[name])
        kimi = f"{SAME}/venv/lib/python3.11/site-packages/sglang/srt/models/kimi_k25.py"
        assert "BEGIN sglang_eagle3_patch" in read(gpu(name), kimi)
    assert traffic.left == set(URLS.values()), traffic.left
    assert traffic.min_workers == 1
    assert_no_failed_request(traffic)
    # Streams longer than a host's restart crossed both hosts' leave, drain, restart and return: none cut.
    assert traffic.long_outcomes and set(traffic.long_outcomes) == {"ok"}, traffic.long_outcomes
    wait_all_healthy()
    record(canary_rollout_two_hosts_wall_s=round(wall, 1), canary_rollout_requests_sent=traffic.sent,
           canary_rollout_requests_failed=traffic.failed, canary_rollout_long_streams=len(traffic.long_outcomes))
    check_timeline(traffic, times)
    check_long_streams_outlast_restarts(traffic, times)


def check_long_streams_outlast_restarts(traffic, times):
    """Every long stream lasted longer than each host's restart (its server stopped until ready again, from the
    playbook's task times); those in flight across a whole restart are counted."""
    events = rollout_timeline.load_events(times)
    restarts = {}
    for name in GPUS:
        at = rollout_timeline.points(events, traffic.samples, name, URLS[name])
        assert "stopped" in at and "ready" in at, (name, sorted(at))
        restarts[name] = (at["stopped"][0], at["ready"][0])
    longest = max(ready - stopped for stopped, ready in restarts.values())
    durations = sorted(round(ended - started, 1) for started, ended, _ in traffic.long_streams_at)
    spanning = {name: sum(started < stopped and ended > ready for started, ended, _ in traffic.long_streams_at)
                for name, (stopped, ready) in restarts.items()}
    print(f"rollout long streams: {len(durations)}, {durations[0]}-{durations[-1]} s ({ROLLOUT_LONG_TOKENS} tokens); "
          "restarts (stopped to ready): " + ", ".join(f"{n} {r - s:.1f} s" for n, (s, r) in restarts.items())
          + "; streams in flight across a whole restart: " + ", ".join(f"{n} {c}" for n, c in spanning.items()))
    record(rollout_long_stream_min_s=durations[0], rollout_long_stream_max_s=durations[-1],
           rollout_restart_longest_s=round(longest, 1), rollout_long_streams_spanning_a_restart=sum(spanning.values()))
    assert durations[0] > longest, (durations, restarts)


# The timeline of the canary's leave, drain, restart and return during that rollout (the closing note):
# written beside the scenario's log (tests/harness/run_tests.py's SGLANG_TEST_LOGS), else the ephemeral directory.
TIMELINE = Path(os.environ.get("SGLANG_TEST_LOGS") or os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) \
    / "multihost-rollout-timeline.json"


def check_timeline(traffic, times):
    host, other = GPUS
    events = rollout_timeline.load_events(times)
    rows = rollout_timeline.timeline(events, traffic.samples, host, other, URLS[host])
    TIMELINE.write_text(json.dumps({"host": host, "rows": rows, "tasks": events, "samples": traffic.samples}) + "\n")
    print(f"rollout timeline of {host} ({TIMELINE}):\n" + rollout_timeline.markdown(rows, host))
    print("its drain said: " + next((r["note"] for r in rows if r["point"] == "drained"), "-"))
    assert rollout_timeline.missing(rows) == [], (rollout_timeline.missing(rows), rows)
    assert rollout_timeline.in_order(rows), rows
    at = {r["point"]: r for r in rows}
    # The drain ended with nothing in flight on the host, and its server was stopped with nothing in flight either
    # (the last reading before the restart: the benchmark's requests come and go between drain and restart).
    assert at["drained"]["in_flight_host"] == 0, rows
    assert at["stopped"]["in_flight_host"] == 0, rows
    # While it was out, the other host served alone; it was held healthy again only after it was ready.
    assert at["left"]["gateway_healthy"] == 1 and at["healthy"]["gateway_healthy"] == 2, rows
    record(timeline_out_of_gateway_s=round(at["healthy"]["at_s"] - at["left"]["at_s"], 1),
           timeline_drain_s=round(at["drained"]["at_s"] - at["drain"]["at_s"], 1),
           timeline_stopped_to_ready_s=round(at["ready"]["at_s"] - at["stopped"]["at_s"], 1),
           timeline_peak_in_flight_while_draining=at["drained"].get("peak_while_draining"))


def test_rollback_returns_both_hosts_to_their_previous_release_and_a_rerun_changes_nothing(host):
    previous = {name: state(name)["previous"] for name in GPUS}
    assert all(previous.values()), previous
    # No confirming benchmark (rollback_bench): tasks/rollback_host.yml's benchmark is proven by the slower
    # canary's rollback above (its confirmed tok/s asserted); here, what rollback.yml itself decides.
    proc, wall, traffic = run_under_traffic("rollback.yml", "-e", f"sglang_bench_results_dir={RESULTS}",
                                            "-e", "rollback_bench=false")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert KEY not in out
    for name in GPUS:
        s = state(name)
        assert (s["current"], s["serving"], s["previous"]) == (previous[name],) * 3, s
        assert f"{name}: r6-same -> {Path(previous[name]).name}, serving again; back in the routers." in out, out[-3000:]
    assert traffic.left == set(URLS.values()), traffic.left
    assert_no_failed_request(traffic)
    wait_all_healthy()

    pids = {name: state(name)["pid"] for name in GPUS}
    again, rerun_wall = playbook("rollback.yml", "-e", f"sglang_bench_results_dir={RESULTS}")
    rerun = again.stdout + again.stderr
    assert again.returncode == 0, rerun[-5000:]
    recap = rerun.split("PLAY RECAP")[-1]
    for name in [ROUTER, *GPUS]:
        assert re.search(rf"^{name}\s*:\s*ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", recap, re.M), recap
    for name in GPUS:
        assert f"{name} already serves its previous release" in rerun
        assert state(name)["pid"] == pids[name]
    assert "Take this host out of every router" not in rerun
    record(rollback_two_hosts_wall_s=round(wall, 1), rollback_requests_sent=traffic.sent,
           rollback_requests_failed=traffic.failed, rollback_rerun_wall_s=round(rerun_wall, 1))
    for name in GPUS:
        gpu(name).run_expect([0], f"rm -rf {SLOW} {SAME}")
