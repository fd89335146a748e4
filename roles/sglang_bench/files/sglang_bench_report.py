#!/usr/bin/env python3
"""Compare a host's newest benchmark with its history and a baseline; gate regressions.

Runs on the controller over ``bench-results/<host>/*.json`` (results of the benchmark client
sglang_bench.py, fetched by the sglang_bench role). It writes, next to them:

* ``report.md``: the newest session's figures per label (mean tok/s and range, the
  reference method), the comparison with the previous session of the same label and
  with the configured baseline, the A/B's ratio and difference (B against A, --ab; the EAGLE-3
  speedup when the session measured both ``baseline`` and ``eagle3``), the throughput per
  concurrency of a sweep, and the
  history table (tok/s per release);
* ``history.png``: mean tok/s per session and label, min-max as error bars, x labelled
  with the release that served.

A verdict, not a threshold: every comparison uses the per-run tok/s the result files keep.
Two sessions: Welch's t-test (two-sided; unequal variances, since EAGLE-3's runs spread
more than the baseline's) on the difference of the means, with its confidence interval.
A configured baseline is a bare mean with no runs: a one-sample t-test against it. The
verdict is ``faster`` or ``slower`` when p < 1 - --confidence, else ``inconclusive`` (no
difference the data can tell apart), reported with the runs per session that would
resolve a difference of the observed size: the smallest n at which the same two-sided
t-test reaches 80% power (noncentral t distribution, the observed run-to-run standard
deviations, n runs in each session). A session with fewer than two runs cannot be tested
(``untested``); the threshold on the means decides there, as it always did.

Sessions are restarts: a start of the server has its own speed (measured on real SGLang 0.5.17 on an
H200: session means of the same settings moved by 0.8% to 13.7% between restarts of a launch-bound toy,
docs/validation/sglang_serve-h200, and by 0.1-0.9% for an 8B shape with CUDA graphs, issue 40), which no
number of runs in one session shows. So every comparison of two sessions adds a variance, (CV x mean)^2
per session. The CV is measured from this host's repeated starts of one setting (label, release,
concurrency and server settings): its earlier sessions and the newest session's own repeated starts (an
A/B's interleaved A/B/A/B), pooled (restart_spread), with its degrees of freedom in the test
(Satterthwaite); below MIN_SPREAD_DF of them, the stated --restart-cv-pct stands in, as a known figure
(--no-restart-cv-from-history: always). A configured baseline is a figure, not a start: one session's
share. With that variance the runs needed may be "more sessions (restarts), not runs". A label the
newest session measured on several starts (an A/B with --ab, or the session measuring both baseline and
eagle3) is one setting measured on each: its mean is the mean of its starts' means, and it is compared
over starts (starts_test), the runs needed becoming the starts needed.

Exit status 1 when the gate fails: a label's newest session is ``slower`` than the previous
session of that label, or than --baseline-tok-s (for --gate-label), by more than
--max-drop-pct; with --fail-inconclusive also an ``inconclusive`` drop of more than
--max-drop-pct. A failed benchmark in the newest session fails the gate too. Exit status 2
on unusable input (no results, a file that is not JSON, bad options).

Usage: sglang_bench_report.py --results-dir bench-results --host gpu1 [--baseline-tok-s 96.1]
       [--max-drop-pct 5] [--gate-label eagle3] [--confidence 0.95] [--restart-cv-pct 2]
       [--no-restart-cv-from-history] [--ab LABEL_A LABEL_B] [--fail-inconclusive]
       [--no-plot]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

# Power the runs-needed figure is computed for, and the most runs it will name.
POWER = 0.8
MAX_RUNS = 10000
TWO_SAMPLE_TEST = "Welch's t-test"
ONE_SAMPLE_TEST = "one-sample t-test"


class Unusable(Exception):
    """The input cannot be reported on (exit status 2)."""


def load(host_dir: Path) -> list[dict]:
    """Every result of the host, oldest first; sessions come from the file names."""
    if not host_dir.is_dir():
        raise Unusable(f"{host_dir}: no such directory")
    results = []
    for path in sorted(host_dir.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError as exc:
            raise Unusable(f"{path}: not JSON ({exc})") from exc
        if not isinstance(doc, dict) or doc.get("schema") != "sglang-bench/1":
            continue
        env = doc.get("environment") or {}
        doc["_session"] = env.get("session") or path.stem.split("-", 1)[0]
        doc["_release"] = env.get("release_id") or "?"
        doc["_file"] = path.name
        results.append(doc)
    results.sort(key=lambda d: (d["_session"], d.get("started_at") or ""))
    return results


def pct(new: float, old: float) -> float:
    return (new - old) / old * 100.0


def run_values(doc: dict) -> list[float]:
    """The tok/s of every successful run of a result (what the comparisons work on)."""
    return [float(r["tok_s"]) for r in doc.get("runs") or []
            if isinstance(r, dict) and r.get("ok") and isinstance(r.get("tok_s"), (int, float))
            and not isinstance(r.get("tok_s"), bool)]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _t_dist():
    """(cdf, ppf) of Student's t: scipy.special's stdtr and stdtrit, what scipy.stats.t calls
    (scipy.special imports in a quarter of the time scipy.stats takes: this runs once per bench)."""
    from scipy import special

    return special.stdtr, special.stdtrit


def _nct_sf():
    """The survival function of the noncentral t, sf(x, df, nc): Boost's, the ufunc that
    scipy.stats.nct.sf calls (scipy is pinned in requirements.txt; the tests compare the two)."""
    from scipy.special import _ufuncs

    return _ufuncs._nct_sf


def t_test(new: list[float], ref: list[float] | None, ref_mean: float, confidence: float,
           extra_var: float = 0.0, extra_df: float = math.inf) -> dict:
    """Difference of means (new - reference), its confidence interval, the test and its p-value.

    ``ref`` None: the reference is the constant ``ref_mean`` (one-sample t-test); otherwise
    Welch's t-test of the two samples (Welch-Satterthwaite degrees of freedom). A sample
    without spread (all runs equal) is exact. ``extra_var``: a variance of the difference beyond
    the runs' (the restarts' speed factors, restart_var), added to the standard error's square;
    ``extra_df``: the degrees of freedom of its estimate (the sessions it was estimated from,
    restart_spread), in the Satterthwaite sum like the runs' parts; infinite for a stated figure.
    """
    diff = statistics.fmean(new) - ref_mean
    var_new, var_ref = statistics.variance(new), statistics.variance(ref) if ref is not None else 0.0
    if var_new + var_ref + extra_var == 0:
        return {"diff": diff, "ci": (diff, diff), "p": 1.0 if diff == 0 else 0.0, "df": None}
    a = var_new / len(new)
    b = var_ref / len(ref) if ref is not None else 0.0
    se = math.sqrt(a + b + extra_var)
    parts = a ** 2 / (len(new) - 1) + (b ** 2 / (len(ref) - 1) if ref is not None else 0.0) + _df_part(extra_var, extra_df)
    df = (a + b + extra_var) ** 2 / parts if parts > 0 else math.inf
    return _t_result(diff, se, df, confidence)


def _df_part(var: float, df: float) -> float:
    """A variance's share of the Satterthwaite denominator: var^2 / df (0 for a known one)."""
    return 0.0 if var == 0 or math.isinf(df) else var ** 2 / df


