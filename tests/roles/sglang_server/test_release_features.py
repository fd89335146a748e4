"""What each supported release takes and reads (roles/sglang_server/files/sglang_release_features.py), on
the real trees of SGLang 0.5.9 and 0.5.10 (PyPI sdists) and 0.5.17 and 0.5.23 (PyPI wheels), and what the
roles read of a server on them: the endpoints, the config parser's module."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from repo import ROOT, load

rr = load("tests/roles/sglang_server/role_render.py")
args_check = load("roles/sglang_server/files/sglang_server_args_check.py")
TOOL = ROOT / "roles" / "sglang_server" / "files" / "sglang_release_features.py"

# version: (the fields sglang_server_cuda_graph_max_bs and _max_tokens_prefill are rendered as, reads
# SGLANG_ENABLE_SPEC_V2, has the PCIe IPC all-reduce)
EXPECTED = {
    "0.5.9": ("cuda_graph_max_bs", "piecewise_cuda_graph_max_tokens", True, False),
    "0.5.10": ("cuda_graph_max_bs", "piecewise_cuda_graph_max_tokens", True, False),
    "0.5.17": ("cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill", False, False),
    "0.5.23": ("cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill", False, True),
}


@pytest.mark.parametrize("version", list(EXPECTED))
def test_what_the_release_takes_and_reads(version, tmp_path):
    found = rr.features(version, tmp_path)
    option, prefill, spec_v2, pcie = EXPECTED[version]
    assert found == {"version": version, "options": {"cuda_graph_max_bs": option, "cuda_graph_max_bs_prefill": prefill},
                     "env": {"SGLANG_ENABLE_SPEC_V2": spec_v2, "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": pcie},
                     "pcie_ipc_allreduce": pcie}


def test_the_tool_prints_json_and_refuses_what_is_no_sglang_package(tmp_path):
    tree = rr.release_tree("0.5.23", tmp_path)
    done = subprocess.run([sys.executable, "-I", "-B", str(TOOL), str(tree)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout)["pcie_ipc_allreduce"] is True, done.stderr
    done = subprocess.run([sys.executable, "-I", "-B", str(TOOL), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not an sglang package directory" in json.loads(done.stdout)["error"]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.17", "0.5.23"])
def test_the_endpoints_the_roles_read_are_served(version):
    """/server_info in every release (sglang_bench reads it; /get_server_info logs a deprecation at every call),
    /v1/loads (the router's drain) and /health_generate (readiness); /get_load is gone in 0.5.23."""
    http = rr.release_member(version, "srt/entrypoints/http_server.py")
    loads = rr.release_member(version, "srt/entrypoints/v1_loads.py")
    assert '@app.get("/server_info")' in http and "Endpoint '/get_server_info' is deprecated" in http
    assert '@router.get("/v1/loads")' in loads and '"/health_generate"' in http
    assert ('@app.get("/get_load")' in http) is (version != "0.5.23")


@pytest.mark.parametrize("version, module", [("0.5.9", "sglang.srt.server_args_config_parser"),
                                             ("0.5.17", "sglang.srt.server_args_config_parser"),
                                             ("0.5.23", "sglang.srt.utils.server_args_config_parser")])
def test_the_config_parser_is_where_the_release_imports_it(version, module):
    """The ServerArgs check merges a --config file with the release's own ConfigArgumentMerger: the module its
    prepare_server_args imports, which 0.5.20 moved under srt/utils."""
    assert f"from {module} import ConfigArgumentMerger" in rr.release_member(version, "srt/server_args.py")
    assert "class ConfigArgumentMerger" in rr.release_member(version, module.removeprefix("sglang.").replace(".", "/") + ".py")
    assert module in args_check.CONFIG_PARSER_MODULES


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_the_overlapped_weight_load_excludes_what_the_role_serves(version):
    """Why the role renders no --startup-weight-load-mode (issue 42 item 2: "the overlap mode where the release has
    it"): 0.5.17 has no such field; 0.5.23 has it (default "serial") and refuses "overlap" for a speculative
    algorithm, a draft worker, a quantized or a multimodal model and any architecture but dense Llama and Qwen2/3,
    while every server this role starts runs EAGLE-3, and Kimi-K2.5 is INT4 and multimodal. When a release lifts
    these, this test fails and the role should render the mode where it applies."""
    fields = rr.release_member(version, "srt/arg_groups/fields/model.py") or ""
    overlap = rr.release_member(version, "srt/model_executor/model_runner_components/startup_weight_load.py")
    if version == "0.5.17":
        assert "startup_weight_load_mode" not in (rr.release_member(version, "srt/server_args.py") or "") + fields
        assert overlap is None
        return
    assert 'Literal["serial", "overlap"]' in fields and '] = "serial"' in fields.split("startup_weight_load_mode", 1)[1]
    for refusal in ('"speculative decoding is not supported"', '"draft workers are not supported"',
                    '"quantization is not supported"', '"multimodal models are not supported"'):
        assert refusal in overlap, refusal
    supported = overlap.split("_SUPPORTED_ARCHITECTURES = frozenset(", 1)[1].split(")", 1)[0]
    assert "Kimi" not in supported and "Deepseek" not in supported and "LlamaForCausalLM" in supported


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_the_fastsafetensors_loader_takes_gpudirect_storage_unless_told(version):
    """Why the role renders no --load-format fastsafetensors by default: the loader's GPUDirect Storage path is on
    unless --model-loader-extra-config says {"enable_gds": false} (a host without GDS set up failed its start with
    cuFile error 5027 on the H100 test bed, docs/validation/restart-h200/fst), and that extra config goes to the
    draft's loader too."""
    loader = rr.release_member(version, "srt/model_loader/loader.py")
    assert 'extra_config.get("enable_gds", True)' in loader
    assert "def fastsafetensors_weights_iterator" in rr.release_member(version, "srt/model_loader/weight_utils.py")
