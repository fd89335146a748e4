"""`make demo`: converge site.yml against a local simulated GPU host and print the reports.

The simulated GPU host is a podman container running systemd (a real host in every
respect but its GPUs, which the test mirror's driver package declares: a TEST
DOUBLE). The NVIDIA repository is the local signed test mirror and SGLang's sources
are local git repositories made from its PyPI sdists, both served inside the host.
With no GPU, the server runs the labelled SGLang simulator, which the test role sglang_simulator
(molecule/resources/roles/) installs before site.yml runs.
Everything else the playbooks do to the host is real.

Usage: python3 tests/harness/demo.py [--recreate] [--down]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import hostsetup
import mirror
import sources
import synthetic_model
from steps import StepFailed, guarded, run

ROOT = Path(__file__).resolve().parents[2]

HOST = "sglang-demo-gpu1"
SIMULATOR_PLAY = "molecule/resources/simulator.yml"


def log(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run("podman " + args[0], ["podman", *args], check=check)


def container_setup(name: str) -> str | None:
    """Image and mounts of an existing container, or None."""
    res = podman("inspect", "--format", "{{.ImageName}} {{range .Mounts}}{{.Source}} {{end}}", name, check=False)
    return res.stdout.strip() if res.returncode == 0 else None


def start_host(image: str, mirror_dir: Path, sources_dir: Path, fixtures_dir: Path, recreate: bool) -> None:
    current = container_setup(HOST)
    if current and (recreate or sorted(current.split()) != sorted([image, str(mirror_dir), str(sources_dir), str(fixtures_dir)])):
        log(f"removing {HOST} ({'--recreate' if recreate else 'image or test mirror changed'})")
        podman("rm", "-f", HOST)
        current = None
    if current:
        podman("start", HOST)
        log(f"{HOST} already exists; reusing it (make demo-clean starts from scratch)")
    else:
        podman("run", "-d", "--name", HOST, "--hostname", HOST, "--systemd=always",
               "-v", f"{mirror_dir}:/srv/nvidia-mirror:ro", "-v", f"{sources_dir}:/srv/sglang-sources:ro",
               "-v", f"{fixtures_dir}:/srv/hub-fixtures:ro",
               image, "/sbin/init")
        log(f"started {HOST} from {image}")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        state = podman("exec", HOST, "systemctl", "is-system-running", check=False).stdout.strip()
        if state in ("running", "degraded"):
            break
        time.sleep(1)
    else:
        raise StepFailed(f"{HOST}: systemd did not finish booting in 90 s (state: {state})")
    for name, command, what in (
            ("test-nvidia-mirror", "-m http.server 8088 --bind 127.0.0.1 --directory /srv/nvidia-mirror",
             "local NVIDIA CUDA repository mirror"),
            ("test-sglang-sources", "-m http.server 8089 --bind 127.0.0.1 --directory /srv/sglang-sources",
             "local SGLang sources"),
            ("test-hub-double", "/srv/hub-fixtures/hub_double.py --root /srv/hub-fixtures/hub --port 8090",
             "Hugging Face Hub TEST DOUBLE, synthetic models")):
        unit = (f"[Unit]\nDescription=TEST ONLY: {what}\n[Service]\n"
                f"ExecStart=/usr/bin/python3 {command}\n"
                "[Install]\nWantedBy=multi-user.target\n")
        podman("exec", HOST, "sh", "-c",
               f"printf '%s' '{unit}' > /etc/systemd/system/{name}.service && "
               f"systemctl daemon-reload && systemctl enable --now {name}")

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recreate", action="store_true", help="start from a fresh host")
    ap.add_argument("--down", action="store_true", help="remove the demo host and exit")
    args = ap.parse_args(argv)
    if args.down:
        podman("rm", "-f", "--ignore", HOST)
        log(f"removed {HOST}")
        return 0

    image = hostsetup.image_ref()
    if not hostsetup.image_exists(image):
        raise StepFailed(f"image {image} missing: run `make hostsetup` first")
    mirror_dir = mirror.ensure()
    sources_dir = sources.ensure()
    fixtures_dir = synthetic_model.molecule_fixtures()
    start_host(image, mirror_dir, sources_dir, fixtures_dir, args.recreate)

    env = dict(os.environ, NVIDIA_MIRROR_DIR=str(mirror_dir), MODEL_FIXTURES_DIR=str(fixtures_dir),
               ANSIBLE_FORCE_COLOR="1")
    # One run: the labelled simulator installed on the host (test role sglang_simulator), then site.yml.
    log(f"ansible-playbook -i inventory/demo {SIMULATOR_PLAY} site.yml")
    started = time.monotonic()
    rc = subprocess.run(["ansible-playbook", "-i", "inventory/demo", SIMULATOR_PLAY, "site.yml"], cwd=ROOT,
                        env=env).returncode
    if rc != 0:
        log(f"site.yml failed (rc {rc})")
        return rc
    log(f"site.yml converged in {time.monotonic() - started:.0f} s")

    report = json.loads(podman("exec", HOST, "cat", "/var/lib/nvidia-cuda/report.json").stdout)
    gpus = report["gpus"]
    print("\n== NVIDIA / CUDA report (simulated GPU host; GPUs are a TEST DOUBLE) ==")
    print(f"driver   {report['driver']['version']} (branch {report['driver']['branch']}, "
          f"CUDA up to {report['driver']['cuda_version']})")
    print(f"GPUs     {report['gpu_count']} x {gpus[0]['name'] if gpus else '-'} "
          f"(compute capability {', '.join(sorted({g['compute_cap'] for g in gpus}))})")
    print(f"toolkit  CUDA {report['toolkit']['version']} (nvcc {report['toolkit']['release']})")
    print(f"kernel   built for {report['kernel']['arch']}: machine code {report['kernel']['machine_code']}, "
          f"run: {report['kernel']['run']}")
    print(f"held     {', '.join(sorted(report['held_packages']))}")

    bench = ROOT / "bench-results" / HOST / "report.md"
    if bench.exists():
        print(f"\n== Benchmark report (SIMULATED server: test role sglang_simulator; {bench.relative_to(ROOT)}) ==")
        text = bench.read_text()
        print(text.split("## History")[0].strip())
        print(f"\nhistory and plot: {bench.parent.relative_to(ROOT)}/ (report.md, history.png)")
    return 0


if __name__ == "__main__":
    sys.exit(guarded("demo", main))
