"""playbooks/preflight.yml against a real (container) host whose nvidia-smi is the test double.

The host has the mirror's driver packages, so nvidia-smi answers as 8 RTX PRO 6000 GPUs on
PCIe (what the demo inventory expects); it has no GPU device nodes, so the NCCL step must
be skipped with that reason. Host thresholds are scaled to a container (64 MB /dev/shm).
"""

from __future__ import annotations

import json

import pytest

import bad_inputs
import testhost
from repo import ROOT

PLAYBOOK = ROOT / "playbooks" / "preflight.yml"
REPORT = "/var/lib/gpu-preflight/report.json"
CONTAINER = {"gpu_preflight_model_size_gb": 1, "gpu_preflight_min_ram_gib": 1, "gpu_preflight_min_shm_gib": 0.05}
# The harness's fingerprint of what roles touch, plus the preflight's own directory.
SNAPSHOT = testhost.SNAPSHOT + "; find /var/lib/gpu-preflight -printf '%p %s %T@ %m\\n' 2>/dev/null | sort | sha256sum"


def recap(out: str) -> dict:
    line = next(ln for ln in out.splitlines() if ln.startswith("pytest-") and "ok=" in ln)
    return dict(part.split("=") for part in line.split(":", 1)[1].split())


def play(run_playbook, host, tmp_path, **extra):
    fetch = tmp_path / "fetched"
    proc = run_playbook(host, PLAYBOOK, "-e", json.dumps({**CONTAINER, "gpu_preflight_fetch_dir": str(fetch), **extra}))
    return proc, proc.stdout + proc.stderr, fetch / f"{host.name}.json"


def test_matching_inventory_passes_with_nccl_skipped_for_a_reason(gpu_testhost, run_playbook, tmp_path):
    proc, out, fetched = play(run_playbook, gpu_testhost, tmp_path)
    assert proc.returncode == 0, out[-4000:]
    report = json.loads(gpu_testhost.sh(f"cat {REPORT}").stdout)
    assert report["result"] == "passed" and report["phases"] == ["inventory", "pcie", "host", "nccl"]
    assert report["nccl"]["status"] == "skipped"
    assert report["nccl"]["reason"].startswith("no GPU device nodes (/dev/nvidia[0-9]*) on this host")
    assert {c["name"]: c["status"] for c in report["checks"]}["interconnect"] == "pass"
    assert report["inventory"]["topology"]["interconnect"] == "pcie"
    assert [g["name"] for g in report["inventory"]["gpus"]] == ["NVIDIA RTX PRO 6000 Blackwell Server Edition"] * 8
    assert json.loads(fetched.read_text()) == report
    assert gpu_testhost.sh(f"stat -c %a {REPORT}").stdout.strip() == "644"
    assert "GPU preflight passed" in out
    # report directory, report, fetched copy, the local facts directory and the local fact for the server
    # (a rerun: molecule's idempotence)
    assert recap(out)["changed"] == "5"
    fact = json.loads(gpu_testhost.sh("cat /etc/ansible/facts.d/gpu_preflight.fact").stdout)
    assert fact["server_env"] == {} and fact["topology"]["gpus"] == 8 and fact["topology"]["interconnect"] == "pcie"


def test_a_missing_gpu_fails_naming_the_difference(gpu_testhost, run_playbook, tmp_path):
    seven = [{"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0", "memory_mib": 97887,
              "pci_bus_id": "00000000:%02X:00.0" % (0x18 + i)} for i in range(8) if i != 5]
    gpu_testhost.sh("mkdir -p /etc/nvidia-test-double && cat > /etc/nvidia-test-double/gpus.json <<'EOF'\n"
                    + json.dumps({"gpus": seven}) + "\nEOF")
    try:
        proc, out, fetched = play(run_playbook, gpu_testhost, tmp_path)
    finally:
        gpu_testhost.sh("rm -f /etc/nvidia-test-double/gpus.json")
    assert proc.returncode != 0
    assert "GPU preflight failed on pytest-test-preflight-role: inventory/gpu_count: expected 8 GPU(s) " \
           "(gpu_preflight_expected_gpu_count), nvidia-smi lists 7:" in out, out[-4000:]
    report = json.loads(fetched.read_text())  # written and fetched before failing, for whoever investigates
    assert report["result"] == "failed" and report["failures"][0].startswith("inventory/gpu_count")
    assert recap(out)["changed"] != "0"  # the decision flipped from passed to failed


