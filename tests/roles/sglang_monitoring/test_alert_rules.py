"""The monitoring role's alert rules under the real promtool (Debian's prometheus package, extracted by
tests/harness/promtool.py): every alert fires when it should and stays silent when it should not, and
the rules, rendered with the role's defaults, pass `promtool check rules`.

Each case gives input series (promtool's expanding notation, one sample a minute), the time to
evaluate at, and which hosts must be firing with which value in the summary; every other host of the
case must be silent. The annotations expected are the rule's own templates with the labels and the
value filled in, so a broken template fails too.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path

import jinja2
import pytest
import yaml

import promtool as promtool_harness
import sources
from repo import ROLES

ROLE = ROLES / "sglang_monitoring"


def render_rules(overrides: dict | None = None) -> str:
    """templates/sglang-alerts.rules.yml.j2 with the role's defaults (its own [% %] delimiters)."""
    text = (ROLE / "templates" / "sglang-alerts.rules.yml.j2").read_text()
    header, _, body = text.partition("\n")
    assert header.startswith("#jinja2:")
    env = jinja2.Environment(variable_start_string="[%", variable_end_string="%]", undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values.update(overrides or {})
    return env.from_string(body).render(**values)


@pytest.fixture(scope="module")
def promtool() -> Path:
    return promtool_harness.promtool()


@pytest.fixture(scope="module")
def rules(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("rules") / "sglang-alerts.rules.yml"
    path.write_text(render_rules())
    loaded = {r["alert"]: r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]}
    return path, loaded


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def gpu(host: str, job: str = "sglang_server", **extra: str) -> dict[str, str]:
    port = {"sglang_server": 30000, "node": 9100, "sglang_router": 29000, "dcgm": 9400}[job]
    return {"job": job, "host": host, "instance": f"{host}:{port}", **extra}


def sched(host: str) -> dict[str, str]:
    return gpu(host, model_name="kimi", engine_type="unified", tp_rank="0", pp_rank="0", moe_ep_rank="0")


def histogram(name: str, host: str, counts: dict[str, int]) -> list[dict[str, str]]:
    """Cumulative buckets growing by `counts[le]` observations a minute."""
    return [series(f"{name}_bucket", {**gpu(host, model_name="kimi"), "le": le}, f"0+{n}x30")
            for le, n in counts.items()]


def fill(template: str, labels: dict[str, str], value: str) -> str:
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
    return re.sub(r"\{\{ \$value[^}]*\}\}", value, out)


# alert -> (input series, eval time, {firing labels (beyond alertname/severity): value as the summary shows it})
CASES = {
    "SGLangServerDown": (
        [series("up", gpu("gpu1"), "1 1 0 0 0 0 0"), series("up", gpu("gpu2"), "1 1 1 1 1 1 1")],
        "4m", [(gpu("gpu1"), "0")]),
    "SGLangServerDown/resolved": (
        [series("up", gpu("gpu1"), "1 0 0 0 1 1 1")], "6m", []),
    "SGLangServerDown/pending": (
        [series("up", gpu("gpu1"), "1 1 0 0 0")], "2m", []),
    "SGLangRouterDown": (
        [series("up", gpu("router", "sglang_router"), "1 0 0 0 0"), series("up", gpu("router2", "sglang_router"), "1x5")],
        "4m", [(gpu("router", "sglang_router"), "0")]),
    "NodeDown": (
        [series("up", gpu("gpu1", "node"), "1 0 0 0 0 0"), series("up", gpu("gpu2", "node"), "1 0 1 1 1 1")],
        "4m", [(gpu("gpu1", "node"), "0")]),
    "SGLangRequestsAborted": (
        [series("sglang:num_aborted_requests_total", gpu("gpu1", model_name="kimi"), "0+1x30"),
         series("sglang:num_requests_total", gpu("gpu1", model_name="kimi"), "0+9x30"),
         series("sglang:num_aborted_requests_total", gpu("gpu2", model_name="kimi"), "3x30"),
         series("sglang:num_requests_total", gpu("gpu2", model_name="kimi"), "0+9x30"),
         # every request aborted and none finished: the series of finished requests does not exist
         series("sglang:num_aborted_requests_total", gpu("gpu3", model_name="kimi"), "0+2x30")],
        "15m", [({"host": "gpu1"}, "10%"), ({"host": "gpu3"}, "100%")]),
    # Worker URLs as the router labels them; "-1": a worker removed from the router (tasks_from: leave).
    "SGLangRouterWorkerUnhealthy": (
        [series("smg_worker_health", gpu("router", "sglang_router", worker="http://10.0.0.11:30000"), "1 1 0x10"),
         series("smg_worker_health", gpu("router", "sglang_router", worker="http://10.0.0.12:30000"), "1x12"),
         series("smg_worker_health", gpu("router", "sglang_router", worker="http://10.0.0.13:30000"), "1 1 -1x10")],
        "8m", [(gpu("router", "sglang_router", worker="http://10.0.0.11:30000"), "0")]),
    "SGLangRouterWorkerUnhealthy/pending": (
        [series("smg_worker_health", gpu("router", "sglang_router", worker="http://10.0.0.11:30000"), "1 1 0x10")],
        "5m", []),
    "SGLangRouterWorkerUnhealthy/recovered": (
        [series("smg_worker_health", gpu("router", "sglang_router", worker="http://10.0.0.11:30000"), "1 0 0 0 1x8")],
        "8m", []),
    "SGLangRouterCircuitOpen": (  # opened at 2m, half-open at 3m, closed at 4m: still named at 8m
        [series("smg_worker_cb_state", gpu("router", "sglang_router", worker="http://10.0.0.11:30000"), "0 0 1 2 0x10"),
         series("smg_worker_cb_state", gpu("router", "sglang_router", worker="http://10.0.0.12:30000"), "0x14"),
         series("smg_worker_cb_state", gpu("router", "sglang_router", worker="http://10.0.0.13:30000"), "0 0 -1x12")],
        "8m", [(gpu("router", "sglang_router", worker="http://10.0.0.11:30000"), "1")]),
    "SGLangRouterCircuitOpen/half-open": (
        [series("smg_worker_cb_state", gpu("router", "sglang_router", worker="http://10.0.0.11:30000"), "0 2 2 0x10")],
        "4m", []),
    "SGLangRouterCircuitOpen/resolved": (
        [series("smg_worker_cb_state", gpu("router", "sglang_router", worker="http://10.0.0.11:30000"), "0 0 1 2 0x14")],
        "14m", []),
    "SGLangRouterErrors": (
        [series("smg_router_request_errors_total", gpu("router", "sglang_router"), "0+1x30"),
         series("smg_router_requests_total", gpu("router", "sglang_router"), "0+10x30"),
         series("smg_router_request_errors_total", gpu("router2", "sglang_router"), "0x30"),
         series("smg_router_requests_total", gpu("router2", "sglang_router"), "0+10x30")],
        "15m", [({"host": "router"}, "10%")]),
    "SGLangTimeToFirstTokenHigh": (
        histogram("sglang:time_to_first_token_seconds", "gpu1", {"1": 0, "10": 0, "20": 10, "+Inf": 10})
        + histogram("sglang:time_to_first_token_seconds", "gpu2", {"1": 10, "10": 10, "20": 10, "+Inf": 10}),
        "15m", [({"host": "gpu1"}, "19.9s")]),
    "SGLangInterTokenLatencyHigh": (
        histogram("sglang:inter_token_latency_seconds", "gpu1", {"0.02": 0, "0.2": 0, "0.4": 50, "+Inf": 50})
        + histogram("sglang:inter_token_latency_seconds", "gpu2", {"0.02": 50, "0.2": 50, "0.4": 50, "+Inf": 50}),
        "15m", [({"host": "gpu1"}, "398ms")]),
    "SGLangKVCacheNearlyFull": (
        [series("sglang:token_usage", sched("gpu1"), "0.95x20"), series("sglang:token_usage", sched("gpu2"), "0.5x20"),
         series("sglang:token_usage", sched("gpu3"), "0.95 0.95 0.95 0.5x17")],
        "15m", [({"host": "gpu1"}, "95%")]),
    "SGLangQueueGrowing": (
        [series("sglang:num_queue_reqs", sched("gpu1"), "60+1x20"),
         series("sglang:num_queue_reqs", sched("gpu2"), "100-2x20"),  # long but draining
         series("sglang:num_queue_reqs", sched("gpu3"), "10x20")],
        "12m", [({"host": "gpu1"}, "72")]),
    "SGLangAcceptLengthLow": (
        [series("sglang:spec_accept_length", sched("gpu1"), "1.5x30"),
         series("sglang_bench_accept_length", gpu("gpu1", "node", label="eagle3"), "2.4x30"),
         series("sglang:spec_accept_length", sched("gpu2"), "2.3x30"),
         series("sglang_bench_accept_length", gpu("gpu2", "node", label="eagle3"), "2.4x30"),
         series("sglang:spec_accept_length", sched("gpu3"), "0x30"),  # no speculation
         series("sglang_bench_accept_length", gpu("gpu3", "node", label="eagle3"), "2.4x30"),
         series("sglang:spec_accept_length", sched("gpu4"), "1.5x30")],  # no benchmark yet
        "20m", [({"host": "gpu1"}, "1.50")]),
    "SGLangThroughputCollapsed": (
        [series("sglang:gen_throughput", sched("gpu1"), "10x20"), series("sglang:num_running_reqs", sched("gpu1"), "4x20"),
         series("sglang_bench_tokens_per_second", gpu("gpu1", "node", label="eagle3"), "96x20"),
         series("sglang:gen_throughput", sched("gpu2"), "10x20"), series("sglang:num_running_reqs", sched("gpu2"), "0x20"),
         series("sglang_bench_tokens_per_second", gpu("gpu2", "node", label="eagle3"), "96x20"),
         series("sglang:gen_throughput", sched("gpu3"), "200x20"), series("sglang:num_running_reqs", sched("gpu3"), "4x20"),
         series("sglang_bench_tokens_per_second", gpu("gpu3", "node", label="eagle3"), "96x20")],
        "15m", [({"host": "gpu1"}, "10.0")]),
    "SGLangBenchRegression": (
        [series("sglang_bench_tokens_per_second", gpu("gpu1", "node", label="eagle3"), "96 76.8x2"),
         series("sglang_bench_baseline_tokens_per_second", gpu("gpu1", "node", label="eagle3", source="history"), "96x3"),
         series("sglang_bench_tokens_per_second", gpu("gpu2", "node", label="eagle3"), "90x3"),
         series("sglang_bench_baseline_tokens_per_second", gpu("gpu2", "node", label="eagle3", source="configured"), "96x3"),
         series("sglang_bench_tokens_per_second", gpu("gpu3", "node", label="eagle3"), "50x3")],  # first result: no baseline
        "1m", [({"host": "gpu1", "label": "eagle3"}, "76.8")]),
    "SGLangModelsDiskFilling": (
        [series("node_filesystem_avail_bytes", gpu("gpu1", "node", mountpoint="/srv"), "5x20"),
         series("node_filesystem_size_bytes", gpu("gpu1", "node", mountpoint="/srv"), "100x20"),
         series("sglang_models_filesystem", gpu("gpu1", "node", mountpoint="/srv"), "1x20"),
         series("node_filesystem_avail_bytes", gpu("gpu1", "node", mountpoint="/"), "1x20"),  # not the models'
         series("node_filesystem_size_bytes", gpu("gpu1", "node", mountpoint="/"), "100x20"),
         series("node_filesystem_avail_bytes", gpu("gpu2", "node", mountpoint="/srv"), "50x20"),
         series("node_filesystem_size_bytes", gpu("gpu2", "node", mountpoint="/srv"), "100x20"),
         series("sglang_models_filesystem", gpu("gpu2", "node", mountpoint="/srv"), "1x20")],
        "15m", [(gpu("gpu1", "node", mountpoint="/srv"), "5%")]),
    "GPUXidError": (
        [series("DCGM_FI_DEV_XID_ERRORS", gpu("gpu1", "dcgm", gpu="0"), "0 0 79 79"),
         series("DCGM_FI_DEV_XID_ERRORS", gpu("gpu1", "dcgm", gpu="1"), "0 0 0 0")],
        "3m", [({"host": "gpu1", "gpu": "0"}, "79")]),
}


def test_every_alert_has_a_case(rules) -> None:
    _path, loaded = rules
    assert {name.split("/")[0] for name in CASES} == set(loaded)


def test_rules_pass_promtool_check(promtool, rules) -> None:
    path, _ = rules
    proc = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules[1])} rules found" in proc.stdout


