"""What the simulated model answers a greedy chat request (SIMULATOR, TEST ONLY).

A chat request at temperature 0 that does not ask for ignore_eos (a benchmark's filler runs to
max_tokens; the correctness probe's requests do not) is answered as a deterministic model would:
the same prompt always gives the same reply, whatever the request's number or the start. The
simulated model thinks, then answers; it can do one thing right, integer arithmetic
("What is 17 * 23?" -> 391), and otherwise says words drawn from the prompt's own hash. The
thinking goes to reasoning_content with --reasoning-parser, else stays in content inside
<think>...</think>, as Kimi-K2's output does through SGLang's serving_chat.

How long it thinks: Kimi-K2.5 thinks by default, for as long as a prompt takes it, and its thinking
counts against max_tokens. No published figure gives a distribution for short prompts like the
probe's; the public observations are these (each a single run): vllm-project/vllm#50166, Kimi-K2.5
asked "What is 25 * 37?" thinks through three methods before answering 925; veryfront/veryfront-code
PR #2791 (Kimi K2.5/K2.6 agent turns): a completed turn with 2059 characters of reasoning, about 515
tokens at the 4 characters a token that report measured, and a turn whose 16735 characters (about
4180 tokens) ran into a 4096-token cap with no answer; gonka-ai/gonka PR #1202 (Kimi-K2.6, vLLM):
a math prompt thinking past 4096 tokens (9975 characters) with no answer; Moonshot's own guide asks
for max_tokens >= 16000 with thinking on. So the thinking length of a prompt is drawn once (seeded by
the prompt) from a log-normal of median THINK_MEDIAN_TOKENS (the completed turn's ~515) and spread
THINK_SIGMA (1 draw in 25 past 4096 tokens, where two of those reports were cut): coarse, three
reports, none of them this prompt set. With the correctness probe's 96 tokens more than 9 replies
in 10 end in the thinking, with no answer to check.
chat_template_kwargs {"thinking": false} (Kimi-K2.5's instant mode; Qwen3's enable_thinking false
too) turns it off: no thinking, the answer at once. Replies stop at max_tokens (finish_reason
"length"), the thinking's words first.

Token ids (tokens.py): with return_token_ids / return_prompt_token_ids (SGLang 0.5.17's chat
fields) the reply carries its output ids and its prompt's ids; teacher forcing of given tokens is
answered from the same greedy reply.

A release can be made to answer wrong (the correctness gate's tests): <release>/sim-output-corruption
(a share in [0, 1], TEST ONLY, like sim-slowdown-factor) or SGLANG_SIM_OUTPUT_CORRUPTION replaces that
share of the answer's words, and of arithmetic answers, with others (seeded by the prompt, so a
corrupted release is wrong the same way every time); <release>/sim-tool-format "broken" (or
SGLANG_SIM_TOOL_FORMAT) makes its tool calls unreadable to the parser (toolcalls.py).

Speculation changes nothing in a reply (EAGLE-3 is lossless: the simulated model's tokens with or
without --speculative-algorithm) unless SGLANG_SIM_SPEC_CORRUPTION (a share in [0, 1], TEST ONLY: a
broken draft/verify path, whose unverified draft tokens get through) corrupts that share of the
answer as above, on a speculative server only: EAGLE-3's lossless check (a start without
speculation against the speculative one) must then fail. Teacher forcing scores with the target
model's prefill, which the draft path does not touch.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import re
from fractions import Fraction
from typing import Any

from . import tokens
from .engine import VOCAB

ARITHMETIC = re.compile(r"what is\s+(-?\d+(?:\.\d+)?)\s*([-+*/x×])\s*(-?\d+(?:\.\d+)?)\s*\?", re.IGNORECASE)
ANSWER_WORDS = 12
# The thinking's length in tokens, a log-normal (the docstring says where the figures come from).
THINK_MEDIAN_TOKENS = 512
THINK_SIGMA = 1.2
THINK_MAX_TOKENS = 32768


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


def think_tokens(text: str) -> int:
    """How many tokens the simulated model thinks about this prompt (the same every time)."""
    draw = _rng(text, "think-length").lognormvariate(math.log(THINK_MEDIAN_TOKENS), THINK_SIGMA)
    return max(1, min(THINK_MAX_TOKENS, round(draw)))


def answer(body: dict[str, Any], corruption: float) -> tuple[int, list[str]]:
    """(thinking tokens, answer words) of the simulated model for a greedy chat request."""
    text = prompt_of(body)
    words = _rng(text, "words")
    last_user = next((m.get("content") for m in reversed(body.get("messages", []))
                      if isinstance(m, dict) and m.get("role") == "user"), "") or ""
    result = _arithmetic(str(last_user))
    reply = [result] if result is not None else [VOCAB[words.randrange(len(VOCAB))] for _ in range(ANSWER_WORDS)]
    if corruption > 0:
        spoil = _rng(text, "corruption")
        reply = [(str(int(w) + spoil.randrange(1, 97)) if w.lstrip("-").isdigit() else
                  VOCAB[(VOCAB.index(w) + spoil.randrange(1, len(VOCAB))) % len(VOCAB)] if w in VOCAB else w + "?")
                 if spoil.random() < corruption else w for w in reply]
    return (think_tokens(text) if tokens.thinking_on(body) else 0), reply


def thinking_words(text: str, count: int) -> list[str]:
    """The first `count` words of the simulated model's thinking about this prompt."""
    words = _rng(text, "thinking")
    return [VOCAB[words.randrange(len(VOCAB))] for _ in range(count)]


