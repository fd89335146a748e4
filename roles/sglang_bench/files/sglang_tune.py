#!/usr/bin/env python3
"""EAGLE-3 tuning on the controller: the candidates, the search, the record and the report.

The play (roles/sglang_bench, tasks/tune.yml) restarts the server and measures; this tool decides
what to measure next and what the results mean. It keeps no state of its own beyond one JSON file
(the settings and every measurement so far, in order) and replays the search from it on every call,
so a call always answers the same way for the same measurements, and a rerun after an interrupted
play starts a fresh search.

A point is (speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens), with
SGLang's rules applied before anything restarts:
  - topk 1: the draft tokens are steps + 1 (SGLang replaces any other value, server_args.py);
  - topk > 1: 2 <= draft tokens <= 1 + topk + (steps - 1) * topk^2, the candidates of the draft tree
    SGLang selects the verified tokens among (more cannot be selected);
  - given the settings' `launch` (the server's launch check, release, GPU and model): no point its facts
    refuse, such as topk > 1 on an MLA model where the attention backend has no tree attention.

The search: coordinate descent from the settings the server runs. Along one parameter at a time it
tries the next value of that parameter's list and moves there when the candidate is significantly
faster than the best so far, first upwards, then downwards; passes over the three parameters repeat
until a whole pass moves nowhere or the budget ends. A topk or steps move tries the draft tokens
scaled with it (the tree keeps its width per step) and unchanged. A candidate that looked faster but
not significantly so is followed by the next point beyond it (on a smooth response the gain grows
with the distance: a step too small to resolve may resolve in two). Why this search: every
candidate costs a server restart (8-10 minutes of weight loading on the reference host) and a run
costs seconds, so restarts are what must be few; successive halving saves runs, not restarts (every
candidate of its first round is started).

The statistics are the bench gate's (files/sglang_bench_report.py: Welch's t-test on the per-run
values, its power for the runs needed). On the reference host one run's tok/s spreads by about 5%,
so two equal settings measured with 5 runs each differ by 3% (one standard deviation): a
threshold on means moves on noise.
  - A move (the search's): a one-sided Welch's t-test ("the candidate is faster") rejects at
    1 - confidence AND the observed gain is above min_gain_pct. A candidate gets `runs` runs (the
    start START_RUNS_FACTOR x as many, the best BEST_RUNS_FACTOR x when the search moves to it,
    while the server runs them: no restart). An inconclusive comparison with a gain above
    min_gain_pct gets more runs, as many as 80% power at the observed difference needs, on the
    candidate while the server runs it, on the best when the candidate alone cannot resolve it: at
    most LOOKS looks per comparison and MAX_RUNS_FACTOR x `runs` runs per point. Repeated looks: two
    equal settings make a move in at most LOOKS x (1 - confidence) of comparisons (Bonferroni over
    the looks; the unit tests measure it). A false move costs restarts, not the served settings:
  - The served settings: after the search the best point gets `runs` fresh runs (the final restart
    onto it; the runs that selected it are biased upwards and are left out), and it serves only when
    they are faster than the start's runs by the same test and gain, at (1 - confidence) /
    CONFIRM_LOOKS per look, at most CONFIRM_LOOKS looks (Bonferroni). Whatever the search did, a
    winner no faster than the start serves in at most 1 - confidence of tunings; otherwise the start's
    settings stay ("no significant gain"). The report gives the gain with its interval.
  A start of the server has its own speed, which its runs do not show (docs/validation/sglang_serve-h200:
  session means of equal settings moved by 0.8-13.7% between restarts). The served settings' test
  (the winner's fresh runs on their own start against the start's) adds it as a known variance,
  restart_cv_pct (sglang_bench_restart_cv_pct, the gate's figure) of each mean: no number of runs
  reduces it, so a gain must stand out of it. The search's moves leave it out (two of its points are
  two starts too): a move it makes on a lucky start costs restarts, never the served settings.
  The budget keeps what the end needs (a restart onto the winner, its fresh runs, a restart back to
  the start) and stops the search before a measurement that would not leave it.

Commands (JSON on stdout; a bad setting exits 2 naming its variable):
  plan   --state FILE [--check]     settings JSON on stdin; the grid, the budget, the estimate
  next   --state FILE               the next measurement ({label, runs, ...}), or null when done
  record --state FILE --label L (--result JSON [--aggregate JSON] | --failed WHY|-)
                                    a label measured before gets the new runs added to its old ones
  report --state FILE --out-dir DIR [--no-plot]   report.md, tune.png, winner.yml
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator

AXES = ("num_steps", "eagle_topk", "num_draft_tokens")
OBJECTIVES = ("single", "throughput", "mix")
# The order the search moves the parameters in: the tree's width first (topk, then how many of its
# tokens are verified), then its depth.
SEARCH_ORDER = ("eagle_topk", "num_draft_tokens", "num_steps")
VAR = "sglang_bench_tune_"
Point = tuple[int, int, int]
# Looks at one comparison of a candidate with the best (the first included; each at 1 - confidence),
# and at the winner's fresh runs against the start's (each at (1 - confidence) / CONFIRM_LOOKS).
LOOKS = 3
CONFIRM_LOOKS = 2
# The start's runs, in multiples of `runs`: every early comparison and the final one use them, and
# they cost no restart (the server runs the start already).
START_RUNS_FACTOR = 2
# Most runs one point gets, in multiples of `runs`.
MAX_RUNS_FACTOR = 5
# The runs the best so far gets, in multiples of `runs`, when the search moves to it.
BEST_RUNS_FACTOR = 3


def _gate() -> Any:
    """files/sglang_bench_report.py, the gate's statistics: shipped beside this tool (role_path/files)."""
    name = "sglang_bench_report"
    path = Path(__file__).resolve().with_name(f"{name}.py")
    module = sys.modules.get(name)
    if module is not None and Path(getattr(module, "__file__", "")).resolve() == path:
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gate = _gate()


