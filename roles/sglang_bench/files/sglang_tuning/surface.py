"""A Gaussian-process surface over the grid (pure Python: the controller's Python has no numpy): what every
start measured so far says of every point, measured or not, and where one more start is worth most.

The coordinate search decides between two neighbours at a time, and on a host whose starts differ by ~5%
neighbours 1-3% apart are never resolved: it stops at the start with the budget mostly unspent. The surface
pools every start: a point's estimate borrows from its neighbours' starts in proportion to their correlation,
so a smooth rise is seen from many starts that no pairwise test could use.

The points live in (num_steps, log2 eagle_topk, log2 num_draft_tokens), one unit per doubling of the tree's
width or its verified tokens and per draft step. Each measured point is one observation: the mean of its
starts' means relative to the start's (y = mean / start - 1), with the variance its starts give it (the
host's start-to-start spread, measured (restart_spread), plus its runs' spread, over its starts). The
kernel is squared-exponential; its length scale and signal spread are chosen by the marginal likelihood
among a few values (a handful of Cholesky factorisations of at most a few dozen points), the prior mean is
the observations' mean (an unmeasured region is assumed as fast as the measured ones on average, not as
the start).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Point = tuple[int, int, int]

LENGTHS = (1.0, 1.75, 3.0)  # kernel length scales, in units of the coordinates
SIGNALS = (0.02, 0.06, 0.15, 0.4)  # prior spread of the response, relative to the start


def coords(point: Point) -> tuple[float, float, float]:
    steps, topk, draft = point
    return float(steps), math.log2(topk), math.log2(draft)


def _kernel(a: Sequence[float], b: Sequence[float], length: float, signal: float) -> float:
    d2 = sum((x - y) ** 2 for x, y in zip(a, b, strict=True))
    return signal * signal * math.exp(-0.5 * d2 / (length * length))


def _cholesky(m: list[list[float]]) -> list[list[float]] | None:
    n = len(m)
    low = [[0.0] * n for _ in range(n)]
    for i in range(n):
        row_i = low[i]
        for j in range(i + 1):
            row_j = low[j]
            s = m[i][j] - sum(row_i[k] * row_j[k] for k in range(j))
            if i == j:
                if s <= 0.0:
                    return None
                row_i[i] = math.sqrt(s)
            else:
                row_i[j] = s / row_j[j]
    return low


def _solve_lower(low: list[list[float]], b: Sequence[float]) -> list[float]:
    out: list[float] = []
    for i, row in enumerate(low):
        out.append((b[i] - sum(row[k] * out[k] for k in range(i))) / row[i])
    return out


def _solve_upper_t(low: list[list[float]], b: Sequence[float]) -> list[float]:
    """Solve L^T x = b."""
    n = len(low)
    out = [0.0] * n
    for i in range(n - 1, -1, -1):
        out[i] = (b[i] - sum(low[k][i] * out[k] for k in range(i + 1, n))) / low[i][i]
    return out


@dataclass
class Surface:
    """The posterior of the response given the observations (point, y, its variance)."""

    points: list[Point]
    xs: list[tuple[float, float, float]]
    low: list[list[float]]
    alpha: list[float]
    prior: float
    length: float
    signal: float

    @classmethod
    def fit(cls, observations: Iterable[tuple[Point, float, float]]) -> Surface | None:
        obs = list(observations)
        if len(obs) < 2:
            return None
        points = [p for p, _y, _v in obs]
        xs = [coords(p) for p in points]
        ys = [y for _p, y, _v in obs]
        noise = [max(v, 1e-8) for _p, _y, v in obs]
        prior = sum(y / v for y, v in zip(ys, noise, strict=True)) / sum(1.0 / v for v in noise)
        resid = [y - prior for y in ys]
        best: tuple[float, Surface] | None = None
        for length in LENGTHS:
            for signal in SIGNALS:
                k = [[_kernel(a, b, length, signal) + (noise[i] if i == j else 0.0) for j, b in enumerate(xs)]
                     for i, a in enumerate(xs)]
                low = _cholesky(k)
                if low is None:
                    continue
                w = _solve_lower(low, resid)
                alpha = _solve_upper_t(low, w)
                loglik = -0.5 * sum(x * x for x in w) - sum(math.log(low[i][i]) for i in range(len(xs)))
                if best is None or loglik > best[0]:
                    best = (loglik, cls(points, xs, low, alpha, prior, length, signal))
        return best[1] if best else None

    def predict(self, point: Point) -> tuple[float, float]:
        """The posterior mean and standard deviation of the response (noise-free) at a point."""
        x = coords(point)
        ks = [_kernel(x, b, self.length, self.signal) for b in self.xs]
        mean = self.prior + sum(k * a for k, a in zip(ks, self.alpha, strict=True))
        v = _solve_lower(self.low, ks)
        var = self.signal * self.signal - sum(t * t for t in v)
        return mean, math.sqrt(max(var, 0.0))


def expected_improvement(mean: float, sd: float, incumbent: float) -> float:
    """E[max(f - incumbent, 0)] for f ~ N(mean, sd^2)."""
    if sd <= 0.0:
        return max(mean - incumbent, 0.0)
    z = (mean - incumbent) / sd
    cdf = 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
    pdf = math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return (mean - incumbent) * cdf + sd * pdf
