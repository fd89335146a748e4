"""The correctness probe's checks and verdicts (files/sglang_correctness.py) on recorded replies: the
same release twice (the noise floor), a reply that ties at its last token, a wholly different one, a
malformed tool call, thinking left in content, a release whose answers went wrong."""

from __future__ import annotations

import copy
import json

import pytest

from repo import ROOT, load

cc = load("roles/sglang_bench/files/sglang_correctness.py")
PROMPTS = json.loads((ROOT / "roles/sglang_bench/files/sglang_correctness_prompts.json").read_text())
RIGHT = {"arith-mul": "391", "arith-sub": "635", "arith-add": "5859", "arith-div": "12", "reason-books": "29",
         "reason-days": "Friday", "reason-compare": "0.3", "code-even": "def is_even(n):\n    return n % 2 == 0",
         "code-reverse": "s[::-1]"}
CALLS = {"tool-weather": ("get_weather", {"city": "Paris", "unit": "celsius"}),
         "tool-currency": ("convert_currency", {"amount": 100, "source": "USD", "target": "EUR"})}


def message(prompt: dict, content: str | None = None, thinking: str = "Let me see.") -> dict:
    if prompt["id"] in CALLS:
        name, args = CALLS[prompt["id"]]
        calls = [{"id": f"functions.{name}:0", "index": 0, "type": "function",
                  "function": {"name": name, "arguments": json.dumps(args)}}]
        return {"content": None, "reasoning_content": thinking, "tool_calls": calls}
    return {"content": RIGHT[prompt["id"]] if content is None else content, "reasoning_content": thinking,
            "tool_calls": None}


def probe(label: str, change=None) -> dict:
    """A probe as the tool records it, from replies (`change` edits a reply by prompt id)."""
    results = []
    for prompt in PROMPTS["prompts"]:
        msg = copy.deepcopy(message(prompt))
        if change:
            change(prompt, msg)
        results.append({"id": prompt["id"], "kind": prompt["kind"], "message": msg, **cc.judge(prompt, msg)})
    return {"label": label, "results": results, "summary": cc.summary(results)}


def run(candidate, reference=None, floor=None, **kw):
    return cc.verdict(candidate, reference, floor, kw.get("min_agreement", 0.5), kw.get("max_answers_lost", 1))


def test_the_right_replies_are_judged_right():
    s = probe("ref")["summary"]
    assert (s["accuracy"], s["answers"], s["tool_calls_valid"], s["tool_prompts"], s["thinking_in_content"]) == (
        1.0, 9, 2, 2, 0)


def test_an_identical_release_passes_with_the_floor_stated():
    ref, floor, cand = probe("old"), probe("old again"), probe("new")
    v = run(cand, ref, floor)
    assert v["verdict"] == "pass"
    agreement = v["figures"][0]
    assert (agreement["value"], agreement["floor"], agreement["detail"]) == (1.0, 1.0, [])


def test_a_tie_at_the_last_token_is_a_late_divergence_and_passes():
    def tie(prompt, msg):
        if prompt["id"] == "code-even":
            msg["content"] = "def is_even(n):\n    return n % 2 == 0 and True"
    v = run(probe("new", tie), probe("old"), probe("old again"))
    assert v["verdict"] == "pass"
    (div,) = v["figures"][0]["detail"]
    words = cc.reply_words({"message": message(PROMPTS["prompts"][7])})
    assert div["id"] == "code-even" and div["first_divergence"] == len(words)  # after every shared token


def test_wholly_different_replies_fail_on_agreement_and_accuracy():
    def garbage(prompt, msg):
        msg["reasoning_content"] = "zebra quantum " * 5
        if msg["content"]:
            msg["content"] = "lorem ipsum dolor"
    v = run(probe("new", garbage), probe("old"), probe("old again"))
    assert v["verdict"] == "fail"
    failed = {f["figure"] for f in v["figures"] if not f["ok"]}
    assert failed == {"agreement with the reference", "right answers"}
    assert all(d["first_divergence"] == 0 for d in v["figures"][0]["detail"])


