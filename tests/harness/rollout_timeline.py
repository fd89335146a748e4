"""TEST HARNESS: one GPU host's way through a rolling upgrade under traffic, as a timeline.

Molecule multihost's rollout of a release through both hosts (tests/molecule/multihost/test_multi_canary.py)
puts two records side by side:

- the playbook's steps, from tests/harness/callback_plugins/sglang_task_times.py (each task's start and each
  host's result, to the millisecond);
- what the verifier saw meanwhile, a sample every quarter second: the workers the gateway listed and those it
  held healthy, each server's own count of the requests it runs or queues (``/v1/loads``: running + waiting;
  None where it did not answer), and the requests in flight through the gateway (its clients').

The host's leave, drain, benchmarks, restart (the server role's restart handler, stop and start) and readiness
come from the task times; when the gateway stopped routing to the host, listed it no more, and held it healthy
again, from the samples.

``timeline`` gives one row per point of the host's leave, drain, restart and return, with the requests in
flight there; ``markdown`` writes the rows as a table. Pure functions: tests/test_harness.py checks them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# The steps of playbooks/upgrade.yml (the task names, as the callback gives them: "<role> : <name>" inside a
# role) whose times make the timeline.
LEAVE = "sglang_router : Take this host out of every router"
DRAIN = "sglang_router : Wait until the server has finished its in-flight requests (drain)"
DRAIN_SAYS = "sglang_router : Fail when the server did not drain in time, naming what was still in flight"
BENCH_BEFORE = "Benchmark the release this host serves, before the upgrade"
RESTART = "Restart the server on the new release and wait until it serves"
STOP = "sglang_server : Restart sglang-server"  # the handler: systemctl restart (the old process stops, the new starts)
READY = "sglang_server : Wait for /health_generate*"  # the readiness probe (its name says the release and timeout)
BENCH_AFTER = "Benchmark the upgraded server (the gate)"
JOIN = "Put this host back into the routers"
JOINED = "sglang_router : Put this host back into every router and wait until it is healthy there"

# The points of the timeline, in the order they must come.
ORDER = ["leave", "unrouted", "left", "drain", "drained", "bench_before", "restart", "stopped", "started", "ready",
         "bench_after", "join", "healthy", "joined"]


def load_events(path: Path) -> list[dict[str, Any]]:
    """The callback's JSON lines; none when the file is missing."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _result(events, task, host):
    """The first result event (ok or failed) of `task` on `host`, and the start of that task before it."""
    def named(ev):  # a name ending in * matches the names it begins
        return ev["task"] == task or (task.endswith("*") and ev["task"].startswith(task[:-1]))

    for i, ev in enumerate(events):
        if named(ev) and ev["host"] == host and ev["event"] in ("ok", "failed", "included"):
            start = next((e for e in reversed(events[:i]) if e["event"] == "start" and named(e)), None)
            return start, ev
    return None, None


def _first_sample(samples, after, test):
    return next((s for s in samples if s["t"] >= after and test(s)), None)


def _sample_at(samples, t):
    """The last sample taken at or before t (the state at that moment), else the first one."""
    before = [s for s in samples if s["t"] <= t]
    return before[-1] if before else (samples[0] if samples else None)


def points(events, samples, host, url):
    """{point: (time, note)} for the points of ORDER that were found."""
    found: dict[str, tuple[float, str]] = {}

    def start(point, task):
        begun = _result(events, task, host)[0]
        if begun:
            found[point] = (begun["t"], "")

    def end(point, task, note_task=None):
        ended = _result(events, task, host)[1]
        if ended:
            note = (_result(events, note_task, host)[1] or {}).get("msg", "") if note_task else ""
            found[point] = (ended["t"], note)

    start("leave", LEAVE)
    start("drain", DRAIN)
    end("drained", DRAIN, DRAIN_SAYS)
    start("bench_before", BENCH_BEFORE)
    start("restart", RESTART)
    start("stopped", STOP)
    end("started", STOP)
    end("ready", READY)
    start("bench_after", BENCH_AFTER)
    start("join", JOIN)
    end("joined", JOINED)
    if "leave" in found:
        # smg holds a worker it removes out of routing at once and lists it until its own drain settle ends (5 s)
        s = _first_sample(samples, found["leave"][0], lambda s: s["healthy"] is not None and url not in s["healthy"])
        if s:
            found["unrouted"] = (s["t"], "")
        s = _first_sample(samples, found["leave"][0], lambda s: s["listed"] is not None and url not in s["listed"])
        if s:
            found["left"] = (s["t"], "")
    if "join" in found:
        s = _first_sample(samples, found["join"][0], lambda s: url in (s["healthy"] or []))
        if s:
            found["healthy"] = (s["t"], "")
    return found


