"""files/sglang_bench_report.py: a verdict, not a threshold (issue 17).

Synthetic histories with known distributions (seeded) in the client's own result format; every
figure the report computes is checked against an independent computation here: Welch's t
from its textbook formulas, the runs needed against the normal-approximation sample size and
a Monte Carlo estimate of the power, the verdicts against the p-values so computed.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from repo import ROOT, load

report = load("roles/sglang_bench/files/sglang_bench_report.py")
data = load("tests/roles/sglang_bench/benchdata.py", "sglang_bench_benchdata")
SCRIPT = ROOT / "roles" / "sglang_bench" / "files" / "sglang_bench_report.py"
HOST = "gpu1"
OLD, NEW = data.session(1), data.session(2)


# ------------------------------------------------------------------ independent computations

def welch(new: list[float], old: list[float], confidence: float = 0.95) -> dict:
    """Welch's t-test and the Welch-Satterthwaite interval, from the textbook formulas."""
    m1, m2 = sum(new) / len(new), sum(old) / len(old)
    v1 = sum((x - m1) ** 2 for x in new) / (len(new) - 1)
    v2 = sum((x - m2) ** 2 for x in old) / (len(old) - 1)
    a, b = v1 / len(new), v2 / len(old)
    se = math.sqrt(a + b)
    df = (a + b) ** 2 / (a ** 2 / (len(new) - 1) + b ** 2 / (len(old) - 1))
    t = (m1 - m2) / se
    q = stats.t.ppf(0.5 + confidence / 2, df)
    return {"diff": m1 - m2, "p": 2 * stats.t.sf(abs(t), df), "ci": (m1 - m2 - q * se, m1 - m2 + q * se),
            "df": df, "v1": v1, "v2": v2, "old_mean": m2}


def one_sample(new: list[float], mu: float, confidence: float = 0.95) -> dict:
    m = sum(new) / len(new)
    se = math.sqrt(sum((x - m) ** 2 for x in new) / (len(new) - 1) / len(new))
    df = len(new) - 1
    q = stats.t.ppf(0.5 + confidence / 2, df)
    return {"diff": m - mu, "p": 2 * stats.t.sf(abs((m - mu) / se), df), "ci": (m - mu - q * se, m - mu + q * se)}


def normal_sample_size(diff: float, v1: float, v2: float, confidence: float = 0.95, power: float = 0.8) -> float:
    """Runs per group a z-test would need (the t-test needs a little more)."""
    z = stats.norm.ppf(0.5 + confidence / 2) + stats.norm.ppf(power)
    return z ** 2 * (v1 + v2) / diff ** 2


def monte_carlo_power(diff: float, v1: float, v2: float, n: int, confidence: float = 0.95, sims: int = 20000,
                      seed: int = 7) -> float:
    """Share of simulated pairs of sessions (normal runs, n each) in which Welch's test rejects."""
    rng = np.random.default_rng(seed)
    a = rng.normal(diff, math.sqrt(v1), size=(sims, n))
    b = rng.normal(0.0, math.sqrt(v2), size=(sims, n))
    p = stats.ttest_ind(a, b, axis=1, equal_var=False).pvalue
    return float(np.mean(p < 1 - confidence))


def expected_verdict(res: dict, confidence: float = 0.95) -> str:
    if res["p"] >= 1 - confidence:
        return "inconclusive"
    return "faster" if res["diff"] > 0 else "slower"


# ------------------------------------------------------------------ helpers

def history(tmp_path, old: list[float], new: list[float], label: str = "eagle3"):
    host_dir = tmp_path / HOST
    data.write(host_dir, OLD, label, old, release="r1")
    data.write(host_dir, NEW, label, new, release="r2")
    return host_dir


def evaluate(host_dir, baseline=None, max_drop=5.0, gate_label="eagle3", confidence=0.95, fail_inconclusive=False):
    return report.evaluate(report.load(host_dir), baseline, max_drop, gate_label, confidence, fail_inconclusive)


def cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--results-dir", str(tmp_path), "--host", HOST, *args],
                          capture_output=True, text=True, timeout=120)


def check_against_welch(cmp: dict, new: list[float], old: list[float], confidence: float = 0.95) -> dict:
    exp = welch(new, old, confidence)
    assert cmp["test"] == "Welch's t-test"
    assert cmp["n"] == len(new) and cmp["reference_n"] == len(old)
    assert cmp["diff"] == pytest.approx(exp["diff"], rel=1e-9)
    assert cmp["p"] == pytest.approx(exp["p"], rel=1e-6)
    assert cmp["ci"] == pytest.approx(list(exp["ci"]), rel=1e-6)
    assert cmp["df"] == pytest.approx(exp["df"], rel=1e-9)
    assert cmp["diff_pct"] == pytest.approx(exp["diff"] / exp["old_mean"] * 100, rel=1e-9)
    assert cmp["ci_pct"] == pytest.approx([c / exp["old_mean"] * 100 for c in exp["ci"]], rel=1e-6)
    assert cmp["verdict"] == expected_verdict(exp, confidence)
    return exp


# ------------------------------------------------------------------ the acceptance cases

def test_real_ten_percent_drop_at_low_noise_fails(tmp_path):
    old, new = data.normal(11, 10, 100.0, 1.0), data.normal(12, 10, 90.0, 0.9)  # 1% run-to-run noise
    host_dir = history(tmp_path, old, new)
    ev = evaluate(host_dir)
    cmp = ev["rows"][0]["vs_previous"]
    exp = check_against_welch(cmp, new, old)
    assert exp["p"] < 1e-6 and cmp["verdict"] == "slower"
    assert cmp["ci"][0] < -10.0 < cmp["ci"][1]  # the true difference is inside the interval
    assert cmp["runs_needed"] is None and cmp["runs_needed_text"] == "-"
    assert len(ev["failures"]) == 1 and "below the previous session" in ev["failures"][0]
    assert "slower" in ev["failures"][0] and "the gate allows 5.0%" in ev["failures"][0]
    proc = cli(tmp_path, "--no-plot")
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert out["rows"][0]["vs_previous"]["verdict"] == "slower" and out["failures"] == ev["failures"]
    assert "- FAIL: [eagle3]" in (host_dir / "report.md").read_text()


def test_apparent_six_percent_drop_at_ten_percent_noise_is_inconclusive(tmp_path):
    old, new = data.exactly(21, 10, 100.0, 10.0), data.exactly(22, 10, 94.0, 9.4)  # 10% noise, 6% apparent drop
    host_dir = history(tmp_path, old, new)
    ev = evaluate(host_dir)
    cmp = ev["rows"][0]["vs_previous"]
    exp = check_against_welch(cmp, new, old)
    assert cmp["diff_pct"] == pytest.approx(-6.0)
    assert exp["p"] > 0.05 and cmp["verdict"] == "inconclusive"
    # Runs needed: at least what a z-test needs, a little more for the t-test's estimated variance,
    # and the power a simulation of that many runs per session finds is 80%.
    n_z = normal_sample_size(exp["diff"], exp["v1"], exp["v2"])
    assert math.ceil(n_z) <= cmp["runs_needed"] <= math.ceil(n_z) + 3, (n_z, cmp["runs_needed"])
    assert monte_carlo_power(exp["diff"], exp["v1"], exp["v2"], cmp["runs_needed"]) == pytest.approx(0.8, abs=0.02)
    assert monte_carlo_power(exp["diff"], exp["v1"], exp["v2"], cmp["runs_needed"] - 4) < 0.8
    assert cmp["runs_needed_text"] == str(cmp["runs_needed"])
    assert ev["failures"] == [] and len(ev["notes"]) == 1 and "cannot tell this drop from noise" in ev["notes"][0]
    # Passes by default (reported), fails when asked.
    proc = cli(tmp_path, "--no-plot")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (host_dir / "report.md").read_text()
    assert "- pass" in text and "- note: [eagle3]" in text and f"| **inconclusive** | {cmp['runs_needed']} |" in text
    proc = cli(tmp_path, "--no-plot", "--fail-inconclusive")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["failures"]) == 1 and "--fail-inconclusive" in out["failures"][0]
    assert str(cmp["runs_needed"]) in out["failures"][0]


