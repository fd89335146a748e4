"""The result document: the runs summarized, the server's facts, secrets redacted."""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any

from .protocol import REDACTED, SECRET_WORDS, SUMMARY_ARGS, Run


def summarize(runs: list[Run]) -> dict[str, Any]:
    ok = [r for r in runs if r.ok]
    speeds = [r.tok_s for r in ok if r.tok_s is not None]

    def mean_of(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return statistics.fmean(present) if present else None

    out: dict[str, Any] = {
        "ok_runs": len(ok),
        "errors": len(runs) - len(ok),
        "mean_tok_s": statistics.fmean(speeds) if speeds else None,
        "median_tok_s": statistics.median(speeds) if speeds else None,
        "min_tok_s": min(speeds) if speeds else None,
        "max_tok_s": max(speeds) if speeds else None,
        "stdev_tok_s": statistics.stdev(speeds) if len(speeds) > 1 else (0.0 if speeds else None),
        "mean_decode_tok_s": mean_of([r.decode_tok_s for r in ok]),
        "mean_ttft_ms": mean_of([r.ttft_ms for r in ok]),
        "mean_tpot_ms": mean_of([r.tpot_ms for r in ok]),
        "accept_length": mean_of([r.accept_length for r in ok]),
        "aggregate_tok_s": None,
    }
    if ok:
        start = min(r.t_send for r in ok if r.t_send is not None)
        end = max(r.t_last for r in ok if r.t_last is not None)
        total = sum(r.tokens or 0 for r in ok)
        out["aggregate_tok_s"] = total / (end - start) if end > start else None
        out["total_tokens"] = total
        out["batch_seconds"] = end - start
    return out


def redact(value: Any, secret: str | None) -> Any:
    """Drop secrets: values under secret-looking keys, and the API key wherever it appears."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if any(word in str(key).lower() for word in SECRET_WORDS):
                out[key] = None if item is None else REDACTED
            else:
                out[redact(key, secret)] = redact(item, secret)
        return out
    if isinstance(value, list):
        return [redact(v, secret) for v in value]
    if isinstance(value, str) and secret:
        return value.replace(secret, REDACTED)
    return value


# Summary fields a release reports under another name: SGLang 0.5.14 and later have cuda_graph_max_bs_decode
# (and _prefill) where 0.5.9 has cuda_graph_max_bs; the summary keeps one name across releases.
RENAMED_ARGS = {"cuda_graph_max_bs": "cuda_graph_max_bs_decode"}


def server_environment(info: dict[str, Any]) -> dict[str, Any]:
    args = {k: v for k, v in info.items() if k != "internal_states"}
    summary = {k: info.get(RENAMED_ARGS[k] if RENAMED_ARGS.get(k) in info else k) for k in SUMMARY_ARGS
               if k in info or RENAMED_ARGS.get(k) in info}
    summary["version"] = info.get("version")
    return {"server": summary, "server_args": args}


def avg_accept_from(info: dict[str, Any] | None) -> float | None:
    states = (info or {}).get("internal_states") or []
    values = [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)]
    values = [v for v in values if isinstance(v, (int, float))]
    return statistics.fmean(values) if values else None


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
