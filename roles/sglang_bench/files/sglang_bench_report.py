#!/usr/bin/env python3
"""Compare a host's newest benchmark with its history and a baseline; gate regressions.

Runs on the controller over ``bench-results/<host>/*.json`` (results of the benchmark client
sglang_bench.py, fetched by the sglang_bench role). It writes, next to them:

* ``report.md``: the newest session's figures per label (mean tok/s and range, the
  reference method), the comparison with the previous session of the same label and
  with the configured baseline, the EAGLE-3 speedup when the session measured both
  ``baseline`` and ``eagle3`` (A/B), the throughput per concurrency of a sweep, and the
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

Sessions are restarts: a start of the server has its own speed (measured on real SGLang
0.5.17 on an H200, docs/validation/sglang_serve-h200: session means of the same settings
moved by a CV of 0.8% within one lease and 13.7% across three restarts, while each
session's runs looked tight), which no number of runs in one session shows. So every
comparison of two sessions adds a known variance, (CV x mean)^2 per session, the CV being
--restart-cv-pct or, with --restart-cv-from-history and when larger, what this host's
history shows (the spread of the session means of one label, release and server settings
beyond their runs' spread, from three sessions on; it takes those sessions as one speed).
A configured baseline is a figure, not a start: one session's share. With that variance
the runs needed may be "more sessions (restarts), not runs".

Exit status 1 when the gate fails: a label's newest session is ``slower`` than the previous
session of that label, or than --baseline-tok-s (for --gate-label), by more than
--max-drop-pct; with --fail-inconclusive also an ``inconclusive`` drop of more than
--max-drop-pct. A failed benchmark in the newest session fails the gate too. Exit status 2
on unusable input (no results, a file that is not JSON, bad options).

Usage: sglang_bench_report.py --results-dir bench-results --host gpu1 [--baseline-tok-s 96.1]
       [--max-drop-pct 5] [--gate-label eagle3] [--confidence 0.95] [--restart-cv-pct 2]
       [--restart-cv-from-history] [--fail-inconclusive]
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
           extra_var: float = 0.0) -> dict:
    """Difference of means (new - reference), its confidence interval, the test and its p-value.

    ``ref`` None: the reference is the constant ``ref_mean`` (one-sample t-test); otherwise
    Welch's t-test of the two samples (Welch-Satterthwaite degrees of freedom). A sample
    without spread (all runs equal) is exact. ``extra_var``: a known variance of the difference
    beyond the runs' (the restarts' speed factors, restart_var): added to the standard error's
    square, with no degrees of freedom of its own (Satterthwaite over the estimated parts).
    """
    diff = statistics.fmean(new) - ref_mean
    var_new, var_ref = statistics.variance(new), statistics.variance(ref) if ref is not None else 0.0
    if var_new + var_ref + extra_var == 0:
        return {"diff": diff, "ci": (diff, diff), "p": 1.0 if diff == 0 else 0.0, "df": None}
    a = var_new / len(new)
    b = var_ref / len(ref) if ref is not None else 0.0
    se = math.sqrt(a + b + extra_var)
    parts = a ** 2 / (len(new) - 1) + (b ** 2 / (len(ref) - 1) if ref is not None else 0.0)
    df = (a + b + extra_var) ** 2 / parts if parts > 0 else math.inf
    cdf, ppf = _t_dist()
    half = float(ppf(df, 0.5 + confidence / 2)) * se
    p = 2 * float(cdf(df, -abs(diff) / se))
    return {"diff": diff, "ci": (diff - half, diff + half), "p": min(1.0, p), "df": _finite(df)}


def power(diff: float, var_new: float, var_ref: float | None, n: int, confidence: float,
          n_ref: int | None = None, extra_var: float = 0.0) -> float:
    """Power of the two-sided t-test (Welch's, or one-sample when var_ref is None) with n runs
    in the new session (and n_ref in the reference, n unless given) to detect a true difference
    ``diff``, given the run-to-run variances and the restarts' ``extra_var`` (which no number of
    runs reduces; sglang_tune.py sizes unequal samples with it)."""
    n_ref = n if n_ref is None else n_ref
    a = var_new / n
    b = 0.0 if var_ref is None else var_ref / n_ref
    se2 = a + b + extra_var
    parts = a ** 2 / (n - 1) + (0.0 if var_ref is None else b ** 2 / (n_ref - 1))
    df = se2 ** 2 / parts if parts > 0 else max(n - 1.0, 1.0)
    if se2 == 0:
        return 1.0 if diff else 0.0
    ncp = abs(diff) / math.sqrt(se2)
    crit = float(_t_dist()[1](df, 1 - (1 - confidence) / 2))
    # P(T > crit) + P(T < -crit) for T ~ noncentral t(df, ncp); the lower tail as the upper tail
    # of -T ~ nct(df, -ncp), since scipy's nct.cdf (and scipy.special.nctdtr) far below a large
    # ncp returns nan.
    sf = _nct_sf()
    return min(1.0, sum(max(0.0, float(sf(crit, df, nc))) for nc in (ncp, -ncp)))


def runs_needed(diff: float, var_new: float, var_ref: float | None, confidence: float,
                target: float = POWER, extra_var: float = 0.0) -> int | None:
    """Smallest runs per session (2..MAX_RUNS) at which the test resolves ``diff`` with power
    ``target``; None when no difference was observed or more than MAX_RUNS would be needed
    (always, when the restarts' extra_var alone hides the difference)."""
    if diff == 0 or power(diff, var_new, var_ref, MAX_RUNS, confidence, extra_var=extra_var) < target:
        return None
    if power(diff, var_new, var_ref, 2, confidence, extra_var=extra_var) >= target:
        return 2
    low, high = 2, MAX_RUNS  # power(low) < target <= power(high); power grows with n
    while high - low > 1:
        mid = (low + high) // 2
        if power(diff, var_new, var_ref, mid, confidence, extra_var=extra_var) >= target:
            high = mid
        else:
            low = mid
    return high


def restart_var(restart_cv: float, new_mean: float, ref_mean: float, ref_is_a_session: bool) -> float:
    """The variance the restarts add to a difference of means: each session ran on its own start of the
    server, and a start's speed factor (CV restart_cv) moves the whole session's mean; a configured
    baseline is a figure, not a start (its own factor, if any, is in the figure)."""
    return (restart_cv * new_mean) ** 2 + ((restart_cv * ref_mean) ** 2 if ref_is_a_session else 0.0)


def compare(new: list[float], ref: list[float] | None, ref_mean: float, confidence: float,
            restart_cv: float = 0.0) -> dict:
    """One comparison of the newest runs with a reference (earlier runs, or a configured mean), with
    restart_cv, the sessions' between-restart CV, as a known variance beside the runs'."""
    out = {"test": None, "confidence": confidence, "mean": statistics.fmean(new) if new else None,
           "n": len(new), "reference_mean": ref_mean, "reference_n": len(ref) if ref is not None else None,
           "diff": None, "diff_pct": None, "ci": None, "ci_pct": None, "p": None, "df": None,
           "restart_cv": restart_cv, "verdict": "untested", "runs_needed": None, "runs_needed_text": "-"}
    if len(new) < 2 or (ref is not None and len(ref) < 2):
        return out  # no spread to test against: the threshold on the means decides
    extra = restart_var(restart_cv, statistics.fmean(new), ref_mean, ref is not None)
    res = t_test(new, ref, ref_mean, confidence, extra)
    out["test"] = TWO_SAMPLE_TEST if ref is not None else ONE_SAMPLE_TEST
    out.update(diff=res["diff"], p=res["p"], df=res["df"], ci=list(res["ci"]),
               diff_pct=res["diff"] / ref_mean * 100.0, ci_pct=[c / ref_mean * 100.0 for c in res["ci"]])
    if res["p"] < 1 - confidence:
        out["verdict"] = "faster" if res["diff"] > 0 else "slower"
    else:
        out["verdict"] = "inconclusive"
        needed = runs_needed(res["diff"], statistics.variance(new),
                             statistics.variance(ref) if ref is not None else None, confidence, extra_var=extra)
        out["runs_needed"] = needed
        hidden = extra > 0 and power(res["diff"], 0.0, 0.0 if ref is not None else None, MAX_RUNS, confidence,
                                     extra_var=extra) < POWER
        out["runs_needed_text"] = (str(needed) if needed is not None else "-" if res["diff"] == 0
                                   else "more sessions (restarts), not runs" if hidden else f">{MAX_RUNS}")
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


# Sessions of one label and release (before the newest) from which the history estimates the
# between-restart spread.
HISTORY_MIN_SESSIONS = 3


def history_restart_cv(results: list[dict], latest: str) -> dict | None:
    """The between-restart CV this host's own history shows: the spread of the session means of one label
    and release (the same settings, each session on its own start) beyond what their runs' spread
    explains (a one-way random-effects estimate: variance of the relative means less the mean of
    their squared standard errors), pooled over the groups with at least HISTORY_MIN_SESSIONS
    sessions; None without such a group. The newest session is left out: it is under test."""
    groups: dict[tuple, list[list[float]]] = defaultdict(list)
    for r in results:
        values = run_values(r)
        if r["_session"] < latest and r.get("ok") and len(values) >= 2 and r["_release"] != "?":
            server = json.dumps((r.get("environment") or {}).get("server") or {}, sort_keys=True)
            groups[(r.get("label") or "", r["_release"], r.get("concurrency") or 1, server)].append(values)
    weighted, dof, sessions = 0.0, 0, 0
    for runs in groups.values():
        if len(runs) < HISTORY_MIN_SESSIONS:
            continue
        grand = statistics.fmean(statistics.fmean(v) for v in runs)
        rel_means = [statistics.fmean(v) / grand for v in runs]
        within = statistics.fmean(statistics.variance(v) / len(v) / grand ** 2 for v in runs)
        weighted += (len(runs) - 1) * max(0.0, statistics.variance(rel_means) - within)
        dof += len(runs) - 1
        sessions += len(runs)
    if not dof:
        return None
    return {"cv": math.sqrt(weighted / dof), "sessions": sessions}


def evaluate(results: list[dict], baseline: float | None, max_drop: float, gate_label: str,
             confidence: float = 0.95, fail_inconclusive: bool = False, restart_cv: float = 0.0,
             learn: bool = False) -> dict:
    """The newest session, its comparisons and the gate decision. restart_cv: the stated between-restart
    CV of a session's mean (sglang_bench_restart_cv_pct / 100); with learn, the history's own estimate
    when larger (it assumes that sessions of one label, release and server settings ran at one speed:
    a host whose speed was changed otherwise, a slowed-down server of a test for one, inflates it)."""
    if not results:
        raise Unusable("no benchmark results")
    sessions = sorted({r["_session"] for r in results})
    latest = sessions[-1]
    newest = [r for r in results if r["_session"] == latest]
    learned = history_restart_cv(results, latest) if learn else None
    used_cv = max(restart_cv, learned["cv"]) if learned else restart_cv
    findings, failures, notes = [], [], []
    by_label: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        by_label[r.get("label") or ""].append(r)
    for r in newest:
        label = r.get("label") or ""
        if not r.get("ok") or r.get("mean_tok_s") is None:
            failures.append(f"[{label}] the benchmark itself failed: {r.get('failure')}")
            continue
        values = run_values(r)
        earlier = [x for x in by_label[label] if x["_session"] < latest and x.get("ok") and x.get("mean_tok_s")]
        row = {"label": label, "mean": r["mean_tok_s"], "min": r.get("min_tok_s"), "max": r.get("max_tok_s"),
               "runs": r.get("ok_runs"), "concurrency": r.get("concurrency"), "aggregate": r.get("aggregate_tok_s"),
               "accept": r.get("accept_length") or r.get("server_avg_spec_accept_length"), "release": r["_release"]}
        if earlier:
            prev = earlier[-1]
            row["previous"] = prev["mean_tok_s"]
            row["vs_previous_pct"] = pct(r["mean_tok_s"], prev["mean_tok_s"])
            cmp = compare(values, run_values(prev), prev["mean_tok_s"], confidence, used_cv)
            cmp["mean"] = r["mean_tok_s"]  # the session's own figure (the same as the runs' mean)
            cmp.update(reference="previous session", reference_session=prev["_session"],
                       reference_release=prev["_release"])
            row["vs_previous"] = cmp
            judge(label, cmp, f"the previous session ({prev['mean_tok_s']:.1f} tok/s, release {prev['_release']})",
                  max_drop, fail_inconclusive, failures, notes)
        if baseline and label == gate_label:
            row["vs_baseline_pct"] = pct(r["mean_tok_s"], baseline)
            cmp = compare(values, None, baseline, confidence, used_cv)
            cmp["mean"] = r["mean_tok_s"]
            cmp.update(reference="configured baseline", reference_session=None, reference_release=None)
            row["vs_baseline"] = cmp
            judge(label, cmp, f"the configured baseline {baseline:.1f} tok/s", max_drop, fail_inconclusive,
                  failures, notes)
        findings.append(row)
    labels = {row["label"]: row for row in findings}
    speedup = ab = None
    if "baseline" in labels and "eagle3" in labels:
        speedup = labels["eagle3"]["mean"] / labels["baseline"]["mean"]
        docs = {r.get("label"): r for r in newest}
        # The A/B restarts the server between its two labels: two starts.
        ab = compare(run_values(docs["eagle3"]), run_values(docs["baseline"]), labels["baseline"]["mean"], confidence,
                     used_cv)
        ab.update(mean=labels["eagle3"]["mean"], reference="baseline (no speculation), same session",
                  reference_session=latest, reference_release=labels["baseline"]["release"], speedup=speedup,
                  significant=ab["verdict"] in ("faster", "slower"))
    return {"session": latest, "rows": findings, "failures": failures, "notes": notes, "speedup": speedup,
            "ab": ab, "sessions": sessions, "confidence": confidence,
            "restart_cv": {"used": used_cv, "stated": restart_cv, "history": learned, "learn": learn}}


def comparison_row(label: str, against: str, cmp: dict) -> str:
    ref_n = f" ({cmp['reference_n']})" if cmp["reference_n"] is not None else " (configured)"
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
    cells = [label, against, f"{cmp['reference_mean']:.1f}{ref_n}", f"{cmp['mean']:.1f} ({cmp['n']})", diff, diff_pct,
             test, f"**{cmp['verdict']}**", cmp["runs_needed_text"] if cmp["verdict"] == "inconclusive" else "-"]
    return "| " + " | ".join(cells) + " |"


def ab_line(ev: dict) -> str:
    ab, conf = ev["ab"], fmt_conf(ev["confidence"])
    line = f"EAGLE-3 speedup over the no-speculation baseline: **{ev['speedup']:.3f}x**"
    if ab is None or ab["test"] is None:
        return line + " (fewer than 2 runs per label: no test)."
    lo, hi = ab["ci"]
    line += (f" ({ab['diff']:+.1f} tok/s, {conf} CI {lo:+.1f} to {hi:+.1f} tok/s, {ab['diff_pct']:+.1f}%; "
             f"{ab['test']} {fmt_p(ab['p'])}): ")
    if ab["verdict"] == "faster":
        return line + f"**significant**: EAGLE-3 is faster at {conf} confidence (verdict: faster)."
    if ab["verdict"] == "slower":
        return line + f"**significant**: EAGLE-3 is slower than the baseline at {conf} confidence (verdict: slower)."
    return line + (f"**not significant**: the data cannot tell it from no speedup (verdict: inconclusive); "
                   f"about {ab['runs_needed_text']} runs per label would resolve a difference of this size.")


def restart_line(restart: dict) -> str:
    """What the comparisons allow for the restarts between sessions, and where the figure comes from."""
    learned = restart.get("history")
    seen = (f"this host's history shows {learned['cv'] * 100:.1f}% ({learned['sessions']} earlier sessions of one "
            f"label, release and server settings)" if learned else
            f"this host's history has no {HISTORY_MIN_SESSIONS} sessions of one label, release and server settings "
            f"to estimate it from" if restart.get("learn") else "not estimated from the history (--restart-cv-from-history)")
    return (f"Between restarts: each session ran on its own start of the server, and a start's speed moves the "
            f"whole session, which its runs do not show; the comparisons add {restart['used'] * 100:.1f}% of each "
            f"session's mean as a known standard deviation (stated: {restart['stated'] * 100:.1f}%, "
            f"sglang_bench_restart_cv_pct; {seen}; the larger is used).")


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
        compared.append(comparison_row("eagle3", "baseline (A/B, same session)", ev["ab"]))
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
    if plot:
        out += ["", "![tok/s per release](history.png)"]
    return "\n".join(out) + "\n"


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
                         "runs' in every comparison of two sessions (the history's estimate when larger)")
    ap.add_argument("--restart-cv-from-history", action="store_true",
                    help="use the history's own between-restart CV when larger (sessions of one label, release and "
                         "server settings taken as one speed)")
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
                      args.fail_inconclusive, args.restart_cv_pct / 100.0, args.restart_cv_from_history)
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
                      "notes": ev["notes"], "restart_cv": ev["restart_cv"], "report": str(host_dir / "report.md")}))
    return 1 if ev["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
