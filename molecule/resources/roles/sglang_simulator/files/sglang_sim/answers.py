"""What the simulated model answers a greedy chat request (SIMULATOR, TEST ONLY).

A chat request at temperature 0 that does not ask for ignore_eos (a benchmark's filler runs to
max_tokens; the correctness probe's requests do not) is answered as a deterministic model would:
the same prompt always gives the same reply, whatever the request's number or the start. The
simulated model thinks a few words, then answers; it can do one thing right, integer arithmetic
("What is 17 * 23?" -> 391), and otherwise says words drawn from the prompt's own hash. The
thinking goes to reasoning_content with --reasoning-parser, else stays in content inside
<think>...</think>, as Kimi-K2's output does through SGLang's serving_chat.

A release can be made to answer wrong (the correctness gate's tests): <release>/sim-output-corruption
(a share in [0, 1], TEST ONLY, like sim-slowdown-factor) or SGLANG_SIM_OUTPUT_CORRUPTION replaces that
share of the answer's words, and of arithmetic answers, with others (seeded by the prompt, so a
corrupted release is wrong the same way every time); <release>/sim-tool-format "broken" (or
SGLANG_SIM_TOOL_FORMAT) makes its tool calls unreadable to the parser (toolcalls.py).

Speculation changes nothing in a reply (EAGLE-3 is lossless: the simulated model's tokens with or
without --speculative-algorithm) unless SGLANG_SIM_SPEC_CORRUPTION (a share in [0, 1], TEST ONLY: a
broken draft/verify path, whose unverified draft tokens get through) corrupts that share of the
answer as above, on a speculative server only: EAGLE-3's lossless check (a start without
speculation against the speculative one) must then fail.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
from fractions import Fraction
from typing import Any

from .engine import VOCAB

ARITHMETIC = re.compile(r"what is\s+(-?\d+(?:\.\d+)?)\s*([-+*/x×])\s*(-?\d+(?:\.\d+)?)\s*\?", re.IGNORECASE)
THINK_WORDS = 6
ANSWER_WORDS = 12


def wants_answer(body: dict[str, Any]) -> bool:
    try:
        return float(body.get("temperature", 1.0)) == 0.0 and not body.get("ignore_eos")
    except (TypeError, ValueError):
        return False


def prompt_of(body: dict[str, Any]) -> str:
    """The text the reply depends on: every message's role and content, in order."""
    return "\n".join(f"{m.get('role')}: {m.get('content')}" for m in body.get("messages", []) if isinstance(m, dict))


def _rng(text: str, salt: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256((salt + "\0" + text).encode()).digest()[:8], "big"))


def _arithmetic(text: str) -> str | None:
    match = ARITHMETIC.search(text)
    if not match:
        return None
    a, op, b = Fraction(match[1]), match[2], Fraction(match[3])
    if op in "/" and b == 0:
        return None
    value = {"+": a + b, "-": a - b, "*": a * b, "x": a * b, "×": a * b, "/": a / b if b else a}[op]
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.6g}"


def answer(body: dict[str, Any], corruption: float) -> tuple[str, str]:
    """(thinking, answer) of the simulated model for a greedy chat request."""
    text = prompt_of(body)
    words = _rng(text, "words")
    thinking = " ".join(VOCAB[words.randrange(len(VOCAB))] for _ in range(THINK_WORDS))
    last_user = next((m.get("content") for m in reversed(body.get("messages", []))
                      if isinstance(m, dict) and m.get("role") == "user"), "") or ""
    result = _arithmetic(str(last_user))
    reply = [result] if result is not None else [VOCAB[words.randrange(len(VOCAB))] for _ in range(ANSWER_WORDS)]
    if corruption > 0:
        spoil = _rng(text, "corruption")
        reply = [(str(int(w) + spoil.randrange(1, 97)) if w.lstrip("-").isdigit() else
                  VOCAB[(VOCAB.index(w) + spoil.randrange(1, len(VOCAB))) % len(VOCAB)] if w in VOCAB else w + "?")
                 if spoil.random() < corruption else w for w in reply]
    return thinking, " ".join(reply)


def draft_path_corruption(server_args: dict[str, Any]) -> float:
    """SGLANG_SIM_SPEC_CORRUPTION on a speculative server (a broken draft/verify path), else 0."""
    if not server_args.get("speculative_algorithm"):
        return 0.0
    return min(1.0, max(0.0, float(os.environ.get("SGLANG_SIM_SPEC_CORRUPTION") or 0)))


def message(body: dict[str, Any], server_args: dict[str, Any], corruption: float) -> dict[str, Any]:
    """The assistant message, with the thinking where SGLang's reasoning parser would put it."""
    thinking, reply = answer(body, max(corruption, draft_path_corruption(server_args)))
    if server_args.get("reasoning_parser") and body.get("separate_reasoning", True):
        return {"role": "assistant", "content": reply, "reasoning_content": thinking, "tool_calls": None}
    return {"role": "assistant", "content": f"<think>{thinking}</think>{reply}", "reasoning_content": None,
            "tool_calls": None}


def token_count(msg: dict[str, Any]) -> int:
    """Completion tokens of a reply, a word each (what the engine is asked to generate)."""
    return max(1, sum(len((msg.get(k) or "").split()) for k in ("content", "reasoning_content")))
