"""The EAGLE-3 tuner's decisions under noise (roles/sglang_bench/files/sglang_tune.py), in-process.

Each trial drives the tool's search in-process (sglang_tune.drive: the same generator the commands
replay from the state file) against a known response: every run's tok/s is the response at that point
times the start's speed factor, 1 + N(0, per start), drawn at every start of the server (the runs do not
show it), times (1 + e), e ~ N(0, 5%) drawn per run (the reference host's spread: ten EAGLE-3 runs spanned
87.5-103.5 around 96.1), with the role's default grid (163 points from 3/1/4) and runs, the tuner told neither
spread. 200 seeded trials per response. The coordinate search alone: sglang_bench_tune_surface false and its
180 min budget (the role's defaults until the surface became the default; test_tune_acceptance.py drives the
defaults). These are the hosts
whose restarts are quiet (per start 0) unless a test says otherwise; test_tune_acceptance.py drives the
commands on the issue's noisy host (5% per start), and tune_study.py gives both at 1000 trials.
"""

from __future__ import annotations

import random
import statistics

import pytest

from repo import load

tunehost = load("tests/roles/sglang_bench/tunehost.py", "tunehost")
tune = tunehost.tune
START = tunehost.START
TRIALS = 200
NOISE = 0.05


def settings(**change) -> dict:
    """The role's settings with the coordinate search alone, at its 180 min budget."""
    return tunehost.role_settings(**{"surface": False, "budget_minutes": 180.0, **change})


CONFIG = tune.Config.from_settings(settings())


def tune_once(config, truth, rng, noise=NOISE, restart_noise=0.0):
    """One tuning against `truth` (tok/s per point; None: the point does not start). Returns the
    search, the point served and the restarts it took (the final one included)."""
    server = {"point": config.start, "factor": 1.0 + rng.gauss(0.0, restart_noise), "restarts": 0}

    def measure(ask):
        if ask.point != server["point"]:
            server.update(point=ask.point, factor=1.0 + rng.gauss(0.0, restart_noise), restarts=server["restarts"] + 1)
        value = truth(ask.point) if ask.point is not None else 50.0
        if value is None:
            server["point"] = None
            return {"label": ask.label, "status": "failed", "why": "CUDA out of memory"}
        return {"label": ask.label, "status": "ok",
                "single": [value * server["factor"] * (1.0 + rng.gauss(0.0, noise)) for _ in range(ask.runs)]}

    search, pending = tune.drive(config, measure)
    assert pending is None
    served = tune.serving(search)
    restarts = server["restarts"] + (served != server["point"])
    # the budget holds, the end's restart included
    assert search.used_minutes + (config.restart_minutes if served != server["point"] else 0) \
        <= config.budget_minutes + 1e-6, (search.used_minutes, served, server["point"])
    return search, served, restarts


paraboloid = tunehost.paraboloid


def trials(truth, seed, **kw):
    rng = random.Random(seed)
    return [tune_once(CONFIG, truth, rng, **kw) for _ in range(TRIALS)]


def test_the_role_defaults_make_a_grid_larger_than_the_budget() -> None:
    """163 points: the coordinate search's 180 min pays for a tenth of them, the role's 960 min for under half."""
    assert len(CONFIG.grid()) == 163 and CONFIG.max_candidates() < len(CONFIG.grid()) / 10
    defaults = tune.Config.from_settings(tunehost.role_settings())
    assert defaults.surface and defaults.grid() == CONFIG.grid() and defaults.max_candidates() < len(CONFIG.grid()) / 2


def test_flat_response_keeps_the_start() -> None:
    """Every setting equal: the search may wander on noise (a move at 5% per look), the fresh runs of its
    best do not beat the start's (2.5% per look, two looks at most)."""
    out = trials(lambda p: 100.0, seed=1)
    kept = sum(served == START for _s, served, _r in out) / TRIALS
    print(f"flat: start kept in {kept:.1%}; search moved in "
          f"{sum(s.best != START for s, _v, _r in out) / TRIALS:.1%}; "
          f"restarts {statistics.fmean(r for *_x, r in out):.1f} on average")
    assert kept >= 0.95


