"""files/sglang_import_check.py, the check phase's import of a release (torch, sgl_kernel and its library for
the host's compute capability, flashinfer, deep_gemm), run by a release-like Python on this machine:

the harness's 0.5.17 venv (tests/harness/serverargs_release.py: CPU torch 2.13.0, SGLang 0.5.17's package and
what its server_args imports) with the test hosts' components on PYTHONPATH, installed --no-deps as the test
hosts install them: the TEST ONLY sglang-kernel 0.4.5 without its libraries, PyPI's real sgl-kernel 0.3.21
(the 0.5.9 set's test kernel, a CUDA 12 build with its sm90/ and sm100/ libraries), FlashInfer 0.6.15.post1.
No GPU here: what needs one is `inconclusive`, with the reason, and a real failure is `failed`. The H200
run of the same command is the coordinator's (the report names the command line).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import serverargs_release
from repo import ROOT, load

SCRIPT = ROOT / "roles" / "sglang_build" / "files" / "sglang_import_check.py"
ic = load(SCRIPT)
load("roles/nvidia_cuda/files/nvidia_cuda_verify.py")
sb = load("roles/sglang_build/files/sglang_build_tool")


@pytest.fixture(scope="module")
def python() -> Path:
    return serverargs_release.ensure("0.5.17") / "bin" / "python"


def overlay(directory: Path, *wheels: str) -> Path:
    """The given wheels of the harness wheelhouse installed --no-deps into a directory for PYTHONPATH."""
    house = serverargs_release.wheelhouse()
    target = directory / "site"
    found = [next(house.glob(pattern)) for pattern in wheels]
    subprocess.run([str(serverargs_release.sys.executable), "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                    "--target", str(target), *map(str, found)], check=True, capture_output=True)
    return target


@pytest.fixture(scope="module")
def kernel_045(tmp_path_factory) -> Path:
    """The 0.5.17 set's components as the test hosts install them (sglang-kernel 0.4.5 TEST ONLY, stripped)."""
    return overlay(tmp_path_factory.mktemp("k045"), "sglang_kernel-0.4.5-*.whl", "flashinfer_python-0.6.15.post1-*.whl")


@pytest.fixture(scope="module")
def kernel_0321(tmp_path_factory) -> Path:
    """PyPI's sgl-kernel 0.3.21, whole (the 0.5.9 set's test kernel)."""
    return overlay(tmp_path_factory.mktemp("k0321"), "sgl_kernel-0.3.21-*.whl")


