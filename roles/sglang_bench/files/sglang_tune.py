#!/usr/bin/env python3
"""EAGLE-3 tuning on the controller: the candidates, the search, the record and the report.

The play (roles/sglang_bench, tasks/tune.yml) restarts the server and measures; this tool decides
what to measure next and what the result means. It keeps no state of its own beyond one JSON file
(the settings and every result so far) and replays the search from it on every call, so a call
always answers the same way for the same results, and a rerun after an interrupted play starts a
fresh search.

A point is (speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens), with
SGLang's rules applied before anything restarts:
  - topk 1: the draft tokens are steps + 1 (SGLang replaces any other value, server_args.py);
  - topk > 1: 2 <= draft tokens <= 1 + topk + (steps - 1) * topk^2, the candidates of the draft tree
    SGLang selects the verified tokens among (more cannot be selected).

The search: coordinate descent from the settings the server runs with. Along one parameter at a
time it moves to the next value of that parameter's list while the objective improves by more than
min_gain_pct, first upwards, then downwards; passes over the three parameters repeat until a whole
pass finds nothing better or the budget ends. A topk move scales the draft tokens with the topk
(the tree keeps its width per step), because at fixed draft tokens a wider topk changes nothing.
Points measured once are never measured again. Why this search: every candidate costs a server
restart (8-10 minutes of weight loading on the reference host) and the measurement after it is
short, so restarts are what must be few; successive halving saves measurement, not restarts (every
candidate of its first round is started). The response is smooth and single-peaked along each
parameter (acceptance falls with depth, costs grow with depth and width), which is where a
coordinate search is reliable; the unit tests compare it with the full grid on the simulator's
model.

Commands (JSON on stdout; a bad setting exits 2 naming its variable):
  plan   --state FILE [--check]     settings JSON on stdin; the grid, the budget, the estimate
  next   --state FILE               the next candidate, or null when the search is done
  record --state FILE --label L (--result JSON [--aggregate JSON] | --failed WHY|-)
  report --state FILE --out-dir DIR [--no-plot]   report.md, tune.png, winner.yml
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

AXES = ("num_steps", "eagle_topk", "num_draft_tokens")
OBJECTIVES = ("single", "throughput", "mix")
# The order the search moves the parameters in: the tree's width first (topk, then how many of its
# tokens are verified), then its depth.
SEARCH_ORDER = ("eagle_topk", "num_draft_tokens", "num_steps")
VAR = "sglang_bench_tune_"
Point = tuple[int, int, int]


class TuneError(Exception):
    """A bad setting; the message starts with the variable's name."""


# --------------------------------------------------------------------------- points and rules


def canonical(point: Point) -> Point:
    """SGLang's rule: with topk 1 the draft tokens are steps + 1."""
    steps, topk, draft = point
    return (steps, 1, steps + 1) if topk == 1 else (steps, topk, draft)


def tree_candidates(steps: int, topk: int) -> int:
    """Draft-tree nodes SGLang selects the verified draft tokens among: topk + (steps - 1) * topk^2."""
    return topk + (steps - 1) * topk * topk


def rejection(point: Point) -> str | None:
    """Why SGLang would refuse the (canonical) point, or None."""
    steps, topk, draft = point
    if steps < 1 or topk < 1:
        return f"steps {steps} and topk {topk} must be at least 1"
    if topk > 1 and draft < 2:
        return f"{draft} draft tokens: at least 2"
    if topk > 1 and draft - 1 > tree_candidates(steps, topk):
        return (f"{draft} draft tokens: a {steps}-step topk-{topk} tree has only {tree_candidates(steps, topk)} "
                f"candidates to select {draft - 1} from")
    return None


def label_of(point: Point | None) -> str:
    return "tune-baseline" if point is None else "tune-s{}-k{}-n{}".format(*point)


def as_vars(point: Point) -> dict[str, int]:
    return dict(zip(AXES, point))


