#!/usr/bin/env python3
"""The newest benchmark results on this GPU host as Prometheus metrics (node exporter's textfile collector).

Role sglang_bench leaves each label's newest result on the host as <results-dir>/last-<label>.json
(the document sglang_bench.py writes: label, ok, mean_tok_s, accept_length, finished_at and the
environment with release_id and session). This tool, run by sglang-bench-metrics.service whenever
that directory changes, writes <textfile-dir>/sglang_bench.prom atomically:

    sglang_bench_tokens_per_second{label}                   mean single-stream tok/s of the newest result
    sglang_bench_accept_length{label}           its mean speculative accept length (when measured)
    sglang_bench_ok{label}                      1 when it finished without errors
    sglang_bench_timestamp_seconds{label}       when it finished (Unix time)
    sglang_bench_info{label,release,session}    1: which release and session it measured
    sglang_bench_baseline_tokens_per_second{label,source}   the configured baseline (source="configured"), else the
    sglang_bench_baseline_accept_length{...}    median of up to 5 previous results (source="history")

The previous results live in --state (JSON, this tool's own); a result is recorded once (by label and
finished_at), so reruns of the tool change nothing.

With --start-record (role sglang_server's record of the newest start, <starts_dir>/last.json) it also writes
--start-textfile, where the server's newest start went:

    sglang_server_start_ready_seconds                   launch to the first 200 on /health_generate
    sglang_server_start_timestamp_seconds               the launch (Unix time)
    sglang_server_start_phase_seconds{phase,what}       each segment between the marks the log showed
    sglang_server_start_weights_seconds{model}          the weights' load as SGLang printed it (target, draft)
    sglang_server_start_cuda_graph_seconds{graph}       each CUDA graph's capture as SGLang printed it
    sglang_server_start_jit_messages                    JIT and compile lines in the start's log

Usage: sglang_bench_textfile.py --results-dir DIR --textfile FILE --state FILE [--baselines FILE]
                                [--start-record FILE --start-textfile FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

HISTORY_KEPT = 20
BASELINE_WINDOW = 5


def read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default
    except (OSError, ValueError) as exc:
        print(f"sglang_bench_textfile: ignoring {path}: {exc}", file=sys.stderr)
        return default


def timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def newest_results(results_dir: Path) -> dict[str, dict[str, Any]]:
    """label -> the newest result document of that label."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(results_dir.glob("last-*.json")):
        doc = read_json(path, None)
        if not isinstance(doc, dict) or not isinstance(doc.get("label"), str):
            continue
        found[doc["label"]] = doc
    return found


def record(history: dict[str, list[dict[str, Any]]], results: dict[str, dict[str, Any]]) -> None:
    """Append each label's newest result to its history once (keyed by finished_at)."""
    for label, doc in results.items():
        past = history.setdefault(label, [])
        if not doc.get("ok") or doc.get("mean_tok_s") is None:
            continue
        if any(entry["finished_at"] == doc.get("finished_at") for entry in past):
            continue
        past.append({"finished_at": doc.get("finished_at"), "tok_s": doc["mean_tok_s"],
                     "accept_length": doc.get("accept_length")})
        del past[:-HISTORY_KEPT]


def baseline(label: str, doc: dict[str, Any], history: dict[str, list[dict[str, Any]]],
             configured: dict[str, dict[str, float]]) -> tuple[str, dict[str, float]] | None:
    """(source, {tok_s, accept_length}) for the label, or None when there is nothing to compare with."""
    if label in configured and configured[label].get("tok_s"):
        return "configured", configured[label]
    previous = [e for e in history.get(label, []) if e["finished_at"] != doc.get("finished_at")][-BASELINE_WINDOW:]
    if not previous:
        return None
    accepts = [e["accept_length"] for e in previous if e.get("accept_length") is not None]
    return "history", {"tok_s": statistics.median(e["tok_s"] for e in previous),
                       "accept_length": statistics.median(accepts) if accepts else None}


def escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(results: dict[str, dict[str, Any]], history: dict[str, list[dict[str, Any]]],
           configured: dict[str, dict[str, float]]) -> str:
    families: dict[str, tuple[str, list[str]]] = {
        "sglang_bench_tokens_per_second": ("Mean single-stream tok/s of the newest benchmark (role sglang_bench).", []),
        "sglang_bench_accept_length": ("Mean speculative accept length of the newest benchmark.", []),
        "sglang_bench_ok": ("1 when the newest benchmark finished without errors.", []),
        "sglang_bench_timestamp_seconds": ("When the newest benchmark finished (Unix time).", []),
        "sglang_bench_info": ("The release and session the newest benchmark measured.", []),
        "sglang_bench_baseline_tokens_per_second": ("Baseline tok/s: configured, or the median of the previous results.", []),
        "sglang_bench_baseline_accept_length": ("Baseline accept length: configured, or the previous results' median.",
                                                []),
    }

    def add(name: str, labels: dict[str, Any], value: float) -> None:
        inner = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
        families[name][1].append(f"{name}{{{inner}}} {float(value)!r}")

    for label, doc in sorted(results.items()):
        env = doc.get("environment") or {}
        lab = {"label": label}
        ok = bool(doc.get("ok")) and doc.get("mean_tok_s") is not None
        add("sglang_bench_ok", lab, 1 if ok else 0)
        add("sglang_bench_info", {**lab, "release": env.get("release_id", "unknown"),
                                  "session": env.get("session", "unknown")}, 1)
        finished = timestamp(doc.get("finished_at"))
        if finished is not None:
            add("sglang_bench_timestamp_seconds", lab, finished)
        if not ok:
            continue
        add("sglang_bench_tokens_per_second", lab, doc["mean_tok_s"])
        if doc.get("accept_length") is not None:
            add("sglang_bench_accept_length", lab, doc["accept_length"])
        base = baseline(label, doc, history, configured)
        if base is not None:
            source, values = base
            add("sglang_bench_baseline_tokens_per_second", {**lab, "source": source}, values["tok_s"])
            if values.get("accept_length") is not None:
                add("sglang_bench_baseline_accept_length", {**lab, "source": source}, values["accept_length"])
    lines: list[str] = []
    for name, (doc, samples) in families.items():
        if samples:
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", *samples]
    return "\n".join(lines) + "\n" if lines else ""


def render_start(record: dict[str, Any] | None) -> str:
    """The newest start's metrics (see the module's docstring); empty without a record."""
    if not isinstance(record, dict) or not record.get("found"):
        return ""
    families: dict[str, tuple[str, list[str]]] = {
        "sglang_server_start_ready_seconds": ("Seconds from the server's launch to its first 200 on /health_generate "
                                              "(its newest start; role sglang_server's record).", []),
        "sglang_server_start_timestamp_seconds": ("When the newest start was launched (Unix time).", []),
        "sglang_server_start_phase_seconds": ("Seconds of each phase of the newest start, between the marks its log "
                                              "showed.", []),
        "sglang_server_start_weights_seconds": ("Seconds SGLang printed for loading each model's weights.", []),
        "sglang_server_start_cuda_graph_seconds": ("Seconds SGLang printed for capturing each CUDA graph.", []),
        "sglang_server_start_jit_messages": ("JIT and compile lines in the newest start's log.", []),
    }

    def add(name: str, labels: dict[str, Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        inner = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
        families[name][1].append(f"{name}{{{inner}}} {float(value)!r}" if inner else f"{name} {float(value)!r}")

    add("sglang_server_start_ready_seconds", {}, record.get("ready_s"))
    add("sglang_server_start_timestamp_seconds", {}, record.get("started_epoch") or record.get("first_line_epoch"))
    for seg in record.get("phases") or []:
        add("sglang_server_start_phase_seconds", {"phase": seg.get("phase"), "what": seg.get("what")}, seg.get("seconds"))
    # One rank's figures: a single process logs without a rank, a tensor-parallel group as TP0, TP1, ...
    for key, name, label in (("weights", "sglang_server_start_weights_seconds", "model"),
                             ("cuda_graphs", "sglang_server_start_cuda_graph_seconds", "graph")):
        items = [item for item in record.get(key) or [] if isinstance(item, dict)]
        ranks = sorted({item.get("rank") or "" for item in items})
        for item in items:
            if (item.get("rank") or "") == ranks[0]:
                add(name, {label: item.get("model" if key == "weights" else "name")}, item.get("elapsed_s"))
    add("sglang_server_start_jit_messages", {}, (record.get("jit") or {}).get("count"))
    lines: list[str] = []
    for name, (doc, samples) in families.items():
        if samples:
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", *samples]
    return "\n".join(lines) + "\n" if lines else ""


def write_atomic(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write through a temporary file in the same directory (the collector never reads half a file);
    False when the content is already there."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results-dir", type=Path, required=True)
    ap.add_argument("--textfile", type=Path, required=True)
    ap.add_argument("--state", type=Path, required=True)
    ap.add_argument("--baselines", type=Path, help="JSON {label: {tok_s, accept_length}}")
    ap.add_argument("--start-record", type=Path, help="role sglang_server's newest start record (last.json)")
    ap.add_argument("--start-textfile", type=Path, help="where the start's metrics go (with --start-record)")
    args = ap.parse_args(argv)
    if (args.start_record is None) != (args.start_textfile is None):
        ap.error("--start-record and --start-textfile go together")
    configured = read_json(args.baselines, {}) if args.baselines else {}
    history = read_json(args.state, {})
    results = newest_results(args.results_dir)
    record(history, results)
    write_atomic(args.state, json.dumps(history, indent=1, sort_keys=True) + "\n", 0o640)
    changed = write_atomic(args.textfile, render(results, history, configured))
    print(f"sglang_bench_textfile: {len(results)} label(s) in {args.results_dir}; "
          f"{args.textfile} {'written' if changed else 'unchanged'}")
    if args.start_record is not None:
        start = render_start(read_json(args.start_record, None))
        changed = write_atomic(args.start_textfile, start)
        print(f"sglang_bench_textfile: {'the newest start' if start else 'no start recorded'} "
              f"({args.start_record}); {args.start_textfile} {'written' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
