"""The simulated model's token ids and its teacher forcing (SIMULATOR, TEST ONLY).

Prompt ids: a chat template of the simulator's own, Kimi-K2.5-like in shape: ``<|im_tools|>`` and the
tools' JSON, then per message ``<|im_user|>`` (or the role's marker), the content, ``<|im_end|>``, then
the generation prompt ``<|im_assistant|><think>`` (thinking on) or ``<|im_assistant|><think></think>``
(off: Kimi-K2.5's template with chat_template_kwargs {"thinking": false}). Text is one id per UTF-8
byte, so the simulator can read a prompt back from input_ids (it has no tokenizer, only this).
Output ids: one per word of the reply (the engine's words keep their ids, 1000 + the VOCAB index;
any other word a fixed id from its hash), ``</think>`` between the thinking and the answer, Kimi-K2's
tool-call markers around a call, ``<|im_end|>`` at the end (the EOS).

Teacher forcing (SGLang's /generate with input_ids, return_logprob, logprob_start_len,
top_logprobs_num): at each position the simulated model's top choice is the token of its own greedy
reply to the prompt read back from the ids (answers.py, toolcalls.py; a corrupted release's
corrupted reply, the draft path left out: scoring is the target's prefill), with log-probability
LP_TOP, a runner-up at LP_RUNNER, any other token at LP_OTHER; so a reference whose tokens the
model agrees with scores top-1 everywhere and a gap of 0, and a token it would not have chosen a
gap of LP_TOP - LP_OTHER, far above any near-tie. Prompt positions predict themselves. The answer
has SGLang's shape (tokenizer_manager.add_logprob_to_meta_info, scheduler's input logprobs):
input_token_logprobs [logprob, token_id, null] from logprob_start_len on, the first logprob null;
input_top_logprobs the same length, null first, then top_logprobs_num triples, best first.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .engine import VOCAB

SPECIAL = {"<|im_end|>": 1, "<|im_system|>": 2, "<|im_user|>": 3, "<|im_assistant|>": 4, "<|im_tool|>": 5,
           "<|im_tools|>": 6, "<think>": 7, "</think>": 8, "<|tool_calls_section_begin|>": 9,
           "<|tool_calls_section_end|>": 10, "<|tool_call_begin|>": 11, "<|tool_call_argument_begin|>": 12,
           "<|tool_call_end|>": 13}
EOS = SPECIAL["<|im_end|>"]
ROLES = {"system": SPECIAL["<|im_system|>"], "user": SPECIAL["<|im_user|>"], "assistant": SPECIAL["<|im_assistant|>"],
         "tool": SPECIAL["<|im_tool|>"]}
BYTE0 = 16  # a prompt byte b is id BYTE0 + b
WORD0, HASHED0, HASHED_RANGE = 1000, 2000, 100_000
LP_TOP, LP_RUNNER, LP_OTHER = -0.05, -3.0, -8.0


def word_id(word: str) -> int:
    if word in VOCAB:
        return WORD0 + VOCAB.index(word)
    return HASHED0 + int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % HASHED_RANGE


def text_ids(text: str) -> list[int]:
    return [word_id(w) for w in text.split()]


def thinking_on(body: dict[str, Any]) -> bool:
    """Kimi-K2.5 thinks unless the request turns it off (chat_template_kwargs thinking, or Qwen3's enable_thinking)."""
    kwargs = body.get("chat_template_kwargs") or {}
    return not (isinstance(kwargs, dict) and (kwargs.get("thinking") is False or kwargs.get("enable_thinking") is False))


def _bytes(text: str) -> list[int]:
    return [BYTE0 + b for b in text.encode()]


def prompt_ids(body: dict[str, Any]) -> list[int]:
    """A chat request's prompt as ids (the template above)."""
    ids: list[int] = []
    if body.get("tools"):
        ids += [SPECIAL["<|im_tools|>"], *_bytes(json.dumps(body["tools"], sort_keys=True)), EOS]
    for m in body.get("messages") or []:
        if isinstance(m, dict):
            content = m.get("content")
            ids += [ROLES.get(str(m.get("role")), ROLES["user"]),
                    *_bytes(content if isinstance(content, str) else json.dumps(content)), EOS]
    ids += [SPECIAL["<|im_assistant|>"], SPECIAL["<think>"]]
    return ids if thinking_on(body) else [*ids, SPECIAL["</think>"]]


def read_prompt(ids: list[int]) -> tuple[dict[str, Any], int] | None:
    """The chat request a prompt came from and where the prompt ends, or None for ids of no chat prompt."""
    body: dict[str, Any] = {"messages": []}
    by_marker = {v: k for k, v in ROLES.items()}
    i = 0
    while i < len(ids):
        tok = ids[i]
        if tok == SPECIAL["<|im_assistant|>"] and i + 1 < len(ids) and ids[i + 1] == SPECIAL["<think>"]:
            end = i + 2
            if end < len(ids) and ids[end] == SPECIAL["</think>"]:
                body["chat_template_kwargs"] = {"thinking": False}
                end += 1
            return body, end
        if tok not in by_marker and tok != SPECIAL["<|im_tools|>"]:
            return None
        try:
            close = ids.index(EOS, i + 1)
        except ValueError:
            return None
        raw = ids[i + 1:close]
        if any(not BYTE0 <= t < BYTE0 + 256 for t in raw):
            return None
        text = bytes(t - BYTE0 for t in raw).decode(errors="replace")
        if tok == SPECIAL["<|im_tools|>"]:
            try:
                body["tools"] = json.loads(text)
            except ValueError:
                return None
        else:
            body["messages"].append({"role": by_marker[tok], "content": text})
        i = close + 1
    return None


def _runners(top: int, count: int) -> list[int]:
    """Other tokens than `top`, fixed ones, as the model's runners-up."""
    out, k = [], 0
    while len(out) < count:
        cand = WORD0 + (top * 7 + k) % len(VOCAB)
        if cand != top and cand not in out:
            out.append(cand)
        k += 1
    return out


def _entry(choice: int, given: int, top_n: int) -> tuple[float, list[list[Any]]]:
    """The logprob of `given` and the top_n list where `choice` is the model's top choice."""
    runners = _runners(choice, max(0, top_n - 1))
    tops = [[LP_TOP, choice, None]] + [[LP_RUNNER - k, r, None] for k, r in enumerate(runners)]
    if given == choice:
        return LP_TOP, tops[:top_n]
    if given in runners:
        return LP_RUNNER - runners.index(given), tops[:top_n]
    return LP_OTHER, tops[:top_n]


def input_logprobs(ids: list[int], start: int, top_n: int, greedy: list[int] | None,
                   prompt_end: int | None) -> dict[str, Any]:
    """meta_info's input_token_logprobs and (top_n > 0) input_top_logprobs from `start` on."""
    tokens: list[list[Any]] = []
    tops: list[Any] = []
    for p in range(start, len(ids)):
        if p == start:  # SGLang's scheduler: no logprob for the first position scored
            tokens.append([None, ids[p], None])
            tops.append(None)
            continue
        if greedy is not None and prompt_end is not None and p >= prompt_end:
            k = p - prompt_end
            choice = greedy[k] if k < len(greedy) else EOS
        elif greedy is not None:
            choice = ids[p]  # the prompt: the model expects its own template
        else:  # not a chat prompt of this simulator: a fixed pseudo-model of the previous token
            choice = WORD0 + (31 * ids[p - 1] + p) % len(VOCAB)
        logprob, top = _entry(choice, ids[p], top_n)
        tokens.append([logprob, ids[p], None])
        tops.append(top)
    out: dict[str, Any] = {"input_token_logprobs": tokens}
    if top_n > 0:
        out["input_top_logprobs"] = tops
    return out


def output_logprobs(out_ids: list[int], top_n: int) -> dict[str, Any]:
    """meta_info's output_token_logprobs (and output_top_logprobs): the model chose each of them."""
    out: dict[str, Any] = {"output_token_logprobs": [[LP_TOP, t, None] for t in out_ids]}
    if top_n > 0:
        out["output_top_logprobs"] = [_entry(t, t, top_n)[1] for t in out_ids]
    return out