def _t_result(diff: float, se: float, df: float, confidence: float) -> dict:
    cdf, ppf = _t_dist()
    half = float(ppf(df, 0.5 + confidence / 2)) * se
    p = 2 * float(cdf(df, -abs(diff) / se))
    return {"diff": diff, "ci": (diff - half, diff + half), "p": min(1.0, p), "df": _finite(df), "se": se}


def power(diff: float, var_new: float, var_ref: float | None, n: int, confidence: float,
          n_ref: int | None = None, extra_var: float = 0.0, extra_df: float = math.inf) -> float:
    """Power of the two-sided t-test (Welch's, or one-sample when var_ref is None) with n runs
    in the new session (and n_ref in the reference, n unless given) to detect a true difference
    ``diff``, given the run-to-run variances and the restarts' ``extra_var`` (which no number of
    runs reduces), estimated with ``extra_df`` degrees of freedom (t_test)."""
    n_ref = n if n_ref is None else n_ref
    a = var_new / n
    b = 0.0 if var_ref is None else var_ref / n_ref
    se2 = a + b + extra_var
    parts = a ** 2 / (n - 1) + (0.0 if var_ref is None else b ** 2 / (n_ref - 1)) + _df_part(extra_var, extra_df)
    df = se2 ** 2 / parts if parts > 0 else max(n - 1.0, 1.0)
    if se2 == 0:
        return 1.0 if diff else 0.0
    return power_at(abs(diff) / math.sqrt(se2), df, confidence)


def power_at(ncp: float, df: float, confidence: float, sides: int = 2) -> float:
    """Power of a t-test at level 1 - confidence (two-sided, or one-sided in the direction of the
    difference) whose statistic is noncentral t(df, ncp)."""
    crit = float(_t_dist()[1](df, 1 - (1 - confidence) / sides))
    # P(T > crit) + P(T < -crit) for T ~ noncentral t(df, ncp); the lower tail as the upper tail
    # of -T ~ nct(df, -ncp), since scipy's nct.cdf (and scipy.special.nctdtr) far below a large
    # ncp returns nan.
    sf = _nct_sf()
    tails = (ncp, -ncp) if sides == 2 else (ncp,)
    return min(1.0, sum(max(0.0, float(sf(crit, df, nc))) for nc in tails))


def runs_needed(diff: float, var_new: float, var_ref: float | None, confidence: float,
                target: float = POWER, extra_var: float = 0.0, extra_df: float = math.inf) -> int | None:
    """Smallest runs per session (2..MAX_RUNS) at which the test resolves ``diff`` with power
    ``target``; None when no difference was observed or more than MAX_RUNS would be needed
    (always, when the restarts' extra_var alone hides the difference)."""
    def pw(n: int) -> float:
        return power(diff, var_new, var_ref, n, confidence, extra_var=extra_var, extra_df=extra_df)

    if diff == 0 or pw(MAX_RUNS) < target:
        return None
    if pw(2) >= target:
        return 2
    low, high = 2, MAX_RUNS  # power(low) < target <= power(high); power grows with n
    while high - low > 1:
        mid = (low + high) // 2
        if pw(mid) >= target:
            high = mid
        else:
            low = mid
    return high


def restart_var(restart_cv: float, new_mean: float, ref_mean: float, ref_is_a_session: bool) -> float:
    """The variance the restarts add to a difference of means: each session ran on its own start of the
    server, and a start's speed factor (CV restart_cv) moves the whole session's mean; a configured
    baseline is a figure, not a start (its own factor, if any, is in the figure)."""
    return (restart_cv * new_mean) ** 2 + ((restart_cv * ref_mean) ** 2 if ref_is_a_session else 0.0)


