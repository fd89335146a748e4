"""nvidia_cuda_facts parsers on real outputs (recorded on an H200) and on the test double."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from repo import ROOT, load

FIX = Path(__file__).parent / "fixtures" / "h200"
facts = load("roles/nvidia_cuda/library/nvidia_cuda_facts.py")


def test_gpu_csv_from_a_real_h200():
    gpus = facts.parse_gpu_csv((FIX / "nvidia-smi-query.csv").read_text())
    assert gpus == [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-f28f6d17-1fa0-ca05-5586-209c581084e6",
                     "compute_cap": "9.0", "memory_mib": 143771, "persistence_mode": "Enabled",
                     "pci_bus_id": "00000000:00:06.0"}]


def test_banner_proc_and_nvcc_from_a_real_h200():
    assert facts.parse_cuda_version_banner((FIX / "nvidia-smi.txt").read_text()) == "13.0"
    assert facts.parse_proc_version((FIX / "proc-driver-version.txt").read_text()) == "580.159.04"
    assert facts.parse_nvcc_version((FIX / "nvcc-version.txt").read_text()) == {"version": "13.0", "release": "13.0.88"}
    assert facts.driver_branch("580.159.04") == "580"


def test_dpkg_query_from_a_real_host():
    pkgs = facts.parse_dpkg_query((FIX / "dpkg-nvidia-cuda.txt").read_text())
    assert pkgs["cuda-nvcc-13-0"] == {"version": "13.0.88-1", "held": False, "state": "installed"}
    assert all(p["state"] == "installed" for p in pkgs.values())


def test_dpkg_query_hold_and_removed_states():
    text = ("nvidia-open\t580.95.05-1\thi \thold ok installed\n"
            "cuda-nvcc-12-8\t12.8.93-1\trc \tdeinstall ok config-files\n"
            "garbage line\n")
    assert facts.parse_dpkg_query(text) == {"nvidia-open": {"version": "580.95.05-1", "held": True, "state": "installed"}}


def test_malformed_gpu_line_is_an_error_not_a_guess():
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        facts.parse_gpu_csv("0, NVIDIA H200, 9.0\n")


def test_unknown_outputs_give_none():
    assert facts.parse_cuda_version_banner("NVIDIA-SMI has failed because it couldn't communicate") is None
    assert facts.parse_proc_version("") is None
    assert facts.parse_nvcc_version("bash: nvcc: command not found") is None


def test_test_double_speaks_the_same_format(tmp_path):
    """The mirror's nvidia-smi (a test double) must be parsed like the real one."""
    src = (ROOT / "tests/harness/fake_nvidia_smi.py").read_text()
    gpus = [{"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0", "memory_mib": 97887}] * 2
    smi = tmp_path / "nvidia-smi"
    smi.write_text(src.replace("@DRIVER_VERSION@", "580.95.05").replace("@CUDA_VERSION@", "13.0")
                   .replace("@DEFAULT_GPUS@", json.dumps(gpus)))
    def run(*a):
        return subprocess.run([sys.executable, str(smi), *a], capture_output=True, text=True, check=True).stdout
    parsed = facts.parse_gpu_csv(run("--query-gpu=" + ",".join(facts.GPU_FIELDS), "--format=csv,noheader,nounits"))
    assert [g["compute_cap"] for g in parsed] == ["12.0", "12.0"]
    assert parsed[1]["memory_mib"] == 97887
    assert facts.parse_cuda_version_banner(run()) == "13.0"
