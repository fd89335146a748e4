"""The search: a generator that asks for measurements (Ask), is sent what they gave and decides,
replayed from the state file on every call.

The unit of evidence is a start of the server (a session): every run of one start shares that start's
speed, which its runs do not show, so two points are compared over their starts (the mean of each start's
mean), with the host's start-to-start spread measured from the points measured on two starts or more
(restart_spread: pooled, with its degrees of freedom) and nowhere assumed. Role sglang_server restarts
only when the settings change, so a point gets a new start only when the server ran another one in
between: the starts of two points are interleaved (A/B/A/B).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from .config import Config
from .rules import (
    BEST_RUNS_FACTOR,
    CONFIRM_INTERIM,
    CONFIRM_LEVEL,
    CONFIRM_LOOKS,
    CONFIRM_MAX_PAIRS,
    LOOKS,
    MAX_STARTS,
    SEARCH_ORDER,
    SURFACE_CONFIRM_MAX_PAIRS,
    Point,
    label_of,
    neighbours,
)
from .stats import Sample, Start, gate, objective_values, one_sided, power_one_sided
from .surface import Surface, expected_improvement


@dataclass
class Ask:
    """One measurement the search wants: `runs` runs of `point` (None: without speculation)."""

    point: Point | None
    runs: int
    phase: str  # start, baseline, candidate, repeat, more, confirm
    why: str
    restart: bool

    @property
    def label(self) -> str:
        return label_of(self.point)


class BudgetSpent(Exception):
    pass


UNKNOWN = ("unknown",)  # what the server runs after a failed start
POWER = gate.POWER
# A comparison gets more starts only while they can still resolve the observed difference with at least
# this power (at MAX_STARTS starts of each point): restarts are spent where they decide something.
HOPE = 0.5
# The surface's search stops when no point's expected improvement over the best estimate reaches this share of
# the minimum gain; the start-to-start spread it assumes is never below CV_FLOOR (a noise-free host).
EI_STOP = 0.1
CV_FLOOR = 0.001
_SURFACES: dict[tuple, tuple[Point, float, Point | None, float]] = {}


class Search:
    """The search as a generator: it yields an Ask, is sent the measurement's entry (record()'s), and
    returns when done. The same measurements give the same asks (the state file is replayed)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.samples: dict[Point | None, Sample] = {}
        self.server: Any = config.start
        self.used_minutes = 0.0
        self.best: Point = config.start
        self.comparisons: list[dict[str, Any]] = []
        self.stop = "not started"
        self.winner: Point | None = None
        self.final: dict[str, Any] | None = None
        self.decision = ""
        self.confirm_pairs = 0
        self._seen: dict[tuple, bool] = {}
        self._spread: tuple[int, dict[str, Any] | None] | None = None

    # ---- measuring
    def cost(self, point: Point | None, runs: int) -> float:
        return (self.config.restart_minutes if point != self.server else 0.0) + runs * self.config.run_minutes

    @property
    def max_pairs(self) -> int:
        """Most pairs of fresh starts the confirmation may take."""
        return SURFACE_CONFIRM_MAX_PAIRS if self.config.surface else CONFIRM_MAX_PAIRS

    def reserve(self) -> float:
        """Kept for the end: one pair of fresh starts for the confirmation (it spends whatever else is left)
        and the restart back to the start when it does not confirm (Config.reserve_minutes)."""
        return self.config.reserve_minutes()

    def measure(self, point: Point | None, runs: int, phase: str, why: str,
                reserve: float | None = None) -> Generator[Ask, dict, Sample]:
        config = self.config
        cost = self.cost(point, runs)
        keep = self.reserve() if reserve is None else reserve
        if phase != "start" and self.used_minutes + cost + keep > config.budget_minutes + 1e-9:
            raise BudgetSpent(f"{label_of(point)} ({why}) would take {cost:g} min of the {config.budget_minutes:g} "
                              f"min budget, {self.used_minutes:g} min spent and {keep:g} kept for the end")
        restart = point != self.server
        entry = yield Ask(point, runs, phase, why, restart)
        self.used_minutes += cost
        sample = self.samples.setdefault(point, Sample())
        sample.measurements += 1
        if restart or not sample.starts:
            sample.starts.append(Start(phase="confirm" if phase == "confirm" else "search"))
        sample.starts[-1].add(entry)
        self.server = point if entry.get("status") == "ok" else UNKNOWN
        return sample

    def values(self, point: Point | None) -> list[float]:
        """Every run's objective value of a point (all its starts): the report's table."""
        return objective_values(self.config, self.samples.get(point), self.samples.get(self.config.start))

    def starts(self, point: Point | None, phase: str | None = None) -> list[list[float]]:
        """The objective values of each start of a point (of one phase), the starts with two runs or more."""
        sample = self.samples.get(point)
        if sample is None or sample.failed:
            return []
        ref = self.samples.get(self.config.start)
        out = [objective_values(self.config, s, ref) for s in sample.starts if phase is None or s.phase == phase]
        return [v for v in out if len(v) >= 2]

    def ok(self, point: Point | None) -> bool:
        return bool(self.starts(point))

    def spread(self) -> dict[str, Any] | None:
        """The host's start-to-start spread, measured from every point measured on two starts or more."""
        count = sum(s.measurements for s in self.samples.values())
        if self._spread is None or self._spread[0] != count:
            self._spread = (count, gate.restart_spread([self.starts(p) for p in self.samples]))
        return self._spread[1]

    # ---- planning: what the next runs or starts would give
    def _power_after(self, cand: Point, best: Point, test: dict[str, Any], spread: dict[str, Any],
                     alpha: float, add: dict[Point, tuple[int, int]]) -> float:
        """The one-sided test's power at the observed difference after adding, per point, (starts, runs on
        its current start): each new start as spread as that point's starts so far."""
        var, parts, restarts = 0.0, 0.0, 0.0
        cv, df = spread["cv"], spread["df"]
        for point in (cand, best):
            starts = self.starts(point)
            new_starts, more_runs = add.get(point, (0, 0))
            k = len(starts) + new_starts
            per_run = statistics.fmean(gate.fvar(v) for v in starts)
            terms = [(per_run / (len(v) + (more_runs if i == len(starts) - 1 else 0)), len(v) - 1)
                     for i, v in enumerate(starts)] + [(per_run / self.config.runs, self.config.runs - 1)] * new_starts
            for w, dof in terms:
                var += w / k ** 2
                parts += (w / k ** 2) ** 2 / max(dof, 1)
            mean = statistics.fmean(statistics.fmean(v) for v in starts)
            restarts += (cv * mean) ** 2 / k
            df += new_starts  # a start of a point measured before adds a degree of freedom to the spread
        var += restarts
        parts += restarts ** 2 / df if restarts else 0.0
        return power_one_sided(test["diff"], math.sqrt(var), var ** 2 / parts if parts else 1e9, alpha)

    def more(self, cand: Point, best: Point, test: dict[str, Any], spread: dict[str, Any],
             alpha: float) -> tuple[Point, int] | None:
        """What the comparison measures next, or None when nothing within MAX_STARTS starts and
        MAX_RUNS_FACTOR x runs runs per start would resolve it (HOPE): more runs on the start the server
        runs (no restart) when that reaches the power alone or pays more per minute, else a start of the
        other point (a restart: the starts interleave)."""
        config = self.config
        runs = config.runs
        now = self._power_after(cand, best, test, spread, alpha, {})
        cap = {p: (max(0, MAX_STARTS - len(self.starts(p))), 0) for p in (cand, best)}
        if self._power_after(cand, best, test, spread, alpha, cap) < HOPE:
            return None
        options: list[tuple[float, Point, int]] = []
        running = self.server if self.server in (cand, best) else None
        if running is not None and len(self.samples[running].starts[-1].single) + runs <= config.max_runs:
            gain = self._power_after(cand, best, test, spread, alpha, {running: (0, runs)})
            if gain >= POWER:
                return running, runs
            options.append(((gain - now) / (runs * config.run_minutes), running, runs))
        other = [p for p in (cand, best) if p != running and len(self.starts(p)) < MAX_STARTS]
        other.sort(key=lambda p: len(self.starts(p)))
        if other:
            gain = self._power_after(cand, best, test, spread, alpha, {other[0]: (1, 0)})
            options.append(((gain - now) / (config.restart_minutes + runs * config.run_minutes), other[0], runs))
        options = [o for o in options if o[0] > 0]
        if not options:
            return None
        _rate, who, n = max(options, key=lambda o: o[0])
        return who, n

    def planned_pairs(self, best: Point) -> int:
        """Pairs of fresh starts (the best's and the start's, interleaved) the confirmation plans for: 80%
        power at the gain the search saw (at a look's level: an interim one with the surface), each start as
        spread as the host's so far; at least 1, at most self.max_pairs."""
        config, start = self.config, self.config.start
        if best == start or not self.ok(best) or not self.ok(start):
            return 1
        spread = self.spread()
        mine, ref = self.starts(best), self.starts(start)
        gain = gate.starts_mean(mine) / gate.starts_mean(ref) - 1.0
        if gain <= config.min_gain:
            return 1
        cv, df = (spread["cv"], spread["df"]) if spread else (0.0, 0)
        per_run = statistics.fmean(gate.fvar(v) for v in mine + ref) / gate.starts_mean(ref) ** 2
        per_start = cv ** 2 + per_run / config.runs
        alpha = ((1.0 - config.confidence) * CONFIRM_LEVEL * CONFIRM_INTERIM if config.surface
                 else (1.0 - config.confidence) / CONFIRM_LOOKS)
        for k in range(1, self.max_pairs + 1):
            se = math.sqrt(2 * per_start / k)
            dof = df + 2 * (k - 1) if cv else 2 * k * (config.runs - 1)
            if power_one_sided(gain, se, max(dof, 1), alpha) >= POWER:
                return k
        return self.max_pairs

    # ---- one comparison
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
            spread = self.spread()
            if spread is None:  # no point measured on two starts: the host's spread between starts is unknown
                again = best if self.server != best else cand
                try:
                    yield from self.measure(again, config.runs, "repeat", f"a second start of {label_of(again)}: "
                                            "the host's spread between starts, which no comparison can do without")
                except BudgetSpent:
                    record["result"] = "no move: the budget ended the comparison"
                    raise
                continue
            test = one_sided(self.starts(cand), self.starts(best), alpha, spread)
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
            plan = self.more(cand, best, test, spread, alpha)
            if plan is None:
                record["result"] = (f"no move: inconclusive, and {MAX_STARTS} starts of each would not resolve "
                                    f"it (the spread between starts: {spread['cv'] * 100:.1f}%)")
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
        BEST_RUNS_FACTOR x runs runs when its runs, not the spread between starts, are what limits it
        (cheap beside a restart; they also dilute the luck that selected it)."""
        starts, spread = self.starts(point), self.spread()
        if point != self.server or not starts or spread is None:
            return
        last, mean = starts[-1], gate.starts_mean(starts)
        have, target = len(last), min(self.config.max_runs, BEST_RUNS_FACTOR * self.config.runs)
        runs_var = gate.fvar(last) / len(last)
        if target - have >= self.config.runs and runs_var > (spread["cv"] * mean) ** 2:
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

    # ---- the surface: every start pooled
    def observations(self) -> list[tuple[Point, float, float]]:
        """Each measured point's mean over its starts relative to the start's, with its variance (the host's
        start-to-start spread, floored at CV_FLOOR, and its runs' spread, over its starts)."""
        ref = self.starts(self.config.start)
        if not ref:
            return []
        ref_mean = gate.starts_mean(ref)
        spread = self.spread()
        cv = max(spread["cv"] if spread else 0.0, CV_FLOOR)
        out = []
        for point in self.samples:
            starts = self.starts(point)
            if point is None or not starts:
                continue
            runs = statistics.fmean(gate.fvar(v) / len(v) for v in starts) / ref_mean ** 2
            out.append((point, gate.starts_mean(starts) / ref_mean - 1.0, (cv * cv + runs) / len(starts)))
        return out

    def start_variance(self) -> float:
        """The variance of one more start's mean relative to the start's: the host's spread between starts
        (floored at CV_FLOOR) and its runs' spread over `runs` runs."""
        ref = self.starts(self.config.start)
        spread = self.spread()
        cv = max(spread["cv"] if spread else 0.0, CV_FLOOR)
        runs = [gate.fvar(v) for p in self.samples if p is not None for v in self.starts(p)]
        if not ref or not runs:
            return cv * cv
        return cv * cv + statistics.fmean(runs) / self.config.runs / gate.starts_mean(ref) ** 2

    def surface_step(self) -> tuple[Point, float, Point | None, float]:
        """The surface's verdict on what is measured so far: its best measured point and that point's estimated
        gain over the start, the point one more start is worth most at (its knowledge gradient: what it is
        expected to add to the best measured point's estimate) and the largest expected improvement over that
        best anywhere (the stop: EI_STOP)."""
        obs = self.observations()
        key = (tuple((p, round(y, 12), round(v, 15)) for p, y, v in obs), self.server, self.config.min_gain)
        if key in _SURFACES:
            return _SURFACES[key]
        surface = Surface.fit(obs)
        start = self.config.start
        if surface is None:
            return start, 0.0, None, 0.0
        candidates = []
        for point in self.config.grid():
            sample = self.samples.get(point)
            if point == self.server or (sample is not None and sample.failed):
                continue
            candidates.append(point)
        posteriors = {p: surface.posterior(p) for p in [*candidates, *(p for p, _y, _v in obs)]}
        means = {p: posteriors[p][0] for p, _y, _v in obs}
        best = max(means, key=lambda p: (means[p], p == start))
        pick, gain = None, 0.0
        for point in candidates:
            mean, var, _v = posteriors[point]
            ei = expected_improvement(mean, math.sqrt(max(var, 0.0)), means[best])
            if ei > gain:
                pick, gain = point, ei
        if pick is not None and gain >= EI_STOP * self.config.min_gain:  # where one start is worth most to what
            # serves (expected improvement over-samples the best: its posterior spread keeps its EI up however often
            # it was measured)
            pick = max(surface.knowledge_gradient(posteriors, candidates, self.start_variance()))[1]
        found = (best, means[best] - means.get(start, 0.0), pick, gain)
        if len(_SURFACES) > 20000:
            _SURFACES.clear()
        _SURFACES[key] = found
        return found

    def surface(self) -> Generator[Ask, dict, None]:
        """Measure, one start at a time, where one start is worth most to the best estimate (the knowledge
        gradient), until no point's expected improvement over the best estimate reaches EI_STOP x the minimum gain
        or the budget keeps only the confirmation of the best; then the best estimate is the best (the start where
        the surface sees no gain above the minimum)."""
        config = self.config
        while True:
            best, gain, pick, ei = self.surface_step()
            if pick is None or ei < EI_STOP * config.min_gain:
                break
            pairs = self.max_pairs if gain > config.min_gain else 1  # the surface's best gain is biased upwards
            keep = max(self.reserve(), (2 * pairs + 1) * config.restart_minutes + 2 * pairs * config.runs * config.run_minutes)
            try:
                yield from self.measure(pick, config.runs, "surface", f"the surface's most promising point (expected "
                                        f"improvement {ei * 100:.2f}% over {label_of(best)})", reserve=keep)
            except BudgetSpent:
                break
        best, gain, _pick, _ei = self.surface_step()
        self.best = best if gain > config.min_gain else config.start

    def confirm(self) -> Generator[Ask, dict, None]:
        """Fresh starts of the best point and of the start, interleaved (B/A/B/A: the runs and the starts
        that selected the best are biased upwards, and the start's are the reference those selections were
        made against), tested against each other: the decision to serve the best."""
        config, start, best = self.config, self.config.start, self.best
        if best == start:
            self.decision = "the search did not move from the start"
            return
        if not self.ok(start):
            self.winner = best
            self.decision = "the start failed: the best candidate serves without a test against it"
            return
        # With the surface, whose confirmation is reserved in full: looks at fixed pair counts (1, the planned, the
        # most), never at a count the data chose, the level spent across them (a union bound); it stops early only
        # when the fresh starts prove the gain or rule out one above the minimum (the gain's upper bound at the
        # tuning's confidence below it). The coordinate search, whose budget may cut the pairs short: each look at a
        # third of the level, the pairs extended to what the gain seen needs.
        spending = config.surface
        level = (1.0 - config.confidence) * (CONFIRM_LEVEL if spending else 1.0)
        plan = self.planned_pairs(best)
        order = [start, best] if self.server == best else [best, start]  # every fresh measurement a restart
        looks_at, pairs, looks, stopped, spent = {1, plan} | ({self.max_pairs} if spending else set()), 0, 0, "", 0.0
        while looks < CONFIRM_LOOKS and not stopped:
            for point in order:
                try:
                    yield from self.measure(point, config.runs, "confirm", f"fresh starts of the best and of the start, "
                                            f"interleaved (pair {pairs + 1}, {plan} planned)",
                                            reserve=config.restart_minutes)
                except BudgetSpent:
                    stopped = "the budget"
                    break
                if self.samples[point].failed:
                    self.decision = f"{label_of(point)} failed on its fresh start: {self.samples[point].failed}"
                    return
            else:
                pairs += 1
            mine, ref = self.starts(best, "confirm"), self.starts(start, "confirm")
            if not mine or not ref or (pairs not in looks_at and not stopped):
                continue
            looks += 1
            self.confirm_pairs = pairs
            alpha = self.look_level(level, spent, looks, pairs, bool(stopped))
            spent += alpha
            self.final = one_sided(mine, ref, alpha, self.spread(), config.confidence)
            self.final["looks"] = looks
            if self.final["p"] < alpha and self.final["gain"] > config.min_gain:
                self.winner = best
                break
            if spending:
                if pairs >= self.max_pairs or self.final["ci_gain"][1] <= config.min_gain:
                    break  # futility only where the fresh starts rule out a gain worth serving (adds no false winner)
                continue
            if pairs < plan:
                continue
            if pairs >= self.max_pairs or self.final["gain"] <= config.min_gain:
                break
            # once more, at the pairs 80% power at the gain seen needs
            looks_at.add(min(self.max_pairs, pairs + max(1, self.planned_extra(mine, ref, level / CONFIRM_LOOKS))))
        if self.final is None:
            self.decision = "the budget left no time for fresh starts of the best point and of the start"
        elif self.winner:
            self.decision = "significantly faster than the start on fresh starts of both"
        else:
            self.decision = "no significant gain over the start on fresh starts of both"

    def planned_extra(self, mine: list[list[float]], ref: list[list[float]], alpha: float) -> int:
        """Pairs beyond those measured for 80% power at the gain the confirmation saw."""
        spread = self.spread()
        cv, df = (spread["cv"], spread["df"]) if spread else (0.0, 0)
        gain = gate.starts_mean(mine) / gate.starts_mean(ref) - 1.0
        per_run = statistics.fmean(gate.fvar(v) for v in mine + ref) / gate.starts_mean(ref) ** 2
        per_start = cv ** 2 + per_run / self.config.runs
        for k in range(len(mine) + 1, self.max_pairs + 1):
            if power_one_sided(gain, math.sqrt(2 * per_start / k), max(df + 2 * (k - len(mine)), 1), alpha) >= POWER:
                return k - len(mine)
        return self.max_pairs - len(mine)

    def look_level(self, level: float, spent: float, looks: int, pairs: int, stopped: bool) -> float:
        """The level of this look: with the surface, CONFIRM_INTERIM x the level at a look another may follow and what
        is left at the last; else a third of the level at each."""
        if not self.config.surface:
            return level / CONFIRM_LOOKS
        last = looks == CONFIRM_LOOKS or pairs >= self.max_pairs or stopped
        return level - spent if last else min(level * CONFIRM_INTERIM, level - spent)

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
        if config.surface:
            yield from self.surface()
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