# ---------------------------------------------------------------- the spread between starts

# Degrees of freedom (sessions beyond the first, summed over the settings measured more than once)
# from which a measured start-to-start spread replaces the stated one.
MIN_SPREAD_DF = 2


def fvar(values: list[float]) -> float:
    """The sample variance in floating point (statistics.variance computes it in exact fractions: the
    tuner's replay calls this thousands of times)."""
    mean = math.fsum(values) / len(values)
    return math.fsum((x - mean) ** 2 for x in values) / (len(values) - 1)


def restart_spread(groups: list[list[list[float]]]) -> dict | None:
    """The start-to-start spread measured from repeated starts: ``groups`` holds, per setting (one label,
    release and server settings; or one point of a tuning), the per-run values of each of its starts.
    A one-way random-effects estimate pooled over the settings with two or more starts: the variance of
    their starts' relative means (``between``) less what their runs' spread explains (``within``, the
    mean squared standard error of a start's mean), at least 0; ``df`` = the starts beyond the first of
    each setting, summed. None when no setting has two starts."""
    df, between, within, starts, settings = 0, 0.0, 0.0, 0, 0
    for runs in groups:
        usable = [v for v in runs if len(v) >= 2]
        if len(usable) < 2:
            continue
        means = [statistics.fmean(v) for v in usable]
        grand = statistics.fmean(means)
        k = len(usable)
        between += (k - 1) * fvar([m / grand for m in means])
        within += (k - 1) * statistics.fmean(fvar(v) / len(v) for v in usable) / grand ** 2
        df += k - 1
        starts += k
        settings += 1
    if not df:
        return None
    between, within = between / df, within / df
    return {"cv": math.sqrt(max(0.0, between - within)), "df": df, "between_cv": math.sqrt(between),
            "within_cv": math.sqrt(within), "starts": starts, "settings": settings}


def spread_used(measured: dict | None, stated_cv: float) -> dict:
    """The spread a comparison of two starts adds: the measured one (with its degrees of freedom) from
    MIN_SPREAD_DF on, else the stated figure (sglang_bench_restart_cv_pct), taken as known."""
    if measured is not None and measured["df"] >= MIN_SPREAD_DF:
        return {"cv": measured["cv"], "df": measured["df"], "source": "measured"}
    return {"cv": stated_cv, "df": math.inf, "source": "stated"}


def compare(new: list[float], ref: list[float] | None, ref_mean: float, confidence: float,
            restart_cv: float = 0.0, restart_df: float = math.inf) -> dict:
    """One comparison of the newest runs with a reference (earlier runs, or a configured mean), with
    restart_cv, the sessions' between-restart CV, as a variance beside the runs' (estimated with
    restart_df degrees of freedom; infinite: a stated figure)."""
    out = {"test": None, "confidence": confidence, "mean": statistics.fmean(new) if new else None,
           "n": len(new), "reference_mean": ref_mean, "reference_n": len(ref) if ref is not None else None,
           "diff": None, "diff_pct": None, "ci": None, "ci_pct": None, "p": None, "df": None,
           "restart_cv": restart_cv, "restart_df": _finite(restart_df), "verdict": "untested", "runs_needed": None,
           "runs_needed_text": "-", "starts": 1, "reference_starts": 1 if ref is not None else None}
    if len(new) < 2 or (ref is not None and len(ref) < 2):
        return out  # no spread to test against: the threshold on the means decides
    extra = restart_var(restart_cv, statistics.fmean(new), ref_mean, ref is not None)
    res = t_test(new, ref, ref_mean, confidence, extra, restart_df)
    out["test"] = TWO_SAMPLE_TEST if ref is not None else ONE_SAMPLE_TEST
    _verdict(out, res, ref_mean, confidence)
    if out["verdict"] == "inconclusive":
        needed = runs_needed(res["diff"], statistics.variance(new),
                             statistics.variance(ref) if ref is not None else None, confidence, extra_var=extra,
                             extra_df=restart_df)
        out["runs_needed"] = needed
        hidden = extra > 0 and power(res["diff"], 0.0, 0.0 if ref is not None else None, MAX_RUNS, confidence,
                                     extra_var=extra, extra_df=restart_df) < POWER
        out["runs_needed_text"] = (str(needed) if needed is not None else "-" if res["diff"] == 0
                                   else "more sessions (restarts), not runs" if hidden else f">{MAX_RUNS}")
    return out


def _verdict(out: dict, res: dict, ref_mean: float, confidence: float) -> None:
    out.update(diff=res["diff"], p=res["p"], df=res["df"], ci=list(res["ci"]),
               diff_pct=res["diff"] / ref_mean * 100.0, ci_pct=[c / ref_mean * 100.0 for c in res["ci"]])
    out["verdict"] = ("faster" if res["diff"] > 0 else "slower") if res["p"] < 1 - confidence else "inconclusive"


def starts_mean(starts: list[list[float]]) -> float:
    """A setting measured on several starts: the mean of its starts' means (each start one draw of its speed)."""
    return statistics.fmean(statistics.fmean(v) for v in starts)


