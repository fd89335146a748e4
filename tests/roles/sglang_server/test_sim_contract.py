"""The SIMULATOR against real SGLang's recorded answers, whole: every exchange, field, list item, event, header.

fixtures/sglang-<version>/ holds what a real SGLang server of that release answered on the lent H200
machine (tests/device/sglang_serve_proof.py, curated by tests/device/sglang_serve_curate.py;
docs/validation/sglang_serve-h200/): index.json (each request and its answer's status), one raw
HTTP response per request (<name>.http: status line, headers, body with its chunked framing as
sent), health-first-answer.http (/health while the model loads), metrics.http (/metrics after an
aborted stream), the server's command line as role sglang_server rendered it (launch.json) and the
launcher's answer to a bad flag and to a bad value (bad-flag.txt, bad-value.txt).

For each recorded release the simulator is started playing that release (SGLANG_SIM_SGLANG_DIR names
a package whose _version.py says the release: the simulator shapes its answers by the version it
reports) with the real server's flags (less those its flag table, 0.5.9's, lacks), served 200 tokens
first (the recorded server had served the bench), asked the same requests, and each answer compared
with the recording as a whole:
- the status code, and every header by name and value (content-type with its parameters,
  transfer-encoding, allow, vary, connection ...) but those HEADER_VALUES_VARY names;
- JSON, recursively: each key of the recording present with the same JSON type, no key the recording
  lacks (SIM_LABELS excepted); a null stays a null and a value stays a value (a recorded null is not
  "any type": NULL_OR_VALUE names the exceptions); every list item compared with the item at its
  place, and a list's length the recording's (LENGTH_VARIES names the lists whose length is data);
- /get_server_info's server arguments: those both flag tables have (an argument one release has and
  the other lacks is a release difference, found from the flag tables, not by hand), whole as above,
  but SERVER_ARGS_UNRESOLVED: arguments SGLang resolves at start that the simulator leaves null;
- SSE: chunked transfer coding, one ``data: <json>`` event per chunk ending in a blank line,
  ``data: [DONE]`` last, and the events event by event: the stream is cut into runs of events of
  one structure, the runs must be the recording's (a structure the recording sends once, the
  simulator sends once; one it repeats, the simulator may repeat as often as its tokens come), and
  each event is compared whole with the recording's event at its place in the run;
- /metrics: the families and types the alert rules (roles/sglang_monitoring) read exist in both,
  every family the simulator exports exists in the real /metrics with the same type and labels;
- a bad flag and a bad value: exit status 2 and argparse's ``error:`` line of the same form.
- /v1/loads' values that role sglang_router's drain counts (running, waiting, grammar queue, KV cache
  held), the recording's with nothing in flight.
A field only one release sends is expected from the simulator only when it plays that release: it
is compared with that release's recording only. Every entry of the reviewed lists below must
explain a difference found (test_reviewed_lists_explain_something): none is kept after it is moot.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from repo import load
from simtruth import READY_TEXT, clean_env, free_port, sim_command
from synthetic_model import make_llama_pair

FIXTURES_ROOT = Path(__file__).parent / "fixtures"
RELEASES = sorted(p.name.removeprefix("sglang-") for p in FIXTURES_ROOT.glob("sglang-*") if (p / "index.json").is_file())
SIM_PACKAGE = Path(__file__).parents[3] / "molecule/resources/roles/sglang_simulator/files/sglang_sim"
FLAGS = json.loads((SIM_PACKAGE / "flags.json").read_text())
ALERTS = Path(__file__).parents[3] / "roles/sglang_monitoring/templates/sglang-alerts.rules.yml.j2"

# --------------------------------------------------------------------------- the reviewed lists
# JSON paths, list indices written [*]. Each entry says why the simulator may differ there.

# Fields only the simulator sends: its own labels (TEST ONLY), wherever it describes itself.
SIM_LABELS: dict[str, str] = {
    "$.simulator": "the simulator's label (TEST ONLY): /get_server_info and /v1/loads say it is not SGLang",
    "$.simulator_settings": "the simulator's SGLANG_SIM_* settings, beside its label in /get_server_info",
}
# A null in one and a value in the other (either way) that is no divergence.
NULL_OR_VALUE: dict[str, str] = {}
# Server arguments SGLang resolves at start (ServerArgs.__post_init__ and the scheduler) that the
# simulator leaves null: of SGLang's post-processing it applies only the speculative defaults
# (sglang_sim/flags.py). Only "null in the simulator, a value in SGLang" is excused, at the top
# level of /get_server_info and in its internal_states[0].
SERVER_ARGS_UNRESOLVED: dict[str, str] = {
    "chunked_prefill_size": "SGLang sizes it by the GPU's memory (8192 on the H200); the simulator has no GPU",
    "custom_weight_loader": "SGLang makes None an empty list; the simulator loads no weights",
    "device": "SGLang detects the accelerator (cuda); the simulator has none",
    "expert_distribution_recorder_buffer_size": "SGLang's default for its expert recorder (1000), unused here",
    "grammar_backend": "SGLang picks xgrammar when unset; the simulator applies no grammar",
    "mm_process_config": "SGLang makes None an empty dict; the simulator serves no multimodal input",
    "page_size": "SGLang sets 1 for its attention backend; the simulator has no KV cache",
    "pp_max_micro_batch_size": "the scheduler's copy (internal_states) is max_running_requests; the simulator "
                               "does not pipeline",
    "random_seed": "SGLang draws a seed at start; the simulator's draws use SGLANG_SIM_SEED",
    "sampling_backend": "SGLang picks flashinfer on CUDA; the simulator samples nothing",
    "speculative_draft_model_revision": "SGLang sets main when a draft path is given; the simulator reads the "
                                        "draft's directory only",
    "speculative_moe_runner_backend": "SGLang copies its MoE runner choice (auto); the simulator has no MoE",
}
# Lists whose length is data, not shape: their items are still compared, each with the recording's
# item at its place (or the recording's last, past its end).
LENGTH_VARIES: dict[str, str] = {
    "$.output_ids": "one id per token so far: a stream's event carries the tokens that arrived by then",
    "$.meta_info.spec_accept_histogram": "grows to 1 + the most drafts one verify step accepted "
                                         "(schedule_batch.py); the recorded toy accepted every draft",
    "$.meta_info.spec_correct_drafts_histogram": "as spec_accept_histogram (its 0.5.17 name)",
}
# Headers whose value is no shape (their presence is still compared).
HEADER_VALUES_VARY: dict[str, str] = {
    "date": "the time of the answer",
    "server": "the simulator names itself (sglang-sim), SGLang's uvicorn itself",
    "content-length": "the body's length (the simulator's is checked against its own body)",
}
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

# --------------------------------------------------------------------------- the whole comparison


def kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(value)]


@dataclass(frozen=True)
class Difference:
    """One place where the simulator's answer differs in structure from the recording."""

    what: str  # type, null, missing, extra, length, stream, header, status
    pattern: str  # the JSON path with list indices as [*] (a header's or the stream's name otherwise)
    message: str
    sim_null: bool = False  # what == null: the simulator's side is the null


