"""What sglang_bench reads of the server: its endpoints and the summary fields, on every supported release.

SGLang 0.5.9, 0.5.17 and 0.5.23 all serve /server_info (/get_server_info is its deprecated alias, which logs
a warning at every call; /get_load is gone in 0.5.23). The summary keeps the field cuda_graph_max_bs, which
0.5.14 and later report as cuda_graph_max_bs_decode: read here on the /server_info reply recorded from the real
SGLang 0.5.17 on the lent H200 (tests/roles/sglang_server/fixtures/sglang-0.5.17)."""

from __future__ import annotations

import json
import re

import pytest

from repo import ROOT, load

results = load("roles/sglang_bench/files/sglang_benchmark/results.py")
RECORDED = ROOT / "tests/roles/sglang_server/fixtures/sglang-0.5.17/server-info.http"
# Where sglang_bench asks the server (the role's tasks and its benchmark tool).
READERS = [ROOT / "roles/sglang_bench/tasks/bench.yml", ROOT / "roles/sglang_bench/tasks/tune_plan.yml",
           *sorted((ROOT / "roles/sglang_bench/files/sglang_benchmark").glob("*.py"))]


def test_the_summary_reads_the_decode_name_of_a_0_5_17_server() -> None:
    info = json.loads(RECORDED.read_text().split("\n\n", 1)[1])
    assert "cuda_graph_max_bs" not in info and info["cuda_graph_max_bs_decode"] == 8
    summary = results.server_environment(info)["server"]
    assert summary["cuda_graph_max_bs"] == 8 and summary["version"] == "0.5.17"
    assert summary["speculative_num_steps"] == 3 and "cuda_graph_max_bs_decode" not in summary


@pytest.mark.parametrize("info, expected", [
    ({"cuda_graph_max_bs": 16, "version": "0.5.9"}, 16),  # 0.5.9's name
    ({"cuda_graph_max_bs_decode": None, "version": "0.5.23"}, None),  # SGLang's own default, reported as null
])
def test_the_summary_field_keeps_one_name_across_releases(info, expected) -> None:
    summary = results.server_environment(info)["server"]
    assert "cuda_graph_max_bs" in summary and summary["cuda_graph_max_bs"] == expected


def test_a_server_that_reports_neither_name_has_no_such_field() -> None:
    assert "cuda_graph_max_bs" not in results.server_environment({"version": "0.5.23"})["server"]


@pytest.mark.parametrize("path", READERS, ids=lambda p: p.name)
def test_no_reader_asks_a_deprecated_or_removed_endpoint(path) -> None:
    assert not re.search(r"/get_server_info|/get_load\b|/get_model_info", path.read_text()), path