@pytest.mark.parametrize("broken,problem", [
    ({"arguments": "{\"city\": \"Paris\""}, "not JSON"),
    ({"arguments": json.dumps({"city": "Paris", "unit": "kelvin"})}, "not one of"),
    ({"arguments": json.dumps({"city": 7, "unit": "celsius"})}, "arguments.city is int, not string"),
    ({"name": "get_time"}, "expected 'get_weather'"),
])
def test_a_malformed_tool_call_is_named_and_fails(broken, problem):
    def spoil(prompt, msg):
        if prompt["id"] == "tool-weather":
            msg["tool_calls"][0]["function"].update(broken)
    cand = probe("new", spoil)
    bad = next(r for r in cand["results"] if r["id"] == "tool-weather")
    assert not bad["tool"]["valid"] and problem in bad["tool"]["problem"]
    v = run(cand, probe("old"), probe("old again"))
    assert v["verdict"] == "fail" and "valid tool calls" in v["reason"]


def test_a_tool_call_returned_as_text_and_the_thinking_in_content_fail():
    def no_parsers(prompt, msg):
        if msg["tool_calls"]:
            msg["content"] = f"<think>{msg['reasoning_content']}</think><|tool_calls_section_begin|>..."
            msg["tool_calls"] = None
            msg["reasoning_content"] = None
    v = run(probe("new", no_parsers), probe("old"))
    failed = {f["figure"] for f in v["figures"] if not f["ok"]}
    assert {"valid tool calls", "replies with the thinking in content"} <= failed


def test_one_wrong_answer_is_within_the_default_loss_two_are_not():
    def wrong(ids):
        def change(prompt, msg):
            if prompt["id"] in ids:
                msg["content"] = "0"
        return change
    ref = probe("old")
    assert run(probe("new", wrong({"arith-mul"})), ref)["verdict"] == "pass"  # 8 right against 9: one lost
    v = run(probe("new", wrong({"arith-mul", "arith-sub"})), ref)
    assert v["verdict"] == "fail" and "right answers" in v["reason"]
    # a floor whose two probes differ by one answer allows one more
    assert run(probe("new", wrong({"arith-mul", "arith-sub"})), ref, probe("again", wrong({"arith-div"})))["verdict"] == "pass"


def test_a_floor_that_disagrees_with_itself_lowers_what_is_asked():
    def late(ids):
        def change(prompt, msg):
            if prompt["id"] in ids:
                msg["reasoning_content"] += " hmm"
        return change
    ref = probe("old")
    floor = probe("old again", late({"arith-mul", "arith-sub", "arith-add", "arith-div"}))  # 7/11 identical
    cand = probe("new", late({p["id"] for p in PROMPTS["prompts"][:7]}))  # 4/11 identical
    assert run(cand, ref)["verdict"] == "fail"  # without a floor: needs 0.5
    v = run(cand, ref, floor)
    assert v["figures"][0]["threshold"].startswith(f">= {round(0.5 * 7 / 11, 4)} (identical replies; no teacher forcing")
    assert v["verdict"] == "pass"


def test_no_reference_says_so():
    v = run(probe("first"))
    assert v["verdict"] == "no reference" and v["figures"] == []


def test_the_reference_is_the_newest_other_release_that_did_not_fail(tmp_path):
    def put(name, data):
        (tmp_path / name).write_text(json.dumps(data))
    for session, release in [("20261201T000000Z", "r1"), ("20261202T000000Z", "r2"), ("20261203T000000Z", "r3")]:
        put(f"{session}-{release}-probe1.json", probe(release))
        put(f"{session}-{release}-probe2.json", probe(release))
    put("20261203T000000Z-r3-verdict.json", {"verdict": "fail"})  # r3 was rolled back for its answers
    ref, floor = cc.history_reference(tmp_path, "r4")
    assert (ref.name, floor.name) == ("20261202T000000Z-r2-probe1.json", "20261202T000000Z-r2-probe2.json")
    assert cc.history_reference(tmp_path, "r2")[0].name == "20261201T000000Z-r1-probe1.json"  # never itself
    put("20261204T000000Z-r4-probe1.json", probe("r4"))
    assert cc.main(["judge", "--history", str(tmp_path), "--session", "20261204T000000Z", "--release", "r4"]) == 0
    judged = json.loads((tmp_path / "20261204T000000Z-r4-verdict.json").read_text())
    assert judged["verdict"] == "pass" and judged["reference_file"].endswith("r2-probe1.json")
    assert cc.history_reference(tmp_path / "empty", "r4") == (None, None)
