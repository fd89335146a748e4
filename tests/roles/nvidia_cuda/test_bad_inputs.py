"""Bad input to nvidia_cuda fails before any change on the host, naming the variable.

The real playbook against a real (container) host, with a fingerprint of everything the role could
touch compared before and after. The cases that validation refutes run together, one inventory host
each (tests/harness/bad_inputs.py); the one that only the host can refute runs alone.
"""

from __future__ import annotations

import json

import pytest

import bad_inputs
from repo import ROOT
from testhost import SNAPSHOT

PLAYBOOK = ROOT / "playbooks" / "cuda.yml"
WRONG_KEY = "0123456789ABCDEF0123456789ABCDEF01234567"

CASES = [
    # (id, extra vars, text the failure must contain)
    ("branch-malformed", {"nvidia_cuda_driver_branch": "58"}, "nvidia_cuda_driver_branch"),
    ("branch-too-old-for-cuda", {"nvidia_cuda_driver_branch": "570", "nvidia_cuda_driver_version": "570.195.03"},
     "is too old for CUDA 13.0"),
    ("version-outside-branch", {"nvidia_cuda_driver_version": "590.48.01"}, "nvidia_cuda_driver_version"),
    ("unknown-arch", {"nvidia_cuda_expected_compute_capability": "12.5"}, "nvidia_cuda_expected_compute_capability"),
    ("gpu-count-zero", {"nvidia_cuda_expected_gpu_count": 0}, "nvidia_cuda_expected_gpu_count"),
    ("gpu-count-wrong-type", {"nvidia_cuda_expected_gpu_count": "eight"}, "nvidia_cuda_expected_gpu_count"),
    ("install-driver-wrong-type", {"nvidia_cuda_install_driver": "maybe"}, "nvidia_cuda_install_driver"),
    ("proxy-not-a-dict", {"nvidia_cuda_proxy_env": "http://proxy:3128"}, "nvidia_cuda_proxy_env"),
    ("proxy-unknown-key", {"nvidia_cuda_proxy_env": {"ftp_proxy": "x"}}, "nvidia_cuda_proxy_env"),
    ("key-without-fingerprint", {"nvidia_cuda_repo_key_fingerprint": ""}, "nvidia_cuda_repo_key_fingerprint"),
    ("fingerprint-malformed", {"nvidia_cuda_repo_key_fingerprint": "3bf863cc"}, "nvidia_cuda_repo_key_fingerprint"),
    ("unknown-cuda", {"nvidia_cuda_toolkit_version": "13.5"}, "nvidia_cuda_toolkit_version"),
    ("toolkit-package-of-other-cuda", {"nvidia_cuda_toolkit_package_version": "13.1.0-1"},
     "nvidia_cuda_toolkit_package_version"),
    ("repo-url-scheme", {"nvidia_cuda_repo_url": "ftp://mirror.example/cuda/"}, "nvidia_cuda_repo_url"),
    ("proprietary-on-blackwell", {"nvidia_cuda_driver_open": False}, "nvidia_cuda_driver_open"),
    ("reboot-timeout-too-short", {"nvidia_cuda_reboot_timeout": 5}, "nvidia_cuda_reboot_timeout"),
    ("unknown-variable-type-list", {"nvidia_cuda_hold_packages": ["yes"]}, "nvidia_cuda_hold_packages"),
    # Well-formed but wrong: caught after the key download, before the key is installed.
    ("key-with-other-fingerprint", {"nvidia_cuda_repo_key_fingerprint": WRONG_KEY}, "not nvidia_cuda_repo_key_fingerprint"),
]



ALONE = {"key-with-other-fingerprint"}


@pytest.fixture(scope="module")
def batch(testhost, tmp_path_factory):
    """Every case that validation refutes, in one run of the playbook."""
    return bad_inputs.run(testhost, PLAYBOOK, {c[0]: c[1] for c in CASES if c[0] not in ALONE},
                          tmp_path_factory.mktemp("inventory"))


@pytest.mark.parametrize("case,expect", [(c[0], c[2]) for c in CASES if c[0] not in ALONE],
                         ids=[c[0] for c in CASES if c[0] not in ALONE])
def test_bad_input_fails_before_any_change(batch, case, expect):
    assert batch.returncode != 0, batch.out[-3000:]
    assert expect in batch.failure(case), batch.out[-4000:]
    assert batch.recap[bad_inputs.alias(case)]["changed"] == 0, batch.out[-3000:]
    assert batch.unchanged, "the host changed"


@pytest.mark.parametrize("extra,expect", [c[1:] for c in CASES if c[0] in ALONE], ids=[c[0] for c in CASES if c[0] in ALONE])
def test_bad_input_the_host_refutes_fails_before_any_change(testhost, run_playbook, extra, expect):
    before = testhost.sh(SNAPSHOT).stdout
    proc = run_playbook(testhost, PLAYBOOK, "-e", json.dumps(extra))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert expect in out, out[-3000:]
    assert "changed=0" in out, out[-3000:]
    assert testhost.sh(SNAPSHOT).stdout == before, "the host changed"
