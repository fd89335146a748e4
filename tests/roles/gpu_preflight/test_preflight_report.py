"""gpu_preflight_report: the report is rewritten every run, "changed" only when the decision changed.

The module runs here as Ansible runs it (a JSON file of arguments), on the report recorded
on the 2-GPU H200 machine with its measurements altered the way a rerun alters them.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

from repo import role_file

HERE = Path(__file__).parent
MODULE = role_file("gpu_preflight", "library", "gpu_preflight_report.py")
RECORDED = json.loads((HERE / "fixtures" / "h200x2" / "report.json").read_text())
MEASURED_ONLY = ("decision", "result", "failures")


def base_report() -> dict:
    return {k: v for k, v in copy.deepcopy(RECORDED).items() if k not in MEASURED_ONLY}


def run(tmp_path: Path, path: Path, report: dict, check: bool = False, diff: bool = False) -> dict:
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"path": str(path), "report": report,
                                                        "_ansible_check_mode": check, "_ansible_diff": diff}}))
    proc = subprocess.run([sys.executable, str(MODULE), str(args)], capture_output=True, text=True)
    out = json.loads(proc.stdout)
    assert not out.get("failed"), out
    return out


def rerun_measurements(report: dict) -> dict:
    """The same healthy host measured again: other microseconds, GB/s, free bytes and times."""
    again = copy.deepcopy(report)
    for row in again["nccl"]["results"]:
        row["latency_us"] += 0.7
        row["busbw_gbps"] -= 3.1
    for check in again["nccl"]["checks"]:
        if isinstance(check["found"], float):
            check["found"] += 0.5
    again["host_capacity"]["disk"]["free_bytes"] -= 123456789
    again["measured_at"], again["duration_s"], again["nccl"]["wall_s"] = "2026-11-30T08:00:00", 15.2, 12.4
    return again


def test_first_write_then_new_measurements_are_not_a_change(tmp_path):
    path = tmp_path / "report.json"
    first = run(tmp_path, path, base_report())
    assert first["changed"] and first["report"]["result"] == "passed" and first["failures"] == []
    assert json.loads(path.read_text()) == first["report"]
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    again = run(tmp_path, path, rerun_measurements(base_report()))
    assert not again["changed"]
    written = json.loads(path.read_text())
    assert written["measured_at"] == "2026-11-30T08:00:00"  # the file holds the latest measurements
    assert written["decision"] == first["report"]["decision"]


def test_a_flipped_verdict_is_a_change_and_names_the_failure(tmp_path):
    path = tmp_path / "report.json"
    run(tmp_path, path, base_report())
    slow = rerun_measurements(base_report())
    bw = next(c for c in slow["nccl"]["checks"] if c["name"] == "bus_bandwidth")
    bw.update(status="fail", message="all-reduce of 268435456 B: bus bandwidth 12.0 GB/s, gpu_preflight_nccl_min_busbw_gbps is 5")
    slow["nccl"].update(status="failed", reason=bw["message"])
    out = run(tmp_path, path, slow)
    assert out["changed"] and out["report"]["result"] == "failed"
    assert out["failures"] == ["nccl/bus_bandwidth: " + bw["message"]]


def test_a_gpu_swap_is_a_change(tmp_path):
    path = tmp_path / "report.json"
    run(tmp_path, path, base_report())
    swapped = base_report()
    swapped["inventory"]["gpus"][1]["uuid"] = "GPU-00000000-0000-0000-0000-000000000001"
    assert run(tmp_path, path, swapped)["changed"]


def test_a_benchmark_that_did_not_finish_fails_with_its_reason(tmp_path):
    hung = base_report()
    hung["nccl"] = {"status": "failed", "checks": [], "reason": "no result within 300 s (gpu_preflight_nccl_timeout): "
                    "rank 0 at 'init_process_group', rank 1 at 'init_process_group'; all workers killed"}
    out = run(tmp_path, tmp_path / "report.json", hung)
    assert out["report"]["result"] == "failed"
    assert out["failures"] == ["nccl/all_reduce: " + hung["nccl"]["reason"]]


def test_check_mode_writes_nothing_and_diff_shows_the_decision(tmp_path):
    path = tmp_path / "report.json"
    out = run(tmp_path, path, base_report(), check=True, diff=True)
    assert out["changed"] and not path.exists()
    assert json.loads(out["diff"]["after"]) == out["report"]["decision"] and out["diff"]["before"] == ""
    run(tmp_path, path, base_report())
    assert not run(tmp_path, path, rerun_measurements(base_report()), check=True)["changed"]


def test_pcie_findings_carry_the_measured_all_reduce_and_fail_by_name(tmp_path):
    # The report recorded on the lent H200 (docs/validation/gpu_preflight-pcie-h200), with an ACS finding
    # and a P2P comparison added as a host of several GPUs would have them.
    recorded = json.loads((HERE / "fixtures" / "pcie-h200" / "report.json").read_text())
    report = {k: v for k, v in recorded.items() if k not in MEASURED_ONLY}
    assert report["pcie"]["measured"].startswith("1 GPU(s): 16384 B in ")  # as the machine wrote it
    report["pcie"]["findings"] = [{"name": "acs_redirect_enabled", "subject": "0000:02:01.0", "severity": "error"}]
    acs = next(c for c in report["checks"] if c["name"] == "acs_redirect_enabled")
    acs.update(status="fail", message="acs_redirect_enabled: 0000:02:01.0: ACSCtl ReqRedir+ CmpltRedir+ on")
    report["nccl"].update(world_size=2, p2p_comparison={"summary": "with P2P: did not finish (no result within 300 s); "
                                                                   "without P2P (NCCL_P2P_DISABLE=1): 16384 B in 31.0 us"})
    out = run(tmp_path, tmp_path / "report.json", report)
    finding = out["report"]["pcie"]["findings"][0]
    assert finding["measured"] == out["report"]["pcie"]["measured"]
    assert finding["measured"].startswith("2 GPU(s): 16384 B in ")
    assert finding["measured"].endswith("without P2P (NCCL_P2P_DISABLE=1): 16384 B in 31.0 us")
    assert out["failures"] == ["pcie/acs_redirect_enabled: " + acs["message"]]
    report["nccl"]["p2p_comparison"]["summary"] = "with P2P: did not finish; without P2P: 16384 B in 29.5 us"
    assert not run(tmp_path, tmp_path / "report.json", report)["changed"]  # measurements only