@pytest.mark.parametrize("case", sorted(CASES))
def test_alert_fires_when_it_should_and_only_then(case, promtool, rules, tmp_path) -> None:
    path, loaded = rules
    alert = case.split("/")[0]
    rule = loaded[alert]
    input_series, eval_time, firing = CASES[case]
    expected = []
    for labels, value in firing:
        full = {**labels, "severity": rule["labels"]["severity"]}
        expected.append({"exp_labels": full, "exp_annotations": {
            key: fill(text, full, value) for key, text in rule["annotations"].items()}})
    test = {"rule_files": [str(path)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": input_series,
                       "alert_rule_test": [{"eval_time": eval_time, "alertname": alert, "exp_alerts": expected}]}]}
    if firing:  # and not yet at the start: every alert needs its condition first
        test["tests"][0]["alert_rule_test"].insert(0, {"eval_time": "0m", "alertname": alert, "exp_alerts": []})
    spec = tmp_path / "test.yml"
    spec.write_text(yaml.safe_dump(test, sort_keys=False))
    proc = subprocess.run([str(promtool), "test", "rules", str(spec)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_thresholds_come_from_the_variables() -> None:
    rendered = yaml.safe_load(render_rules({"sglang_monitoring_kv_usage_ratio": 0.75,
                                            "sglang_monitoring_bench_label": "baseline",
                                            "sglang_monitoring_down_for": "30s"}))
    rules = {r["alert"]: r for g in rendered["groups"] for r in g["rules"]}
    assert rules["SGLangKVCacheNearlyFull"]["expr"].endswith("> 0.75")
    assert 'label="baseline"' in rules["SGLangAcceptLengthLow"]["expr"]
    assert rules["SGLangServerDown"]["for"] == "30s"


# Where each gateway the router role runs registers its metrics, in its PyPI sdist: the default (smg, its
# pinned version) and sglang-router 0.3.2 (still selectable: sglang_router_distribution).
METRICS_SOURCES = {"smg": "smg-{version}/model_gateway/src/observability/metrics.rs",
                   "sglang-router": "sglang_router-{version}/src/observability/metrics.rs"}


@pytest.mark.parametrize("dist", sorted(METRICS_SOURCES))
def test_router_metric_names_are_the_gateways_own(rules, dist) -> None:
    """Every smg_* metric the rules read is one the gateway registers (its Rust source, from the PyPI sdist): a
    renamed or misspelt metric would leave its alert silent forever."""
    path, _ = rules
    defaults = yaml.safe_load((ROLES / "sglang_router" / "defaults" / "main.yml").read_text())
    assert defaults["sglang_router_distribution"] == "smg"
    version = defaults["sglang_router_version"] if dist == "smg" else "0.3.2"
    with tarfile.open(sources.sdist(dist, version)) as tar:
        member = tar.extractfile(METRICS_SOURCES[dist].format(version=version))
        registered = set(re.findall(r'"(smg_\w+)"', member.read().decode()))
    used = set(re.findall(r"\b(smg_\w+)", path.read_text()))
    assert {"smg_worker_health", "smg_worker_cb_state", "smg_router_requests_total"} <= used
    assert used <= registered, sorted(used - registered)
