"""The surface's acquisition (roles/sglang_bench/files/sglang_tuning/surface.py): the knowledge gradient's
expected maximum of lines against a Monte Carlo estimate, and where it sends the next start where expected
improvement did not."""

from __future__ import annotations

import random
import sys

from repo import load

load("roles/sglang_bench/files/sglang_tune.py", "sglang_tune")
surface = sys.modules["sglang_tuning.surface"]  # the package the tool imports from beside it


def test_expected_max_gain_is_the_mean_of_the_best_line():
    """E[max_i (a_i + b_i Z)] - max_i a_i, exact (the lines' upper envelope), against 50000 draws of Z for
    random sets of lines, ties and dominated lines among them: within 0.015 (the Monte Carlo error is ~0.004)."""
    rng = random.Random(40)
    draws = [rng.gauss(0.0, 1.0) for _ in range(50000)]
    for _ in range(8):
        lines = [(rng.gauss(0, 1), rng.gauss(0, 1)) for _ in range(rng.randint(1, 9))]
        lines += [lines[0], (lines[0][0] - 1.0, lines[0][1])]  # the same line again, one below it
        top = max(a for a, _b in lines)
        mc = sum(max(a + b * z for a, b in lines) for z in draws) / len(draws) - top
        assert abs(surface.expected_max_gain(lines) - mc) < 0.015, (lines, mc)
    assert surface.expected_max_gain([(0.0, 0.5)]) == 0.0  # one line: nothing to gain


def test_one_more_start_of_a_point_measured_often_is_worth_little():
    """The best so far measured on 1 to 40 starts at a 5% spread per start, its neighbours once each: the
    knowledge gradient of one more start of it falls as its starts grow (each adds less to its estimate), below
    its neighbours' from 20 starts on (on the noisy host expected improvement, which its own posterior spread
    keeps up, re-measured one point on the slope 17-30 times)."""
    noise = 0.05 ** 2
    best, near = (5, 2, 8), [(4, 2, 8), (6, 2, 8), (5, 4, 8), (5, 1, 6), (5, 2, 4), (5, 2, 16)]
    worth = {}
    for starts in (1, 5, 20, 40):
        obs = [(best, 0.06, noise / starts)] + [(p, 0.03, noise) for p in near] + [((3, 1, 4), 0.0, noise / 10)]
        fit = surface.Surface.fit(obs)
        posteriors = {p: fit.posterior(p) for p in {best, *near, (3, 1, 4)}}
        kg = {p: v for v, p in fit.knowledge_gradient(posteriors, [best, *near], noise)}
        worth[starts] = kg[best]
        if starts >= 20:
            assert max(kg, key=kg.get) != best, (starts, kg)
    assert worth[5] < worth[1] / 10 and worth[40] <= worth[20] + 1e-15 <= worth[5] + 2e-15, worth
