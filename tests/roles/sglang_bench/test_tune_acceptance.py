"""Issue 40's acceptance for the EAGLE-3 tuner, through its command protocol (plan, next, record, report)
on a seeded synthetic host (tunehost.py: role sglang_server's restarts and the benchmark client's result
documents, no server): the role's defaults, 5% spread per run and 5% per start of the server, the tuner
told neither.

The defaults are the surface search (sglang_bench_tune_surface: after the coordinate search, every start
pooled in a Gaussian-process surface, measured one start at a time where the knowledge gradient says a start
is worth most, the winner proved on up to 10 pairs of fresh starts against the start) and a 960 min budget.
The figures at scale (tune_study.py, Wilson 95% intervals; the restarts per tuning include the final one):

- Fresh seeds, never used while the change was developed (tune_study.py --in-process --hosts noisy --set
  surface=true --set budget_minutes=960 --seed 8080; development used other seeds): a smooth interior optimum
  10% up served within 2% in 80.8% [76.6, 84.3] of 400 tunings (the start kept in 11.2%, a better setting
  served in 88.8%, a worse one never; +7.73% served on average), the start kept on a flat response in 97.8%
  [95.8, 98.8] of 400, a worse setting served in 0.5% [0.1, 2.8] of 200 when every other is 2% slower; 76.9,
  77.3 and 76.5 restarts on average (79 at most: the budget pays for 79, whatever the response). The 80% is
  met by the point estimate, not by the interval: on a host this noisy the defaults serve within 2% of such an
  optimum in between about 77% and 84% of tunings.
- The surface before (expected improvement over the best, a stop for futility at the gain the fresh starts
  saw; 250 tunings, seed 4240, at ed85387): 78.8% [73.3, 83.4], 98.8% [96.5, 99.6], 0.0% [0.0, 1.5], ~76
  restarts. The defaults before (the coordinate search alone, 180 min; 1000 tunings): 2.6% [1.8, 3.8], 98.1%
  [97.1, 98.8], 1.4% [0.8, 2.3], 11.1, 9.8 and 8.9 restarts.
- A quiet host (0.3% per run, 0.5% per start; 40 tunings, seed 8181): the interior optimum within 2% in 40,
  the start kept on a flat response in 40, 32.9 and 26.8 restarts on average (the surface stops when no
  point's expected improvement is worth a start).

The counts below come from the search's generator driven directly (tunehost.tune_in_process: the commands
replay that generator from the state file, so the same seed gives the same tunings, which
test_the_commands_and_the_generator_decide_alike checks through the commands), about three times faster.
Each test's bound is one a tuner meeting the acceptance passes with at least 95% probability.
"""

from __future__ import annotations

import random

from repo import load

tunehost = load("tests/roles/sglang_bench/tunehost.py", "tunehost")
START = tunehost.START
NOISY = (0.05, 0.05)  # per run, per start
QUIET = (0.003, 0.005)  # the 8B shape on the H200: CV 0.2-0.3% within a session, 0.1-0.9% across restarts


def tunings(response: str, trials: int, seed: int, host: tuple[float, float], **change) -> list:
    rng = random.Random(seed)
    settings = tunehost.role_settings(**change)
    return [tunehost.tune_in_process(settings, tunehost.RESPONSES[response], rng, *host) for _ in range(trials)]


def test_the_commands_and_the_generator_decide_alike(tmp_path):
    """Two tunings of the interior optimum on the noisy host through the commands and through the generator,
    from the same seed: the same measurements asked, the same settings served, the same restarts; the report
    states the spread between starts the decisions used and the fresh starts behind the verdict."""
    settings = tunehost.role_settings()
    rng = random.Random(400)
    by_commands = []
    for i in range(2):
        work = tmp_path / f"t{i}"
        work.mkdir()
        by_commands.append(tunehost.tune_host(settings, tunehost.INTERIOR, rng, *NOISY, workdir=work))
    rng = random.Random(400)
    directly = [tunehost.tune_in_process(settings, tunehost.INTERIOR, rng, *NOISY) for _ in range(2)]
    for a, b in zip(by_commands, directly, strict=True):
        assert [c["label"] for c in a.asked] == [ask.label for ask in b.asked]
        assert (a.served, a.restarts, a.host.starts) == (b.served, b.restarts, b.host.starts)
        assert a.summary["spread"] and a.summary["spread"]["df"] >= 1
        report = (tmp_path / f"t{by_commands.index(a)}" / "report.md").read_text()
        assert "The host's spread between starts: " in report and "fresh start" in report


def test_flat_response_keeps_the_start():
    """30 tunings, every setting equal: the start kept in at least 26 (at a true 95%: 98.4% of such tests
    pass; a tuner at 72.9%, the one before the spread between starts was measured: 6%)."""
    out = tunings("flat", 30, 401, NOISY)
    kept = sum(t.served == START for t in out)
    assert kept >= 26, kept


def test_every_other_setting_2pct_slower_is_rarely_served():
    """40 tunings, every setting but the start 2% slower: a worse one served in at most 5 (at a true 5%: 98.6%
    of such tests pass; a tuner at 17.4%, the one before the spread between starts was measured: 28%)."""
    out = tunings("others 2% slower", 40, 402, NOISY)
    worse = sum(t.served != START for t in out)
    assert worse <= 5, worse


def test_interior_optimum_on_a_noisy_host():
    """A smooth interior optimum 10% above the start, 5% per run and per start: a setting within 2% of it served
    in at least 7 of 12 tunings (at a true 80%: 98.1% of such tests pass; the defaults before, the coordinate
    search alone at 180 min, at 2.6%: 6e-9; the surface before, expected improvement at 960 min, at 78.8%:
    97.4%)."""
    out = tunings("interior optimum +10%", 12, 404, NOISY)
    within = sum(tunehost.INTERIOR(t.served) >= 0.98 * 110.0 for t in out)
    assert within >= 7, within


def test_interior_optimum_on_a_quiet_host():
    """On a host whose starts are quiet (the 8B shape's), a smooth interior optimum 10% above the start is
    served within 2% in at least 32 of 40 tunings (at a true 80%: 59% of such tests pass; measured 40 of 40, seed 8181),
    with far fewer restarts than the 79 the budget allows: the surface stops when no point is worth a start
    (measured 32.9 on average, seed 8181)."""
    out = tunings("interior optimum +10%", 40, 403, QUIET)
    within = sum(tunehost.INTERIOR(t.served) >= 0.98 * 110.0 for t in out)
    assert within >= 32, within
    assert sum(t.restarts for t in out) / len(out) <= 50
