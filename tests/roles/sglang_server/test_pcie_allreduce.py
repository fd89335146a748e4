"""The PCIe fast path: SGLang's PCIe IPC all-reduce (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE, 0.5.21+) as role
sglang_server renders it, per topology, and what the launch check says about it.

Each host is gpu_preflight's local fact as gpu_preflight renders it from nvidia-smi's outputs through its
own parsers (tests/roles/sglang_server/role_render.py): 8 RTX PRO 6000 (SM120) on two sockets, joined only
over PCIe (PIX within a pair, NODE within a socket, SYS across: composed in nvidia-smi's format, no such host
was lent) with topo -p2p read and write OK; the same with gpu_preflight_fix_nccl_p2p_disable, or with a pair
whose P2P is not supported; the H200 machines recorded on the lent hardware (tests/roles/gpu_preflight/fixtures:
h200x2, two GPUs over 18 NVLinks; h200, one GPU). Each release is its real tree from PyPI, asked by the
role's features tool; the server's settings are the example inventory's (Kimi-K2.5, tp 8, EAGLE-3 3/1/4).
"""

from __future__ import annotations

import json

import pytest

from repo import ROOT, load

rr = load("tests/roles/sglang_server/role_render.py")
launch = load("roles/sglang_eagle3_patch/files/sglang_launch_check.py")
FACTS = json.loads((ROOT / "roles/sglang_eagle3_patch/files/sglang_launch_facts.json").read_text())
H200 = ROOT / "tests" / "roles" / "gpu_preflight" / "fixtures"
PCIE_IPC = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"


def pcie_link(a: int, b: int) -> str:
    return "PIX" if a // 2 == b // 2 else "NODE" if a // 4 == b // 4 else "SYS"


def sm120_pcie_host(fix_p2p_disable: bool = False, p2p=lambda a, b: "OK") -> dict:
    return rr.preflight_fact(rr.rtx_pro_6000(8), rr.nvidia_smi_matrix(8, pcie_link),
                             rr.nvidia_smi_matrix(8, p2p, affinity=False), rr.nvidia_smi_matrix(8, p2p, affinity=False),
                             fix_p2p_disable=fix_p2p_disable)


