"""Verifier of molecule/default: site.yml converged on one simulated GPU host.

In this order: check mode on the converged host changes nothing; what systemd starts at boot;
a reboot (the container restarted from outside, its systemd boots again) brings the whole stack
back with no Ansible run, and the bench then passes; a driver branch change (580 -> 590, which
the nvidia_cuda role does not reboot for in a container) followed by the reboot it needs brings
the stack back on the new driver, the server included. Figures go to
$MOLECULE_EPHEMERAL_DIRECTORY/default-figures.json and are printed.
"""

import json
import os
import re
import subprocess
import time
from pathlib import Path

from boot import reboot, starts_at_boot
from repo import ROOT
from waiting import record_figures

NAME = "molecule-site"
testinfra_hosts = [f"podman://{NAME}"]
FIGURES = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "default-figures.json"
DRIVER_PACKAGES = ["nvidia-open", "nvidia-driver-cuda", "nvidia-kernel-open-dkms"]
NEW_BRANCH = ["-e", "nvidia_cuda_driver_branch=590", "-e", "nvidia_cuda_driver_version=590.48.01"]


def record(**figures):
    record_figures(FIGURES, **figures)


def playbook(path, *extra, timeout=900):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(ROOT / path), *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return proc, proc.stdout + proc.stderr


def recap(out):
    match = re.search(rf"{NAME}\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=(\d+)", out)
    assert match, out[-3000:]
    return int(match.group(1)), int(match.group(2))


def health(host):
    return host.run("curl -s -o /dev/null -w '%{http_code}' --max-time 5 http://127.0.0.1:30000/health_generate").stdout


def wait_serving(host, began, timeout=180):
    """Seconds from ``began`` (the restart) until /health_generate answers 200."""
    while time.monotonic() - began < timeout:
        if health(host) == "200":
            return time.monotonic() - began
        time.sleep(0.5)
    raise AssertionError("the server did not come back after the reboot:\n"
                         + host.run("systemctl status sglang-server --no-pager; "
                                    "journalctl -b -u sglang-server -n 30 --no-pager").stdout)


def test_check_diff_on_converged_host_reports_no_change():
    proc, out = playbook("site.yml", "--check", "--diff", timeout=600)
    assert proc.returncode == 0, out[-6000:]
    assert recap(out) == (0, 0), out[-6000:]


def test_pipeline_reports_exist(host):
    assert host.file("/var/lib/nvidia-cuda/report.json").exists


def test_what_systemd_starts_at_boot(host):
    """Every service the roles install is linked into multi-user.target.wants ('static' would not be)."""
    for unit in ("sglang-server", "nvidia-persistenced"):
        assert starts_at_boot(host, unit), f"{unit} would not start after a reboot"
    unit = host.file("/etc/systemd/system/sglang-server.service").content_string
    assert "WantedBy=multi-user.target" in unit
    assert re.search(r"^After=.*network-online\.target.*nvidia-persistenced\.service", unit, re.M)


def test_a_reboot_brings_the_stack_back_without_ansible_and_the_bench_passes(host):
    pid_before = host.check_output("systemctl show -p MainPID --value sglang-server")
    began = reboot(NAME)
    booted = time.monotonic() - began
    ready = wait_serving(host, began)
    assert host.check_output("systemctl show -p MainPID --value sglang-server") != pid_before
    assert host.service("nvidia-persistenced").is_running
    assert host.check_output("nvidia-smi --query-gpu=name --format=csv,noheader").count("RTX PRO 6000") == 8
    record(reboot_systemd_up_s=round(booted, 1), reboot_to_health_generate_200_s=round(ready, 1),
           simulated_model_load_s=float(host.run(
               "grep -o 'SGLANG_SIM_LOAD_SECONDS=[^ ]*' /etc/sglang/sglang-server.env | cut -d= -f2 | tr -d '\"'")
               .stdout.strip() or 0))
    results = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "bench-results"
    proc, out = playbook("playbooks/bench.yml", "-e", f"sglang_bench_results_dir={results}", "-e", "sglang_bench_runs=4")
    assert proc.returncode == 0, out[-4000:]
    assert "Benchmark regression" not in out


