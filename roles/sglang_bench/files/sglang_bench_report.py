#!/usr/bin/env python3
"""Compare a host's newest benchmark with its history and a baseline; gate regressions.

Runs on the controller over ``bench-results/<host>/*.json`` (results of
files/sglang_bench.py fetched by the sglang_bench role). It writes, next to them:

* ``report.md``: the newest session's figures per label (mean tok/s and range, the
  reference method), the change against the previous session of the same label and
  against the configured baseline, the EAGLE-3 speedup when the session measured both
  ``baseline`` and ``eagle3`` (A/B), the throughput per concurrency of a sweep, and the
  history table (tok/s per release);
* ``history.png``: mean tok/s per session and label, min-max as error bars, x labelled
  with the release that served.

Exit status 1 when the gate fails: the newest mean tok/s of a label dropped by more than
--max-drop-pct against the previous session of that label, or against --baseline-tok-s
(for --gate-label). Exit status 2 on unusable input.

Usage: sglang_bench_report.py --results-dir bench-results --host gpu1 [--baseline-tok-s 96.1]
       [--max-drop-pct 5] [--gate-label eagle3] [--no-plot]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def load(host_dir: Path) -> list[dict]:
    """Every result of the host, oldest first; sessions come from the file names."""
    results = []
    for path in sorted(host_dir.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError as exc:
            raise SystemExit(f"{path}: not JSON ({exc})") from exc
        if doc.get("schema") != "sglang-bench/1":
            continue
        env = doc.get("environment") or {}
        doc["_session"] = env.get("session") or path.stem.split("-", 1)[0]
        doc["_release"] = env.get("release_id") or "?"
        doc["_file"] = path.name
        results.append(doc)
    results.sort(key=lambda d: (d["_session"], d.get("started_at") or ""))
    return results


def pct(new: float, old: float) -> float:
    return (new - old) / old * 100.0


def evaluate(results: list[dict], baseline: float | None, max_drop: float, gate_label: str) -> dict:
    """The newest session, its comparisons and the gate decision."""
    if not results:
        raise SystemExit("no benchmark results")
    sessions = sorted({r["_session"] for r in results})
    latest = sessions[-1]
    newest = [r for r in results if r["_session"] == latest]
    findings, failures = [], []
    by_label: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        by_label[r.get("label") or ""].append(r)
    for r in newest:
        label = r.get("label") or ""
        if not r.get("ok") or r.get("mean_tok_s") is None:
            failures.append(f"[{label}] the benchmark itself failed: {r.get('failure')}")
            continue
        earlier = [x for x in by_label[label] if x["_session"] < latest and x.get("ok") and x.get("mean_tok_s")]
        row = {"label": label, "mean": r["mean_tok_s"], "min": r.get("min_tok_s"), "max": r.get("max_tok_s"),
               "runs": r.get("ok_runs"), "concurrency": r.get("concurrency"), "aggregate": r.get("aggregate_tok_s"),
               "accept": r.get("accept_length") or r.get("server_avg_spec_accept_length"), "release": r["_release"]}
        if earlier:
            prev = earlier[-1]
            row["previous"] = prev["mean_tok_s"]
            row["vs_previous_pct"] = pct(r["mean_tok_s"], prev["mean_tok_s"])
            if row["vs_previous_pct"] < -max_drop:
                failures.append(f"[{label}] mean {r['mean_tok_s']:.1f} tok/s is {-row['vs_previous_pct']:.1f}% below "
                                f"the previous session ({prev['mean_tok_s']:.1f} tok/s, release {prev['_release']}); "
                                f"the gate allows {max_drop:.1f}%")
        if baseline and label == gate_label:
            row["vs_baseline_pct"] = pct(r["mean_tok_s"], baseline)
            if row["vs_baseline_pct"] < -max_drop:
                failures.append(f"[{label}] mean {r['mean_tok_s']:.1f} tok/s is {-row['vs_baseline_pct']:.1f}% below "
                                f"the configured baseline {baseline:.1f} tok/s; the gate allows {max_drop:.1f}%")
        findings.append(row)
    labels = {row["label"]: row for row in findings}
    speedup = None
    if "baseline" in labels and "eagle3" in labels:
        speedup = labels["eagle3"]["mean"] / labels["baseline"]["mean"]
    return {"session": latest, "rows": findings, "failures": failures, "speedup": speedup,
            "sessions": sessions}


def markdown(host: str, results: list[dict], ev: dict, baseline: float | None, max_drop: float, plot: bool) -> str:
    out = [f"# Benchmark report: {host}", "",
           f"Newest session `{ev['session']}`; gate: a drop of more than {max_drop:.1f}% fails"
           + (f"; configured baseline {baseline:.1f} tok/s." if baseline else "."), ""]
    out += ["| label | concurrency | mean tok/s | range | runs | accept length | aggregate tok/s | vs previous | vs baseline | release |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in ev["rows"]:
        cells = [r["label"] or "-", str(r["concurrency"]), f"{r['mean']:.1f}",
                 f"{r['min']:.1f}-{r['max']:.1f}" if r["min"] is not None else "-", str(r["runs"]),
                 f"{r['accept']:.2f}" if r["accept"] else "-",
                 f"{r['aggregate']:.1f}" if r["aggregate"] else "-",
                 f"{r['vs_previous_pct']:+.1f}%" if "vs_previous_pct" in r else "-",
                 f"{r['vs_baseline_pct']:+.1f}%" if "vs_baseline_pct" in r else "-",
                 r["release"]]
        out.append("| " + " | ".join(cells) + " |")
    if ev["speedup"]:
        out += ["", f"EAGLE-3 speedup over the no-speculation baseline: **{ev['speedup']:.3f}x**."]
    out += ["", "## Gate", ""]
    out += [f"- FAIL: {f}" for f in ev["failures"]] or ["- pass"]
    out += ["", "## History (mean tok/s per session)", "", "| session | label | release | mean | range | concurrency |",
            "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if r.get("mean_tok_s") is None:
            continue
        out.append(f"| {r['_session']} | {r.get('label') or '-'} | {r['_release']} | {r['mean_tok_s']:.1f} | "
                   f"{r.get('min_tok_s', 0):.1f}-{r.get('max_tok_s', 0):.1f} | {r.get('concurrency')} |")
    if plot:
        out += ["", "![tok/s per release](history.png)"]
    return "\n".join(out) + "\n"


def render_plot(results: list[dict], path: Path, host: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sessions = sorted({r["_session"] for r in results})
    releases = {r["_session"]: r["_release"] for r in results}
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    by_label: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        if r.get("mean_tok_s") is not None and (r.get("concurrency") or 1) == 1:
            by_label[r.get("label") or "-"].append(r)
    for label, rows in sorted(by_label.items()):
        xs = [sessions.index(r["_session"]) for r in rows]
        ys = [r["mean_tok_s"] for r in rows]
        lo = [r["mean_tok_s"] - (r.get("min_tok_s") or r["mean_tok_s"]) for r in rows]
        hi = [(r.get("max_tok_s") or r["mean_tok_s"]) - r["mean_tok_s"] for r in rows]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, label=label)
    ax.set_xticks(range(len(sessions)))
    ax.set_xticklabels([f"{s}\n{releases[s][:12]}" for s in sessions], fontsize=7)
    ax.set_ylabel("single-stream tok/s (mean, min-max)")
    ax.set_title(f"{host}: decode speed per release")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results-dir", type=Path, required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--baseline-tok-s", type=float, default=None)
    ap.add_argument("--max-drop-pct", type=float, default=5.0)
    ap.add_argument("--gate-label", default="eagle3", help="label the configured baseline applies to")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    if args.max_drop_pct < 0:
        ap.error("--max-drop-pct must be >= 0")
    host_dir = args.results_dir / args.host
    results = load(host_dir)
    ev = evaluate(results, args.baseline_tok_s, args.max_drop_pct, args.gate_label)
    if not args.no_plot:
        render_plot(results, host_dir / "history.png", args.host)
    report = markdown(args.host, results, ev, args.baseline_tok_s, args.max_drop_pct, not args.no_plot)
    tmp = host_dir / "report.md.tmp"
    tmp.write_text(report)
    tmp.replace(host_dir / "report.md")
    print(json.dumps({"host": args.host, "session": ev["session"], "rows": ev["rows"], "speedup": ev["speedup"],
                      "failures": ev["failures"], "report": str(host_dir / "report.md")}))
    return 1 if ev["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
