"""The gate treats a session as a restart (files/sglang_bench_report.py): a start of the server has its own
speed, which its runs do not show, so two sessions differ by more than their runs say.

Measured on real SGLang 0.5.17 on an H200 (docs/validation/sglang_serve-h200): five sessions of the same
settings, 10 runs each, run-to-run CV about 10.7% within a session, the session means spread by 10.7%
beyond that; one restart was called 25.5% `slower` (p=0.0083) on noise alone. The spread is measured from
the host's own repeated starts (its history, an A/B's interleaved starts) by default, with its degrees of
freedom; the stated sglang_bench_restart_cv_pct stands in only until there are MIN_SPREAD_DF of them.
"""

from __future__ import annotations

import json
import random
import statistics

import pytest

from repo import ROOT, load

data = load("tests/roles/sglang_bench/benchdata.py", "sglang_bench_benchdata")
report = load("roles/sglang_bench/files/sglang_bench_report.py", "sglang_bench_report")
H200 = ROOT / "docs" / "validation" / "sglang_serve-h200"
# In the order they ran: the proof's two sessions of 3/1/4, then the noise run's three restarts.
H200_SESSIONS = ["bench-02-eagle3", "bench-03-tune-s3-k1-n4", "bench-noise-01-eagle3", "bench-noise-02-serving",
                 "bench-noise-03-serving-again"]
MEASURED_CV = 0.107  # between restarts and within a session, both (see the module's docstring)
TRIALS = 300


def h200_runs() -> list[list[float]]:
    return [report.run_values(json.loads((H200 / f"{name}.json").read_text())) for name in H200_SESSIONS]


def write_history(host_dir, sessions: list[list[float]], releases: list[str]) -> list[dict]:
    for day, (values, release) in enumerate(zip(sessions, releases, strict=True), start=1):
        data.write(host_dir, data.session(day), "eagle3", values, release=release)
    return report.load(host_dir)


def test_the_recorded_false_slower_is_inconclusive_with_the_measured_allowance(tmp_path):
    """The H200's second session of 3/1/4 against the next restart of the same settings: -25.5%, `slower`
    without the allowance (the gate failed on noise); at the measured between-restart spread the data
    cannot tell it from a restart, the gate passes, and more runs would not resolve it."""
    runs = h200_runs()
    results = write_history(tmp_path / "h200", runs[:3], ["0.5.17"] * 3)
    blind = report.evaluate(results, None, 5.0, "eagle3")
    assert blind["rows"][0]["vs_previous"]["verdict"] == "slower" and blind["failures"]
    assert blind["rows"][0]["vs_previous"]["p"] == pytest.approx(0.0083, abs=5e-4)
    ev = report.evaluate(results, None, 5.0, "eagle3", restart_cv=MEASURED_CV)
    cmp = ev["rows"][0]["vs_previous"]
    assert cmp["verdict"] == "inconclusive" and not ev["failures"], cmp
    assert cmp["diff_pct"] == pytest.approx(-25.5, abs=0.1)
    assert cmp["runs_needed_text"] == "more sessions (restarts), not runs"
    text = report.markdown("h200", results, ev, None, 5.0, False)
    # two earlier sessions of one setting: 1 degree of freedom, too few to measure; the stated figure stands in
    assert "add 10.7% of each session's mean" in text and "this host has 1 of the 2 repeated starts" in text
    off = report.evaluate(results, None, 5.0, "eagle3", restart_cv=MEASURED_CV, learn=False)
    assert "not measured from the history (--no-restart-cv-from-history)" in report.markdown("h200", results, off,
                                                                                             None, 5.0, False)


def test_the_history_estimates_the_spread_between_restarts():
    """The estimator on the five recorded sessions gives the figure the docstring names; the newest
    session is never part of its own reference."""
    runs = h200_runs()
    results = [dict(data.result_doc("eagle3", v, data.session(d)), _session=data.session(d), _release="0.5.17")
               for d, v in enumerate(runs, start=1)]
    learned = report.history_restart_cv(results, data.session(len(runs) + 1))
    assert learned["starts"] == 5 and learned["df"] == 4 and learned["cv"] == pytest.approx(MEASURED_CV, abs=0.001)
    assert report.history_restart_cv(results, data.session(3)) is None  # two earlier sessions: too few


def simulate(rng: random.Random, per_start: float, per_run: float, sessions: int, runs: int = 10,
             last_factor: float = 1.0) -> list[list[float]]:
    """Sessions of equal settings: each start draws its speed, each run its own noise."""
    out = []
    for i in range(sessions):
        start = (1.0 + rng.gauss(0.0, per_start)) * (last_factor if i == sessions - 1 else 1.0)
        out.append([100.0 * start * (1.0 + rng.gauss(0.0, per_run)) for _ in range(runs)])
    return out


