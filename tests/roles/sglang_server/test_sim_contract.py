"""The SIMULATOR against real SGLang's recorded answers: fields, types, SSE framing, metric names and types.

fixtures/sglang-0.5.17/ holds what real SGLang 0.5.17 answered on the lent H200 machine
(tests/device/sglang_serve_proof.py; docs/validation/sglang_serve-h200/): index.json (each request
and its answer's status), one raw HTTP response per request (<name>.http: status line, headers,
body with its chunked framing as sent), metrics.http (/metrics after an aborted stream), the
server's command line as role sglang_server rendered it (launch.json) and the launcher's answer to a
bad flag and to a bad value (bad-flag.txt, bad-value.txt).

The simulator is started as the real server was (the same flags, less those SGLang 0.5.9 does not
have: the simulator takes 0.5.9's command line) and asked the same requests. For each answer:
- the status code and the media type are the real server's;
- JSON: every field of the recording is there, at the same place, with the same JSON type (null in
  the recording: present, any type); the simulator adds no field the real server does not send.
  Server arguments (/get_server_info's top level) are held to this for the fields both releases
  have: the simulator serves 0.5.9's arguments (flags.json), so a 0.5.17 argument 0.5.9 lacks, and a
  0.5.9 argument 0.5.17 dropped, are release differences (named by the flag table, not by hand);
- SSE: chunked transfer coding, one ``data: <json>`` event per chunk ending in a blank line,
  ``data: [DONE]`` last, and the first, middle and last events shaped as the real ones;
- /metrics: the families and types the alert rules (roles/sglang_monitoring) read exist in both,
  every family the simulator exports exists in the real /metrics with the same type and labels;
- a bad flag and a bad value: exit status 2 and argparse's ``error:`` line of the same form.
RELEASE_DIFFERENCES below lists what the simulator keeps of 0.5.9 where 0.5.17 differs, and why.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simtruth import READY_TEXT, clean_env, free_port, sim_command
from synthetic_model import make_llama_pair

FIXTURES = Path(__file__).parent / "fixtures" / "sglang-0.5.17"
SIM_PACKAGE = Path(__file__).parents[3] / "molecule/resources/roles/sglang_simulator/files/sglang_sim"
FLAGS = json.loads((SIM_PACKAGE / "flags.json").read_text())
ALERTS = Path(__file__).parents[3] / "roles/sglang_monitoring/templates/sglang-alerts.rules.yml.j2"
# Where the two releases differ and the simulator keeps 0.5.9's answer, or leaves out a 0.5.17
# addition no role reads (JSON path -> why). Everything else 0.5.17 added, the simulator sends too.
RELEASE_DIFFERENCES: dict[str, str] = {
    "$.aggregate": "0.5.9's /v1/loads summary, dropped in 0.5.17; kept: sglang_router's drain (tasks/leave.yml) "
                   "waits for aggregate.total_reqs == 0, which a 0.5.17 server never sends",
    "$.dp_rank_count": "0.5.9's /v1/loads, dropped in 0.5.17; kept with the aggregate",
    "$.loads[0].num_total_reqs": "0.5.9's /v1/loads, dropped in 0.5.17; kept with the aggregate",
    "$.meta_info.total_retractions": "0.5.9's name of num_retractions (renamed in 0.5.17); both are sent",
    "$.meta_info.spec_accept_token_num": "0.5.9's name of spec_num_correct_drafts; both are sent",
    "$.meta_info.spec_draft_token_num": "0.5.9's name of spec_num_proposed_drafts; both are sent",
    "$.choices[0].delta.role": "0.5.9's DeltaMessage dumps its null fields too (protocol.py); 0.5.17 leaves "
                               "them out but reasoning_content; sglang_bench reads either",
    "$.choices[0].delta.tool_calls": "as $.choices[0].delta.role",
    "$.usage": "0.5.9's chat chunks carry usage: null; 0.5.17 leaves the key out of a chunk without usage",
    "$.embedding": "0.5.17 adds a descriptor of embedding serving to /model_info; no role reads it and the "
                   "simulator serves generation only",
}
# The simulator's own labels (TEST ONLY): "simulator": true wherever it describes itself.
SIM_LABELS = {"$.simulator", "$.simulator_settings"}
# /metrics: the simulator exports SGLang 0.5.9's families with 0.5.9's labels (test_sim_metrics.py checks them
# against 0.5.9's source). 0.5.17 adds these labels (the tokenizer's metrics: engine_type, is_streaming; two
# scheduler gauges: pid); the alert rules aggregate by host (and le), so they read both alike.
LABELS_ADDED_IN_0517 = {"engine_type", "is_streaming", "pid"}
# 0.5.9 families 0.5.17 no longer exports (none of them read by the alert rules or the dashboard).
FAMILIES_DROPPED_IN_0517 = {
    "sglang:cache_config_info": "0.5.17 exports sglang:page_size and sglang:num_pages instead",
    "sglang:engine_startup_time": "0.5.17: sglang:startup_time_seconds",
    "sglang:num_retractions": "0.5.17 exports no retraction histogram",
    "sglang:num_running_reqs_offline_batch": "dropped in 0.5.17",
    "sglang:num_prefill_prealloc_queue_reqs": "0.5.17: sglang:num_prefill_bootstrap_queue_reqs",
    "sglang:kv_transfer_speed_gb_s": "PD disaggregation gauges, left out of 0.5.17's unified server",
    "sglang:kv_transfer_latency_ms": "as sglang:kv_transfer_speed_gb_s",
    "sglang:kv_transfer_bootstrap_ms": "as sglang:kv_transfer_speed_gb_s",
    "sglang:kv_transfer_alloc_ms": "as sglang:kv_transfer_speed_gb_s",
    "sglang:kv_transfer_total_mb": "as sglang:kv_transfer_speed_gb_s",
}
# Families the alert rules read that the recording lacks, and why that is no drift.
NOT_RECORDED = {
    "sglang:num_aborted_requests_total": "a labelled counter appears once incremented; the proof's client-closed stream "
                                   "was not counted within 2 s. 0.5.17 defines it (observability/metrics_collector.py: "
                                   "sglang:num_aborted_requests_total, TokenizerMetricsCollector)",
}


def unexplained(differences: list[tuple[str, str]]) -> list[str]:
    return [message for path, message in differences if path not in RELEASE_DIFFERENCES and path not in SIM_LABELS]


# --------------------------------------------------------------------------- raw HTTP


def exchange(port: int, method: str, path: str, body: Any = None, timeout: float = 30.0) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    head = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close", "Accept: */*"]
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        chunks = []
        while piece := sock.recv(65536):
            chunks.append(piece)
    return b"".join(chunks)


class Answer:
    """A raw HTTP/1.1 response: status, headers (lower-case names), body, and its chunks if chunked."""

    def __init__(self, raw: bytes) -> None:
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self.chunks: list[bytes] = []
        if self.chunked:
            while body:
                size_line, _, rest = body.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    break
                assert rest[size:size + 2] == b"\r\n", "a chunk must end in CRLF"
                self.chunks.append(rest[:size])
                body = rest[size + 2:]
            self.body = b"".join(self.chunks)
        else:
            self.body = body

    @property
    def media_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip()

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[bytes]:
        """The SSE events' data, in order; asserts the framing (data: lines, blank-line ends)."""
        text = self.body
        assert text.endswith(b"\n\n"), f"the stream must end with a blank line: {text[-40:]!r}"
        events = []
        for block in text[:-2].split(b"\n\n"):
            assert block.startswith(b"data: "), f"an event is one 'data: ' line: {block[:80]!r}"
            assert b"\n" not in block, f"an event is one line: {block[:80]!r}"
            events.append(block[len(b"data: "):])
        return events


def kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(value)]


def shape_differences(real: Any, sim: Any, path: str = "$", skip: frozenset[str] = frozenset(),
                      null_ok: bool = False) -> list[tuple[str, str]]:
    """(path, message) where `sim` lacks a field of `real`, has one `real` lacks, or a field's JSON type
    differs. null_ok: a null in the simulator stands for any value (server arguments it leaves unresolved)."""
    if real is None or (null_ok and sim is None):
        return []
    if kind(real) != kind(sim):
        return [(path, f"{path}: {kind(sim)} in the simulator, {kind(real)} in SGLang ({json.dumps(real)[:80]})")]
    out = []
    if isinstance(real, dict):
        for key in sorted(real.keys() - skip):
            if key not in sim:
                out.append((f"{path}.{key}", f"{path}.{key}: missing in the simulator (SGLang: {json.dumps(real[key])[:80]})"))
            else:
                out += shape_differences(real[key], sim[key], f"{path}.{key}", null_ok=null_ok)
        out += [(f"{path}.{key}", f"{path}.{key}: only in the simulator") for key in sorted(sim.keys() - real.keys() - skip)]
    elif isinstance(real, list) and real and sim:
        out += shape_differences(real[0], sim[0], f"{path}[0]", null_ok=null_ok)
    return out


