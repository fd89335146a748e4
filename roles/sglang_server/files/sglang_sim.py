#!/usr/bin/env python3
"""SGLang server SIMULATOR -- a TEST DOUBLE, not SGLang. No GPU, no model, no real tokens.

Why it exists: the Ansible project that turns a GPU server into an SGLang service needs
something to start, health-check, benchmark and break on machines without a GPU (CI,
molecule containers, a laptop).  This program stands in for `python -m
sglang.launch_server` of SGLang 0.5.9: it takes exactly SGLang's command-line flags (from
sglang_sim_flags.json, generated from SGLang's own server_args.py; unknown flags are an
argparse error, exit 2) and speaks the HTTP API shapes of SGLang 0.5.9, but every answer
is made up.  Everything it says about itself is labelled: the --help text, the first log
line and `"simulator": true` in /get_server_info.  Standard library only (python3 >= 3.11).

Endpoints: GET /health, /health_generate (503 until ready, then 200 after ~1 s, as SGLang's
health check runs a 1-token generation and polls once a second), /get_server_info and
/server_info (server args, internal_states[0].avg_spec_accept_length when speculative,
updated at each "Decode batch" log line, every --decode-log-interval steps, as in SGLang;
version), /get_model_info and /model_info, /v1/models, /v1/loads and /get_load (running and
queued requests, for draining a host before a restart); POST /generate (native; JSON or SSE
with "stream": true), /v1/completions, /v1/chat/completions (JSON or SSE; usage in the
response, per chunk with stream_options.continuous_usage_stats, and as a final chunk with
stream_options.include_usage).  With --api-key every request needs `Authorization: Bearer
KEY` (401 {"error": "Unauthorized"}) except OPTIONS and paths starting with /health or
/metrics, the exemptions of sglang/srt/utils/auth.py.

Timing model (the "truth" the benchmark tests measure against):
  step(n)  = SLOWDOWN_FACTOR / DECODE_TOK_S * (1 + BATCH_SLOWDOWN * (n - 1))
             n = requests in the decode batch when the step starts.  One shared step clock
             advances every running request by one step per step(n); steps are scheduled
             on absolute deadlines, so lateness of one step is not carried into the next.
  prefill  = the first token arrives TTFT_MS * SLOWDOWN_FACTOR / 1000 s after the request
             was read (or admitted, if it had to queue); the request then joins the decode
             batch at the next step boundary.
  tokens   = 1 per step without speculation.  With --speculative-algorithm, k tokens per
             verify step, 1 <= k <= speculative_num_draft_tokens, drawn from a chain
             acceptance model (each draft token accepted with probability p, p solved so
             that E[k] = ACCEPT_LENGTH) and steered so that a request's running total stays
             within 1 token of steps * ACCEPT_LENGTH (seeded per request by SEED).
  => single-request decode rate = DECODE_TOK_S * ACCEPT_LENGTH / SLOWDOWN_FACTOR tokens/s,
     and a request of N tokens alone takes TTFT + (N - 1) / ACCEPT_LENGTH * step(1).
  Admission: at most max_running_requests run (prefill + decode); the rest queue.  As in
  SGLang 0.5.9, EAGLE/EAGLE3/STANDALONE/NGRAM default it to 48; otherwise unlimited here.
  Outputs always run to max_new_tokens (finish_reason "length"); there is no EOS.

Settings come from the environment only, because the command line must be SGLang's:
  SGLANG_SIM_LOAD_SECONDS      3      seconds from start to ready (health 503 meanwhile)
  SGLANG_SIM_DECODE_TOK_S      50     decode steps/s of one request (its tok/s without speculation)
  SGLANG_SIM_ACCEPT_LENGTH     2.5    mean tokens per verify step when speculative
  SGLANG_SIM_TTFT_MS           150    prefill time (time to first token) per request
  SGLANG_SIM_BATCH_SLOWDOWN    0.01   step-time growth per extra running request
  SGLANG_SIM_SLOWDOWN_FACTOR   1.0    multiplies every generation time (regression gates)
  SGLANG_SIM_SEED              0      seed of the per-request acceptance draws
  SGLANG_SIM_SGLANG_DIR        unset  an SGLang package dir (holding srt/) to inspect
  SGLANG_SIM_FAULT             unset  comma-separated faults, below
Faults:
  Kimi-K2.5 + EAGLE-3 check (default on): when SGLANG_SIM_SGLANG_DIR is set, the algorithm
    is EAGLE3 and --model-path names Kimi-K2.5, the simulator parses
    DIR/srt/models/kimi_k25.py with `ast` and, if KimiK25ForConditionalGeneration lacks a
    method SGLang 0.5.9 calls on the target model (set_eagle3_layers_to_capture from
    model_runner.py, then get_embed_and_head from eagle_worker.py), prints SGLang's
    traceback ending in `AttributeError: 'KimiK25ForConditionalGeneration' object has no
    attribute '...'` to stderr after LOAD_SECONDS and exits 1, as the real server does.
  crash_on_start_missing_eagle3  run that check whatever the model path says.
  crash_after_requests:N  N generation requests are served; the process dies (os._exit(1))
                          half-way through request N+1, cutting its stream.
  error_after_requests:N  generation requests after the first N get HTTP 500.
  never_ready             /health and /health_generate answer 503 forever.
Generation requests are those to /generate, /v1/completions and /v1/chat/completions.

Deliberate differences from SGLang: the port opens at once (SGLang listens only after the
weights are loaded); generation endpoints answer 503 until ready; logs go to stdout;
prompt_tokens is a whitespace word count; one prompt per request (no batches, n=1);
--config is refused (exit 2) and /metrics is absent; of SGLang's argument post-processing only
the speculative defaults (NEXTN->EAGLE, auto 3/1/4, draft tokens = steps + 1 for topk 1,
max_running_requests 48) and served_model_name/tokenizer_path defaults are applied.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import datetime
import gc
import json
import logging
import math
import os
import random
import re
import signal
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

FLAGS_FILE = Path(__file__).resolve().with_name("sglang_sim_flags.json")
BANNER = "SGLang SIMULATOR (test double: not SGLang, no GPU, no model; files/sglang_sim.py)"
READY_TEXT = "The server is fired up and ready to roll!"
KIMI_K25_NAME = re.compile(r"kimi[-_.]?k2[-_.]?5", re.IGNORECASE)
KIMI_CLASS = "KimiK25ForConditionalGeneration"
# Methods SGLang 0.5.9 calls on the EAGLE-3 target model during start-up, in call order,
# with the file and source text of the call site (used to build a faithful traceback).
TARGET_MODEL_CALLS = (
    ("set_eagle3_layers_to_capture", "srt/model_executor/model_runner.py", "initialize",
     "self.model.set_eagle3_layers_to_capture("),
    ("get_embed_and_head", "srt/speculative/eagle_worker.py", "__init__",
     "self.target_worker.model_runner.model.get_embed_and_head()"),
)
SPEC_ALGORITHMS_WITH_DRAFT = ("EAGLE", "EAGLE3", "STANDALONE")
HEALTH_CHECK_POLL_S = 1.0  # SGLang's health_generate sleeps 1 s before its first check
CHAT_DEFAULT_MAX_TOKENS = 128  # SGLang would generate to EOS/context; the sim has no EOS
VOCAB = (
    "the model answers each question with care and the server streams tokens back to the "
    "client while the draft proposes several tokens that the target verifies in one step "
    "so that decoding runs faster when most proposals are accepted by the large model"
).split()

log = logging.getLogger("sglang_sim")


class SimConfigError(Exception):
    """A problem with the simulator's own settings (environment), not with SGLang flags."""


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class SimSettings:
    """The SGLANG_SIM_* environment variables, validated."""

    load_seconds: float = 3.0
    decode_tok_s: float = 50.0
    accept_length: float = 2.5
    ttft_ms: float = 150.0
    batch_slowdown: float = 0.01
    slowdown_factor: float = 1.0
    seed: int = 0
    sglang_dir: Path | None = None
    faults: tuple[tuple[str, int | None], ...] = ()

    FAULTS_WITH_COUNT = ("crash_after_requests", "error_after_requests")
    FAULTS_PLAIN = ("crash_on_start_missing_eagle3", "never_ready")

    @classmethod
    def from_env(cls, env: dict[str, str]) -> "SimSettings":
        def number(name: str, default: float, minimum: float, strict: bool = False) -> float:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                raise SimConfigError(f"{name}={raw!r} is not a number") from None
            if not math.isfinite(value) or value < minimum or (strict and value == minimum):
                raise SimConfigError(f"{name}={raw!r} must be {'>' if strict else '>='} {minimum}")
            return value

        faults: list[tuple[str, int | None]] = []
        for item in filter(None, (p.strip() for p in env.get("SGLANG_SIM_FAULT", "").split(","))):
            name, _, count = item.partition(":")
            if name in cls.FAULTS_WITH_COUNT and count.isdigit():
                faults.append((name, int(count)))
            elif name in cls.FAULTS_PLAIN and not count:
                faults.append((name, None))
            else:
                known = [f"{f}:N" for f in cls.FAULTS_WITH_COUNT] + list(cls.FAULTS_PLAIN)
                raise SimConfigError(f"SGLANG_SIM_FAULT item {item!r} unknown; known: {', '.join(known)}")
        sglang_dir = env.get("SGLANG_SIM_SGLANG_DIR") or None
        if sglang_dir is not None and not (Path(sglang_dir) / "srt").is_dir():
            raise SimConfigError(f"SGLANG_SIM_SGLANG_DIR={sglang_dir!r} holds no srt/ directory")
        seed = env.get("SGLANG_SIM_SEED", "0") or "0"
        if not re.fullmatch(r"-?\d+", seed):
            raise SimConfigError(f"SGLANG_SIM_SEED={seed!r} is not an integer")
        return cls(
            load_seconds=number("SGLANG_SIM_LOAD_SECONDS", cls.load_seconds, 0.0),
            decode_tok_s=number("SGLANG_SIM_DECODE_TOK_S", cls.decode_tok_s, 0.0, strict=True),
            accept_length=number("SGLANG_SIM_ACCEPT_LENGTH", cls.accept_length, 1.0),
            ttft_ms=number("SGLANG_SIM_TTFT_MS", cls.ttft_ms, 0.0),
            batch_slowdown=number("SGLANG_SIM_BATCH_SLOWDOWN", cls.batch_slowdown, 0.0),
            slowdown_factor=number("SGLANG_SIM_SLOWDOWN_FACTOR", cls.slowdown_factor, 0.0, strict=True),
            seed=int(seed),
            sglang_dir=Path(sglang_dir) if sglang_dir else None,
            faults=tuple(faults),
        )

    def fault(self, name: str) -> int | bool:
        """The fault's count (or True for plain faults); False when not configured."""
        for fault_name, count in self.faults:
            if fault_name == name:
                return True if count is None else count
        return False

    def as_json(self) -> dict[str, Any]:
        return {
            "load_seconds": self.load_seconds,
            "decode_tok_s": self.decode_tok_s,
            "accept_length": self.accept_length,
            "ttft_ms": self.ttft_ms,
            "batch_slowdown": self.batch_slowdown,
            "slowdown_factor": self.slowdown_factor,
            "seed": self.seed,
            "sglang_dir": str(self.sglang_dir) if self.sglang_dir else None,
            "faults": [f"{n}:{c}" if c is not None else n for n, c in self.faults],
        }


