"""The EAGLE-3 tuner (roles/sglang_bench/files/sglang_tune.py): SGLang's rules on the candidates,
the search against the full grid on the simulator's model (its optimum computed from the model's
formulas, molecule/resources/roles/sglang_simulator/files/sglang_sim/specmodel.py; these measurements are noise-free, so
deterministic: tests/roles/sglang_bench/test_tune_noise.py has the noisy ones), and a whole run
through the tool's commands with results shaped like the benchmark client's, a candidate out of
memory included.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import subprocess
import sys
from unittest import mock

import pytest
import yaml

from repo import ROOT, load

tune = load("roles/sglang_bench/files/sglang_tune.py", "sglang_tune")
specmodel = load("molecule/resources/roles/sglang_simulator/files/sglang_sim/specmodel.py")
TOOL = ROOT / "roles" / "sglang_bench" / "files" / "sglang_tune.py"

# The role's default grid and the inventory's starting settings (3/1/4).
DEFAULTS = yaml.safe_load((ROOT / "roles" / "sglang_bench" / "defaults" / "main.yml").read_text())
SETTINGS = {"num_steps": DEFAULTS["sglang_bench_tune_num_steps"], "eagle_topk": DEFAULTS["sglang_bench_tune_eagle_topk"],
            "num_draft_tokens": DEFAULTS["sglang_bench_tune_num_draft_tokens"],
            "start": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}, "objective": "single",
            "budget_minutes": 100000, "min_gain_pct": 1.0}
# The model molecule/sglang_bench tunes (vars/tune.yml there).
MODEL = specmodel.SpecModel(0.8, 0.9, 0.06, 0.02, 64)


def truth(model, concurrency=1):
    return lambda point: specmodel.expected_tok_s(model, 40, 1.0, 0.01, *point, concurrency=concurrency)


def grid_optimum(config, score):
    """The full grid's best (what SGLang's own tuning script finds, one restart per point)."""
    return max((value, point) for point in config.grid() if (value := score(point)) is not None)


def search_noise_free(config, score):
    """The search on exact figures (every run the same): (served point, points measured, the measurements,
    the restarts a server would make: on other settings than it runs; after a failed start, always)."""
    measured: list = []
    entries: list = []
    server = {"runs": config.start, "restarts": 0}

    def measure(ask):
        value = score(ask.point)
        if ask.point not in measured:
            measured.append(ask.point)
        server["restarts"] += ask.point != server["runs"]
        server["runs"] = ask.point if value is not None else "down"
        entries.append({"point": None if ask.point is None else list(ask.point),
                        "status": "ok" if value is not None else "failed"})
        key = "concurrent" if config.objective == "throughput" else "single"
        return {"label": ask.label, "status": entries[-1]["status"], key: [] if value is None else [value] * ask.runs,
                "why": "out of memory"}

    search, pending = tune.drive(config, measure)
    assert pending is None
    served = tune.serving(search)
    return served, measured, entries, server["restarts"] + (served != server["runs"])


# --------------------------------------------------------------------------- SGLang's rules


def test_rules_topk1_collapses_and_oversized_trees_are_left_out() -> None:
    assert tune.canonical((3, 1, 16)) == (3, 1, 4)
    assert tune.rejection((1, 2, 4)) is not None  # 3 drafts from a 1-step topk-2 tree of 2 candidates
    assert tune.rejection((2, 2, 7)) is None  # 2 + 4 = 6 candidates
    config = tune.Config.from_settings(SETTINGS)
    grid = config.grid()
    assert len({p for p in grid if p[1] == 1}) == 8  # one point per steps value with topk 1
    assert all(p[2] == p[0] + 1 for p in grid if p[1] == 1)
    assert all(tune.rejection(p) is None for p in grid)
    assert config.rejected() and all(why for _p, why in config.rejected())


@pytest.mark.parametrize(("change", "variable", "words"), [
    ({"objective": "latency"}, "sglang_bench_tune_objective", "one of single, throughput, mix"),
    ({"num_steps": []}, "sglang_bench_tune_num_steps", "non-empty list"),
    ({"start": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 3}}, "sglang_bench_tune_start", "num_steps + 1"),
    ({"budget_minutes": 15, "restart_minutes": 10, "measure_minutes": 2}, "sglang_bench_tune_budget_minutes", "too small"),
    ({"objective": "throughput", "concurrency": 1}, "sglang_bench_tune_concurrency", "at least 2"),
    ({"confidence": 1.5}, "sglang_bench_tune_confidence", "between 0 and 1"),
    ({"runs": 1}, "sglang_bench_tune_runs", "at least 2"),
    ({"eagle_topk": [2], "num_draft_tokens": [64], "num_steps": [1], "start": {}}, "sglang_bench_tune_num_steps",
     "leave no point"),
])
def test_bad_settings_fail_naming_the_variable(tmp_path, change, variable, words) -> None:
    proc = subprocess.run([sys.executable, str(TOOL), "plan", "--check", "--state", str(tmp_path / "s.json")],
                          input=json.dumps({**SETTINGS, **change}), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.startswith(variable) and words in proc.stderr, proc.stderr
    assert not (tmp_path / "s.json").exists()


def test_budget_sets_the_candidates() -> None:
    """70 min, 10 per restart, 2 per 20 runs: the start's 40 runs (4 min) and the end (a pair of fresh starts,
    the winner's and the start's, 20 runs each, and a restart back: 34 min) leave 32 min, two candidates of 12;
    with the baseline (one more) one."""
    config = tune.Config.from_settings({**SETTINGS, "budget_minutes": 70, "restart_minutes": 10, "measure_minutes": 2,
                                        "runs": 20})
    assert config.max_candidates() == 2 and config.start_runs == 40 and config.max_runs == 100
    assert config.reserve_minutes() == 34
    config = tune.Config.from_settings({**SETTINGS, "budget_minutes": 70, "runs": 20, "baseline": True})
    assert config.max_candidates() == 1


# --------------------------------------------------------------------------- search vs the full grid


@pytest.mark.parametrize(("objective", "concurrency"), [("single", 1), ("throughput", 16)])
def test_search_finds_the_models_optimum_in_far_fewer_restarts(objective, concurrency) -> None:
    config = tune.Config.from_settings({**SETTINGS, "objective": objective, "concurrency": concurrency})
    score = truth(MODEL, concurrency)
    best, best_point = grid_optimum(config, score)  # the optimum, from the model's formulas
    served, measured, entries, restarts = search_noise_free(config, score)
    assert score(served) >= 0.98 * best, (served, best_point)
    assert len(measured) <= len(config.grid()) / 6, (len(measured), len(config.grid()))
    assert objective != "single" or any(e["status"] == "failed" for e in entries)  # out of memory: over 64
    # the restarts the report claims are those a server makes
    assert tune.restarts(config, entries, served) == restarts


def test_search_on_many_models_is_close_to_the_grid() -> None:
    """Random models of the same form, exact figures: a local search, so not always the optimum; how
    close it comes. Measured (seed 7, 150 models): 89% within 2% of the grid's optimum, the worst at
    80%, 14.1 points measured (13.9 before the start got its second start) on average of the 163-point grid."""
    rng = random.Random(7)
    ratios, candidates = [], []
    for _ in range(150):
        model = specmodel.SpecModel(rng.uniform(0.4, 0.92), rng.uniform(0.7, 0.97), rng.uniform(0.02, 0.15),
                                    rng.uniform(0.005, 0.05), rng.choice([0, 32, 64, 128]))
        concurrency = rng.choice([1, 4, 16])
        config = tune.Config.from_settings({**SETTINGS, "min_gain_pct": 0, "concurrency": concurrency,
                                            "objective": "single" if concurrency == 1 else "throughput"})
        best, _p = grid_optimum(config, truth(model, concurrency))
        served, measured, _e, _r = search_noise_free(config, truth(model, concurrency))
        ratios.append(truth(model, concurrency)(served) / best)
        candidates.append(len(measured))
    within = sum(r >= 0.98 for r in ratios) / len(ratios)
    print(f"within 2% for {within:.0%}, the worst at {min(ratios):.0%}, "
          f"{sum(candidates) / len(candidates):.1f} points measured on average")
    assert within >= 0.85 and min(ratios) >= 0.75, (within, min(ratios))
    assert sum(candidates) / len(candidates) <= 20  # of a 163-point grid


# --------------------------------------------------------------------------- a whole run


def bench_json(values: list[float] | None, accept: float | None = None, concurrency: int = 1) -> dict:
    """A result of the benchmark client (sglang_bench.py): its per-run tok/s are what the tuner tests."""
    ok = bool(values)
    return {"schema": "sglang-bench/1", "ok": ok, "failure": None if ok else "HTTP 503", "concurrency": concurrency,
            "mean_tok_s": sum(values) / len(values) if ok else None, "ok_runs": len(values or []),
            "runs": [{"ok": True, "tok_s": v} for v in values or []],
            "accept_length": accept, "server_avg_spec_accept_length": accept,
            "aggregate_tok_s": sum(values) if ok and concurrency > 1 else None}


def tool(*args, stdin=None):
    """The tool's command line, in this process (a subprocess each would cost more than the search: the bad
    settings above and the refused label below go through a real one)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            mock.patch.object(sys, "stdin", io.StringIO(stdin or "")):
        rc = tune.main([str(a) for a in args])
    assert rc == 0, err.getvalue()
    return json.loads(out.getvalue())


