"""The simulator's model pieces: EAGLE acceptance draws, SGLang's argument defaults, admission cap."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from repo import load
from simtruth import FLAGS_TABLE, REFERENCE_LAUNCH, sim_env

engine = load("molecule/resources/roles/sglang_simulator/files/sglang_sim/engine.py")
flags = load("molecule/resources/roles/sglang_simulator/files/sglang_sim/flags.py")
settings = load("molecule/resources/roles/sglang_simulator/files/sglang_sim/settings.py")

TABLE = json.loads(FLAGS_TABLE.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("mean", "max_k"), [(1.0, 4), (2.5, 4), (3.7, 4), (4.0, 4), (2.3, 6)])
def test_acceptance_draws_have_the_configured_mean_and_stay_close(mean: float, max_k: int) -> None:
    p = engine.chain_acceptance(mean, max_k)
    sampler = engine.AcceptSampler(mean, max_k, p, random.Random("0:1"))
    total = 0
    for step in range(1, 2001):
        k = sampler.next()
        assert 1 <= k <= max_k
        total += k
        assert abs(total - step * mean) <= 1.0 + 1e-9  # per-request drift bounded to one token
    assert total / 2000 == pytest.approx(mean, abs=0.001)


def test_acceptance_draws_are_varied_and_seeded() -> None:
    """Not a fixed 2,3,2,3 pattern: every k from 1 to 4 occurs, and the seed decides the sequence."""
    p = engine.chain_acceptance(2.5, 4)

    def draws(seed: str) -> list[int]:
        sampler = engine.AcceptSampler(2.5, 4, p, random.Random(seed))
        return [sampler.next() for _ in range(400)]

    assert set(Counter(draws("0:1"))) == {1, 2, 3, 4}
    assert draws("0:1") == draws("0:1") and draws("0:1") != draws("0:2")


def test_accept_length_outside_draft_range_is_refused() -> None:
    with pytest.raises(settings.SimConfigError):
        engine.chain_acceptance(4.5, 4)


def test_exact_reference_line_parses_with_sglang_defaults() -> None:
    line = [*REFERENCE_LAUNCH, "--host", "127.0.0.1", "--port", "30000"]
    args = flags.parse_server_args(TABLE, line)
    warnings = flags.finalize_server_args(args)
    assert (args["host"], args["port"], args["tp_size"]) == ("127.0.0.1", 30000, 8)
    assert args["max_running_requests"] == 48 and len(warnings) == 1
    bare = flags.parse_server_args(TABLE, ["--model-path", "m"])
    assert (bare["host"], bare["port"]) == ("127.0.0.1", 30000)  # SGLang's defaults


def test_auto_speculative_parameters() -> None:
    """SGLang 0.5.9 picks 3/1/4 when no step count is given and forces draft = steps + 1 for topk 1."""
    auto = flags.parse_server_args(TABLE, ["--model-path", "m", "--speculative-algorithm", "EAGLE3"])
    flags.finalize_server_args(auto)
    assert (auto["speculative_num_steps"], auto["speculative_eagle_topk"], auto["speculative_num_draft_tokens"]) == (3, 1, 4)
    forced = flags.parse_server_args(TABLE, ["--model-path", "m", "--speculative-algorithm", "EAGLE3",
                                                  "--speculative-num-steps", "5", "--speculative-eagle-topk", "1",
                                                  "--speculative-num-draft-tokens", "4"])
    warnings = flags.finalize_server_args(forced)
    assert any("adjusted to speculative_num_steps + 1" in w for w in warnings)
    assert forced["speculative_num_draft_tokens"] == 6


def test_eagle_caps_running_requests_at_48(start_sim, run_bench) -> None:
    """64 requests at once against EAGLE defaults: 48 run, 16 wait for a free slot."""
    sim = start_sim(["--speculative-algorithm", "EAGLE3"], env=sim_env(400.0, 5.0))
    res = run_bench(sim.url, "--runs", "64", "--concurrency", "64", "--warmup", "0", "--max-tokens", "100",
                    "--input-len", "8")
    assert res.returncode == 0, res.stderr
    ttfts = sorted(run["ttft_ms"] for run in res.json["runs"])
    # the 16 queued requests start when the first ones finish: ~40 verify steps of 2.5 ms later
    assert ttfts[48] - ttfts[47] > 60, ttfts
