"""The simulator speaks SGLang 0.5.9's HTTP shapes, enforces --api-key like SGLang, and stops cleanly."""

from __future__ import annotations

import json
import signal
import time

import requests

READY = "The server is fired up and ready to roll!"


def sse_events(resp: requests.Response) -> list[str]:
    return [line[len("data: "):] for line in resp.iter_lines(decode_unicode=True) if line.startswith("data: ")]


def test_health_is_503_while_loading_then_200(start_sim) -> None:
    sim = start_sim(env={"SGLANG_SIM_LOAD_SECONDS": "1.5"}, wait="listening on")
    assert requests.get(sim.url + "/health_generate", timeout=5).status_code == 503
    assert requests.get(sim.url + "/health", timeout=5).status_code == 503
    assert requests.post(sim.url + "/generate", json={"text": "hi"}, timeout=5).status_code == 503
    # /v1/models answers before the server is ready, which is why readiness must not be gated on it
    assert requests.get(sim.url + "/v1/models", timeout=5).status_code == 200
    sim.wait_for_log(READY)
    assert time.monotonic() - sim.started >= 1.5
    started = time.monotonic()
    assert requests.get(sim.url + "/health_generate", timeout=5).status_code == 200
    assert time.monotonic() - started >= 0.9  # SGLang's health check polls once a second


def test_never_ready_fault(start_sim) -> None:
    # the fault's own line comes once the port is open (the word alone is in the settings line before it)
    sim = start_sim(env={"SGLANG_SIM_FAULT": "never_ready"}, wait="staying in the starting state")
    for _ in range(2):
        assert requests.get(sim.url + "/health_generate", timeout=5).status_code == 503
        time.sleep(0.3)
    assert READY not in sim.stdout()


def test_api_key_is_enforced_except_health(start_sim) -> None:
    sim = start_sim(["--api-key", "k-123456"])
    good = {"Authorization": "Bearer k-123456"}
    for path in ("/get_server_info", "/get_model_info", "/v1/models"):
        resp = requests.get(sim.url + path, timeout=5)
        assert resp.status_code == 401 and resp.json() == {"error": "Unauthorized"}
        assert requests.get(sim.url + path, headers={"Authorization": "Bearer wrong"}, timeout=5).status_code == 401
        assert requests.get(sim.url + path, headers=good, timeout=5).status_code == 200
    assert requests.post(sim.url + "/generate", json={"text": "a"}, timeout=5).status_code == 401
    assert requests.post(sim.url + "/v1/chat/completions", json={"messages": []}, timeout=5).status_code == 401
    assert requests.get(sim.url + "/health", timeout=5).status_code == 200
    assert requests.get(sim.url + "/health_generate", timeout=5).status_code == 200


def test_native_generate_shapes_with_speculation(start_sim) -> None:
    sim = start_sim(["--speculative-algorithm", "EAGLE3"],
                    env={"SGLANG_SIM_DECODE_TOK_S": "500", "SGLANG_SIM_TTFT_MS": "10"})
    body = {"text": "one two three", "sampling_params": {"max_new_tokens": 40}}
    plain = requests.post(sim.url + "/generate", json=body, timeout=10).json()
    meta = plain["meta_info"]
    assert meta["completion_tokens"] == 40 == len(plain["output_ids"])
    assert meta["prompt_tokens"] == 3
    assert meta["finish_reason"] == {"type": "length", "length": 40}
    assert meta["spec_accept_length"] == 40 / meta["spec_verify_ct"]
    assert meta["spec_accept_token_num"] == 40 - 1 - meta["spec_verify_ct"]
    assert sum(meta["spec_accept_histogram"]) == meta["spec_verify_ct"]
    assert meta["e2e_latency"] > 0 and meta["weight_version"] == "default"

    resp = requests.post(sim.url + "/generate", json={**body, "stream": True}, stream=True, timeout=10)
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts[0] == 1 and counts[-1] == 40 and counts == sorted(counts)
    assert len(chunks) < 40  # several tokens per event: the reason clients must not count events
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert "spec_verify_ct" in chunks[-1]["meta_info"] and "spec_verify_ct" not in chunks[0]["meta_info"]
    assert chunks[-1]["text"].startswith(chunks[0]["text"])  # cumulative text, as SGLang sends it


