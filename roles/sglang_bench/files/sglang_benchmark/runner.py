"""Measuring: one streamed request timed event by event (run_once), and a batch of them with a
given number in flight (run_batch)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .protocol import (
    BenchError,
    Run,
    _error_of,
    _final_counts,
    _first_tokens,
    request_payload,
)
from .transport import HttpStream, Server


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