def starts_test(new: list[list[float]], ref: list[list[float]] | None, ref_mean: float, confidence: float,
                restart_cv: float, restart_df: float = math.inf) -> dict:
    """The difference of two settings' means over their starts (new - reference; reference None: the
    constant ref_mean), each the mean of its starts' means: its variance is each start's runs' (the
    squared standard error of its mean) plus restart_cv of the mean per start, over the starts squared;
    Satterthwaite's degrees of freedom over the runs' parts and the spread's (restart_df)."""
    sides = [(new, statistics.fmean(statistics.fmean(v) for v in new))]
    if ref is not None:
        sides.append((ref, ref_mean))
    var, parts, restart = 0.0, 0.0, 0.0
    for starts, mean in sides:
        k = len(starts)
        for v in starts:
            term = fvar(v) / len(v) / k ** 2
            var += term
            parts += term ** 2 / (len(v) - 1)
        restart += (restart_cv * mean) ** 2 / k
    # one estimate of the spread scales both sides: one term of the Satterthwaite sum
    var += restart
    parts += _df_part(restart, restart_df)
    diff = sides[0][1] - ref_mean
    if var == 0:
        return {"diff": diff, "ci": (diff, diff), "p": 1.0 if diff == 0 else 0.0, "df": None, "se": 0.0}
    return _t_result(diff, math.sqrt(var), var ** 2 / parts if parts > 0 else math.inf, confidence)


def starts_needed(res: dict, new: list[list[float]], ref: list[list[float]] | None, confidence: float,
                  restart_cv: float, restart_df: float, most: int = 50) -> int | None:
    """Starts per setting (alternating, at most `most`) at which the two-sided test resolves the observed
    difference with POWER, each start as spread as those so far; None beyond."""
    def per_start(starts: list[list[float]]) -> float:
        mean = starts_mean(starts)
        return (restart_cv * mean) ** 2 + statistics.fmean(fvar(v) / len(v) for v in starts)

    v_new, v_ref = per_start(new), per_start(ref) if ref is not None else 0.0
    have = len(new) + (len(ref) if ref is not None else 0)
    for k in range(max(len(new), 2), most + 1):
        se2 = (v_new + v_ref) / k
        df = min(restart_df + (2 * k - have if ref is not None else k - have), 1e9) if restart_cv else 1e9
        if se2 > 0 and power_at(abs(res["diff"]) / math.sqrt(se2), max(df, 1.0), confidence) >= POWER:
            return k
    return None


def compare_starts(new: list[list[float]], ref: list[list[float]] | None, ref_mean: float, confidence: float,
                   restart: dict) -> dict:
    """compare() for settings measured on one start or several (the A/B's interleaved starts): with one
    start on each side it is compare() itself; with more, starts_test, and the runs needed become the
    starts needed (runs within a start do not shrink the spread between starts)."""
    if len(new) == 1 and (ref is None or len(ref) == 1):
        return compare(new[0], ref[0] if ref is not None else None, ref_mean, confidence, restart["cv"], restart["df"])
    every_new = [x for v in new for x in v]
    out = {"test": None, "confidence": confidence, "mean": starts_mean(new), "n": len(every_new),
           "reference_mean": ref_mean, "reference_n": sum(len(v) for v in ref) if ref is not None else None,
           "diff": None, "diff_pct": None, "ci": None, "ci_pct": None, "p": None, "df": None,
           "restart_cv": restart["cv"], "restart_df": _finite(restart["df"]), "verdict": "untested",
           "runs_needed": None, "runs_needed_text": "-", "starts": len(new),
           "reference_starts": len(ref) if ref is not None else None}
    if any(len(v) < 2 for v in new) or (ref is not None and any(len(v) < 2 for v in ref)):
        return out
    res = starts_test(new, ref, ref_mean, confidence, restart["cv"], restart["df"])
    out["test"] = (f"{TWO_SAMPLE_TEST} over starts" if ref is not None else f"{ONE_SAMPLE_TEST} over starts")
    _verdict(out, res, ref_mean, confidence)
    if out["verdict"] == "inconclusive":
        needed = starts_needed(res, new, ref, confidence, restart["cv"], restart["df"]) if res["diff"] else None
        out["runs_needed_text"] = ("-" if res["diff"] == 0 else f"{needed} starts per setting" if needed
                                   else "more than 50 starts per setting")
    return out


def fmt_p(p: float | None) -> str:
    if p is None:
        return "-"
    return "p<0.0001" if p < 0.0001 else f"p={p:.4f}"


def fmt_conf(confidence: float) -> str:
    return f"{confidence * 100:g}%"


def evidence(cmp: dict) -> str:
    """The figures behind a verdict, in words."""
    if cmp["test"] is None:
        return "fewer than 2 runs in a session: no test, the threshold on the means decides"
    lo, hi = cmp["ci"]
    text = (f"difference {cmp['diff']:+.1f} tok/s, {fmt_conf(cmp['confidence'])} CI {lo:+.1f} to {hi:+.1f}; "
            f"{cmp['test']} {fmt_p(cmp['p'])}: {cmp['verdict']}")
    if cmp["verdict"] == "inconclusive":
        text += f"; runs per session that would resolve a difference this size: {cmp['runs_needed_text']}"
    return text