# --------------------------------------------------------------------------- flags


def _nullable_str(value: str) -> str | None:
    return None if not value or value == "None" else value


TYPE_FUNCS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "json": json.loads,
    "json_list": json.loads,
    "nullable_str": _nullable_str,
}


class _DeprecatedAction(argparse.Action):
    """SGLang's DeprecatedAction: takes no value, only warns."""

    def __init__(self, option_strings: list[str], dest: str, nargs: int = 0, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        log.warning("The command line argument '%s' is deprecated and will be removed in future versions.",
                    option_string)


class _LoRAPathAction(argparse.Action):
    """SGLang's LoRAPathAction: each value is a path or a JSON object with lora_name/lora_path."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        paths: list[Any] = []
        for value in values or []:
            value = value.strip()
            if value.startswith("{") and value.endswith("}"):
                obj = json.loads(value)
                if "lora_path" not in obj or "lora_name" not in obj:
                    parser.error(f"{value!r} looks like JSON but lacks 'lora_name' and 'lora_path'")
                paths.append(obj)
            else:
                paths.append(value)
        setattr(namespace, self.dest, paths)


def load_flag_table(path: Path = FLAGS_FILE) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SimConfigError(f"flag table {path} is missing; it ships next to sglang_sim.py") from None


def build_parser(table: dict[str, Any]) -> argparse.ArgumentParser:
    """An argparse parser equivalent to SGLang's `ServerArgs.add_cli_args` for the table's version."""
    parser = argparse.ArgumentParser(
        prog="sglang_sim.py",
        description=(
            f"{BANNER}. Accepts the command-line flags of sglang.launch_server "
            f"{table['sglang_version']} and serves made-up answers in SGLang's HTTP API shapes. "
            "Simulation settings come from SGLANG_SIM_* environment variables (see the module docstring)."
        ),
    )
    actions = {"deprecated": _DeprecatedAction, "lora_paths": _LoRAPathAction, "store_true": "store_true"}
    for flag in table["flags"]:
        kwargs: dict[str, Any] = {"dest": flag["dest"]}
        if flag["kind"] != "store":
            kwargs["action"] = actions[flag["kind"]]
        if "type" in flag:
            kwargs["type"] = TYPE_FUNCS[flag["type"]]
        for key in ("nargs", "const", "choices", "required", "default"):
            if key in flag:
                kwargs[key] = flag[key]
        parser.add_argument(*flag["options"], **kwargs)
    return parser


def parse_server_args(table: dict[str, Any], argv: list[str] | None) -> dict[str, Any]:
    """Parse like prepare_server_args(); return the ServerArgs fields, as /get_server_info shows them."""
    namespace = vars(build_parser(table).parse_args(argv))
    if namespace.get("config"):  # prepare_server_args() merges the YAML before parsing
        raise SimConfigError("--config YAML files are not simulated; pass the options as flags")
    for cli_dest, field in table["cli_renames"].items():  # ServerArgs.from_cli_args
        namespace[field] = namespace[cli_dest]
    return {field: namespace[field] for field in table["server_args_fields"]}


def finalize_server_args(args: dict[str, Any]) -> list[str]:
    """Apply the subset of SGLang 0.5.9's argument post-processing the simulator models.

    Mutates `args` and returns the warnings SGLang would log, in its words.
    """
    warnings: list[str] = []
    if args.get("served_model_name") is None:
        args["served_model_name"] = args["model_path"]
    if args.get("tokenizer_path") is None:
        args["tokenizer_path"] = args["model_path"]
    algo = args.get("speculative_algorithm")
    if algo == "NEXTN":
        algo = args["speculative_algorithm"] = "EAGLE"
    if algo in SPEC_ALGORITHMS_WITH_DRAFT or algo == "NGRAM":
        if args.get("max_running_requests") is None:
            args["max_running_requests"] = 48
            warnings.append("Max running requests is reset to 48 for speculative decoding. You can override "
                            "this by explicitly setting --max-running-requests.")
    if algo in SPEC_ALGORITHMS_WITH_DRAFT:
        if args.get("speculative_num_steps") is None:
            args["speculative_num_steps"], args["speculative_eagle_topk"], args["speculative_num_draft_tokens"] = 3, 1, 4
        if args.get("speculative_eagle_topk") is None:
            args["speculative_eagle_topk"] = 1
        if args["speculative_eagle_topk"] == 1 and args.get("speculative_num_draft_tokens") != args["speculative_num_steps"] + 1:
            warnings.append("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                            "speculative_eagle_topk == 1")
            args["speculative_num_draft_tokens"] = args["speculative_num_steps"] + 1
    elif algo == "NGRAM" and args.get("speculative_num_draft_tokens") is None:
        args["speculative_num_draft_tokens"] = args["speculative_ngram_max_match_window_size"]
    return warnings


# --------------------------------------------------------------------------- Kimi check


def missing_target_method(kimi_file: Path) -> str | None:
    """The first method SGLang calls on the EAGLE-3 target that KimiK25ForConditionalGeneration lacks.

    Only methods defined in the class body count (what the upstream fix and this project's
    patch add); a class missing from the file counts as lacking every method.
    """
    tree = ast.parse(kimi_file.read_text(encoding="utf-8"), filename=str(kimi_file))
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == KIMI_CLASS:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    defined.add(item.name)
                elif isinstance(item, ast.Assign):
                    defined.update(t.id for t in item.targets if isinstance(t, ast.Name))
    for method, *_ in TARGET_MODEL_CALLS:
        if method not in defined:
            return method
    return None


def kimi_crash_traceback(sglang_dir: Path, method: str) -> str:
    """SGLang's start-up traceback for a missing target-model method, with real paths/lines."""
    _, rel, func, call = next(c for c in TARGET_MODEL_CALLS if c[0] == method)
    frames = []
    source = sglang_dir / rel
    if source.is_file():
        for lineno, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
            if call in line:
                frames.append(f'  File "{source}", line {lineno}, in {func}\n    {line.strip()}')
                break
    frames.append('  File "torch/nn/modules/module.py", line 1964, in __getattr__\n    raise AttributeError(')
    return (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        + "\n".join(frames)
        + f"\nAttributeError: '{KIMI_CLASS}' object has no attribute '{method}'"
    )


def read_sglang_version(sglang_dir: Path | None, fallback: str) -> str:
    """`__version__` from DIR/_version.py (written by setuptools-scm into wheels and sdists)."""
    if sglang_dir is None or not (sglang_dir / "_version.py").is_file():
        return fallback
    for node in ast.parse((sglang_dir / "_version.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            if any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
                return str(node.value.value)
    return fallback


# --------------------------------------------------------------------------- engine


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
    with probability p, at most max_k) whose mean is `mean`, then clamps k so that the
    request's total after s steps stays within 1 token of s * mean.  The clamp is what makes
    a single request's rate match the configured truth within a fraction of a per cent
    instead of the few per cent a free random walk would wander.
    """

    BOUND = 1.0

    def __init__(self, mean: float, max_k: int, p: float, rng: random.Random) -> None:
        self.mean, self.max_k, self.p, self.rng = mean, max_k, p, rng
        self.error = 0.0

    def next(self) -> int:
        k = 1
        while k < self.max_k and self.rng.random() < self.p:
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
        self.accept_p = chain_acceptance(settings.accept_length, self.max_k) if self.spec else 0.0
        self.max_running: int | None = server_args.get("max_running_requests")
        self.log_interval = int(server_args.get("decode_log_interval") or 40)
        self.base_step = settings.slowdown_factor / settings.decode_tok_s
        self.ttft = settings.ttft_ms * settings.slowdown_factor / 1000.0
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

    def step_seconds(self, batch: int) -> float:
        return self.base_step * (1.0 + self.settings.batch_slowdown * (batch - 1))

    def new_sampler(self, number: int) -> AcceptSampler | None:
        if not self.spec:
            return None
        return AcceptSampler(self.settings.accept_length, self.max_k, self.accept_p,
                             random.Random(f"{self.settings.seed}:{number}"))

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
        start = loop.time() if await self._admit(req) else req.arrived
        await asyncio.sleep(max(0.0, start + self.ttft - loop.time()))  # prefill from arrival
        log.info("Prefill batch, #new-seq: 1, #new-token: %d, #cached-token: 0, token usage: 0.00, "
                 "#running-req: %d, #queue-req: %d, input throughput (token/s): 0.00, cuda graph: False",
                 req.prompt_tokens, len(self.running), len(self.waiting))
        if req.aborted:
            self._release()
            return
        req.emit(1)
        self._check_crash(req)
        if req.finished:
            self._release()
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


# --------------------------------------------------------------------------- HTTP


REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
           405: "Method Not Allowed", 500: "Internal Server Error", 503: "Service Unavailable"}


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON like orjson / pydantic's model_dump_json."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: str
    received: float  # event-loop time when the request had been read

    def json(self) -> dict[str, Any]:
        obj = json.loads(self.body or b"{}")
        if not isinstance(obj, dict):
            raise ValueError("request body must be a JSON object")
        return obj


class ClientGone(Exception):
    """The client closed the connection while we were answering."""


class Responder:
    """Writes one HTTP/1.1 response (plain or chunked) on a keep-alive connection."""

    def __init__(self, writer: asyncio.StreamWriter, req: HttpRequest, keep_alive: bool) -> None:
        self.writer, self.req, self.keep_alive = writer, req, keep_alive
        self.status = 0

    def _head(self, status: int, content_type: str, extra: str) -> bytes:
        self.status = status
        log.info('INFO:     %s - "%s %s HTTP/1.1" %d %s', self.req.peer, self.req.method, self.req.path,
                 status, REASONS.get(status, ""))
        conn = "keep-alive" if self.keep_alive else "close"
        return (f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nserver: sglang-sim\r\n"
                f"content-type: {content_type}\r\nconnection: {conn}\r\n{extra}\r\n").encode("latin-1")

    async def _write(self, data: bytes) -> None:
        if self.writer.transport.is_closing():
            raise ClientGone()
        self.writer.write(data)
        try:
            await self.writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise ClientGone() from exc

    async def send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        await self._write(self._head(status, content_type, f"content-length: {len(body)}\r\n") + body)

    async def send_json(self, status: int, obj: Any) -> None:
        await self.send(status, dumps(obj))

    def _write_nowait(self, data: bytes) -> None:
        """Queue bytes on the transport at once (it sends right away while the socket has room)."""
        if self.writer.transport.is_closing():
            raise ClientGone()
        self.writer.write(data)

    def start_stream(self) -> None:
        self._write_nowait(self._head(200, "text/event-stream; charset=utf-8", "transfer-encoding: chunked\r\n"))

    def event(self, payload: bytes) -> None:
        """One SSE event as one HTTP chunk, written synchronously from the step clock."""
        data = b"data: " + payload + b"\n\n"
        self._write_nowait(b"%x\r\n%s\r\n" % (len(data), data))

    async def end_stream(self) -> None:
        self.event(b"[DONE]")
        await self._write(b"0\r\n\r\n")


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> HttpRequest | None:
    """Parse one request; None at a clean end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            key, value = line.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    length = int(headers.get("content-length", "0") or 0)
    body = await reader.readexactly(length) if length else b""
    return HttpRequest(method.upper(), target.split("?", 1)[0], headers, body, peer,
                       asyncio.get_running_loop().time())


# --------------------------------------------------------------------------- the server


class SimServer:
    """The simulated SGLang HTTP server: routes, auth, readiness and the response shapes."""

    def __init__(self, settings: SimSettings, server_args: dict[str, Any], version: str) -> None:
        self.settings = settings
        self.args = server_args
        self.version = version
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
        }

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
            await out.send_json(405, {"detail": "Method Not Allowed"})
            return
        await handler(req, out)

    # ---- info endpoints

    async def health(self, req: HttpRequest, out: Responder) -> None:
        if not self.ready:
            await out.send(503, b"", "text/plain")
            return
        if req.path == "/health_generate" or os.environ.get(
                "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower() in ("true", "1", "yes", "y"):
            await asyncio.sleep(HEALTH_CHECK_POLL_S)
        await out.send(200, b"", "text/plain")

    def is_kimi(self) -> bool:
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
            "model_type": "kimi_k25" if self.is_kimi() else None,
            "architectures": [KIMI_CLASS] if self.is_kimi() else None,
        })

    async def server_info(self, req: HttpRequest, out: Responder) -> None:
        internal = dict(self.args)
        internal["last_gen_throughput"] = self.engine.last_gen_throughput
        internal["effective_max_running_requests_per_dp"] = self.args.get("max_running_requests")
        if self.engine.avg_spec_accept_length() is not None:
            internal["avg_spec_accept_length"] = self.engine.avg_spec_accept_length()
        await out.send_json(200, {
            **self.args,
            "simulator": True,
            "simulator_settings": self.settings.as_json(),
            "internal_states": [internal],
            "version": self.version,
        })

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
        """/v1/loads of SGLang 0.5.9 (entrypoints/v1_loads.py): one DP rank, JSON format only."""
        running, waiting = self._load_counts()
        cap = self.engine.max_running or 0
        load = {"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": waiting,
                "num_used_tokens": 0, "max_total_num_tokens": 0, "token_usage": 0.0,
                "gen_throughput": self.engine.last_gen_throughput, "cache_hit_rate": 0.0,
                "utilization": round(running / cap, 4) if cap else 0.0, "max_running_requests": cap,
                "num_total_reqs": running + waiting}
        await out.send_json(200, {
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "version": self.version, "dp_rank_count": 1, "loads": [load], "simulator": True,
            "aggregate": {"total_running_reqs": running, "total_waiting_reqs": waiting,
                          "total_reqs": running + waiting, "avg_token_usage": 0.0,
                          "avg_throughput": round(self.engine.last_gen_throughput, 2),
                          "avg_utilization": load["utilization"]},
        })

    async def get_load(self, req: HttpRequest, out: Responder) -> None:
        """The deprecated /get_load (what sglang-router's /get_loads asks each worker)."""
        running, waiting = self._load_counts()
        await out.send_json(200, [{"dp_rank": 0, "num_reqs": running + waiting, "num_waiting_reqs": waiting,
                                   "num_tokens": 0, "ts_tic": time.time()}])

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
        if req.verify_ct:
            accepted = req.completion_tokens - 1 - req.verify_ct
            drafts = req.verify_ct * (self.engine.max_k - 1)
            meta["spec_accept_rate"] = accepted / drafts if drafts else 0.0
            meta["spec_accept_length"] = req.completion_tokens / req.verify_ct
            meta["spec_accept_token_num"] = accepted
            meta["spec_draft_token_num"] = drafts
            meta["spec_verify_ct"] = req.verify_ct
            meta["spec_accept_histogram"] = req.histogram
        return meta

    def _native_payload(self, req: GenRequest, ids_from: int = 0) -> bytes:
        """/generate's JSON: cumulative text, output_ids, meta_info (spec metrics once finished)."""
        # The text is ASCII words from VOCAB: no JSON escaping needed, so it is spliced in.
        ids = req.ids_csv if ids_from == 0 else ",".join(map(str, req.ids[ids_from:]))
        if req.finished:
            meta = dumps(self._meta_info(req))
        else:
            meta = req.meta_head + b"%d" % req.completion_tokens + b',"cached_tokens":0}'
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
            await out.send(200, self._native_payload(req))
            return
        sent_ids = 0

        def sink(r: GenRequest) -> None:
            nonlocal sent_ids
            # --stream-output makes output_ids incremental; text stays cumulative (tokenizer_manager)
            out.event(self._native_payload(r, sent_ids if self.args.get("stream_output") else 0))
            sent_ids = len(r.ids)

        await self._stream(out, req, sink, lambda: [])

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
        try:
            body = http.json()
            if chat:
                messages = body.get("messages")
                if not isinstance(messages, list) or not messages:
                    raise ValueError("messages must be a non-empty list")
                words = sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
                max_new = body.get("max_completion_tokens") or body.get("max_tokens") or CHAT_DEFAULT_MAX_TOKENS
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
            if chat:
                choice: dict[str, Any] = {"index": 0, "message": {
                    "role": "assistant", "content": req.text or None, "reasoning_content": None, "tool_calls": None}}
            else:
                choice = {"index": 0, "text": req.text}
            choice.update({"logprobs": None, "finish_reason": "length", "matched_stop": None})
            await out.send_json(200, {"id": req.rid, "object": "chat.completion" if chat else "text_completion",
                                      "created": created, "model": model, "choices": [choice],
                                      "usage": self._usage(req),
                                      "metadata": {"weight_version": self.args.get("weight_version")}})
            return
        options = body.get("stream_options") or {}
        chunk_kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(choice: dict[str, Any] | None, usage: dict[str, Any] | None) -> bytes:
            return dumps({"id": req.rid, "object": chunk_kind, "created": created, "model": model,
                          "choices": [choice] if choice else [], "usage": usage})

        def chat_choice(finish: str | None = None, **delta: Any) -> dict[str, Any]:
            full = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None, **delta}
            return {"index": 0, "delta": full, "logprobs": None, "finish_reason": finish, "matched_stop": None}

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
                out.event(chunk(chat_choice(role="assistant", content=""), None))
            if piece:
                out.event(chunk(chat_choice(content=piece), usage))

        def tail() -> list[bytes]:
            events = [chunk(chat_choice(finish="length"), None)] if chat else []
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
        log.info("Load weight begin. (simulated: SGLANG_SIM_LOAD_SECONDS=%s)", self.settings.load_seconds)
        await asyncio.sleep(self.settings.load_seconds)
        crash = self.kimi_crash()
        if crash is not None:
            print("[sglang_sim] simulated SGLang start-up failure (this is the simulator, not SGLang)",
                  file=sys.stderr)
            ts = time.strftime("%Y-%m-%d %H:%M:%S")
            print(f"[{ts}] {crash}", file=sys.stderr, flush=True)
            log.error("Received sigquit from a child process. It usually means the child failed.")
            sys.stdout.flush()
            os._exit(1)
        log.info("Load weight end. (simulated)")
        if self.settings.fault("never_ready"):
            log.info("[sim] SGLANG_SIM_FAULT=never_ready: staying in the starting state")
            return
        self.ready = True
        log.info(READY_TEXT)

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


def format_server_args(args: dict[str, Any]) -> str:
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


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
    log.info("INFO:     Uvicorn running on http://%s:%s (Press CTRL+C to quit)", server_args["host"],
             server_args["port"])
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


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S",
                        stream=sys.stdout)
    try:
        table = load_flag_table()
        args = parse_server_args(table, argv)
        settings = SimSettings.from_env(dict(os.environ))
        warnings = finalize_server_args(args)
        if args.get("speculative_algorithm"):
            chain_acceptance(settings.accept_length, int(args["speculative_num_draft_tokens"]))
        version = read_sglang_version(settings.sglang_dir, table["sglang_version"])
        log.info("%s; flags of sglang %s; reporting version %s; settings %s", BANNER, table["sglang_version"],
                 version, json.dumps(settings.as_json()))
        log.info(format_server_args(args))
        for warning in warnings:
            log.warning(warning)
        # The flag table and parser live for the whole run: keep them out of the collector's
        # full passes, which would otherwise pause the step clock for milliseconds.
        gc.freeze()
        return asyncio.run(serve(settings, args, version))
    except SimConfigError as exc:
        print(f"[sglang_sim] configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