def pattern_of(path: str) -> str:
    return re.sub(r"\[\d+\]", "[*]", path)


def show(value: Any) -> str:
    return json.dumps(value)[:80]


def compare(real: Any, sim: Any, path: str = "$") -> list[Difference]:
    """Every structural difference of `sim` from `real`, recursively (values are not compared)."""
    real_kind, sim_kind = kind(real), kind(sim)
    if real_kind != sim_kind:
        what = "null" if "null" in (real_kind, sim_kind) else "type"
        return [Difference(what, pattern_of(path), f"{path}: {sim_kind} in the simulator ({show(sim)}), "
                                                   f"{real_kind} in SGLang ({show(real)})", sim_null=sim is None)]
    out: list[Difference] = []
    if isinstance(real, dict):
        for key in real:
            sub = f"{path}.{key}"
            if key not in sim:
                out.append(Difference("missing", pattern_of(sub), f"{sub}: missing in the simulator (SGLang: {show(real[key])})"))
            else:
                out += compare(real[key], sim[key], sub)
        out += [Difference("extra", pattern_of(f"{path}.{key}"), f"{path}.{key}: only in the simulator ({show(sim[key])})")
                for key in sim if key not in real]
    elif isinstance(real, list):
        if len(real) != len(sim):
            out.append(Difference("length", pattern_of(path), f"{path}: {len(sim)} items in the simulator, "
                                                              f"{len(real)} in SGLang"))
        if real and sim:
            for i in range(max(len(real), len(sim))):
                out += compare(real[min(i, len(real) - 1)], sim[min(i, len(sim) - 1)], f"{path}[{i}]")
    return out


Reason = tuple[str, str]  # (the reviewed list's name, its entry)


