"""Verifier of molecule/nvidia_cuda_preinstalled: the stack was detected and left alone."""

import json

testinfra_hosts = ["podman://molecule-nvidia-cuda-preinstalled"]


def test_dpkg_database_unchanged(host):
    before = host.file("/root/dpkg-status.before").content_string.split()[0]
    assert host.check_output("sha256sum /var/lib/dpkg/status").split()[0] == before


def test_no_repository_pin_or_hold_added(host):
    assert not host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").exists
    assert not host.file("/etc/apt/preferences.d/nvidia-cuda").exists
    assert host.check_output("apt-mark showhold") == ""


def test_detected_stack_is_reported_and_verified(host):
    report = json.loads(host.file("/var/lib/nvidia-cuda/report.json").content_string)
    assert report["driver"]["version"] == "580.95.05"
    assert report["driver"]["source"] == "nvidia-smi"
    assert report["toolkit"]["release"] == "13.0.88"
    assert report["kernel"]["machine_code"] == "sm_120"
    assert report["held_packages"] == {}