def test_significant_three_percent_drop_passes_a_five_percent_gate(tmp_path):
    old, new = data.normal(31, 10, 100.0, 1.0), data.normal(32, 10, 97.0, 0.97)
    host_dir = history(tmp_path, old, new)
    ev = evaluate(host_dir)
    cmp = ev["rows"][0]["vs_previous"]
    exp = check_against_welch(cmp, new, old)
    assert exp["p"] < 0.001 and cmp["verdict"] == "slower"
    assert -5.0 < cmp["diff_pct"] < -1.0
    assert ev["failures"] == [] and "within the 5.0% the gate allows" in ev["notes"][0]
    assert cli(tmp_path, "--no-plot").returncode == 0
    # The same drop fails a 2% gate.
    proc = cli(tmp_path, "--no-plot", "--max-drop-pct", "2")
    assert proc.returncode == 1 and "the gate allows 2.0%" in json.loads(proc.stdout)["failures"][0]


def test_reference_figures_get_a_verdict_and_runs_needed(tmp_path):
    """Ten EAGLE-3 runs 87.5-103.5 around 96.1 against the baseline's 92.6: is the 3.8% real?"""
    eagle3, baseline = data.SEED_EAGLE3, data.SEED_BASELINE
    assert (min(eagle3), max(eagle3), len(eagle3)) == (87.5, 103.5, 10)
    assert statistics.fmean(eagle3) == pytest.approx(96.1) and statistics.fmean(baseline) == pytest.approx(92.6)
    host_dir = tmp_path / HOST
    data.write(host_dir, NEW, "baseline", baseline)
    data.write(host_dir, NEW, "eagle3", eagle3, accept=2.4)
    ev = evaluate(host_dir)
    ab = ev["ab"]
    exp = check_against_welch(ab, eagle3, baseline)
    assert ev["speedup"] == pytest.approx(96.1 / 92.6)
    assert exp["p"] > 0.05 and ab["verdict"] == "inconclusive" and ab["significant"] is False
    n_z = normal_sample_size(exp["diff"], exp["v1"], exp["v2"])
    assert math.ceil(n_z) <= ab["runs_needed"] <= math.ceil(n_z) + 3
    assert monte_carlo_power(exp["diff"], exp["v1"], exp["v2"], ab["runs_needed"]) == pytest.approx(0.8, abs=0.02)
    proc = cli(tmp_path, "--no-plot")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (host_dir / "report.md").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("EAGLE-3 speedup"))
    assert f"**{96.1 / 92.6:.3f}x**" in line and "**not significant**" in line and "inconclusive" in line
    assert f"p={exp['p']:.4f}" in line and f"about {ab['runs_needed']} runs per label" in line
    lo, hi = exp["ci"]
    assert f"95% CI {lo:+.1f} to {hi:+.1f} tok/s" in line
    row = next(ln for ln in text.splitlines() if ln.startswith("| eagle3 | baseline (A/B"))
    assert f"| **inconclusive** | {ab['runs_needed']} |" in row and "| 92.6 (10) | 96.1 (10) |" in row
    # At 80% confidence the same data call EAGLE-3 faster (p is between 0.05 and 0.2).
    assert 0.05 < exp["p"] < 0.2
    proc = cli(tmp_path, "--no-plot", "--confidence", "0.8")
    assert proc.returncode == 0
    ab80 = json.loads(proc.stdout)["ab"]
    assert ab80["verdict"] == "faster" and ab80["significant"] is True and ab80["runs_needed"] is None
    assert ab80["ci"] == pytest.approx(list(welch(eagle3, baseline, 0.8)["ci"]), rel=1e-6)
    assert "**significant**: EAGLE-3 is faster at 80% confidence" in (host_dir / "report.md").read_text()


