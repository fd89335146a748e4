"""The role's kernel check reads the arch of real nvcc output (no GPU needed to compile)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repo import ROOT

SCRIPT = ROOT / "roles/nvidia_cuda/files/nvidia_cuda_verify.py"
NVCC = shutil.which("nvcc") or "/usr/local/cuda-13.0/bin/nvcc"
needs_nvcc = pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc is not on this machine (the molecule scenarios cover it)")


@needs_nvcc
@pytest.mark.parametrize("arch,sm", [("sm_120a", 120), ("sm_90", 90), ("sm_80", 80)])
def test_compiles_and_reads_the_machine_code_arch(arch, sm):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--nvcc", NVCC, "--arch", arch],
                          capture_output=True, text=True, timeout=300)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["compiled"] is True and result["cubin_sm"] == sm and result["run"] == "skipped"


@needs_nvcc
def test_unknown_arch_fails_with_the_compiler_message():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--nvcc", NVCC, "--arch", "sm_125"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "sm_125" in json.loads(proc.stdout)["error"]


def test_rejects_a_file_that_is_not_cuda_elf(tmp_path):
    spec = importlib.util.spec_from_file_location("verify", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    host_elf = tmp_path / "x"
    host_elf.write_bytes(Path(sys.executable).resolve().read_bytes()[:64])
    with pytest.raises(ValueError, match="not a CUDA ELF"):
        mod.cubin_sm(str(host_elf))
