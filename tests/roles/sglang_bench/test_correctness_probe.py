"""The correctness probe (files/sglang_correctness.py) run as a user would, against the SIMULATOR: a
greedy chat reply depends only on the prompt (answers.py: the same reply and token ids across requests
and starts, integer arithmetic right), the thinking is on unless chat_template_kwargs turns it off (as
Kimi-K2.5's), Kimi's parsers shape the thinking and the tool calls, teacher forcing answers in SGLang's
shape, and a release made to answer wrong (SGLANG_SIM_OUTPUT_CORRUPTION, or a tool-call format its parser
cannot read) fails the verdict while an equal release passes; a probe whose thinking used up its tokens
checked no answer and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import requests

from repo import ROOT
from simtruth import sim_path_env

TOOL = ROOT / "roles/sglang_bench/files/sglang_correctness.py"
PROMPTS = ROOT / "roles/sglang_bench/files/sglang_correctness_prompts.json"
KIMI = ["--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2"]
FAST = {"SGLANG_SIM_DECODE_TOK_S": "2000", "SGLANG_SIM_TTFT_MS": "1", "SGLANG_SIM_NOISE_PCT": "5"}


def probe(sim, out: Path, label: str, *extra: str, prompts: Path | None = None) -> dict:
    proc = subprocess.run([sys.executable, str(TOOL), "probe", "--url", sim.url, "--label", label, "--out", str(out),
                           *(["--prompts", str(prompts)] if prompts else []), *extra],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def verdict(tmp_path: Path, candidate: Path, reference: Path, floor: Path | None) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, str(TOOL), "verdict", "--candidate", str(candidate), "--reference",
                           str(reference), *(["--floor", str(floor)] if floor else [])],
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def failed(v: dict) -> set[str]:
    return {f["figure"] for f in v["figures"] if f["ok"] is False}


def test_a_greedy_reply_depends_on_the_prompt_only_and_thinks_unless_told_not_to(start_sim):
    first, second = start_sim(KIMI, env=FAST), start_sim(KIMI, env={**FAST, "SGLANG_SIM_NOISE_NONCE": "7"})
    ask = {"model": "m", "temperature": 0, "max_tokens": 64, "chat_template_kwargs": {"thinking": False},
           "return_token_ids": True, "messages": [{"role": "user", "content": "What is 17 * 23? Reply with the number only."}]}
    replies = [requests.post(s.url + "/v1/chat/completions", json=ask, timeout=10).json() for s in (first, first, second)]
    choices = [r["choices"][0] for r in replies]
    assert choices[0] == choices[1] == choices[2] and choices[0]["message"]["content"] == "391"
    assert choices[0]["message"]["reasoning_content"] is None and choices[0]["finish_reason"] == "stop"
    # SGLang 0.5.17's token ids: the prompt's (return_token_ids implies them) and the reply's, its EOS last
    assert choices[0]["prompt_token_ids"] and len(choices[0]["token_ids"]) == 2
    assert replies[0]["usage"]["completion_tokens"] == 2
    other = requests.post(first.url + "/v1/chat/completions", timeout=10, json={
        **ask, "messages": [{"role": "user", "content": "Name a colour."}]}).json()["choices"][0]["message"]
    assert other["content"] != choices[0]["message"]["content"]

    # Thinking on (Kimi-K2.5's default): this prompt's thinking is 179 tokens (answers.py's draw), so 64
    # tokens end in it, with no answer; 512 reach the answer after it.
    thinking = {**ask, "chat_template_kwargs": {}}
    cut = requests.post(first.url + "/v1/chat/completions", json=thinking, timeout=10).json()["choices"][0]
    assert cut["finish_reason"] == "length" and cut["message"]["content"] is None
    assert len(cut["message"]["reasoning_content"].split()) == 64 == len(cut["token_ids"])
    full = requests.post(first.url + "/v1/chat/completions", json={**thinking, "max_tokens": 512}, timeout=10).json()
    msg = full["choices"][0]["message"]
    assert (msg["content"], len(msg["reasoning_content"].split()), full["choices"][0]["finish_reason"]) == ("391", 179, "stop")
    assert full["choices"][0]["prompt_token_ids"] == choices[0]["prompt_token_ids"][:-1]  # no </think> after <think>


def test_the_simulated_thinking_length_is_the_documented_distribution():
    # answers.py: a log-normal of median 512 tokens, 1 draw in 25 past 4096 (the public reports it cites).
    code = ("import json, statistics; from sglang_sim import answers; "
            "xs = [answers.think_tokens(f'user: prompt {i}') for i in range(4000)]; "
            "print(json.dumps([statistics.median(xs), sum(x > 4096 for x in xs) / len(xs), sum(x <= 94 for x in xs) / len(xs)]))")
    out = subprocess.run([sys.executable, "-c", code], env={**sim_path_env(), "PATH": os.environ["PATH"]},
                         capture_output=True, text=True, timeout=60, check=True)
    median, past_4096, within_96 = json.loads(out.stdout)
    assert 470 < median < 560 and 0.025 < past_4096 < 0.065 and 0.05 < within_96 < 0.11


def test_teacher_forcing_answers_in_sglangs_shape(start_sim):
    sim = start_sim(KIMI, env=FAST)
    ask = {"model": "m", "temperature": 0, "max_tokens": 64, "chat_template_kwargs": {"thinking": False},
           "return_prompt_token_ids": True, "return_token_ids": True,
           "messages": [{"role": "user", "content": "What is 1024 - 389? Reply with the number only."}]}
    choice = requests.post(sim.url + "/v1/chat/completions", json=ask, timeout=10).json()["choices"][0]
    prompt, tokens = choice["prompt_token_ids"], choice["token_ids"]
    body = {"input_ids": prompt + tokens, "return_logprob": True, "logprob_start_len": len(prompt) - 1,
            "top_logprobs_num": 2, "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    reply = requests.post(sim.url + "/generate", json=body, timeout=10).json()
    meta = reply["meta_info"]
    assert [e[1] for e in meta["input_token_logprobs"]] == prompt[-1:] + tokens
    assert meta["input_token_logprobs"][0][0] is None and meta["input_top_logprobs"][0] is None
    assert all(len(t) == 2 and t[0][1] == e[1] and t[0][0] > t[1][0]
               for e, t in zip(meta["input_token_logprobs"][1:], meta["input_top_logprobs"][1:], strict=True))
    assert len(meta["output_token_logprobs"]) == 1 and len(meta["output_top_logprobs"][0]) == 2
    # another answer forced: the model's own token stays its top choice, the forced one far below it
    wrong = requests.post(sim.url + "/generate", timeout=10,
                          json={**body, "input_ids": prompt + [tokens[0] + 1, tokens[1]]}).json()
    first = wrong["meta_info"]["input_token_logprobs"][1]
    assert wrong["meta_info"]["input_top_logprobs"][1][0][1] == tokens[0] and first[0] < -5


def test_the_probe_passes_an_equal_release_and_fails_a_corrupted_or_broken_one(start_sim, tmp_path):
    old = start_sim(KIMI, env=FAST)
    ref = probe(old, tmp_path / "ref.json", "old")
    probe(old, tmp_path / "floor.json", "old again", "--force", str(tmp_path / "ref.json"))  # the floor
    s = ref["summary"]
    assert ref["cache_flushed"] is True  # the simulator answers /flush_cache as SGLang does
    assert ref["chat_template_kwargs"] == {"thinking": False}  # the prompt set's: the thinking off
    # The simulated model does arithmetic (4 of the 9 checked answers), with the parsers valid calls, and
    # with the thinking off every reply has its answer.
    assert (s["answers_right"], s["answers_evaluated"], s["tool_calls_valid"], s["thinking_in_content"]) == (4, 9, 2, 0)
    assert s["token_ids"] == 11
    equal = probe(start_sim(KIMI + ["--speculative-algorithm", "EAGLE3"], env={**FAST, "SGLANG_SIM_NOISE_NONCE": "3"}),
                  tmp_path / "equal.json", "equal", "--force", str(tmp_path / "ref.json"))
    rc, v = verdict(tmp_path, tmp_path / "equal.json", tmp_path / "ref.json", tmp_path / "floor.json")
    assert rc == 0 and v["verdict"] == "pass", v["report"]
    assert [f["value"] for f in v["figures"][:3]] == [1.0, 1.0, 0.0] and v["figures"][1]["floor"] == 1.0
    assert equal["summary"] == s

    corrupted = start_sim(KIMI, env={**FAST, "SGLANG_SIM_OUTPUT_CORRUPTION": "0.5"})
    probe(corrupted, tmp_path / "corrupted.json", "corrupted", "--force", str(tmp_path / "ref.json"))
    rc, v = verdict(tmp_path, tmp_path / "corrupted.json", tmp_path / "ref.json", tmp_path / "floor.json")
    assert rc == 2 and v["verdict"] == "fail" and v["reason"].startswith("agreement with the reference"), v["report"]
    assert {"top-1 agreement under teacher forcing", "confident disagreements under teacher forcing"} <= failed(v)

    broken = start_sim(KIMI, env={**FAST, "SGLANG_SIM_TOOL_FORMAT": "broken"})
    out = probe(broken, tmp_path / "broken.json", "broken", "--force", str(tmp_path / "ref.json"))
    assert out["summary"]["tool_calls_valid"] == 0
    rc, v = verdict(tmp_path, tmp_path / "broken.json", tmp_path / "ref.json", tmp_path / "floor.json")
    assert rc == 2 and failed(v) == {"agreement with the reference", "valid tool calls"}, v["report"]
    assert "tool-weather: the same tokens, another text" in v["report"]  # the model is the same, its parser is not

    no_parsers = start_sim(env=FAST)  # the server rendered without Kimi's parsers: the thinking on shows in content
    probe(no_parsers, tmp_path / "plain.json", "no parsers", "--chat-template-kwargs", "{}",
          "--force", str(tmp_path / "ref.json"))
    rc, v = verdict(tmp_path, tmp_path / "plain.json", tmp_path / "ref.json", tmp_path / "floor.json")
    assert {"valid tool calls", "replies with the thinking in content"} <= failed(v), v["report"]


def test_a_probe_whose_thinking_used_up_its_tokens_is_inconclusive(start_sim, tmp_path):
    # Thinking on and a short budget: what the H200 probe of a thinking model did (0 of 9 answers). 64 tokens
    # (the simulated thinking is 92 tokens and more for these prompts); the simulator's tool calls do not
    # think long: the prompt set without its tool prompts here.
    prompts = json.loads(PROMPTS.read_text())
    prompts["prompts"] = [p for p in prompts["prompts"] if "tool" not in p]
    prompts["max_tokens"] = 64
    (tmp_path / "prompts.json").write_text(json.dumps(prompts))
    sim = start_sim(KIMI, env=FAST)
    ref = probe(sim, tmp_path / "ref.json", "old", "--chat-template-kwargs", "{}", prompts=tmp_path / "prompts.json")
    new = probe(sim, tmp_path / "new.json", "new", "--chat-template-kwargs", "{}", "--force", str(tmp_path / "ref.json"),
                prompts=tmp_path / "prompts.json")
    assert ref["summary"]["answers_evaluated"] == 0 and ref["summary"]["answers_right"] == 0
    rc, v = verdict(tmp_path, tmp_path / "new.json", tmp_path / "ref.json", None)
    assert rc == 0 and v["verdict"] == "inconclusive", v["report"]
    assert v["reason"] == "evaluated nothing: right answers; valid tool calls"
    assert new["summary"]["answers_right"] == 0
    # The same prompts with the thinking off (the probe's default) check 9 answers: conclusive.
    probe(sim, tmp_path / "off.json", "off", prompts=tmp_path / "prompts.json")
    probe(sim, tmp_path / "off2.json", "off again", "--force", str(tmp_path / "off.json"), prompts=tmp_path / "prompts.json")
    rc, v = verdict(tmp_path, tmp_path / "off2.json", tmp_path / "off.json", None)
    assert v["reason"] == "evaluated nothing: valid tool calls" and v["figures"][3]["value"] == 4, v["report"]