def excuse(diff: Difference, server_args: frozenset[str] = frozenset()) -> Reason | None:
    """The reviewed entry that explains `diff`, or None. server_args: the argument names compared at
    this level of /get_server_info (SERVER_ARGS_UNRESOLVED applies to them only)."""
    if diff.what == "extra" and diff.pattern in SIM_LABELS:
        return ("SIM_LABELS", diff.pattern)
    if diff.what == "null" and diff.pattern in NULL_OR_VALUE:
        return ("NULL_OR_VALUE", diff.pattern)
    if diff.what == "length" and diff.pattern in LENGTH_VARIES:
        return ("LENGTH_VARIES", diff.pattern)
    name = re.sub(r"^\$(\.internal_states\[\*\])?\.", "", diff.pattern)
    if diff.what == "null" and diff.sim_null and name in server_args and name in SERVER_ARGS_UNRESOLVED:
        return ("SERVER_ARGS_UNRESOLVED", name)
    return None


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


def header_differences(real: Answer, sim: Answer) -> list[Difference]:
    out = [Difference("status", "status", f"status {sim.status} in the simulator, {real.status} in SGLang")
           for _ in [0] if real.status != sim.status]
    for name in real.headers.keys() | sim.headers.keys():
        real_value, sim_value = real.headers.get(name), sim.headers.get(name)
        if real_value is None or sim_value is None:
            where = "only in the simulator" if real_value is None else "missing in the simulator"
            out.append(Difference("header", name, f"header {name}: {where} (SGLang {real_value!r}, simulator {sim_value!r})"))
        elif name not in HEADER_VALUES_VARY and real_value.lower().replace(" ", "") != sim_value.lower().replace(" ", ""):
            out.append(Difference("header", name, f"header {name}: {sim_value!r} in the simulator, {real_value!r} in SGLang"))
    if "content-length" in sim.headers and int(sim.headers["content-length"]) != len(sim.body):
        out.append(Difference("header", "content-length", f"the simulator's content-length {sim.headers['content-length']} "
                                                          f"is not its body's {len(sim.body)} bytes"))
    return out


def structure(value: Any) -> Any:
    """A hashable outline of a JSON value's structure: keys and kinds, a list's item outlines as a set."""
    if isinstance(value, dict):
        return tuple((k, structure(v)) for k, v in sorted(value.items()))
    if isinstance(value, list):
        return ("array", frozenset(structure(v) for v in value))
    return kind(value)


def runs(events: list[Any]) -> list[list[Any]]:
    """The events cut into runs of one structure, in order."""
    out: list[list[Any]] = []
    for event in events:
        if out and structure(out[-1][0]) == structure(event):
            out[-1].append(event)
        else:
            out.append([event])
    return out


def stream_differences(real: Answer, sim: Answer) -> list[Difference]:
    """The framing, then the events one by one (see the module's docstring)."""
    for who, got in (("SGLang", real), ("the simulator", sim)):
        assert got.chunked, f"{who}: a stream is sent with chunked transfer coding"
        events = got.events()
        assert events[-1] == b"[DONE]", f"{who}: [DONE] is the last event"
        assert b"[DONE]" not in events[:-1]
        # One event per chunk, as uvicorn writes each yielded event (the bench's reader relies on neither).
        assert len(got.chunks) == len(events), f"{who}: {len(got.chunks)} chunks for {len(events)} events"
    real_runs = runs([json.loads(e) for e in real.events()[:-1]])
    sim_runs = runs([json.loads(e) for e in sim.events()[:-1]])
    out: list[Difference] = []
    if len(real_runs) != len(sim_runs):
        def outline(rs: list[list[Any]]) -> str:
            return "; ".join(f"{len(r)} x {show(r[0])[:60]}" for r in rs)
        out.append(Difference("stream", "events", f"{len(sim_runs)} runs of events in the simulator, {len(real_runs)} in "
                                                   f"SGLang:\n  SGLang: {outline(real_runs)}\n  simulator: {outline(sim_runs)}"))
    number = 0
    for run_no, (real_run, sim_run) in enumerate(zip(real_runs, sim_runs, strict=False)):
        if len(real_run) == 1 and len(sim_run) != 1:
            out.append(Difference("stream", "events", f"run {run_no}: {len(sim_run)} events in the simulator, "
                                                       f"one in SGLang (a single event must stay single)"))
        for i, event in enumerate(sim_run):
            out += [Difference(d.what, d.pattern, f"event {number + i} (run {run_no}): {d.message}", d.sim_null)
                    for d in compare(real_run[min(i, len(real_run) - 1)], event)]
        number += len(sim_run)
    return out