def judge(label: str, cmp: dict, against: str, max_drop: float, fail_inconclusive: bool,
          failures: list[str], notes: list[str]) -> None:
    """The gate's decision on one comparison: failures fail it, notes are reported."""
    change = pct(cmp["mean"], cmp["reference_mean"])
    if change >= -max_drop and cmp["verdict"] != "slower":
        return
    what = (f"[{label}] mean {cmp['mean']:.1f} tok/s is {-change:.1f}% below {against} "
            f"({evidence(cmp)})")
    allows = f"the gate allows {max_drop:.1f}%"
    verdict = cmp["verdict"]
    if change < -max_drop and verdict in ("slower", "untested"):
        failures.append(f"{what}; {allows}")
    elif change < -max_drop and verdict == "inconclusive":
        if fail_inconclusive:
            failures.append(f"{what}; the data cannot tell this drop from noise, and inconclusive drops beyond "
                            f"{max_drop:.1f}% fail (--fail-inconclusive)")
        else:
            notes.append(f"{what}; the data cannot tell this drop from noise, so it passes "
                         f"(--fail-inconclusive, sglang_bench_fail_inconclusive in the role, would fail it)")
    elif verdict == "slower":
        notes.append(f"{what}; a real drop, but within the {max_drop:.1f}% the gate allows")


def history_groups(results: list[dict], latest: str) -> list[list[list[float]]]:
    """The host's earlier sessions (the newest one is under test) as the starts of each setting: one label,
    release, concurrency and set of server settings (a server started otherwise, a slowed-down one of a
    test for one, is another setting, whatever its label)."""
    groups: dict[tuple, list[list[float]]] = defaultdict(list)
    for r in results:
        values = run_values(r)
        if r["_session"] < latest and r.get("ok") and len(values) >= 2 and r["_release"] != "?":
            groups[setting_of(r)].append(values)
    return list(groups.values())


def setting_of(r: dict) -> tuple:
    server = json.dumps((r.get("environment") or {}).get("server") or {}, sort_keys=True)
    return (r.get("label") or "", r["_release"], r.get("concurrency") or 1, server)


def history_restart_cv(results: list[dict], latest: str) -> dict | None:
    """The between-restart CV this host's own history shows (restart_spread over history_groups), or None
    below MIN_SPREAD_DF degrees of freedom. Kept for its callers; evaluate() pools the newest session's
    repeated starts (an A/B's) in as well."""
    spread = restart_spread(history_groups(results, latest))
    return spread if spread is not None and spread["df"] >= MIN_SPREAD_DF else None


def evaluate(results: list[dict], baseline: float | None, max_drop: float, gate_label: str,
             confidence: float = 0.95, fail_inconclusive: bool = False, restart_cv: float = 0.0,
             learn: bool = True, ab: tuple[str, str] | None = None) -> dict:
    """The newest session, its comparisons and the gate decision.

    A label the newest session measured on several starts (an A/B's interleaved starts) is one setting
    measured on each: its mean is the mean of its starts' means. The start-to-start spread every
    comparison adds is measured from repeated starts of one setting (learn: this host's earlier sessions
    of one label, release and server settings, and the newest session's repeated starts), with its
    degrees of freedom, from MIN_SPREAD_DF on; below that, the stated restart_cv
    (sglang_bench_restart_cv_pct / 100). ab: the (A, B) labels of an A/B in the newest session (B against
    A); without it, a session that measured both `baseline` and `eagle3` is the EAGLE-3 A/B."""
    if not results:
        raise Unusable("no benchmark results")
    sessions = sorted({r["_session"] for r in results})
    latest = sessions[-1]
    newest = [r for r in results if r["_session"] == latest]
    starts_of: dict[str, list[dict]] = defaultdict(list)  # the newest session's starts per label, in order
    for r in newest:
        starts_of[r.get("label") or ""].append(r)
    # The newest session's own repeated starts of one setting count too (the A/B's A/B/A/B).
    now: dict[tuple, list[list[float]]] = defaultdict(list)
    for r in newest:
        if r.get("ok") and len(run_values(r)) >= 2 and r["_release"] != "?":
            now[setting_of(r)].append(run_values(r))
    history = restart_spread(history_groups(results, latest)) if learn else None
    measured = restart_spread(history_groups(results, latest) + [g for g in now.values() if len(g) > 1]) if learn else None
    used = spread_used(measured, restart_cv)
    findings, failures, notes = [], [], []
    by_session_label: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in results:
        by_session_label[(r["_session"], r.get("label") or "")].append(r)
    for label, docs in starts_of.items():
        bad = [r for r in docs if not r.get("ok") or r.get("mean_tok_s") is None]
        failures += [f"[{label}] the benchmark itself failed: {r.get('failure')}" for r in bad]
        docs = [r for r in docs if r not in bad]
        if not docs:
            continue
        starts = [run_values(r) for r in docs]
        mean = statistics.fmean(r["mean_tok_s"] for r in docs)
        accepts = [a for r in docs if (a := r.get("accept_length") or r.get("server_avg_spec_accept_length"))]
        row = {"label": label, "mean": mean, "min": min(r.get("min_tok_s") or mean for r in docs),
               "max": max(r.get("max_tok_s") or mean for r in docs), "runs": sum(r.get("ok_runs") or 0 for r in docs),
               "starts": len(docs), "concurrency": docs[0].get("concurrency"),
               "aggregate": statistics.fmean(x["aggregate_tok_s"] for x in docs) if all(
                   x.get("aggregate_tok_s") for x in docs) else None,
               "accept": statistics.fmean(accepts) if accepts else None, "release": docs[-1]["_release"]}
        earlier = [s_ for s_ in sessions if s_ < latest and any(
            x.get("ok") and x.get("mean_tok_s") for x in by_session_label.get((s_, label), []))]
        if earlier:
            prev_docs = [x for x in by_session_label[(earlier[-1], label)] if x.get("ok") and x.get("mean_tok_s")]
            prev_mean = statistics.fmean(x["mean_tok_s"] for x in prev_docs)
            row["previous"] = prev_mean
            row["vs_previous_pct"] = pct(mean, prev_mean)
            cmp = compare_starts(starts, [run_values(x) for x in prev_docs], prev_mean, confidence, used)
            cmp["mean"] = mean  # the session's own figure (the same as its runs' mean on one start)
            cmp.update(reference="previous session", reference_session=earlier[-1],
                       reference_release=prev_docs[-1]["_release"])
            row["vs_previous"] = cmp
            judge(label, cmp, f"the previous session ({prev_mean:.1f} tok/s, release {prev_docs[-1]['_release']})",
                  max_drop, fail_inconclusive, failures, notes)
        if baseline and label == gate_label:
            row["vs_baseline_pct"] = pct(mean, baseline)
            cmp = compare_starts(starts, None, baseline, confidence, used)
            cmp["mean"] = mean
            cmp.update(reference="configured baseline", reference_session=None, reference_release=None)
            row["vs_baseline"] = cmp
            judge(label, cmp, f"the configured baseline {baseline:.1f} tok/s", max_drop, fail_inconclusive,
                  failures, notes)
        findings.append(row)
    labels = {row["label"]: row for row in findings}
    if ab is None and "baseline" in labels and "eagle3" in labels:
        ab = ("baseline", "eagle3")
    speedup = ab_cmp = None
    if ab is not None and ab[0] in labels and ab[1] in labels:
        a_row, b_row = labels[ab[0]], labels[ab[1]]
        speedup = b_row["mean"] / a_row["mean"]
        ok = [[run_values(r) for r in starts_of[x] if r.get("ok") and r.get("mean_tok_s") is not None] for x in ab]
        # Every start of either label is a start of the server: the A/B's restarts are in its comparison.
        ab_cmp = compare_starts(ok[1], ok[0], a_row["mean"], confidence, used)
        ab_cmp.update(mean=b_row["mean"], reference=f"{ab[0]}, same session", reference_session=latest,
                      reference_release=a_row["release"], speedup=speedup, labels=list(ab),
                      significant=ab_cmp["verdict"] in ("faster", "slower"))
    elif ab is not None:
        failures.append(f"the A/B of {ab[0]} and {ab[1]} has no successful result of "
                        f"{' and '.join(x for x in ab if x not in labels)} in session {latest}")
    return {"session": latest, "rows": findings, "failures": failures, "notes": notes, "speedup": speedup,
            "ab": ab_cmp, "sessions": sessions, "confidence": confidence,
            "restart_cv": {"used": used["cv"], "df": _finite(used["df"]), "source": used["source"],
                           "stated": restart_cv, "measured": measured, "history": history, "learn": learn}}