class TuneError(Exception):
    """A bad setting (the message starts with the variable's name) or a state file out of order."""


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


class LaunchRule:
    """The server's launch check (roles/sglang_eagle3_patch/files/sglang_launch_check.py and its facts file,
    the one place SGLang's per-release rules live) asked about each point before the search may choose it:
    the settings `launch` give its path, the release, the GPU's compute capability, the GPU count, the model
    module and the server's other settings (its attention backend among them). A point the check fails
    (topk > 1 where the release's attention backend for this model has no tree attention) is no candidate;
    the server role runs the same check before every restart."""

    KEYS = ("check", "sglang_version", "arch", "gpu_count", "model", "args")

    def __init__(self, raw: dict[str, Any]) -> None:
        path = Path(str(raw["check"]))
        if not path.is_file():
            raise TuneError(f"launch: the launch check {path} does not exist")
        spec = importlib.util.spec_from_file_location("sglang_launch_check_for_tune", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.module = module
        self.facts = json.loads(path.with_name("sglang_launch_facts.json").read_text(encoding="utf-8"))
        self.version, self.arch = str(raw["sglang_version"]), str(raw["arch"])
        self.gpu_count, self.model = int(raw.get("gpu_count") or 1), raw.get("model") or None
        self.args = dict(raw.get("args") or {})
        self._seen: dict[Point, str | None] = {}

    @classmethod
    def from_settings(cls, raw: Any) -> LaunchRule | None:
        if not raw:
            return None
        if not isinstance(raw, dict) or any(raw.get(k) in (None, "") for k in ("check", "sglang_version", "arch")):
            raise TuneError(f"launch must give {', '.join(cls.KEYS)} (the server's launch check and what it needs), "
                            f"got {raw!r}")
        try:
            return cls(raw)
        except (OSError, ValueError, TypeError) as exc:
            raise TuneError(f"launch: the launch check cannot be used: {exc}") from None

    def refusal(self, point: Point) -> str | None:
        if point not in self._seen:
            steps, topk, draft = point
            args = dict(self.args, speculative_num_steps=steps, speculative_eagle_topk=topk,
                        speculative_num_draft_tokens=draft)
            report = self.module.check(self.facts, self.version, self.arch, self.gpu_count, args, self.model)
            self._seen[point] = "; ".join(
                f"{f['id']} (sglang {self.version}, compute capability {self.arch}, attention backend "
                f"{'/'.join(report['attention_backends']) or 'unknown'}): {f['fix']}" for f in report["failures"]
            ) or None
        return self._seen[point]


@dataclass
class Config:
    axes: dict[str, list[int]]
    start: Point
    objective: str
    weight: float
    concurrency: int
    min_gain: float
    confidence: float
    runs: int
    baseline: bool
    restart_minutes: float
    run_minutes: float
    budget_minutes: float
    launch: LaunchRule | None = None
    restart_cv: float = 0.0

    @classmethod
    def from_settings(cls, raw: dict[str, Any], require_start: bool = True) -> "Config":
        """Check the settings (each error names its variable).

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
        confidence = float(raw.get("confidence", 0.95))
        if not 0.0 < confidence < 1.0:
            raise TuneError(f"{VAR}confidence must lie between 0 and 1 (exclusive), such as 0.95, got {confidence}")
        runs = raw.get("runs", 20)
        if isinstance(runs, str) and runs.strip().isdigit():  # a templated integer may arrive as text
            runs = int(runs)
        if not isinstance(runs, int) or isinstance(runs, bool) or runs < 2:
            raise TuneError(f"{VAR}runs must be an integer of at least 2 (the tests need a spread), got {runs!r}")
        restart = float(raw.get("restart_minutes", 10))
        measure = float(raw.get("measure_minutes", 2))
        budget = float(raw.get("budget_minutes", 180))
        if restart <= 0 or measure <= 0:
            raise TuneError(f"{VAR}restart_minutes and {VAR}measure_minutes must be positive, got {restart} and {measure}")
        restart_cv = float(raw.get("restart_cv_pct", 0.0))
        if restart_cv < 0:
            raise TuneError(f"sglang_bench_restart_cv_pct must not be negative, got {restart_cv}")
        config = cls(axes, start, objective, weight, concurrency, min_gain / 100.0, confidence, runs,
                     bool(raw.get("baseline", False)), restart, measure / runs, budget,
                     LaunchRule.from_settings(raw.get("launch")), restart_cv / 100.0)
        if start_raw and config.launch and (why := config.launch.refusal(start)):
            raise TuneError(f"{VAR}start is not a setting this server can start with: {why}")
        if config.max_candidates() < 1:
            raise TuneError(f"{VAR}budget_minutes ({budget:g}) is too small for one candidate: one takes "
                            f"{config.candidate_minutes:g} min ({VAR}restart_minutes + {VAR}measure_minutes), plus "
                            f"{config.fixed_minutes():g} min for the start's runs, "
                            f"{'the baseline, ' if config.baseline else ''}the winner's fresh runs and two "
                            f"restarts at the end (onto the winner, back to the start when it is not confirmed)")
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

    # The time model: a restart, and a run (measure_minutes / runs, the concurrent requests of the
    # throughput and mix objectives included).
    @property
    def candidate_minutes(self) -> float:
        return self.restart_minutes + self.runs * self.run_minutes

    @property
    def start_runs(self) -> int:
        return START_RUNS_FACTOR * self.runs

    @property
    def max_runs(self) -> int:
        return MAX_RUNS_FACTOR * self.runs

    def reserve_minutes(self) -> float:
        """Kept for the end: the restart onto the winner, its fresh runs, the restart back to the start."""
        return 2 * self.restart_minutes + self.runs * self.run_minutes

    def fixed_minutes(self) -> float:
        return (self.start_runs * self.run_minutes + self.reserve_minutes()
                + (self.candidate_minutes if self.baseline else 0.0))

    def max_candidates(self) -> int:
        """Candidates the budget pays for at `runs` runs each (fewer when comparisons need more runs)."""
        return math.floor((self.budget_minutes - self.fixed_minutes()) / self.candidate_minutes + 1e-9)

    def max_measurements(self) -> int:
        """An upper bound on the measurements (`next` answers with a candidate): each costs at least
        `runs` runs, and the start's and the winner's are paid apart."""
        looks = math.floor((self.budget_minutes - self.fixed_minutes()) / (self.runs * self.run_minutes) + 1e-9)
        return 1 + (1 if self.baseline else 0) + max(0, looks) + CONFIRM_LOOKS

    def why_not(self, point: Point) -> str | None:
        """Why the point cannot serve: SGLang's rules on the three settings, then the launch facts of this
        server (its release, GPU, model and attention backend), or None."""
        return rejection(point) or (self.launch.refusal(point) if self.launch else None)

    def grid(self) -> list[Point]:
        """Every distinct point of the axes that SGLang accepts (topk 1 rows collapse to steps + 1)."""
        points = {canonical(p) for p in itertools.product(*(self.axes[a] for a in AXES))}
        return sorted(p for p in points if self.why_not(p) is None)

    def rejected(self) -> list[tuple[Point, str]]:
        points = {canonical(p) for p in itertools.product(*(self.axes[a] for a in AXES))}
        return sorted((p, why) for p in points if (why := self.why_not(p)) is not None)


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


# --------------------------------------------------------------------------- samples and tests


@dataclass
class Sample:
    """What the runs of one point gave: single-stream tok/s per run and, for the throughput and mix
    objectives, each concurrent request's tok/s times the concurrency (the aggregate rate it saw)."""

    single: list[float] = field(default_factory=list)
    concurrent: list[float] = field(default_factory=list)
    failed: str | None = None
    measurements: int = 0

    def add(self, entry: dict[str, Any]) -> None:
        self.measurements += 1
        if entry.get("status") != "ok":
            self.failed = entry.get("why") or "failed"
        self.single += entry.get("single") or []
        self.concurrent += entry.get("concurrent") or []


def objective_values(config: Config, sample: Sample | None, reference: Sample | None) -> list[float]:
    """The per-run values the tests compare. mix pairs the i-th single run with the i-th concurrent
    request, each relative to the reference's mean (the start's)."""
    if sample is None or sample.failed:
        return []
    if config.objective == "single":
        return list(sample.single)
    if config.objective == "throughput":
        return list(sample.concurrent)
    if reference is None or not reference.single or not reference.concurrent:
        return []
    ref_single, ref_conc = statistics.fmean(reference.single), statistics.fmean(reference.concurrent)
    return [config.weight * s / ref_single + (1.0 - config.weight) * c / ref_conc
            for s, c in zip(sample.single, sample.concurrent)]


def one_sided(new: list[float], ref: list[float], alpha: float, confidence: float | None = None,
              restart_cv: float = 0.0) -> dict[str, Any]:
    """Is `new` faster than `ref`? Welch's t-test (the gate's), one-sided at level alpha: p, the gain
    (new / ref - 1), its one-sided lower bound at 1 - alpha and, given a confidence, its two-sided
    interval at that confidence. restart_cv: the two samples come from two starts of the server, each
    with its own speed (the gate's known variance, sglang_bench_report.restart_var)."""
    ref_mean = statistics.fmean(ref)
    extra = gate.restart_var(restart_cv, statistics.fmean(new), ref_mean, True)
    res = gate.t_test(new, ref, ref_mean, 1.0 - 2.0 * alpha, extra)  # two-sided at 1 - 2 alpha: the one-sided bound
    p = res["p"] / 2.0 if res["diff"] > 0 else 1.0 - res["p"] / 2.0
    out = {"diff": res["diff"], "gain": res["diff"] / ref_mean, "p": p, "alpha": alpha,
           "lower_gain": res["ci"][0] / ref_mean, "n": len(new), "n_ref": len(ref), "mean": statistics.fmean(new),
           "ref_mean": ref_mean, "extra_var": extra}
    if confidence is not None:
        out["ci_gain"] = [c / ref_mean for c in gate.t_test(new, ref, ref_mean, confidence, extra)["ci"]]
    return out


def _fewest(first: int, last: int, enough: Callable[[int], bool]) -> int | None:
    """The smallest n in [first, last] with enough(n) (monotone), or None."""
    if first > last or not enough(last):
        return None
    low, high = first - 1, last
    while high - low > 1:
        mid = (low + high) // 2
        if enough(mid):
            high = mid
        else:
            low = mid
    return high


# --------------------------------------------------------------------------- the search


@dataclass
class Ask:
    """One measurement the search wants: `runs` runs of `point` (None: without speculation)."""

    point: Point | None
    runs: int
    phase: str  # start, baseline, candidate, more, confirm
    why: str
    restart: bool

    @property
    def label(self) -> str:
        return label_of(self.point)


class BudgetSpent(Exception):
    pass


UNKNOWN = ("unknown",)  # what the server runs after a failed start


class Search:
    """The search as a generator: it yields an Ask, is sent the measurement's entry (record()'s), and
    returns when done. The same measurements give the same asks (the state file is replayed)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.samples: dict[Point | None, Sample] = {}
        self.fresh = Sample()  # the winner's runs after the search
        self.server: Any = config.start
        self.used_minutes = 0.0
        self.best: Point = config.start
        self.comparisons: list[dict[str, Any]] = []
        self.stop = "not started"
        self.winner: Point | None = None
        self.final: dict[str, Any] | None = None
        self.decision = ""
        self._seen: dict[tuple, bool] = {}

    # ---- measuring
    def cost(self, point: Point | None, runs: int) -> float:
        return (self.config.restart_minutes if point != self.server else 0.0) + runs * self.config.run_minutes

    def measure(self, point: Point | None, runs: int, phase: str, why: str,
                reserve: float | None = None) -> Generator[Ask, dict, Sample]:
        config = self.config
        cost = self.cost(point, runs)
        keep = config.reserve_minutes() if reserve is None else reserve
        if phase != "start" and self.used_minutes + cost + keep > config.budget_minutes + 1e-9:
            raise BudgetSpent(f"{label_of(point)} ({why}) would take {cost:g} min of the {config.budget_minutes:g} "
                              f"min budget, {self.used_minutes:g} min spent and {keep:g} kept for the end")
        entry = yield Ask(point, runs, phase, why, point != self.server)
        self.used_minutes += cost
        self.server = point if entry.get("status") == "ok" else UNKNOWN
        sample = self.fresh if phase == "confirm" else self.samples.setdefault(point, Sample())
        sample.add(entry)
        return sample

    def values(self, point: Point | None) -> list[float]:
        return objective_values(self.config, self.samples.get(point), self.samples.get(self.config.start))

    def ok(self, point: Point | None) -> bool:
        sample = self.samples.get(point)
        return sample is not None and not sample.failed and len(self.values(point)) >= 2

    # ---- one comparison
    def more_runs(self, cand: Point, best: Point, test: dict[str, Any]) -> tuple[Point, int] | None:
        """Who gets more runs, and how many, for 80% power at the observed difference: the candidate
        while the candidate alone can do it (no restart), else the best; None when neither can
        within MAX_RUNS_FACTOR x runs runs."""
        config = self.config
        new, ref = self.values(cand), self.values(best)
        var_new, var_ref = statistics.variance(new), statistics.variance(ref)
        level = 1.0 - 2.0 * test["alpha"]  # the gate's two-sided power at 1 - 2 alpha: the one-sided test's

        def enough(n_new: int, n_ref: int) -> bool:
            return gate.power(test["diff"], var_new, var_ref, n_new, level, n_ref=n_ref) >= gate.POWER

        n_new, n_ref, cap = len(new), len(ref), config.max_runs
        need = _fewest(n_new + config.runs, cap, lambda n: enough(n, n_ref))
        if need is not None:
            return cand, need - n_new
        need = _fewest(n_ref + config.runs, cap, lambda n: enough(max(n_new, cap), n))
        if need is None:
            return None
        if n_new < cap:  # the candidate to the cap first: the server runs it
            return cand, cap - n_new
        return best, need - n_ref

    def compare(self, cand: Point, best: Point) -> Generator[Ask, dict, bool]:
        """Measure the candidate (if new) and decide whether the search moves to it."""
        config = self.config
        alpha = 1.0 - config.confidence
        record: dict[str, Any] = {"candidate": cand, "best": best, "looks": [], "result": None}
        if cand not in self.samples:
            yield from self.measure(cand, config.runs, "candidate", f"a candidate against {label_of(best)}")
            self.comparisons.append(record)
        else:
            key = (cand, best, self.samples[cand].measurements, self.samples[best].measurements)
            if key in self._seen:  # the same data: the same answer
                return self._seen[key]
            self.comparisons.append(record)
        moved = yield from self._decide(cand, best, alpha, record)
        self._seen[(cand, best, self.samples[cand].measurements, self.samples[best].measurements)] = moved
        return moved

    def _decide(self, cand: Point, best: Point, alpha: float, record: dict[str, Any]) -> Generator[Ask, dict, bool]:
        config = self.config
        while True:
            if not self.ok(cand):
                record["result"] = "failed"
                return False
            if not self.ok(best):  # the start failed: the first candidate that runs is the reference
                record["result"] = "move (the best so far failed: no test)"
                return True
            test = one_sided(self.values(cand), self.values(best), alpha)
            record["looks"].append(test)
            if test["p"] < alpha and test["gain"] > config.min_gain:
                record["result"] = "move"
                return True
            if test["gain"] <= config.min_gain:
                record["result"] = "no move: no gain above the minimum"
                return False
            if len(record["looks"]) >= LOOKS:
                record["result"] = f"no move: inconclusive after {LOOKS} looks"
                return False
            plan = self.more_runs(cand, best, test)
            if plan is None:
                record["result"] = (f"no move: inconclusive, more than {config.max_runs} runs per point would be "
                                    f"needed to resolve it")
                return False
            who, runs = plan
            try:
                yield from self.measure(who, runs, "more", f"inconclusive: {label_of(cand)} against {label_of(best)}, "
                                        f"{test['gain'] * 100:+.1f}% (p={test['p']:.3g})")
            except BudgetSpent:
                record["result"] = "no move: the budget ended the comparison"
                raise

    def stride(self, cand: Point, axis: str, direction: int, visited: set) -> Generator[Ask, dict, Point | None]:
        """A candidate that looked faster but not significantly: the next point beyond it, against the
        best. On a smooth response the gain grows with the distance, so a gain too small to resolve in
        one step may be resolved in two."""
        last = self.comparisons[-1] if self.comparisons else None
        if not last or last["candidate"] != cand or not last["looks"] or last["looks"][-1]["gain"] <= 0:
            return None
        for far in neighbours(cand, axis, direction, self.config.axes)[:1]:
            if far not in visited and self.config.why_not(far) is None and far not in self.samples and (yield from self.compare(far, self.best)):
                return far
        return None

    def top_up(self, point: Point) -> Generator[Ask, dict, None]:
        """The best so far is the reference of every comparison to come: while the server runs it, it gets
        BEST_RUNS_FACTOR x runs runs (cheap beside a restart; they also dilute the luck that selected it)."""
        values = self.values(point)
        have, target = len(values), min(self.config.max_runs, BEST_RUNS_FACTOR * self.config.runs)
        if point == self.server and have < target and statistics.variance(values) > 0:  # no spread: no need
            yield from self.measure(point, target - have, "more", "more runs of the new best: the reference of "
                                    "the comparisons to come")

    # ---- the whole search
    def coordinate(self) -> Generator[Ask, dict, None]:
        config = self.config
        visited = {self.best}
        improved = True
        while improved:
            improved = False
            for axis in SEARCH_ORDER:
                if axis == "num_draft_tokens" and self.best[1] == 1:
                    continue  # derived from the steps
                for direction in (+1, -1):
                    moved = False
                    while True:
                        chosen = None
                        for cand in neighbours(self.best, axis, direction, config.axes):
                            if cand in visited or config.why_not(cand):  # left once for a better point; refused
                                continue
                            if (yield from self.compare(cand, self.best)):
                                chosen = cand
                                break
                            chosen = yield from self.stride(cand, axis, direction, visited)
                            if chosen:
                                break
                        if chosen is None:
                            break
                        self.best = chosen
                        visited.add(chosen)
                        moved = improved = True
                        yield from self.top_up(chosen)
                    if moved:
                        break

    def confirm(self) -> Generator[Ask, dict, None]:
        """Fresh runs of the best point against the start's: the decision to serve it."""
        config, start, best = self.config, self.config.start, self.best
        if best == start:
            self.decision = "the search did not move from the start"
            return
        if not self.ok(start):
            self.winner = best
            self.decision = "the start failed: the best candidate serves without a test against it"
            return
        alpha = (1.0 - config.confidence) / CONFIRM_LOOKS
        restore = config.restart_minutes  # kept for the restart back to the start
        runs = config.runs
        for look in range(1, CONFIRM_LOOKS + 1):
            try:
                yield from self.measure(best, runs, "confirm", f"fresh runs of the best against the start "
                                        f"(look {look} of at most {CONFIRM_LOOKS})", reserve=restore)
            except BudgetSpent:
                break
            if self.fresh.failed:
                self.decision = f"{label_of(best)} failed on its fresh runs: {self.fresh.failed}"
                return
            new = objective_values(config, self.fresh, self.samples[start])
            self.final = one_sided(new, self.values(start), alpha, config.confidence, config.restart_cv)
            if self.final["p"] < alpha and self.final["gain"] > config.min_gain:
                self.winner = best
                break
            if self.final["gain"] <= config.min_gain:
                break
            ref = self.values(start)
            level = 1.0 - 2.0 * alpha
            final, var_new, var_ref = self.final, statistics.variance(new), statistics.variance(ref)
            need = _fewest(len(new) + config.runs, config.max_runs, lambda n, f=final, vn=var_new, vr=var_ref,
                           lv=level, nr=len(ref): gate.power(f["diff"], vn, vr, n, lv, n_ref=nr,
                                                              extra_var=f["extra_var"]) >= gate.POWER)
            if need is None:
                break
            runs = need - len(new)
        if self.final is None:
            self.decision = "the budget left no time for the best point's fresh runs"
        elif self.winner:
            self.decision = "significantly faster than the start on fresh runs"
        else:
            self.decision = "no significant gain over the start on fresh runs"

    def run(self) -> Generator[Ask, dict, "Search"]:
        config = self.config
        yield from self.measure(config.start, config.start_runs, "start", "the start (it serves already: no restart)")
        try:
            if config.baseline:
                yield from self.measure(None, config.runs, "baseline", "the baseline (no speculation)")
            yield from self.coordinate()
            self.stop = "converged"
        except BudgetSpent as spent:
            self.stop = f"the budget: {spent}"
        yield from self.confirm()
        return self


def drive(config: Config, answer: Callable[[Ask], dict | None]) -> tuple[Search, Ask | None]:
    """Run the search, `answer` measuring each Ask (None: not measured yet, the search waits there).
    Returns the search and the Ask it waits on (None when it is done)."""
    search = Search(config)
    steps = search.run()
    try:
        ask = next(steps)
        while (entry := answer(ask)) is not None:
            ask = steps.send(entry)
    except StopIteration:
        return search, None
    return search, ask


def serving(search: Search) -> Point:
    return search.winner or search.config.start


# --------------------------------------------------------------------------- the state file


class State:
    def __init__(self, path: Path) -> None:
        self.path = path
        data = json.loads(path.read_text(encoding="utf-8"))
        self.settings: dict[str, Any] = data["settings"]
        self.config = Config.from_settings(self.settings)
        self.measurements: list[dict[str, Any]] = data.get("measurements", [])

    def save(self) -> None:
        data = {"settings": self.settings, "measurements": self.measurements, "results": self.results()}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        tmp.replace(self.path)

    def replay(self) -> tuple[Search, Ask | None]:
        recorded = iter(self.measurements)

        def answer(ask: Ask) -> dict | None:
            entry = next(recorded, None)
            if entry is not None and entry["label"] != ask.label:
                raise TuneError(f"{self.path}: measurement {entry['label']} recorded where the search asked for "
                                f"{ask.label}: the state file is out of order (a new `plan` starts afresh)")
            return entry

        search, ask = drive(self.config, answer)
        if ask is None and next(recorded, None) is not None:
            raise TuneError(f"{self.path}: more measurements recorded than the search asked for")
        return search, ask

    def results(self) -> list[dict[str, Any]]:
        """Per label, every measurement's runs together (the report's table)."""
        out: dict[str, dict[str, Any]] = {}
        for m in self.measurements:
            e = out.setdefault(m["label"], {"point": m["point"], "label": m["label"], "status": "ok", "single": [],
                                            "concurrent": [], "measurements": 0, "accept_length": None,
                                            "aggregate_tok_s": None, "why": None})
            e["measurements"] += 1
            e["single"] += m.get("single") or []
            e["concurrent"] += m.get("concurrent") or []
            e["accept_length"] = m.get("accept_length") or e["accept_length"]
            e["aggregate_tok_s"] = m.get("aggregate_tok_s") or e["aggregate_tok_s"]
            if m["status"] != "ok":
                e.update(status="failed", why=m.get("why"))
        for e in out.values():
            runs = e["single"]
            e.update(runs=len(runs), single_tok_s=statistics.fmean(runs) if runs else None,
                     min_tok_s=min(runs) if runs else None, max_tok_s=max(runs) if runs else None)
        return list(out.values())

    def next(self) -> dict[str, Any]:
        search, ask = self.replay()
        if ask is None:
            return {"candidate": None, "why": search.decision or search.stop, "best": as_vars(search.best)}
        count = sum(1 for m in self.measurements if m["label"] == ask.label) + 1
        return {"candidate": {"baseline": ask.point is None, "label": ask.label, "runs": ask.runs,
                              "measurement": count, "file_label": ask.label if count == 1 else f"{ask.label}-m{count}",
                              "phase": ask.phase, "restart": ask.restart,
                              **(as_vars(ask.point) if ask.point else {})},
                "why": ask.why, "minutes_used": round(search.used_minutes, 2)}


def record(state: State, label: str, result: Path | None, aggregate: Path | None, failed: str | None) -> dict[str, Any]:
    _search, ask = state.replay()
    if ask is None or ask.label != label:
        raise TuneError(f"label {label!r} is not what the search asks for next "
                        f"({ask.label if ask else 'nothing: it is done'})")
    entry: dict[str, Any] = {"point": None if ask.point is None else list(ask.point), "label": label,
                             "phase": ask.phase}
    if failed is not None:
        entry.update(status="failed", why=" ".join(failed.split())[:600])
    else:
        single = json.loads(result.read_text(encoding="utf-8"))
        entry.update(status="ok" if single.get("ok") else "failed", single=gate.run_values(single),
                     accept_length=single.get("server_avg_spec_accept_length") or single.get("accept_length"),
                     why=single.get("failure"))
        if aggregate is not None:
            agg = json.loads(aggregate.read_text(encoding="utf-8"))
            scale = agg.get("concurrency") or state.config.concurrency
            entry.update(concurrent=[v * scale for v in gate.run_values(agg)], aggregate_tok_s=agg.get("aggregate_tok_s"))
            if not agg.get("ok"):
                entry.update(status="failed", why=agg.get("failure"))
    state.measurements.append(entry)
    state.save()
    return {k: v for k, v in entry.items() if k not in ("single", "concurrent")} | {
        "runs": len(entry.get("single") or [])}


# --------------------------------------------------------------------------- report


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
    serve_single = search.fresh.single if search.winner and search.fresh.single else (
        search.samples[serve].single if serve in search.samples else [])
    if base and not base.failed and base.single and serve_single:
        speedup = statistics.fmean(serve_single) / statistics.fmean(base.single)
    final = search.final
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
    rows = ["| Candidate | steps | topk | draft tokens | status | runs (measurements) | single tok/s (mean) | range |"
            " accept length | aggregate tok/s | objective (mean) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for e in state.results():
        point = e["point"] or ["-", "-", "-"]
        key = None if e["point"] is None else tuple(e["point"])
        mark = " (winner)" if e["label"] == result["serving_label"] and result["winner"] else (
            " (start)" if key == config.start else "")
        values = search.values(key) if key is not None else []
        rows.append(f"| {e['label']}{mark} | {point[0]} | {point[1]} | {point[2]} | {e['status']} | "
                    f"{e['runs']} ({e['measurements']}) | {fmt(e['single_tok_s'])} | "
                    f"{(fmt(e['min_tok_s']) + '-' + fmt(e['max_tok_s'])) if e['min_tok_s'] is not None else '-'} | "
                    f"{fmt(e['accept_length'], 2)} | {fmt(e['aggregate_tok_s'])} | "
                    f"{fmt(statistics.fmean(values), 3) if values and config.objective == 'mix' else fmt(statistics.fmean(values)) if values else '-'} |")
    moves = ["| Candidate | against | looks | gain (last look) | one-sided p | level per look | result |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in search.comparisons:
        last = c["looks"][-1] if c["looks"] else None
        moves.append(f"| {label_of(c['candidate'])} | {label_of(c['best'])} | {len(c['looks'])} | "
                     f"{(format(last['gain'] * 100, '+.1f') + '% (' + str(last['n']) + ' vs ' + str(last['n_ref']) + ' runs)') if last else '-'} | "
                     f"{fmt_p(last['p']) if last else '-'} | {fmt_p(last['alpha']).replace('p=', '') if last else '-'} | "
                     f"{c['result']} |")
    winner = result["winner"]
    final = search.final
    if winner and result["gain_pct"] is None:  # the start failed: nothing to test the winner against
        verdict = f"Winner: {result['serving_label']} ({result['decision']})."
    elif winner:
        verdict = (f"Winner: {result['serving_label']}: {result['gain_pct']:+.1f}% over the start "
                   f"({conf} CI {result['gain_ci_pct'][0]:+.1f}% to {result['gain_ci_pct'][1]:+.1f}%"
                   + (f"; Welch's t-test, one-sided {fmt_p(final['p'])}, {final['n']} fresh runs against "
                      f"{final['n_ref']})." if final else ")."))
    elif final:
        verdict = (f"No significant gain: the best point, {label_of(search.best)}, gave {result['gain_pct']:+.1f}% "
                   f"over the start on {final['n']} fresh runs ({conf} CI {result['gain_ci_pct'][0]:+.1f}% to "
                   f"{result['gain_ci_pct'][1]:+.1f}%; one-sided {fmt_p(final['p'])}, level {final['alpha']:.3g}, "
                   f"minimum gain {config.min_gain * 100:g}%): the server keeps {label_of(config.start)}.")
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
        f"Decisions: the search moves when a one-sided Welch's t-test of the candidate's per-run values against "
        f"the best's rejects at {1 - config.confidence:.3g} per look (at most {LOOKS} looks per comparison) and the "
        f"gain is above {config.min_gain * 100:g}%; the winner serves only when fresh runs of it beat the start's "
        f"runs the same way, at {(1 - config.confidence) / CONFIRM_LOOKS:.3g} per look (at most {CONFIRM_LOOKS}: "
        f"{1 - config.confidence:.3g} in all), with {config.restart_cv * 100:g}% of each mean added as the two "
        f"starts' own speed (sglang_bench_restart_cv_pct).",
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


# --------------------------------------------------------------------------- CLI


def plan(settings: dict[str, Any], state_path: Path, check: bool) -> dict[str, Any]:
    config = Config.from_settings(settings, require_start=not check)
    grid = config.grid()
    out = {
        "start": as_vars(config.start), "objective": config.objective, "grid_points": len(grid),
        "rejected": [f"{label_of(p)}: {why}" for p, why in config.rejected()],
        "max_candidates": config.max_candidates(), "max_measurements": config.max_measurements(),
        "candidate_minutes": config.candidate_minutes, "runs": config.runs, "start_runs": config.start_runs,
        "max_runs": config.max_runs, "confidence": config.confidence,
        # The search stops before the budget: at most the budget, the extra runs and the end included.
        "estimate_minutes": config.budget_minutes, "full_grid_minutes": len(grid) * config.candidate_minutes,
        "budget_minutes": config.budget_minutes,
        "launch_rule": (f"checked against the launch facts for sglang {config.launch.version} on compute capability "
                        f"{config.launch.arch} (model {config.launch.model or 'not given'})" if config.launch
                        else "not checked here (no launch settings given): the server's pre-start check refuses a "
                             "candidate SGLang cannot start, and the search records it as failed"),
    }
    if not check:
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps({"settings": settings, "measurements": [], "results": []}, indent=1) + "\n",
                              encoding="utf-8")
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