# --------------------------------------------------------------------------- the simulator, playing each release


def fixtures(release: str) -> Path:
    return FIXTURES_ROOT / f"sglang-{release}"


def recorded(release: str, name: str) -> Answer:
    return Answer((fixtures(release) / f"{name}.http").read_bytes())


def entries(release: str) -> list[dict[str, Any]]:
    """The recorded requests that have an answer file (not /metrics: test_metrics)."""
    return [e for e in json.loads((fixtures(release) / "index.json").read_text())["requests"]
            if e.get("file") and e["name"] != "metrics"]


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


def playing(root: Path, release: str) -> Path:
    """An SGLang package directory that says `release` (what SGLANG_SIM_SGLANG_DIR reads the version from)."""
    package = root / f"sglang-{release}" / "sglang"
    (package / "srt").mkdir(parents=True, exist_ok=True)
    (package / "_version.py").write_text(f'__version__ = "{release}"\n')
    return package


@dataclass
class Played:
    """The simulator playing one release, and its answers to that release's recorded requests."""

    release: str
    port: int
    answers: dict[str, Answer] = field(default_factory=dict)
    differences: dict[str, list[Difference]] = field(default_factory=dict)
    args_both: frozenset[str] = frozenset()  # the server arguments both flag tables have

    def excuse(self, name: str, diff: Difference) -> Reason | None:
        return excuse(diff, self.args_both if name in SERVER_INFO else frozenset())

    def ask(self, entry: dict[str, Any]) -> Answer:
        return Answer(exchange(self.port, entry["method"], entry["path"], entry.get("body")))


def start(root: Path, release: str, extra_env: dict[str, str], wait_for: str) -> tuple[subprocess.Popen[bytes], int]:
    target, draft = make_llama_pair(root, hidden=64, intermediate=128)
    launch = json.loads((fixtures(release) / "launch.json").read_text())["argv"]
    port = free_port()
    argv = [*sim_command(), *sim_argv(launch, target, draft)]
    argv[argv.index("--port") + 1] = str(port)
    out = root / f"sim-{port}.out"
    env = clean_env({"SGLANG_SIM_LOAD_SECONDS": "0", "PYTHONUNBUFFERED": "1", "SGLANG_SIM_DECODE_TOK_S": "2000",
                     "SGLANG_SIM_SGLANG_DIR": str(playing(root, release)), **extra_env})
    with open(out, "wb") as handle:
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 20
    while wait_for not in out.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the simulator did not start:\n{out.read_text(errors='replace')}")
        time.sleep(0.05)
    return proc, port


@pytest.fixture(scope="module")
def sims(tmp_path_factory) -> Iterator[dict[str, Played]]:
    """The simulator playing each recorded release (started once each), its answers compared once."""
    procs, played = [], {}
    try:
        for release in RELEASES:
            proc, port = start(tmp_path_factory.mktemp(f"contract-{release}"), release, {}, READY_TEXT)
            procs.append(proc)
            sim = played[release] = Played(release, port)
            info = json.loads(exchange(port, "GET", "/get_server_info").partition(b"\r\n\r\n")[2])
            assert info["version"] == release, f"the simulator reports {info['version']}, not the release it plays"
            args_real = frozenset(json.loads((fixtures(release) / "launch.json").read_text())["server_args_fields"])
            sim.args_both = args_real & frozenset(FLAGS["server_args_fields"])
            # The recorded server had served before it was recorded (sglang_serve_proof.py: the bench's runs,
            # then the recordings), so its internal state held an average accept length, which SGLang updates
            # at each "Decode batch" log line (every --decode-log-interval, 40, steps): serve more steps first.
            history = {"text": "warm up", "sampling_params": {"max_new_tokens": 200}}
            assert Answer(exchange(port, "POST", "/generate", history)).status == 200
            for entry in entries(release):
                sim.answers[entry["name"]] = sim.ask(entry)
                sim.differences[entry["name"]] = differences(sim, entry["name"], args_real)
        yield played
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


SERVER_INFO = ("get-server-info", "server-info")


def differences(sim: Played, name: str, args_real: frozenset[str]) -> list[Difference]:
    real, answer = recorded(sim.release, name), sim.answers[name]
    out = header_differences(real, answer)
    if real.chunked or answer.chunked:
        try:
            return out + stream_differences(real, answer)
        except (AssertionError, ValueError) as exc:  # the framing (or an event that is no JSON)
            return [*out, Difference("stream", "framing", f"the stream's framing: {exc}")]
    if real.media_type != "application/json" or answer.media_type != "application/json":
        if bool(real.body) != bool(answer.body):
            out.append(Difference("body", "body", f"body of {len(answer.body)} bytes in the simulator, "
                                                  f"{len(real.body)} in SGLang"))
        return out
    if name not in SERVER_INFO:
        return out + compare(real.json(), answer.json())
    return out + server_info_differences(real.json(), answer.json(), args_real)


