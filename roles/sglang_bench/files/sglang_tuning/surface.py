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

Where the next start goes: the knowledge gradient (what one more start there is expected to add to the best
measured point's estimate, the point that would serve), not the expected improvement over that best. On a
host whose starts differ by 5%, expected improvement kept re-measuring the best so far (its posterior spread
keeps its own EI up however often it is measured: 17-30 starts of one point on the slope, the optimum's
region never measured): the surface's best was within 2% of a 10% interior optimum in 31 of 40 development
tunings; with the knowledge gradient in 88 of 100, and with length scales up to 5 besides in 92 of those 100.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

Point = tuple[int, int, int]

# Kernel length scales, in units of the coordinates: up to 5, about the grid's extent in steps (1-8) and over
# the whole of log2 topk (0-3) and log2 draft tokens (1-5), for one broad optimum across the grid.
LENGTHS = (1.0, 1.75, 3.0, 5.0)
SIGNALS = (0.02, 0.06, 0.15, 0.4)  # prior spread of the response, relative to the start
# The kernel, k(a, b) = signal * signal * math.exp(-0.5 * (math.dist(a, b) / length) ** 2), is written out where
# it is computed (most of a tuning's time), not called: in Surface.fit, its exponential once per length for every
# signal, and in Surface.kernel_row, once per point for its posterior and its knowledge gradient.


def coords(point: Point) -> tuple[float, float, float]:
    steps, topk, draft = point
    return float(steps), math.log2(topk), math.log2(draft)


def _cholesky(shape: list[list[float]], s2: float, noise: list[float]) -> list[list[float]] | None:
    """The Cholesky factor of the kernel matrix s2 * shape + diag(noise), its entries formed where they are read."""
    n = len(shape)
    low: list[list[float]] = []
    for i in range(n):
        row_i: list[float] = []  # grows to its first j entries: map() below stops there, with no copy of a slice
        shape_i = shape[i]
        for j in range(i):
            row_j = low[j]
            row_i.append((s2 * shape_i[j] - sum(map(operator.mul, row_i, row_j))) / row_j[j])  # the products in order
        s = s2 * shape_i[i] + noise[i] - sum(map(operator.mul, row_i, row_i))
        if s <= 0.0:
            return None
        row_i.append(math.sqrt(s))
        row_i.extend([0.0] * (n - i - 1))
        low.append(row_i)
    return low


def _solve_lower(low: list[list[float]], b: Sequence[float]) -> list[float]:
    out: list[float] = []
    for i, row in enumerate(low):
        out.append((b[i] - sum(map(operator.mul, row, out))) / row[i])  # map stops at out's i entries
    return out


def _solve_upper_t(low: list[list[float]], b: Sequence[float]) -> list[float]:
    """Solve L^T x = b."""
    n = len(low)
    out = [0.0] * n
    columns = list(zip(*low, strict=True))  # columns[i][k] = low[k][i] (the rows are padded to n)
    for i in range(n - 1, -1, -1):
        out[i] = (b[i] - sum(map(operator.mul, columns[i][i + 1:], out[i + 1:]))) / low[i][i]  # k = i+1 .. n-1, in order
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
    # posterior()'s k(X, point) of each point asked: knowledge_gradient's covariances start from the same kernel values.
    _kernel_rows: dict[Point, list[float]] = field(default_factory=dict, repr=False, compare=False)

    def kernel_row(self, point: Point) -> list[float]:
        """k(X, point): the kernel between every observed point and this one."""
        row = self._kernel_rows.get(point)
        if row is None:
            x = coords(point)
            s2, length = self.signal * self.signal, self.length
            row = self._kernel_rows[point] = [s2 * math.exp(-0.5 * (math.dist(x, b) / length) ** 2) for b in self.xs]
        return row

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
        # The distances once for every length and signal.
        dists = [[math.dist(a, b) for b in xs] for a in xs]
        for length in LENGTHS:
            # The kernel's shape once for every signal: _cholesky forms k = signal * signal * shape + diag(noise).
            shapes = [[math.exp(-0.5 * (d / length) ** 2) for d in row] for row in dists]
            for signal in SIGNALS:
                low = _cholesky(shapes, signal * signal, noise)
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
        mean, var, _v = self.posterior(point)
        return mean, math.sqrt(max(var, 0.0))

    def posterior(self, point: Point) -> tuple[float, float, list[float]]:
        """The posterior mean and variance at a point, and L^-1 k(X, point) (its covariance with any other point
        is the kernel's less the dot product of theirs)."""
        ks = self.kernel_row(point)
        mean = self.prior + sum(map(operator.mul, ks, self.alpha))
        v = _solve_lower(self.low, ks)
        return mean, self.signal * self.signal - sum(map(operator.mul, v, v)), v

    def knowledge_gradient(self, posteriors: dict[Point, tuple[float, float, list[float]]], candidates: Iterable[Point],
                           noise: float) -> list[tuple[float, Point]]:
        """The knowledge gradient of one more start at each candidate (Scott, Frazier and Powell 2011: KGCP): how
        much the best posterior mean among the measured points and the candidate is expected to rise when that
        start, of variance `noise` (the host's spread between starts and its runs'), is added. The search serves
        the best measured point, so this is what one start at the candidate is worth to it: a point measured
        often, or far below the best, is worth little; an uncertain one that could overtake the best, much.
        `posteriors`: posterior() of every candidate and measured point."""
        first = {}  # each measured point's first place among the observations (its column of kernel_row)
        for i, p in enumerate(self.points):
            first.setdefault(p, i)
        measured = [(p, i, *posteriors[p]) for p, i in first.items()]
        top = max(m for _p, _i, m, _var, _v in measured)
        out = []
        for point in candidates:
            mean, var, v = posteriors[point]
            if var <= 0.0 or mean + 4.0 * math.sqrt(var) < top:  # it could not overtake the best: ~0
                out.append((0.0, point))
                continue
            ks = self.kernel_row(point)
            scale = 1.0 / math.sqrt(var + noise)
            lines = [(mean, var * scale)]
            lines += [(m, (ks[i] - sum(map(operator.mul, v, w))) * scale)  # (its mean, its covariance x scale)
                      for other, i, m, _var, w in measured if other != point]
            out.append((expected_max_gain(lines), point))
        return out


_SQRT2, _SQRT2PI = math.sqrt(2.0), math.sqrt(2.0 * math.pi)


def _f(z: float) -> float:
    """z Phi(z) + phi(z)."""
    return z * 0.5 * (1.0 + math.erf(z / _SQRT2)) + math.exp(-0.5 * z * z) / _SQRT2PI


def expected_max_gain(lines: list[tuple[float, float]]) -> float:
    """E[max_i (a_i + b_i Z)] - max_i a_i for Z ~ N(0, 1) (Frazier, Powell and Dayanik 2009, the upper envelope of
    the lines a + b z): what one observation that moves every mean by b_i Z adds to the best mean. Called for every
    candidate of every search step: _f is written out in the last loop, not called."""
    best: dict[float, float] = {}
    get = best.get
    for a, b in lines:  # of lines with the same slope, the highest (the first of equals, as max() keeps it)
        if a >= get(b, -math.inf):
            best[b] = a
    hull: list[tuple[float, float, float]] = []  # (slope, intercept, z where it starts to lead)
    for b, a in sorted(best.items()):
        while hull:
            b0, a0, z0 = hull[-1]
            z = (a0 - a) / (b - b0)  # where this line overtakes the last one
            if z <= z0:
                hull.pop()
                continue
            hull.append((b, a, z))
            break
        else:
            hull.append((b, a, -math.inf))
    if not hull:  # no line
        return 0.0
    gain, b0, erf, exp = 0.0, hull[0][0], math.erf, math.exp
    for b1, _a1, z1 in hull[1:]:
        z = -abs(z1)  # each change of leader adds (b1 - b0) _f(-|z|)
        gain += (b1 - b0) * (z * 0.5 * (1.0 + erf(z / _SQRT2)) + exp(-0.5 * z * z) / _SQRT2PI)
        b0 = b1
    return gain


def expected_improvement(mean: float, sd: float, incumbent: float) -> float:
    """E[max(f - incumbent, 0)] for f ~ N(mean, sd^2)."""
    if sd <= 0.0:
        return max(mean - incumbent, 0.0)
    z = (mean - incumbent) / sd
    cdf = 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
    pdf = math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return (mean - incumbent) * cdf + sd * pdf