def comparison_row(label: str, against: str, cmp: dict) -> str:
    ref_n = f" ({cmp['reference_n']})" if cmp["reference_n"] is not None else " (configured)"
    if (cmp.get("reference_starts") or 1) > 1:
        ref_n = f" ({cmp['reference_n']} runs, {cmp['reference_starts']} starts)"
    new_n = f"{cmp['n']}" if (cmp.get("starts") or 1) == 1 else f"{cmp['n']} runs, {cmp['starts']} starts"
    if cmp["test"] is None:
        diff = f"{cmp['mean'] - cmp['reference_mean']:+.1f}"
        diff_pct = f"{pct(cmp['mean'], cmp['reference_mean']):+.1f}%"
        test = "none (fewer than 2 runs)"
    else:
        lo, hi = cmp["ci"]
        plo, phi = cmp["ci_pct"]
        diff = f"{cmp['diff']:+.1f} ({lo:+.1f} to {hi:+.1f})"
        diff_pct = f"{cmp['diff_pct']:+.1f}% ({plo:+.1f}% to {phi:+.1f}%)"
        test = f"{cmp['test']}, {fmt_p(cmp['p'])}"
    cells = [label, against, f"{cmp['reference_mean']:.1f}{ref_n}", f"{cmp['mean']:.1f} ({new_n})", diff, diff_pct,
             test, f"**{cmp['verdict']}**", cmp["runs_needed_text"] if cmp["verdict"] == "inconclusive" else "-"]
    return "| " + " | ".join(cells) + " |"


def ab_line(ev: dict) -> str:
    ab, conf = ev["ab"], fmt_conf(ev["confidence"])
    a_label, b_label = ab["labels"] if ab else ("baseline", "eagle3")
    eagle = (a_label, b_label) == ("baseline", "eagle3")
    line = (f"EAGLE-3 speedup over the no-speculation baseline: **{ev['speedup']:.3f}x**" if eagle else
            f"A/B, {b_label} against {a_label}: **{ev['speedup']:.3f}x**")
    if ab is None or ab["test"] is None:
        return line + " (fewer than 2 runs per label: no test)."
    lo, hi = ab["ci"]
    plo, phi = ab["ci_pct"]
    starts = f"; {ab['starts']} and {ab['reference_starts']} starts, interleaved" if ab["starts"] > 1 else ""
    line += (f" ({ab['diff']:+.1f} tok/s, {conf} CI {lo:+.1f} to {hi:+.1f} tok/s, {ab['diff_pct']:+.1f}% "
             f"({plo:+.1f}% to {phi:+.1f}%); {ab['test']} {fmt_p(ab['p'])}{starts}): ")
    if ab["verdict"] in ("faster", "slower"):
        return line + (f"**significant**: {'EAGLE-3' if eagle else b_label} is {ab['verdict']} "
                       f"{'than the baseline ' if ab['verdict'] == 'slower' and eagle else ''}at {conf} confidence "
                       f"(verdict: {ab['verdict']}).")
    unit = "" if ab["starts"] > 1 else " runs per label"
    return line + (f"**not significant**: the data cannot tell it from no difference (verdict: inconclusive); "
                   f"about {ab['runs_needed_text']}{unit} would resolve a difference of this size.")


