"""SGLang's HTTP API as the SIMULATOR (TEST ONLY) serves it: routes, auth, readiness, faults and the
response shapes of SGLang 0.5.9; ``serve()`` runs it with the engine's step clock.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import answers, shapes, tokens, toolcalls
from .engine import Engine, GenRequest
from .http import ClientGone, HttpRequest, Responder, dumps, read_request
from .metrics import DEFAULT_MAX_TOTAL_TOKENS as SIM_TOKENS
from .metrics import SimMetrics
from .model_dir import is_kimi_k25, missing_weights, read_config
from .settings import READY_TEXT, SimConfigError, SimSettings
from .sglang_dir import KIMI_CLASS, KIMI_K25_NAME, kimi_crash_traceback, missing_target_method
from .specmodel import SpecOutOfMemory

HEALTH_CHECK_POLL_S = 1.0  # SGLang's health_generate sleeps 1 s before its first check
CHAT_DEFAULT_MAX_TOKENS = 128  # SGLang would generate to EOS/context; the sim has no EOS

log = logging.getLogger("sglang_sim")


class SimServer:
    """The simulated SGLang HTTP server: routes, auth, readiness and the response shapes."""

    def __init__(self, settings: SimSettings, server_args: dict[str, Any], version: str) -> None:
        self.settings = settings
        self.args = server_args
        self.version = version
        self.shapes_0517 = shapes.plays_0517(version)  # the release's answer shapes (shapes.py)
        self.engine = Engine(settings, server_args)
        self.ready = False
        self.generation_count = 0
        self.background: set[asyncio.Future[None]] = set()
        self.routes: dict[str, tuple[tuple[str, ...], Callable[[HttpRequest, Responder], Any]]] = {
            "/health": (("GET",), self.health),
            "/health_generate": (("GET",), self.health),
            "/get_model_info": (("GET",), self.model_info),
            "/model_info": (("GET",), self.model_info),
            "/get_server_info": (("GET",), self.server_info),
            "/server_info": (("GET",), self.server_info),
            "/v1/models": (("GET",), self.models),
            "/v1/loads": (("GET",), self.loads),
            "/get_load": (("GET",), self.get_load),
            "/generate": (("POST", "PUT"), self.generate),
            "/v1/completions": (("POST",), self.completions),
            "/v1/chat/completions": (("POST",), self.chat_completions),
            "/flush_cache": (("GET", "POST"), self.flush_cache),
        }
        # --enable-metrics: SGLang's Prometheus metrics on the HTTP port (metrics.py).
        self.metrics = SimMetrics(self) if server_args.get("enable_metrics") else None
        if self.metrics is not None:
            self.routes["/metrics"] = (("GET",), self.prometheus)

    # ---- connection handling

    async def handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = writer.get_extra_info("peername")[:2]
        peer = f"{host}:{port}"
        try:
            while True:
                req = await read_request(reader, writer, peer)
                if req is None:
                    break
                keep_alive = req.headers.get("connection", "").lower() != "close"
                await self.dispatch(req, Responder(writer, req, keep_alive))
                if not keep_alive:
                    break
        except (ClientGone, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()

    def authorized(self, req: HttpRequest) -> bool:
        """sglang/srt/utils/auth.py decide_request_auth() for --api-key (NORMAL endpoints)."""
        key = self.args.get("api_key")
        if not key or req.method == "OPTIONS" or req.path.startswith(("/health", "/metrics")):
            return True
        scheme, _, token = req.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and token == key

    async def dispatch(self, req: HttpRequest, out: Responder) -> None:
        if not self.authorized(req):
            await out.send_json(401, {"error": "Unauthorized"})
            return
        route = self.routes.get(req.path)
        if route is None:
            await out.send_json(404, {"detail": "Not Found"})
            return
        methods, handler = route
        if req.method not in methods:
            await out.send_json(405, {"detail": "Method Not Allowed"}, headers=f"allow: {', '.join(methods)}\r\n")
            return
        await handler(req, out)

    # ---- info endpoints

    async def health(self, req: HttpRequest, out: Responder) -> None:
        if not self.ready:  # fastapi's Response(status_code=503): no body, no content type
            await out.send(503, b"", None)
            return
        if req.path == "/health_generate" or os.environ.get(
                "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower() in ("true", "1", "yes", "y"):
            await asyncio.sleep(HEALTH_CHECK_POLL_S)
        await out.send(200, b"", None)

    def is_kimi(self) -> bool:
        """Kimi-K2.5 by its local directory's config.json, else (a Hub id) by its name."""
        config = read_config(self.args["model_path"])
        if config is not None:
            return is_kimi_k25(config)
        return bool(KIMI_K25_NAME.search(self.args["model_path"]))

    async def model_info(self, req: HttpRequest, out: Responder) -> None:
        await out.send_json(200, {
            "model_path": self.args["model_path"],
            "tokenizer_path": self.args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": self.args.get("preferred_sampling_params"),
            "weight_version": self.args.get("weight_version"),
            "has_image_understanding": False,
            "has_audio_understanding": False,
            **self.model_identity(),
            **({"embedding": shapes.embedding_plan(self.args)} if self.shapes_0517 else {}),
        })

    def model_identity(self) -> dict[str, Any]:
        """model_type and architectures as SGLang reads them from the model's config.json (a Kimi-K2.5 Hub id:
        its known values; another Hub id: null, the simulator cannot read it)."""
        config = read_config(self.args["model_path"])
        if config is not None and not self.is_kimi():
            return {"model_type": config.get("model_type"), "architectures": config.get("architectures")}
        kimi = self.is_kimi()
        return {"model_type": "kimi_k25" if kimi else None, "architectures": [KIMI_CLASS] if kimi else None}

    async def server_info(self, req: HttpRequest, out: Responder) -> None:
        internal = dict(self.args)
        internal["last_gen_throughput"] = self.engine.last_gen_throughput
        internal["effective_max_running_requests_per_dp"] = self.args.get("max_running_requests")
        if self.engine.avg_spec_accept_length() is not None:
            internal["avg_spec_accept_length"] = self.engine.avg_spec_accept_length()
        # SGLang 0.5.17's additions (0.5.9 has none of them): the scheduler's memory and start-up figures.
        graphs = dict.fromkeys(("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend"), 0.0)
        startup = {"load_weight": self.settings.load_seconds, "kv_cache_allocation": 0.0, "scheduler_e2e": 0.0,
                   "cuda_graph": graphs}
        internal.pop("custom_sigquit_handler", None)  # a callable: 0.5.17 leaves it out of the internal state
        internal.update(grpc_worker_threads=4, max_speculative_num_draft_tokens=self.args.get(
            "speculative_num_draft_tokens"), memory_usage={"weight": 0.0, "kvcache": 0.0, "startup_available": 0.0,
                                                           "token_capacity": SIM_TOKENS, "token_capacity_swa": None,
                                                           "graph": dict(graphs)},
            startup_time=startup)
        await out.send_json(200, {
            **self.args,
            "simulator": True,
            "simulator_settings": self.settings.as_json(),
            "status": "ready" if self.ready else "starting",
            "max_total_num_tokens": SIM_TOKENS,
            "max_req_input_len": (self.args.get("context_length") or 262144) - 6,
            "startup_time": {**startup, "tokenizer_e2e": self.settings.load_seconds},
            "kv_events": None,
            "internal_states": [internal],
            "version": self.version,
        })

    async def prometheus(self, req: HttpRequest, out: Responder) -> None:
        if not self.ready:  # SGLang starts uvicorn only once the model is loaded: no /metrics before
            await out.send(503, b"", "text/plain")
            return
        await out.send(200, self.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")

    async def flush_cache(self, req: HttpRequest, out: Responder) -> None:
        """SGLang's radix-cache flush (the simulator keeps no cache): 400 while requests run, as SGLang."""
        busy = bool(self.engine.running or self.engine.waiting)
        text = ("Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
                "requests, the operation will not be performed.)\n")
        await out.send(400 if busy else 200, text.encode(), "text/plain; charset=utf-8")

    async def models(self, req: HttpRequest, out: Responder) -> None:
        name = self.args["served_model_name"]
        await out.send_json(200, {"object": "list", "data": [{
            "id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang",
            "root": name, "parent": None, "max_model_len": self.args.get("context_length") or 262144,
        }]})

    def _load_counts(self) -> tuple[int, int]:
        """(running, waiting) as SGLang's scheduler counts them: admitted requests, queue."""
        waiting = len(self.engine.waiting)
        return self.engine.admitted, waiting

    async def loads(self, req: HttpRequest, out: Responder) -> None:
        """/v1/loads of SGLang 0.5.9 (entrypoints/v1_loads.py): one DP rank, JSON format only.

        The counts are the scheduler's (engine.live_load: a request in its prefill is not running yet but
        holds KV cache, num_used_tokens; one still being tokenized is nowhere): asked at each request
        playing 0.5.9, its last published snapshot (engine.published) playing 0.5.17 or later."""
        counts = self.engine.published if self.shapes_0517 else self.engine.live_load()
        running, waiting, used = counts["running"], counts["waiting"], counts["used"]
        cap = self.engine.max_running or 0
        load = {"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": waiting,
                "num_used_tokens": used, "max_total_num_tokens": 0, "token_usage": 0.0,
                "gen_throughput": self.engine.last_gen_throughput, "cache_hit_rate": 0.0,
                "utilization": round(running / cap, 4) if cap else 0.0, "max_running_requests": cap,
                "num_total_reqs": running + waiting}
        # SGLang 0.5.17's additions per rank (its load snapshot); num_total_reqs and the aggregate below
        # are 0.5.9's only (shapes.py).
        accept = self.engine.avg_spec_accept_length()
        load.update({
            "timestamp": counts["timestamp"], "num_waiting_uncached_tokens": 0,
            "num_total_tokens": used + counts["queued_tokens"], "num_active_tokens": used + counts["queued_tokens"],
            "total_prefill_uncached_tokens": 0, "total_prefill_busy_us": 0, "decode_moments": [0.0] * 6,
            "memory": {"weight_gb": 0.0, "kv_cache_gb": 0.0, "graph_gb": 0.0, "token_capacity": SIM_TOKENS},
            "speculative": {"accept_length": accept or 0.0, "accept_rate": (accept or 0.0) / max(1, self.engine.max_k)},
            "disaggregation": {"mode": "null", "prefill_bootstrap_queue_reqs": 0, "prefill_inflight_queue_reqs": 0,
                               "decode_prealloc_queue_reqs": 0, "decode_transfer_queue_reqs": 0,
                               "decode_retracted_queue_reqs": 0, "kv_transfer_speed_gb_s": 0.0,
                               "kv_transfer_latency_ms": 0.0},
            "queues": {"waiting": waiting, "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0}})
        answer = {
            "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
            "version": self.version, "accelerator": "simulated (sglang_sim)", "num_accelerators": 1,
            "dp_rank_count": 1, "loads": [load], "simulator": True,
            "aggregate": {"total_running_reqs": running, "total_waiting_reqs": waiting,
                          "total_reqs": running + waiting, "avg_token_usage": 0.0,
                          "avg_throughput": round(self.engine.last_gen_throughput, 2),
                          "avg_utilization": load["utilization"]},
        }
        if self.shapes_0517:
            for key in shapes.LOAD_0509_ONLY:
                del load[key]
            for key in shapes.LOADS_0509_ONLY:
                del answer[key]
        await out.send_json(200, answer)

    async def get_load(self, req: HttpRequest, out: Responder) -> None:
        """The deprecated /get_load (what sglang-router's /get_loads asks each worker)."""
        running, waiting = self._load_counts()
        await out.send_json(200, [{"dp_rank": 0, "num_reqs": running + waiting, "num_waiting_reqs": waiting,
                                   "num_tokens": 0, "num_pending_tokens": 0, "ts_tic": time.time()}])

    # ---- generation

    def _new_request(self, http: HttpRequest, prompt_tokens: int, max_new_tokens: int) -> GenRequest | int:
        """A request for the engine, or the HTTP status to refuse it with (loading, faults)."""
        if not self.ready:
            return 503
        self.generation_count += 1
        number = self.generation_count
        error_after = self.settings.fault("error_after_requests")
        if error_after is not False and number > error_after:
            return 500
        crash_after = self.settings.fault("crash_after_requests")
        crash_at = max(1, max_new_tokens // 2) if crash_after is not False and number > crash_after else None
        return GenRequest(number, http.received, prompt_tokens, max_new_tokens, self.args.get("weight_version"),
                          self.engine.new_sampler(number), crash_at)

    async def _refuse(self, out: Responder, status: int) -> None:
        if status == 503:
            await out.send_json(503, {"error": {"message": "simulator: the model is still loading"}})
        else:  # what Starlette answers when an endpoint raises
            await out.send(500, b"Internal Server Error", "text/plain; charset=utf-8")

    def _launch(self, req: GenRequest) -> None:
        if self.metrics is not None:
            self.metrics.track(req)
        task = asyncio.ensure_future(self.engine.generate(req))
        self.background.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self.background.discard)

    async def _stream(self, out: Responder, req: GenRequest, sink: Callable[[GenRequest], None],
                      tail: Callable[[], list[bytes]]) -> None:
        """Stream events written by `sink` as tokens appear, then `tail()` and [DONE]."""
        out.start_stream()

        def guarded(r: GenRequest) -> None:
            try:
                sink(r)
            except ClientGone:  # SGLang aborts a request whose client went away
                r.aborted, r.sink = True, None
                if self.metrics is not None:
                    self.metrics.abort()
                r.done.set()

        req.sink = guarded
        self._launch(req)
        await req.done.wait()
        if req.aborted:
            raise ClientGone()
        for payload in tail():
            out.event(payload)
        await out.end_stream()

    def _meta_info(self, req: GenRequest) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": {"type": "length", "length": req.max_new_tokens},
            "prompt_tokens": req.prompt_tokens,
            "weight_version": self.args.get("weight_version"),
            "total_retractions": 0,
            "completion_tokens": req.completion_tokens,
            "cached_tokens": 0,
            "e2e_latency": (req.finished_wall or time.time()) - req.created_wall,
        }
        # SGLang 0.5.17's fields (num_retractions is 0.5.9's total_retractions renamed; both are sent).
        now = time.time()
        meta.update(num_retractions=0, forward_entry_time=req.created_wall,
                    prefill_finished_time=getattr(req, "sim_first_token_wall", req.created_wall), queue_time=0.0,
                    reasoning_tokens=0, cached_tokens_details={"device": 0, "host": 0}, dp_rank=None)
        if req.verify_ct:
            accepted = req.completion_tokens - 1 - req.verify_ct
            drafts = req.verify_ct * (self.engine.max_k - 1)
            meta["spec_accept_rate"] = accepted / drafts if drafts else 0.0
            meta["spec_accept_length"] = req.completion_tokens / req.verify_ct
            meta["spec_accept_token_num"] = accepted  # 0.5.9's names
            meta["spec_draft_token_num"] = drafts
            meta["spec_verify_ct"] = req.verify_ct
            meta["spec_accept_histogram"] = req.histogram
            # 0.5.17's: every verify step's bonus token is not a draft (completion = correct drafts + steps)
            correct = req.completion_tokens - req.verify_ct
            meta.update(spec_num_correct_drafts=correct, spec_num_proposed_drafts=drafts, spec_accepted_drafts=correct,
                        spec_proposed_drafts=drafts, spec_correct_drafts_histogram=req.histogram)
            if self.shapes_0517:  # 0.5.17's accept rate: correct drafts / proposed drafts
                meta["spec_accept_rate"] = correct / drafts if drafts else 0.0
        e2e = (req.finished_wall or now) - req.created_wall
        meta.update(request_received_ts=req.created_wall, api_server_dispatch_finish_ts=req.created_wall,
                    response_sent_to_client_ts=now, request_finished_ts=req.finished_wall or now,
                    decode_throughput=req.completion_tokens / e2e if e2e > 0 else 0.0)
        if self.shapes_0517:
            for key in shapes.META_0509_ONLY:
                meta.pop(key, None)
        return meta

    def _native_payload(self, req: GenRequest, ids_from: int = 0, first: bool = False) -> bytes:
        """/generate's JSON: cumulative text, output_ids, meta_info (spec metrics once finished)."""
        # The text is ASCII words from VOCAB: no JSON escaping needed, so it is spliced in.
        ids = req.ids_csv if ids_from == 0 else ",".join(map(str, req.ids[ids_from:]))
        if req.finished:
            meta = dumps(self._meta_info(req))
        else:
            tail = getattr(req, "sim_meta_tail", None)
            if tail is None:  # rendered once, at the first token (SGLang 0.5.17's fields of a running request)
                req.sim_first_token_wall = time.time()
                tail = req.sim_meta_tail = (
                    b',"num_retractions":0,"forward_entry_time":%r,"prefill_finished_time":%r,"queue_time":0.0,'
                    b'"reasoning_tokens":0,"cached_tokens_details":{"device":0,"host":0},"dp_rank":null'
                    % (req.created_wall, req.sim_first_token_wall))
            sent = b',"response_sent_to_client_ts":%r' % time.time() if first else b""  # 0.5.17: the first event only
            head = req.meta_head.replace(b'"total_retractions":0,', b"") if self.shapes_0517 else req.meta_head
            meta = head + b"%d" % req.completion_tokens + b',"cached_tokens":0' + tail + sent + b"}"
        return b'{"text":"' + req.text.encode() + b'","output_ids":[' + ids.encode() + b'],"meta_info":' + meta + b"}"

    async def generate(self, http: HttpRequest, out: Responder) -> None:
        try:
            body = http.json()
            params = body.get("sampling_params") or {}
            max_new = int(params.get("max_new_tokens", 128))
            if isinstance(body.get("input_ids"), list) and body["input_ids"] and isinstance(body["input_ids"][0], int):
                prompt_tokens = len(body["input_ids"])
            elif isinstance(body.get("text"), str):
                prompt_tokens = max(1, len(body["text"].split()))
            else:
                raise ValueError("Either text, input_ids or input_embeds should be provided "
                                 "(the simulator takes one prompt per request)")
        except (ValueError, TypeError) as exc:
            await out.send_json(400, {"error": {"message": str(exc)}})
            return
        req = self._new_request(http, prompt_tokens, max_new)
        if isinstance(req, int):
            await self._refuse(out, req)
            return
        if not body.get("stream"):
            self._launch(req)
            await req.done.wait()
            payload = self._native_payload(req)
            if body.get("return_logprob"):  # SGLang's logprobs in meta_info (tokens.py: teacher forcing)
                payload = self._with_logprobs(payload, body)
            await out.send(200, payload)
            return
        sent_ids = 0

        def sink(r: GenRequest) -> None:
            nonlocal sent_ids
            # --stream-output makes output_ids incremental; text stays cumulative (tokenizer_manager)
            out.event(self._native_payload(r, sent_ids if self.args.get("stream_output") else 0, first=not sent_ids))
            sent_ids = len(r.ids)

        await self._stream(out, req, sink, lambda: [])

    def _with_logprobs(self, payload: bytes, body: dict[str, Any]) -> bytes:
        """A /generate answer with SGLang's input and output logprobs (return_logprob): input ids from
        logprob_start_len on (-1: the last prompt token, SGLang 0.5.9's default), scored by the simulated
        model's greedy reply to the prompt they hold (tokens.py)."""
        data = json.loads(payload)
        ids = body["input_ids"] if isinstance(body.get("input_ids"), list) else []
        top_n = int(body.get("top_logprobs_num") or 0)
        start = -1 if body.get("logprob_start_len") is None else int(body["logprob_start_len"])
        start = len(ids) - 1 if start < 0 else min(start, len(ids))
        read = tokens.read_prompt(ids)
        greedy, end = None, None
        if read is not None:
            chat, end = read
            limit = len(ids) - end + 1
            greedy = (toolcalls.call_ids(chat, self.settings.output_corruption) if toolcalls.wants_tool(chat)
                      else answers.output_ids(chat, self.settings.output_corruption, limit))
        data["meta_info"].update(tokens.input_logprobs(ids, start, top_n, greedy, end) if ids else
                                 {"input_token_logprobs": [], **({"input_top_logprobs": []} if top_n else {})})
        data["meta_info"].update(tokens.output_logprobs(data.get("output_ids") or [], top_n))
        return dumps(data)

    def _usage(self, req: GenRequest, drop_none: bool = False) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": req.prompt_tokens,
            "total_tokens": req.prompt_tokens + req.completion_tokens,
            "completion_tokens": req.completion_tokens,
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
        }
        if drop_none:
            del usage["prompt_tokens_details"]
        return usage

    async def _openai(self, http: HttpRequest, out: Responder, chat: bool) -> None:
        """/v1/chat/completions and /v1/completions, shaped like serving_chat/serving_completions."""
        prepared = None
        try:
            body = http.json()
            if chat:
                messages = body.get("messages")
                if not isinstance(messages, list) or not messages:
                    raise ValueError("messages must be a non-empty list")
                words = sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
                max_new = body.get("max_completion_tokens") or body.get("max_tokens") or CHAT_DEFAULT_MAX_TOKENS
                corruption, tool_format = self.settings.output_corruption, self.settings.tool_format
                if toolcalls.wants_tool(body):
                    prepared = toolcalls.reply(body, self.args, corruption, tool_format)
                elif answers.wants_answer(body):  # greedy: the simulated model answers, up to max_tokens
                    prepared = answers.reply(body, self.args, corruption, int(max_new))
                    max_new = min(int(max_new), max(1, len(prepared[2])))
            else:
                prompt = body.get("prompt")
                if not isinstance(prompt, str):
                    raise ValueError("the simulator takes one string prompt per request")
                words = len(prompt.split())
                max_new = body.get("max_tokens", 16)
            max_new = int(max_new)
        except (ValueError, TypeError) as exc:
            await out.send_json(400, {"object": "error", "message": str(exc), "type": "BadRequestError",
                                      "param": None, "code": 400})
            return
        req = self._new_request(http, max(1, words), max_new)
        if isinstance(req, int):
            await self._refuse(out, req)
            return
        model = body.get("model", "default")
        created = int(time.time())
        if not body.get("stream"):
            self._launch(req)
            await req.done.wait()
            finish = "length"
            if chat and prepared:  # a tool call (toolcalls.py) or a greedy answer (answers.py)
                choice: dict[str, Any] = {"index": 0, "message": prepared[0]}
                finish = prepared[1]
            elif chat:
                choice = {"index": 0, "message": {
                    "role": "assistant", "content": req.text or None, "reasoning_content": None, "tool_calls": None}}
            else:
                choice = {"index": 0, "text": req.text}
            choice.update({"logprobs": None, "finish_reason": finish, "matched_stop": None})
            if chat:  # SGLang 0.5.17's token ids of a chat reply (tokens.py), when asked
                if body.get("return_prompt_token_ids") or body.get("return_token_ids"):
                    choice["prompt_token_ids"] = tokens.prompt_ids(body)
                if body.get("return_token_ids"):
                    choice["token_ids"] = prepared[2] if prepared else list(req.ids)
            await out.send_json(200, {"id": req.rid, "object": "chat.completion" if chat else "text_completion",
                                      "created": created, "model": model, "choices": [choice],
                                      "usage": self._usage(req),
                                      "metadata": {"weight_version": self.args.get("weight_version")}})
            return
        options = body.get("stream_options") or {}
        chunk_kind = "chat.completion.chunk" if chat else "text_completion"

        # 0.5.17 writes the role, reasoning, content (tools aside) and finish chunks with sse_utils'
        # build_sse_content (None left out); its tool-call chunks, like 0.5.9's every chunk, are pydantic dumps.
        tool_path = toolcalls.wants_tool(body) and bool(self.args.get("tool_call_parser"))

        def chunk(choice: dict[str, Any] | None, usage: dict[str, Any] | None, compact: bool = False) -> bytes:
            answer = {"id": req.rid, "object": chunk_kind, "created": created, "model": model,
                      "choices": [choice] if choice else [], "usage": usage}
            if compact and usage is None:
                del answer["usage"]
            return dumps(answer)

        def chat_choice(finish: str | None = None, compact: bool = False, **delta: Any) -> dict[str, Any]:
            full = (shapes.compact_delta(**delta) if compact else
                    {"role": None, "content": None, "reasoning_content": None, "tool_calls": None, **delta})
            return {"index": 0, "delta": full, "logprobs": None, "finish_reason": finish, "matched_stop": None}

        compact = self.shapes_0517

        sent = 0

        def sink(r: GenRequest) -> None:
            nonlocal sent
            usage = self._usage(r) if options.get("continuous_usage_stats") else None
            piece, first, sent = r.text[sent:], sent == 0, len(r.text)
            if not chat:
                out.event(chunk({"index": 0, "text": piece, "logprobs": None,
                                 "finish_reason": "length" if r.finished else None, "matched_stop": None}, usage))
                return
            if first:  # serving_chat sends the role first, then the first content
                out.event(chunk(chat_choice(role="assistant", content="", compact=compact), None, compact))
            if piece and not prepared:
                out.event(chunk(chat_choice(content=piece, compact=compact), usage, compact))

        def tail() -> list[bytes]:
            events = []
            if chat and prepared:  # the prepared reply's parts as deltas, then its finish_reason
                message, finish = prepared[:2]
                for part in ("reasoning_content", "content", "tool_calls"):
                    if message[part]:
                        small = compact and part != "tool_calls" and not (part == "content" and tool_path)
                        events.append(chunk(chat_choice(compact=small, **{part: message[part]}), None, small))
                events.append(chunk(chat_choice(finish=finish, compact=compact), None, compact))
            elif chat:
                events.append(chunk(chat_choice(finish="length", compact=compact), None, compact))
            if options.get("include_usage"):
                # serving_completions dumps this chunk with exclude_none=True, serving_chat does not
                events.append(chunk(None, self._usage(req)) if chat else dumps(
                    {"id": req.rid, "object": chunk_kind, "created": created, "model": model, "choices": [],
                     "usage": self._usage(req, drop_none=True)}))
            return events

        await self._stream(out, req, sink, tail)

    async def completions(self, http: HttpRequest, out: Responder) -> None:
        await self._openai(http, out, chat=False)

    async def chat_completions(self, http: HttpRequest, out: Responder) -> None:
        await self._openai(http, out, chat=True)

    # ---- life cycle

    async def start_up(self) -> None:
        """Simulated weight loading; then the Kimi check (crash) or readiness."""
        # The lines of a start in SGLang 0.5.17's own words (a real one: docs/validation/restart-h200/starts/), so
        # that the role's phase reader (sglang_start_phases.py) reads the simulator's starts as it reads SGLang's:
        # the weights of the target and then the draft, the KV cache, the CUDA graphs' capture lines (none is captured
        # here: 0 s), HTTP up, warm-up. The memory figures are made up (the simulator holds no GPU memory).
        began = time.monotonic()
        log.info("Load weight begin. avail mem=94.50 GB (simulated: SGLANG_SIM_LOAD_SECONDS=%s)",
                 self.settings.load_seconds)
        await asyncio.sleep(self.settings.load_seconds)
        crash = self.weights_missing() or self.kimi_crash() or self.out_of_memory()
        if crash is not None:
            print("[sglang_sim] simulated SGLang start-up failure (this is the simulator, not SGLang)",
                  file=sys.stderr)
            ts = time.strftime("%Y-%m-%d %H:%M:%S")
            print(f"[{ts}] {crash}", file=sys.stderr, flush=True)
            log.error("Received sigquit from a child process. It usually means the child failed.")
            sys.stdout.flush()
            os._exit(1)
        identity = self.model_identity()
        kind = (identity.get("architectures") or ["LlamaForCausalLM"])[0]
        log.info("Load weight end. elapsed=%.2f s, type=%s, avail mem=30.50 GB, mem usage=64.00 GB. (simulated)",
                 time.monotonic() - began, kind)
        if self.args.get("speculative_algorithm") in ("EAGLE3", "EAGLE"):
            log.info("Load weight begin. avail mem=30.50 GB (simulated)")
            log.info("Load weight end. elapsed=0.01 s, type=LlamaForCausalLMEagle3, avail mem=29.50 GB, "
                     "mem usage=1.00 GB. (simulated)")
        log.info("KV Cache is allocated. dtype: torch.bfloat16, #tokens: %d, K size: 10.00 GB, V size: 10.00 GB "
                 "(simulated)", SIM_TOKENS)
        log.info("Memory pool end. avail mem=9.50 GB (simulated)")
        if not self.args.get("disable_cuda_graph"):  # none is captured: the lines SGLang prints, at no cost
            spec = self.args.get("speculative_algorithm") in ("EAGLE3", "EAGLE")
            for graph in (["target verify", "draft decode", "draft extend"] if spec else ["target decode"]):
                log.info("Capture %s CUDA graph begin. backend=full, bs=[1, 2, 4, 8], avail mem=9.50 GB (simulated)",
                         graph)
                log.info("Capture %s CUDA graph end. elapsed=0.00 s, mem usage=0.00 GB, avail mem=9.50 GB. "
                         "(simulated)", graph)
        if self.settings.fault("never_ready"):
            log.info("[sim] SGLANG_SIM_FAULT=never_ready: staying in the starting state")
            return
        log.info("INFO:     Uvicorn running on http://%s:%s (Press CTRL+C to quit) (simulated: listening since the "
                 "start, where SGLang binds only now)", self.args["host"], self.args["port"])
        self.ready = True
        log.info(READY_TEXT)

    def weights_missing(self) -> str | None:
        """The load failure of a model directory that lacks a shard its index names."""
        for flag in ("model_path", "speculative_draft_model_path"):
            path = self.args.get(flag)
            if not path:
                continue
            missing = missing_weights(path)
            if missing:
                return (f"FileNotFoundError: [Errno 2] No such file or directory: '{Path(path) / missing[0]}' "
                        f"({len(missing)} weight file(s) of {path} missing: {', '.join(missing[:5])})")
        return None

    def out_of_memory(self) -> str | None:
        """The speculative model's memory limit: SGLang's CUDA out-of-memory error at start-up."""
        model = self.engine.spec_model
        if model is None:
            return None
        _steps, topk, draft = self.engine.spec_shape
        try:
            model.check_memory(topk, draft)
        except SpecOutOfMemory as exc:
            return ("torch.OutOfMemoryError: CUDA out of memory while capturing the draft and verify CUDA graphs "
                    f"(simulated: {exc})")
        return None

    def kimi_crash(self) -> str | None:
        sglang_dir = self.settings.sglang_dir
        if sglang_dir is None or self.args.get("speculative_algorithm") != "EAGLE3":
            return None
        if not (self.is_kimi() or self.settings.fault("crash_on_start_missing_eagle3")):
            return None
        kimi_file = sglang_dir / "srt" / "models" / "kimi_k25.py"
        if not kimi_file.is_file():
            raise SimConfigError(f"{kimi_file} is missing: this SGLang cannot serve Kimi-K2.5 at all")
        method = missing_target_method(kimi_file)
        return kimi_crash_traceback(sglang_dir, method) if method else None


async def serve(settings: SimSettings, server_args: dict[str, Any], version: str) -> int:
    sim = SimServer(settings, server_args, version)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        server = await asyncio.start_server(sim.handle_connection, server_args["host"], server_args["port"],
                                            limit=1 << 20, reuse_address=True)
    except OSError as exc:
        log.error("[sim] cannot bind %s:%s: %s", server_args["host"], server_args["port"], exc)
        return 1
    log.info("[sim] listening on http://%s:%s while loading (SGLang itself binds once loaded: Uvicorn's line)",
             server_args["host"], server_args["port"])
    tasks = [asyncio.ensure_future(sim.engine.run_clock()), asyncio.ensure_future(sim.start_up())]
    waiter = asyncio.ensure_future(stop.wait())
    pending: set[asyncio.Future[Any]] = {waiter, *tasks}
    while not waiter.done():
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not waiter and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    log.info("INFO:     Shutting down (simulator received a stop signal)")
    server.close()
    for task in tasks:
        task.cancel()
    return 0
