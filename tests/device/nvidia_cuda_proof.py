"""Run nvidia_cuda's detection and verify path on a real GPU machine, with -c local.

Used on the lent GPU machine (no systemd, no network, driver and CUDA preinstalled):
converges playbooks/cuda.yml twice and once in check mode against localhost, and
saves the logs, the role's report and the raw nvidia-smi/nvcc outputs (the test
fixtures of the parsers) into OUT.

Usage: python3 tests/device/nvidia_cuda_proof.py OUT [--gpus N] [--cc X.Y]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RAW = {
    "nvidia-smi.txt": ["nvidia-smi"],
    "nvidia-smi-query.csv": ["nvidia-smi", "--query-gpu=index,name,uuid,compute_cap,memory.total,persistence_mode,pci.bus_id",
                             "--format=csv,noheader,nounits"],
    "nvidia-smi-topo.txt": ["nvidia-smi", "topo", "-m"],
    "proc-driver-version.txt": ["cat", "/proc/driver/nvidia/version"],
    "nvcc-version.txt": ["nvcc", "--version"],
    "dpkg-nvidia-cuda.txt": ["sh", "-c", "dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Status}\\n'"
                             " 'nvidia-*' 'libnvidia-*' 'cuda-*' 'libcuda*' || true"],
}


def run(cmd: list[str], log: Path, env: dict) -> tuple[int, float, str]:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    log.write_text(f"$ {' '.join(cmd)}\n# rc={proc.returncode} wall={elapsed:.1f}s\n{proc.stdout}{proc.stderr}")
    recap = re.search(r"localhost\s*:\s*(ok=.*)", proc.stdout)
    return proc.returncode, elapsed, recap.group(1).strip() if recap else "no recap"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--cc", default="9.0")
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    for name, cmd in RAW.items():
        proc = subprocess.run(cmd, capture_output=True, text=True)
        (out / name).write_text(proc.stdout + proc.stderr)

    cuda_home = os.path.realpath("/usr/local/cuda")
    inv = out / "inventory.ini"
    inv.write_text(f"[gpu_hosts]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP="/tmp/ansible-local", ANSIBLE_REMOTE_TEMP="/tmp/ansible-remote")
    extra = ["-e", f"nvidia_cuda_expected_gpu_count={args.gpus}", "-e", f"nvidia_cuda_expected_compute_capability={args.cc}",
             "-e", f"nvidia_cuda_home={cuda_home}"]
    base = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(inv), "playbooks/cuda.yml", *extra]
    summary = [f"cuda_home={cuda_home}"]
    for label, flags in (("run1", []), ("run2", []), ("check", ["--check", "--diff"])):
        rc, wall, recap = run(base + flags, out / f"ansible-{label}.log", env)
        summary.append(f"{label}: rc={rc} wall={wall:.1f}s {recap}")
    report = Path("/var/lib/nvidia-cuda/report.json")
    if report.exists():
        shutil.copy(report, out / "report.json")
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    print((out / "report.json").read_text() if (out / "report.json").exists() else "no report")
    return 0


if __name__ == "__main__":
    sys.exit(main())