UPDATE_GRUB_DOUBLE = ("#!/bin/sh\n# TEST DOUBLE of update-grub (the test host boots no kernel of its own): "
                      "records each call and the drop-in it saw\n"
                      "{ date +%s; cat /etc/default/grub.d/61-gpu-preflight.cfg 2>/dev/null || echo '(no drop-in)'; } "
                      ">> /var/log/update-grub-double.log\n")
FIXES = {"gpu_preflight_fix_iommu_passthrough": True, "gpu_preflight_fix_pcie_aspm_off": True,
         "gpu_preflight_fix_nccl_p2p_disable": True}


def test_fixes_show_in_check_mode_apply_when_asked_and_go_when_withdrawn(gpu_testhost, run_playbook, tmp_path):
    host = gpu_testhost
    fact, dropin = "/etc/ansible/facts.d/gpu_preflight.fact", "/etc/default/grub.d/61-gpu-preflight.cfg"
    host.sh("cat > /usr/sbin/update-grub <<'EOF'\n" + UPDATE_GRUB_DOUBLE + "EOF\nchmod 755 /usr/sbin/update-grub")
    try:
        check = run_playbook(host, PLAYBOOK, "--check", "--diff", "-e", json.dumps({**CONTAINER, **FIXES}))
        out = check.stdout + check.stderr
        assert check.returncode == 0, out[-4000:]
        assert '+GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} \\"iommu=pt\\" \\"pcie_aspm=off\\""' in out
        assert '"NCCL_P2P_DISABLE": "1"' in out
        assert host.sh(f"ls {dropin} /var/log/update-grub-double.log 2>&1 || true").stdout.count("No such") == 2
        assert "NCCL_P2P_DISABLE" not in host.sh(f"cat {fact} 2>&1 || true").stdout  # the earlier tests' fact, as it was

        proc, out, _ = play(run_playbook, host, tmp_path, **FIXES)
        assert proc.returncode == 0, out[-4000:]
        assert host.sh(f"cat {dropin}").stdout.splitlines()[-1] == \
            r'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} \"iommu=pt\" \"pcie_aspm=off\""'
        assert "iommu=pt" in host.sh("cat /var/log/update-grub-double.log").stdout
        assert json.loads(host.sh(f"cat {fact}").stdout)["server_env"] == {"NCCL_P2P_DISABLE": "1"}
        assert "no reboot because the host is a container" in out
        report = json.loads(host.sh(f"cat {REPORT}").stdout)
        assert report["expected"]["nccl_env"] == {"NCCL_P2P_DISABLE": "1"}
        assert report["pcie"]["kernel_params"]["wanted"] == ["iommu=pt", "pcie_aspm=off"]

        again, out, _ = play(run_playbook, host, tmp_path, **FIXES)
        assert again.returncode == 0 and recap(out)["changed"] == "0", out[-3000:]
        assert host.sh("wc -l < /var/log/update-grub-double.log").stdout.strip() == "4"  # not run again

        off, out, _ = play(run_playbook, host, tmp_path)
        assert off.returncode == 0, out[-4000:]
        assert host.sh(f"ls {dropin} 2>&1 || true").stdout.count("No such") == 1
        assert json.loads(host.sh(f"cat {fact}").stdout)["server_env"] == {}  # the fact stays: its topology
        assert host.sh("tail -1 /var/log/update-grub-double.log").stdout.strip() == "(no drop-in)"
    finally:
        host.sh(f"rm -f /usr/sbin/update-grub /var/log/update-grub-double.log {dropin} {fact}")