def draft_path_corruption(server_args: dict[str, Any]) -> float:
    """SGLANG_SIM_SPEC_CORRUPTION on a speculative server (a broken draft/verify path), else 0."""
    if not server_args.get("speculative_algorithm"):
        return 0.0
    return min(1.0, max(0.0, float(os.environ.get("SGLANG_SIM_SPEC_CORRUPTION") or 0)))


def output_ids(body: dict[str, Any], corruption: float, limit: int) -> list[int]:
    """The first `limit` output ids of the greedy reply (teacher forcing: the target's, no draft path)."""
    think, reply = answer(body, corruption)
    ids = [tokens.word_id(w) for w in thinking_words(prompt_of(body), min(think, limit))]
    if think:
        ids.append(tokens.SPECIAL["</think>"])
    return [*ids, *(tokens.word_id(w) for w in reply), tokens.EOS][:limit]


def reply(body: dict[str, Any], server_args: dict[str, Any], corruption: float,
          max_tokens: int) -> tuple[dict[str, Any], str, list[int]]:
    """The assistant message, finish_reason and output ids, the thinking where SGLang's reasoning parser would
    put it, the whole cut at max_tokens (the thinking's words first, then </think>, the answer, the EOS)."""
    think, words = answer(body, max(corruption, draft_path_corruption(server_args)))
    total = (think + 1 if think else 0) + len(words) + 1
    kept_think = thinking_words(prompt_of(body), min(think, max_tokens))
    closed = bool(think) and max_tokens > think
    kept_words = words[:max(0, max_tokens - (think + 1 if think else 0))]
    ids = [tokens.word_id(w) for w in kept_think] + ([tokens.SPECIAL["</think>"]] if closed else [])
    ids += [tokens.word_id(w) for w in kept_words]
    finish = "stop" if max_tokens >= total else "length"
    if finish == "stop":
        ids.append(tokens.EOS)
    answer_text = " ".join(kept_words) or None
    if not think:
        msg = {"role": "assistant", "content": answer_text, "reasoning_content": None, "tool_calls": None}
    elif server_args.get("reasoning_parser") and body.get("separate_reasoning", True):
        msg = {"role": "assistant", "content": answer_text, "reasoning_content": " ".join(kept_think) or None,
               "tool_calls": None}
    else:
        content = "<think>" + " ".join(kept_think) + ("</think>" + (answer_text or "") if closed else "")
        msg = {"role": "assistant", "content": content, "reasoning_content": None, "tool_calls": None}
    return msg, finish, ids
