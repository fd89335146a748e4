"""The simulator's speculative-decoding model (specmodel.py): its formulas, the draws that follow
them, the memory limit that stops a start, and a running simulator that decodes at the model's rate.
"""

from __future__ import annotations

import random

import pytest

from repo import load

specmodel = load("molecule/resources/roles/sglang_simulator/files/sglang_sim/specmodel.py")
engine = load("molecule/resources/roles/sglang_simulator/files/sglang_sim/engine.py")
settings = load("molecule/resources/roles/sglang_simulator/files/sglang_sim/settings.py")

MODEL = specmodel.SpecModel(accept_first=0.8, accept_decay=0.9, draft_step_cost=0.06, verify_token_cost=0.02,
                            memory_limit=64)
SPEC_ENV = {"SGLANG_SIM_ACCEPT_FIRST": "0.8", "SGLANG_SIM_ACCEPT_DECAY": "0.9", "SGLANG_SIM_DRAFT_STEP_COST": "0.06",
            "SGLANG_SIM_VERIFY_TOKEN_COST": "0.02", "SGLANG_SIM_SPEC_MEMORY_LIMIT": "64",
            "SGLANG_SIM_NOISE_PCT": "0", "SGLANG_SIM_START_NOISE_PCT": "0"}  # the model's own draws alone


def test_formulas_by_hand() -> None:
    # steps 2, topk 1 (draft 3): q1 = 0.8, q2 = 1 - (1 - 0.72) = 0.72; E = 1 + 0.8 + 0.8 * 0.72
    assert MODEL.position_acceptance(2, 1, 3) == pytest.approx([0.8, 0.72])
    assert MODEL.accept_length(2, 1, 3) == pytest.approx(2.376)
    # step factor at batch 1: 1 + 0.06 * 2 + 0.02 * 2
    assert MODEL.step_factor(2, 3, 1, 0.01) == pytest.approx(1.16)
    assert specmodel.expected_tok_s(MODEL, 40, 1.0, 0.01, 2, 1, 3) == pytest.approx(40 * 2.376 / 1.16)
    # topk 2 with room for width 2 per step (draft 5 over 2 steps): q1 = 1 - 0.2^2
    assert MODEL.position_acceptance(2, 2, 5)[0] == pytest.approx(0.96)
    # SGLang's rule comes first: topk 1 ignores the draft tokens given
    assert specmodel.expected_tok_s(MODEL, 40, 1.0, 0.01, 2, 1, 9) == specmodel.expected_tok_s(MODEL, 40, 1.0, 0.01, 2, 1, 3)


def test_acceptance_falls_with_depth_and_rises_with_topk() -> None:
    q = MODEL.position_acceptance(6, 1, 7)
    assert all(a > b for a, b in zip(q, q[1:], strict=False))
    widths = [MODEL.accept_length(3, k, 1 + 3 * k) for k in (1, 2, 4, 8)]
    assert all(a < b for a, b in zip(widths, widths[1:], strict=False))


def test_costs_grow_with_steps_draft_tokens_and_batch() -> None:
    assert MODEL.step_factor(4, 5, 1, 0.01) > MODEL.step_factor(3, 5, 1, 0.01)
    assert MODEL.step_factor(3, 16, 1, 0.01) > MODEL.step_factor(3, 4, 1, 0.01)
    # the verify cost grows with the batch: wide trees pay more under load
    gap = MODEL.step_factor(3, 16, 16, 0.01) - MODEL.step_factor(3, 4, 16, 0.01)
    assert gap == pytest.approx(16 * (MODEL.step_factor(3, 16, 1, 0.01) - MODEL.step_factor(3, 4, 1, 0.01)))


def test_memory_limit() -> None:
    assert specmodel.expected_tok_s(MODEL, 40, 1.0, 0.01, 3, 4, 16) is not None  # 4 x 16 = 64 fits
    assert specmodel.expected_tok_s(MODEL, 40, 1.0, 0.01, 3, 4, 32) is None
    with pytest.raises(specmodel.SpecOutOfMemory, match="SGLANG_SIM_SPEC_MEMORY_LIMIT"):
        MODEL.check_memory(8, 16)


def test_the_model_is_off_unless_asked_for() -> None:
    assert settings.SimSettings.from_env({}).spec_model() is None
    model = settings.SimSettings.from_env(SPEC_ENV).spec_model()
    assert model == MODEL
    for bad in ({"SGLANG_SIM_ACCEPT_FIRST": "1.2"}, {"SGLANG_SIM_ACCEPT_FIRST": "0"},
                {"SGLANG_SIM_ACCEPT_FIRST": "0.5", "SGLANG_SIM_ACCEPT_DECAY": "1.5"}):
        with pytest.raises(settings.SimConfigError):
            settings.SimSettings.from_env(bad)


def test_draws_follow_the_positional_model() -> None:
    sim_settings = settings.SimSettings.from_env(SPEC_ENV)
    eng = engine.Engine(sim_settings, {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 5,
                                       "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 16})
    expected = MODEL.accept_length(5, 4, 16)
    assert eng.accept_length == pytest.approx(expected)
    sampler = eng.new_sampler(1)
    draws = [sampler.next() for _ in range(4000)]
    assert sum(draws) / len(draws) == pytest.approx(expected, abs=0.01)
    assert max(draws) <= 6 and len(set(draws)) >= 3  # 1 + at most 5 accepted drafts, varied
    assert eng.step_seconds(1) == pytest.approx(MODEL.step_factor(5, 16, 1, 0.01) / 50.0)


def test_a_start_beyond_the_memory_limit_fails_like_an_oom(start_sim) -> None:
    sim = start_sim(["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d",
                     "--speculative-num-steps", "3", "--speculative-eagle-topk", "8",
                     "--speculative-num-draft-tokens", "16"], env=SPEC_ENV, wait=None)
    assert sim.wait_exit() == 1
    assert "CUDA out of memory" in sim.stderr() and "SGLANG_SIM_SPEC_MEMORY_LIMIT" in sim.stderr()


def test_a_running_simulator_decodes_at_the_model_rate(start_sim, run_bench) -> None:
    sim = start_sim(["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d",
                     "--speculative-num-steps", "5", "--speculative-eagle-topk", "4",
                     "--speculative-num-draft-tokens", "16"],
                    env={**SPEC_ENV, "SGLANG_SIM_DECODE_TOK_S": "40", "SGLANG_SIM_SEED": str(random.randrange(100))})
    result = run_bench(sim.url, "--runs", "3", "--warmup", "1", "--max-tokens", "200")
    assert result.returncode == 0, result.stderr
    truth = specmodel.expected_tok_s(MODEL, 40, 1.0, 0.01, 5, 4, 16)
    assert result.json["mean_decode_tok_s"] == pytest.approx(truth, rel=0.05)
    assert result.json["accept_length"] == pytest.approx(MODEL.accept_length(5, 4, 16), rel=0.05)