def test_every_other_setting_2pct_slower_is_never_chosen() -> None:
    out = trials(lambda p: 100.0 if p == START else 98.0, seed=2)
    worse = sum(served != START for _s, served, _r in out) / TRIALS
    print(f"2% slower elsewhere: a worse setting served in {worse:.1%}; "
          f"restarts {statistics.fmean(r for *_x, r in out):.1f} on average")
    assert worse <= 0.05


def test_a_smooth_interior_optimum_10pct_above_the_start_is_found() -> None:
    """The optimum 6/2/8 is inside the grid on all three axes (steps 1-8, topk 1-8, draft 2-32); along
    the way the steps gain 1-5% each. Without noise (deterministic: noise 0) the budget ends the search
    within 2% of it too. Measured (seeds 3-6, 200 tunings each): within 2% in 81.5%, 87.5%, 92.5% and
    84.5%, the start kept in 3-7% (its fresh starts did not confirm it: the spread between starts is
    measured, here from starts that differ by their runs alone); 13.4 restarts per tuning. The bounds
    sit below the 1000-trial figure of tune_study.py by three binomial standard deviations of 200."""
    truth = paraboloid((6, 2, 8), 110.0)
    best = max(truth(p) for p in CONFIG.grid())
    assert best == truth((6, 2, 8)) == 110.0 and truth(START) == 100.0
    search, served, _r = tune_once(CONFIG, truth, random.Random(0), noise=0.0)
    assert truth(served) >= 0.98 * best and search.stop.startswith("the budget"), (served, search.stop)
    out = trials(truth, seed=3)
    within = sum(truth(served) >= 0.98 * best for _s, served, _r in out) / TRIALS
    shortfall = sorted(1 - truth(served) / best for _s, served, _r in out)
    print(f"interior optimum: within 2% in {within:.1%}, shortfall median {statistics.median(shortfall):.2%}, "
          f"90th percentile {shortfall[int(0.9 * TRIALS)]:.2%}; "
          f"restarts {statistics.fmean(r for *_x, r in out):.1f} on average")
    assert within >= 0.78
    assert sum(served == START for _s, served, _r in out) / TRIALS <= 0.1  # a 10% gain is rarely missed outright


def test_two_local_peaks_end_on_a_peak_never_below_the_start() -> None:
    """The global optimum 110 at 6/2/8 and a local one of 106 at 3/4/16, both on the start's slopes
    (the start: 100 on both). A local search may take either hill; it must climb one, to within 2%
    of its top, and never serve less than the start."""
    glob, local = paraboloid((6, 2, 8), 110.0), paraboloid((3, 4, 16), 106.0)

    def truth(p):
        return max(glob(p), local(p))

    out = trials(truth, seed=4)
    on_global = sum(truth(served) >= 0.98 * 110 for _s, served, _r in out) / TRIALS
    on_local = sum(local(served) >= glob(served) and truth(served) >= 0.98 * 106 for _s, served, _r in out) / TRIALS
    below = sum(truth(served) < 100.0 for _s, served, _r in out) / TRIALS
    print(f"two peaks: the global one in {on_global:.1%}, the local one in {on_local:.1%}, below the start in "
          f"{below:.1%}")
    assert below <= 0.05
    assert on_global + on_local >= 0.8  # measured: 84% (37% the global one)
    assert on_global >= 0.3  # the better hill is not out of reach


