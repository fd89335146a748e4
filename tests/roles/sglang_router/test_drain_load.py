"""The drain's count of in-flight requests (filter sglang_router_inflight) on the /v1/loads replies of
SGLang 0.5.17 (recorded from the real server on the lent H200) and 0.5.9 (its aggregate and per-rank
shape, as the simulator serves it): 0.5.17 has no `aggregate`, which the drain used to wait for."""

from __future__ import annotations

import ast
import json

import requests

from repo import ROOT, load

inflight = load("roles/sglang_router/filter_plugins/sglang_router.py").sglang_router_inflight
RECORDED = ROOT / "tests/roles/sglang_server/fixtures/sglang-0.5.17/v1-loads.http"


def test_the_real_0_5_17_reply_has_no_aggregate_and_counts_per_rank() -> None:
    body = json.loads(RECORDED.read_text().split("\n\n", 1)[1])
    assert "aggregate" not in body
    assert inflight(body) == 0
    busy = {**body, "loads": [dict(body["loads"][0], num_running_reqs=3, num_waiting_reqs=2),
                              dict(body["loads"][0], dp_rank=1, num_running_reqs=1)]}
    assert inflight(busy) == 6


def test_the_0_5_9_shape_counts_alike_and_nothing_known_is_none(start_sim) -> None:
    sim = start_sim(env={"SGLANG_SIM_DECODE_TOK_S": "500", "SGLANG_SIM_TTFT_MS": "10"})
    body = requests.get(sim.url + "/v1/loads", timeout=5).json()
    assert inflight(body) == 0 == body["aggregate"]["total_reqs"]
    assert inflight({"aggregate": {"total_reqs": 4}}) == 4  # per-rank list absent: the aggregate
    assert inflight({}) is None and inflight("not json") is None  # the drain keeps waiting, then fails


def test_the_0_5_23_reply_keeps_the_per_rank_counts() -> None:
    """SGLang 0.5.23's /v1/loads (entrypoints/v1_loads.py): {timestamp, version, accelerator, num_accelerators,
    loads: [LoadSnapshot.to_dict()]}, whose core keys are every field of LoadSnapshot but its sections
    (managers/load_snapshot.py, read from the PyPI wheel): num_running_reqs and num_waiting_reqs among them,
    as in 0.5.17's reply, so the drain counts alike."""
    source = load("tests/roles/sglang_server/role_render.py").release_member("0.5.23", "srt/managers/load_snapshot.py")
    snapshot = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "LoadSnapshot")
    fields = [f.target.id for f in snapshot.body if isinstance(f, ast.AnnAssign)]
    sections = {"memory", "speculative", "lora", "disaggregation", "queues"}
    assert sections <= set(fields) and '"core"' in source and "_SECTION_FIELDS" in source
    core = {name: 0 for name in fields if name not in sections}
    assert {"num_running_reqs", "num_waiting_reqs", "dp_rank"} <= set(core)
    reply = {"timestamp": "2026-12-04T00:00:00+00:00", "version": "0.5.23", "accelerator": None, "num_accelerators": 8,
             "loads": [dict(core, num_running_reqs=2, num_waiting_reqs=1), dict(core, dp_rank=1, num_waiting_reqs=4)]}
    assert inflight(reply) == 7 and inflight({**reply, "loads": [core]}) == 0