def false_slower_rate(tmp_path, per_start: float, stated: float, earlier: int, seed: int, learn: bool = False) -> float:
    """Share of upgrades to an equally fast release that the gate calls slower and fails."""
    rng, failed = random.Random(seed), 0
    for trial in range(TRIALS):
        sessions = simulate(rng, per_start, MEASURED_CV, earlier + 1)
        results = write_history(tmp_path / f"t{trial}", sessions, ["r1"] * earlier + ["r2"])
        failed += bool(report.evaluate(results, None, 5.0, "eagle3", restart_cv=stated, learn=learn)["failures"])
    return failed / TRIALS


def test_restarts_of_the_measured_size_give_no_false_slower(tmp_path):
    """An upgrade to an equally fast release on a host whose restarts move the mean by the H200's 10.7%:
    with one earlier session the stated allowance (at the measured size) holds the false failures to
    the test's level; with the role's default 1% stated, a history of four sessions of the release
    before supplies the host's own figure, with its 3 degrees of freedom (the default). Without either,
    a quarter of such upgrades fail."""
    blind = false_slower_rate(tmp_path / "blind", MEASURED_CV, 0.0, 1, seed=11)
    stated = false_slower_rate(tmp_path / "stated", MEASURED_CV, MEASURED_CV, 1, seed=11)
    learned = false_slower_rate(tmp_path / "learned", MEASURED_CV, 0.01, 4, seed=12, learn=True)
    print(f"false 'slower' failures at 10.7% per start: {blind:.1%} without, {stated:.1%} stated, "
          f"{learned:.1%} learned from 4 earlier sessions")
    assert blind > 0.15
    assert stated <= 0.05
    assert learned <= 0.08


def test_a_real_20_percent_drop_still_fails_at_the_default_allowance(tmp_path):
    """The allowance must not blind the gate: the simulator's noise (5% per run, 0.5% per start, the
    molecule scenarios') and a release 20% slower: failed in every trial at the role's default."""
    rng, caught = random.Random(13), 0
    default = 0.01
    for trial in range(100):
        sessions = simulate(rng, 0.005, 0.05, 2, last_factor=0.8)
        results = write_history(tmp_path / f"t{trial}", sessions, ["r1", "r2"])
        caught += bool(report.evaluate(results, None, 5.0, "eagle3", 0.995, restart_cv=default)["failures"])
    assert caught == 100


def test_the_measured_spread_replaces_the_stated_one_by_default(tmp_path):
    """A quiet host (0.5% per start) with three earlier sessions of one setting: the history measures its
    spread (2 degrees of freedom) and the comparison uses it, not the stated 10%, so a 20% drop is slower;
    a noisy host (10% per start) measures its own, and an equal release is not called slower."""
    rng = random.Random(21)
    quiet = write_history(tmp_path / "quiet", simulate(rng, 0.005, 0.05, 4, last_factor=0.8), ["r1"] * 3 + ["r2"])
    ev = report.evaluate(quiet, None, 5.0, "eagle3", 0.995, restart_cv=0.10)
    assert ev["restart_cv"]["source"] == "measured" and ev["restart_cv"]["df"] == 2
    assert ev["restart_cv"]["used"] < 0.02 and ev["rows"][0]["vs_previous"]["verdict"] == "slower"
    assert ev["rows"][0]["vs_previous"]["restart_df"] == 2
    stated = report.evaluate(quiet, None, 5.0, "eagle3", 0.995, restart_cv=0.10, learn=False)
    assert stated["restart_cv"]["source"] == "stated" and stated["rows"][0]["vs_previous"]["verdict"] == "inconclusive"
    text = report.markdown("quiet", quiet, ev, None, 5.0, False)
    assert "Measured on this host from repeated starts of one setting (3 starts of 1 label" in text, text


def test_a_session_changed_otherwise_is_another_setting(tmp_path):
    """The history groups sessions by label, release and server settings: a session whose server ran
    otherwise (molecule sglang_bench's 20%-slower one records another mem_fraction_static) is its own setting
    and does not inflate the spread measured from the others."""
    rng = random.Random(22)
    host = tmp_path / "h"
    for day, values in enumerate(simulate(rng, 0.005, 0.05, 4), start=1):
        data.write(host, data.session(day), "eagle3", values)
    slow = data.result_doc("eagle3", [v * 0.8 for v in simulate(rng, 0.005, 0.05, 1)[0]], data.session(5))
    slow["environment"]["server"] = {"mem_fraction_static": 0.89}
    (host / f"{data.session(5)}-eagle3.json").write_text(json.dumps(slow))
    data.write(host, data.session(6), "eagle3", simulate(rng, 0.005, 0.05, 1)[0])
    data.write(host, data.session(7), "eagle3", [v * 1.3 for v in simulate(rng, 0.005, 0.05, 1)[0]])
    results = report.load(host)
    learned = report.history_restart_cv(results, data.session(7))
    assert learned["starts"] == 5 and learned["cv"] < 0.03, learned
    slow["environment"]["server"] = {}  # the same session recorded as the same setting: the spread looks like 9%
    (host / f"{data.session(5)}-eagle3.json").write_text(json.dumps(slow))
    assert report.history_restart_cv(report.load(host), data.session(7))["cv"] > 0.06
    assert report.evaluate(results, None, 5.0, "eagle3", 0.995)["rows"][0]["vs_previous"]["verdict"] == "faster"


