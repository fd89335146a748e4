#!/usr/bin/env python3
"""Benchmark an SGLang server's generation speed: the number to compare after every upgrade.

Why this and not `python -m sglang.bench_serving`: the figure the project tracks is the
single-request speed users feel (completion tokens / time from sending the request to the
last token), with EAGLE-3 acceptance alongside, on a server that may be protected by an API
key, from a host that may only have bare python3.  So this is standard library only, counts
tokens from the server's own counters (with EAGLE-3 one stream event carries several tokens,
so counting events would be wrong), and writes one JSON document that also records what was
measured: the server's version and arguments (from /get_server_info) and the host facts
passed in with --env-json.

APIs: `native` POSTs SGLang's /generate with "stream": true; `openai` POSTs
/v1/chat/completions (the endpoint production clients use) with stream_options
include_usage and continuous_usage_stats.  Both send temperature 0 and ignore_eos, so every
run produces exactly --max-tokens tokens.

Per run: tokens (meta_info.completion_tokens / usage.completion_tokens); tok_s = tokens /
(last token time - send time); decode_tok_s = tokens after the first event / time after the
first event; ttft_ms; tpot_ms; accept_length (meta_info.spec_accept_length, or
completion_tokens / spec_verify_ct; native only).  The "last token time" is the arrival of
the stream's last data event before [DONE]; SGLang sends the finish and usage events in the
same iteration as the last tokens.  At --concurrency C, --runs requests are sent with C in
flight; aggregate_tok_s = all tokens / (first send to last token).

Failures (HTTP errors, error events, timeouts, a stream that ends without [DONE], a server
that reports no token count) fail that run; no new runs start after the first failure; the
results of finished runs are kept in the JSON; the exit status is 1.  The API key (--api-key,
or SGLANG_API_KEY / OPENAI_API_KEY) is sent as a Bearer token and scrubbed from everything
printed or written.

Example:
    sglang_bench.py --url http://127.0.0.1:30000 --runs 10 --max-tokens 256 --label eagle3 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import http.client
import json
import os
import ssl
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

TOOL = "sglang_bench"
SCHEMA = "sglang-bench/1"
REDACTED = "<redacted>"
SECRET_WORDS = ("api_key", "apikey", "secret", "password")
# Server arguments worth a glance in the summary (the full set is in environment.server_args).
SUMMARY_ARGS = (
    "model_path", "served_model_name", "tp_size", "dp_size", "ep_size", "speculative_algorithm",
    "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
    "speculative_num_draft_tokens", "max_running_requests", "mem_fraction_static", "attention_backend",
    "cuda_graph_max_bs", "kv_cache_dtype", "quantization", "moe_runner_backend", "disable_overlap_schedule",
)
# Short, common words: roughly one token each in the usual BPE vocabularies.
PROMPT_WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work number night "
    "point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law "
    "car city name team minute idea kid body back parent face others level office door health person"
).split()


class BenchError(Exception):
    """One run failed; the message says why in words a user can act on."""


@dataclass
class Run:
    """One measured request.  Times are seconds on the client's monotonic clock."""

    index: int
    ok: bool = False
    tokens: int | None = None
    prompt_tokens: int | None = None
    seconds: float | None = None
    tok_s: float | None = None
    decode_tok_s: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    accept_length: float | None = None
    spec_verify_ct: int | None = None
    events: int = 0
    sent_at_s: float | None = None
    error: str | None = None
    t_send: float | None = None
    t_last: float | None = None

    def public(self) -> dict[str, Any]:
        data = asdict(self)
        del data["t_send"], data["t_last"]
        return data


