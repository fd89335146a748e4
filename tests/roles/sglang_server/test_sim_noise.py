"""The SIMULATOR's run-to-run noise (TEST ONLY; molecule/resources/roles/sglang_simulator/files/sglang_sim): each speculative
request's accept length drawn around the configured one (SGLANG_SIM_NOISE_PCT), a speed factor per
start (SGLANG_SIM_START_NOISE_PCT), seeded by SGLANG_SIM_SEED and a nonce per start; off unless set
(the server role sets 5% and 0.5%: roles/sglang_server/defaults/main.yml)."""

from __future__ import annotations

import json
import statistics

import pytest

from repo import load

settings = load("molecule/resources/roles/sglang_simulator/files/sglang_sim/settings.py")
engine = load("molecule/resources/roles/sglang_simulator/files/sglang_sim/engine.py")

SPEC = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4}


def sim_settings(**env):
    return settings.SimSettings.from_env({k: str(v) for k, v in env.items()})


def request_means(env: dict, count: int = 2000) -> list[float]:
    eng = engine.Engine(sim_settings(**env), SPEC)
    return [eng.new_sampler(n).mean for n in range(count)]


def test_a_quiet_hosts_noise_unless_set_off_when_zero_and_checked() -> None:
    default = sim_settings()  # the lent H200's figures (docs/validation/testbed-h200)
    assert (default.noise_pct, default.start_noise_pct) == (settings.DEFAULT_NOISE_PCT, settings.DEFAULT_START_NOISE_PCT)
    assert 0 < settings.DEFAULT_START_NOISE_PCT < settings.DEFAULT_NOISE_PCT < 1
    assert len(set(request_means({}, 50))) > 1
    plain = sim_settings(SGLANG_SIM_NOISE_PCT=0, SGLANG_SIM_START_NOISE_PCT=0)
    assert (plain.noise_pct, plain.start_noise_pct, plain.start_speed()) == (0.0, 0.0, 1.0)
    assert set(request_means({"SGLANG_SIM_NOISE_PCT": 0}, 50)) == {plain.accept_length}
    for env, words in (({"SGLANG_SIM_NOISE_PCT": "-1"}, ">= 0.0"), ({"SGLANG_SIM_START_NOISE_PCT": "40"}, "at most 30"),
                       ({"SGLANG_SIM_NOISE_NONCE": "x"}, "not a non-negative integer")):
        with pytest.raises(settings.SimConfigError, match=words):
            sim_settings(**env)


def test_each_request_draws_its_accept_length_around_the_configured_one() -> None:
    means = request_means({"SGLANG_SIM_NOISE_PCT": 5, "SGLANG_SIM_ACCEPT_LENGTH": 2.4, "SGLANG_SIM_NOISE_NONCE": 7})
    assert statistics.fmean(means) == pytest.approx(2.4, rel=0.01)
    assert statistics.stdev(means) / 2.4 == pytest.approx(0.05, rel=0.1)
    # seeded: the same seed and nonce draw the same; another nonce (another start) or seed, others
    again = request_means({"SGLANG_SIM_NOISE_PCT": 5, "SGLANG_SIM_ACCEPT_LENGTH": 2.4, "SGLANG_SIM_NOISE_NONCE": 7})
    other = request_means({"SGLANG_SIM_NOISE_PCT": 5, "SGLANG_SIM_ACCEPT_LENGTH": 2.4, "SGLANG_SIM_NOISE_NONCE": 8})
    assert again == means and other != means
    # within what the draft tokens allow
    assert min(request_means({"SGLANG_SIM_NOISE_PCT": 30, "SGLANG_SIM_ACCEPT_LENGTH": 3.9})) >= 1.0
    assert max(request_means({"SGLANG_SIM_NOISE_PCT": 30, "SGLANG_SIM_ACCEPT_LENGTH": 3.9})) <= 4.0


def test_each_start_draws_a_speed_factor() -> None:
    speeds = [sim_settings(SGLANG_SIM_START_NOISE_PCT=2, SGLANG_SIM_NOISE_NONCE=n).start_speed() for n in range(2000)]
    assert statistics.fmean(speeds) == pytest.approx(1.0, abs=0.002)
    assert statistics.stdev(speeds) == pytest.approx(0.02, rel=0.1)
    eng = engine.Engine(sim_settings(SGLANG_SIM_START_NOISE_PCT=2, SGLANG_SIM_NOISE_NONCE=3), SPEC)
    plain = engine.Engine(sim_settings(SGLANG_SIM_START_NOISE_PCT=0), SPEC)
    assert eng.speed == speeds[3] != 1.0
    assert eng.base_step == pytest.approx(plain.base_step / eng.speed) and eng.ttft == pytest.approx(plain.ttft / eng.speed)
    # a start without a nonce takes its clock's: two starts differ
    assert sim_settings(SGLANG_SIM_START_NOISE_PCT=2).noise_nonce != sim_settings(SGLANG_SIM_START_NOISE_PCT=2).noise_nonce


def test_a_benchmark_sees_the_spread_per_run_and_the_start_is_logged(start_sim, run_bench) -> None:
    """25 runs of 128 tokens through the benchmark client: each run's accept length (the server's own count,
    free of the clock's jitter on a loaded machine) spreads by the configured 5%; without noise
    (deterministic: 0) only by the last verify step's rounding. The runs' tok/s follow it (printed)."""
    args = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "lightseekorg/kimi-k2.5-eagle3",
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    spread, tok_spread = {}, {}
    for noise in ("5", "0"):
        sim = start_sim(args, env={"SGLANG_SIM_DECODE_TOK_S": "400", "SGLANG_SIM_TTFT_MS": "5",
                                   "SGLANG_SIM_NOISE_PCT": noise, "SGLANG_SIM_START_NOISE_PCT": noise,
                                   "SGLANG_SIM_NOISE_NONCE": "1"})  # the draws fixed
        result = run_bench(sim.url, "--runs", "25", "--max-tokens", "128")
        assert result.returncode == 0, result.stderr
        accept = [r["accept_length"] for r in result.json["runs"]]
        tok_s = [r["tok_s"] for r in result.json["runs"]]
        spread[noise] = statistics.stdev(accept) / statistics.fmean(accept)
        tok_spread[noise] = statistics.stdev(tok_s) / statistics.fmean(tok_s)
        logged = json.loads(sim.out_path.read_text().split("settings ", 1)[1].splitlines()[0])
        assert logged["noise_pct"] == float(noise) and "noise_nonce" in logged and "start_speed" in logged
    print(f"per-run spread: accept length {spread['5']:.1%} with 5% noise, {spread['0']:.2%} without; "
          f"tok/s {tok_spread['5']:.1%} and {tok_spread['0']:.2%}")
    assert 0.035 < spread["5"] < 0.065 and spread["0"] < 0.015