def test_a_whole_run_through_the_commands(tmp_path) -> None:
    """Plan, next/record until done (out-of-memory starts recorded as failures), report, on the small grid
    molecule uses with 5% per-run noise (seeded): the winner is the model's optimum, a label measured again
    (the winner's fresh runs) has its runs added to its old ones, the report gives the gain with its
    interval and the inventory snippet says so."""
    settings = {"num_steps": [3, 5], "eagle_topk": [1, 4], "num_draft_tokens": [16, 32],
                "start": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}, "objective": "single",
                "baseline": True, "budget_minutes": 30, "restart_minutes": 1, "measure_minutes": 1, "runs": 5}
    state = tmp_path / "tune" / "state.json"
    plan = tool("plan", "--state", state, stdin=json.dumps(settings))
    assert plan["grid_points"] == 6 and plan["max_candidates"] == 10 and plan["estimate_minutes"] <= 30
    assert plan["runs"] == 5 and plan["start_runs"] == 10 and plan["confidence"] == 0.95
    score = truth(MODEL)
    rng = random.Random(3)
    asked = []
    while (step := tool("next", "--state", state))["candidate"] is not None:
        cand = step["candidate"]
        asked.append((cand["label"], cand["runs"], cand["phase"], cand["file_label"]))
        path = tmp_path / f"{cand['file_label']}.json"
        if cand["baseline"]:
            path.write_text(json.dumps(bench_json([40 * (1 + rng.gauss(0, 0.05)) for _ in range(cand["runs"])])))
            tool("record", "--state", state, "--label", cand["label"], "--result", path)
            continue
        point = (cand["num_steps"], cand["eagle_topk"], cand["num_draft_tokens"])
        value = score(point)
        if value is None:
            tool("record", "--state", state, "--label", cand["label"], "--failed", "-",  # the play passes it on stdin
                 stdin="torch.OutOfMemoryError: CUDA out of memory")
        else:
            values = [value * (1 + rng.gauss(0, 0.05)) for _ in range(cand["runs"])]
            path.write_text(json.dumps(bench_json(values, MODEL.accept_length(*point))))
            tool("record", "--state", state, "--label", cand["label"], "--result", path)
    # the start first (it serves already) with twice the runs, then the baseline, then the search
    assert asked[:2] == [("tune-s3-k1-n4", 10, "start", "tune-s3-k1-n4"),
                         ("tune-baseline", 5, "baseline", "tune-baseline")], asked
    config = tune.Config.from_settings(settings)
    _best, best_point = grid_optimum(config, score)
    out = tool("report", "--state", state, "--out-dir", tmp_path / "tune")
    assert (out["winner"]["num_steps"], out["winner"]["eagle_topk"], out["winner"]["num_draft_tokens"]) == best_point
    assert out["failed"] == ["tune-s3-k4-n32", "tune-s5-k4-n32"]
    assert out["gain_pct"] > 30 and out["gain_ci_pct"][0] < out["gain_pct"] < out["gain_ci_pct"][1]
    # the winner's fresh runs: its label measured again, the runs added to the old ones
    winner = tune.label_of(best_point)
    again = [a for a in asked if a[0] == winner]
    assert again[-1][2] == "confirm" and again[-1][3] == f"{winner}-m{len(again)}", asked
    saved = json.loads(state.read_text())
    entry = next(e for e in saved["results"] if e["label"] == winner)
    assert entry["measurements"] == len(again) and entry["runs"] == sum(a[1] for a in again)
    snippet = yaml.safe_load((tmp_path / "tune" / "winner.yml").read_text())
    assert snippet == {"sglang_server_speculative_num_steps": best_point[0],
                       "sglang_server_speculative_eagle_topk": best_point[1],
                       "sglang_server_speculative_num_draft_tokens": best_point[2],
                       # topk > 1: the overlap scheduler's variable stays out of the server's environment
                       "sglang_server_env_unset": ["SGLANG_ENABLE_SPEC_V2"]}
    report = (tmp_path / "tune" / "report.md").read_text()
    assert f"Winner: {winner}: +{out['gain_pct']:.1f}% over the start (95% CI " in report, report
    assert "| tune-s3-k4-n32 | 3 | 4 | 32 | failed |" in report
    assert "- tune-s3-k4-n32: torch.OutOfMemoryError" in report
    assert f"| {winner} (winner) |" in report and "Speedup over no speculation" in report
    assert "one-sided test of the candidate's starts" in report and "| tune-s3-k4-n16 | tune-s3-k1-n4 | 1 |" in report
    assert "The host's spread between starts: " in report and "degrees of freedom" in report
    assert (tmp_path / "tune" / "tune.png").read_bytes()[:4] == b"\x89PNG"
    # a label other than the one the search asks for is refused (the state stays in order)
    proc = subprocess.run([sys.executable, str(TOOL), "record", "--state", str(state), "--label", "tune-s3-k1-n4",
                           "--failed", "x"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not what the search asks for next" in proc.stderr


def test_no_significant_gain_keeps_the_start_and_the_budget_stops_the_search(tmp_path) -> None:
    flat = {"num_steps": [2, 3, 4], "eagle_topk": [1], "num_draft_tokens": [4],
            "start": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}, "objective": "single",
            "budget_minutes": 100, "restart_minutes": 1, "measure_minutes": 1, "runs": 5}
    state = tmp_path / "state.json"
    tool("plan", "--state", state, stdin=json.dumps(flat))
    while (step := tool("next", "--state", state))["candidate"] is not None:
        path = tmp_path / "r.json"
        # exact figures (deterministic): 0.5% better elsewhere, below the 1% minimum gain
        value = 100.0 if step["candidate"]["num_steps"] == 3 else 100.5
        path.write_text(json.dumps(bench_json([value] * step["candidate"]["runs"])))
        tool("record", "--state", state, "--label", step["candidate"]["label"], "--result", path)
    out = tool("report", "--state", state, "--out-dir", tmp_path, "--no-plot")
    # 3/1/4 -> 4/1/5 -> 3/1/4 (a second start of the start: the spread between starts) -> 2/1/3 -> 3/1/4
    assert out["winner"] is None and out["serving"] == flat["start"] and out["restarts"] == 4
    assert "no significant gain" in out["winner_yaml"]
    assert "No significant gain (the search did not move from the start)" in (tmp_path / "report.md").read_text()

    state2 = tmp_path / "state2.json"
    plan = tool("plan", "--state", state2, stdin=json.dumps({**SETTINGS, "budget_minutes": 13, "restart_minutes": 1,
                                                             "measure_minutes": 1, "runs": 5}))
    # 13 - 2 (the start's 10 runs) - 5 (the end: a pair of fresh starts, a restart back) = 6 min: 3 of 2
    assert plan["max_candidates"] == 3
    phases = []
    while (step := tool("next", "--state", state2))["candidate"] is not None:
        phases.append(step["candidate"]["phase"])
        point = (step["candidate"]["num_steps"], step["candidate"]["eagle_topk"], step["candidate"]["num_draft_tokens"])
        path = tmp_path / "r.json"
        path.write_text(json.dumps(bench_json([truth(MODEL)(point)] * step["candidate"]["runs"])))
        tool("record", "--state", state2, "--label", step["candidate"]["label"], "--result", path)
    # the start's second start (the spread between starts) takes a candidate's place
    assert phases[:4] == ["start", "candidate", "repeat", "candidate"] and phases[-1] == "confirm", phases
    out = tool("report", "--state", state2, "--out-dir", tmp_path, "--no-plot")
    assert out["stop"].startswith("the budget") and out["minutes_used"] <= 13


def test_a_winner_its_fresh_runs_do_not_confirm_is_not_served(tmp_path) -> None:
    """The search moves on runs that happened to be fast; fresh starts of it, interleaved with fresh starts
    of the start, are not faster: the start's settings stay, and the report says what the fresh starts gave.
    Restarts: the candidate, the start's second start (the spread), then two pairs of fresh starts (the
    planned pairs at the gain the search saw, 5 runs a start)."""
    settings = {"num_steps": [3, 4], "eagle_topk": [1], "num_draft_tokens": [4],
                "start": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}, "objective": "single",
                "budget_minutes": 100, "restart_minutes": 1, "measure_minutes": 1, "runs": 5}
    state = tmp_path / "state.json"
    tool("plan", "--state", state, stdin=json.dumps(settings))
    rng = random.Random(1)
    phases = []
    while (step := tool("next", "--state", state))["candidate"] is not None:
        cand = step["candidate"]
        phases.append(cand["phase"])
        lucky = cand["num_steps"] == 4 and cand["phase"] != "confirm"  # fast only while it is selected
        values = [(110.0 if lucky else 100.0) * (1 + rng.gauss(0, 0.02)) for _ in range(cand["runs"])]
        (tmp_path / "r.json").write_text(json.dumps(bench_json(values)))
        tool("record", "--state", state, "--label", cand["label"], "--result", tmp_path / "r.json")
    assert phases[0] == "start" and "confirm" in phases, phases
    out = tool("report", "--state", state, "--out-dir", tmp_path, "--no-plot")
    assert out["best"] == {"num_steps": 4, "eagle_topk": 1, "num_draft_tokens": 5} and out["winner"] is None
    assert out["serving"] == settings["start"] and abs(out["gain_pct"]) < 3 and out["restarts"] == 6
    assert phases == ["start", "candidate", "repeat"] + ["confirm"] * 4, phases
    report = (tmp_path / "report.md").read_text()
    assert "No significant gain: the best point, tune-s4-k1-n5, gave " in report, report
    assert "2 fresh starts of it against 2 of the start, interleaved" in report, report
    assert "the server keeps tune-s3-k1-n4" in report


