"""Kimi-K2's tool calls and thinking as SGLang's parsers turn them into an OpenAI reply (SIMULATOR, TEST ONLY).

The simulated model answers a chat request that offers tools (and does not say tool_choice "none")
the way Kimi-K2.5 does: it thinks, then calls one tool (the named one, else the first) with arguments
made from that tool's JSON schema, in Kimi-K2's raw format::

    <think>...</think><|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:N
    <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>

What the reply then holds follows SGLang 0.5.9's serving_chat (non-streamed, _build_chat_response):
with --reasoning-parser (and the request's separate_reasoning, true by default) the thinking goes to
`reasoning_content`, else it stays in `content`; with --tool-call-parser the call is parsed into
`tool_calls` (id `functions.NAME:N` for kimi_k2, N counting the calls already in the conversation,
else `call_` and 24 hex digits; arguments a JSON string) and finish_reason is "tool_calls", else the
raw call stays in `content` as text. Requests without tools are not touched here.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

from . import tokens

THINKING = "The user needs a tool for this; I will call {name} with the arguments its schema asks for."
SAMPLE = {"string": "sim", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}, "null": None}


def wants_tool(body: dict[str, Any]) -> bool:
    return bool(body.get("tools")) and body.get("tool_choice", "auto") != "none"


def chosen(body: dict[str, Any]) -> dict[str, Any]:
    """The tool the simulated model calls: tool_choice's named function, else the first tool."""
    tools = [t.get("function", {}) for t in body["tools"] if isinstance(t, dict)]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        tools = [t for t in tools if t.get("name") == name] or tools
    if not tools or not tools[0].get("name"):
        raise ValueError("tools must hold functions with a name")
    return tools[0]


def sample(schema: dict[str, Any]) -> Any:
    """A value that matches a (simple) JSON schema: enum's first, else one per type, objects recursively."""
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: sample(v) for k, v in props.items() if k in (schema.get("required") or props)}
    if kind == "array":
        return [sample(schema["items"])] if isinstance(schema.get("items"), dict) else []
    return SAMPLE.get(kind, "sim")


def history_calls(body: dict[str, Any]) -> int:
    """Tool calls already in the conversation (SGLang's _get_history_tool_calls_cnt)."""
    return sum(len(m.get("tool_calls") or []) for m in body.get("messages", [])
               if isinstance(m, dict) and m.get("role") == "assistant")


def call_ids(body: dict[str, Any], corruption: float = 0.0) -> list[int]:
    """The output ids of the call: the model's tokens, Kimi-K2's format whatever the parser makes of it
    (a release whose parser is broken emits the same tokens; tokens.py)."""
    tool, arguments, index = _call(body, corruption)
    s = tokens.SPECIAL
    ids = [*tokens.text_ids(THINKING.format(name=tool["name"])), s["</think>"]] if tokens.thinking_on(body) else []
    return [*ids, s["<|tool_calls_section_begin|>"], s["<|tool_call_begin|>"],
            *tokens.text_ids(f"functions.{tool['name']}:{index}"), s["<|tool_call_argument_begin|>"],
            *tokens.text_ids(arguments), s["<|tool_call_end|>"], s["<|tool_calls_section_end|>"], tokens.EOS]


def _call(body: dict[str, Any], corruption: float) -> tuple[dict[str, Any], str, int]:
    tool = chosen(body)
    values = sample(tool.get("parameters") or {})
    if corruption > 0 and isinstance(values, dict):
        spoil = random.Random(json.dumps(body.get("messages"), sort_keys=True))
        values = {k: (v + "?" if isinstance(v, str) and spoil.random() < corruption else v) for k, v in values.items()}
    return tool, json.dumps(values, ensure_ascii=False), history_calls(body)


def reply(body: dict[str, Any], server_args: dict[str, Any], corruption: float = 0.0,
          tool_format: str = "kimi") -> tuple[dict[str, Any], str, list[int]]:
    """The assistant message, finish_reason and output ids of a chat request that offers tools.

    A corrupted release (answers.py) spoils that share of the arguments' string values; a release
    whose tool_format is "broken" writes the call with a token the parser does not know, so it
    stays text in content (what a release whose parser stopped recognising Kimi's format returns).
    With chat_template_kwargs {"thinking": false} the model calls at once, without thinking.
    """
    tool, arguments, index = _call(body, corruption)
    thinking = THINKING.format(name=tool["name"]) if tokens.thinking_on(body) else None
    begin = "<|tool_call_start|>" if tool_format == "broken" else "<|tool_call_begin|>"
    raw_call = (f"<|tool_calls_section_begin|>{begin}functions.{tool['name']}:{index}"
                f"<|tool_call_argument_begin|>{arguments}<|tool_call_end|><|tool_calls_section_end|>")
    message: dict[str, Any] = {"role": "assistant", "content": None, "reasoning_content": None, "tool_calls": None}
    text = raw_call
    if thinking is None:
        pass
    elif server_args.get("reasoning_parser") and body.get("separate_reasoning", True):
        message["reasoning_content"] = thinking
    else:
        text = f"<think>{thinking}</think>{raw_call}"
    ids = call_ids(body, corruption)
    parser = server_args.get("tool_call_parser")
    if not parser or tool_format == "broken":
        message["content"] = text
        return message, "stop", ids
    call_id = f"functions.{tool['name']}:{index}" if parser == "kimi_k2" else f"call_{uuid.uuid4().hex[:24]}"
    message["content"] = text.replace(raw_call, "") or None
    message["tool_calls"] = [{"id": call_id, "index": 0, "type": "function",
                              "function": {"name": tool["name"], "arguments": arguments}}]
    return message, "tool_calls", ids