def server_info_differences(real: dict[str, Any], answer: dict[str, Any], args_real: frozenset[str]) -> list[Difference]:
    """Whole, but the server arguments only one release has (the simulator takes 0.5.9's command line,
    flags.json) and SGLang's private attributes (_resolved_overrides ...)."""
    args_sim = frozenset(FLAGS["server_args_fields"])
    states_real, states_sim = real.get("internal_states") or [{}], answer.get("internal_states") or [{}]
    skip = (args_real ^ args_sim) | {k for k in states_real[0] if k.startswith("_")}
    out = compare([None] * len(states_real), [None] * len(states_sim), "$.internal_states")  # the length
    for path, real_part, sim_part in (("$", real, answer), ("$.internal_states[0]", states_real[0], states_sim[0])):
        out += compare({k: v for k, v in real_part.items() if k not in skip and k != "internal_states"},
                       {k: v for k, v in sim_part.items() if k not in skip and k != "internal_states"}, path)
    return out


def unexplained(sim: Played, name: str) -> list[str]:
    return [d.message for d in sim.differences[name] if sim.excuse(name, d) is None]


CASES = [pytest.param(release, e["name"], id=f"{release}-{e['name']}") for release in RELEASES for e in entries(release)]


@pytest.mark.parametrize("release,name", CASES)
def test_answer_is_the_recording_in_structure(sims, release, name):
    """Status, headers, JSON or the stream event by event: the recording's structure, whole."""
    found = unexplained(sims[release], name)
    entry = next(e for e in entries(release) if e["name"] == name)
    assert not found, f"{entry['method']} {entry['path']} (SGLang {release}):\n" + "\n".join(found)


@pytest.mark.parametrize("release", RELEASES)
def test_the_drain_reads_what_the_recording_says(sims, release):
    """Beyond structure, the values role sglang_router's drain reads (its module's count(): running, waiting,
    grammar queue, KV cache held, per rank): the same in the simulator's /v1/loads as in the recorded one,
    both taken with nothing in flight after the server had served."""
    count = load("roles/sglang_router/library/sglang_router_drain.py").count
    real = count(recorded(release, "v1-loads").json())
    assert real is not None and real == count(sims[release].answers["v1-loads"].json())


def test_reviewed_lists_explain_something(sims):
    """Each entry of the reviewed lists excuses at least one difference found: a moot entry is removed."""
    used: set[Reason] = set()
    for sim in sims.values():
        for name, found in sim.differences.items():
            used |= {r for r in (sim.excuse(name, d) for d in found) if r is not None}
    listed = {(n, k) for n, table in (("SIM_LABELS", SIM_LABELS), ("NULL_OR_VALUE", NULL_OR_VALUE),
                                      ("LENGTH_VARIES", LENGTH_VARIES),
                                      ("SERVER_ARGS_UNRESOLVED", SERVER_ARGS_UNRESOLVED)) for k in table}
    assert not listed - used, f"reviewed entries that explain nothing any more: {sorted(listed - used)}"