# ------------------------------------------------------------------ the configured baseline

def test_configured_baseline_is_a_one_sample_test(tmp_path):
    new = data.normal(41, 10, 90.0, 2.0)
    host_dir = tmp_path / HOST
    data.write(host_dir, NEW, "eagle3", new)
    ev = evaluate(host_dir, baseline=96.1)
    cmp = ev["rows"][0]["vs_baseline"]
    exp = one_sample(new, 96.1)
    assert cmp["test"] == "one-sample t-test" and cmp["reference_n"] is None
    assert cmp["p"] == pytest.approx(exp["p"], rel=1e-6) and cmp["ci"] == pytest.approx(list(exp["ci"]), rel=1e-6)
    assert cmp["verdict"] == expected_verdict(exp) == "slower"
    assert len(ev["failures"]) == 1 and "below the configured baseline 96.1 tok/s" in ev["failures"][0]
    assert cli(tmp_path, "--no-plot", "--baseline-tok-s", "96.1").returncode == 1
    # The baseline applies to --gate-label only.
    assert cli(tmp_path, "--no-plot", "--baseline-tok-s", "96.1", "--gate-label", "baseline").returncode == 0


def test_one_sample_runs_needed_matches_a_simulation(tmp_path):
    new = data.exactly(43, 10, 94.0, 5.0)  # 2.2% below a 96.1 baseline at 5 tok/s spread
    host_dir = tmp_path / HOST
    data.write(host_dir, NEW, "eagle3", new)
    cmp = evaluate(host_dir, baseline=96.1)["rows"][0]["vs_baseline"]
    assert cmp["verdict"] == expected_verdict(one_sample(new, 96.1)) == "inconclusive"
    n = cmp["runs_needed"]
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert math.ceil(z ** 2 * 25.0 / 2.1 ** 2) <= n <= math.ceil(z ** 2 * 25.0 / 2.1 ** 2) + 3
    rng = np.random.default_rng(3)
    p = stats.ttest_1samp(rng.normal(-2.1, 5.0, size=(20000, n)), 0.0, axis=1).pvalue
    assert float(np.mean(p < 0.05)) == pytest.approx(0.8, abs=0.02)


# ------------------------------------------------------------------ the statistics' edges

def test_power_grows_with_runs_and_matches_a_simulation():
    powers = [report.power(3.0, 25.0, 16.0, n, 0.95) for n in (2, 5, 10, 20, 40, 80)]
    assert powers == sorted(powers) and powers[0] < 0.1 and powers[-1] > 0.97
    # The noncentral t with the Welch-Satterthwaite df of the true variances: close from about 8 runs on,
    # a little optimistic below (the estimated df of a real test is smaller).
    for n in (8, 15, 30):
        assert report.power(3.0, 25.0, 16.0, n, 0.95) == pytest.approx(monte_carlo_power(3.0, 25.0, 16.0, n), abs=0.015)
    assert report.power(3.0, 25.0, 16.0, 3, 0.95) == pytest.approx(monte_carlo_power(3.0, 25.0, 16.0, 3), abs=0.04)
    # Far in the tail scipy's noncentral t is unstable; the power stays a probability.
    assert report.power(3.5, 22.4, 19.1, 5000, 0.95) == pytest.approx(1.0)
    assert report.runs_needed(0.0, 25.0, 16.0, 0.95) is None
    assert report.runs_needed(1e-6, 25.0, 16.0, 0.95) is None  # beyond MAX_RUNS
    assert report.runs_needed(50.0, 1.0, 1.0, 0.95) == 2