def test_a_driver_change_then_the_reboot_it_needs_brings_the_stack_back(host):
    """nvidia_cuda moves to the 590 branch; in a container it must not reboot (it says why). The
    host is then restarted from outside, as the role would restart a real host, and comes back
    on the new driver with the server serving, with no Ansible run in between."""
    proc, out = playbook("playbooks/cuda.yml", *NEW_BRANCH)
    assert proc.returncode == 0, out[-5000:]
    assert recap(out)[0] > 0
    assert "No reboot: the host is a container" in out
    proc, out = playbook("playbooks/cuda.yml", *NEW_BRANCH)
    assert proc.returncode == 0 and recap(out) == (0, 0), out[-5000:]

    held = set(host.check_output("apt-mark showhold").split())
    for name in DRIVER_PACKAGES:
        assert host.package(name).version == "590.48.01-1", name
        assert name in held, name
    prefs = host.file("/etc/apt/preferences.d/nvidia-cuda").content_string
    assert "Package: nvidia-open\nPin: version 590.48.01-1" in prefs and "580.95.05" not in prefs
    assert host.package("cuda-toolkit-13-0").version == "13.0.2-1"
    log = host.file("/var/log/dpkg.log").content_string
    assert log.count("install cuda-toolkit-13-0:amd64") == 1 and "remove cuda-" not in log

    began = reboot(NAME)
    ready = wait_serving(host, began)
    assert "590.48.01" in host.check_output("nvidia-smi")
    assert host.service("nvidia-persistenced").is_running
    report = json.loads(host.file("/var/lib/nvidia-cuda/report.json").content_string)
    assert report["driver"]["version"] == "590.48.01" and report["driver"]["cuda_version"] == "13.1"
    record(driver_change_reboot_to_health_generate_200_s=round(ready, 1))


def test_the_upgrade_to_the_current_release_set_through_upgrade_yml(host):
    """playbooks/upgrade.yml from the 0.5.9 set (converged by site.yml) to the current one, 0.5.17: its
    kernel package (sglang-kernel, not sgl-kernel) and FlashInfer from its own metadata, the EAGLE-3 patch
    finding the delegation upstream and changing nothing, the server restarted on it, and the bench
    comparing the two releases on this host (the rollout's table)."""
    results = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/tmp")) / "bench-results"
    old = host.file("/opt/sglang/current").linked_to.rsplit("/", 1)[-1]
    assert old.startswith("sglang-0.5.9-")
    began = time.monotonic()
    proc, out = playbook("playbooks/upgrade.yml", "-e", "sglang_build_release_set=0.5.17",
                         "-e", f"sglang_bench_results_dir={results}", timeout=1500)
    assert proc.returncode == 0, out[-6000:]
    new = host.file("/opt/sglang/current").linked_to.rsplit("/", 1)[-1]
    assert new.startswith("sglang-0.5.17-") and new != old
    assert host.file("/var/lib/sglang/serving-release").content_string.strip().endswith(new)
    assert health(host) == "200"
    manifest = json.loads(host.file(f"/opt/sglang/releases/{new}/manifest.json").content_string)
    assert manifest["release_set"] == "0.5.17"
    assert manifest["components"]["sgl_kernel"]["distribution"] == "sglang-kernel"
    assert manifest["versions"]["sglang-kernel"] == "0.4.5" and "sgl-kernel" not in manifest["versions"]
    assert manifest["versions"]["flashinfer-python"] == "0.6.15.post1" and manifest["versions"]["sglang"] == "0.5.17"
    # The delegation is upstream in 0.5.17: the patch left the model file as the wheel shipped it.
    kimi = host.file(manifest["sglang_dir"] + "/srt/models/kimi_k25.py").content_string
    assert "added by Ansible" not in kimi and "def set_eagle3_layers_to_capture" in kimi
    table = out.split("Show the table")[-1].split("PLAY RECAP")[0]
    assert old in table and new in table, table[-3000:]
    print("\n[upgrade 0.5.9 -> 0.5.17] " + " ".join(ln.strip() for ln in table.splitlines() if NAME in ln))
    record(upgrade_to_current_set_s=round(time.monotonic() - began, 1))
