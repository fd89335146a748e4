"""The benchmark client measures the simulator's configured truth within 2%.

Truth (tests/harness/simtruth.py): one request decodes A / step tokens per second after its
first token, step = 1 / DECODE_TOK_S * (1 + BATCH_SLOWDOWN * (batch - 1)); end to end it
takes TTFT + (N - 1) / A * step for N tokens.  Rates are of the order a large MoE reaches
with EAGLE-3 (100 verify steps/s alone and accept length 2.5, within the 2.3-3.8 reported
for the public Kimi-K2.5 drafts => 250 tok/s; 190 tok/s per request at 64 in flight), fast
enough to keep each test to seconds, and outputs are long enough (512 tokens alone, 1024 at 64 in flight) that the
effects the simple formula leaves out stay well inside the 2%: the last verify step is partly
wasted (max_tokens cuts it), a request joins the running batch at the next step boundary,
and 64 simultaneous requests are read one after another.  All of them make the measurement
slightly low; at 64 in flight they add up to about 40 ms per batch on this machine.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from simtruth import sim_env, truth

# Assertions about time: run alone (tests/harness/run_tests.py runs the timing tests last).
pytestmark = pytest.mark.timing

RATE, ACCEPT, TTFT_MS, SLOWDOWN = 100.0, 2.5, 50.0, 0.005
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4"]
TOLERANCE = 0.02


def rel(measured: float, expected: float) -> float:
    return measured / expected - 1.0


def machine_load() -> str:
    """Shown with a failed timing assertion: a CPU starved by other jobs makes the simulator late."""
    pressure = Path("/proc/pressure/cpu")
    psi = pressure.read_text().split("\n", 1)[0] if pressure.exists() else "n/a"
    return f"load average {os.getloadavg()}, {os.cpu_count()} CPUs, CPU pressure: {psi}"


def test_concurrency_1_eagle3_native(start_sim, run_bench) -> None:
    sim = start_sim(SPEC, env=sim_env(RATE, TTFT_MS, SLOWDOWN, ACCEPT))
    n = 512
    res = run_bench(sim.url, "--runs", "2", "--warmup", "0", "--max-tokens", str(n), "--label", "eagle3")
    assert res.returncode == 0, res.stderr
    want = truth(n, RATE, TTFT_MS, batch=1, accept_length=ACCEPT)
    data = res.json
    for run in data["runs"]:
        assert run["tokens"] == n
        assert run["events"] < n / 2  # EAGLE-3 events carry ~2.5 tokens; the count is the server's
        assert abs(rel(run["decode_tok_s"], want.decode_tok_s)) < TOLERANCE, (run, machine_load())
        assert abs(rel(run["tok_s"], want.tok_s)) < TOLERANCE, (run, machine_load())
        assert abs(rel(run["accept_length"], ACCEPT)) < TOLERANCE, run
        assert TTFT_MS <= run["ttft_ms"] < TTFT_MS * 1.5, run
    assert abs(rel(data["mean_tok_s"], want.tok_s)) < TOLERANCE
    assert abs(rel(data["aggregate_tok_s"], want.tok_s)) < TOLERANCE  # one at a time: aggregate = per request
    summary = re.search(r"mean ([\d.]+) tok/s \(range ([\d.]+)-([\d.]+)\) over 2 runs", res.stdout)
    assert summary and abs(float(summary.group(1)) - data["mean_tok_s"]) < 0.06
    assert data["environment"]["server"]["speculative_algorithm"] == "EAGLE3"
    # The simulator's label is kept with the result: the server's whole self-description is recorded.
    assert data["environment"]["server_args"]["simulator"] is True


def test_concurrency_64_eagle3_native(start_sim, run_bench) -> None:
    sim = start_sim([*SPEC, "--max-running-requests", "64"], env=sim_env(RATE, TTFT_MS, SLOWDOWN, ACCEPT))
    n, conc = 1024, 64
    res = run_bench(sim.url, "--runs", str(conc), "--concurrency", str(conc), "--warmup", "0",
                    "--max-tokens", str(n), "--input-len", "32")
    assert res.returncode == 0, res.stderr
    want = truth(n, RATE, TTFT_MS, batch=conc, batch_slowdown=SLOWDOWN, accept_length=ACCEPT)
    data = res.json
    assert data["ok_runs"] == conc and data["concurrency"] == conc
    assert all(run["tokens"] == n for run in data["runs"])
    assert max(run["sent_at_s"] for run in data["runs"]) < 0.05  # the batch left together
    assert abs(rel(data["mean_decode_tok_s"], want.decode_tok_s)) < TOLERANCE, machine_load()
    assert abs(rel(data["mean_tok_s"], want.tok_s)) < TOLERANCE, machine_load()
    assert abs(rel(data["aggregate_tok_s"], want.aggregate_tok_s)) < TOLERANCE, machine_load()
    assert abs(rel(data["accept_length"], ACCEPT)) < TOLERANCE


@pytest.mark.parametrize("api", ["openai", "native"])
def test_concurrency_1_without_speculation(start_sim, run_bench, api: str) -> None:
    """One token per event; the OpenAI path counts from usage, not from chunks."""
    sim = start_sim(env=sim_env(RATE, TTFT_MS))
    n = 128
    res = run_bench(sim.url, "--api", api, "--runs", "1", "--warmup", "1", "--max-tokens", str(n))
    assert res.returncode == 0, res.stderr
    want = truth(n, RATE, TTFT_MS)
    run = res.json["runs"][0]
    assert run["tokens"] == n and run["accept_length"] is None
    assert abs(rel(run["tok_s"], want.tok_s)) < TOLERANCE, run
    assert abs(rel(run["decode_tok_s"], want.decode_tok_s)) < TOLERANCE, run
    assert res.json["config"]["endpoint"] == ("/v1/chat/completions" if api == "openai" else "/generate")


def test_openai_api_with_eagle3_counts_tokens_from_usage(start_sim, run_bench) -> None:
    sim = start_sim(SPEC, env=sim_env(RATE, TTFT_MS, accept_length=ACCEPT))
    n = 256
    res = run_bench(sim.url, "--api", "openai", "--runs", "1", "--warmup", "0", "--max-tokens", str(n))
    assert res.returncode == 0, res.stderr
    run = res.json["runs"][0]
    assert run["tokens"] == n
    assert run["events"] < n / 2 + 3  # role, finish and usage chunks on top of ~n/2.5 content chunks
    want = truth(n, RATE, TTFT_MS, accept_length=ACCEPT)
    assert abs(rel(run["tok_s"], want.tok_s)) < TOLERANCE, run
    assert abs(rel(run["decode_tok_s"], want.decode_tok_s)) < TOLERANCE, run
    assert res.json["server_avg_spec_accept_length"] == pytest.approx(ACCEPT, rel=0.03)


def test_token_count_comes_from_the_server_not_from_events(start_sim, run_bench) -> None:
    """Accept length 4 of 4 draft tokens: every verify step carries exactly 4 tokens."""
    sim = start_sim(SPEC, env=sim_env(400.0, 5.0, accept_length=4.0))
    n = 101
    res = run_bench(sim.url, "--runs", "1", "--warmup", "0", "--max-tokens", str(n))
    assert res.returncode == 0, res.stderr
    run = res.json["runs"][0]
    assert run["events"] == 1 + (n - 1) // 4  # the prefill token, then 25 events of 4 tokens
    assert run["tokens"] == n and run["spec_verify_ct"] == 25
    assert run["accept_length"] == pytest.approx(n / 25)
    assert abs(rel(run["decode_tok_s"], 400.0 * 4)) < 0.05


def test_slowdown_factor_slows_everything(start_sim, run_bench) -> None:
    """The regression-gate knob: SLOWDOWN_FACTOR 1.25 makes the measured speed 1/1.25."""
    n = 128
    sim = start_sim(env=sim_env(RATE, TTFT_MS, slowdown_factor=1.25))
    res = run_bench(sim.url, "--runs", "1", "--warmup", "0", "--max-tokens", str(n))
    assert res.returncode == 0, res.stderr
    assert abs(rel(res.json["mean_tok_s"], truth(n, RATE, TTFT_MS, slowdown_factor=1.25).tok_s)) < TOLERANCE
    assert abs(rel(res.json["mean_decode_tok_s"], RATE / 1.25)) < TOLERANCE
