"""What the simulator is told and how it labels itself (TEST ONLY: SGLang SIMULATOR).

Settings come from the environment only (SGLANG_SIM_*, listed in the package docstring), because
the command line must be SGLang's; a bad value is a SimConfigError (exit 2), never a guess.
"""

from __future__ import annotations

import math
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .sglang_dir import (
    installed_sglang_dir,
    read_release_file,
    read_release_slowdown,
    release_of,
)
from .specmodel import SpecModel

BANNER = "SGLang SIMULATOR (test double: not SGLang, no GPU, no model; test role sglang_simulator)"
READY_TEXT = "The server is fired up and ready to roll!"


class SimConfigError(Exception):
    """A problem with the simulator's own settings (environment), not with SGLang flags."""


# --------------------------------------------------------------------------- default noise
# The simulator's run-to-run noise, in percent, where SGLANG_SIM_NOISE_PCT (each speculative request's
# accept length) and SGLANG_SIM_START_NOISE_PCT (a speed factor per start) are unset: the one place for
# it (SimSettings and from_env read these two names only). A quiet real host's: SGLang 0.5.17 on the lent
# H200, an 8B shape with CUDA graphs on, EAGLE-3, single stream (docs/validation/testbed-h200): per
# request the largest CV of tok/s within a session (0.21-0.31%), per start the CV of the session means
# across three starts (0.14%). Not the reference host's: the seeds' 8-GPU PCIe host spread 87.5-103.5
# tok/s over ten runs (about 5%), which the test inventory gives every simulated host
# (inventory/demo/group_vars/gpu_hosts/sglang_simulator.yml). Tests that need a deterministic simulator
# set both to 0 (tests/harness/simtruth.py's clean_env does for every simulator it starts).
DEFAULT_NOISE_PCT = 0.3
DEFAULT_START_NOISE_PCT = 0.15


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class SimSettings:
    """The SGLANG_SIM_* environment variables, validated."""

    load_seconds: float = 3.0
    decode_tok_s: float = 50.0
    accept_length: float = 2.5
    ttft_ms: float = 150.0
    # Time a request spends in the tokenizer manager before the scheduler sees it (Kimi-K2.5's image
    # preprocessing): SGLang counts it nowhere (/v1/loads, /metrics), nor does the simulator.
    tokenize_ms: float = 0.0
    batch_slowdown: float = 0.01
    slowdown_factor: float = 1.0
    # The release's own factor (<release>/sim-slowdown-factor), already multiplied into slowdown_factor.
    release_slowdown_factor: float | None = None
    seed: int = 0
    # The speculative-decoding model (specmodel.py); accept_first None keeps the fixed accept length.
    accept_first: float | None = None
    accept_decay: float = 0.85
    draft_step_cost: float = 0.08
    verify_token_cost: float = 0.03
    spec_memory_limit: float = 0.0
    # Run-to-run noise (percent): each request's accept length, and a speed factor per start; the
    # nonce makes one start's draws differ from another's (logged, so a start can be replayed).
    noise_pct: float = DEFAULT_NOISE_PCT
    start_noise_pct: float = DEFAULT_START_NOISE_PCT
    noise_nonce: int = 0
    sglang_dir: Path | None = None
    faults: tuple[tuple[str, int | None], ...] = ()
    # What a release answers (answers.py, toolcalls.py): the share of a greedy answer's words
    # replaced, and the tool-call format ("kimi", or "broken": unreadable to the parser).
    output_corruption: float = 0.0
    tool_format: str = "kimi"

    FAULTS_WITH_COUNT = ("crash_after_requests", "error_after_requests")
    FAULTS_PLAIN = ("crash_on_start_missing_eagle3", "never_ready")

    @classmethod
    def from_env(cls, env: dict[str, str]) -> SimSettings:
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
        if sglang_dir == "auto":  # the package of the Python running the simulator: a host's release venv
            sglang_dir = installed_sglang_dir()
        if sglang_dir is not None and not (Path(sglang_dir) / "srt").is_dir():
            raise SimConfigError(f"SGLANG_SIM_SGLANG_DIR={sglang_dir!r} holds no srt/ directory")
        # TEST ONLY: a release made slower (or faster) by a file a test writes into it; it multiplies
        # SGLANG_SIM_SLOWDOWN_FACTOR, so one release can be slower than another on the same host.
        try:
            release_factor = read_release_slowdown(release_of(Path(sglang_dir))) if sglang_dir else None
        except ValueError as exc:
            raise SimConfigError(str(exc)) from None
        release = release_of(Path(sglang_dir)) if sglang_dir else None
        corruption_raw = env.get("SGLANG_SIM_OUTPUT_CORRUPTION") or read_release_file(release, "sim-output-corruption") or "0"
        try:
            corruption = float(corruption_raw)
        except ValueError:
            raise SimConfigError(f"the output corruption {corruption_raw!r} is not a number") from None
        if not 0.0 <= corruption <= 1.0:
            raise SimConfigError(f"the output corruption {corruption_raw!r} must be a share between 0 and 1")
        tool_format = env.get("SGLANG_SIM_TOOL_FORMAT") or read_release_file(release, "sim-tool-format") or "kimi"
        if tool_format not in ("kimi", "broken"):
            raise SimConfigError(f"the tool-call format {tool_format!r} must be kimi or broken")
        seed = env.get("SGLANG_SIM_SEED", "0") or "0"
        if not re.fullmatch(r"-?\d+", seed):
            raise SimConfigError(f"SGLANG_SIM_SEED={seed!r} is not an integer")
        accept_first = None
        if env.get("SGLANG_SIM_ACCEPT_FIRST"):
            accept_first = number("SGLANG_SIM_ACCEPT_FIRST", 0.0, 0.0, strict=True)
            if accept_first >= 1.0:
                raise SimConfigError(f"SGLANG_SIM_ACCEPT_FIRST={accept_first!r} must be below 1 (a probability)")
        accept_decay = number("SGLANG_SIM_ACCEPT_DECAY", cls.accept_decay, 0.0, strict=True)
        if accept_decay > 1.0:
            raise SimConfigError(f"SGLANG_SIM_ACCEPT_DECAY={accept_decay!r} must be <= 1")
        noise = {name: number(name, default, 0.0) for name, default in (("SGLANG_SIM_NOISE_PCT", DEFAULT_NOISE_PCT),
                                                                        ("SGLANG_SIM_START_NOISE_PCT", DEFAULT_START_NOISE_PCT))}
        for name, value in noise.items():
            if value > 30:
                raise SimConfigError(f"{name}={value!r} must be at most 30 (a spread in percent)")
        nonce = env.get("SGLANG_SIM_NOISE_NONCE") or str(time.time_ns())
        if not re.fullmatch(r"\d+", nonce):
            raise SimConfigError(f"SGLANG_SIM_NOISE_NONCE={nonce!r} is not a non-negative integer")
        return cls(
            noise_pct=noise["SGLANG_SIM_NOISE_PCT"],
            start_noise_pct=noise["SGLANG_SIM_START_NOISE_PCT"],
            noise_nonce=int(nonce),
            accept_first=accept_first,
            accept_decay=accept_decay,
            draft_step_cost=number("SGLANG_SIM_DRAFT_STEP_COST", cls.draft_step_cost, 0.0),
            verify_token_cost=number("SGLANG_SIM_VERIFY_TOKEN_COST", cls.verify_token_cost, 0.0),
            spec_memory_limit=number("SGLANG_SIM_SPEC_MEMORY_LIMIT", cls.spec_memory_limit, 0.0),
            load_seconds=number("SGLANG_SIM_LOAD_SECONDS", cls.load_seconds, 0.0),
            decode_tok_s=number("SGLANG_SIM_DECODE_TOK_S", cls.decode_tok_s, 0.0, strict=True),
            accept_length=number("SGLANG_SIM_ACCEPT_LENGTH", cls.accept_length, 1.0),
            ttft_ms=number("SGLANG_SIM_TTFT_MS", cls.ttft_ms, 0.0),
            tokenize_ms=number("SGLANG_SIM_TOKENIZE_MS", cls.tokenize_ms, 0.0),
            batch_slowdown=number("SGLANG_SIM_BATCH_SLOWDOWN", cls.batch_slowdown, 0.0),
            slowdown_factor=number("SGLANG_SIM_SLOWDOWN_FACTOR", cls.slowdown_factor, 0.0, strict=True)
            * (release_factor or 1.0),
            release_slowdown_factor=release_factor,
            seed=int(seed),
            sglang_dir=Path(sglang_dir) if sglang_dir else None,
            faults=tuple(faults),
            output_corruption=corruption,
            tool_format=tool_format,
        )

    def spec_model(self) -> SpecModel | None:
        """The speculative-decoding model, when SGLANG_SIM_ACCEPT_FIRST turns it on."""
        if self.accept_first is None:
            return None
        return SpecModel(self.accept_first, self.accept_decay, self.draft_step_cost, self.verify_token_cost,
                         self.spec_memory_limit)

    def noise_rng(self, stream: str) -> random.Random:
        """The seeded draws of this start (SEED and the nonce) for one stream: "start" or a request's number."""
        return random.Random(f"{self.seed}:{self.noise_nonce}:{stream}")

    def start_speed(self) -> float:
        """This start's speed factor: 1 + N(0, START_NOISE_PCT %), kept within [0.5, 1.5]."""
        if not self.start_noise_pct:
            return 1.0
        return min(1.5, max(0.5, 1.0 + self.noise_rng("start").gauss(0.0, self.start_noise_pct / 100.0)))

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
            "tokenize_ms": self.tokenize_ms,
            "batch_slowdown": self.batch_slowdown,
            "slowdown_factor": self.slowdown_factor,
            "release_slowdown_factor": self.release_slowdown_factor,
            "seed": self.seed,
            "accept_first": self.accept_first,
            "accept_decay": self.accept_decay,
            "draft_step_cost": self.draft_step_cost,
            "verify_token_cost": self.verify_token_cost,
            "spec_memory_limit": self.spec_memory_limit,
            "noise_pct": self.noise_pct,
            "start_noise_pct": self.start_noise_pct,
            "noise_nonce": self.noise_nonce,
            "start_speed": self.start_speed(),
            "sglang_dir": str(self.sglang_dir) if self.sglang_dir else None,
            "faults": [f"{n}:{c}" if c is not None else n for n, c in self.faults],
            "output_corruption": self.output_corruption,
            "tool_format": self.tool_format,
        }
