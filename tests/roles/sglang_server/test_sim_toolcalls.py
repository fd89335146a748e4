"""The SIMULATOR's chat reply to a request with tools, as SGLang 0.5.9's serving_chat shapes Kimi-K2's
output with and without --tool-call-parser / --reasoning-parser kimi_k2 (sglang_sim/toolcalls.py),
and the server role rendering both parsers for a Kimi model by default."""

from __future__ import annotations

import json
import re

import jinja2
import requests
import yaml

from repo import ROOT

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "required": ["city", "unit"],
                   "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "kelvin"]},
                                  "days": {"type": "integer"}}}}}
ASK = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER], "max_tokens": 8}
FAST = {"SGLANG_SIM_DECODE_TOK_S": "500", "SGLANG_SIM_TTFT_MS": "10"}
KIMI = ["--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2"]


def sse_chunks(resp: requests.Response) -> list[dict]:
    lines = [ln[len("data: "):] for ln in resp.iter_lines(decode_unicode=True) if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def test_with_kimis_parsers_a_tool_call_and_the_thinking_are_separated(start_sim) -> None:
    sim = start_sim(KIMI, env=FAST)
    resp = requests.post(sim.url + "/v1/chat/completions", json=ASK, timeout=10).json()
    choice = resp["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    msg = choice["message"]
    assert msg["content"] is None and "get_weather" in msg["reasoning_content"]
    (call,) = msg["tool_calls"]
    assert call["id"] == "functions.get_weather:0" and call["type"] == "function" and call["index"] == 0
    args = json.loads(call["function"]["arguments"])  # a JSON string, matching the tool's schema
    assert call["function"]["name"] == "get_weather" and args == {"city": "sim", "unit": "celsius"}

    # A second call in the same conversation counts the ones before it (functions.NAME:N).
    follow = {**ASK, "messages": ASK["messages"] + [{"role": "assistant", "content": None, "tool_calls": [call]},
                                                     {"role": "tool", "tool_call_id": call["id"], "content": "18"}]}
    again = requests.post(sim.url + "/v1/chat/completions", json=follow, timeout=10).json()
    assert again["choices"][0]["message"]["tool_calls"][0]["id"] == "functions.get_weather:1"

    # tool_choice "none": no tool call, the plain reply.
    plain = requests.post(sim.url + "/v1/chat/completions", json={**ASK, "tool_choice": "none"}, timeout=10).json()
    assert plain["choices"][0]["finish_reason"] == "length" and plain["choices"][0]["message"]["tool_calls"] is None

    chunks = sse_chunks(requests.post(sim.url + "/v1/chat/completions", json={**ASK, "stream": True},
                                      stream=True, timeout=10))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0]["role"] == "assistant"
    assert any(d["reasoning_content"] for d in deltas) and not any(d["content"] for d in deltas)
    assert [d["tool_calls"][0]["function"]["name"] for d in deltas if d["tool_calls"]] == ["get_weather"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_without_the_parsers_the_call_and_the_thinking_come_back_as_text(start_sim) -> None:
    sim = start_sim(env=FAST)
    msg = requests.post(sim.url + "/v1/chat/completions", json=ASK, timeout=10).json()["choices"][0]["message"]
    assert msg["tool_calls"] is None and msg["reasoning_content"] is None
    assert msg["content"].startswith("<think>") and "<|tool_call_begin|>functions.get_weather:0" in msg["content"]


def render_parser(expression: str, **variables: str) -> str:
    """The role's own expression, evaluated with Jinja and Ansible's `match` test (re.match)."""
    env = jinja2.Environment()
    env.tests["match"] = lambda value, pattern: re.match(pattern, value) is not None
    return env.from_string(expression).render(**variables).strip()


def test_the_server_role_renders_kimis_parsers_for_a_kimi_model() -> None:
    defaults = yaml.safe_load((ROOT / "roles/sglang_server/defaults/main.yml").read_text())
    options = yaml.safe_load((ROOT / "roles/sglang_server/vars/main.yml").read_text())["__sglang_server_options"]
    for key in ("tool_call_parser", "reasoning_parser"):
        var = f"sglang_server_{key}"
        on = {var: defaults[var], "sglang_server_model_module": defaults["sglang_server_model_module"]}
        assert render_parser(options[key], **on) == "kimi_k2"  # the reference model, Kimi-K2.5 (kimi_k25)
        assert render_parser(options[key], **{**on, "sglang_server_model_module": "kimi_k2"}) == "kimi_k2"
        assert render_parser(options[key], **{**on, "sglang_server_model_module": "llama"}) == ""  # not rendered
        assert render_parser(options[key], **{**on, var: ""}) == ""
        assert render_parser(options[key], **{**on, var: "qwen3"}) == "qwen3"
