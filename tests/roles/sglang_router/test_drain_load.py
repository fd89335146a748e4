"""The drain's count of in-flight requests (filter sglang_router_inflight) on the /v1/loads replies of
SGLang 0.5.17 (recorded from the real server on the lent H200) and 0.5.9 (its aggregate and per-rank
shape, as the simulator serves it): 0.5.17 has no `aggregate`, which the drain used to wait for."""

from __future__ import annotations

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
