"""SGLang 0.5.9's Prometheus metrics as the SIMULATOR (TEST ONLY) serves them on /metrics with
--enable-metrics: the names, types and labels of ``sglang/srt/metrics/collector.py`` for a unified
engine (no PD disaggregation, LoRA, grammar or hierarchical cache), the values from the engine.

What a real server exports and when (prometheus_client in multiprocess mode: a series appears once
it has been set or observed):
- SchedulerMetricsCollector.log_stats(): every gauge, at each decode log (every
  --decode-log-interval steps); labels model_name, engine_type, tp_rank, pp_rank, moe_ep_rank.
  spec_accept_length / spec_accept_rate are the window since the previous decode log.
- TokenizerMetricsCollector: per finished request the token counters, the request counter and the
  end-to-end and retraction histograms; time to first token at the first token, inter-token
  latency at each later chunk; aborted requests; labels model_name (+ --extra-metric-labels).
- queue_time_seconds when a request enters a batch, cuda_graph_passes_total per decode forward,
  realtime_tokens_total per log interval, cache_config_info once at start.
tests/roles/sglang_server/test_sim_metrics.py compares this module's output with SGLang's source.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

# TokenizerMetricsCollector's default buckets (collector.py).
TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400]
ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
               0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000]
RETRACTION_BUCKETS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 75, 100]
# SchedulerMetricsCollector.queue_time's buckets (collector.py).
QUEUE_BUCKETS = [0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400,
                 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000]
# The simulated KV pool (a real server sizes it from --mem-fraction-static and the GPUs' memory).
DEFAULT_MAX_TOTAL_TOKENS = 1_000_000
PAGE_SIZE = 1

# The gauges SchedulerMetricsCollector.log_stats() sets on every decode log, in its order (not
# engine_load_weights_time: 0.5.9 never fills SchedulerStats.engine_load_weights_time, so it stays unset).
SCHEDULER_GAUGES = [
    "num_running_reqs", "num_used_tokens", "token_usage", "pending_prealloc_token_usage", "swa_token_usage",
    "mamba_usage", "decode_sum_seq_lens", "gen_throughput", "num_queue_reqs", "num_grammar_queue_reqs",
    "num_running_reqs_offline_batch", "cache_hit_rate", "max_total_num_tokens", "spec_accept_length",
    "spec_accept_rate", "num_prefill_prealloc_queue_reqs", "num_prefill_inflight_queue_reqs",
    "num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs", "kv_transfer_speed_gb_s",
    "kv_transfer_latency_ms", "kv_transfer_bootstrap_ms", "kv_transfer_alloc_ms", "kv_transfer_total_mb",
    "num_retracted_reqs", "num_paused_reqs", "utilization", "engine_startup_time",
    "new_token_ratio", "is_cuda_graph", "num_unique_running_routing_keys",
]


def _fmt(value: float) -> str:
    """prometheus_client's floatToGoString."""
    if value == float("inf"):
        return "+Inf"
    if isinstance(value, int):
        return f"{value}.0"
    text = repr(float(value))
    return text


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


class Histogram:
    def __init__(self, buckets: list[float]) -> None:
        self.bounds = [float(b) for b in buckets] + [float("inf")]
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0

    def observe(self, value: float, count: int = 1, sum_value: float | None = None) -> None:
        """prometheus_client's observe; count/sum_value as SGLang's observe_inter_token_latency."""
        self.sum += value * count if sum_value is None else sum_value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += count
                break


