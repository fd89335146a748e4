"""The correctness probe (files/sglang_correctness.py) run as a user would, against the SIMULATOR: a
greedy chat reply depends only on the prompt (answers.py: the same reply across requests and starts,
integer arithmetic right), Kimi's parsers shape the thinking and the tool calls, and a release made
to answer wrong (SGLANG_SIM_OUTPUT_CORRUPTION, or a tool-call format its parser cannot read) fails
the verdict while an equal release passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import requests

from repo import ROOT

TOOL = ROOT / "roles/sglang_bench/files/sglang_correctness.py"
KIMI = ["--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2"]
FAST = {"SGLANG_SIM_DECODE_TOK_S": "2000", "SGLANG_SIM_TTFT_MS": "1", "SGLANG_SIM_NOISE_PCT": "5"}


def probe(sim, out: Path, label: str) -> dict:
    proc = subprocess.run([sys.executable, str(TOOL), "probe", "--url", sim.url, "--label", label, "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def verdict(tmp_path: Path, candidate: Path, reference: Path, floor: Path) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, str(TOOL), "verdict", "--candidate", str(candidate), "--reference",
                           str(reference), "--floor", str(floor)], capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_a_greedy_reply_depends_on_the_prompt_only(start_sim):
    first, second = start_sim(KIMI, env=FAST), start_sim(KIMI, env={**FAST, "SGLANG_SIM_NOISE_NONCE": "7"})
    ask = {"model": "m", "temperature": 0, "max_tokens": 64,
           "messages": [{"role": "user", "content": "What is 17 * 23? Reply with the number only."}]}
    replies = [requests.post(s.url + "/v1/chat/completions", json=ask, timeout=10).json() for s in (first, first, second)]
    messages = [r["choices"][0]["message"] for r in replies]
    assert messages[0] == messages[1] == messages[2] and messages[0]["content"] == "391"
    assert messages[0]["reasoning_content"] and replies[0]["choices"][0]["finish_reason"] == "stop"
    other = requests.post(first.url + "/v1/chat/completions", timeout=10, json={
        **ask, "messages": [{"role": "user", "content": "Name a colour."}]}).json()["choices"][0]["message"]
    assert other["content"] != messages[0]["content"]


def test_the_probe_passes_an_equal_release_and_fails_a_corrupted_or_broken_one(start_sim, tmp_path):
    old = start_sim(KIMI, env=FAST)
    ref = probe(old, tmp_path / "ref.json", "old")
    probe(old, tmp_path / "floor.json", "old again")  # the floor: one release against itself
    s = ref["summary"]
    assert ref["cache_flushed"] is True  # the simulator answers /flush_cache as SGLang does
    # The simulated model does arithmetic (4 of the 9 checked answers) and, with the parsers, valid calls.
    assert (s["answers_right"], s["tool_calls_valid"], s["thinking_in_content"]) == (4, 2, 0)
    equal = probe(start_sim(KIMI, env={**FAST, "SGLANG_SIM_NOISE_NONCE": "3"}), tmp_path / "equal.json", "equal")
    rc, v = verdict(tmp_path, tmp_path / "equal.json", tmp_path / "ref.json", tmp_path / "floor.json")
    assert rc == 0 and v["verdict"] == "pass" and v["figures"][0]["value"] == 1.0 == v["figures"][0]["floor"]
    assert equal["summary"] == s

    corrupted = start_sim(KIMI, env={**FAST, "SGLANG_SIM_OUTPUT_CORRUPTION": "0.5"})
    probe(corrupted, tmp_path / "corrupted.json", "corrupted")
    rc, v = verdict(tmp_path, tmp_path / "corrupted.json", tmp_path / "ref.json", tmp_path / "floor.json")
    assert rc == 2 and v["verdict"] == "fail" and "agreement with the reference" in v["reason"], v["report"]

    broken = start_sim(KIMI, env={**FAST, "SGLANG_SIM_TOOL_FORMAT": "broken"})
    out = probe(broken, tmp_path / "broken.json", "broken")
    assert out["summary"]["tool_calls_valid"] == 0
    rc, v = verdict(tmp_path, tmp_path / "broken.json", tmp_path / "ref.json", tmp_path / "floor.json")
    assert rc == 2 and v["verdict"] == "fail" and "valid tool calls" in v["reason"], v["report"]

    no_parsers = start_sim(env=FAST)  # the server rendered without Kimi's parsers
    probe(no_parsers, tmp_path / "plain.json", "no parsers")
    rc, v = verdict(tmp_path, tmp_path / "plain.json", tmp_path / "ref.json", tmp_path / "floor.json")
    failed = {f["figure"] for f in v["figures"] if not f["ok"]}
    assert {"valid tool calls", "replies with the thinking in content"} <= failed
