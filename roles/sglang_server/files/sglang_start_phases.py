#!/usr/bin/env python3
"""Where an SGLang start's time went, read from the server's own log.

SGLang logs each step of a start with a timestamp (``[2026-12-04 17:54:41] Load weight begin...``,
``[... TP0]`` on a rank of a tensor-parallel group) and prints the elapsed seconds of some of them
itself. This turns such a log (a file, or ``-`` for stdin, e.g. ``journalctl -u sglang-server -o cat
--since ...``) into the start's phases, in the order they happen:

  launch -> first log line        imports and argument parsing (needs --started: the log cannot know)
  first log line -> weights       tokenizer, model config, scheduler processes, torch.distributed
  weights (target, then draft)    "Load weight begin/end": the log's elapsed seconds and GiB
  KV cache                        last weights end -> last "Memory pool end" / "KV Cache is allocated"
  CUDA graphs                     every "Capture <name> CUDA graph begin/end" (target prefill, decode or
                                  verify; draft prefill, decode, extend): the log's elapsed seconds
  graphs -> HTTP up               "Uvicorn running on"
  HTTP up -> fired up             the warm-up request ("The server is fired up and ready to roll!")
  -> ready                        the first 200 on /health_generate (the access log, or --ready)

plus the JIT and compile messages SGLang, DeepGEMM, FlashInfer and torch.compile print (Triton and
torch inductor compile silently: their caches' contents tell, not the log), the loaders' progress
bars ("Multi-thread loading shards: 100% Completed | 17/17 [00:25<...]"), the "Engine startup
timings" line of SGLang 0.5.17 on, and error lines. SGLang prints memory as "GB" that are GiB
(bytes / 2^30): the figures are kept as printed, with bytes beside them.

Log timestamps have whole seconds and the server's local time: the segments between them are
accurate to a second; the elapsed figures SGLang prints itself to 10 ms. --started and --ready
(epoch seconds, taken on the same host) anchor the launch and the readiness.

Usage: sglang_start_phases.py LOG [--started EPOCH] [--ready EPOCH] [--json FILE] [--quiet]
Prints a table of the phases; --json writes everything read. Exit 0, or 1 when no SGLang log line
was found.

       sglang_start_phases.py --record DIR --unit UNIT [--keep N] [--ready EPOCH]
Records the start of the unit's running process once (role sglang_server runs it after every converge's
wait; a start no play waited for, after a reboot or systemd's own restart, is recorded by the next run):
its log is the journal of that invocation alone (journalctl _SYSTEMD_INVOCATION_ID=...), the launch
systemd's ExecMainStartTimestamp; ready is --ready (the moment a wait saw the first 200) or else what
the log shows (the access log's first 200, else "fired up"). DIR/<start>-<invocation>.json (0640,
written whole then renamed), DIR/last.json the newest, the newest N kept. One JSON line on stdout:
{"recorded": true|false, "why", "file", "ready_s", "phases": {segment: seconds}, "summary"}; exit 0,
or 1 when the unit is not running or its journal holds no SGLang line (the record says so).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

GIB = 1 << 30
# "[2026-12-04 17:54:41] msg", "[2026-12-04 17:54:41 TP0] msg", "[2026-12-04 17:54:41.123 DP0 TP3] msg"
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:[.,](\d+))?((?: [A-Z]+\d+)*)\] ?(.*)$")
FLOAT = r"([0-9]+(?:\.[0-9]+)?)"

# A message's kind: (name, pattern); the first that matches names the line.
EVENTS = [
    ("server_args", re.compile(r"^server_args=")),
    ("dist_begin", re.compile(r"^Init torch distributed begin")),
    ("dist_end", re.compile(r"^Init torch distributed ends\. elapsed=" + FLOAT)),
    ("weights_begin", re.compile(r"^Load weight begin\. avail mem=" + FLOAT + r" GB")),
    ("weights_end", re.compile(r"^Load weight end\. elapsed=" + FLOAT + r" s, type=([\w.]+),(.*?)avail mem="
                               + FLOAT + r" GB, mem usage=" + FLOAT + r" GB")),
    ("kv_cache", re.compile(r"^KV Cache is allocated\. dtype: ([\w.]+), #tokens: (\d+), K size: " + FLOAT
                            + r" GB, V size: " + FLOAT + r" GB")),
    ("memory_pool_end", re.compile(r"^Memory pool end\. avail mem=" + FLOAT)),
    # 0.5.17: "Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[...]" and
    # "Capture draft decode CUDA graph end. elapsed=5.75 s, mem usage=0.22 GB, avail mem=17.69 GB.";
    # 0.5.9: "Capture cuda graph begin. This can take up to several minutes. avail mem=..." and
    # "Capture cuda graph end. Time elapsed: 12.30 s. mem usage=1.2 GB. avail mem=20.1 GB."
    ("graph_begin", re.compile(r"^Capture (.*?)\s*cuda graph begin", re.I)),
    ("graph_end", re.compile(r"^Capture (.*?)\s*cuda graph end", re.I)),
    ("max_total_tokens", re.compile(r"^max_total_num_tokens=(\d+)")),
    ("startup_timings", re.compile(r"^Engine startup timings \(s\): (.*)$")),
    ("http_up", re.compile(r"Uvicorn running on")),
    ("fired_up", re.compile(r"The server is fired up and ready to roll")),
    ("health_generate_200", re.compile(r'"GET /health_generate HTTP/1\.[01]" 200')),
]
# JIT and compile messages: (source, pattern), matched anywhere in a line (timestamped or not).
JIT = [
    ("deep_gemm", re.compile(r"DeepGEMM JIT|DeepGEMM warmup|compile_deep_gemm", re.I)),
    ("torch_compile", re.compile(r"Compiling a graph for (?:dynamic shape|shape .*?) takes " + FLOAT + r" s")),
    ("torch_compile", re.compile(r"Cache the graph (?:of shape .*? |for dynamic shape )for later use")),
    ("flashinfer", re.compile(r"flashinfer\.jit: ")),
    ("ninja", re.compile(r"^\[\d+/\d+\] .*(?:nvcc|c\+\+|g\+\+|clang|cuda)")),
    ("warmup", re.compile(r"Running warmup |Warmup ended")),
]
ERRORS = re.compile(r"(Traceback \(most recent call last\)|\b\w*Error: .*|CUDA out of memory.*)")
BAR = re.compile(r"([A-Za-z][\w .\-]*?): +(\d+)% Completed \| (\d+)/(\d+) \[([\d:]+)<")
NUMS = re.compile(r"(num_tokens|bs)=\[([0-9, ]*)\]")


def _clock(text: str) -> float:
    """tqdm's elapsed ("00:25", "01:02:03") in seconds."""
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def _epoch(stamp: str, fraction: str | None) -> float:
    value = datetime.datetime.strptime(stamp.replace("T", " "), "%Y-%m-%d %H:%M:%S").timestamp()
    return value + (float("0." + fraction) if fraction else 0.0)


