"""What the drain counts (module sglang_router_drain, count()) in the /v1/loads replies of each pinned release,
and what no release exposes, read from the releases' own source (the PyPI packages, role_render.release_member):

- 0.5.9: entrypoints/v1_loads.py get_loads() asks the scheduler (TokenizerManager.get_loads ->
  Scheduler.get_loads, scheduler_metrics_mixin.py) and answers {timestamp, version, dp_rank_count,
  loads: [GetLoadsReqOutput as a dict, without its timestamp, plus num_total_reqs], aggregate};
- 0.5.17: the real server's reply, recorded on the lent H200 (no aggregate; loads[] from LoadSnapshot.to_dict);
- 0.5.23: the same shape (entrypoints/v1_loads.py, managers/load_snapshot.py), read from the wheel.
Every release reports per rank num_running_reqs, num_waiting_reqs, num_used_tokens and queues.grammar; none
reports the requests its tokenizer manager holds (tokenizing, or streaming out after the scheduler finished).
"""

from __future__ import annotations

import ast
import json

import pytest

from repo import ROOT, load

drain = load("roles/sglang_router/library/sglang_router_drain.py")
release_member = load("tests/roles/sglang_server/role_render.py").release_member
RECORDED = ROOT / "tests/roles/sglang_server/fixtures/sglang-0.5.17/v1-loads.http"
RELEASES = ("0.5.9", "0.5.17", "0.5.23")


def fields(source: str, name: str) -> list[str]:
    """The annotated fields of class `name` in `source`, in order."""
    cls = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == name)
    return [f.target.id for f in cls.body if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)]


def rank_0_5_9(**values: int) -> dict:
    """One loads[] item of 0.5.9: GetLoadsReqOutput's fields (io_struct.py) but its timestamp, which
    v1_loads.py's dict factory drops, its queues section (QueueMetrics), and num_total_reqs."""
    source = release_member("0.5.9", "srt/managers/io_struct.py")
    sections = {"memory", "speculative", "lora", "disaggregation", "queues"}
    core = {f: 0 for f in fields(source, "GetLoadsReqOutput") if f not in sections | {"timestamp"}}
    item = dict(core, queues=dict.fromkeys(fields(source, "QueueMetrics"), 0), **values)
    item["num_total_reqs"] = item["num_running_reqs"] + item["num_waiting_reqs"]
    return item


def rank_snapshot(release: str, **values: int) -> dict:
    """One loads[] item of 0.5.17 or 0.5.23: LoadSnapshot.to_dict(), the core keys (every field but the
    sections) and its queues section (QueueMetrics), from the release's managers/load_snapshot.py."""
    source = release_member(release, "srt/managers/load_snapshot.py")
    sections = {"memory", "speculative", "lora", "disaggregation", "queues"}
    core = {f: 0 for f in fields(source, "LoadSnapshot") if f not in sections}
    return dict(core, queues=dict.fromkeys(fields(source, "QueueMetrics"), 0), **values)


def test_the_fields_the_drain_reads_are_in_every_release() -> None:
    for release in RELEASES:
        item = rank_0_5_9() if release == "0.5.9" else rank_snapshot(release)
        assert {"num_running_reqs", "num_waiting_reqs", "num_used_tokens", "dp_rank"} <= set(item), release
        assert "grammar" in item["queues"], release
        assert drain.count({"version": release, "loads": [item]}) == dict.fromkeys(drain.KINDS, 0), release


def test_0_5_9_counts_per_rank_and_each_kind() -> None:
    reply = {"timestamp": "2026-12-04T00:00:00+00:00", "version": "0.5.9", "dp_rank_count": 2,
             "loads": [rank_0_5_9(num_running_reqs=2, num_waiting_reqs=1, num_used_tokens=900),
                       rank_0_5_9(dp_rank=1, num_waiting_reqs=3)],
             "aggregate": {"total_reqs": 6}}
    reply["loads"][1]["queues"]["grammar"] = 1
    assert drain.count(reply) == {"running": 2, "waiting": 4, "grammar": 1, "kv_tokens": 900}
    assert drain.requests_in(drain.count(reply)) == 7


def test_the_real_0_5_17_reply_reads_zero_and_a_busy_one_counts_per_rank() -> None:
    body = json.loads(RECORDED.read_text().split("\n\n", 1)[1])
    assert "aggregate" not in body and body["version"] == "0.5.17"
    assert drain.is_zero(drain.count(body))
    rank = body["loads"][0]
    busy = {**body, "loads": [dict(rank, num_running_reqs=3, num_waiting_reqs=2, num_used_tokens=4000),
                              dict(rank, dp_rank=1, num_running_reqs=1)]}
    assert drain.count(busy) == {"running": 4, "waiting": 2, "grammar": 0, "kv_tokens": 4000}


