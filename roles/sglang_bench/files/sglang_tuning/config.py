"""The tuning's settings, checked (each error names its variable), and the time model."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from .rules import (
    AXES,
    MAX_RUNS_FACTOR,
    OBJECTIVES,
    START_RUNS_FACTOR,
    VAR,
    LaunchRule,
    Point,
    TuneError,
    canonical,
    rejection,
)


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
    surface: bool = False

    @classmethod
    def from_settings(cls, raw: dict[str, Any], require_start: bool = True) -> Config:
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
            for axis, value in zip(AXES, start, strict=True):  # the start is a point of the grid
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
        config = cls(axes, start, objective, weight, concurrency, min_gain / 100.0, confidence, runs,
                     bool(raw.get("baseline", False)), restart, measure / runs, budget,
                     LaunchRule.from_settings(raw.get("launch")), bool(raw.get("surface", False)))
        if start_raw and config.launch and (why := config.launch.refusal(start)):
            raise TuneError(f"{VAR}start is not a setting this server can start with: {why}")
        if config.max_candidates() < 1:
            raise TuneError(f"{VAR}budget_minutes ({budget:g}) is too small for one candidate: one takes "
                            f"{config.candidate_minutes:g} min ({VAR}restart_minutes + {VAR}measure_minutes), plus "
                            f"{config.fixed_minutes():g} min for the start's runs, "
                            f"{'the baseline, ' if config.baseline else ''}and at least one pair of fresh starts "
                            f"of the winner and of the start at the end (two restarts, their runs) and a restart "
                            f"back to the start when the winner is not confirmed")
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
        """Kept for the end at least: one pair of fresh starts (the winner's and the start's, `runs` runs
        each) and a restart back to the start (the search keeps more when its best needs more pairs)."""
        return 3 * self.restart_minutes + 2 * self.runs * self.run_minutes

    def fixed_minutes(self) -> float:
        return (self.start_runs * self.run_minutes + self.reserve_minutes()
                + (self.candidate_minutes if self.baseline else 0.0))

    def max_candidates(self) -> int:
        """Candidates the budget pays for at `runs` runs each (fewer when comparisons need more runs or starts)."""
        return math.floor((self.budget_minutes - self.fixed_minutes()) / self.candidate_minutes + 1e-9)

    def max_measurements(self) -> int:
        """An upper bound on the measurements (`next` answers with a candidate): each costs at least
        `runs` runs, the start's paid apart."""
        runs = math.floor((self.budget_minutes - self.start_runs * self.run_minutes) / (self.runs * self.run_minutes)
                          + 1e-9)
        return 1 + max(0, runs)

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
