"""Benchmark an SGLang server's generation speed: the number to compare after every upgrade.

Why this and not `python -m sglang.bench_serving`: the figure the project tracks is the
single-request speed users feel (completion tokens / time from sending the request to the
last token), with EAGLE-3 acceptance alongside, on a server that may be protected by an API
key, from a host that may only have bare python3.  So this is standard library only, counts
tokens from the server's own counters (with EAGLE-3 one stream event carries several tokens,
so counting events would be wrong), and writes one JSON document that also records what was
measured: the server's version and arguments (from /server_info, which SGLang 0.5.9 to 0.5.23 serve;
its older name get_server_info is deprecated) and the host facts passed in with --env-json.

APIs: `native` POSTs SGLang's /generate with "stream": true; `openai` POSTs
/v1/chat/completions (the endpoint production clients use) with stream_options
include_usage and continuous_usage_stats.  Both send temperature 0 and ignore_eos, so every
run produces exactly --max-tokens tokens.

Per run: tokens (meta_info.completion_tokens / usage.completion_tokens); tok_s = tokens /
(last token time - send time); decode_tok_s = tokens after the first event / time after the
first event; ttft_ms; tpot_ms; accept_length (meta_info.spec_accept_length, or
completion_tokens / spec_verify_ct; native only).  The "last token time" is the arrival of
the stream's last data event before [DONE]; SGLang sends the finish and usage events in the
same iteration as the last tokens.  At --concurrency C, --runs requests are sent with C in
flight; aggregate_tok_s = all tokens / (first send to last token).

Failures (HTTP errors, error events, timeouts, a stream that ends without [DONE], a server
that reports no token count) fail that run; no new runs start after the first failure; the
results of finished runs are kept in the JSON; the exit status is 1.  The API key (--api-key,
or SGLANG_API_KEY / OPENAI_API_KEY) is sent as a Bearer token and scrubbed from everything
printed or written.

Example:
    sglang_bench.py --url http://127.0.0.1:30000 --runs 10 --max-tokens 256 --label eagle3 --json out.json
"""

from __future__ import annotations

from .cli import main
from .protocol import SCHEMA, TOOL, BenchError, Run
from .results import summarize
from .runner import run_batch, run_once
from .transport import Server

# The result schema, a measured request and its summary (what readers of the result documents and
# the tests use), the runner and the command line.
__all__ = ["SCHEMA", "TOOL", "BenchError", "Run", "Server", "main", "run_batch", "run_once", "summarize"]