LABELS = {
    "leave": "leave: taken out of the gateway",
    "unrouted": "the gateway routes to it no more (not healthy there)",
    "left": "the gateway lists it no more",
    "drain": "drain begins",
    "drained": "drained",
    "bench_before": "benchmark of the old release (out of the gateway)",
    "restart": "restart on the new release begins (checks, page-cache warm-up)",
    "stopped": "its server is stopped (systemctl restart)",
    "started": "its server is started again",
    "ready": "ready (/health_generate answered)",
    "bench_after": "benchmark of the new release (the gate)",
    "join": "join: put back into the gateway",
    "healthy": "the gateway holds it healthy",
    "joined": "join done",
}


def timeline(events, samples, host, other, url):
    """Rows (dicts) of the host's timeline: t (epoch seconds) and at_s (seconds from the playbook's first task)."""
    if not events or not samples:
        return []
    t0 = events[0]["t"]
    found = points(events, samples, host, url)
    rows = []
    for point in ORDER:
        if point not in found:
            continue
        t, note = found[point]
        s = _sample_at(samples, t) if point not in ("unrouted", "left", "healthy") else \
            next(x for x in samples if x["t"] == t)
        rows.append({"point": point, "what": LABELS[point], "t": t, "at_s": round(t - t0, 1),
                     "in_flight_host": s["loads"].get(host), "in_flight_other": s["loads"].get(other),
                     "through_gateway": s["clients"], "long_streams": s["long"],
                     "gateway_healthy": len(s["healthy"]) if s["healthy"] is not None else None, "note": note})
    if "unrouted" in found and "drained" in found:
        busy = [s["loads"].get(host) for s in samples if found["unrouted"][0] <= s["t"] <= found["drained"][0]]
        peak = max((b for b in busy if b is not None), default=None)
        for row in rows:
            if row["point"] == "drained":
                row["peak_while_draining"] = peak
    return rows


def missing(rows):
    """The points of ORDER that the rows lack."""
    return [p for p in ORDER if p not in {r["point"] for r in rows}]


# A point read from the samples comes up to a sample's period and its requests later than it was (the gateway
# listed the host no more when the leave's task ended, and its drain began, before the next sample saw it).
SLACK_S = 1.0


def in_order(rows, slack=SLACK_S):
    """Whether the rows' times follow ORDER, each no earlier than every point before it less `slack` seconds."""
    latest = float("-inf")
    for row in sorted(rows, key=lambda r: ORDER.index(r["point"])):
        if row["t"] < latest - slack:
            return False
        latest = max(latest, row["t"])
    return True


def markdown(rows, host):
    def cell(v):
        return "-" if v is None else str(v)

    lines = [f"| t (s) | {host} | in flight on {host} | on the other host | through the gateway (long streams) "
             "| healthy in the gateway |",
             "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        what = r["what"]
        if r.get("peak_while_draining") is not None:
            what += f" (up to {r['peak_while_draining']} in flight since the gateway stopped routing to it)"
        lines.append(f"| {r['at_s']:.1f} | {what} | {cell(r['in_flight_host'])} | {cell(r['in_flight_other'])} "
                     f"| {cell(r['through_gateway'])} ({cell(r['long_streams'])}) | {cell(r['gateway_healthy'])} |")
    return "\n".join(lines)
