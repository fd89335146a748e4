"""The SIMULATOR's (TEST ONLY) engine: admission queue, prefill timers, the decode step clock and
EAGLE acceptance; the timing model in the package docstring is implemented here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from .settings import SimConfigError, SimSettings

VOCAB = (
    "the model answers each question with care and the server streams tokens back to the "
    "client while the draft proposes several tokens that the target verifies in one step "
    "so that decoding runs faster when most proposals are accepted by the large model"
).split()

log = logging.getLogger("sglang_sim")


def chain_acceptance(mean: float, max_k: int) -> float:
    """The per-draft acceptance probability p with E[k] = sum_{j<max_k} p^j = mean."""
    if not 1.0 <= mean <= max_k:
        raise SimConfigError(f"accept length {mean} must lie in [1, speculative_num_draft_tokens={max_k}]")
    lo, hi = 0.0, 1.0
    for _ in range(60):  # E[k](p) rises monotonically in p
        p = (lo + hi) / 2
        if sum(p**j for j in range(max_k)) < mean:
            lo = p
        else:
            hi = p
    return (lo + hi) / 2


class AcceptSampler:
    """Tokens per EAGLE verify step for one request.

    Draws k from a chain-acceptance model (k = 1 + accepted drafts, each next draft accepted
    with probability p, at most max_k), then clamps k so that the request's total after s steps
    stays within 1 token of s * mean.  `mean` is the request's own accept length: the configured
    one, or with SGLANG_SIM_NOISE_PCT drawn around it per request (prompts differ in how well the
    draft guesses them), which is the run-to-run spread; the clamp keeps the random walk of the
    draws from adding its own, so a request's rate is what its mean says.  `p` is one
    probability for every position, or one per draft position (the speculative model's q_i,
    specmodel.py).
    """

    BOUND = 1.0

    def __init__(self, mean: float, max_k: int, p: float | list[float], rng: random.Random) -> None:
        self.mean, self.max_k, self.rng = mean, max_k, rng
        self.p = list(p) if isinstance(p, list) else [p] * (max_k - 1)
        self.error = 0.0

    def next(self) -> int:
        k = 1
        while k < self.max_k and self.rng.random() < self.p[k - 1]:
            k += 1
        low = max(1, math.ceil(self.mean - self.BOUND - self.error - 1e-9))
        high = min(self.max_k, math.floor(self.mean + self.BOUND - self.error + 1e-9))
        k = min(max(k, low), high)
        self.error += k - self.mean
        return k


class GenRequest:
    """One generation request inside the simulated scheduler.

    Streaming handlers attach a `sink` that the step clock calls right after new tokens are
    appended, so events leave at the step's deadline without waking a task per request
    (at thousands of events per second that wake-up is what would make the simulator late).
    """

    def __init__(self, number: int, arrived: float, prompt_tokens: int, max_new_tokens: int,
                 weight_version: Any, sampler: AcceptSampler | None, crash_at: int | None) -> None:
        self.rid = uuid.uuid4().hex
        self.arrived = arrived  # event-loop time the request was read
        self.number = number
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.sampler = sampler
        self.crash_at = crash_at
        self.completion_tokens = 0
        self.verify_ct = 0
        self.histogram: list[int] = []
        self.text = ""
        self.ids: list[int] = []
        self.ids_csv = ""  # the output_ids JSON array body, kept up to date for cheap events
        self.finished = max_new_tokens <= 0
        self.aborted = False
        self.created_wall = time.time()
        self.finished_wall: float | None = None
        self.done = asyncio.Event()
        self.sink: Callable[[GenRequest], None] | None = None
        self._word = number * 7
        # meta_info of an unfinished request differs only in completion_tokens: pre-render it
        self.meta_head = (f'{{"id":"{self.rid}","finish_reason":null,"prompt_tokens":{prompt_tokens},'
                          f'"weight_version":{json.dumps(weight_version)},"total_retractions":0,'
                          f'"completion_tokens":').encode()

    def emit(self, count: int) -> int:
        """Append up to `count` tokens (never past max_new_tokens), notify; returns how many."""
        count = min(count, self.max_new_tokens - self.completion_tokens)
        words: list[int] = []
        for _ in range(count):
            self._word = (self._word * 31 + 17) % len(VOCAB)
            words.append(self._word)
        if words:  # one copy of the growing text and id list per step, not one per token
            self.text += "".join(" " + VOCAB[w] for w in words)
            self.ids.extend(1000 + w for w in words)
            new_ids = ",".join(str(1000 + w) for w in words)
            self.ids_csv = f"{self.ids_csv},{new_ids}" if self.ids_csv else new_ids
        self.completion_tokens += count
        if self.completion_tokens >= self.max_new_tokens:
            self.finish()
        if self.sink is not None:
            self.sink(self)
        return count

    def finish(self) -> None:
        self.finished = True
        self.finished_wall = time.time()
        self.done.set()


class Engine:
    """Admission queue, prefill timers and the shared decode step clock."""

    def __init__(self, settings: SimSettings, server_args: dict[str, Any]) -> None:
        self.settings = settings
        self.spec = server_args.get("speculative_algorithm") is not None
        self.max_k = int(server_args.get("speculative_num_draft_tokens") or 1)
        self.accept_length = settings.accept_length
        self.accept_p: float | list[float] = 0.0
        # The speculative model (SGLANG_SIM_ACCEPT_FIRST): acceptance per position and the cost
        # of drafting and verifying; without it, a fixed accept length at no cost.
        self.spec_model = settings.spec_model() if self.spec else None
        self.spec_shape = (int(server_args.get("speculative_num_steps") or 1),
                           int(server_args.get("speculative_eagle_topk") or 1), self.max_k)
        if self.spec_model is not None:
            steps, topk, draft = self.spec_shape
            self.accept_p = self.spec_model.position_acceptance(steps, topk, draft)
            self.accept_length = self.spec_model.accept_length(steps, topk, draft)
            self.max_k = len(self.accept_p) + 1
        elif self.spec:
            self.accept_p = chain_acceptance(settings.accept_length, self.max_k)
        self.max_running: int | None = server_args.get("max_running_requests")
        self.log_interval = int(server_args.get("decode_log_interval") or 40)
        # SGLANG_SIM_START_NOISE_PCT: this start's speed factor (clocks, memory layout of a real start).
        self.speed = settings.start_speed()
        self.base_step = settings.slowdown_factor / settings.decode_tok_s / self.speed
        self.ttft = settings.ttft_ms * settings.slowdown_factor / 1000.0 / self.speed
        self.tokenize = settings.tokenize_ms / 1000.0
        self.prefilling: set[GenRequest] = set()
        self.waiting: deque[tuple[GenRequest, asyncio.Future[None]]] = deque()
        self.admitted = 0
        self.joining: list[GenRequest] = []
        self.running: list[GenRequest] = []
        self.wake = asyncio.Event()
        self.spec_steps = 0
        self.spec_tokens = 0
        self.interval_spec_steps = 0
        self.interval_spec_tokens = 0
        self.forward_ct = 0
        self.interval_tokens = 0
        self.interval_start = time.perf_counter()
        self.last_gen_throughput = 0.0
        # /v1/loads' snapshot (SGLang 0.5.17 on, managers/load_snapshot.py): what the scheduler last published,
        # after each prefill batch, every SNAPSHOT_INTERVAL-th decode batch, and when fully idle.
        self.published = self.live_load()
        self.decodes_since_publish = 0

    SNAPSHOT_INTERVAL = 15  # SGLang's --load-snapshot-publish-interval default (0.5.17, 0.5.23)

    def held_tokens(self) -> int:
        """KV-cache tokens the requests hold (SGLang's num_used_tokens, the prefix cache aside): the prompt from
        the prefill on, then each token made; none once a request has finished."""
        return (sum(r.prompt_tokens for r in self.prefilling)
                + sum(r.prompt_tokens + r.completion_tokens for r in (*self.running, *self.joining)))

    def live_load(self) -> dict[str, Any]:
        """What SGLang's scheduler counts now (0.5.9's Scheduler.get_loads, 0.5.17's SchedulerLoadInquirer):
        running is its running batch, which a request in its prefill has not joined yet (it holds KV cache:
        used); waiting is its queue. A request still being tokenized is in neither."""
        return {"running": len(self.running) + len(self.joining), "waiting": len(self.waiting),
                "used": self.held_tokens(), "queued_tokens": sum(r.prompt_tokens for r, _ in self.waiting),
                "timestamp": time.time()}

    def publish(self) -> None:
        self.published = self.live_load()
        self.decodes_since_publish = 0

    def _publish_if_idle(self) -> None:
        if not (self.running or self.joining or self.prefilling or self.waiting):
            self.publish()

    def step_seconds(self, batch: int) -> float:
        if self.spec_model is not None:
            steps, _topk, draft = self.spec_shape
            return self.base_step * self.spec_model.step_factor(steps, draft, batch, self.settings.batch_slowdown)
        return self.base_step * (1.0 + self.settings.batch_slowdown * (batch - 1))

    def new_sampler(self, number: int) -> AcceptSampler | None:
        if not self.spec:
            return None
        if not self.settings.noise_pct:  # deterministic per request number, the same in every start
            return AcceptSampler(self.accept_length, self.max_k, self.accept_p,
                                 random.Random(f"{self.settings.seed}:{number}"))
        rng = self.settings.noise_rng(str(number))
        mean = self.accept_length * (1.0 + rng.gauss(0.0, self.settings.noise_pct / 100.0))
        return AcceptSampler(min(max(1.0, mean), float(self.max_k)), self.max_k, self.accept_p, rng)

    def avg_spec_accept_length(self) -> float | None:
        return self.spec_tokens / self.spec_steps if self.spec_steps else None

    async def _admit(self, req: GenRequest) -> bool:
        """Take a running slot, queueing if all are taken; True if it had to wait."""
        if self.max_running is None or self.admitted < self.max_running:
            self.admitted += 1
            return False
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append((req, future))
        await future
        return True

    def _release(self) -> None:
        self.admitted -= 1
        while self.waiting and (self.max_running is None or self.admitted < self.max_running):
            req, future = self.waiting.popleft()
            if not future.done():
                self.admitted += 1
                future.set_result(None)

    async def generate(self, req: GenRequest) -> None:
        """Queue, prefill (first token), then hand the request to the step clock."""
        if req.finished:
            req.finish()
            return
        loop = asyncio.get_running_loop()
        if self.tokenize:  # in the tokenizer manager: counted nowhere
            await asyncio.sleep(self.tokenize)
        start = loop.time() if await self._admit(req) else req.arrived + self.tokenize
        self.prefilling.add(req)
        await asyncio.sleep(max(0.0, start + self.ttft - loop.time()))  # prefill from arrival
        log.info("Prefill batch, #new-seq: 1, #new-token: %d, #cached-token: 0, token usage: 0.00, "
                 "#running-req: %d, #queue-req: %d, input throughput (token/s): 0.00, cuda graph: False",
                 req.prompt_tokens, len(self.running), len(self.waiting))
        if req.aborted:
            self.prefilling.discard(req)
            self._release()
            self._publish_if_idle()
            return
        req.emit(1)
        self._check_crash(req)
        self.publish()  # after the prefill batch, which has not joined the running batch yet
        self.prefilling.discard(req)
        if req.finished:
            self._release()
            self._publish_if_idle()
        else:
            self.joining.append(req)
            self.wake.set()

    def _check_crash(self, req: GenRequest) -> None:
        if req.crash_at is not None and req.completion_tokens >= req.crash_at:
            print(f"[sglang_sim] SGLANG_SIM_FAULT=crash_after_requests:"
                  f"{self.settings.fault('crash_after_requests')}: simulated crash "
                  f"while serving request {req.number} (after {req.completion_tokens} tokens)",
                  file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(1)

    async def run_clock(self) -> None:
        """All running requests advance one step per step(n), on absolute deadlines."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        while True:
            if not self.running and not self.joining:
                deadline = None
                self._publish_if_idle()
                self.wake.clear()
                await self.wake.wait()
                continue
            self.running.extend(self.joining)
            self.joining.clear()
            start = loop.time() if deadline is None else deadline
            deadline = start + self.step_seconds(len(self.running))
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            still: list[GenRequest] = []
            for req in self.running:
                if req.aborted:
                    self._release()
                    continue
                # max_new_tokens cuts the last verify step short, as in SGLang
                k = min(req.sampler.next() if req.sampler else 1, req.max_new_tokens - req.completion_tokens)
                if req.sampler:  # counted before emit(), whose event of a finished request reports them
                    req.verify_ct += 1
                    if len(req.histogram) < k:
                        req.histogram.extend([0] * (k - len(req.histogram)))
                    req.histogram[k - 1] += 1  # index = accepted draft tokens = k - 1
                    self.interval_spec_steps += 1
                    self.interval_spec_tokens += k
                self.interval_tokens += req.emit(k)
                self._check_crash(req)
                if req.finished:
                    self._release()
                else:
                    still.append(req)
            self.running = still
            self.forward_ct += 1
            self.decodes_since_publish += 1
            if self.decodes_since_publish >= self.SNAPSHOT_INTERVAL:
                self.publish()
            if self.forward_ct % self.log_interval == 0:
                self._log_decode_batch()

    def _log_decode_batch(self) -> None:
        now = time.perf_counter()
        self.last_gen_throughput = self.interval_tokens / max(now - self.interval_start, 1e-9)
        self.interval_tokens, self.interval_start = 0, now
        msg = f"Decode batch, #running-req: {len(self.running)}, #token: 0, token usage: 0.00, "
        if self.spec and self.interval_spec_steps:
            accept_len = self.interval_spec_tokens / self.interval_spec_steps
            msg += f"accept len: {accept_len:.2f}, accept rate: {accept_len / self.max_k:.2f}, "
            self.spec_steps += self.interval_spec_steps
            self.spec_tokens += self.interval_spec_tokens
            self.interval_spec_steps = self.interval_spec_tokens = 0
        msg += (f"cuda graph: True, gen throughput (token/s): {self.last_gen_throughput:.2f}, "
                f"#queue-req: {len(self.waiting)}")
        log.info(msg)