def test_one_comparison_of_equal_settings_moves_within_its_bound() -> None:
    """Sequential looks inflate false moves: one comparison of two equal settings (up to LOOKS looks at
    1 - confidence each) moves in at most LOOKS x (1 - confidence); the served settings stay at the start
    in at least `confidence` (the fresh runs' test). 2000 comparisons."""
    config = tune.Config.from_settings(settings(num_steps=[3, 4], eagle_topk=[1]))
    assert config.grid() == [(3, 1, 4), (4, 1, 5)]
    rng = random.Random(5)
    moved = served = looks = 0
    for _ in range(2000):
        search, point, _r = tune_once(config, lambda p: 100.0, rng)
        moved += search.best != START
        served += point != START
        looks += len(search.comparisons[0]["looks"])
    print(f"one comparison of equal settings: moved in {moved / 2000:.2%}, served in {served / 2000:.2%}, "
          f"{looks / 2000:.2f} looks on average")
    assert moved / 2000 <= tune.LOOKS * (1 - config.confidence)
    assert served / 2000 <= 1 - config.confidence
    assert looks / 2000 > 1.0  # inconclusive comparisons do get more runs


# The H200 toy's between-restart spread of a session's mean (docs/validation/sglang_serve-h200: five
# sessions of the same settings, 10.7% beyond what their runs explain; the gate's estimator).
MEASURED_RESTART_CV = 0.107


@pytest.mark.parametrize("per_start", [MEASURED_RESTART_CV, 0.02])
def test_a_start_to_start_spread_nobody_stated_serves_no_false_winner(per_start):
    """A speed factor drawn at every start (the runs do not show it), on a flat response, and nothing tells
    the tuner: it measures the spread from its repeated starts (the start's second start, the
    interleaved comparisons, the fresh pairs) and keeps the start in at least 95% of tunings. The tuner
    before (a stated allowance, the role's 1%): 59% kept at 10.7% per start, 79.5% at 2% without the
    allowance (test history of this file)."""
    rng = random.Random(7)
    out = [tune_once(CONFIG, lambda p: 100.0, rng, restart_noise=per_start) for _ in range(TRIALS)]
    kept = sum(served == START for _s, served, _r in out) / TRIALS
    measured = [s.spread()["cv"] for s, _v, _r in out if s.spread()]
    print(f"flat, {per_start:.1%} per start: start kept in {kept:.1%}; the spread measured: median "
          f"{statistics.median(measured):.1%} ({len(measured)} tunings)")
    assert kept >= 0.95
    # what the decisions used is the host's: the median estimate within a third of the truth
    assert abs(statistics.median(measured) - per_start) < per_start / 3


def test_the_tuner_is_told_no_spread():
    """The role passes no between-restart figure to the tuner (vars/main.yml's settings): it measures its own."""
    assert not any("restart" in key and "minutes" not in key for key in settings())
    assert "restart_cv" not in tune.Config.__dataclass_fields__


@pytest.mark.parametrize("objective", ["throughput", "mix"])
def test_other_objectives_decide_on_their_own_values(objective) -> None:
    """throughput: each concurrent request's tok/s x concurrency; mix: single and concurrent paired per
    run, each relative to the start's mean. A point 20% faster in throughput and 20% slower single-stream
    wins for throughput, and for a mix weighted 0.2 on single stream, not for one weighted 0.8."""
    fast = (3, 2, 8)

    def measure_with(rng):
        def measure(ask):
            single, conc = (80.0, 1200.0) if ask.point == fast else (100.0, 1000.0)
            return {"label": ask.label, "status": "ok",
                    "single": [single * (1 + rng.gauss(0, NOISE)) for _ in range(ask.runs)],
                    "concurrent": [conc * (1 + rng.gauss(0, NOISE)) for _ in range(ask.runs)]}
        return measure

    for weight, wins in ([(0.2, True), (0.8, False)] if objective == "mix" else [(0.5, True)]):
        config = tune.Config.from_settings(settings(num_steps=[3], eagle_topk=[1, 2], num_draft_tokens=[8],
                                                    objective=objective, concurrency=16, weight=weight))
        search, _ask = tune.drive(config, measure_with(random.Random(7)))
        assert (tune.serving(search) == fast) is wins, (objective, weight, search.decision)