def run(python: Path, site: Path | str, *args: str) -> tuple[int, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run([str(python), str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=900,
                          check=False)
    assert proc.stdout.startswith("{"), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def test_a_test_host_release_is_inconclusive_with_every_reason(python, kernel_045):
    rc, out = run(python, kernel_045, "--installed-without-deps")
    imp = out["imports"]
    assert (rc, out["status"]) == (3, "inconclusive"), out["summary"]
    assert imp["torch"]["status"] == "passed" and imp["torch"]["version"] == "2.13.0+cpu"  # really imported
    assert imp["torch"]["cuda"]["reason"].startswith("CUDA not initialised: no NVIDIA GPU visible on this host")
    assert imp["sgl_kernel"]["status"] == "inconclusive"
    assert "sgl_kernel/sm100/common_ops.abi3.so was left out of this TEST ONLY wheel" in imp["sgl_kernel"]["reason"]
    (lib,) = imp["sgl_kernel"]["library_checks"]
    assert (lib["check"], lib["expected"], lib["status"]) == ("library for 12.0", "sgl_kernel/sm100/common_ops.*",
                                                             "inconclusive")
    assert imp["flashinfer"]["status"] == "inconclusive"
    assert "the release was installed without its dependencies" in imp["flashinfer"]["reason"]
    # SGLang 0.5.17 requires sgl-deep-gemm (its metadata): not installed here by design, so not evaluated.
    assert imp["deep_gemm"]["status"] == "inconclusive" and "sgl-deep-gemm is not installed" in imp["deep_gemm"]["reason"]


def test_the_same_release_fails_where_its_dependencies_should_be_installed(python, kernel_045):
    rc, out = run(python, kernel_045)  # a real install: what is missing is a failure, not a test setup
    assert (rc, out["status"]) == (1, "failed")
    assert out["imports"]["deep_gemm"]["status"] == "failed"
    flashinfer = out["imports"]["flashinfer"]
    assert flashinfer["status"] == "failed" and "which is not installed" in flashinfer["reason"]


def test_the_kernel_library_for_each_compute_capability_is_read(python, kernel_0321):
    """PyPI's sgl-kernel 0.3.21: load_utils.py picks sm90/ on 9.0 and sm100/ on 12.0; both carry their code."""
    rc, out = run(python, kernel_0321, "--installed-without-deps", "--compute-capability", "9.0", "--compute-capability", "12.0")
    kernel = out["imports"]["sgl_kernel"]
    by_cc = {c["check"]: c for c in kernel["library_checks"]}
    assert by_cc["library for 9.0"]["library"] == "sgl_kernel/sm90/common_ops.abi3.so"
    assert by_cc["library for 9.0"]["runs_as"] == "sm_90a" and by_cc["library for 9.0"]["status"] == "passed"
    assert by_cc["library for 12.0"]["library"] == "sgl_kernel/sm100/common_ops.abi3.so"
    assert by_cc["library for 12.0"]["runs_as"] == "sm_120a" and by_cc["library for 12.0"]["status"] == "passed"
    # Its import needs CUDA 12's libraries, dependencies of the kernel not installed on a --no-deps host.
    assert kernel["status"] == "inconclusive" and "a CUDA library from a dependency" in kernel["reason"]
    rc, out = run(python, kernel_0321, "--installed-without-deps", "--compute-capability", "7.5")
    (check,) = out["imports"]["sgl_kernel"]["library_checks"]
    assert (rc, out["status"], check["status"]) == (1, "failed", "failed")
    assert check["reason"].startswith("common_ops.abi3.so holds no code for 7.5 (it has sm_100a sm_120a sm_80")


def test_a_module_that_kills_its_process_is_named_and_the_others_still_run(python, kernel_0321, tmp_path):
    """TEST DOUBLE: a flashinfer package whose import ends its process."""
    (tmp_path / "flashinfer").mkdir()
    (tmp_path / "flashinfer" / "__init__.py").write_text("import os\nos._exit(9)\n")
    rc, out = run(python, f"{tmp_path}:{kernel_0321}", "--installed-without-deps")
    assert (rc, out["imports"]["flashinfer"]["status"]) == (1, "failed")
    assert out["imports"]["flashinfer"]["reason"] == "the importing process died (exit 9)"
    assert out["imports"]["sgl_kernel"]["library_checks"][0]["status"] == "passed"  # imported after it, in a new child


def test_code_for_a_compute_capability():
    assert ic.holds_code_for(["sm_80", "sm_90", "sm_90a", "sm_120a"], [], "9.0") == (True, "sm_90a")
    assert ic.holds_code_for(["sm_80", "sm_90a"], [], "8.9") == (True, "sm_80")  # same major, lower minor
    assert ic.holds_code_for(["sm_100a"], [], "10.3") == (False, "")  # arch-specific code runs on its arch only
    assert ic.holds_code_for(["sm_100f"], [], "10.3") == (True, "sm_100f")
    assert ic.holds_code_for([], ["compute_90"], "12.0")[1].startswith("compute_90 (PTX only")
    assert ic.holds_code_for(["sm_90a"], [], "12.0") == (False, "")


def test_the_check_phase_runs_it_with_the_hosts_capabilities(monkeypatch, tmp_path):
    seen = {}

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 3, stdout=json.dumps({"status": "inconclusive", "summary": "s"}))

    build = sb.Build.__new__(sb.Build)
    build.spec = {"compute_capabilities": ["9.0", "12.0"], "pip": {"no_deps": True}, "cuda": {"home": ""}}
    build.logfile, build.release = tmp_path / "log", tmp_path / "release"
    monkeypatch.setattr(sb.check.subprocess, "run", fake_run)
    result = build.import_check("/r/venv/bin/python")
    assert seen["cmd"] == ["/r/venv/bin/python", str(SCRIPT), "--compute-capability", "9.0", "--compute-capability",
                           "12.0", "--installed-without-deps"]
    assert result["status"] == "inconclusive" and result["seconds"] >= 0
    # A complete release is re-verified without touching the GPUs it may be serving on.
    build.release.mkdir()
    (build.release / sb.COMPLETE).write_text("")
    build.spec["pip"]["no_deps"] = False
    build.import_check("/r/venv/bin/python")
    assert seen["cmd"][-1] == "--no-cuda" and "--installed-without-deps" not in seen["cmd"]