@dataclass
class Config:
    axes: dict[str, list[int]]
    start: Point
    objective: str
    weight: float
    concurrency: int
    min_gain: float
    max_candidates: int
    baseline: bool
    candidate_minutes: float
    restart_minutes: float
    budget_minutes: float

    @classmethod
    def from_settings(cls, raw: dict[str, Any], require_start: bool = True) -> "Config":
        """Check the settings (each error names its variable) and derive the candidate budget.

        Without require_start an empty start is allowed (checked before the server is asked).
        """
        axes: dict[str, list[int]] = {}
        for axis in AXES:
            values = raw.get(axis)
            if not isinstance(values, list) or not values:
                raise TuneError(f"{VAR}{axis} must be a non-empty list of integers (the values to try), got {values!r}")
            if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
                raise TuneError(f"{VAR}{axis} must hold integers >= 1, got {values!r}")
            axes[axis] = sorted(set(values))
        start_raw = raw.get("start") or {}
        if set(start_raw) - set(AXES) or len(start_raw) not in (0, 3):
            raise TuneError(f"{VAR}start must be empty (the server's settings) or give exactly {', '.join(AXES)}, "
                            f"got {start_raw!r}")
        if not start_raw and require_start:
            raise TuneError(f"{VAR}start is empty and the server reported no speculative settings: it runs without "
                            f"speculation; give {VAR}start")
        start = cls.check_start(start_raw) if start_raw else (1, 1, 2)
        if start_raw:
            for axis, value in zip(AXES, start):  # the start is a point of the grid
                if axis != "num_draft_tokens" or start[1] > 1:
                    axes[axis] = sorted(set(axes[axis]) | {value})
        objective = raw.get("objective")
        if objective not in OBJECTIVES:
            raise TuneError(f"{VAR}objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
        weight = float(raw.get("weight", 0.5))
        if not 0.0 <= weight <= 1.0:
            raise TuneError(f"{VAR}weight must lie in [0, 1] (the single-stream share of the mix), got {weight}")
        concurrency = int(raw.get("concurrency", 1))
        if objective != "single" and concurrency < 2:
            raise TuneError(f"{VAR}concurrency must be at least 2 for objective {objective}, got {concurrency}")
        min_gain = float(raw.get("min_gain_pct", 1.0))
        if min_gain < 0:
            raise TuneError(f"{VAR}min_gain_pct must not be negative, got {min_gain}")
        restart = float(raw.get("restart_minutes", 10))
        measure = float(raw.get("measure_minutes", 2))
        budget = float(raw.get("budget_minutes", 120))
        if restart <= 0 or measure <= 0:
            raise TuneError(f"{VAR}restart_minutes and {VAR}measure_minutes must be positive, got {restart} and {measure}")
        baseline = bool(raw.get("baseline", False))
        candidate = restart + measure
        # The budget pays for the baseline, the candidates and the final restart onto the winner.
        fixed = restart + (candidate if baseline else 0.0)
        max_candidates = math.floor((budget - fixed) / candidate + 1e-9)
        if max_candidates < 1:
            raise TuneError(f"{VAR}budget_minutes ({budget:g}) is too small for one candidate: one takes "
                            f"{candidate:g} min ({VAR}restart_minutes + {VAR}measure_minutes) plus {fixed:g} min for "
                            f"{'the baseline and ' if baseline else ''}the final restart")
        config = cls(axes, start, objective, weight, concurrency, min_gain / 100.0, max_candidates, baseline,
                     candidate, restart, budget)
        if not config.grid():
            raise TuneError(f"{VAR}num_steps, {VAR}eagle_topk and {VAR}num_draft_tokens leave no point that SGLang "
                            f"accepts")
        return config

    @staticmethod
    def check_start(start_raw: dict[str, Any]) -> Point:
        try:
            start = tuple(int(start_raw[a]) for a in AXES)
        except (TypeError, ValueError):
            raise TuneError(f"{VAR}start must hold integers, got {start_raw!r}") from None
        steps, topk, draft = start
        if topk == 1 and draft != steps + 1:
            raise TuneError(f"{VAR}start: with eagle_topk 1 SGLang runs num_draft_tokens = num_steps + 1 = {steps + 1}, "
                            f"got {draft} (set num_draft_tokens to {steps + 1})")
        why = rejection(start)
        if why:
            raise TuneError(f"{VAR}start is not a setting SGLang accepts: {why}")
        return start

    def grid(self) -> list[Point]:
        """Every distinct point of the axes that SGLang accepts (topk 1 rows collapse to steps + 1)."""
        points = {canonical(p) for p in itertools.product(*(self.axes[a] for a in AXES))}
        return sorted(p for p in points if rejection(p) is None)

    def rejected(self) -> list[tuple[Point, str]]:
        points = {canonical(p) for p in itertools.product(*(self.axes[a] for a in AXES))}
        return sorted((p, why) for p in points if (why := rejection(p)) is not None)


# --------------------------------------------------------------------------- the search


class NeedMeasurement(Exception):
    def __init__(self, point: Point) -> None:
        super().__init__(point)
        self.point = point


def _nearest_valid(steps: int, topk: int, target: float, drafts: list[int]) -> Point | None:
    if topk == 1:
        return canonical((steps, 1, steps + 1))
    valid = [d for d in drafts if rejection((steps, topk, d)) is None]
    if not valid:
        return None
    return (steps, topk, min(valid, key=lambda d: (abs(d - target), -d)))


def neighbours(point: Point, axis: str, direction: int, axes: dict[str, list[int]]) -> list[Point]:
    """The next points along one parameter (its next listed value), with SGLang's rules applied.

    A move of the steps or the topk changes the tree's shape: the first point keeps its width per
    step ((draft - 1) / steps, or / topk, scaled), the second keeps the draft tokens (where that is
    a different point), because which of the two pays depends on the memory and the verify cost.
    """
    steps, topk, draft = point
    values = axes[axis]
    current = {"num_steps": steps, "eagle_topk": topk, "num_draft_tokens": draft}[axis]
    later = [v for v in values if (v - current) * direction > 0]
    if not later:
        return []
    new = min(later, key=lambda v: abs(v - current))
    drafts = axes["num_draft_tokens"]
    if axis == "num_draft_tokens":
        candidates = [(steps, topk, new)]
    elif axis == "num_steps":
        candidates = [_nearest_valid(new, topk, 1 + (draft - 1) * new / steps, drafts),
                      _nearest_valid(new, topk, draft, drafts)]
    else:
        candidates = [_nearest_valid(steps, new, 1 + (draft - 1) * new / topk, drafts),
                      _nearest_valid(steps, new, draft, drafts)]
    out: list[Point] = []
    for candidate in candidates:
        if candidate is not None and candidate not in out and rejection(candidate) is None:
            out.append(candidate)
    return out


def coordinate_search(config: Config, score: Callable[[Point], float | None]) -> tuple[Point, float | None]:
    """Coordinate descent from config.start; `score` answers a point (None: it failed)."""
    best, best_score = config.start, score(config.start)

    def better(value: float | None, than: float | None) -> bool:
        return value is not None and (than is None or value > than * (1.0 + config.min_gain))

    improved = True
    while improved:
        improved = False
        for axis in SEARCH_ORDER:
            if axis == "num_draft_tokens" and best[1] == 1:
                continue  # derived from the steps
            for direction in (+1, -1):
                moved = False
                while True:
                    scored = [(value, c) for c in neighbours(best, axis, direction, config.axes)
                              if better(value := score(c), best_score)]
                    if not scored:
                        break
                    best_score, best = max(scored)
                    moved = improved = True
                if moved:
                    break
    return best, best_score


def grid_search(config: Config, score: Callable[[Point], float | None]) -> tuple[Point | None, float | None]:
    """The full grid's best (what SGLang's own tuning script does: one restart per point)."""
    scored = [(value, point) for point in config.grid() if (value := score(point)) is not None]
    if not scored:
        return None, None
    value, point = max(scored)
    return point, value


# --------------------------------------------------------------------------- results and objective


def objective_score(config: Config, entry: dict[str, Any], reference: dict[str, Any] | None) -> float | None:
    if entry.get("status") != "ok":
        return None
    single, aggregate = entry.get("single_tok_s"), entry.get("aggregate_tok_s")
    if config.objective == "single":
        return single
    if config.objective == "throughput":
        return aggregate
    if single is None or aggregate is None or reference is None:
        return None
    return (config.weight * single / reference["single_tok_s"]
            + (1.0 - config.weight) * aggregate / reference["aggregate_tok_s"])


class State:
    def __init__(self, path: Path) -> None:
        self.path = path
        data = json.loads(path.read_text(encoding="utf-8"))
        self.settings: dict[str, Any] = data["settings"]
        self.config = Config.from_settings(self.settings)
        self.results: list[dict[str, Any]] = data["results"]

    def save(self) -> None:
        self.path.write_text(json.dumps({"settings": self.settings, "results": self.results}, indent=1) + "\n",
                             encoding="utf-8")

    def entry(self, point: Point | None) -> dict[str, Any] | None:
        for entry in self.results:
            if (None if entry["point"] is None else tuple(entry["point"])) == point:
                return entry
        return None

    def reference(self) -> dict[str, Any] | None:
        """The mix objective's unit: the start's figures (or the first candidate that ran)."""
        ok = [e for e in self.results if e["point"] is not None and e["status"] == "ok"
              and e.get("single_tok_s") and e.get("aggregate_tok_s")]
        start = [e for e in ok if tuple(e["point"]) == self.config.start]
        return (start or ok or [None])[0]

    def candidates(self) -> list[dict[str, Any]]:
        return [e for e in self.results if e["point"] is not None]

    def walk(self) -> tuple[Point | None, Point | None, float | None]:
        """Replay the search on the results: (point to measure next or None, best so far, its score)."""
        reference = self.reference()
        measured: dict[Point, float | None] = {}
        best: list[Any] = [None, None]

        def score(point: Point) -> float | None:
            if point not in measured:
                entry = self.entry(point)
                if entry is None:
                    raise NeedMeasurement(point)
                measured[point] = objective_score(self.config, entry, reference)
            value = measured[point]
            if value is not None and (best[1] is None or value > best[1]):
                best[:] = [point, value]
            return value

        try:
            point, value = coordinate_search(self.config, score)
        except NeedMeasurement as need:
            return need.point, best[0], best[1]
        return None, point if value is not None else None, value

    def next(self) -> dict[str, Any]:
        # The start first (the server runs it already: no restart), then the baseline, then the search.
        if self.config.baseline and self.entry(None) is None and self.entry(self.config.start) is not None:
            return {"candidate": {"baseline": True, "label": label_of(None)}, "why": "the baseline (no speculation)"}
        point, best, value = self.walk()
        if point is None:
            return {"candidate": None, "why": "the search converged", "best": best and as_vars(best)}
        if len(self.candidates()) >= self.config.max_candidates:
            return {"candidate": None, "best": best and as_vars(best),
                    "why": f"the budget's {self.config.max_candidates} candidates are spent (next would be "
                           f"{label_of(point)})"}
        return {"candidate": {"baseline": False, "label": label_of(point), **as_vars(point)},
                "why": f"best so far {label_of(best) if best else 'none'}"
                       + (f" at {value:.2f}" if value is not None else "")}


def read_result(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data


def record(state: State, label: str, result: Path | None, aggregate: Path | None, failed: str | None) -> dict[str, Any]:
    point = None if label == label_of(None) else next(
        (p for p in state.config.grid() if label_of(p) == label), "unknown")
    if point == "unknown":
        raise TuneError(f"label {label!r} names no point of the grid")
    entry: dict[str, Any] = {"point": None if point is None else list(point), "label": label}
    if failed is not None:
        entry.update(status="failed", why=" ".join(failed.split())[:600])
    else:
        single = read_result(result)
        entry.update(status="ok" if single.get("ok") else "failed",
                     single_tok_s=single.get("mean_tok_s"), min_tok_s=single.get("min_tok_s"),
                     max_tok_s=single.get("max_tok_s"), runs=single.get("ok_runs"),
                     accept_length=single.get("server_avg_spec_accept_length") or single.get("accept_length"),
                     why=single.get("failure"))
        if aggregate is not None:
            agg = read_result(aggregate)
            entry["aggregate_tok_s"] = agg.get("aggregate_tok_s")
            if not agg.get("ok"):
                entry.update(status="failed", why=agg.get("failure"))
    state.results = [e for e in state.results if e["label"] != label] + [entry]
    state.save()
    return entry


# --------------------------------------------------------------------------- report


def restarts(config: Config, results: list[dict[str, Any]], final: Point | None) -> int:
    """Server restarts: each change of settings from the start, the baseline's and the final one included."""
    sequence = [config.start] + [None if e["point"] is None else tuple(e["point"]) for e in results]
    if final is not None:
        sequence.append(final)
    return sum(1 for a, b in zip(sequence, sequence[1:]) if a != b)


def summary(state: State) -> dict[str, Any]:
    config = state.config
    _next, best, value = state.walk()
    start_entry = state.entry(config.start)
    start_score = objective_score(config, start_entry, state.reference()) if start_entry else None
    # The winner must beat the settings the server started with; otherwise they stay.
    winner = best if best is not None and best != config.start and value is not None and (
        start_score is None or value > start_score * (1.0 + config.min_gain)) else None
    serving = winner or config.start
    base = state.entry(None)
    serving_entry = state.entry(serving)
    speedup = None
    if base and base.get("status") == "ok" and serving_entry and serving_entry.get("status") == "ok":
        speedup = serving_entry["single_tok_s"] / base["single_tok_s"]
    return {
        "objective": config.objective,
        "start": as_vars(config.start),
        "winner": as_vars(winner) if winner else None,
        "serving": as_vars(serving),
        "serving_label": label_of(serving),
        "best_score": value,
        "start_score": start_score,
        "speedup_vs_baseline": speedup,
        "candidates": len(state.candidates()),
        "failed": [e["label"] for e in state.results if e["status"] != "ok"],
        "restarts": restarts(config, state.results, serving),
        "grid_points": len(config.grid()),
        "full_grid_restarts": len(config.grid()) + (1 if config.baseline else 0),
        "max_candidates": config.max_candidates,
        "converged": _next is None,
    }


def winner_yaml(result: dict[str, Any]) -> str:
    serving = result["serving"]
    lines = ["---",
             "# EAGLE-3 settings found by playbooks/tune.yml (objective: {}){}".format(
                 result["objective"], "" if result["winner"] else "; nothing beat the starting settings"),
             "sglang_server_speculative_num_steps: {}".format(serving["num_steps"]),
             "sglang_server_speculative_eagle_topk: {}".format(serving["eagle_topk"]),
             "sglang_server_speculative_num_draft_tokens: {}".format(serving["num_draft_tokens"])]
    if serving["eagle_topk"] > 1:
        lines += ["# topk > 1: SGLANG_ENABLE_SPEC_V2 (the overlap scheduler) supports topk 1 only; the server leaves it out",
                  "sglang_server_env_unset: [SGLANG_ENABLE_SPEC_V2]"]
    return "\n".join(lines) + "\n"


def fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(state: State, result: dict[str, Any], plot: str | None) -> str:
    config = state.config
    rows = ["| Candidate | steps | topk | draft tokens | status | single tok/s (mean) | range | accept length |"
            " aggregate tok/s | objective |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    reference = state.reference()
    for e in state.results:
        point = e["point"] or ["-", "-", "-"]
        mark = " (winner)" if e["label"] == result["serving_label"] and result["winner"] else (
            " (start)" if e["point"] and tuple(e["point"]) == config.start else "")
        rows.append(f"| {e['label']}{mark} | {point[0]} | {point[1]} | {point[2]} | {e['status']} | "
                    f"{fmt(e.get('single_tok_s'))} | "
                    f"{(fmt(e.get('min_tok_s')) + '-' + fmt(e.get('max_tok_s'))) if e.get('min_tok_s') is not None else '-'} | "
                    f"{fmt(e.get('accept_length'), 2)} | {fmt(e.get('aggregate_tok_s'))} | "
                    f"{fmt(objective_score(config, e, reference) if e['point'] else None, 3)} |")
    winner = result["winner"]
    lines = [
        "# EAGLE-3 tuning", "",
        f"Objective: {config.objective}" + (f" (concurrency {config.concurrency})" if config.objective != "single" else "")
        + (f", weight {config.weight:g} on single stream" if config.objective == "mix" else "") + ".",
        f"Search: coordinate descent from {label_of(config.start)}; {result['candidates']} candidates measured "
        f"({result['restarts']} server restarts, the final one included) of a {result['grid_points']}-point grid "
        f"(the full grid: {result['full_grid_restarts']} restarts); "
        + ("converged." if result["converged"] else f"stopped by the budget ({config.max_candidates} candidates)."),
        "",
        ("Winner: " + label_of(tuple(winner[a] for a in AXES)) + f" ({fmt(result['best_score'], 2)} vs "
         f"{fmt(result['start_score'], 2)} at the start)." if winner else
         "No candidate beat the starting settings by more than "
         f"{config.min_gain * 100:g}%: the server keeps {label_of(config.start)}."),
    ]
    if result["speedup_vs_baseline"] is not None:
        lines.append(f"Speedup over no speculation (single stream): {result['speedup_vs_baseline']:.3f}x.")
    if result["failed"]:
        lines.append("Failed and skipped: " + ", ".join(result["failed"]) + ".")
    lines += ["", *rows]
    failures = [e for e in state.results if e["status"] != "ok"]
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
    by_topk: dict[int, list[tuple[int, int, float]]] = {}
    for e in state.candidates():
        if e["status"] == "ok" and e.get("single_tok_s"):
            s, k, n = e["point"]
            by_topk.setdefault(k, []).append((s, n, e["single_tok_s"]))
        else:
            s, k, n = e["point"]
            ax.scatter([s], [0], marker="x", color="red")
            ax.annotate(f"k{k} n{n} failed", (s, 0), fontsize=7)
    for k, values in sorted(by_topk.items()):
        values.sort()
        ax.plot([v[0] for v in values], [v[2] for v in values], marker="o", linestyle=":", label=f"topk {k}")
        for s, n, tok in values:
            ax.annotate(f"n{n}", (s, tok), fontsize=7, textcoords="offset points", xytext=(3, 3))
    base = state.entry(None)
    if base and base["status"] == "ok":
        ax.axhline(base["single_tok_s"], color="grey", linestyle="--", label="no speculation")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("speculative_num_steps")
    ax.set_ylabel("single-stream tok/s")
    ax.set_title("EAGLE-3 tuning: tok/s per candidate (n = draft tokens)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------- CLI


def plan(settings: dict[str, Any], state_path: Path, check: bool) -> dict[str, Any]:
    config = Config.from_settings(settings, require_start=not check)
    grid = config.grid()
    estimate = config.restart_minutes + config.max_candidates * config.candidate_minutes + (
        config.candidate_minutes if config.baseline else 0.0)
    out = {
        "start": as_vars(config.start), "objective": config.objective, "grid_points": len(grid),
        "rejected": [f"{label_of(p)}: {why}" for p, why in config.rejected()],
        "max_candidates": config.max_candidates, "candidate_minutes": config.candidate_minutes,
        "estimate_minutes": estimate, "full_grid_minutes": len(grid) * config.candidate_minutes,
        "budget_minutes": config.budget_minutes,
    }
    if not check:
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps({"settings": settings, "results": []}, indent=1) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_plan = sub.add_parser("plan")
    p_plan.add_argument("--state", type=Path, required=True)
    p_plan.add_argument("--check", action="store_true", help="check the settings only; write nothing")
    p_next = sub.add_parser("next")
    p_next.add_argument("--state", type=Path, required=True)
    p_rec = sub.add_parser("record")
    p_rec.add_argument("--state", type=Path, required=True)
    p_rec.add_argument("--label", required=True)
    group = p_rec.add_mutually_exclusive_group(required=True)
    group.add_argument("--result", type=Path)
    group.add_argument("--failed", help="why it failed; - reads it from stdin")
    p_rec.add_argument("--aggregate", type=Path)
    p_rep = sub.add_parser("report")
    p_rep.add_argument("--state", type=Path, required=True)
    p_rep.add_argument("--out-dir", type=Path, required=True)
    p_rep.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "plan":
            out = plan(json.load(sys.stdin), args.state, args.check)
        elif args.command == "next":
            out = State(args.state).next()
        elif args.command == "record":
            failed = sys.stdin.read() if args.failed == "-" else args.failed
            out = record(State(args.state), args.label, args.result, args.aggregate, failed)
        else:
            state = State(args.state)
            out = summary(state)
            args.out_dir.mkdir(parents=True, exist_ok=True)
            plot = None
            if not args.no_plot:
                render_plot(state, args.out_dir / "tune.png")
                plot = "tune.png"
            (args.out_dir / "winner.yml").write_text(winner_yaml(out), encoding="utf-8")
            (args.out_dir / "report.md").write_text(render(state, out, plot), encoding="utf-8")
            out["report"] = str(args.out_dir / "report.md")
            out["winner_yaml"] = winner_yaml(out)
    except TuneError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