def stats_power(diff: float, var_new: float, var_ref: float | None, n: int, confidence: float) -> float:
    """The power from scipy.stats' own t and noncentral t distributions."""
    if var_ref is None:
        se2, df = var_new / n, n - 1.0
    else:
        se2 = (var_new + var_ref) / n
        df = (var_new + var_ref) ** 2 * (n - 1) / (var_new ** 2 + var_ref ** 2)
    crit, ncp = stats.t.ppf(0.5 + confidence / 2, df), abs(diff) / math.sqrt(se2)
    return min(1.0, float(stats.nct.sf(crit, df, ncp) + stats.nct.sf(crit, df, -ncp)))


def test_power_and_tests_agree_with_scipy_stats():
    """The report reads the distributions from scipy.special (a quarter of scipy.stats' import time):
    the same figures as scipy.stats, also where scipy.special.nctdtr returns nan (large ncp)."""
    from scipy import special
    assert math.isnan(special.nctdtr(2.0, -12.0, 12.0))  # a region where the sum of two sf is needed
    for diff, v1, v2 in [(3.0, 25.0, 16.0), (0.2, 1.0, 9.0), (12.0, 1.0, 1.0), (3.5, 22.4, 19.1), (1.0, 4.0, None)]:
        for n in (2, 3, 5, 10, 40, 400):
            for confidence in (0.9, 0.95, 0.99):
                assert report.power(diff, v1, v2, n, confidence) == pytest.approx(
                    stats_power(diff, v1, v2, n, confidence), rel=1e-9, abs=1e-12)
    rng = np.random.default_rng(11)
    for n1, n2 in [(2, 2), (3, 10), (10, 10), (25, 4)]:
        new, old = list(rng.normal(100, 3, n1)), list(rng.normal(97, 6, n2))
        res, ref = report.t_test(new, old, statistics.fmean(old), 0.9), stats.ttest_ind(new, old, equal_var=False)
        assert res["p"] == pytest.approx(ref.pvalue, rel=1e-9) and res["df"] == pytest.approx(ref.df, rel=1e-9)
        assert res["ci"] == pytest.approx(tuple(ref.confidence_interval(0.9)), rel=1e-9)
        res, ref = report.t_test(new, None, 98.0, 0.99), stats.ttest_1samp(new, 98.0)
        assert res["p"] == pytest.approx(ref.pvalue, rel=1e-9) and res["df"] == pytest.approx(ref.df, rel=1e-9)
        assert res["ci"] == pytest.approx(tuple(c - 98.0 for c in ref.confidence_interval(0.99)), rel=1e-9)


def test_verdict_flips_at_the_confidence_the_p_value_allows(tmp_path):
    old, new = data.exactly(51, 8, 100.0, 4.0), data.exactly(52, 8, 96.0, 4.0)
    p = welch(new, old)["p"]
    assert 0.01 < p < 0.1  # chosen so that 90% and 99% confidence disagree
    host_dir = history(tmp_path, old, new)
    for confidence in (0.9, 0.99):
        cmp = evaluate(host_dir, confidence=confidence)["rows"][0]["vs_previous"]
        assert cmp["verdict"] == ("slower" if p < 1 - confidence else "inconclusive")
        check_against_welch(cmp, new, old, confidence)


def test_runs_without_spread_are_exact(tmp_path):
    host_dir = history(tmp_path, [50.0] * 5, [40.0] * 5)
    cmp = evaluate(host_dir)["rows"][0]["vs_previous"]
    assert cmp["verdict"] == "slower" and cmp["p"] == 0.0 and cmp["ci"] == [-10.0, -10.0]
    host_dir = history(tmp_path / "same", [50.0] * 5, [50.0] * 5)
    ev = evaluate(host_dir)
    assert ev["rows"][0]["vs_previous"]["verdict"] == "inconclusive" and ev["failures"] == []
    assert ev["rows"][0]["vs_previous"]["runs_needed_text"] == "-"


