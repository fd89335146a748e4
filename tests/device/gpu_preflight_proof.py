"""Run gpu_preflight on a real GPU machine with -c local and keep everything it showed.

Used on the lent GPU machines (no systemd, no network, driver, CUDA and torch
preinstalled). In order, each step with its own time limit so that the whole proof
always ends and its results can be packed:

1. the raw outputs the role parses (nvidia-smi query CSVs, ``topo -m``, ``nvlink -s``,
   ``-q``, Xid lines of the kernel log, /proc/meminfo, df): the parser test fixtures;
2. optionally the benchmark program alone: on CPUs with gloo and 2 processes (its
   orchestration with real torch, where only one GPU is lent), and on the GPUs with
   NCCL's logs kept (the fixture of the NCCL log parser);
3. playbooks/preflight.yml: run1 (expectations of this machine), run2 (the same again:
   idempotence, changed=0), ``--check --diff``, and a mismatch run (one GPU more than
   there are, the other interconnect, an unreachable bus bandwidth) that must fail
   naming each difference;
4. summary.txt: return codes, recaps, wall times and the measured figures.

Usage: python3 tests/device/gpu_preflight_proof.py OUT --gpus N --cc 9.0 --name H200 [--gloo-check] [--nccl-direct]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "roles" / "gpu_preflight" / "library"))
import gpu_preflight_facts as facts  # noqa: E402 (the module's directory first: run as a script, no package)

NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
RAW = {
    "nvidia-smi.txt": ["nvidia-smi"],
    "nvidia-smi-q.txt": ["nvidia-smi", "-q"],
    "query-core.csv": ["nvidia-smi", "--query-gpu=" + ",".join(facts.CORE_FIELDS), "--format=csv,noheader,nounits"],
    "query-health.csv": ["nvidia-smi", "--query-gpu=index," + ",".join(facts.HEALTH_FIELDS), "--format=csv,noheader,nounits"],
    "topo-m.txt": ["nvidia-smi", "topo", "-m"],
    "nvlink-s.txt": ["nvidia-smi", "nvlink", "-s"],
    "topo-p2p-r.txt": ["nvidia-smi", "topo", "-p2p", "r"],
    "dmesg-nvidia.txt": ["sh", "-c", "dmesg > /tmp/dmesg.txt; echo \"# dmesg rc=$?, $(wc -l < /tmp/dmesg.txt) lines; "
                         "lines with NVRM or Xid:\"; grep -iE 'NVRM|xid' /tmp/dmesg.txt | tail -40"],
    "meminfo.txt": ["cat", "/proc/meminfo"],
    "df.txt": ["sh", "-c", "df -B1 / /tmp /dev/shm; findmnt /dev/shm"],
    "torch.txt": [sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda, "
                  "torch.cuda.device_count(), torch.cuda.nccl.version())"],
    "os.txt": ["sh", "-c", "uname -a; cat /etc/os-release; nproc"],
}


def run(cmd: list[str], log: Path, env: dict, timeout: float) -> tuple[int, float, str, str]:
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out = 124, "%s%s\n# TIMED OUT after %d s" % (exc.stdout or "", exc.stderr or "", timeout)
    elapsed = time.monotonic() - started
    log.write_text(f"$ {' '.join(cmd)}\n# rc={rc} wall={elapsed:.1f}s\n{out}")
    recap = re.search(r"localhost\s*:\s*(ok=.*)", out)
    return rc, elapsed, recap.group(1).strip() if recap else "no recap", out


def figures(report: dict) -> list[str]:
    nccl = report.get("nccl") or {}
    inv = report.get("inventory") or {}
    lines = ["result=%s duration_s=%s nccl=%s (%s)" % (report.get("result"), report.get("duration_s"), nccl.get("status"),
                                                       nccl.get("reason"))]
    lines.append("interconnect=%s link_types=%s nominal=%s" % ((inv.get("topology") or {}).get("interconnect"),
                                                               (inv.get("topology") or {}).get("link_types"), inv.get("link")))
    lines.append("nccl_log=%s graph_error=%s wall_s=%s" % (nccl.get("nccl_log"), nccl.get("graph_error"), nccl.get("wall_s")))
    for row in nccl.get("results", []):
        lines.append("  %10d B  latency %8.2f us (%s; eager %.2f)  algbw %8.2f GB/s  busbw %8.2f GB/s"
                     % (row["bytes"], row["latency_us"], row["timing"], row["eager_us"], row["algbw_gbps"], row["busbw_gbps"]))
    return lines


def machine_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every proof on a lent machine takes: where to write, and what the machine has."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("out", type=Path)
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--cc", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--min-memory-mib", type=int, default=140000)
    return ap


def main() -> int:
    ap = machine_parser(__doc__.splitlines()[0])
    ap.add_argument("--gloo-check", action="store_true", help="also run the benchmark alone on CPUs (gloo, 2 processes)")
    ap.add_argument("--nccl-direct", action="store_true", help="also run the benchmark alone, keeping NCCL's logs")
    args = ap.parse_args()
    out = args.out
    (out / "raw").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **NCCL_ENV, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP="/tmp/ansible-local", ANSIBLE_REMOTE_TEMP="/tmp/ansible-remote")
    summary = []

    for name, cmd in RAW.items():
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            (out / "raw" / name).write_text(proc.stdout + proc.stderr
                                            + ("" if proc.returncode == 0 else "# rc=%d\n" % proc.returncode))
        except subprocess.TimeoutExpired:
            (out / "raw" / name).write_text("# timed out\n")
    persistence = {g["persistence_mode"] for g in facts.parse_gpus((out / "raw" / "query-core.csv").read_text())}
    shm_mounted = os.path.ismount("/dev/shm")
    free_gb = shutil.disk_usage("/tmp").free / 1e9
    summary.append("persistence modes: %s; /dev/shm mounted: %s; /tmp free: %.0f GB" % (persistence, shm_mounted, free_gb))

    script = ROOT / "roles/gpu_preflight/files/gpu_preflight_allreduce.py"
    if args.gloo_check:
        rc, wall, _, text = run([sys.executable, str(script), "--device", "cpu", "--backend", "gloo", "--world-size", "2",
                                 "--sizes", "16384,1048576", "--iters", "5", "--timeout", "120",
                                 "--python", sys.executable], out / "gloo-cpu.log", env, 150)
        summary.append("gloo-cpu (2 processes, orchestration with real torch): rc=%d wall=%.1fs %s"
                       % (rc, wall, text.strip().splitlines()[-1][:600] if text.strip() else ""))

    if args.nccl_direct:
        rc, wall, _, text = run([sys.executable, str(script), "--timeout", "150", "--python", sys.executable,
                                 "--log-dir", str(out / "raw" / "nccl-logs")], out / "nccl-direct.log", env, 180)
        summary.append("nccl-direct (the benchmark alone, NCCL logs kept): rc=%d wall=%.1fs" % (rc, wall))
        try:
            summary.extend("  " + line for line in figures({"nccl": json.loads(text.strip().splitlines()[-1])}))
        except (ValueError, IndexError):
            summary.append("  no JSON: " + text[-600:])

    inv = out / "inventory.ini"
    inv.write_text(f"[gpu_hosts]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    fetch = out / "fetched"
    expect = {
        "gpu_preflight_expected_gpu_count": args.gpus, "gpu_preflight_expected_gpu_name": args.name,
        "gpu_preflight_expected_compute_capability": args.cc, "gpu_preflight_min_gpu_memory_mib": args.min_memory_mib,
        "gpu_preflight_expected_interconnect": "any",
        "gpu_preflight_require_persistence_mode": persistence == {"Enabled"},
        "gpu_preflight_model_path": "/tmp/models", "gpu_preflight_model_size_gb": min(10, int(free_gb / 2)),
        "gpu_preflight_min_ram_gib": 8, "gpu_preflight_min_shm_gib": 0.01 if shm_mounted else 0,
        "gpu_preflight_nccl_python": [sys.executable], "gpu_preflight_nccl_env": NCCL_ENV,
        "gpu_preflight_nccl_max_latency_us": 200, "gpu_preflight_nccl_min_busbw_gbps": 5,
        "gpu_preflight_nccl_timeout": 150, "gpu_preflight_fetch_dir": str(fetch),
    }
    (out / "extra-vars.json").write_text(json.dumps(expect, indent=2) + "\n")
    base = [shutil.which("ansible-playbook") or "ansible-playbook", "-i", str(inv), "playbooks/preflight.yml",
            "-e", "@" + str(out / "extra-vars.json")]
    report = Path("/var/lib/gpu-preflight/report.json")
    found_interconnect = None
    for label, flags in (("run1", []), ("run2", []), ("check", ["--check", "--diff"]), ("mismatch", None)):
        if flags is None:
            other = {"nvlink": "pcie", "pcie": "nvlink"}.get(found_interconnect, "nvlink")
            flags = ["-e", json.dumps({"gpu_preflight_expected_gpu_count": args.gpus + 1,
                                       "gpu_preflight_expected_interconnect": other if args.gpus > 1 else "any",
                                       "gpu_preflight_nccl_min_busbw_gbps": 100000})]
        rc, wall, recap, text = run(base + flags, out / f"ansible-{label}.log", env, 330)
        summary.append(f"{label}: rc={rc} wall={wall:.1f}s {recap}")
        failed = re.search(r"GPU preflight failed on localhost: (.*)", text)
        if failed:
            summary.append("  failure: " + failed.group(1)[:1500])
        if report.exists() and label != "check":
            shutil.copy(report, out / f"report-{label}.json")
            data = json.loads(report.read_text())
            found_interconnect = found_interconnect or ((data.get("inventory") or {}).get("topology") or {}).get("interconnect")
            summary.extend("  " + line for line in figures(data))
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
