"""Issue 40's acceptance for the EAGLE-3 tuner, through its command protocol (plan, next, record, report)
on a seeded synthetic host (tunehost.py: role sglang_server's restarts and the benchmark client's result
documents, no server): the role's defaults, 5% spread per run and 5% per start of the server, the tuner
told neither.

The figures at scale come from tune_study.py (1000 trials per case, Wilson 95% intervals; the commit that
added this file cites its output, before and after the change). This test runs fewer trials, seeded, with
bounds a tuner meeting the acceptance passes with at least 95% probability and the tuner before this
change failed (it kept the start on a flat response in 72.9% [70.1, 75.6] of tunings and served a worse
setting in 17.4% [15.2, 19.9] when every other setting was 2% slower).

Not met, and not asserted here: a smooth interior optimum 10% above the start is served within 2% in 2.6%
[1.8, 3.8] of tunings on this host (tune_study.py, 1000 trials; the tuner before: 16%, while serving worse
settings and moving off a flat response as above): with 5% per start a 1-5% step between neighbours takes 10
or more starts of each to resolve, and the search keeps the start rather than serve an unproven setting. The
default budget pays for about 13 starts besides the start's; a tuner that proves its winner on fresh starts
cannot reach 80% there (an oracle told the response's exact shape, which only locates its top and proves the
gain, serves within 2% in at most about 68%; issue 40's notes), and a global quadratic-surface search that
reached 51% on this response served within 2% of the best on 6% of the simulator's speculative models, where
this search does on 83% (an experiment of 2026-12-05, not kept; issue 40's notes). On a host whose starts
are quiet the same search serves it within 2% in 98% (test_interior_optimum_on_a_quiet_host).

With sglang_bench_tune_surface (off by default) and a 960 min budget the search pools every start in a
Gaussian-process surface after the coordinate search. Through the commands, 250 fresh-seeded tunings per response
(tune_study.py --trials 250 --hosts noisy --set surface=true --set budget_minutes=960 --seed 4240, 2026-12-06, at
ed85387's tuner): the start kept on a flat response in 98.8% [96.5, 99.6], a worse setting served in 0.0% [0.0, 1.5]
when every other is 2% slower, the interior optimum served within 2% in 78.8% [73.3, 83.4] (a better setting in
84.4%, a worse one never), 76 restarts on average (79 at most: the budget, whatever the response). Short of 80%,
so the defaults stay. On the quiet host (30 each, seed 4250): 100%, 0%, 100%, 24-30 restarts on average.
(test_interior_optimum_with_the_surface_on_a_noisy_host runs fewer.)
"""

from __future__ import annotations

import random

from repo import load

tunehost = load("tests/roles/sglang_bench/tunehost.py", "tunehost")
START = tunehost.START
NOISY = (0.05, 0.05)  # per run, per start
QUIET = (0.003, 0.005)  # the 8B shape on the H200: CV 0.2-0.3% within a session, 0.1-0.9% across restarts


def tunings(response: str, trials: int, seed: int, host: tuple[float, float], tmp_path) -> list:
    rng = random.Random(seed)
    settings = tunehost.role_settings()
    out = []
    for i in range(trials):
        work = tmp_path / f"t{i}"
        work.mkdir()
        out.append(tunehost.tune_host(settings, tunehost.RESPONSES[response], rng, *host, workdir=work))
    return out


def test_flat_response_keeps_the_start(tmp_path):
    """40 tunings, every setting equal: the start kept in at least 35 (at a true 95%: 98.6% of such tests
    pass; the tuner before, at 72.9%: 0.2%)."""
    out = tunings("flat", 40, 401, NOISY, tmp_path)
    kept = sum(t.served == START for t in out)
    assert kept >= 35, kept
    # the report states the spread between starts the decisions used, measured in every tuning
    assert all(t.summary["spread"] and t.summary["spread"]["df"] >= 1 for t in out)


def test_every_other_setting_2pct_slower_is_rarely_served(tmp_path):
    """80 tunings, every setting but the start 2% slower: a worse one served in at most 8 (at a true 5%: 97.6%
    of such tests pass; the tuner before, at 17.4%: 1%)."""
    out = tunings("others 2% slower", 80, 402, NOISY, tmp_path)
    worse = sum(t.served != START for t in out)
    assert worse <= 8, worse


def test_interior_optimum_on_a_quiet_host(tmp_path):
    """On a host whose starts are quiet (the 8B shape's), a smooth interior optimum 10% above the start is
    served within 2% in at least 32 of 40 tunings (at a true 80%: 59% of such tests pass; measured 98%),
    and the report names what served and why."""
    out = tunings("interior optimum +10%", 40, 403, QUIET, tmp_path)
    within = sum(tunehost.INTERIOR(t.served) >= 0.98 * 110.0 for t in out)
    assert within >= 32, within
    won = next(t for t in out if t.summary["winner"])
    report = (tmp_path / f"t{out.index(won)}" / "report.md").read_text()
    assert "The host's spread between starts: " in report and "fresh start" in report


def test_interior_optimum_with_the_surface_on_a_noisy_host(tmp_path):
    """sglang_bench_tune_surface on and a 960 min budget, the noisy host: the surface pools every start, so a
    smooth interior optimum 10% up is served within 2% in at least 6 of 12 tunings (measured in-process: 75% of
    100 tunings, the optimum located within 2% in 86% and proved on fresh starts in 87% of those; at a true 75%
    98.6% of such tests pass; the coordinate search alone, at about 13% with the same budget, 0.2%)."""
    rng = random.Random(404)
    settings = tunehost.role_settings(surface=True, budget_minutes=960.0)
    out = []
    for i in range(12):
        work = tmp_path / f"s{i}"
        work.mkdir()
        out.append(tunehost.tune_host(settings, tunehost.INTERIOR, rng, *NOISY, workdir=work))
    within = sum(tunehost.INTERIOR(t.served) >= 0.98 * 110.0 for t in out)
    assert within >= 6, within