class SimMetrics:
    """The engine's state as SGLang's /metrics text (Prometheus exposition format 0.0.4)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        args = server.args
        self.started = time.time()
        extra = args.get("extra_metric_labels") or {}
        if isinstance(extra, str):
            extra = json.loads(extra)
        name = args.get("served_model_name") or args.get("model_path")
        self.scheduler_labels = {"model_name": name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
                                 "moe_ep_rank": "0", **extra}
        self.tokenizer_labels = {"model_name": name, **extra}
        self.max_total_tokens = int(args.get("max_total_tokens") or os.environ.get(
            "SGLANG_SIM_MAX_TOTAL_TOKENS", DEFAULT_MAX_TOTAL_TOKENS))
        self.counters: dict[str, float] = {"prompt_tokens": 0, "generation_tokens": 0, "num_requests": 0}
        self.aborted = 0
        self.realtime = {"prefill_compute": 0, "decode": 0}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.retractions = Histogram(RETRACTION_BUCKETS)
        self.queue = Histogram(QUEUE_BUCKETS)
        self.seen_forwards = 0
        self.seen_spec = (0, 0)
        self.accept_length = 0.0
        self.accept_rate = 0.0
        self.any_request = False

    def track(self, req: Any) -> None:
        """Observe a request's tokens as the engine emits them (first token, later chunks, the end)."""
        emit = req.emit
        last = [req.created_wall]

        def observed(count: int) -> int:
            before = req.completion_tokens
            done = emit(count)
            now = time.time()
            if done and before == 0:
                ttft = now - req.created_wall
                self.ttft.observe(ttft)
                self.queue.observe(max(0.0, ttft - self.server.engine.ttft))
                self.realtime["prefill_compute"] += req.prompt_tokens
                self.any_request = True
            elif done:
                self.itl.observe((now - last[0]) / done, count=done, sum_value=now - last[0])
                self.realtime["decode"] += done
            last[0] = now
            if req.finished and not req.aborted:
                self.counters["prompt_tokens"] += req.prompt_tokens
                self.counters["generation_tokens"] += req.completion_tokens
                self.counters["num_requests"] += 1
                self.e2e.observe(now - req.created_wall)
                self.retractions.observe(0)
            return done

        req.emit = observed

    def abort(self) -> None:
        self.aborted += 1

    def _window(self) -> None:
        """spec_accept_length/rate: the window of the engine's last decode log (mostrecent)."""
        engine = self.server.engine
        spec = (engine.spec_steps, engine.spec_tokens)
        if spec != self.seen_spec and spec[0] > self.seen_spec[0]:
            length = (spec[1] - self.seen_spec[1]) / (spec[0] - self.seen_spec[0])
            self.accept_length, self.accept_rate = length, length / max(1, engine.max_k)
        self.seen_spec = spec

    def gauges(self) -> dict[str, float]:
        engine = self.server.engine
        running, waiting = self.server._load_counts()
        used = sum(r.prompt_tokens + r.completion_tokens for r in engine.running + engine.joining)
        cap = engine.max_running or 0
        self._window()
        values = {name: 0.0 for name in SCHEDULER_GAUGES}
        values.update({
            "num_running_reqs": running, "num_used_tokens": used, "token_usage": round(used / self.max_total_tokens, 4),
            "decode_sum_seq_lens": used, "gen_throughput": engine.last_gen_throughput, "num_queue_reqs": waiting,
            "max_total_num_tokens": self.max_total_tokens, "spec_accept_length": self.accept_length,
            "spec_accept_rate": self.accept_rate, "utilization": round(running / cap, 4) if cap else 0.0,
            "engine_startup_time": self.server.settings.load_seconds,
            "new_token_ratio": 0.7,
            "is_cuda_graph": 1.0 if engine.running else 0.0,
            "num_unique_running_routing_keys": 0,
        })
        return values

    def render(self) -> str:
        """The exposition text (served once the server is ready, as SGLang's HTTP server starts then)."""
        out: list[str] = []
        sl, tl = self.scheduler_labels, self.tokenizer_labels

        def family(name: str, kind: str, doc: str) -> None:
            out.append(f"# HELP sglang:{name} {doc}")
            out.append(f"# TYPE sglang:{name} {kind}")

        def histogram(name: str, doc: str, hist: Histogram, labels: dict[str, str]) -> None:
            family(name, "histogram", doc)
            acc = 0
            for bound, count in zip(hist.bounds, hist.counts, strict=True):
                acc += count
                out.append(f"sglang:{name}_bucket{_labels({**labels, 'le': _fmt(bound)})} {_fmt(float(acc))}")
            out.append(f"sglang:{name}_count{_labels(labels)} {_fmt(float(acc))}")
            out.append(f"sglang:{name}_sum{_labels(labels)} {_fmt(hist.sum)}")

        for name, value in self.gauges().items():
            family(name, "gauge", f"The {name.replace('_', ' ')} (simulated).")
            out.append(f"sglang:{name}{_labels(sl)} {_fmt(float(value))}")
        family("cache_config_info", "gauge", "Information about the cache configuration.")
        num_pages = self.max_total_tokens // PAGE_SIZE
        out.append(f"sglang:cache_config_info{_labels({'page_size': PAGE_SIZE, 'num_pages': num_pages})} 1.0")
        forwards = self.server.engine.forward_ct
        family("cuda_graph_passes_total", "counter", "Total number of forward passes categorized by CUDA graph.")
        out.append(f"sglang:cuda_graph_passes_total{_labels({**sl, 'mode': 'decode_cuda_graph'})} "
                   f"{_fmt(float(forwards))}")
        if self.any_request:
            family("realtime_tokens_total", "counter", "Total number of tokens processed.")
            for mode, value in self.realtime.items():
                out.append(f"sglang:realtime_tokens_total{_labels({**sl, 'mode': mode})} {_fmt(float(value))}")
            histogram("queue_time_seconds", "Histogram of queueing time in seconds.", self.queue, sl)
            histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft, tl)
            histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl, tl)
        if self.counters["num_requests"]:
            for name, doc in (("prompt_tokens", "Number of prefill tokens processed."),
                              ("generation_tokens", "Number of generation tokens processed."),
                              ("num_requests", "Number of requests processed.")):
                family(f"{name}_total", "counter", doc)
                out.append(f"sglang:{name}_total{_labels(tl)} {_fmt(float(self.counters[name]))}")
            histogram("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                      self.e2e, tl)
            histogram("num_retractions", "Histogram of retraction counts per request.", self.retractions, tl)
        if self.aborted:
            family("num_aborted_requests_total", "counter", "Number of requests aborted.")
            out.append(f"sglang:num_aborted_requests_total{_labels(tl)} {_fmt(float(self.aborted))}")
        return "\n".join(out) + "\n"
