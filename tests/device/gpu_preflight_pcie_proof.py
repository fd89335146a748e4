"""Record the PCIe platform of a lent GPU machine and run gpu_preflight's PCIe report there.

Rerunnable on any GPU host (root, no network needed): first the raw outputs the PCIe
parsers read, as test fixtures (lspci -tv and -vvv -nn -D, nvidia-smi -q, topo -m and
-p2p r/w/n/a/p, the PCIe query fields, /proc/cmdline, /sys/class/iommu and the IOMMU
groups, every /sys/bus/pci/devices entry's link, NUMA, ASPM and AER files, the ASPM policy,
the kernel log's NVRM/Xid/AER/IOMMU lines, and read_sysfs's own view as sysfs.json); then
playbooks/preflight.yml with -c local: run1 (this machine's expectations, the P2P
comparison always asked), run2 (idempotence), and --check --diff with every fix asked
(what the fixes would change, nothing changed). Each step has its own time limit.

Usage: python3 tests/device/gpu_preflight_pcie_proof.py OUT --gpus N --cc 9.0 --name H200
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "roles" / "gpu_preflight" / "module_utils"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_preflight_pcie_parse as parse  # noqa: E402 (the module's directory first)
from gpu_preflight_proof import NCCL_ENV, figures, machine_parser, run  # noqa: E402

SYS_FILES = ("current_link_speed current_link_width max_link_speed max_link_width numa_node local_cpulist class "
             "vendor device link/l0s_aspm link/l1_aspm power/control aer_dev_correctable aer_dev_fatal "
             "aer_dev_nonfatal")
RAW = {
    "lspci-tv.txt": "lspci -tv",
    "lspci-vvv.txt": "lspci -vvv -nn -D",
    "nvidia-smi-q.txt": "nvidia-smi -q",
    "topo-m.txt": "nvidia-smi topo -m",
    **{"topo-p2p-%s.txt" % m: "nvidia-smi topo -p2p %s" % m for m in "rwnap"},
    "query-pcie.csv": "nvidia-smi --query-gpu=index,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,"
                      "pcie.link.gen.gpumax,pcie.link.gen.hostmax,pcie.link.width.current,pcie.link.width.max,"
                      "persistence_mode,ecc.mode.current,retired_pages.pending,remapped_rows.pending,"
                      "remapped_rows.failure --format=csv",
    "cmdline.txt": "cat /proc/cmdline",
    "iommu.txt": "ls -la /sys/class/iommu/; ls /sys/kernel/iommu_groups/ | head -50; "
                 "for g in /sys/kernel/iommu_groups/*; do echo \"$g: $(cat $g/type 2>&1) $(ls $g/devices)\"; done | head -80",
    "sysfs-pci.txt": "for d in /sys/bus/pci/devices/*; do echo \"== $d -> $(readlink -f $d)\"; for f in %s; do "
                     "[ -e $d/$f ] && echo \"$f: $(cat $d/$f 2>&1 | tr '\\n' ' ')\"; done; "
                     "[ -e $d/iommu_group ] && echo \"iommu_group: $(basename $(readlink $d/iommu_group))\"; "
                     "head -3 $d/resource 2>/dev/null; done" % SYS_FILES,
    "aspm.txt": "cat /sys/module/pcie_aspm/parameters/policy; ls /sys/module/pcie_aspm/parameters/",
    "dmesg.txt": "dmesg > /tmp/dmesg.txt; echo \"# dmesg rc=$?, $(wc -l < /tmp/dmesg.txt) lines; lines naming "
                 "NVRM, Xid, AER, pcieport, link down, IOMMU, DMAR, AMD-Vi, ACS:\"; "
                 "grep -iE 'NVRM|xid|AER|pcieport|link down|surprise|iommu|DMAR|AMD-Vi|ACS' /tmp/dmesg.txt | tail -80",
    "numa.txt": "ls /sys/devices/system/node/; cat /sys/devices/system/node/node*/cpulist; nproc",
    "bootloader.txt": "uname -a; ls -la /etc/default/grub.d /boot 2>&1 | head -30; command -v update-grub lspci setpci "
                      "dmesg; cat /etc/os-release | head -2",
}


def main() -> int:
    args = machine_parser(__doc__.splitlines()[0]).parse_args()
    out = args.out
    (out / "raw").mkdir(parents=True, exist_ok=True)
    for name, cmd in RAW.items():
        try:
            proc = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
            text = proc.stdout + proc.stderr + ("" if proc.returncode == 0 else "# rc=%d\n" % proc.returncode)
        except subprocess.TimeoutExpired:
            text = "# timed out\n"
        (out / "raw" / name).write_text("# $ %s\n%s" % (cmd, text))
    bdfs = [parse.norm_bdf(line.split(",")[1]) for line in
            (out / "raw" / "query-pcie.csv").read_text().splitlines()[2:] if line.count(",") > 3]
    (out / "raw" / "sysfs.json").write_text(json.dumps(parse.read_sysfs("/", bdfs), indent=1, sort_keys=True) + "\n")

    env = dict(os.environ, **NCCL_ENV, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP="/tmp/ansible-local", ANSIBLE_REMOTE_TEMP="/tmp/ansible-remote")
    persistence = "Persistence Mode" in (out / "raw" / "nvidia-smi-q.txt").read_text() and \
        "Disabled" not in [ln.split(":")[-1].strip() for ln in (out / "raw" / "nvidia-smi-q.txt").read_text().splitlines()
                           if ln.strip().startswith("Persistence Mode")]
    inv = out / "inventory.ini"
    inv.write_text(f"[gpu_hosts]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    free_gb = shutil.disk_usage("/tmp").free / 1e9
    expect = {
        "gpu_preflight_expected_gpu_count": args.gpus, "gpu_preflight_expected_gpu_name": args.name,
        "gpu_preflight_expected_compute_capability": args.cc, "gpu_preflight_min_gpu_memory_mib": args.min_memory_mib,
        "gpu_preflight_expected_interconnect": "any", "gpu_preflight_require_persistence_mode": persistence,
        "gpu_preflight_model_path": "/tmp/models", "gpu_preflight_model_size_gb": min(10, int(free_gb / 2)),
        "gpu_preflight_min_ram_gib": 8, "gpu_preflight_min_shm_gib": 0.01 if os.path.ismount("/dev/shm") else 0,
        "gpu_preflight_nccl_python": [sys.executable], "gpu_preflight_nccl_env": NCCL_ENV,
        "gpu_preflight_nccl_max_latency_us": 200, "gpu_preflight_nccl_min_busbw_gbps": 5,
        "gpu_preflight_nccl_timeout": 150, "gpu_preflight_fetch_dir": str(out / "fetched"),
        "gpu_preflight_nccl_compare_p2p": "always",
    }
    (out / "extra-vars.json").write_text(json.dumps(expect, indent=2) + "\n")
    base = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(inv), "playbooks/preflight.yml",
            "-e", "@" + str(out / "extra-vars.json")]
    every_fix = {k: True for k in ("gpu_preflight_fix_iommu_passthrough", "gpu_preflight_fix_pcie_aspm_off",
                                   "gpu_preflight_fix_pcie_port_pm_off", "gpu_preflight_fix_acs_redirect_off",
                                   "gpu_preflight_fix_nccl_p2p_disable")}
    report = Path("/var/lib/gpu-preflight/report.json")
    summary = []
    for label, flags in (("run1", []), ("run2", []), ("check-fixes", ["--check", "--diff", "-e", json.dumps(every_fix)])):
        rc, wall, recap, text = run(base + flags, out / f"ansible-{label}.log", env, 200)
        summary.append(f"{label}: rc={rc} wall={wall:.1f}s {recap}")
        if report.exists() and label != "check-fixes":
            shutil.copy(report, out / f"report-{label}.json")
            data = json.loads(report.read_text())
            summary.extend("  " + line for line in figures(data))
            pcie = data.get("pcie") or {}
            summary.append("  pcie checks: %s" % {c["name"]: c["status"] for c in data.get("checks", []) if c["phase"] == "pcie"})
            summary.append("  pcie measured: %s" % pcie.get("measured"))
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
