"""The correctness verdict's teacher forcing (files/sglang_correctness.py) on recordings in SGLang's raw shape:
/generate answers whose meta_info holds input_token_logprobs and input_top_logprobs ([logprob, token_id,
text] triples from logprob_start_len on, the first logprob null; scheduler_output_processor_mixin in 0.5.9,
logprob_result_processor in 0.5.17 and 0.5.23). The pairs below are synthetic recordings of the kinds
issue 40 names: correct ones (a speculative-vs-plain pair parting at near-ties on 7 of 11 prompts, as
the H200 did; a cross-release pair with a few more flips) pass with the defaults, corrupted ones (a
garbled token stream, a stream shifted by one token, a tool-call format the parser cannot read, a parser
that truncates) fail; a probe that checked no answer and no tool call is inconclusive."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys

import pytest

from repo import ROOT, load

cc = load("roles/sglang_bench/files/sglang_correctness.py")
TOOL = ROOT / "roles/sglang_bench/files/sglang_correctness.py"
PROMPTS = json.loads((ROOT / "roles/sglang_bench/files/sglang_correctness_prompts.json").read_text())
RIGHT = {"arith-mul": "391", "arith-sub": "635", "arith-add": "5859", "arith-div": "12", "reason-books": "29",
         "reason-days": "Friday", "reason-compare": "0.3", "code-even": "def is_even(n): return n % 2 == 0",
         "code-reverse": "s[::-1]"}
CALLS = {"tool-weather": ("get_weather", {"city": "Paris", "unit": "celsius"}),
         "tool-currency": ("convert_currency", {"amount": 100, "source": "USD", "target": "EUR"})}
LENGTH = 96  # the prompt set's max_tokens: replies as long as the H200's random-weight model's
LP = -0.1  # the server's top choice's log-probability in these recordings


def word(token: int) -> str:
    """The synthetic detokenizer: one word per id."""
    return f"w{token}"


def reference_tokens(prompt: dict) -> list[int]:
    rng = random.Random(prompt["id"])
    return [rng.randrange(100, 50_000) for _ in range(LENGTH)]


def message(prompt: dict, ids: list[int], answer: str | None = None) -> dict:
    """The chat reply of a stream: the tool call for a tool prompt (the parser's), else its words, the answer first."""
    if prompt["id"] in CALLS:
        name, args = CALLS[prompt["id"]]
        return {"content": None, "reasoning_content": None, "tool_calls": [
            {"id": f"functions.{name}:0", "index": 0, "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]}
    first = RIGHT[prompt["id"]] if answer is None else answer
    return {"content": " ".join([first, *map(word, ids[1:])]), "reasoning_content": None, "tool_calls": None}


def forced_reply(prompt_ids: list[int], tokens: list[int], top: dict[int, tuple[int, float]]) -> dict:
    """SGLang's raw /generate answer to a teacher-forcing request (input_ids = prompt + tokens, logprob_start_len
    one before the output, top_logprobs_num 2, max_new_tokens 1): at position k the server's top choice is
    tokens[k] (gap 0) unless top[k] = (its own choice, the gap of tokens[k] below it)."""
    entries, tops = [[None, prompt_ids[-1], None]], [None]
    for k, token in enumerate(tokens):
        choice, gap = top.get(k, (token, 0.0))
        entries.append([LP - gap, token, None])
        runner = [LP - gap, token, None] if choice != token else [LP - 2.5, token + 1, None]
        tops.append([[LP, choice, None], runner])
    return {"text": " w1", "output_ids": [1],
            "meta_info": {"id": "0", "finish_reason": {"type": "length", "length": 1}, "prompt_tokens": len(entries),
                          "completion_tokens": 1, "cached_tokens": 0, "input_token_logprobs": entries,
                          "output_token_logprobs": [[LP, 1, None]], "input_top_logprobs": tops,
                          "output_top_logprobs": [[[LP, 1, None], [LP - 2.5, 2, None]]]}}


def probe(label: str, reference: dict | None = None, flips: dict | None = None, edit=None) -> dict:
    """A probe of a server as the tool records it. `reference`: the probe whose tokens this server scored (its
    --force); flips[prompt id] = {k: (this server's token, gap)}: where this server's top choice is another
    token than the reference's, gap nats above it; its greedy reply then takes that token at the first such
    k and goes on its own way. `edit(prompt, result)` changes the recorded reply afterwards."""
    results = []
    for prompt in PROMPTS["prompts"]:
        prompt_ids = [1, 2, 3, *range(10, 10 + len(prompt["text"]) // 4)]
        ref_ids = reference_tokens(prompt)
        flip = (flips or {}).get(prompt["id"], {})
        ids = list(ref_ids)
        if flip:
            k = min(flip)
            rng = random.Random(f"{label}{prompt['id']}")
            ids = ref_ids[:k] + [flip[k][0]] + [rng.randrange(100, 50_000) for _ in range(LENGTH - k - 1)]
        result = {"id": prompt["id"], "kind": prompt["kind"], "prompt_token_ids": prompt_ids, "output_token_ids": ids,
                  "message": message(prompt, ids), "finish_reason": "length"}
        if reference is not None:
            forced_of = next(r for r in reference["results"] if r["id"] == prompt["id"])
            result["forced"] = {"of": reference["label"], "prompt_tokens": len(prompt_ids),
                                "tokens": len(forced_of["output_token_ids"]),
                                "reply": forced_reply(prompt_ids, forced_of["output_token_ids"], flip)}
        if edit:
            edit(prompt, result)
        result.update(cc.judge(prompt, result["message"]))
        results.append(result)
    return {"schema": cc.SCHEMA, "label": label, "results": results, "summary": cc.summary(results)}


REF = probe("old")
FLOOR = probe("old again", REF)  # the reference's server scoring its own first probe's tokens


def failed(v: dict) -> set[str]:
    return {f["figure"] for f in v["figures"] if f["ok"] is False}


def near_ties(ids: list[str], at: int = 5, gap: float = 0.08) -> dict:
    """Flips at near-ties: at token `at` of each prompt the server prefers another token by `gap` nats."""
    return {pid: {at: (7, gap)} for pid in ids}


# ----- the raw shape -----
def test_score_forced_reads_sglangs_raw_answer_and_skips_the_unscored_first_position():
    tokens = [500, 501, 502, 503]
    reply = forced_reply([1, 2, 3], tokens, {2: (999, 0.3)})
    score = cc.score_forced(reply, count=len(tokens))
    assert (score["tokens"], score["top1"], score["ids"]) == (4, 3, tokens)
    assert [r["gap"] for r in score["rows"]] == [0.0, 0.0, 0.3, 0.0] and score["rows"][2]["argmax"] == 999
    # Without a count every position with a logprob: the prompt's last token has none (SGLang's [None] + ...).
    assert cc.score_forced(reply)["tokens"] == 4 and cc.score_forced(reply)["unscored"] == 1
    # meta_info alone, as a recording may keep it, scores the same
    assert cc.score_forced(reply["meta_info"], 4)["rows"] == score["rows"]
    # a gap above the tie is a confident disagreement
    assert cc.score_forced(forced_reply([1], tokens, {1: (9, 4.0)}), 4, tie_nats=0.5)["confident"] == 1
    with pytest.raises(ValueError, match="input_top_logprobs"):
        cc.score_forced({"meta_info": {"input_token_logprobs": reply["meta_info"]["input_token_logprobs"]}})
    with pytest.raises(ValueError, match="return_logprob"):
        cc.score_forced({"text": "x", "meta_info": {}})
    with pytest.raises(ValueError, match="6 tokens to score"):
        cc.score_forced(reply, count=6)


def test_the_teacher_forcing_request_scores_every_output_token():
    body = cc.forced_request([1, 2, 3], [7, 8])
    assert body["input_ids"] == [1, 2, 3, 7, 8] and body["return_logprob"] is True
    assert body["logprob_start_len"] == 2  # one before the output: its first logprob is the scheduler's None
    assert body["top_logprobs_num"] >= 2 and body["sampling_params"] == {"max_new_tokens": 1, "temperature": 0.0}


def test_the_score_command_reads_a_recording_file(tmp_path):
    path = tmp_path / "recording.json"
    path.write_text(json.dumps([forced_reply([1, 2], [5, 6, 7], {}), forced_reply([1, 2], [5, 6, 7], {0: (9, 2.0)})]))
    proc = subprocess.run([sys.executable, str(TOOL), "score", str(path), "--count", "3"], capture_output=True,
                          text=True, timeout=60, check=True)
    out = json.loads(proc.stdout)
    assert (out["replies"], out["tokens"], out["confident"], out["max_gap"]) == (2, 6, 1, 2.0)
    assert out["top1_share"] == round(5 / 6, 6)


def test_a_recorded_pair_of_raw_generate_answers_is_judged_by_the_same_verdict():
    prompts = {p["id"]: p for p in PROMPTS["prompts"] if "answer" in p}
    greedy_ref = {pid: {"text": RIGHT[pid], "output_ids": reference_tokens(p)} for pid, p in prompts.items()}
    greedy_new = copy.deepcopy(greedy_ref)
    forced = {pid: forced_reply([1, 2], reference_tokens(p), {}) for pid, p in prompts.items()}
    ref = cc.recorded_probe("ref", greedy_ref, prompts=prompts)
    floor = cc.recorded_probe("ref again", greedy_ref, forced, prompts=prompts)
    v = cc.verdict(cc.recorded_probe("new", greedy_new, forced, prompts=prompts), ref, floor, 0.5, 1)
    assert not failed(v) and v["figures"][1]["value"] == 1.0, cc.report(v)
    garbled = {pid: forced_reply([1, 2], reference_tokens(p), {k: (3, 6.0) for k in range(0, LENGTH, 2)})
               for pid, p in prompts.items()}
    v = cc.verdict(cc.recorded_probe("bad", greedy_new, garbled, prompts=prompts), ref, floor, 0.5, 1)
    assert "top-1 agreement under teacher forcing" in failed(v)


# ----- correct pairs pass -----
def test_a_speculative_vs_plain_pair_parting_at_near_ties_passes_where_exact_replies_failed():
    # As on the H200: 7 of 11 replies part from the other start's at near-ties (there one was a tool prompt;
    # here a tool call's text does not follow its tokens, so a reasoning prompt stands in for it).
    parting = ["arith-mul", "arith-sub", "arith-add", "arith-div", "reason-books", "code-even", "reason-days"]
    plain = probe("plain", REF, near_ties(parting))
    v = cc.verdict(plain, REF, FLOOR, 0.5, 1)
    assert v["verdict"] == "pass", cc.report(v)
    agree, top1, confident = v["figures"][:3]
    assert agree["identical"] == round(4 / 11, 4)  # exact replies: 0.36 < 0.5, the old rule failed this pair
    assert (agree["value"], agree["unexplained"]) == (1.0, 0)
    assert {d["id"] for d in agree["detail"]} == set(parting) and {d["parting"] for d in agree["detail"]} == {"near-tie"}
    assert top1["value"] == round(1 - 7 / (11 * LENGTH), 6) and confident["value"] == 0.0
    without_forcing = {k: v for k, v in plain.items()}
    without_forcing["results"] = [{k: x for k, x in r.items() if k != "forced"} for r in plain["results"]]
    assert cc.verdict(without_forcing, REF, FLOOR, 0.5, 1)["verdict"] == "fail"  # exact replies alone: fails
    # EAGLE-3's lossless check judges the same pair the same way
    lo = cc.lossless(REF, plain, FLOOR, 0.25, 0)
    assert lo["verdict"] == "pass", cc.report(lo)


def test_a_cross_release_pair_with_more_flips_passes():
    flips = {**near_ties(["arith-mul", "reason-days", "code-reverse"], at=0, gap=0.3),
             **near_ties(["reason-books", "code-even", "tool-currency"], at=40, gap=0.45)}
    v = cc.verdict(probe("new release", REF, flips), REF, FLOOR, 0.5, 1)
    assert v["verdict"] == "pass", cc.report(v)
    assert v["figures"][0]["value"] == 1.0 and v["figures"][2]["value"] == 0.0


# ----- corrupted ones fail -----
def test_a_garbled_token_stream_fails_on_every_token_figure():
    rng = random.Random(3)
    garbled = {p["id"]: {k: (rng.randrange(100, 50_000), rng.uniform(2, 9)) for k in range(LENGTH)}
               for p in PROMPTS["prompts"]}
    v = cc.verdict(probe("garbled", REF, garbled), REF, FLOOR, 0.5, 1)
    assert v["verdict"] == "fail"
    assert {"agreement with the reference", "top-1 agreement under teacher forcing",
            "confident disagreements under teacher forcing"} <= failed(v), cc.report(v)
    assert "unexplained at token 0" in cc.report(v)


def test_a_stream_shifted_by_one_token_fails():
    # The server predicts the token after the reference's (an off-by-one in a cache or position kernel).
    shifted = {p["id"]: {k: (reference_tokens(p)[k + 1], 3.0) for k in range(LENGTH - 1)} for p in PROMPTS["prompts"]}
    v = cc.verdict(probe("shifted", REF, shifted), REF, FLOOR, 0.5, 1)
    assert {"agreement with the reference", "top-1 agreement under teacher forcing",
            "confident disagreements under teacher forcing"} <= failed(v), cc.report(v)


def test_a_tool_call_format_the_parser_cannot_read_fails_although_the_tokens_are_the_same():
    def as_text(prompt, result):
        if prompt["id"] in CALLS:
            name, args = CALLS[prompt["id"]]
            result["message"] = {"content": f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0"
                                            f"<|tool_call_argument_begin|>{json.dumps(args)}<|tool_call_end|>",
                                 "reasoning_content": None, "tool_calls": None}
    v = cc.verdict(probe("broken tools", REF, edit=as_text), REF, FLOOR, 0.5, 1)
    assert failed(v) == {"agreement with the reference", "valid tool calls"}, cc.report(v)
    rows = {d["id"]: d["parting"] for d in v["figures"][0]["detail"]}
    assert rows == {"tool-weather": "the same tokens, another text", "tool-currency": "the same tokens, another text"}
    assert v["figures"][1]["value"] == 1.0  # the model is the same: teacher forcing alone cannot see a parser


def test_a_parser_that_truncates_the_reply_fails():
    def truncate(prompt, result):
        if result["message"]["content"]:
            result["message"]["content"] = result["message"]["content"][:2]
    v = cc.verdict(probe("truncating", REF, edit=truncate), REF, FLOOR, 0.5, 1)
    assert {"agreement with the reference", "right answers"} <= failed(v), cc.report(v)
    assert v["figures"][0]["unexplained"] == 9


def test_a_broken_draft_path_fails_the_lossless_check_though_its_own_floor_agrees_with_it():
    # The speculative server's tokens are wrong where its draft got through unverified; its second probe
    # (the floor) gives the same wrong tokens, scored by its own target prefill: confidently against them.
    wrong = {p["id"]: {k: (reference_tokens(p)[k] + 1, 5.0) for k in range(3, LENGTH, 4)} for p in PROMPTS["prompts"]}
    spec = REF
    spec_floor = probe("speculative again", spec, wrong)
    spec_floor["results"] = [{**r, "output_token_ids": s["output_token_ids"], "message": s["message"]}
                             for r, s in zip(spec_floor["results"], spec["results"], strict=True)]
    plain = probe("plain", spec, wrong)
    lo = cc.lossless(spec, plain, spec_floor, 0.25, 0)
    assert lo["verdict"] == "fail", cc.report(lo)
    top1 = next(f for f in lo["figures"] if f["figure"].startswith("top-1"))
    assert top1["floor_used"] is False  # a floor sure of other tokens is no floor: 1.0 is asked
    assert "confident disagreements of the target with the speculative tokens" in failed(lo)


# ----- nothing checked: inconclusive -----
def test_a_probe_that_checked_no_answer_and_no_tool_call_is_inconclusive_not_a_pass():
    # What the H200 showed with a thinking model: every reply cut off in its thinking, no answer to check,
    # no tool call; the old verdict passed "right answers 0 >= 0" and "valid tool calls 0 >= 0".
    def thinking_only(prompt, result):
        result["message"] = {"content": None, "reasoning_content": "Let me think about " + prompt["text"],
                             "tool_calls": None}
        result["finish_reason"] = "length"
    ref = probe("old", edit=thinking_only)
    v = cc.verdict(probe("new", ref, edit=thinking_only), ref, probe("old again", ref, edit=thinking_only), 0.5, 1)
    assert v["verdict"] == "inconclusive", cc.report(v)
    assert v["reason"] == "evaluated nothing: right answers; valid tool calls"
    answers = next(f for f in v["figures"] if f["figure"] == "right answers")
    assert answers["ok"] is None and "0 and 0 of 9 replies had an answer to check" in answers["inconclusive"]
    assert "right answers: 0, reference 0" in cc.report(v) and "inconclusive: no right answer" in cc.report(v)
    assert cc.summary(ref["results"])["answers_evaluated"] == 0


def test_one_side_with_answers_is_conclusive():
    def no_tools(prompt, result):
        if prompt["id"] in CALLS:
            result["message"] = {"content": "I cannot call tools.", "reasoning_content": None, "tool_calls": None}
    ref = probe("old", edit=no_tools)
    v = cc.verdict(probe("new", ref, edit=no_tools), ref, None, 0.5, 1)
    assert v["verdict"] == "inconclusive" and v["reason"] == "evaluated nothing: valid tool calls", cc.report(v)
    # a reference with tool calls and a candidate without: that is a loss, not nothing
    v = cc.verdict(probe("new", REF, edit=no_tools), REF, FLOOR, 0.5, 1)
    assert v["verdict"] == "fail" and "valid tool calls" in failed(v)
