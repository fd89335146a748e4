"""Failures are reported clearly, exit non-zero and keep finished runs; the API key never leaks."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from simtruth import free_port, sim_env

FAST = sim_env(400.0, 5.0)  # 400 steps/s, 5 ms TTFT: failure tests need no realism, only speed


def test_http_500_keeps_completed_runs(start_sim, run_bench) -> None:
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "error_after_requests:3"})
    res = run_bench(sim.url, "--warmup", "1", "--runs", "5", "--max-tokens", "20")
    assert res.returncode == 1
    data = res.json
    assert data["ok"] is False and data["errors"] == 1 and data["ok_runs"] == 2
    assert data["runs_attempted"] == 3  # no new run after the first failure
    assert [r["ok"] for r in data["runs"]] == [True, True, False]
    assert data["runs"][2]["error"].startswith("HTTP 500 Internal Server Error")
    assert data["mean_tok_s"] == pytest.approx(sum(r["tok_s"] for r in data["runs"][:2]) / 2)
    assert "FAILED: 1 of 3 attempted runs failed (5 requested)" in res.stderr
    assert "HTTP 500" in res.stderr
    assert "over 2 runs" in res.stdout


def test_stream_dropped_mid_way(start_sim, run_bench) -> None:
    """crash_after_requests:2 kills the server half-way through the third generation request."""
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "crash_after_requests:2"})
    res = run_bench(sim.url, "--warmup", "1", "--runs", "3", "--max-tokens", "40")
    assert res.returncode == 1
    assert sim.wait_exit() == 1
    data = res.json
    assert data["ok_runs"] == 1 and data["errors"] == 1
    dropped = data["runs"][1]
    assert "dropped mid-way" in dropped["error"]
    assert dropped["events"] >= 20 and dropped["tokens"] is None  # partial streams count as errors
    assert "dropped mid-way" in res.stderr


def test_timeout(start_sim, run_bench) -> None:
    sim = start_sim(env=sim_env(10.0, 5.0))  # 200 tokens would take 20 s
    res = run_bench(sim.url, "--warmup", "0", "--runs", "2", "--max-tokens", "200", "--timeout", "1")
    assert res.returncode == 1
    run = res.json["runs"][0]
    assert run["error"].startswith("timed out after 1 s (--timeout)")
    assert 5 <= run["events"] <= 15
    assert res.json["runs_attempted"] == 1


def test_server_not_running(run_bench) -> None:
    res = run_bench(f"http://127.0.0.1:{free_port()}", "--runs", "2")
    assert res.returncode == 1
    assert "warmup failed: connection refused" in res.stderr
    assert "server_info_error" in res.json["environment"]
    assert res.json["runs"] == [] and res.json["mean_tok_s"] is None


@pytest.mark.parametrize("how", ["env", "openai-env", "flag"])
def test_api_key_sent_and_never_shown(start_sim, run_bench, how: str, tmp_path: Path) -> None:
    key = "sk-sim-7f3a9c2e41"
    sim = start_sim(["--api-key", key], env=FAST)
    env_json = tmp_path / "env.json"
    env_json.write_text(json.dumps({"driver": "580.95.05", "cuda": "13.0", "note": f"launched with {key}"}))
    args = ["--runs", "2", "--max-tokens", "16", "--env-json", str(env_json)]
    env = {}
    if how == "flag":
        args += ["--api-key", key]
    else:
        env = {"SGLANG_API_KEY" if how == "env" else "OPENAI_API_KEY": key}
    res = run_bench(sim.url, *args, env=env)
    assert res.returncode == 0, res.stderr
    written = json.dumps(res.json)
    assert key not in res.stdout + res.stderr + written
    environment = res.json["environment"]
    assert environment["server_args"]["api_key"] == "<redacted>"  # SGLang reports it in server_info
    assert environment["driver"] == "580.95.05" and environment["note"] == "launched with <redacted>"
    assert environment["server"]["version"] == "0.5.9"
    assert res.json["config"]["sends_authorization"] is True


def test_missing_or_wrong_api_key_is_a_clear_failure(start_sim, run_bench) -> None:
    sim = start_sim(["--api-key", "right-key-123"], env=FAST)
    for env in ({}, {"SGLANG_API_KEY": "wrong-key-456"}):
        res = run_bench(sim.url, "--runs", "1", env=env)
        assert res.returncode == 1
        assert "HTTP 401 Unauthorized" in res.stderr
        assert "right-key-123" not in res.stdout + res.stderr + json.dumps(res.json)
        assert "wrong-key-456" not in res.stdout + res.stderr + json.dumps(res.json)


class _FakeSGLang(BaseHTTPRequestHandler):
    """A /generate that streams what the test puts in `events` (SSE over HTTP/1.0, close-delimited)."""

    events: list[str] = []

    def do_GET(self) -> None:  # http.server's naming
        self.send_error(404)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in self.events:
            self.wfile.write(f"data: {event}\n\n".encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_server() -> Iterator[tuple[str, type[_FakeSGLang]]]:
    handler = type("Handler", (_FakeSGLang,), {"events": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_error_event_in_stream_fails_the_run(fake_server, run_bench) -> None:
    """SGLang reports a failure inside a started stream as data: {"error": ...} then [DONE]."""
    url, handler = fake_server
    meta = {"completion_tokens": 1, "prompt_tokens": 3, "finish_reason": None}
    handler.events = [json.dumps({"text": " a", "meta_info": meta}),
                      json.dumps({"error": {"message": "Input length exceeds the context window"}}), "[DONE]"]
    res = run_bench(url, "--runs", "1", "--warmup", "0")
    assert res.returncode == 1
    assert "server error event: Input length exceeds the context window" in res.json["runs"][0]["error"]


def test_stream_without_token_counts_fails(fake_server, run_bench) -> None:
    """Without the server's completion_tokens the client refuses to guess from the event count."""
    url, handler = fake_server
    handler.events = [json.dumps({"text": " a b", "meta_info": {"completion_tokens": 2}}),
                      json.dumps({"text": " a b c d", "meta_info": {"finish_reason": {"type": "length"}}}), "[DONE]"]
    res = run_bench(url, "--runs", "1", "--warmup", "0")
    assert res.returncode == 1
    assert "server reported no completion token count" in res.json["runs"][0]["error"]


def test_close_delimited_stream_is_read(fake_server, run_bench) -> None:
    """The same stream without chunked encoding (an HTTP/1.0 proxy in between) measures fine."""
    url, handler = fake_server
    handler.events = [json.dumps({"text": " a", "meta_info": {"completion_tokens": 1}}),
                      json.dumps({"text": " a b c", "meta_info": {"completion_tokens": 3, "spec_verify_ct": 1,
                                                                  "finish_reason": {"type": "length"}}}), "[DONE]"]
    res = run_bench(url, "--runs", "1", "--warmup", "0", "--max-tokens", "3")
    assert res.returncode == 0, res.stderr
    run = res.json["runs"][0]
    assert run["tokens"] == 3 and run["events"] == 2 and run["accept_length"] == 3.0
