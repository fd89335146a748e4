"""What the runs of a point gave, and the tests that compare them (the gate's statistics:
files/sglang_bench_report.py, loaded from beside this package)."""

from __future__ import annotations

import importlib.util
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
            for s, c in zip(sample.single, sample.concurrent, strict=False)]


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
