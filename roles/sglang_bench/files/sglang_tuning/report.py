"""The tuning's report: the summary, report.md, the plot and the inventory snippet (winner.yml)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from .config import Config
from .rules import CONFIRM_INTERIM, CONFIRM_LEVEL, CONFIRM_LOOKS, LOOKS, MAX_STARTS, Point, as_vars, label_of
from .search import UNKNOWN, serving
from .state import State


def restarts(config: Config, measurements: list[dict[str, Any]], final: Point | None) -> int:
    """Server restarts: a measurement of other settings than the server runs, the baseline's and the
    final one included (a start that failed leaves the server down: whatever follows restarts it)."""
    current: Any = config.start
    count = 0
    for m in measurements:
        point = None if m["point"] is None else tuple(m["point"])
        count += point != current
        current = point if m["status"] == "ok" else UNKNOWN
    return count + (final is not None and final != current)


def summary(state: State) -> dict[str, Any]:
    config = state.config
    search, pending = state.replay()
    serve = serving(search)
    start_vals = search.values(config.start)
    base = search.samples.get(None)
    speedup = None
    serve_single = search.samples[serve].single if serve in search.samples else []
    if base and not base.failed and base.single and serve_single:
        speedup = statistics.fmean(serve_single) / statistics.fmean(base.single)
    final = search.final
    spread = search.spread()
    return {
        "objective": config.objective,
        "confidence": config.confidence,
        "start": as_vars(config.start),
        "best": as_vars(search.best),
        "winner": as_vars(search.winner) if search.winner else None,
        "serving": as_vars(serve),
        "serving_label": label_of(serve),
        "decision": search.decision,
        "gain_pct": final["gain"] * 100 if final else None,
        "gain_ci_pct": [c * 100 for c in final["ci_gain"]] if final else None,
        "gain_p": final["p"] if final else None,
        "best_score": final["mean"] if final else None,
        "start_score": statistics.fmean(start_vals) if start_vals else None,
        "speedup_vs_baseline": speedup,
        "candidates": len([p for p in search.samples if p is not None and p != config.start]),
        "measurements": len(state.measurements),
        "runs": sum(len(m.get("single") or []) for m in state.measurements),
        "failed": sorted({m["label"] for m in state.measurements if m["status"] != "ok"}),
        "restarts": restarts(config, state.measurements, serve),
        # the host's start-to-start spread the decisions used, measured from its repeated starts
        "spread": None if spread is None else {"cv_pct": spread["cv"] * 100, "df": spread["df"],
                                               "starts": spread["starts"], "points": spread["settings"],
                                               "between_pct": spread["between_cv"] * 100,
                                               "within_pct": spread["within_cv"] * 100},
        "confirm_pairs": search.confirm_pairs,
        "minutes_used": round(search.used_minutes, 1),
        "grid_points": len(config.grid()),
        "full_grid_restarts": len(config.grid()) + (1 if config.baseline else 0),
        "max_candidates": config.max_candidates(),
        "stop": search.stop,
        "converged": search.stop == "converged",
        "done": pending is None,
    }


def winner_yaml(result: dict[str, Any]) -> str:
    serving_ = result["serving"]
    lines = ["---",
             "# EAGLE-3 settings found by playbooks/tune.yml (objective: {}){}".format(
                 result["objective"], "" if result["winner"] else "; no significant gain over the starting settings"),
             "sglang_server_speculative_num_steps: {}".format(serving_["num_steps"]),
             "sglang_server_speculative_eagle_topk: {}".format(serving_["eagle_topk"]),
             "sglang_server_speculative_num_draft_tokens: {}".format(serving_["num_draft_tokens"])]
    if serving_["eagle_topk"] > 1:
        lines += ["# topk > 1: SGLANG_ENABLE_SPEC_V2 (the overlap scheduler) supports topk 1 only; the server leaves it out",
                  "sglang_server_env_unset: [SGLANG_ENABLE_SPEC_V2]"]
    return "\n".join(lines) + "\n"


def fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def fmt_p(p: float) -> str:
    return "p<0.0001" if p < 0.0001 else f"p={p:.4f}"


def render(state: State, result: dict[str, Any], plot: str | None) -> str:
    config = state.config
    search, _pending = state.replay()
    conf = f"{config.confidence * 100:g}%"
    rows = [("| Candidate | steps | topk | draft tokens | status | runs (starts; of them fresh) | single tok/s (mean) | range |"
            " accept length | aggregate tok/s | objective (mean over starts) |"),
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for e in state.results():
        point = e["point"] or ["-", "-", "-"]
        key = None if e["point"] is None else tuple(e["point"])
        mark = " (winner)" if e["label"] == result["serving_label"] and result["winner"] else (
            " (start)" if key == config.start else "")
        starts = search.starts(key)
        sample = search.samples.get(key)
        if not starts:
            objective = "-"
        else:
            mean = statistics.fmean(statistics.fmean(v) for v in starts)
            objective = fmt(mean, 3) if config.objective == "mix" else fmt(mean)
        n_starts = len(sample.starts) if sample else 0
        fresh = len(sample.of("confirm")) if sample else 0
        rows.append(f"| {e['label']}{mark} | {point[0]} | {point[1]} | {point[2]} | {e['status']} | "
                    f"{e['runs']} ({n_starts}{'; ' + str(fresh) if fresh else ''}) | {fmt(e['single_tok_s'])} | "
                    f"{(fmt(e['min_tok_s']) + '-' + fmt(e['max_tok_s'])) if e['min_tok_s'] is not None else '-'} | "
                    f"{fmt(e['accept_length'], 2)} | {fmt(e['aggregate_tok_s'])} | "
                    f"{objective} |")
    moves = ["| Candidate | against | looks | gain (last look) | one-sided p | level per look | result |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in search.comparisons:
        last = c["looks"][-1] if c["looks"] else None
        gain = (f"{last['gain'] * 100:+.1f}% ({last['starts']} vs {last['starts_ref']} starts, {last['n']} vs "
                f"{last['n_ref']} runs)" if last else "-")
        moves.append(f"| {label_of(c['candidate'])} | {label_of(c['best'])} | {len(c['looks'])} | "
                     f"{gain} | "
                     f"{fmt_p(last['p']) if last else '-'} | {fmt_p(last['alpha']).replace('p=', '') if last else '-'} | "
                     f"{c['result']} |")
    winner = result["winner"]
    final = search.final
    spread = result["spread"]
    spread_text = (f"{spread['cv_pct']:.2f}% of a start's mean, measured from {spread['starts']} starts of "
                   f"{spread['points']} points measured more than once ({spread['df']} degrees of freedom; their "
                   f"means spread {spread['between_pct']:.2f}%, their runs explain {spread['within_pct']:.2f}%)"
                   if spread else "not measured (no point was measured on two starts)")
    if final:
        tested = (f"one-sided test over starts {fmt_p(final['p'])} at level {final['alpha']:.3g}, {final['starts']} fresh "
                  f"start{'s' if final['starts'] > 1 else ''} of it against {final['starts_ref']} of the start, "
                  f"interleaved")
    if winner and result["gain_pct"] is None:  # the start failed: nothing to test the winner against
        verdict = f"Winner: {result['serving_label']} ({result['decision']})."
    elif winner:
        verdict = (f"Winner: {result['serving_label']}: {result['gain_pct']:+.1f}% over the start "
                   f"({conf} CI {result['gain_ci_pct'][0]:+.1f}% to {result['gain_ci_pct'][1]:+.1f}%"
                   + (f"; {tested})." if final else ")."))
    elif final:
        verdict = (f"No significant gain: the best point, {label_of(search.best)}, gave {result['gain_pct']:+.1f}% "
                   f"over the start on fresh starts ({conf} CI {result['gain_ci_pct'][0]:+.1f}% to "
                   f"{result['gain_ci_pct'][1]:+.1f}%; {tested}; minimum gain {config.min_gain * 100:g}%): the "
                   f"server keeps {label_of(config.start)}.")
    else:
        verdict = f"No significant gain ({search.decision}): the server keeps {label_of(config.start)}."
    lines = [
        "# EAGLE-3 tuning", "",
        f"Objective: {config.objective}" + (f" (concurrency {config.concurrency})" if config.objective != "single" else "")
        + (f", weight {config.weight:g} on single stream" if config.objective == "mix" else "") + ".",
        f"Search: coordinate descent from {label_of(config.start)}; {result['candidates']} candidates, "
        f"{result['measurements']} measurements and {result['runs']} single-stream runs ({result['restarts']} server "
        f"restarts, the final one included; about {result['minutes_used']:g} of {config.budget_minutes:g} min) of a "
        f"{result['grid_points']}-point grid (the full grid: {result['full_grid_restarts']} restarts); "
        + ("converged." if result["converged"] else f"stopped by {result['stop']}."),
        "",
        f"The host's spread between starts: {spread_text}. Every start of the server has its own speed, which "
        f"its runs do not show: the decisions compare points over their starts (each point's mean is the mean "
        f"of its starts' means) with this spread, measured here from repeated starts, never assumed.",
        "",
        (f"Decisions: the search moves when a one-sided test of the candidate's starts against the best's rejects "
         f"at {1 - config.confidence:.3g} per look (at most {LOOKS} looks per comparison, at most {MAX_STARTS} "
         f"starts of a point) and the gain is above {config.min_gain * 100:g}%; the winner serves only when fresh "
         f"starts of it beat fresh starts of the start the same way (interleaved, neither the runs nor the starts "
         f"that selected it), " + (
            f"at most {CONFIRM_LOOKS} looks with {(1 - config.confidence) * CONFIRM_LEVEL:.3g} in all: "
            f"{(1 - config.confidence) * CONFIRM_LEVEL * CONFIRM_INTERIM:.3g} at a look another may follow, what is "
            f"left at the last." if config.surface else
            f"at {(1 - config.confidence) / CONFIRM_LOOKS:.3g} per look (at most {CONFIRM_LOOKS}: "
            f"{1 - config.confidence:.3g} in all).")),
        "",
        verdict,
    ]
    if result["speedup_vs_baseline"] is not None:
        lines.append(f"Speedup over no speculation (single stream): {result['speedup_vs_baseline']:.3f}x.")
    if result["failed"]:
        lines.append("Failed and skipped: " + ", ".join(result["failed"]) + ".")
    lines += ["", *rows, "", "Comparisons, in order:", "", *moves]
    failures = [e for e in state.results() if e["status"] != "ok"]
    if failures:  # why each failed, in full (the server's last error, a refused check): not cut to fit a cell
        lines += ["", "Why the failed candidates failed:", ""]
        lines += [f"- {e['label']}: {' '.join(str(e.get('why') or 'no reason recorded').split())}" for e in failures]
    lines += ["", "Inventory snippet (winner.yml):", "", "```yaml", winner_yaml(result).rstrip(), "```"]
    if plot:
        lines += ["", f"![tok/s over the candidates]({plot})"]
    return "\n".join(lines) + "\n"


def render_plot(state: State, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(9, 4.5))
    by_topk: dict[int, list[tuple[int, int, float, float]]] = {}
    results = state.results()
    for e in results:
        if e["point"] is None:
            continue
        s, k, n = e["point"]
        if e["status"] == "ok" and e["single_tok_s"]:
            spread = statistics.stdev(e["single"]) / math.sqrt(len(e["single"])) if len(e["single"]) > 1 else 0.0
            by_topk.setdefault(k, []).append((s, n, e["single_tok_s"], spread))
        else:
            ax.scatter([s], [0], marker="x", color="red")
            ax.annotate(f"k{k} n{n} failed", (s, 0), fontsize=7)
    for k, values in sorted(by_topk.items()):
        values.sort()
        ax.errorbar([v[0] for v in values], [v[2] for v in values], yerr=[2 * v[3] for v in values], marker="o",
                    linestyle=":", capsize=3, label=f"topk {k}")
        for s, n, tok, _se in values:
            ax.annotate(f"n{n}", (s, tok), fontsize=7, textcoords="offset points", xytext=(3, 3))
    base = next((e for e in results if e["point"] is None), None)
    if base and base["status"] == "ok" and base["single_tok_s"]:
        ax.axhline(base["single_tok_s"], color="grey", linestyle="--", label="no speculation")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("speculative_num_steps")
    ax.set_ylabel("single-stream tok/s (mean, 2 standard errors)")
    ax.set_title("EAGLE-3 tuning: tok/s per candidate (n = draft tokens)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