def test_single_runs_fall_back_to_the_threshold_on_means(tmp_path):
    host_dir = history(tmp_path, [100.0], [90.0])
    ev = evaluate(host_dir)
    cmp = ev["rows"][0]["vs_previous"]
    assert cmp["verdict"] == "untested" and cmp["test"] is None and cmp["p"] is None
    assert len(ev["failures"]) == 1 and "fewer than 2 runs" in ev["failures"][0]
    assert cli(tmp_path, "--no-plot").returncode == 1
    assert "none (fewer than 2 runs)" in (host_dir / "report.md").read_text()
    host_dir = history(tmp_path / "small", [100.0], [97.0])
    assert evaluate(host_dir)["failures"] == []


def test_an_improvement_is_faster_and_passes(tmp_path):
    old, new = data.normal(61, 10, 90.0, 1.0), data.normal(62, 10, 100.0, 1.0)
    host_dir = history(tmp_path, old, new)
    ev = evaluate(host_dir, fail_inconclusive=True)
    check_against_welch(ev["rows"][0]["vs_previous"], new, old)
    assert ev["rows"][0]["vs_previous"]["verdict"] == "faster" and ev["failures"] == [] and ev["notes"] == []


def test_inconclusive_drop_within_the_gate_passes_even_when_inconclusive_fails(tmp_path):
    old, new = data.exactly(71, 10, 100.0, 10.0), data.exactly(72, 10, 98.0, 9.8)
    host_dir = history(tmp_path, old, new)
    ev = evaluate(host_dir, fail_inconclusive=True)
    assert ev["rows"][0]["vs_previous"]["verdict"] == "inconclusive"
    assert ev["failures"] == [] and ev["notes"] == []


def test_failed_benchmark_in_the_newest_session_fails_the_gate(tmp_path):
    host_dir = tmp_path / HOST
    data.write(host_dir, OLD, "eagle3", [100.0, 101.0])
    data.write(host_dir, NEW, "eagle3", [99.0], failure="1 of 2 attempted runs failed")
    ev = evaluate(host_dir)
    assert ev["failures"] == ["[eagle3] the benchmark itself failed: 1 of 2 attempted runs failed"]
    assert cli(tmp_path, "--no-plot").returncode == 1


# ------------------------------------------------------------------ the command line and exit codes

@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.5", "nan", "high"])
def test_confidence_outside_zero_one_is_unusable(tmp_path, value):
    history(tmp_path, [100.0, 101.0], [99.0, 100.0])
    proc = cli(tmp_path, "--no-plot", "--confidence", value)
    assert proc.returncode == 2 and "--confidence" in proc.stderr, proc.stderr
    assert not (tmp_path / HOST / "report.md").exists()


def test_unusable_input_exits_2(tmp_path):
    proc = cli(tmp_path, "--no-plot")  # no directory for the host
    assert proc.returncode == 2 and "no such directory" in proc.stderr
    (tmp_path / HOST).mkdir()
    proc = cli(tmp_path, "--no-plot")
    assert proc.returncode == 2 and "no benchmark results" in proc.stderr
    (tmp_path / HOST / "x.json").write_text("{not json")
    proc = cli(tmp_path, "--no-plot")
    assert proc.returncode == 2 and "not JSON" in proc.stderr
    history(tmp_path, [100.0, 101.0], [99.0, 100.0])
    assert cli(tmp_path, "--no-plot", "--max-drop-pct", "-1").returncode == 2
    assert cli(tmp_path, "--no-plot", "--no-such-option").returncode == 2


def test_main_in_process_returns_the_exit_status_and_prints_json(tmp_path, capsys):
    host_dir = history(tmp_path, data.normal(81, 10, 100.0, 1.0), data.normal(82, 10, 80.0, 1.0))
    argv = ["--results-dir", str(tmp_path), "--host", HOST, "--no-plot"]
    assert report.main(argv) == 1
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"host", "session", "confidence", "rows", "speedup", "ab", "failures", "notes", "report"}
    assert out["session"] == NEW and out["confidence"] == 0.95 and out["report"] == str(host_dir / "report.md")
    assert report.main(argv + ["--max-drop-pct", "25"]) == 0
    assert report.main(argv + ["--confidence", "0.999", "--max-drop-pct", "25", "--fail-inconclusive"]) == 0