def test_a_start_that_fails_serves_the_best_candidate_and_the_report_says_why(tmp_path) -> None:
    """The starting settings fail (their start ran out of memory): nothing to test against, so the best
    candidate serves untested, and the report says so (it failed to render before: a gain of None)."""
    settings = {"num_steps": [3, 5], "eagle_topk": [1], "num_draft_tokens": [4],
                "start": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}, "objective": "single",
                "budget_minutes": 30, "restart_minutes": 1, "measure_minutes": 1, "runs": 5}
    state = tmp_path / "tune" / "state.json"
    tool("plan", "--state", state, stdin=json.dumps(settings))
    while (step := tool("next", "--state", state))["candidate"] is not None:
        cand = step["candidate"]
        if cand["num_steps"] == 3:
            tool("record", "--state", state, "--label", cand["label"], "--failed", "-", stdin="CUDA out of memory")
        else:
            path = tmp_path / f"{cand['file_label']}.json"
            path.write_text(json.dumps(bench_json([50.0 + i for i in range(cand["runs"])], 2.0)))
            tool("record", "--state", state, "--label", cand["label"], "--result", path)
    out = tool("report", "--state", state, "--out-dir", tmp_path / "tune")
    assert out["serving_label"] == "tune-s5-k1-n6" and out["winner"] and out["gain_pct"] is None
    report = (tmp_path / "tune" / "report.md").read_text()
    assert "Winner: tune-s5-k1-n6 (the start failed: the best candidate serves without a test against it)." in report
