"""Verifier of molecule/sglang_bench: results, report, plot, and the regression gate."""

import json
import os
import subprocess
from pathlib import Path

NAME = "molecule-sglang-bench"
testinfra_hosts = [f"podman://{NAME}"]
ROOT = Path(__file__).resolve().parents[3]
RESULTS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "bench-results" / NAME
KEY = "test-only-key-bench-41c2"
# The simulator's truth (roles/sglang_server/files/sglang_sim): one request of N tokens takes
# TTFT + (N - 1) / ACCEPT / DECODE seconds; here N=64, TTFT 0.15 s, ACCEPT 2.4, DECODE 40.
TRUTH_TOK_S = 64 / (0.150 + 63 / 2.4 / 40)


def converge(*extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    return subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
                           str(ROOT / "molecule" / "sglang_bench" / "converge.yml"), *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def results():
    return sorted(RESULTS.glob("*.json"))


def test_result_fetched_with_reference_figures():
    files = results()
    assert files, f"no results in {RESULTS}"
    doc = json.loads(files[-1].read_text())
    assert doc["ok"] and doc["label"] == "eagle3" and doc["ok_runs"] == 5
    assert abs(doc["mean_tok_s"] - TRUTH_TOK_S) / TRUTH_TOK_S < 0.05, (doc["mean_tok_s"], TRUTH_TOK_S)
    assert doc["min_tok_s"] <= doc["mean_tok_s"] <= doc["max_tok_s"]
    env = doc["environment"]
    assert env["release_id"] == "r1-patched" and env["host"] == NAME
    assert KEY not in files[-1].read_text()


def test_report_and_plot_rendered():
    report = (RESULTS / "report.md").read_text()
    assert "| eagle3 | 1 |" in report and "## Gate" in report and "- pass" in report
    png = (RESULTS / "history.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_gate_fails_when_significantly_slower_than_the_threshold():
    """The pass side is the converge and idempotence runs above (a second session of the same speed
    passes); the verdicts themselves are unit-tested on known distributions
    (tests/roles/sglang_bench/test_report_verdict.py)."""
    before = len(results())
    slow = converge("-e", "bench_test_slowdown=1.25")  # 20% fewer tok/s: beyond the 5% gate
    out = slow.stdout + slow.stderr
    assert slow.returncode != 0, out[-3000:]
    assert "Benchmark regression on molecule-sglang-bench" in out and "below the previous session" in out, out[-3000:]
    assert "slower" in out  # the verdict, not only the threshold
    assert len(results()) == before + 1  # the slow result is kept for the history
    report = (RESULTS / "report.md").read_text()
    assert report.count("| eagle3 |") >= 3  # the newest row plus the history


def test_ab_mode_measures_baseline_and_eagle3_and_reports_the_speedup():
    proc = converge("-e", "sglang_bench_mode=ab", "-e", "sglang_bench_gate=false")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "EAGLE-3 speedup" in out, out[-3000:]
    session = sorted(results())[-1].name.split("-", 1)[0]
    labels = {json.loads(p.read_text())["label"]: json.loads(p.read_text()) for p in RESULTS.glob(f"{session}-*.json")}
    assert set(labels) == {"baseline", "eagle3"}
    # The simulator's truth: without speculation one token per step, with EAGLE-3 2.4.
    assert labels["baseline"]["environment"]["server_args"]["speculative_algorithm"] is None
    speedup = labels["eagle3"]["mean_tok_s"] / labels["baseline"]["mean_tok_s"]
    truth = TRUTH_TOK_S / (64 / (0.150 + 63 / 40))
    assert abs(speedup - truth) / truth < 0.05, (speedup, truth)
    assert f"**{speedup:.3f}x**" in (RESULTS / "report.md").read_text()


def test_sweep_mode_measures_throughput_per_concurrency():
    proc = converge("-e", "sglang_bench_mode=sweep", "-e", '{"sglang_bench_sweep_concurrency": [1, 4]}',
                    "-e", "sglang_bench_gate=false")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    session = sorted(results())[-1].name.split("-", 1)[0]
    docs = [json.loads(p.read_text()) for p in RESULTS.glob(f"{session}-sweep-c*.json")]
    by_level = {d["concurrency"]: d for d in docs}
    assert set(by_level) == {1, 4}
    assert by_level[4]["ok_runs"] == 8 and by_level[1]["ok_runs"] == 2
    assert by_level[4]["aggregate_tok_s"] > 3 * by_level[1]["aggregate_tok_s"]  # four streams in flight
