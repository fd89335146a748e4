"""The search: a generator that asks for measurements (Ask), is sent what they gave and decides,
replayed from the state file on every call."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from .config import Config
from .rules import (
    BEST_RUNS_FACTOR,
    CONFIRM_LOOKS,
    LOOKS,
    SEARCH_ORDER,
    Point,
    label_of,
    neighbours,
)
from .stats import Sample, _fewest, gate, objective_values, one_sided


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


def _powered(test: dict[str, Any], var_new: float, var_ref: float, level: float, n_ref: int) -> Callable[[int], bool]:
    """Whether n runs of the new sample give the test 80% power at the difference it observed."""
    def enough(n: int) -> bool:
        return gate.power(test["diff"], var_new, var_ref, n, level, n_ref=n_ref,
                          extra_var=test.get("extra_var", 0.0)) >= gate.POWER
    return enough


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
            untried = far not in visited and self.config.why_not(far) is None and far not in self.samples
            if untried and (yield from self.compare(far, self.best)):
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
            need = _fewest(len(new) + config.runs, config.max_runs,
                           _powered(self.final, statistics.variance(new), statistics.variance(ref), level, len(ref)))
            if need is None:
                break
            runs = need - len(new)
        if self.final is None:
            self.decision = "the budget left no time for the best point's fresh runs"
        elif self.winner:
            self.decision = "significantly faster than the start on fresh runs"
        else:
            self.decision = "no significant gain over the start on fresh runs"

    def run(self) -> Generator[Ask, dict, Search]:
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