class Server:
    """Where and how to reach the server (URL, key, timeout); opens one connection per request."""

    def __init__(self, url: str, api_key: str | None, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--url must look like http://HOST:PORT, got {url!r}")
        self.url = url.rstrip("/")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base = parts.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    @property
    def host_header(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def get_json(self, path: str) -> dict[str, Any]:
        """A small GET (server info); the streaming requests use HttpStream."""
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("GET", self.base + path, headers=self.headers())
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise BenchError(f"GET {path}: HTTP {resp.status} {resp.reason}: {body[:200]!r}")
            return json.loads(body)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise BenchError(f"GET {path}: {type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()


def make_prompt(input_len: int, run_id: str) -> str:
    """A deterministic prompt of about `input_len` tokens that starts with the run id.

    The id comes first so that SGLang's radix (prefix) cache can reuse at most a token or
    two of another run's prompt; a shared prompt would be served from the cache after the
    first run and make TTFT meaningless.
    """
    words = [PROMPT_WORDS[(i * 7) % len(PROMPT_WORDS)] for i in range(max(0, input_len - 3))]
    return " ".join([f"{run_id}: Run", *words])


def request_payload(api: str, prompt: str, max_tokens: int, model: str) -> tuple[str, dict[str, Any]]:
    if api == "native":
        return "/generate", {
            "text": prompt,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True},
            "stream": True,
        }
    return "/v1/chat/completions", {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


def _error_of(event: dict[str, Any]) -> str | None:
    err = event.get("error")
    if err is None:
        return None
    return str(err.get("message", err)) if isinstance(err, dict) else str(err)


def _first_tokens(api: str, event: dict[str, Any]) -> int | None:
    """How many tokens the event carries if it is the first one with tokens, else None."""
    if api == "native":
        count = (event.get("meta_info") or {}).get("completion_tokens") or 0
        return count or None
    usage_count = (event.get("usage") or {}).get("completion_tokens")
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
            return usage_count or 1  # without per-chunk usage, a first chunk counts as one token
    return None


def _final_counts(api: str, event: dict[str, Any]) -> tuple[int | None, int | None, float | None, int | None]:
    """(completion tokens, prompt tokens, accept length, verify steps) from the last event."""
    if api == "native":
        meta = event.get("meta_info") or {}
        tokens, verify = meta.get("completion_tokens"), meta.get("spec_verify_ct")
        accept = meta.get("spec_accept_length")
        if accept is None and tokens and verify:
            accept = tokens / verify
        return tokens, meta.get("prompt_tokens"), accept, verify
    usage = event.get("usage") or {}
    return usage.get("completion_tokens"), usage.get("prompt_tokens"), None, None


class ChunkedDecoder:
    """Incremental decoder of HTTP/1.1 chunked transfer coding (how SGLang's uvicorn streams)."""

    def __init__(self) -> None:
        self.buf = b""
        self.data_left = 0
        self.crlf_pending = False
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self.buf += data
        out: list[bytes] = []
        while not self.done:
            if self.data_left:
                if not self.buf:
                    break
                piece = self.buf[: self.data_left]
                self.buf = self.buf[len(piece):]
                self.data_left -= len(piece)
                self.crlf_pending = self.data_left == 0
                out.append(piece)
            elif self.crlf_pending:
                if len(self.buf) < 2:
                    break
                self.buf, self.crlf_pending = self.buf[2:], False
            else:
                end = self.buf.find(b"\r\n")
                if end < 0:
                    break
                size = int(self.buf[:end].split(b";", 1)[0].strip(), 16)
                self.buf = self.buf[end + 2:]
                self.data_left = size
                self.done = size == 0
        return b"".join(out)


class HttpStream:
    """One POST over its own connection, read as it arrives (asyncio streams, no threads).

    Why not http.client and a thread per request: with dozens of streams in flight, Python
    threads queue for the GIL and stamp events milliseconds late; one event loop reads each
    event as soon as the socket has it, which is what the timing needs.
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.status = 0
        self.reason = ""
        self._decoder: ChunkedDecoder | None = None
        self._length: int | None = None

    async def connect(self) -> None:
        ssl_ctx = ssl.create_default_context() if self.server.scheme == "https" else None
        self.reader, self.writer = await asyncio.open_connection(self.server.host, self.server.port, ssl=ssl_ctx)

    async def send(self, path: str, body: bytes) -> None:
        assert self.writer is not None
        lines = [f"POST {self.server.base}{path} HTTP/1.1", f"Host: {self.server.host_header}",
                 f"Content-Length: {len(body)}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in self.server.headers().items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await self.writer.drain()

    async def read_head(self) -> None:
        assert self.reader is not None
        try:
            head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        except asyncio.IncompleteReadError:
            raise BenchError("the server closed the connection before answering") from None
        _, status, *reason = head[0].split(" ", 2)
        self.status, self.reason = int(status), (reason[0] if reason else "")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)}
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._decoder = ChunkedDecoder()
        elif "content-length" in headers:
            self._length = int(headers["content-length"])

    async def read_body(self) -> bytes:
        """The next piece of the body as it arrives; b"" at its end."""
        assert self.reader is not None
        if self._decoder is not None:
            while not self._decoder.done:
                data = await self.reader.read(65536)
                if not data:
                    raise BenchError("stream dropped mid-way: the connection closed inside the chunked body")
                piece = self._decoder.feed(data)
                if piece:
                    return piece
            return b""
        if self._length is not None:
            if self._length <= 0:
                return b""
            data = await self.reader.read(min(self._length, 65536))
            if not data:
                raise BenchError("stream dropped mid-way: the connection closed before the end of the body")
            self._length -= len(data)
            return data
        return await self.reader.read(65536)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def run_once(server: Server, api: str, payload_path: str, payload: dict[str, Any], index: int,
                   start_gate: Callable[[], Awaitable[None]]) -> Run:
    """Send one streaming request and measure it; failures are recorded in the Run, not raised.

    The TCP connection is opened before the clock starts and `start_gate` is passed, so that
    the requests of a concurrent batch leave together and connection set-up is not timed.
    """
    run = Run(index=index)
    body = json.dumps(payload).encode("utf-8")
    stream = HttpStream(server)
    t_first: float | None = None
    first_tokens = 0
    last_raw: bytes | None = None
    done = False
    loop = asyncio.get_running_loop()
    try:
        try:
            async with asyncio.timeout(server.timeout):
                await stream.connect()
        finally:
            await start_gate()
        run.t_send = time.perf_counter()
        async with asyncio.timeout_at(loop.time() + server.timeout):
            await stream.send(payload_path, body)
            await stream.read_head()
            if stream.status != 200:
                detail = (await stream.read_body())[:300].decode("utf-8", "replace").strip()
                raise BenchError(f"HTTP {stream.status} {stream.reason}" + (f": {detail}" if detail else ""))
            pending = b""
            while not done:
                data = await stream.read_body()
                if not data:
                    break
                now = time.perf_counter()
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue
                    raw = line[5:].strip()
                    if raw == b"[DONE]":
                        done = True
                        break
                    run.events += 1
                    last_raw, run.t_last = raw, now
                    if t_first is None:  # parse events only until the first token arrives
                        event = json.loads(raw)
                        error = _error_of(event)
                        if error:
                            raise BenchError(f"server error event: {error}")
                        count = _first_tokens(api, event)
                        if count:
                            t_first, first_tokens = now, count
        if not done:
            raise BenchError("stream ended without [DONE] (dropped mid-way)")
        if last_raw is None:
            raise BenchError("stream carried no events")
        last_event = json.loads(last_raw)
        error = _error_of(last_event)
        if error:
            raise BenchError(f"server error event: {error}")
        tokens, run.prompt_tokens, run.accept_length, run.spec_verify_ct = _final_counts(api, last_event)
        if not isinstance(tokens, int) or tokens <= 0 or t_first is None or run.t_last is None:
            raise BenchError("server reported no completion token count "
                             + ("(meta_info.completion_tokens)" if api == "native" else "(usage.completion_tokens)"))
        run.tokens = tokens
        run.seconds = run.t_last - run.t_send
        run.tok_s = tokens / run.seconds
        run.ttft_ms = (t_first - run.t_send) * 1000.0
        if tokens > first_tokens and run.t_last > t_first:
            run.decode_tok_s = (tokens - first_tokens) / (run.t_last - t_first)
            run.tpot_ms = (run.t_last - t_first) / (tokens - first_tokens) * 1000.0
        run.ok = True
    except BenchError as exc:
        run.error = f"{exc} (after {run.events} events)"
    except TimeoutError:
        run.error = f"timed out after {server.timeout:g} s (--timeout) (after {run.events} events)"
    except ConnectionRefusedError:
        run.error = f"connection refused by {server.url}"
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        run.error = f"{type(exc).__name__}: {exc} (after {run.events} events)"
    finally:
        stream.close()
    return run


async def run_batch(server: Server, api: str, max_tokens: int, prompt_for: Callable[[int], str], model: str,
                    indices: list[int], concurrency: int) -> list[Run]:
    """Send the requests with `concurrency` in flight; start no new one after a failure.

    The first `concurrency` requests wait for each other after connecting, so the batch
    starts together; later ones start as slots free up.
    """
    failed = False
    slots = asyncio.Semaphore(concurrency)
    first_wave = min(concurrency, len(indices))
    connected = 0
    all_connected = asyncio.Event()

    async def wave_gate() -> None:
        nonlocal connected
        connected += 1
        if connected >= first_wave:
            all_connected.set()
        await all_connected.wait()

    async def no_gate() -> None:
        return None

    async def one(position: int) -> Run | None:
        nonlocal failed
        async with slots:
            if failed:
                return None
            index = indices[position]
            path, payload = request_payload(api, prompt_for(index), max_tokens, model)
            run = await run_once(server, api, path, payload, index, wave_gate if position < first_wave else no_gate)
            failed = failed or not run.ok
            return run

    runs = [r for r in await asyncio.gather(*(one(p) for p in range(len(indices)))) if r is not None]
    sends = [r.t_send for r in runs if r.t_send is not None]
    for run in runs:
        if run.t_send is not None:
            run.sent_at_s = run.t_send - min(sends)
    return runs


def summarize(runs: list[Run]) -> dict[str, Any]:
    ok = [r for r in runs if r.ok]
    speeds = [r.tok_s for r in ok if r.tok_s is not None]

    def mean_of(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return statistics.fmean(present) if present else None

    out: dict[str, Any] = {
        "ok_runs": len(ok),
        "errors": len(runs) - len(ok),
        "mean_tok_s": statistics.fmean(speeds) if speeds else None,
        "median_tok_s": statistics.median(speeds) if speeds else None,
        "min_tok_s": min(speeds) if speeds else None,
        "max_tok_s": max(speeds) if speeds else None,
        "stdev_tok_s": statistics.stdev(speeds) if len(speeds) > 1 else (0.0 if speeds else None),
        "mean_decode_tok_s": mean_of([r.decode_tok_s for r in ok]),
        "mean_ttft_ms": mean_of([r.ttft_ms for r in ok]),
        "mean_tpot_ms": mean_of([r.tpot_ms for r in ok]),
        "accept_length": mean_of([r.accept_length for r in ok]),
        "aggregate_tok_s": None,
    }
    if ok:
        start = min(r.t_send for r in ok if r.t_send is not None)
        end = max(r.t_last for r in ok if r.t_last is not None)
        total = sum(r.tokens or 0 for r in ok)
        out["aggregate_tok_s"] = total / (end - start) if end > start else None
        out["total_tokens"] = total
        out["batch_seconds"] = end - start
    return out


def redact(value: Any, secret: str | None) -> Any:
    """Drop secrets: values under secret-looking keys, and the API key wherever it appears."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if any(word in str(key).lower() for word in SECRET_WORDS):
                out[key] = None if item is None else REDACTED
            else:
                out[redact(key, secret)] = redact(item, secret)
        return out
    if isinstance(value, list):
        return [redact(v, secret) for v in value]
    if isinstance(value, str) and secret:
        return value.replace(secret, REDACTED)
    return value


def server_environment(info: dict[str, Any]) -> dict[str, Any]:
    args = {k: v for k, v in info.items() if k != "internal_states"}
    summary = {k: info.get(k) for k in SUMMARY_ARGS if k in info}
    summary["version"] = info.get("version")
    if "simulator" in info:
        summary["simulator"] = info["simulator"]
    return {"server": summary, "server_args": args}


def avg_accept_from(info: dict[str, Any] | None) -> float | None:
    states = (info or {}).get("internal_states") or []
    values = [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)]
    values = [v for v in values if isinstance(v, (int, float))]
    return statistics.fmean(values) if values else None


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--url", default="http://127.0.0.1:30000", help="server base URL (default %(default)s)")
    parser.add_argument("--api", choices=("native", "openai"), default="native",
                        help="native: POST /generate; openai: POST /v1/chat/completions (default %(default)s)")
    parser.add_argument("--runs", type=int, default=10, help="measured requests (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured requests first (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight at a time (default %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens to generate per request (default %(default)s)")
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", help="fixed prompt text for every request (repeats hit the prefix cache)")
    prompt.add_argument("--input-len", type=int, default=128,
                        help="length of the generated per-run prompt, in ~tokens (default %(default)s)")
    parser.add_argument("--api-key", help="Bearer key; prefer the SGLANG_API_KEY or OPENAI_API_KEY environment variable")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per request (default %(default)s)")
    parser.add_argument("--json", dest="json_out", metavar="OUT", help="write the result document here")
    parser.add_argument("--label", default="", help="free text stored with the result, e.g. eagle3 or baseline")
    parser.add_argument("--env-json", metavar="FILE",
                        help="JSON object of host facts merged into environment (its keys server, "
                             "server_args and client are taken by what this tool measures)")
    args = parser.parse_args(argv)
    for name in ("runs", "concurrency", "max_tokens", "input_len"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0 or args.timeout <= 0:
        parser.error("--warmup must be >= 0 and --timeout > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    api_key = args.api_key or os.environ.get("SGLANG_API_KEY") or os.environ.get("OPENAI_API_KEY") or None

    def say(text: str, stream: Any = sys.stdout) -> None:
        print(redact(text, api_key), file=stream, flush=True)

    try:
        server = Server(args.url, api_key, args.timeout)
        env_extra: dict[str, Any] = {}
        if args.env_json:
            with open(args.env_json, encoding="utf-8") as handle:
                env_extra = json.load(handle)
            if not isinstance(env_extra, dict):
                raise ValueError(f"--env-json {args.env_json} must hold a JSON object")
    except (OSError, ValueError) as exc:
        say(f"{TOOL}: {exc}", sys.stderr)
        return 2

    started = utc_now()
    environment: dict[str, Any] = dict(env_extra)
    environment["client"] = {"tool": TOOL, "python": sys.version.split()[0]}
    model = "default"
    try:
        info_before: dict[str, Any] | None = server.get_json("/get_server_info")
        environment.update(server_environment(info_before))
        model = str(info_before.get("served_model_name") or model)
    except BenchError as exc:
        info_before = None
        environment["server_info_error"] = str(exc)

    def prompt_for(index: int) -> str:
        return args.prompt if args.prompt is not None else make_prompt(args.input_len, str(index))

    failure: str | None = None
    warmup_runs = asyncio.run(run_batch(server, args.api, args.max_tokens, lambda i: prompt_for(-1 - i), model,
                                        list(range(args.warmup)), min(args.concurrency, max(args.warmup, 1))))
    warmup_errors = [r.error for r in warmup_runs if not r.ok]
    runs: list[Run] = []
    if warmup_errors:
        failure = f"warmup failed: {warmup_errors[0]}"
    else:
        runs = asyncio.run(run_batch(server, args.api, args.max_tokens, prompt_for, model, list(range(args.runs)),
                                     args.concurrency))
        bad = [r for r in runs if not r.ok]
        if bad:
            failure = (f"{len(bad)} of {len(runs)} attempted runs failed ({args.runs} requested); "
                       f"first error (run {bad[0].index}): {bad[0].error}")

    stats = summarize(runs)
    try:
        server_accept = avg_accept_from(server.get_json("/get_server_info")) if info_before is not None else None
    except BenchError:
        server_accept = None
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "label": args.label,
        "ok": failure is None,
        "failure": failure,
        "started_at": started,
        "finished_at": utc_now(),
        "config": {
            "url": server.url, "api": args.api,
            "endpoint": "/generate" if args.api == "native" else "/v1/chat/completions",
            "runs": args.runs, "warmup": args.warmup, "concurrency": args.concurrency,
            "max_tokens": args.max_tokens, "input_len": None if args.prompt is not None else args.input_len,
            "prompt_chars": len(args.prompt) if args.prompt is not None else None,
            "timeout_s": args.timeout, "sends_authorization": bool(api_key), "model": model,
        },
        "concurrency": args.concurrency,
        "runs_attempted": len(runs),
        "warmup_errors": warmup_errors,
        **stats,
        "server_avg_spec_accept_length": server_accept,
        "runs": [r.public() for r in runs],
        "environment": environment,
    }
    result = redact(result, api_key)
    write_error = None
    if args.json_out:
        try:
            with open(args.json_out, "w", encoding="utf-8") as handle:
                json.dump(result, handle, indent=1)
                handle.write("\n")
        except OSError as exc:
            write_error = f"cannot write --json {args.json_out}: {exc}"

    say(f"{TOOL} [{args.label or 'no label'}] {args.api} {server.url} "
        f"concurrency={args.concurrency} max_tokens={args.max_tokens}")
    if stats["ok_runs"]:
        say(f"mean {fmt(stats['mean_tok_s'])} tok/s (range {fmt(stats['min_tok_s'])}-{fmt(stats['max_tok_s'])}) "
            f"over {stats['ok_runs']} runs")
        say(f"median {fmt(stats['median_tok_s'])} tok/s, stdev {fmt(stats['stdev_tok_s'], 2)}, "
            f"decode {fmt(stats['mean_decode_tok_s'])} tok/s, TTFT {fmt(stats['mean_ttft_ms'])} ms, "
            f"TPOT {fmt(stats['mean_tpot_ms'], 2)} ms, accept length "
            f"{fmt(stats['accept_length'] if stats['accept_length'] is not None else server_accept, 2)}, "
            f"aggregate {fmt(stats['aggregate_tok_s'])} tok/s")
    if failure:
        say(f"{TOOL}: FAILED: {failure}", sys.stderr)
    if write_error:
        say(f"{TOOL}: {write_error}", sys.stderr)
    return 1 if failure or write_error else 0


if __name__ == "__main__":
    sys.exit(main())