BAD = [
    ("negative-latency", {"gpu_preflight_nccl_max_latency_us": -1}, "gpu_preflight_nccl_max_latency_us must be 0 or more"),
    ("negative-busbw", {"gpu_preflight_nccl_min_busbw_gbps": -5}, "gpu_preflight_nccl_min_busbw_gbps must be 0 or more"),
    ("negative-model-size", {"gpu_preflight_model_size_gb": -550}, "gpu_preflight_model_size_gb must be 0 or more"),
    ("sizes-descending", {"gpu_preflight_nccl_sizes": [268435456, 16384]}, "gpu_preflight_nccl_sizes must be"),
    ("size-odd-for-bf16", {"gpu_preflight_nccl_sizes": [16383, 268435456], "gpu_preflight_nccl_latency_size": 16383},
     "a multiple of the bfloat16 element size"),
    ("size-not-a-number", {"gpu_preflight_nccl_sizes": ["16K"]}, "gpu_preflight_nccl_sizes"),
    ("latency-size-not-measured", {"gpu_preflight_nccl_latency_size": 8192},
     "gpu_preflight_nccl_latency_size (8192) must be one of gpu_preflight_nccl_sizes"),
    ("gpu-count-zero", {"gpu_preflight_expected_gpu_count": 0}, "gpu_preflight_expected_gpu_count must be at least 1"),
    ("env-lower-case", {"gpu_preflight_nccl_env": {"nccl_debug": "INFO"}}, "gpu_preflight_nccl_env must map upper-case"),
    ("ignore-unknown-finding", {"gpu_preflight_pcie_ignore": ["acs_enabled"]},
     "gpu_preflight_pcie_ignore names unknown findings ['acs_enabled']"),
    ("ignore-not-a-list", {"gpu_preflight_pcie_ignore": {"bar1_small": True}}, "gpu_preflight_pcie_ignore"),
    ("fix-iommu-not-bool", {"gpu_preflight_fix_iommu_passthrough": "sometimes"}, "gpu_preflight_fix_iommu_passthrough"),
    ("fix-aspm-not-bool", {"gpu_preflight_fix_pcie_aspm_off": "maybe"}, "gpu_preflight_fix_pcie_aspm_off"),
    ("fix-port-pm-not-bool", {"gpu_preflight_fix_pcie_port_pm_off": [True]}, "gpu_preflight_fix_pcie_port_pm_off"),
    ("fix-acs-not-bool", {"gpu_preflight_fix_acs_redirect_off": "all bridges"}, "gpu_preflight_fix_acs_redirect_off"),
    ("fix-p2p-not-bool", {"gpu_preflight_fix_nccl_p2p_disable": "1 please"}, "gpu_preflight_fix_nccl_p2p_disable"),
    ("reboot-allowed-not-bool", {"gpu_preflight_reboot_allowed": "later"}, "gpu_preflight_reboot_allowed"),
    ("reboot-timeout-short", {"gpu_preflight_reboot_timeout": 10}, "gpu_preflight_reboot_timeout must be at least 60"),
    ("compare-p2p-choice", {"gpu_preflight_nccl_compare_p2p": "sometimes"}, "gpu_preflight_nccl_compare_p2p"),
]


@pytest.fixture(scope="module")
def batch(gpu_testhost, tmp_path_factory):
    """Every bad case in one run of the playbook, one inventory host each (tests/harness/bad_inputs.py)."""
    fetch = tmp_path_factory.mktemp("fetched")
    cases = {name: {**CONTAINER, "gpu_preflight_fetch_dir": str(fetch), **extra} for name, extra, _ in BAD}
    result = bad_inputs.run(gpu_testhost, PLAYBOOK, cases, tmp_path_factory.mktemp("inventory"), snapshot=SNAPSHOT)
    return result, fetch


@pytest.mark.parametrize("case,expect", [(b[0], b[2]) for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_fails_before_any_change(batch, case, expect):
    result, fetch = batch
    assert result.returncode != 0, result.out[-3000:]
    assert expect in result.failure(case), result.out[-4000:]
    assert result.recap[bad_inputs.alias(case)]["changed"] == 0, result.out[-3000:]
    assert result.unchanged, "the host changed"
    assert not any(fetch.iterdir()), "a report was fetched"