@pytest.fixture(scope="module")
def features(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("releases")
    return {v: rr.features(v, tmp) for v in ("0.5.9", "0.5.17", "0.5.23")}


def launch_report(rendered: dict, version: str, arch: str = "12.0", gpus: int = 8) -> dict:
    """The launch check of sglang_eagle3_patch on the settings the role gives it (checks.yml)."""
    return launch.check(FACTS, version, arch, gpus, rendered["settings"], "kimi_k25")


def ids(report: dict, kind: str) -> set[str]:
    return {entry["id"] for entry in report[kind]}


def test_8_sm120_gpus_over_pcie_with_p2p_render_it_on_0_5_23_only(features):
    host = sm120_pcie_host()
    assert host["topology"] == {"gpus": 8, "compute_capabilities": ["12.0"], "interconnect": "pcie", "p2p": "ok",
                                "p2p_why": "topo -p2p read and write OK for all 28 pairs, no finding puts P2P in doubt"}
    on = rr.server(features["0.5.23"], host)
    assert on["env"] == {PCIE_IPC: "1"} and on["pcie"]["render"] is True, on  # SGLANG_ENABLE_SPEC_V2: read by no code
    assert on["pcie"]["why"] == "8 GPUs joined only over PCIe with P2P working, a TP group of 8, and SGLang 0.5.23 has it"
    assert on["settings"]["gpu_interconnect"] == "pcie" and on["settings"]["gpu_p2p"] == "ok"
    report = launch_report(on, "0.5.23")
    assert report["ok"] and report["failures"] == report["warnings"] == report["notes"] == [], report
    for version in ("0.5.17", "0.5.9"):
        off = rr.server(features[version], host)
        assert PCIE_IPC not in off["env"] and off["pcie"] == {
            "render": False, "why": f"SGLang {version} has no PCIe IPC all-reduce (it came with 0.5.21)"}
        assert ("SGLANG_ENABLE_SPEC_V2" in off["env"]) is (version == "0.5.9")


def test_p2p_disabled_keeps_it_off_and_the_launch_check_says_why(features):
    host = sm120_pcie_host(fix_p2p_disable=True)
    assert host["server_env"] == {"NCCL_P2P_DISABLE": "1"} and host["set_by"] == "gpu_preflight_fix_nccl_p2p_disable"
    off = rr.server(features["0.5.23"], host)
    assert off["env"] == {"NCCL_P2P_DISABLE": "1"}
    assert off["pcie"]["render"] is False and off["pcie"]["why"].startswith("P2P is disabled (NCCL_P2P_DISABLE=1")
    report = launch_report(off, "0.5.23")
    assert report["ok"] and ids(report, "notes") == {"pcie-ipc-allreduce-off-p2p"}, report
    assert "NCCL_P2P_DISABLE" in report["notes"][0]["effect"]
    # Set by hand anyway: refused before any restart, naming the variable and the fix.
    forced = rr.server(features["0.5.23"], host, sglang_server_env={PCIE_IPC: "1"})
    assert forced["env"] == {"NCCL_P2P_DISABLE": "1", PCIE_IPC: "1"}
    assert forced["pcie"]["why"].startswith(f"{PCIE_IPC} is given in the server's environment")
    refused = launch_report(forced, "0.5.23")
    assert not refused["ok"] and ids(refused, "failures") == {"pcie-ipc-allreduce-without-p2p"}
    assert "sglang_server_env" in refused["failures"][0]["fix"]


def test_a_pair_without_p2p_keeps_it_off_with_the_pair_named(features):
    host = sm120_pcie_host(p2p=lambda a, b: "CNS" if (a, b) == (3, 4) else "OK")
    assert host["topology"]["p2p"] == "not_ok"
    off = rr.server(features["0.5.23"], host)
    assert PCIE_IPC not in off["env"]
    assert off["pcie"]["why"].startswith("P2P between the GPUs is not_ok (nvidia-smi topo -p2p: GPU3-GPU4 read CNS write CNS)")
    assert ids(launch_report(off, "0.5.23"), "notes") == {"pcie-ipc-allreduce-off-p2p"}


def test_the_h200_nvlink_records_keep_it_off(features):
    nvlink = rr.preflight_fact(rr.recorded(H200 / "h200x2" / "query-core.csv"), rr.recorded(H200 / "h200x2" / "topo-m.txt"),
                               rr.recorded(H200 / "h200x2" / "topo-p2p-r.txt"))
    assert nvlink["topology"]["interconnect"] == "nvlink" and nvlink["topology"]["compute_capabilities"] == ["9.0"]
    off = rr.server(features["0.5.23"], nvlink, sglang_server_tp_size=2, sglang_server_gpu_count=2)
    assert PCIE_IPC not in off["env"] and off["pcie"]["why"].startswith("the GPUs are joined over NVLink (nvlink)")
    report = launch_report(off, "0.5.23", arch="9.0", gpus=2)
    assert report["ok"] and ids(report, "notes") == {"pcie-ipc-allreduce-off-nvlink"}, report
    # Set by hand on NVLink: warned (SGLang's custom all-reduce comes first there).
    forced = rr.server(features["0.5.23"], nvlink, sglang_server_tp_size=2, sglang_server_gpu_count=2,
                       sglang_server_env={PCIE_IPC: "1"})
    assert ids(launch_report(forced, "0.5.23", arch="9.0", gpus=2), "warnings") == {"pcie-ipc-allreduce-nvlink"}
    one = rr.preflight_fact(rr.recorded(H200 / "h200" / "query-core.csv"), rr.recorded(H200 / "h200" / "topo-m.txt"))
    assert one["topology"]["interconnect"] == "none" and one["topology"]["p2p"] == "n/a"
    alone = rr.server(features["0.5.23"], one, sglang_server_tp_size=1, sglang_server_gpu_count=1)
    assert PCIE_IPC not in alone["env"] and alone["pcie"]["why"].startswith("1 GPU(s)")


@pytest.mark.parametrize("settings, host, why", [
    ({"sglang_server_pcie_allreduce": False}, "pcie", "sglang_server_pcie_allreduce is false"),
    ({"sglang_server_env": {PCIE_IPC: "0"}}, "pcie", f"{PCIE_IPC} is given in the server's environment"),
    ({"sglang_server_tp_size": 2}, "pcie", "tp_size 2: the PCIe IPC kernels serve a TP group of 4 or 8 GPUs"),
    ({}, None, "gpu_preflight has not recorded this host's GPUs"),
])
def test_each_other_reason_keeps_it_off(features, settings, host, why):
    rendered = rr.server(features["0.5.23"], sm120_pcie_host() if host else None, **settings)
    assert rendered["pcie"]["render"] is False and rendered["pcie"]["why"].startswith(why), rendered["pcie"]
    assert rendered["env"].get(PCIE_IPC) == settings.get("sglang_server_env", {}).get(PCIE_IPC)


def test_a_release_not_asked_yet_renders_the_options_as_named(features):
    """Check mode before the first build: nothing to ask; the role's names, the environment as given."""
    rendered = rr.server({}, sm120_pcie_host(), sglang_server_cuda_graph_max_bs=64)
    assert "--cuda-graph-max-bs" in rendered["argv"] and rendered["env"] == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert rendered["pcie"]["why"] == "the release to serve was not asked what it has (no release yet)"


def test_the_filter_alone_on_a_multi_node_group():
    decide = load("roles/sglang_server/filter_plugins/sglang_server_options.py").sglang_server_pcie_allreduce
    topology = {"gpus": 8, "interconnect": "pcie", "p2p": "ok"}
    features = {"version": "0.5.23", "pcie_ipc_allreduce": True}
    assert decide(features, topology, {}, True, 16, 2)["why"].startswith("the TP group spans 2 nodes")
    assert decide(features, topology, {}, True, 4, 1)["render"] is True
    assert decide(features, {**topology, "p2p": "in_doubt", "p2p_why": "iommu_translation"}, {}, True, 8, 1)["why"] == (
        "P2P between the GPUs is in_doubt (iommu_translation): the PCIe IPC kernels write into the other GPUs' "
        "memory directly")