def test_openai_chat_and_completions_shapes(start_sim) -> None:
    sim = start_sim(env={"SGLANG_SIM_DECODE_TOK_S": "500", "SGLANG_SIM_TTFT_MS": "10"})
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 7}
    resp = requests.post(sim.url + "/v1/chat/completions", json=chat, timeout=10).json()
    assert resp["object"] == "chat.completion" and resp["choices"][0]["message"]["role"] == "assistant"
    assert resp["choices"][0]["finish_reason"] == "length"
    assert resp["usage"]["completion_tokens"] == 7 and resp["usage"]["total_tokens"] == 7 + resp["usage"]["prompt_tokens"]

    stream = {**chat, "stream": True, "stream_options": {"include_usage": True}}
    events = sse_events(requests.post(sim.url + "/v1/chat/completions", json=stream, stream=True, timeout=10))
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "reasoning_content": None,
                                                "tool_calls": None}
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 7
    assert all(c["usage"] is None for c in chunks[:-1])
    text = "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks[1:-1])
    assert len(text.split()) == 7

    comp = {"model": "m", "prompt": "hello", "max_tokens": 5, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    events = sse_events(requests.post(sim.url + "/v1/completions", json=comp, stream=True, timeout=10))
    chunks = [json.loads(e) for e in events[:-1]]
    words = 0
    for chunk in chunks[:-1]:  # per-chunk usage is cumulative and matches the text sent so far
        words += len(chunk["choices"][0]["text"].split())
        assert chunk["usage"]["completion_tokens"] == words
    assert words == 5
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    final = chunks[-1]
    assert final["choices"] == [] and "prompt_tokens_details" not in final["usage"]  # exclude_none dump


def test_info_endpoints(start_sim) -> None:
    sim = start_sim(["--served-model-name", "kimi"])
    models = requests.get(sim.url + "/v1/models", timeout=5).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "kimi"
    info = requests.get(sim.url + "/get_model_info", timeout=5).json()
    assert info["model_path"] == "moonshotai/Kimi-K2.5" and info["is_generation"] is True
    assert requests.get(sim.url + "/nope", timeout=5).status_code == 404
    assert requests.get(sim.url + "/generate", timeout=5).status_code == 405


def test_server_info_reports_measured_accept_length(start_sim) -> None:
    """avg_spec_accept_length appears once decode steps are logged (every --decode-log-interval)."""
    sim = start_sim(["--speculative-algorithm", "EAGLE3", "--decode-log-interval", "10"],
                    env={"SGLANG_SIM_DECODE_TOK_S": "1000", "SGLANG_SIM_TTFT_MS": "1",
                         "SGLANG_SIM_ACCEPT_LENGTH": "3.2"})
    assert "avg_spec_accept_length" not in requests.get(sim.url + "/get_server_info", timeout=5).json()["internal_states"][0]
    requests.post(sim.url + "/generate", json={"text": "a", "sampling_params": {"max_new_tokens": 400}}, timeout=10)
    state = requests.get(sim.url + "/get_server_info", timeout=5).json()["internal_states"][0]
    assert abs(state["avg_spec_accept_length"] - 3.2) < 0.05
    assert "accept len: 3.2" in sim.stdout()


def test_sigterm_stops_cleanly_mid_stream(start_sim) -> None:
    sim = start_sim(env={"SGLANG_SIM_DECODE_TOK_S": "20"})
    resp = requests.post(sim.url + "/generate", json={"text": "a", "stream": True,
                                                      "sampling_params": {"max_new_tokens": 1000}},
                         stream=True, timeout=10)
    next(resp.iter_lines())
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.wait_exit(timeout=5) == 0
    assert "Shutting down" in sim.stdout()


def test_bad_simulator_setting_is_a_clear_error(start_sim) -> None:
    sim = start_sim(env={"SGLANG_SIM_FAULT": "explode"}, wait=None)
    assert sim.wait_exit() == 2
    assert "SGLANG_SIM_FAULT item 'explode' unknown" in sim.stderr()
    sim = start_sim(["--speculative-algorithm", "EAGLE3"], env={"SGLANG_SIM_ACCEPT_LENGTH": "4.5"}, wait=None)
    assert sim.wait_exit() == 2
    assert "speculative_num_draft_tokens=4" in sim.stderr()
