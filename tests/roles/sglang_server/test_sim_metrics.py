"""The simulator's /metrics against SGLang 0.5.9's source: the same metric names, types and labels.

What SGLang exports is read from its sdist, not written down here: every metric object of
sglang/srt/metrics/collector.py (name, type, label names), the label sets the scheduler and the
tokenizer manager give their collectors, and which metrics a unified server sets on its normal path
(the statements of SchedulerMetricsCollector.log_stats, the tokenizer collector's per-request
observers and the scheduler's per-batch observers that run unconditionally). The simulator must
expose exactly those, with the same types and labels, and values that follow its engine.
"""

from __future__ import annotations

import ast
import re
import tarfile
import time
from pathlib import Path

import pytest
import requests

TYPES = {"Gauge": "gauge", "Counter": "counter", "Histogram": "histogram", "Summary": "summary",
         "GaugeHistogram": "gaugehistogram"}
# The observers a unified server calls for every request or batch (scheduler.py, tokenizer_manager.py,
# scheduler_output_processor_mixin.py, scheduler_metrics_mixin.py); the others need PD disaggregation,
# LoRA, grammars, hierarchical cache, EPLB or device timers (ENABLE_METRICS_DEVICE_TIMER).
PATH_METHODS = {
    "SchedulerMetricsCollector": ["log_stats", "observe_queue_time", "increment_cuda_graph_pass",
                                  "increment_realtime_tokens", "emit_cache_config_info"],
    "TokenizerMetricsCollector": ["observe_one_finished_request", "observe_time_to_first_token",
                                  "observe_inter_token_latency", "observe_one_aborted_request"],
}
# Set by log_stats only when a value exists (an SLO setting, a LoRA pool) or through the routing-key
# GaugeHistogram: a unified server with the role's flags does not export them.
NOT_ON_THE_PATH = {"sglang:max_running_requests_under_SLO", "sglang:lora_pool_slots_used",
                   "sglang:lora_pool_slots_total", "sglang:lora_pool_utilization",
                   "sglang:routing_key_running_req_count", "sglang:routing_key_all_req_count"}


def source(sdist: Path, rel: str) -> ast.Module:
    """A module of the sdist's sglang/srt (the `sdist` fixture: SGLang 0.5.9 from PyPI, hash-checked)."""
    with tarfile.open(sdist, "r:gz") as tar:
        top = tar.getnames()[0].split("/")[0]
        member = tar.extractfile(f"{top}/sglang/srt/{rel}")
        assert member is not None, rel
        return ast.parse(member.read().decode())


def label_dict_keys(tree: ast.Module, function: str | None = None) -> list[str]:
    """Keys of the first `labels = {...}` literal (inside `function` when given)."""
    scope = tree
    if function:
        scope = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    for node in ast.walk(scope):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "labels"
                and isinstance(node.value, ast.Dict)):
            return [k.value for k in node.value.keys]
    raise AssertionError(f"no labels literal in {function}")


def labelnames(expr: ast.expr, base: list[str]) -> list[str]:
    """The label names of a metric: labels.keys(), list(labels.keys()) + [...], [*labels.keys(), ...], literals."""
    text = ast.unparse(expr)
    if text in ("labels.keys()", "list(labels.keys())", "*labels.keys()"):
        return list(base)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return labelnames(expr.left, base) + labelnames(expr.right, base)
    if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
        return [n for e in expr.elts for n in (labelnames(e, base) if isinstance(e, ast.Starred) else [e.value])]
    raise AssertionError(f"label names the test cannot read: {text}")


def direct_statements(body: list[ast.stmt]):
    """Simple statements that always run: inside for/with bodies, not inside if/try branches."""
    for stmt in body:
        if isinstance(stmt, (ast.For, ast.With)):
            yield from direct_statements(stmt.body)
        elif not isinstance(stmt, (ast.If, ast.Try, ast.While, ast.FunctionDef)):
            yield stmt