def ab_history(host, rng, per_start: float, gain: float, starts: int = 2) -> list[dict]:
    """An A/B of two server settings, interleaved A/B/A/B: each start its own speed factor."""
    for i in range(starts):
        for label, factor in (("nccl", 1.0), ("pcie-ipc", 1.0 + gain)):
            values = simulate(rng, per_start, 0.003, 1)[0]
            doc = data.result_doc(label, [v * factor for v in values], data.session(9))
            (host / f"{data.session(9)}-{label}-{i + 1}.json").write_text(json.dumps(doc))
    return report.load(host)


def test_an_ab_of_two_settings_over_interleaved_starts(tmp_path):
    """sglang_bench_mode ab with two sets of server settings: two starts of each, interleaved; the A/B's own
    repeated starts measure the spread (2 degrees of freedom), the difference is tested over starts, and the
    report gives it with its interval. A 10% gain on a quiet host (0.3% per start) is significant; on a host
    whose starts spread 5% it is not, and the report says how many starts would resolve it."""
    rng = random.Random(23)
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    ev = report.evaluate(ab_history(quiet, rng, 0.003, 0.10), None, 5.0, "eagle3", ab=("nccl", "pcie-ipc"))
    ab = ev["ab"]
    assert ev["restart_cv"]["source"] == "measured" and ev["restart_cv"]["df"] == 2
    assert ab["starts"] == 2 and ab["reference_starts"] == 2 and ab["test"].endswith("over starts")
    assert ab["verdict"] == "faster" and ab["ci_pct"][0] > 5 and ev["speedup"] == pytest.approx(1.10, abs=0.02)
    assert [r["starts"] for r in ev["rows"]] == [2, 2]
    text = report.markdown("quiet", report.load(quiet), ev, None, 5.0, False)
    assert "A/B, pcie-ipc against nccl: **1.1" in text and "2 and 2 starts, interleaved" in text, text
    assert "| pcie-ipc | nccl (A/B, same session) |" in text
    noisy = tmp_path / "noisy"
    noisy.mkdir()
    ev = report.evaluate(ab_history(noisy, random.Random(24), 0.05, 0.10), None, 5.0, "eagle3", ab=("nccl", "pcie-ipc"))
    assert ev["ab"]["verdict"] == "inconclusive" and ev["ab"]["runs_needed_text"].endswith("starts per setting")
    assert "starts per setting would resolve" in report.markdown("noisy", report.load(noisy), ev, None, 5.0, False)


def test_one_start_each_is_the_two_session_comparison():
    """compare_starts with one start on each side is compare(): the gate's figures do not change."""
    new, old = data.exactly(1, 10, 90.0, 5.0), data.exactly(2, 10, 100.0, 5.0)
    spread = {"cv": 0.02, "df": 4, "source": "measured"}
    one = report.compare_starts([new], [old], statistics.fmean(old), 0.95, spread)
    assert one == report.compare(new, old, statistics.fmean(old), 0.95, 0.02, 4)
    many = report.starts_test([new], [old], statistics.fmean(old), 0.95, 0.02, 4)
    assert many["p"] == pytest.approx(one["p"], rel=1e-9) and many["ci"][0] == pytest.approx(one["ci"][0], rel=1e-9)


def test_the_spread_estimate_recovers_a_known_spread():
    """restart_spread on many simulated settings: the pooled estimate is the spread drawn."""
    rng = random.Random(25)
    groups = [simulate(rng, 0.04, 0.05, 3, runs=20) for _ in range(200)]
    spread = report.restart_spread(groups)
    assert spread["df"] == 400 and spread["cv"] == pytest.approx(0.04, abs=0.004)
    assert report.restart_spread([simulate(rng, 0.04, 0.05, 1)]) is None  # one start: nothing to measure


def test_without_restarts_the_test_is_welchs():
    new, old = data.exactly(1, 10, 90.0, 5.0), data.exactly(2, 10, 100.0, 5.0)
    plain = report.compare(new, old, statistics.fmean(old), 0.95)
    assert plain == report.compare(new, old, statistics.fmean(old), 0.95, 0.0)
    wider = report.compare(new, old, statistics.fmean(old), 0.95, 0.05)
    assert wider["p"] > plain["p"] and wider["ci"][0] < plain["ci"][0] and wider["diff"] == plain["diff"]