def restart_line(restart: dict) -> str:
    """What the comparisons allow for the restarts between sessions, and where the figure comes from."""
    measured = restart.get("measured")
    if restart["source"] == "measured":
        return (f"Between restarts: each session ran on its own start of the server, and a start's speed moves "
                f"the whole session, which its runs do not show. Measured on this host from repeated starts of "
                f"one setting ({measured['starts']} starts of {measured['settings']} label, release and server "
                f"settings: {restart['df']} degrees of freedom): {restart['used'] * 100:.2f}% of a session's mean "
                f"(their means spread {measured['between_cv'] * 100:.2f}%, their runs explain "
                f"{measured['within_cv'] * 100:.2f}%); every comparison of two sessions adds it, with those "
                f"degrees of freedom (the stated sglang_bench_restart_cv_pct, {restart['stated'] * 100:.1f}%, "
                f"is used only until the host has measured its own).")
    why = (f"this host has {measured['df'] if measured else 0} of the {MIN_SPREAD_DF} repeated starts of one label, "
           f"release and server settings that measure it" if restart.get("learn")
           else "not measured from the history (--no-restart-cv-from-history)")
    return (f"Between restarts: each session ran on its own start of the server, and a start's speed moves the "
            f"whole session, which its runs do not show; the comparisons add {restart['used'] * 100:.1f}% of each "
            f"session's mean as a known standard deviation (stated: sglang_bench_restart_cv_pct; {why}).")