@pytest.fixture(scope="module")
def sglang_metrics(sdist: Path) -> dict[str, object]:
    """{'all': {name: (type, labels)}, 'path': set of names a unified server sets}."""
    collector = source(sdist, "metrics/collector.py")
    base = {"SchedulerMetricsCollector": label_dict_keys(source(sdist, "managers/scheduler_metrics_mixin.py")),
            "TokenizerMetricsCollector": label_dict_keys(source(sdist, "managers/tokenizer_manager.py"),
                                                         "init_metric_collector_watchdog")}
    everything: dict[str, tuple[str, list[str]]] = {}
    attrs: dict[tuple[str, str], str] = {}
    path: set[str] = set()
    for cls in (n for n in collector.body if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id in TYPES):
                continue
            kw = {k.arg: k.value for k in node.value.keywords}
            if "name" not in kw or not isinstance(kw["name"], ast.Constant):
                continue
            name = kw["name"].value
            labels = labelnames(kw["labelnames"], base.get(cls.name, []))
            everything[name] = (TYPES[node.value.func.id], labels)
            target = node.targets[0]
            if isinstance(target, ast.Attribute):
                attrs[(cls.name, target.attr)] = name
        for method in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in PATH_METHODS.get(cls.name, [])):
            for stmt in direct_statements(method.body):
                for node in ast.walk(stmt):
                    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                            and (cls.name, node.attr) in attrs):
                        path.add(attrs[(cls.name, node.attr)])
    return {"all": everything, "path": path - NOT_ON_THE_PATH, "base": base}