def test_0_5_23_counts_alike() -> None:
    reply = {"timestamp": "2026-12-04T00:00:00+00:00", "version": "0.5.23", "accelerator": None, "num_accelerators": 8,
             "loads": [rank_snapshot("0.5.23", num_running_reqs=2, num_waiting_reqs=1),
                       rank_snapshot("0.5.23", dp_rank=1, num_used_tokens=512)]}
    assert drain.count(reply) == {"running": 2, "waiting": 1, "grammar": 0, "kv_tokens": 512}


def test_a_request_in_its_prefill_holds_kv_cache_only() -> None:
    """SGLang counts a request in its (chunked) prefill neither running nor waiting: the scheduler stashes
    the chunked request out of its running batch and merges a prefill batch into it only at the next
    batch (0.5.9 scheduler.py get_next_batch_to_run); 0.5.17's snapshot after a prefill batch is taken
    before that merge. The KV cache it holds (num_used_tokens) is what shows it, and the drain counts it."""
    source = release_member("0.5.9", "srt/managers/scheduler.py")
    assert "chunked_req_to_exclude.add(self.chunked_req)" in source and "merge_batch(self.last_batch)" in source
    for release in ("0.5.17", "0.5.23"):
        inquirer = release_member(release, "srt/managers/scheduler_components/load_inquirer.py")
        assert "num_running_reqs = len(self.get_running_batch().reqs)" in inquirer, release
    prefill = {"version": "0.5.23", "loads": [rank_snapshot("0.5.23", num_used_tokens=8192)]}
    counts = drain.count(prefill)
    assert drain.requests_in(counts) == 0 and not drain.is_zero(counts)
    assert "8192 KV-cache tokens held (a request in its prefill" in drain.describe(counts)


def test_nothing_countable_is_no_reading() -> None:
    assert drain.count({}) is None and drain.count("not json") is None
    assert drain.count({"loads": []}) is None  # 0.5.17's snapshot reader before it attached: not zero
    assert drain.count({"aggregate": {"total_reqs": 0}}) is None
    assert drain.count({"loads": [{"num_running_reqs": 0}]}) is None


@pytest.mark.parametrize("release", RELEASES)
def test_no_release_exposes_the_requests_its_tokenizer_manager_holds(release: str) -> None:
    """The tokenizer manager's open requests (rid_to_state: from before tokenization on in 0.5.17 and 0.5.23,
    after it in 0.5.9, until the last output is sent) are counted only by its SIGTERM watchdog's log
    (TokenizerManager.sigterm_watchdog); its Prometheus collector has no gauge of them (only start-up times),
    and its counters count finished requests (observe_one_finished_request)."""
    manager = release_member(release, "srt/managers/tokenizer_manager.py")
    uses = [line.strip() for line in manager.splitlines() if "len(self.rid_to_state)" in line]
    assert uses == ["remain_num_req = len(self.rid_to_state)"], uses
    collector = (release_member(release, "srt/metrics/collector.py")
                 or release_member(release, "srt/observability/metrics_collector.py"))
    cls = next(n for n in ast.walk(ast.parse(collector))
               if isinstance(n, ast.ClassDef) and n.name == "TokenizerMetricsCollector")
    gauges = {kw.value.value for call in ast.walk(cls) if isinstance(call, ast.Call)
              and getattr(call.func, "id", None) == "Gauge" for kw in call.keywords if kw.arg == "name"}
    assert gauges <= {"sglang:startup_time_seconds", "sglang:startup_cuda_graph_time_seconds"}, gauges
    assert f"SGLang {release} counts no request its tokenizer manager still tokenizes" in drain.not_counted(release)


def test_how_each_release_answers() -> None:
    """0.5.9 asks the scheduler (tokenizer_communicator_mixin.py get_loads: get_loads_communicator); 0.5.17 and
    0.5.23 read the snapshot the scheduler published (tokenizer_control_mixin.py get_loads:
    load_snapshot_reader), on a prefill batch, every load_snapshot_publish_interval (15) decode batches, idle."""
    assert "self.get_loads_communicator(req)" in release_member("0.5.9", "srt/managers/tokenizer_communicator_mixin.py")
    for release in ("0.5.17", "0.5.23"):
        assert "self.load_snapshot_reader" in release_member(release, "srt/managers/tokenizer_control_mixin.py")
        scheduler = release_member(release, "srt/managers/scheduler.py")
        assert "self.publish_load_snapshot(force=batch.forward_mode.is_extend())" in scheduler
    assert "asks its scheduler at each reading" in drain.how_published("0.5.9")
    assert "snapshot" in drain.how_published("0.5.17") and "snapshot" in drain.how_published("0.5.23")