@pytest.mark.parametrize("release", RELEASES)
def test_health_while_loading(tmp_path, release):
    """/health before the model is loaded: SGLang's bare 503 (health-first-answer.http)."""
    path = fixtures(release) / "health-first-answer.http"
    if not path.is_file():
        pytest.skip(f"no recording of /health while SGLang {release} loads")
    proc, port = start(tmp_path, release, {"SGLANG_SIM_FAULT": "never_ready"}, "staying in the starting state")
    try:
        real, answer = Answer(path.read_bytes()), Answer(exchange(port, "GET", "/health"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    found = [d.message for d in header_differences(real, answer)]
    assert not found and answer.body == real.body == b"", "\n".join(found) or answer.body[:200]


# --------------------------------------------------------------------------- the comparison itself


def test_compare_finds_each_kind_of_difference():
    real = {"a": None, "b": [1, 2, {"c": "x"}], "d": {"e": 1.0}, "f": [0, 0]}
    assert compare(real, json.loads(json.dumps(real))) == []
    found = {(d.what, d.pattern) for d in compare(real, {"a": 0, "b": [1, 2, {"c": None}], "d": {"e": "1", "g": 1}, "f": [0]})}
    assert found == {("null", "$.a"), ("null", "$.b[*].c"), ("type", "$.d.e"), ("extra", "$.d.g"), ("length", "$.f")}
    # Every item, not only the first: a third item of another type is found.
    assert [(d.what, d.message.split(":")[0]) for d in compare([1, 1, 1], [1, 1, "1"])] == [("type", "$[2]")]
    assert [d.what for d in compare({"x": 1}, {})] == ["missing"]


def test_streams_are_compared_event_by_event():
    def answer(*events: dict[str, Any]) -> Answer:
        data = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
        body = b"".join(b"%x\r\n%s\r\n" % (len(d), d) for d in data) + b"0\r\n\r\n"
        return Answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + body)

    first, token, last = {"role": "assistant"}, {"content": "x"}, {"finish_reason": "length"}
    real = answer(first, token, token, token, last)
    assert stream_differences(real, answer(first, token, last)) == []  # repeated events: as many as come
    assert [d.what for d in stream_differences(real, answer(first, first, token, last))] == ["stream"]
    assert [d.what for d in stream_differences(real, answer(first, token, last, token))] == ["stream"]
    # A middle event of another structure is found, whichever it is.
    found = stream_differences(real, answer(first, token, {"content": None}, token, last))
    assert "stream" in [d.what for d in found]
    # Each event of a run is compared, not only its first: a list's length in the second is found.
    ids = answer(first, {"ids": [1]}, {"ids": [1]}, last)
    found = stream_differences(ids, answer(first, {"ids": [1]}, {"ids": [1, 2]}, last))
    assert [(d.what, d.pattern) for d in found] == [("length", "$.ids")]


# --------------------------------------------------------------------------- /metrics and the launcher


def families(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """Metric family -> (type, label names of its first sample)."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    out = {}
    for name, kind_ in types.items():
        sample = re.search(rf"^{re.escape(name)}(?:_bucket|_count|_sum|_total|_created)?\{{([^}}]*)\}}", text, re.M)
        labels = frozenset(re.findall(r'(\w+)="', sample.group(1))) - {"le"} if sample else frozenset()
        out[name] = (kind_, labels)
    return out


@pytest.mark.parametrize("release", RELEASES)
def test_metrics(sims, release):
    sim = sims[release]
    real = families(Answer((fixtures(release) / "metrics.http").read_bytes()).body.decode())
    # The recording's traffic (the fixture asked each request once): an aborted stream, then /metrics.
    try:
        with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as sock:
            body = json.dumps({"text": "abort me", "stream": True, "sampling_params": {"max_new_tokens": 2000}}).encode()
            sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            while b"data:" not in sock.recv(65536):
                pass
    except OSError:
        pass
    time.sleep(1.0)
    sim_families = families(Answer(exchange(sim.port, "GET", "/metrics")).body.decode())
    wanted = set(re.findall(r"sglang:[a-z_]+", ALERTS.read_text()))
    base = {re.sub(r"_(bucket|count|sum)$", "", name) for name in wanted}
    for name in sorted(base):
        family = name  # counters: the TYPE line names them with _total, as SGLang (and the simulator) print it
        if family in NOT_RECORDED:  # test_sim_metrics.py checks the simulator's against 0.5.9's source
            assert family not in real, f"{family} is recorded now: take it out of NOT_RECORDED"
            continue
        assert family in real, f"{name}: the alert rules read it, SGLang {release} does not export it"
        assert family in sim_families, f"{name}: the alert rules read it, the simulator does not export it"
        assert sim_families[family][0] == real[family][0], f"{family}: type {sim_families[family][0]} vs {real[family][0]}"
    found = []
    for name, (kind_, labels) in sorted(sim_families.items()):
        if name not in real:
            if name not in FAMILIES_DROPPED_IN_0517 and name not in NOT_RECORDED:
                found.append(f"{name}: only in the simulator")
        elif real[name][0] != kind_ or not labels <= real[name][1] or real[name][1] - labels - LABELS_ADDED_IN_0517:
            found.append(f"{name}: simulator {kind_} {sorted(labels)}, SGLang {real[name][0]} {sorted(real[name][1])}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name,extra", [("bad-flag", ["--no-such-flag", "1"]), ("bad-value", ["--tp-size", "two"])])
def test_bad_launch(release, name, extra):
    real = (fixtures(release) / f"{name}.txt").read_text()
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