def parse_exposition(text: str) -> dict[str, dict[str, object]]:
    """{family: {'type': ..., 'labels': set of label names, 'samples': [(name, labels, value)]}}."""
    families: dict[str, dict[str, object]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            families[name] = {"type": kind, "labels": set(), "samples": []}
        elif line and not line.startswith("#"):
            match = re.fullmatch(r'([^{ ]+)(?:\{(.*)\})? (\S+)', line)
            assert match, line
            name, raw, value = match.groups()
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', raw or ""))
            family = next(f for f in families if name == f or name in (f + "_bucket", f + "_sum", f + "_count"))
            families[family]["labels"] |= set(labels) - {"le"}
            families[family]["samples"].append((name, labels, float(value)))
    return families


def scrape(url: str) -> dict[str, dict[str, object]]:
    resp = requests.get(url + "/metrics", timeout=5)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    return parse_exposition(resp.text)


def value(families, name: str, **labels: str) -> float:
    family = next(f for f in families if name == f or name.startswith(f + "_"))
    hits = [v for n, ls, v in families[family]["samples"] if n == name and all(ls.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_the_source_defines_what_the_alerts_need(sglang_metrics) -> None:
    """The names the monitoring role's rules and dashboard read exist with these types."""
    everything = sglang_metrics["all"]
    for name, kind in {"sglang:num_running_reqs": "gauge", "sglang:token_usage": "gauge",
                       "sglang:num_queue_reqs": "gauge", "sglang:gen_throughput": "gauge",
                       "sglang:spec_accept_length": "gauge", "sglang:num_requests_total": "counter",
                       "sglang:num_aborted_requests_total": "counter",
                       "sglang:time_to_first_token_seconds": "histogram",
                       "sglang:inter_token_latency_seconds": "histogram",
                       "sglang:e2e_request_latency_seconds": "histogram"}.items():
        assert everything[name][0] == kind, name
    assert sglang_metrics["base"]["SchedulerMetricsCollector"] == ["model_name", "engine_type", "tp_rank", "pp_rank",
                                                                   "moe_ep_rank"]
    assert sglang_metrics["base"]["TokenizerMetricsCollector"] == ["model_name"]
    assert len(sglang_metrics["path"]) >= 40


def test_metrics_are_served_only_with_enable_metrics_and_once_loaded(start_sim) -> None:
    sim = start_sim()
    assert requests.get(sim.url + "/metrics", timeout=5).status_code == 404
    # SGLang starts its HTTP server after the model loaded (http_server.launch_server): a scrape during
    # the load fails, so Prometheus sees a restarting server as down until it serves again
    sim = start_sim(["--enable-metrics"], env={"SGLANG_SIM_LOAD_SECONDS": "1.5"}, wait="listening on")
    assert requests.get(sim.url + "/metrics", timeout=5).status_code == 503
    sim.wait_for_log("The server is fired up and ready to roll!")
    assert requests.get(sim.url + "/metrics", timeout=5).status_code == 200


def test_sim_metrics_match_sglang_names_types_and_labels(start_sim, sglang_metrics) -> None:
    sim = start_sim(["--enable-metrics", "--api-key", "k-1", "--served-model-name", "kimi",
                     "--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "4",
                     "--decode-log-interval", "5"],
                    env={"SGLANG_SIM_DECODE_TOK_S": "400", "SGLANG_SIM_TTFT_MS": "20",
                         "SGLANG_SIM_ACCEPT_LENGTH": "2.5"})
    # /metrics needs no API key, as in SGLang (utils/auth.py)
    before = scrape(sim.url)
    assert value(before, "sglang:num_running_reqs", model_name="kimi", engine_type="unified", tp_rank="0") == 0
    assert "sglang:num_requests_total" not in before  # no request yet: no series (multiprocess mode)
    headers = {"Authorization": "Bearer k-1"}
    for _ in range(3):
        resp = requests.post(sim.url + "/generate", headers=headers, timeout=30,
                             json={"text": "one two three four", "sampling_params": {"max_new_tokens": 60}})
        assert resp.status_code == 200
    with requests.post(sim.url + "/generate", headers=headers, stream=True, timeout=30,
                       json={"text": "a b", "stream": True, "sampling_params": {"max_new_tokens": 5000}}) as resp:
        next(resp.iter_lines())  # the client goes away mid-stream: SGLang counts an aborted request
    time.sleep(0.5)
    families = scrape(sim.url)

    everything, path = sglang_metrics["all"], sglang_metrics["path"]
    exposed = set(families)
    assert exposed - set(everything) == set(), "names SGLang 0.5.9 does not define"
    assert path - exposed == set(), "names a unified SGLang 0.5.9 server exports that the simulator lacks"
    assert exposed - path == set(), "names the simulator exports off a unified server's path"
    for name in sorted(exposed):
        kind, labels = everything[name]
        assert families[name]["type"] == kind, name
        assert families[name]["labels"] == set(labels), name

    # The values follow the engine: 3 finished requests of 60 tokens, one aborted, EAGLE-3 at 2.5.
    assert value(families, "sglang:num_requests_total", model_name="kimi") == 3
    assert value(families, "sglang:generation_tokens_total", model_name="kimi") == 180
    assert value(families, "sglang:prompt_tokens_total", model_name="kimi") == 12
    assert value(families, "sglang:num_aborted_requests_total", model_name="kimi") == 1
    assert value(families, "sglang:time_to_first_token_seconds_count", model_name="kimi") == 4
    assert value(families, "sglang:e2e_request_latency_seconds_count", model_name="kimi") == 3
    assert 0.02 <= value(families, "sglang:time_to_first_token_seconds_sum", model_name="kimi") / 4 < 0.5
    assert 2.0 <= value(families, "sglang:spec_accept_length", model_name="kimi") <= 3.0
    assert value(families, "sglang:gen_throughput", model_name="kimi") > 0
    assert value(families, "sglang:max_total_num_tokens", model_name="kimi") > 0
    buckets = [v for n, ls, v in families["sglang:e2e_request_latency_seconds"]["samples"] if n.endswith("_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] == 3  # cumulative, +Inf = count
