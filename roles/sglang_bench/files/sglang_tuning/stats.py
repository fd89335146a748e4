"""What the runs of a point gave, and the tests that compare them (the gate's statistics:
files/sglang_bench_report.py, loaded from beside this package)."""

from __future__ import annotations

import importlib.util
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import Config


def _gate() -> Any:
    """files/sglang_bench_report.py, the gate's statistics: shipped beside this package (role_path/files)."""
    name = "sglang_bench_report"
    path = Path(__file__).resolve().parent.parent / f"{name}.py"
    module = sys.modules.get(name)
    if module is not None and Path(getattr(module, "__file__", "")).resolve() == path:
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gate = _gate()


@dataclass
class Start:
    """The runs of one start of the server on one point (a session: what the server ran between two restarts):
    single-stream tok/s per run and, for the throughput and mix objectives, each concurrent request's tok/s
    times the concurrency (the aggregate rate it saw)."""

    single: list[float] = field(default_factory=list)
    concurrent: list[float] = field(default_factory=list)
    failed: str | None = None
    phase: str = "search"  # or confirm: the fresh starts that decide what serves

    def add(self, entry: dict[str, Any]) -> None:
        if entry.get("status") != "ok":
            self.failed = entry.get("why") or "failed"
        self.single += entry.get("single") or []
        self.concurrent += entry.get("concurrent") or []


@dataclass
class Sample:
    """Everything measured of one point: its starts, in order (the search's and the confirmation's)."""

    starts: list[Start] = field(default_factory=list)
    measurements: int = 0

    @property
    def failed(self) -> str | None:
        return next((s.failed for s in self.starts if s.failed), None)

    @property
    def single(self) -> list[float]:
        return [x for s in self.starts for x in s.single]

    @property
    def concurrent(self) -> list[float]:
        return [x for s in self.starts for x in s.concurrent]

    def of(self, phase: str) -> list[Start]:
        return [s for s in self.starts if s.phase == phase]


def objective_values(config: Config, start: Start | Sample | None, reference: Sample | None) -> list[float]:
    """The per-run values the tests compare, of one start (or all of a point's). mix pairs the i-th single
    run with the i-th concurrent request, each relative to the reference's mean (the start's)."""
    if start is None or start.failed:
        return []
    if config.objective == "single":
        return list(start.single)
    if config.objective == "throughput":
        return list(start.concurrent)
    if reference is None or not reference.single or not reference.concurrent:
        return []
    ref_single, ref_conc = statistics.fmean(reference.single), statistics.fmean(reference.concurrent)
    return [config.weight * s / ref_single + (1.0 - config.weight) * c / ref_conc
            for s, c in zip(start.single, start.concurrent, strict=False)]


def one_sided(new: list[list[float]], ref: list[list[float]], alpha: float, spread: dict[str, Any] | None,
              confidence: float | None = None) -> dict[str, Any]:
    """Is the point measured on the starts `new` faster than the one on `ref`? The gate's test over starts
    (sglang_bench_report.starts_test: each point's mean is the mean of its starts' means, each start's
    mean spread by its runs and by the host's start-to-start spread), one-sided at level alpha: p, the
    gain (new / ref - 1), its one-sided lower bound at 1 - alpha and, given a confidence, its two-sided
    interval. spread: the start-to-start spread measured so far (restart_spread: cv, df); None: none yet
    (a start adds nothing beyond its runs, which only the first comparison's repeated start tells)."""
    cv, df = (spread["cv"], spread["df"]) if spread else (0.0, math.inf)
    ref_mean = gate.starts_mean(ref)
    res = gate.starts_test(new, ref, ref_mean, 1.0 - 2.0 * alpha, cv, df)  # two-sided at 1 - 2 alpha: the bound
    p = res["p"] / 2.0 if res["diff"] > 0 else 1.0 - res["p"] / 2.0
    out = {"diff": res["diff"], "gain": res["diff"] / ref_mean, "p": p, "alpha": alpha,
           "lower_gain": res["ci"][0] / ref_mean, "n": sum(map(len, new)), "n_ref": sum(map(len, ref)),
           "starts": len(new), "starts_ref": len(ref), "mean": gate.starts_mean(new), "ref_mean": ref_mean,
           "se": res["se"], "df": res["df"] if res["df"] is not None else math.inf, "cv": cv,
           "cv_df": df if math.isfinite(df) else None}
    if confidence is not None:
        out["ci_gain"] = [c / ref_mean for c in gate.starts_test(new, ref, ref_mean, confidence, cv, df)["ci"]]
    return out


def power_one_sided(diff: float, se: float, df: float, alpha: float) -> float:
    """Power of the one-sided test at level alpha to find a true difference `diff` (> 0) given the standard
    error and degrees of freedom it would have."""
    if diff <= 0:
        return 0.0
    if se <= 0:
        return 1.0
    return gate.power_at(diff / se, max(df, 1.0), 1.0 - alpha, sides=1)


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
