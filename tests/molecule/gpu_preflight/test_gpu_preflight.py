"""Verifier of molecule/gpu_preflight: the preflight's report on the host, checked from outside Ansible."""

import json
import os
import re
import subprocess
from pathlib import Path

testinfra_hosts = ["podman://molecule-gpu-preflight"]
ROOT = Path(__file__).resolve().parents[3]
REPORT = "/var/lib/gpu-preflight/report.json"
CONTAINER = {"gpu_preflight_model_size_gb": 1, "gpu_preflight_min_ram_gib": 1, "gpu_preflight_min_shm_gib": 0.05}


def report(host):
    return json.loads(host.file(REPORT).content_string)


def test_report_is_root_owned_and_world_readable(host):
    f = host.file(REPORT)
    assert f.user == "root" and f.group == "root" and f.mode == 0o644
    # Only the report: no temporary files of the atomic write, no benchmark leftovers.
    assert host.check_output("ls -A /var/lib/gpu-preflight") == "report.json"
    assert host.run("ls -d /tmp/gpu-preflight-*").rc != 0


def test_preflight_passed_against_the_demo_inventory(host):
    r = report(host)
    assert r["result"] == "passed" and r["failures"] == []
    assert r["phases"] == ["inventory", "pcie", "host", "nccl"]
    statuses = {c["name"]: c["status"] for c in r["checks"]}
    for name in ("gpu_count", "gpu_name", "compute_capability", "gpu_memory", "driver_version", "persistence_mode",
                 "interconnect", "disk", "ram", "shm"):
        assert statuses[name] == "pass", name
    # Whether the kernel log is readable on a test host depends on how Ansible reaches it (the test
    # connection enters the container's namespaces with the machine's capabilities; podman exec drops
    # CAP_SYSLOG) and on kernel.dmesg_restrict: readable -> checked (no NVIDIA Xid in this machine's
    # log), not readable -> n/a, with the reason in the report.
    xid = r["inventory"]["xid"]
    assert statuses["xid_errors"] == ("pass" if xid["readable"] else "n/a"), (xid, statuses["xid_errors"])
    assert xid["readable"] or xid["reason"]
    assert r["inventory"]["topology"]["interconnect"] == "pcie"
    assert {g["driver_version"] for g in r["inventory"]["gpus"]} == {"580.95.05"}  # installed by nvidia_cuda


def test_pcie_report_says_why_each_field_is_not_applicable_on_a_container(host):
    # nvidia-smi is the test double: its GPUs are in no /sys, and it answers neither -q nor topo -p2p.
    pcie = report(host)["pcie"]
    assert [g["bus_id"] for g in pcie["gpus"]] == ["0000:%02x:00.0" % (0x18 + i) for i in range(8)]
    for gpu in pcie["gpus"]:
        assert gpu["na"]["upstream"].startswith("not in /sys/bus/pci/devices")
        assert all(gpu["na"].get(k) for k, v in gpu.items() if v is None), gpu
    assert len(pcie["pairs"]) == 28 and pcie["findings"] == [] and pcie["kernel_params"]["wanted"] == []
    statuses = {c["name"]: c["status"] for c in report(host)["checks"] if c["phase"] == "pcie"}
    assert set(statuses.values()) <= {"pass", "n/a"} and statuses["acs_redirect_enabled"] == "n/a"
    assert host.run("ls /etc/default/grub.d/61-gpu-preflight.cfg").rc != 0  # no fix asked
    # The local fact for the server: no NCCL environment without the fix; the GPUs as the server builds on
    # them: 8 over PCIe, P2P unknown (the double answers no topo -p2p), so no PCIe IPC all-reduce there.
    fact = json.loads(host.file("/etc/ansible/facts.d/gpu_preflight.fact").content_string)
    assert fact["server_env"] == {} and fact["topology"]["gpus"] == 8, fact
    assert (fact["topology"]["interconnect"], fact["topology"]["p2p"]) == ("pcie", "unknown"), fact


def test_nccl_skipped_with_its_reason_and_the_settings_passed_through(host):
    nccl = report(host)["nccl"]
    assert nccl["status"] == "skipped"
    assert nccl["reason"].startswith("no GPU device nodes (/dev/nvidia[0-9]*)")
    assert nccl["env"]["NCCL_NVLS_ENABLE"] == "0"


def test_report_fetched_to_the_controller(host):
    fetched = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "preflight-reports" / "molecule-gpu-preflight.json"
    assert json.loads(fetched.read_text())["decision"] == report(host)["decision"]


def preflight(*args, **extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(ROOT / "playbooks/preflight.yml"),
                           "-e", json.dumps(dict(CONTAINER, **extra)), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout


def test_check_mode_on_the_converged_host_changes_nothing(host):
    before = host.file(REPORT).content_string
    out = preflight("--check", "--diff", gpu_preflight_fetch_dir="")
    recap = re.search(r"molecule-gpu-preflight\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", out)
    assert recap and recap.group(1) == "0", out[-4000:]
    assert host.file(REPORT).content_string == before


def test_inventory_tag_runs_the_inventory_phase_alone(host):
    out = preflight("--tags", "gpu_preflight_inventory", gpu_preflight_report_path="/var/tmp/preflight-inventory.json",
                    gpu_preflight_fetch_dir="")
    assert "Run the NCCL all-reduce benchmark" not in out and "Measure free disk" not in out
    only = json.loads(host.file("/var/tmp/preflight-inventory.json").content_string)
    assert only["phases"] == ["inventory"] and only["nccl"] is None and only["host_capacity"] is None
    assert {c["phase"] for c in only["checks"]} == {"inventory"}