def records(lines: Iterable[str]) -> Iterable[tuple[float | None, str, str]]:
    """(epoch or None, rank tag, message) of every line; progress bars' \\r segments are lines."""
    for raw in lines:
        for line in raw.replace("\r", "\n").split("\n"):
            line = line.rstrip()
            if not line:
                continue
            m = STAMP.match(line)
            if m:
                yield _epoch(m.group(1), m.group(2)), m.group(3).strip(), m.group(4)
            else:
                yield None, "", line


def read(lines: Iterable[str], started: float | None = None, ready: float | None = None) -> dict[str, Any]:
    """Everything the log says about its start; see the module's docstring."""
    events: list[dict[str, Any]] = []
    jit: list[dict[str, Any]] = []
    errors: list[str] = []
    bars: dict[str, dict[str, Any]] = {}
    first = last = None
    last_t = None
    for t, rank, msg in records(lines):
        if t is not None:
            first = t if first is None else first
            last, last_t = t, t
        for source, pattern in JIT:
            if pattern.search(msg):
                jit.append({"source": source, "t": t if t is not None else last_t, "line": msg[:300]})
                break
        if ERRORS.search(msg) and len(errors) < 50 and not msg.startswith("server_args="):
            errors.append(msg[:300])
        bar = BAR.search(msg)
        if bar:  # the last state of each bar (a bar is printed again at every step)
            bars[bar.group(1).strip()] = {"percent": int(bar.group(2)), "done": int(bar.group(3)),
                                          "total": int(bar.group(4)), "elapsed_s": _clock(bar.group(5)),
                                          "t": last_t}
        if t is None:
            continue
        for name, pattern in EVENTS:
            m = pattern.search(msg)
            if m:
                events.append({"event": name, "t": t, "rank": rank, "groups": m.groups(), "line": msg[:400]})
                break
    out: dict[str, Any] = {"found": first is not None, "first_line_epoch": first, "last_line_epoch": last,
                           "started_epoch": started, "ready_epoch": ready}
    origin = started if started is not None else first

    def rel(t: float | None) -> float | None:
        return None if t is None or origin is None else round(t - origin, 2)

    out["origin"] = "launch (--started)" if started is not None else "first log line"

    def of(name: str) -> list[dict[str, Any]]:
        return [e for e in events if e["event"] == name]

    # Weights: begin/end pairs in order, per rank (target first, then the draft).
    weights: list[dict[str, Any]] = []
    for rank in sorted({e["rank"] for e in of("weights_end")} | {e["rank"] for e in of("weights_begin")}):
        begins = [e for e in of("weights_begin") if e["rank"] == rank]
        ends = [e for e in of("weights_end") if e["rank"] == rank]
        for index, end in enumerate(ends):
            elapsed, kind, extra, avail, usage = end["groups"]
            begin = begins[index] if index < len(begins) else None
            weights.append({
                "index": index, "rank": rank, "model": "target" if index == 0 else "draft", "type": kind,
                "quantization": extra.strip(" ,") or None, "elapsed_s": float(elapsed), "mem_usage_gib": float(usage),
                "mem_usage_bytes": int(float(usage) * GIB), "avail_before_gib": float(begin["groups"][0]) if begin else None,
                "avail_after_gib": float(avail), "begin": rel(begin["t"]) if begin else None, "end": rel(end["t"]),
                "gb_per_s": round(float(usage) * GIB / 1e9 / float(elapsed), 2) if float(elapsed) > 0 else None})
    out["weights"] = weights
    out["kv_cache"] = [{"rank": e["rank"], "dtype": e["groups"][0], "tokens": int(e["groups"][1]),
                        "k_gib": float(e["groups"][2]), "v_gib": float(e["groups"][3]), "t": rel(e["t"])}
                       for e in of("kv_cache")]
    # CUDA graphs: each end paired with the last begin of the same name (and rank).
    graphs: list[dict[str, Any]] = []
    open_: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:
        if e["event"] not in ("graph_begin", "graph_end"):
            continue
        name = (e["groups"][0].strip() or "all").lower()
        key = (e["rank"], name)
        if e["event"] == "graph_begin":
            open_[key] = e
            continue
        begin = open_.pop(key, None)
        elapsed = re.search(r"(?:elapsed=|Time elapsed: )" + FLOAT, e["line"])
        usage = re.search(r"mem usage=" + FLOAT, e["line"])
        sizes = NUMS.search(begin["line"]) if begin else None
        backend = re.search(r"backend=(\w+)", begin["line"]) if begin else None
        graphs.append({"name": name, "rank": e["rank"], "backend": backend.group(1) if backend else None,
                       "sizes": len([s for s in sizes.group(2).split(",") if s.strip()]) if sizes else None,
                       "size_kind": sizes.group(1) if sizes else None,
                       "elapsed_s": float(elapsed.group(1)) if elapsed else None,
                       "mem_usage_gib": float(usage.group(1)) if usage else None,
                       "begin": rel(begin["t"]) if begin else None, "end": rel(e["t"])})
    out["cuda_graphs"] = graphs
    timings = of("startup_timings")
    out["startup_timings"] = parse_timings(timings[-1]["groups"][0]) if timings else None
    out["loader_bars"] = {desc: {**bar, "t": rel(bar["t"])} for desc, bar in bars.items()}
    out["jit"] = {"count": len(jit), "by_source": {s: sum(1 for j in jit if j["source"] == s)
                                                   for s in sorted({j["source"] for j in jit})},
                  "seconds_printed": round(sum(float(m.group(1)) for j in jit
                                               for m in [re.search(r"takes " + FLOAT + r" s", j["line"])] if m), 2),
                  "lines": [{**j, "t": rel(j["t"])} for j in jit[:100]]}
    out["errors"] = errors

    def at(name: str, which: str = "first") -> float | None:
        hits = of(name)
        return None if not hits else (hits[0] if which == "first" else hits[-1])["t"]

    health = at("health_generate_200")
    if ready is None and health is not None:
        ready_t, ready_from = health, "first 200 on /health_generate in the access log"
    elif ready is not None:
        ready_t, ready_from = ready, "--ready"
    else:
        ready_t, ready_from = None, None
    has_draft = len(of("weights_end")) > len({e["rank"] for e in of("weights_end")})  # two ends on a rank
    marks = {"launch": started, "first_line": first, "weights_begin": at("weights_begin"),
             "weights_end": at("weights_end"), "draft_weights_end": at("weights_end", "last") if has_draft else None,
             "kv_cache_end": _last_of(of, "memory_pool_end", "kv_cache"),
             "graphs_begin": at("graph_begin"), "graphs_end": at("graph_end", "last"), "http_up": at("http_up"),
             "fired_up": at("fired_up"), "ready": ready_t}
    out["marks"] = {k: rel(v) for k, v in marks.items()}
    out["ready_from"] = ready_from
    out["phases"] = segments(marks, weights, graphs)
    out["ready_s"] = rel(ready_t)
    return out