# --------------------------------------------------------------------------- the simulator, started as the server was


@pytest.fixture(scope="module")
def index() -> dict[str, Any]:
    return json.loads((FIXTURES / "index.json").read_text())


def recorded(name: str) -> Answer:
    return Answer((FIXTURES / f"{name}.http").read_bytes())


def sim_argv(launch: list[str], target: Path, draft: Path) -> list[str]:
    """The real server's argv for the simulator: its own model pair, 0.5.9's flags only."""
    known = {flag for entry in FLAGS["flags"] for flag in entry["options"]}
    argv, skipping = [], False
    for word in launch:
        if word.startswith("--"):
            skipping = word not in known
        if not skipping:
            argv.append(word)
    paths = {"--model-path": str(target), "--speculative-draft-model-path": str(draft)}
    return [paths.get(argv[i - 1], a) if i else a for i, a in enumerate(argv)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Iterator[int]:
    root = tmp_path_factory.mktemp("contract")
    target, draft = make_llama_pair(root, hidden=64, intermediate=128)
    launch = json.loads((FIXTURES / "launch.json").read_text())["argv"]
    port = free_port()
    argv = [*sim_command(), *sim_argv(launch, target, draft)]
    argv[argv.index("--port") + 1] = str(port)
    out = root / "sim.out"
    env = clean_env({"SGLANG_SIM_LOAD_SECONDS": "0", "PYTHONUNBUFFERED": "1", "SGLANG_SIM_DECODE_TOK_S": "2000"})
    with open(out, "wb") as handle:
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 20
        while READY_TEXT not in out.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text(errors="replace")
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def ask(port: int, entry: dict[str, Any]) -> Answer:
    return Answer(exchange(port, entry["method"], entry["path"], entry.get("body")))


def entries(*, stream: bool | None = None) -> list[dict[str, Any]]:
    """The recorded requests that have an answer file (not /metrics: test_metrics), by streaming or not."""
    if not (FIXTURES / "index.json").exists():
        return []
    out = []
    for entry in json.loads((FIXTURES / "index.json").read_text())["requests"]:
        if not entry.get("file") or entry["name"] == "metrics":
            continue
        is_stream = bool((entry.get("body") or {}).get("stream"))
        if stream is None or stream == is_stream:
            out.append(entry)
    return out


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [e["name"] for e in items]


@pytest.mark.parametrize("entry", entries(), ids=ids(entries()))
def test_status_and_media_type(sim, entry):
    real, answer = recorded(entry["name"]), ask(sim, entry)
    assert (answer.status, answer.media_type) == (real.status, real.media_type), (
        f"{entry['method']} {entry['path']}: the simulator answers {answer.status} {answer.media_type}, "
        f"SGLang 0.5.17 {real.status} {real.media_type}: {answer.body[:200]!r}")


JSON_ENTRIES = [e for e in entries(stream=False) if e["name"] not in ("get-server-info", "server-info")
                and recorded(e["name"]).media_type == "application/json"]


@pytest.mark.parametrize("entry", JSON_ENTRIES, ids=ids(JSON_ENTRIES))
def test_json_fields(sim, entry):
    real, answer = recorded(entry["name"]), ask(sim, entry)
    differences = unexplained(shape_differences(real.json(), answer.json()))
    assert not differences, f"{entry['method']} {entry['path']}:\n" + "\n".join(differences)


@pytest.mark.parametrize("name", ["get-server-info", "server-info"])
def test_server_info_fields(sim, name):
    """Server arguments both releases have, and every field that is no server argument."""
    entry = next(e for e in entries() if e["name"] == name)
    real, answer = recorded(name).json(), ask(sim, entry).json()
    args_059 = set(FLAGS["server_args_fields"])
    args_0517 = set(json.loads((FIXTURES / "launch.json").read_text())["server_args_fields"])
    # Arguments one release has and the other lacks, and SGLang's private attributes (_resolved_overrides ...).
    skip = frozenset(args_059 ^ args_0517) | {k for k in real["internal_states"][0] if k.startswith("_")}
    # The simulator applies only SGLang's speculative defaults (sglang_sim/flags.py): an argument SGLang
    # resolves (chunked_prefill_size None -> 8192) stays null there; its presence and the types of set ones count.
    def split(info: dict[str, Any], own: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(its server arguments, the rest) of a top level or of internal_states[0]."""
        return {k: v for k, v in info.items() if k in own}, {k: v for k, v in info.items() if k not in own}

    differences = []
    for path, real_part, sim_part in (("$", real, answer),
                                      ("$.internal_states[0]", real["internal_states"][0], answer["internal_states"][0])):
        real_args, real_rest = split(real_part, args_0517)
        sim_args, sim_rest = split(sim_part, args_059)
        real_rest.pop("internal_states", None)
        sim_rest.pop("internal_states", None)
        differences += unexplained(shape_differences(real_args, sim_args, path, skip=skip, null_ok=True))
        differences += unexplained(shape_differences(real_rest, sim_rest, path, skip=skip))
    assert not differences, "\n".join(differences)
    # What the roles read from it (sglang_bench's summary and accept length, tune.yml's start).
    for key in ("version", "served_model_name", "speculative_algorithm", "speculative_num_steps",
                "speculative_eagle_topk", "speculative_num_draft_tokens", "internal_states"):
        assert key in real and key in answer, key
    assert "avg_spec_accept_length" in real["internal_states"][0]
    assert "avg_spec_accept_length" in answer["internal_states"][0]


STREAMS = entries(stream=True)


@pytest.mark.parametrize("entry", STREAMS, ids=ids(STREAMS))
def test_sse_framing_and_events(sim, entry):
    real, answer = recorded(entry["name"]), ask(sim, entry)
    for who, got in (("SGLang", real), ("the simulator", answer)):
        assert got.chunked, f"{who}: a stream is sent with chunked transfer coding"
        events = got.events()
        assert events[-1] == b"[DONE]", f"{who}: [DONE] is the last event"
        assert b"[DONE]" not in events[:-1]
    real_events = [json.loads(e) for e in real.events()[:-1]]
    sim_events = [json.loads(e) for e in answer.events()[:-1]]
    # One event per chunk, as uvicorn writes each yielded event (the bench's reader relies on neither).
    assert len(real.chunks) == len(real_events) + 1 and len(answer.chunks) == len(sim_events) + 1
    picks = {"first": (real_events[0], sim_events[0]),
             "middle": (real_events[len(real_events) // 2], sim_events[len(sim_events) // 2]),
             "last": (real_events[-1], sim_events[-1])}
    differences = [f"{where} event: {d}" for where, (r, s) in picks.items() for d in unexplained(shape_differences(r, s))]
    assert not differences, f"{entry['method']} {entry['path']}:\n" + "\n".join(differences)


def families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """Metric family -> (type, label names of its first sample)."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    out = {}
    for name, kind_ in types.items():
        sample = re.search(rf"^{re.escape(name)}(?:_bucket|_count|_sum|_total|_created)?\{{([^}}]*)\}}", text, re.M)
        labels = frozenset(re.findall(r'(\w+)="', sample.group(1))) - {"le"} if sample else frozenset()
        out[name] = (kind_, labels)
    return out


def test_metrics(sim, index):
    real = families(Answer((FIXTURES / "metrics.http").read_bytes()).body.decode())
    # The same traffic as the recording: the requests, an aborted stream, then /metrics.
    for entry in entries():
        ask(sim, entry)
    try:
        with socket.create_connection(("127.0.0.1", sim), timeout=10) as sock:
            body = json.dumps({"text": "abort me", "stream": True, "sampling_params": {"max_new_tokens": 2000}}).encode()
            sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            while b"data:" not in sock.recv(65536):
                pass
    except OSError:
        pass
    time.sleep(1.0)
    sim_families = families(Answer(exchange(sim, "GET", "/metrics")).body.decode())
    wanted = set(re.findall(r"sglang:[a-z_]+", ALERTS.read_text()))
    base = {re.sub(r"_(bucket|count|sum)$", "", name) for name in wanted}
    for name in sorted(base):
        family = name  # counters: the TYPE line names them with _total, as SGLang (and the simulator) print it
        if family in NOT_RECORDED:  # test_sim_metrics.py checks the simulator's against 0.5.9's source
            assert family not in real, f"{family} is recorded now: take it out of NOT_RECORDED"
            continue
        assert family in real, f"{name}: the alert rules read it, SGLang 0.5.17 does not export it"
        assert family in sim_families, f"{name}: the alert rules read it, the simulator does not export it"
        assert sim_families[family][0] == real[family][0], f"{family}: type {sim_families[family][0]} vs {real[family][0]}"
    differences = []
    for name, (kind_, labels) in sorted(sim_families.items()):
        if name not in real:
            if name not in FAMILIES_DROPPED_IN_0517 and name not in NOT_RECORDED:
                differences.append(f"{name}: only in the simulator")
        elif real[name][0] != kind_ or not labels <= real[name][1] or real[name][1] - labels - LABELS_ADDED_IN_0517:
            differences.append(f"{name}: simulator {kind_} {sorted(labels)}, SGLang {real[name][0]} {sorted(real[name][1])}")
    assert not differences, "\n".join(differences)


@pytest.mark.parametrize("name,extra", [("bad-flag", ["--no-such-flag", "1"]), ("bad-value", ["--tp-size", "two"])])
def test_bad_launch(tmp_path, name, extra):
    real = (FIXTURES / f"{name}.txt").read_text()
    real_rc = int(re.search(r"# rc=(-?\d+)", real).group(1))
    real_error = re.search(r"^.*: error: (.*)$", real, re.M).group(1)
    proc = subprocess.run([*sim_command(), "--model-path", "test-org/llama-tiny", *extra], capture_output=True,
                          text=True, env=clean_env({}), timeout=30)
    sim_error = re.search(r"^.*: error: (.*)$", proc.stderr, re.M)
    assert proc.returncode == real_rc == 2
    # 0.5.9 declares --tensor-parallel-size before its alias --tp-size, 0.5.17 the other way round:
    # argparse names them in that order. The message is otherwise the same.
    def same_order(text: str) -> str:
        return re.sub(r"argument (\S+):", lambda m: "argument " + "/".join(sorted(m.group(1).split("/"))) + ":", text)
    assert sim_error and same_order(sim_error.group(1)) == same_order(real_error), (
        f"simulator: {proc.stderr[-300:]}\nSGLang: {real_error}")
