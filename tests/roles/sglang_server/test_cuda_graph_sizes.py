"""The CUDA graphs' largest sizes follow what the host serves (issue 42, item 4): the role's own tables rendered
by Ansible's Templar (role_render) for each supported release's features, asked of its real tree.

sglang_server_cuda_graph_max_bs auto (the default) is sglang_server_max_running_requests where that is set, else
SGLang's own; sglang_server_cuda_graph_max_tokens_prefill bounds the prefill graphs. Each is rendered as the
release calls it (tests/roles/sglang_server/test_server_args_check.py parses them with each release's ServerArgs).
"""

from __future__ import annotations

import pytest
import role_render as rr

RELEASES = ["0.5.9", "0.5.17", "0.5.23"]
# version: (the decode flag, the prefill flag)
FLAGS = {"0.5.9": ("--cuda-graph-max-bs", "--piecewise-cuda-graph-max-tokens"),
         "0.5.17": ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"),
         "0.5.23": ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill")}


@pytest.fixture(scope="module")
def features(tmp_path_factory) -> dict:
    return {v: rr.features(v, tmp_path_factory.mktemp(v.replace(".", "_"))) for v in RELEASES}


def flags(argv: list[str]) -> dict[str, str]:
    return {a: b for a, b in zip(argv, argv[1:], strict=False) if a.startswith("--") and "cuda-graph" in a}


@pytest.mark.parametrize("version", RELEASES)
def test_unset_leaves_sglangs_own_sizes(features, version):
    # The example inventory sets no running-request limit: SGLang's own sizes (it caps them at its own limit).
    assert flags(rr.server(features[version])["argv"]) == {}


@pytest.mark.parametrize("version", RELEASES)
def test_the_decode_graphs_follow_the_running_request_limit(features, version):
    decode, prefill = FLAGS[version]
    rendered = rr.server(features[version], sglang_server_max_running_requests=16)
    assert flags(rendered["argv"]) == {decode: "16"}
    assert rendered["argv"][rendered["argv"].index("--max-running-requests") + 1] == "16"
    assert rendered["settings"][decode[2:].replace("-", "_")] == 16  # what the launch check reads
    # Given by hand: as given, also above the limit (SGLang captures no batch it can never run); null: SGLang's own.
    assert flags(rr.server(features[version], sglang_server_max_running_requests=16,
                           sglang_server_cuda_graph_max_bs=32)["argv"]) == {decode: "32"}
    assert flags(rr.server(features[version], sglang_server_max_running_requests=16,
                           sglang_server_cuda_graph_max_bs=None)["argv"]) == {}


@pytest.mark.parametrize("version", RELEASES)
def test_the_prefill_graphs_bound_is_rendered_as_the_release_calls_it(features, version):
    decode, prefill = FLAGS[version]
    argv = rr.server(features[version], sglang_server_cuda_graph_max_tokens_prefill=2048,
                     sglang_server_max_running_requests=8)["argv"]
    assert flags(argv) == {decode: "8", prefill: "2048"}


def test_before_the_release_is_asked_the_options_keep_the_roles_names():
    # Check mode before the first build: no features; the decode option keeps its legacy name (0.5.17 still
    # takes it), and an unset prefill bound renders nothing.
    assert flags(rr.server({}, sglang_server_max_running_requests=4)["argv"]) == {"--cuda-graph-max-bs": "4"}