def _last_of(of, *names: str) -> float | None:
    hits = [e["t"] for n in names for e in of(n)]
    return max(hits) if hits else None


def parse_timings(text: str) -> dict[str, Any]:
    """'load_weight=0.26, kv_cache_allocation=2.02, scheduler_e2e=106.22, cuda_graph={prefill=79.96, ...},
    tokenizer_e2e=132.42' as numbers (cuda_graph a dict)."""
    out: dict[str, Any] = {}
    graphs = re.search(r"cuda_graph=\{([^}]*)\}", text)
    if graphs:
        out["cuda_graph"] = {k.strip(): float(v) for k, v in re.findall(r"(\w+)=" + FLOAT, graphs.group(1))}
        text = text.replace(graphs.group(0), "")
    out.update({k: float(v) for k, v in re.findall(r"(\w+)=" + FLOAT, text)})
    return out


def segments(marks: dict[str, float | None], weights: list[dict], graphs: list[dict]) -> list[dict[str, Any]]:
    """The start as consecutive segments between the marks that were seen (a missing mark is skipped:
    its time counts in the next segment), with what the log printed for the segment beside."""
    order = [("launch", "first_line", "imports and argument parsing"),
             ("first_line", "weights_begin", "tokenizer, config, scheduler processes, distributed init"),
             ("weights_begin", "weights_end", "target weights"),
             ("weights_end", "draft_weights_end", "draft worker init and its weights"),
             ("draft_weights_end", "kv_cache_end", "KV cache allocation"),
             ("kv_cache_end", "graphs_begin", "before CUDA graph capture"),
             ("graphs_begin", "graphs_end", "CUDA graph capture (every graph)"),
             ("graphs_end", "http_up", "HTTP server up"),
             ("http_up", "fired_up", "warm-up request"),
             ("fired_up", "ready", "to the first 200 on /health_generate")]
    out = []
    previous_key = None
    for start, end, what in order:
        if marks.get(end) is None:
            continue
        begin_key = start if marks.get(start) is not None else previous_key
        if begin_key is None or marks.get(begin_key) is None:
            previous_key = end
            continue
        seg = {"phase": f"{begin_key}->{end}", "what": what, "seconds": round(marks[end] - marks[begin_key], 2)}
        printed = [w["elapsed_s"] for w in weights if w["model"] == ("target" if end == "weights_end" else "draft")]
        if end in ("weights_end", "draft_weights_end") and printed:
            seg["printed_s"] = round(max(printed), 2)
        if end == "graphs_end" and graphs:
            seg["printed_s"] = round(max(sum(g["elapsed_s"] or 0 for g in graphs if g["rank"] == r)
                                         for r in {g["rank"] for g in graphs}), 2)
        out.append(seg)
        previous_key = end
    return out


