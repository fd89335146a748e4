"""The command line: parse, measure, write the JSON document, print the summary."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from .protocol import SCHEMA, TOOL, BenchError, Run, make_prompt
from .results import (
    avg_accept_from,
    fmt,
    redact,
    server_environment,
    summarize,
    utc_now,
)
from .runner import run_batch
from .transport import Server


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    guide = sys.modules[__package__].__doc__  # the package's: what is measured and how
    parser = argparse.ArgumentParser(description=guide.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=guide.split("\n\n", 1)[1])
    parser.add_argument("--url", default="http://127.0.0.1:30000", help="server base URL (default %(default)s)")
    parser.add_argument("--api", choices=("native", "openai"), default="native",
                        help="native: POST /generate; openai: POST /v1/chat/completions (default %(default)s)")
    parser.add_argument("--runs", type=int, default=10, help="measured requests (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured requests first (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight at a time (default %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens to generate per request (default %(default)s)")
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", help="fixed prompt text for every request (repeats hit the prefix cache)")
    prompt.add_argument("--input-len", type=int, default=128,
                        help="length of the generated per-run prompt, in ~tokens (default %(default)s)")
    parser.add_argument("--api-key", help="Bearer key; prefer the SGLANG_API_KEY or OPENAI_API_KEY environment variable")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per request (default %(default)s)")
    parser.add_argument("--json", dest="json_out", metavar="OUT", help="write the result document here")
    parser.add_argument("--label", default="", help="free text stored with the result, e.g. eagle3 or baseline")
    parser.add_argument("--env-json", metavar="FILE",
                        help="JSON object of host facts merged into environment (its keys server, "
                             "server_args and client are taken by what this tool measures)")
    parser.add_argument("--start-record", metavar="FILE",
                        help="role sglang_server's record of the newest start (<home>/starts/last.json): kept in "
                             "environment.server_start when it is the start of the server that runs now")
    args = parser.parse_args(argv)
    for name in ("runs", "concurrency", "max_tokens", "input_len"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0 or args.timeout <= 0:
        parser.error("--warmup must be >= 0 and --timeout > 0")
    return args


def process_started(pid: int) -> float | None:
    """When process ``pid`` started (epoch seconds, to a clock tick), from /proc; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    ticks = float(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, after the command's parentheses
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def server_start(path: str) -> dict[str, Any]:
    """The newest start record, compacted, when it is the start of the server that runs now (its main
    process is alive and started when the record says: a record from before a reboot or a crash is not);
    else why not (server_start_unknown)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"server_start_unknown": f"no start record ({path})"}
    except (OSError, ValueError) as exc:
        return {"server_start_unknown": f"{path}: {exc}"}
    launched, pid = record.get("started_epoch"), str(record.get("main_pid") or "")
    alive = process_started(int(pid)) if pid.isdigit() else None
    if launched is None or alive is None or abs(alive - float(launched)) > 2.0:
        return {"server_start_unknown": (f"the newest start record ({record.get('invocation_id', '?')[:12]}) is not "
                                         "the running server's: a start no run has recorded yet")}
    return {"server_start": {
        "invocation_id": record.get("invocation_id"), "started_epoch": launched, "ready_s": record.get("ready_s"),
        "ready_from": record.get("ready_from"), "summary": record.get("summary"),
        "phases": {seg["phase"]: seg["seconds"] for seg in record.get("phases", [])},
        "weights": [{k: w.get(k) for k in ("model", "type", "elapsed_s", "mem_usage_gib")} for w in record.get("weights", [])],
        "cuda_graphs_s": round(sum(g.get("elapsed_s") or 0 for g in record.get("cuda_graphs", [])), 2),
        "jit_messages": (record.get("jit") or {}).get("count")}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    api_key = args.api_key or os.environ.get("SGLANG_API_KEY") or os.environ.get("OPENAI_API_KEY") or None

    def say(text: str, stream: Any = sys.stdout) -> None:
        print(redact(text, api_key), file=stream, flush=True)

    try:
        server = Server(args.url, api_key, args.timeout)
        env_extra: dict[str, Any] = {}
        if args.env_json:
            with open(args.env_json, encoding="utf-8") as handle:
                env_extra = json.load(handle)
            if not isinstance(env_extra, dict):
                raise ValueError(f"--env-json {args.env_json} must hold a JSON object")
    except (OSError, ValueError) as exc:
        say(f"{TOOL}: {exc}", sys.stderr)
        return 2

    started = utc_now()
    environment: dict[str, Any] = dict(env_extra)
    environment["client"] = {"tool": TOOL, "python": sys.version.split()[0]}
    if args.start_record:
        environment.update(server_start(args.start_record))
    model = "default"
    try:
        info_before: dict[str, Any] | None = server.get_json("/server_info")
        environment.update(server_environment(info_before))
        model = str(info_before.get("served_model_name") or model)
    except BenchError as exc:
        info_before = None
        environment["server_info_error"] = str(exc)

    def prompt_for(index: int) -> str:
        return args.prompt if args.prompt is not None else make_prompt(args.input_len, str(index))

    failure: str | None = None
    warmup_runs = asyncio.run(run_batch(server, args.api, args.max_tokens, lambda i: prompt_for(-1 - i), model,
                                        list(range(args.warmup)), min(args.concurrency, max(args.warmup, 1))))
    warmup_errors = [r.error for r in warmup_runs if not r.ok]
    runs: list[Run] = []
    if warmup_errors:
        failure = f"warmup failed: {warmup_errors[0]}"
    else:
        runs = asyncio.run(run_batch(server, args.api, args.max_tokens, prompt_for, model, list(range(args.runs)),
                                     args.concurrency))
        bad = [r for r in runs if not r.ok]
        if bad:
            failure = (f"{len(bad)} of {len(runs)} attempted runs failed ({args.runs} requested); "
                       f"first error (run {bad[0].index}): {bad[0].error}")

    stats = summarize(runs)
    try:
        server_accept = avg_accept_from(server.get_json("/server_info")) if info_before is not None else None
    except BenchError:
        server_accept = None
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "label": args.label,
        "ok": failure is None,
        "failure": failure,
        "started_at": started,
        "finished_at": utc_now(),
        "config": {
            "url": server.url, "api": args.api,
            "endpoint": "/generate" if args.api == "native" else "/v1/chat/completions",
            "runs": args.runs, "warmup": args.warmup, "concurrency": args.concurrency,
            "max_tokens": args.max_tokens, "input_len": None if args.prompt is not None else args.input_len,
            "prompt_chars": len(args.prompt) if args.prompt is not None else None,
            "timeout_s": args.timeout, "sends_authorization": bool(api_key), "model": model,
        },
        "concurrency": args.concurrency,
        "runs_attempted": len(runs),
        "warmup_errors": warmup_errors,
        **stats,
        "server_avg_spec_accept_length": server_accept,
        "runs": [r.public() for r in runs],
        "environment": environment,
    }
    result = redact(result, api_key)
    write_error = None
    if args.json_out:
        try:
            with open(args.json_out, "w", encoding="utf-8") as handle:
                json.dump(result, handle, indent=1)
                handle.write("\n")
        except OSError as exc:
            write_error = f"cannot write --json {args.json_out}: {exc}"

    say(f"{TOOL} [{args.label or 'no label'}] {args.api} {server.url} "
        f"concurrency={args.concurrency} max_tokens={args.max_tokens}")
    if stats["ok_runs"]:
        say(f"mean {fmt(stats['mean_tok_s'])} tok/s (range {fmt(stats['min_tok_s'])}-{fmt(stats['max_tok_s'])}) "
            f"over {stats['ok_runs']} runs")
        say(f"median {fmt(stats['median_tok_s'])} tok/s, stdev {fmt(stats['stdev_tok_s'], 2)}, "
            f"decode {fmt(stats['mean_decode_tok_s'])} tok/s, TTFT {fmt(stats['mean_ttft_ms'])} ms, "
            f"TPOT {fmt(stats['mean_tpot_ms'], 2)} ms, accept length "
            f"{fmt(stats['accept_length'] if stats['accept_length'] is not None else server_accept, 2)}, "
            f"aggregate {fmt(stats['aggregate_tok_s'])} tok/s")
    if failure:
        say(f"{TOOL}: FAILED: {failure}", sys.stderr)
    if write_error:
        say(f"{TOOL}: {write_error}", sys.stderr)
    return 1 if failure or write_error else 0
