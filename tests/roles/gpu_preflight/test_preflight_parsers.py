"""gpu_preflight_facts: parsers and decisions on nvidia-smi outputs recorded on real H200 machines.

fixtures/h200 (1 GPU) and fixtures/h200x2 (2 GPUs joined by NVLink) come from the lent
GPU machines (docs/validation/gpu_preflight-*); the failure cases are those outputs
edited the way a broken host would print them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
H200, X2 = FIXTURES / "h200", FIXTURES / "h200x2"
EXPECT_X2 = {"gpu_count": 2, "gpu_name": "H200", "compute_capability": "9.0", "min_memory_mib": 140000,
             "min_driver_version": "580.65.06", "persistence_mode": True, "require_ecc": True,
             "max_uncorrected_ecc_errors": 0, "interconnect": "nvlink", "min_pcie_width": 16,
             "fatal_xids": [48, 61, 62, 64, 74, 79, 94, 95, 119, 120, 140]}


def inventory(facts, root, core=None, health=None, topo=None, dmesg=None):
    """What gather_inventory returns, built from recorded outputs (optionally edited)."""
    inv = {"error": None,
           "gpus": facts.parse_gpus(core if core is not None else (root / "query-core.csv").read_text()),
           "health": facts.parse_health(health if health is not None else (root / "query-health.csv").read_text(),
                                        facts.HEALTH_FIELDS),
           "topology": facts.parse_topology(topo if topo is not None else (root / "topo-m.txt").read_text()),
           "nvlink": facts.parse_nvlink_status((root / "nvlink-s.txt").read_text()),
           "xid": {"readable": True, "events": facts.parse_xids(dmesg if dmesg is not None
                                                                  else (root / "dmesg-nvidia.txt").read_text())}}
    inv["link"] = facts.nominal_link(inv)
    return inv


def by_name(checks):
    return {c["name"]: c for c in checks}


def failed(checks):
    return sorted(c["name"] for c in checks if c["status"] == "fail")


def test_two_h200_inventory(facts):
    inv = inventory(facts, X2)
    assert [(g["index"], g["name"], g["compute_cap"], g["memory_total_mib"], g["persistence_mode"]) for g in inv["gpus"]] == [
        (0, "NVIDIA H200", "9.0", 143771, "Enabled"), (1, "NVIDIA H200", "9.0", 143771, "Enabled")]
    assert inv["gpus"][1]["pci_bus_id"] == "00000000:00:07.0" and inv["gpus"][0]["driver_version"] == "580.159.04"
    h = inv["health"][1]
    assert h["ecc_mode_current"] == "Enabled" and h["ecc_errors_uncorrected_volatile_total"] == 0
    assert h["ecc_errors_uncorrected_aggregate_total"] == 1  # one in this GPU's lifetime, none since the driver loaded
    assert h["retired_pages_pending"] is None  # [N/A]: Hopper remaps rows instead
    assert (h["remapped_rows_pending"], h["remapped_rows_failure"]) == ("No", "No")
    assert (h["pcie_link_gen_max"], h["pcie_link_width_current"]) == (5, 16)


def test_two_h200_topology_is_nvlink_with_18_links(facts):
    inv = inventory(facts, X2)
    assert inv["topology"]["interconnect"] == "nvlink"
    assert inv["topology"]["links"] == [{"a": 0, "b": 1, "type": "NV18"}]
    assert inv["topology"]["affinity"]["GPU1"] == {"cpu": "0-31", "numa": "0"}
    assert inv["nvlink"][0]["active"] == inv["nvlink"][1]["active"] == 18
    assert inv["link"]["kind"] == "nvlink" and inv["link"]["gbps"] == pytest.approx(18 * 26.562)
    assert facts.parse_p2p((X2 / "topo-p2p-r.txt").read_text()) == {"all_ok": True, "not_ok": []}


def test_two_h200_pass_every_check_of_their_expectation(facts):
    checks = facts.evaluate_inventory(inventory(facts, X2), EXPECT_X2)
    assert failed(checks) == []
    assert by_name(checks)["retired_pages"]["status"] == "n/a"
    assert by_name(checks)["xid_errors"]["status"] == "pass"  # dmesg was readable, no Xid since boot


def test_one_h200_single_gpu_has_no_link_and_pcie_nominal(facts):
    inv = inventory(facts, H200)
    assert len(inv["gpus"]) == 1 and inv["topology"]["interconnect"] == "none"
    assert inv["nvlink"] == {}  # `nvidia-smi nvlink -s` printed nothing on the 1-GPU machine
    assert inv["link"] == {"kind": "pcie", "gbps": 63.0, "basis": "PCIe gen 5 x16 (pcie.link.gen.max, "
                           "pcie.link.width.max), slowest GPU"}
    checks = by_name(facts.evaluate_inventory(inv, dict(EXPECT_X2, gpu_count=1)))
    assert checks["interconnect"]["status"] == "n/a"  # one GPU: nothing to compare
    assert failed(checks.values()) == []


def test_missing_gpu_names_the_count_and_the_gpus_left(facts):
    one_gone = (X2 / "query-core.csv").read_text().splitlines()[0] + "\n"
    checks = by_name(facts.evaluate_inventory(inventory(facts, X2, core=one_gone), EXPECT_X2))
    assert checks["gpu_count"]["status"] == "fail"
    assert checks["gpu_count"]["message"] == ("expected 2 GPU(s) (gpu_preflight_expected_gpu_count), nvidia-smi lists 1: "
                                              "0 NVIDIA H200 (00000000:00:06.0)")


def test_wrong_model_compute_capability_and_memory(facts):
    core = (X2 / "query-core.csv").read_text().replace(
        "1, NVIDIA H200, GPU-c0402217-3ddf-d225-1052-939c1579e584, 9.0, 143771",
        "1, NVIDIA H100 80GB HBM3, GPU-c0402217-3ddf-d225-1052-939c1579e584, 9.0, 81559")
    checks = by_name(facts.evaluate_inventory(inventory(facts, X2, core=core), dict(EXPECT_X2, gpu_name="H200$")))
    assert "GPU 1 is NVIDIA H100 80GB HBM3" in checks["gpu_name"]["message"]
    assert "GPU 1 has 81559 MiB" in checks["gpu_memory"]["message"]
    wrong_cc = by_name(facts.evaluate_inventory(inventory(facts, X2), dict(EXPECT_X2, compute_capability="12.0")))
    assert wrong_cc["compute_capability"]["status"] == "fail"
    assert "found GPU 0: 9.0, GPU 1: 9.0" in wrong_cc["compute_capability"]["message"]


def test_old_driver_and_persistence_off(facts):
    core = (X2 / "query-core.csv").read_text().replace("580.159.04, Enabled", "570.195.03, Disabled", 1)
    checks = by_name(facts.evaluate_inventory(inventory(facts, X2, core=core), EXPECT_X2))
    assert checks["driver_version"]["status"] == "fail" and "570.195.03" in checks["driver_version"]["message"]
    assert checks["persistence_mode"]["message"].endswith("; off on GPU 0")


def test_ecc_errors_pending_remaps_and_narrow_link(facts):
    # GPU 1: ECC off, 3 uncorrected errors since the driver loaded, a row remap pending, link down to x8.
    health = (X2 / "query-health.csv").read_text().replace("1, Enabled, 0, 1, [N/A], No, No, 5, 5, 16, 16",
                                                           "1, Disabled, 3, 4, [N/A], Yes, No, 5, 5, 16, 8")
    checks = by_name(facts.evaluate_inventory(inventory(facts, X2, health=health), EXPECT_X2))
    assert failed(checks.values()) == ["ecc_errors", "ecc_mode", "pcie_link_width", "remapped_rows"]
    assert "GPU 1: 3" in checks["ecc_errors"]["message"]
    assert "row remapping pending on GPU 1" in checks["remapped_rows"]["message"]
    assert "GPU 1 at x8" in checks["pcie_link_width"]["message"]
    assert by_name(facts.evaluate_inventory(inventory(facts, X2, health=health),
                                            dict(EXPECT_X2, max_uncorrected_ecc_errors=3)))["ecc_errors"]["status"] == "pass"


def test_pcie_topology_where_nvlink_is_expected(facts):
    topo = (X2 / "topo-m.txt").read_text().replace("NV18", "SYS")
    checks = by_name(facts.evaluate_inventory(inventory(facts, X2, topo=topo), EXPECT_X2))
    assert checks["interconnect"]["status"] == "fail"
    assert "nvidia-smi topo -m shows pcie (SYS)" in checks["interconnect"]["message"]


def test_fatal_xid_in_the_kernel_log(facts):
    dmesg = (X2 / "dmesg-nvidia.txt").read_text() + (
        "[ 812.112233] NVRM: Xid (PCI:0000:00:07): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
        "[ 815.000001] NVRM: Xid (PCI:0000:00:06): 13, pid=1234, Graphics Exception\n")
    checks = by_name(facts.evaluate_inventory(inventory(facts, X2, dmesg=dmesg), EXPECT_X2))
    assert checks["xid_errors"]["status"] == "fail"
    assert checks["xid_errors"]["found"] == {"fatal": [79], "other": [13]}
    assert "0000:00:07: Xid 79 pid=1234, name=python3, GPU has fallen off the bus." in checks["xid_errors"]["message"]
    unreadable = inventory(facts, X2)
    unreadable["xid"] = {"readable": False, "reason": "dmesg: read kernel buffer failed: Operation not permitted"}
    assert by_name(facts.evaluate_inventory(unreadable, EXPECT_X2))["xid_errors"]["status"] == "n/a"


def test_no_driver_is_one_clear_failure(facts):
    checks = facts.evaluate_inventory({"error": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                                                "driver."}, EXPECT_X2)
    assert [(c["name"], c["status"]) for c in checks] == [("nvidia_smi", "fail")]
    assert "couldn't communicate" in checks[0]["message"]


def test_malformed_lines_are_errors_not_guesses(facts):
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        facts.parse_gpus("0, NVIDIA H200, 9.0\n")
    assert facts.parse_topology("garbage")["interconnect"] == "unknown"
    # Two GPU rows but no readable header: unknown, never "pcie" by default.
    assert facts.parse_topology("GPU0\tX\tNV18\nGPU1\tNV18\tX\n")["interconnect"] == "unknown"


def test_scalar_normalisation(facts):
    assert [facts.scalar(v) for v in (" [N/A] ", "[Not Supported]", "12", "Enabled", "")] == [None, None, 12, "Enabled", None]
    assert facts.pcie_nominal_gbps(4, 16) == 31.5 and facts.pcie_nominal_gbps(None, 16) is None


def host(free_gb=100.0, model_gb=0.0, ram_gib=252.0, shm_gib=126.0, shm=True):
    return {"disk": {"model_path": "/srv/models", "measured_path": "/srv", "free_bytes": free_gb * 1e9,
                     "model_bytes": model_gb * 1e9, "total_bytes": 1e12},
            "ram": {"total_kib": ram_gib * 1048576, "available_kib": 0},
            "shm": {"path": "/dev/shm", "size_bytes": shm_gib * 2 ** 30} if shm else
            {"path": "/dev/shm", "size_bytes": None, "error": "does not exist"}}


def test_host_capacity_for_kimi(facts):
    want = {"model_size_gb": 550, "min_ram_gib": 256, "min_shm_gib": 16}
    checks = by_name(facts.evaluate_host(host(free_gb=120), want))
    assert checks["disk"]["status"] == "fail"
    assert "needs 550 GB" in checks["disk"]["message"] and "120.0 GB free on /srv" in checks["disk"]["message"]
    assert checks["ram"]["status"] == "fail" and "252.0 GiB of RAM" in checks["ram"]["message"]
    assert checks["shm"]["status"] == "pass"
    # The model already downloaded counts: 500 GB there + 60 GB free is enough.
    assert facts.evaluate_host(host(free_gb=60, model_gb=500), {"model_size_gb": 550})[0]["status"] == "pass"
    assert facts.evaluate_host(host(shm=False), {"min_shm_gib": 1})[0]["status"] == "fail"


def test_host_measurement_on_this_machine(facts, tmp_path):
    (tmp_path / "models" / "kimi").mkdir(parents=True)
    (tmp_path / "models" / "kimi" / "model-00001.safetensors").write_bytes(b"\0" * 4096)
    (tmp_path / "models" / "link").symlink_to(tmp_path / "models" / "kimi" / "model-00001.safetensors")
    got = facts.gather_host(str(tmp_path / "models"), str(tmp_path / "no-shm"))
    assert got["disk"]["model_bytes"] == 4096  # the link is not counted twice
    assert got["disk"]["measured_path"] == str(tmp_path / "models")
    assert got["ram"]["total_kib"] > 0 and got["shm"]["size_bytes"] is None
    missing = facts.gather_host(str(tmp_path / "not" / "yet"), "/dev/shm")
    assert missing["disk"]["measured_path"] == str(tmp_path) and missing["disk"]["model_bytes"] == 0


def test_recorded_reports_are_what_the_role_wrote(report_module):
    for root, n in ((H200, 1), (X2, 2)):
        report = json.loads((root / "report.json").read_text())
        assert report["result"] == "passed" and report_module.failures(report) == []
        assert report_module.decision(report) == report["decision"]
        assert report["nccl"]["world_size"] == n