def markdown(host: str, results: list[dict], ev: dict, baseline: float | None, max_drop: float, plot: bool,
             fail_inconclusive: bool = False) -> str:
    conf = fmt_conf(ev["confidence"])
    out = [f"# Benchmark report: {host}", "",
           f"Newest session `{ev['session']}`; gate: a drop of more than {max_drop:.1f}% fails when it is "
           f"significant at {conf} confidence"
           + ("; so does one the data cannot tell from noise (inconclusive)" if fail_inconclusive
              else "; a drop the data cannot tell from noise is inconclusive and passes")
           + (f"; configured baseline {baseline:.1f} tok/s." if baseline else "."), "",
           restart_line(ev["restart_cv"]), ""]
    out += ["| label | concurrency | mean tok/s | range | runs | accept length | aggregate tok/s | vs previous | vs baseline "
            "| release |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    compared = []
    for r in ev["rows"]:
        cells = [r["label"] or "-", str(r["concurrency"]), f"{r['mean']:.1f}",
                 f"{r['min']:.1f}-{r['max']:.1f}" if r["min"] is not None else "-", str(r["runs"]),
                 f"{r['accept']:.2f}" if r["accept"] else "-",
                 f"{r['aggregate']:.1f}" if r["aggregate"] else "-",
                 f"{r['vs_previous_pct']:+.1f}% {r['vs_previous']['verdict']}" if "vs_previous_pct" in r else "-",
                 f"{r['vs_baseline_pct']:+.1f}% {r['vs_baseline']['verdict']}" if "vs_baseline_pct" in r else "-",
                 r["release"]]
        out.append("| " + " | ".join(cells) + " |")
        if "vs_previous" in r:
            cmp = r["vs_previous"]
            compared.append(comparison_row(r["label"] or "-", f"previous session `{cmp['reference_session']}` "
                                           f"({cmp['reference_release']})", cmp))
        if "vs_baseline" in r:
            compared.append(comparison_row(r["label"] or "-", "configured baseline", r["vs_baseline"]))
    if ev["ab"] is not None:
        a_label, b_label = ev["ab"]["labels"]
        compared.append(comparison_row(b_label, f"{a_label} (A/B, same session)", ev["ab"]))
    if ev["speedup"]:
        out += ["", ab_line(ev)]
    if compared:
        out += ["", "## Comparisons", "",
                (f"Newest session's per-run tok/s against the reference's: difference of the means (newest minus "
                f"reference) with its {conf} confidence interval, in tok/s and in % of the reference mean; "
                f"{TWO_SAMPLE_TEST} (two-sided, unequal variances) between sessions, a {ONE_SAMPLE_TEST} against "
                f"a configured baseline (a mean without runs). Verdict: faster or slower when "
                f"p < {1 - ev['confidence']:.3g}, else inconclusive (no difference the data can tell apart). "
                f"Runs needed (inconclusive only): runs per session at which the same test detects a difference "
                f"of the observed size with {POWER:.0%} power (noncentral t, the observed run-to-run spread)."), "",
                ("| label | against | reference mean (n) | newest mean (n) | difference tok/s (CI) | difference % (CI) "
                "| test | verdict | runs needed |"),
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        out += compared
    out += ["", "## Gate", ""]
    out += [f"- FAIL: {f}" for f in ev["failures"]] or ["- pass"]
    out += [f"- note: {n}" for n in ev["notes"]]
    out += ["", "## History (mean tok/s per session)", "", "| session | label | release | mean | range | concurrency |",
            "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if r.get("mean_tok_s") is None:
            continue
        out.append(f"| {r['_session']} | {r.get('label') or '-'} | {r['_release']} | {r['mean_tok_s']:.1f} | "
                   f"{r.get('min_tok_s', 0):.1f}-{r.get('max_tok_s', 0):.1f} | {r.get('concurrency')} |")
    starts = server_starts(results)
    if starts:
        out += ["", "## Server starts (the start each session measured; role sglang_server's records)", "",
                "| session | release | ready s | where the time went |", "| --- | --- | --- | --- |"]
        out += [f"| {session} | {release} | {st.get('ready_s') if st.get('ready_s') is not None else '-'} | "
                f"{st.get('summary') or '-'} |" for session, release, st in starts]
    if plot:
        out += ["", "![tok/s per release](history.png)"]
    return "\n".join(out) + "\n"


def server_starts(results: list[dict]) -> list[tuple[str, str, dict]]:
    """(session, release, start) of each start the results measured, once per start (by systemd's invocation id),
    oldest first; sessions whose results carry no start (an older bench, a start no run recorded) have none."""
    seen: dict[str, tuple[str, str, dict]] = {}
    for r in results:
        start = (r.get("environment") or {}).get("server_start")
        if isinstance(start, dict) and start.get("invocation_id"):
            seen.setdefault(start["invocation_id"], (r["_session"], r["_release"], start))
    return list(seen.values())


def render_plot(results: list[dict], path: Path, host: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sessions = sorted({r["_session"] for r in results})
    releases = {r["_session"]: r["_release"] for r in results}
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    by_label: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        if r.get("mean_tok_s") is not None and (r.get("concurrency") or 1) == 1:
            by_label[r.get("label") or "-"].append(r)
    for label, rows in sorted(by_label.items()):
        xs = [sessions.index(r["_session"]) for r in rows]
        ys = [r["mean_tok_s"] for r in rows]
        lo = [r["mean_tok_s"] - (r.get("min_tok_s") or r["mean_tok_s"]) for r in rows]
        hi = [(r.get("max_tok_s") or r["mean_tok_s"]) - r["mean_tok_s"] for r in rows]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, label=label)
    ax.set_xticks(range(len(sessions)))
    ax.set_xticklabels([f"{s}\n{releases[s][:12]}" for s in sessions], fontsize=7)
    ax.set_ylabel("single-stream tok/s (mean, min-max)")
    ax.set_title(f"{host}: decode speed per release")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results-dir", type=Path, required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--baseline-tok-s", type=float, default=None)
    ap.add_argument("--max-drop-pct", type=float, default=5.0)
    ap.add_argument("--gate-label", default="eagle3", help="label the configured baseline applies to")
    ap.add_argument("--confidence", type=float, default=0.95,
                    help="confidence of the intervals and the tests, in (0, 1) (default %(default)s)")
    ap.add_argument("--restart-cv-pct", type=float, default=0.0,
                    help="between-restart CV of a session's mean tok/s, in percent: a known variance beside the "
                         "runs' in every comparison of two sessions, until this host has measured its own")
    ap.add_argument("--restart-cv-from-history", action=argparse.BooleanOptionalAction, default=True,
                    help="measure the between-restart CV from this host's repeated starts of one label, release and "
                         "server settings (its history, and the newest session's A/B) and use it in place of "
                         "--restart-cv-pct once it has %d degrees of freedom (default: on)" % MIN_SPREAD_DF)
    ap.add_argument("--ab", nargs=2, metavar=("LABEL_A", "LABEL_B"),
                    help="the newest session is an A/B of these two labels: B against A, over their starts")
    ap.add_argument("--fail-inconclusive", action="store_true",
                    help="fail the gate also on a drop beyond --max-drop-pct that the data cannot tell from noise")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    if args.max_drop_pct < 0:
        ap.error("--max-drop-pct must be >= 0")
    if args.restart_cv_pct < 0:
        ap.error("--restart-cv-pct must be >= 0")
    if not 0 < args.confidence < 1:
        ap.error(f"--confidence must be between 0 and 1 (exclusive), got {args.confidence:g}")
    try:
        import scipy.special  # noqa: F401  (the tests; pinned in requirements.txt)
    except ImportError as exc:
        print(f"sglang_bench_report: scipy is needed on the controller (pip install -r requirements.txt): {exc}",
              file=sys.stderr)
        return 2
    host_dir = args.results_dir / args.host
    try:
        results = load(host_dir)
        ev = evaluate(results, args.baseline_tok_s, args.max_drop_pct, args.gate_label, args.confidence,
                      args.fail_inconclusive, args.restart_cv_pct / 100.0, args.restart_cv_from_history,
                      tuple(args.ab) if args.ab else None)
    except Unusable as exc:
        print(f"sglang_bench_report: {exc}", file=sys.stderr)
        return 2
    if not args.no_plot:
        render_plot(results, host_dir / "history.png", args.host)
    report = markdown(args.host, results, ev, args.baseline_tok_s, args.max_drop_pct, not args.no_plot,
                      args.fail_inconclusive)
    tmp = host_dir / "report.md.tmp"
    tmp.write_text(report)
    tmp.replace(host_dir / "report.md")
    print(json.dumps({"host": args.host, "session": ev["session"], "confidence": ev["confidence"],
                      "rows": ev["rows"], "speedup": ev["speedup"], "ab": ev["ab"], "failures": ev["failures"],
                      "notes": ev["notes"], "restart_cv": ev["restart_cv"], "report": str(host_dir / "report.md"),
                      "server_start": next((st for session, _r, st in reversed(server_starts(results))
                                            if session == ev["session"]), None)}))
    return 1 if ev["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
