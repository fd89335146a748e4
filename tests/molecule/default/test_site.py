"""Verifier of molecule/default: site.yml converged; check mode on it changes nothing."""

import os
import re
import subprocess
from pathlib import Path

testinfra_hosts = ["podman://molecule-site"]
ROOT = Path(__file__).resolve().parents[3]


def test_check_diff_on_converged_host_reports_no_change():
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(ROOT / "site.yml"), "--check", "--diff"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    recap = re.search(r"molecule-site\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", proc.stdout)
    assert recap, proc.stdout[-3000:]
    assert recap.group(1) == "0", proc.stdout[-6000:]


def test_pipeline_reports_exist(host):
    assert host.file("/var/lib/nvidia-cuda/report.json").exists
