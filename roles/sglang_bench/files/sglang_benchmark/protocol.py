"""What a run is and what goes over the wire: the result schema, a measured request (Run), the
prompts, the request bodies of the two APIs and how their stream events count tokens."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

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
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school",
    "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week",
    "company", "system", "program", "question", "work", "number", "night", "point", "home", "water", "room",
    "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book", "eye", "job", "word",
    "business", "issue", "side", "kind", "head", "house", "service", "friend", "father", "power", "hour",
    "game", "line", "end", "member", "law", "car", "city", "name", "team", "minute", "idea", "kid", "body",
    "back", "parent", "face", "others", "level", "office", "door", "health", "person",
)


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