def table(result: dict[str, Any]) -> str:
    rows = [f"origin: {result['origin']}; ready: {result['ready_s']} s ({result['ready_from']})"]
    for seg in result["phases"]:
        printed = f" (log: {seg['printed_s']} s)" if "printed_s" in seg else ""
        rows.append(f"  {seg['phase']:<36} {seg['seconds']:>8.2f} s{printed}  {seg['what']}")
    for w in result["weights"]:
        rows.append(f"  weights {w['model']} {w['type']}{' ' + w['rank'] if w['rank'] else ''}: {w['elapsed_s']} s, "
                    f"{w['mem_usage_gib']} GiB ({w['gb_per_s']} GB/s)")
    for g in result["cuda_graphs"]:
        rows.append(f"  graph {g['name']}{' ' + g['rank'] if g['rank'] else ''}: {g['elapsed_s']} s, "
                    f"{g['sizes']} {g['size_kind'] or 'sizes'}, backend {g['backend']}")
    rows.append(f"  jit/compile messages: {result['jit']['count']} {json.dumps(result['jit']['by_source'])}")
    if result["errors"]:
        rows.append(f"  error lines: {len(result['errors'])}, first: {result['errors'][0][:160]}")
    return "\n".join(rows)


def _systemctl_show(unit: str) -> dict[str, str]:
    out = subprocess.run(["systemctl", "show", unit, "--timestamp=unix",
                          "--property=ActiveState,InvocationID,ExecMainStartTimestamp,ExecMainPID"],
                         capture_output=True, text=True, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def summary(result: dict[str, Any]) -> str:
    """One line: ready, then the weights, the graphs and the rest."""
    segs = {seg["phase"].split("->", 1)[1]: seg["seconds"] for seg in result["phases"]}
    parts = [f"ready {result['ready_s']} s after launch" if result["ready_s"] is not None else "ready time unknown"]
    named = [("first_line", "imports"), ("weights_begin", "to the weights"), ("weights_end", "target weights"),
             ("draft_weights_end", "draft"), ("kv_cache_end", "KV cache"), ("graphs_end", "CUDA graphs"),
             ("http_up", "HTTP up"), ("fired_up", "warm-up"), ("ready", "to ready")]
    parts += [f"{label} {segs[key]:.1f} s" for key, label in named if key in segs]
    jit = result["jit"]["count"]
    return ", ".join(parts) + (f"; {jit} JIT/compile messages" if jit else "")


def _write_atomic(path: Path, text: str, mode: int = 0o640) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record(directory: Path, unit: str, keep: int, ready: float | None) -> tuple[int, dict[str, Any]]:
    """See the module's docstring (--record)."""
    show = _systemctl_show(unit)
    invocation = show.get("InvocationID", "")
    launched = show.get("ExecMainStartTimestamp", "").lstrip("@")
    if show.get("ActiveState") != "active" or not invocation or not launched:
        return 1, {"recorded": False, "why": f"{unit} is not running ({show.get('ActiveState', 'unknown')}): no start to record"}
    started = float(launched)
    name = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started)) + f"-{invocation[:12]}.json"
    path = directory / name
    if path.exists():
        return 0, {"recorded": False, "why": "this start is recorded", "file": str(path)}
    journal = subprocess.run(["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager"],
                             capture_output=True, text=True, check=False)
    result = read(journal.stdout.splitlines(), started, ready)
    result.update({"unit": unit, "invocation_id": invocation, "main_pid": show.get("ExecMainPID"),
                   "recorded_epoch": round(time.time(), 3), "summary": summary(result)})
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1) + "\n"
    _write_atomic(path, text)
    _write_atomic(directory / "last.json", text)
    records_ = sorted(p for p in directory.glob("*.json") if p.name != "last.json")
    for old in records_[: max(0, len(records_) - keep)]:
        old.unlink(missing_ok=True)
    answer = {"recorded": True, "file": str(path), "found": result["found"], "ready_s": result["ready_s"],
              "ready_from": result["ready_from"],
              "phases": {seg["phase"]: seg["seconds"] for seg in result["phases"]}, "summary": result["summary"]}
    if not result["found"]:
        answer["why"] = f"the journal of this start ({invocation}) holds no SGLang log line"
    return (0 if result["found"] else 1), answer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", nargs="?", help="the server's log file, or - for stdin")
    ap.add_argument("--record", type=Path, metavar="DIR", help="record the running start of --unit under DIR")
    ap.add_argument("--unit", help="the server's systemd unit (with --record)")
    ap.add_argument("--keep", type=int, default=20, help="records kept under DIR (with --record)")
    ap.add_argument("--started", type=float, help="epoch seconds when the server process was launched")
    ap.add_argument("--ready", type=float, help="epoch seconds of the first 200 on /health_generate")
    ap.add_argument("--json", help="write everything read to this file")
    ap.add_argument("--quiet", action="store_true", help="no table on stdout")
    args = ap.parse_args(argv)
    if args.record is not None:
        if not args.unit or args.log or args.keep < 1:
            ap.error("--record needs --unit, a --keep of at least 1 and no LOG")
        rc, answer = record(args.record, args.unit, args.keep, args.ready)
        print(json.dumps(answer))
        return rc
    if args.log is None:
        ap.error("LOG (a file, or - for stdin) or --record DIR")
    if args.log == "-":
        result = read(sys.stdin, args.started, args.ready)
    else:
        with open(args.log, encoding="utf-8", errors="replace") as handle:
            result = read(handle, args.started, args.ready)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if not args.quiet:
        print(table(result))
    return 0 if result["found"] else 1


if __name__ == "__main__":
    sys.exit(main())
