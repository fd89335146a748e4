"""Verifier of molecule/nvidia_cuda_upgrade: 580 (held) -> 590 (held), toolkit untouched."""

import json

testinfra_hosts = ["podman://molecule-nvidia-cuda-upgrade"]

DRIVER_PACKAGES = ["nvidia-open", "nvidia-driver-cuda", "nvidia-kernel-open-dkms"]


def test_new_branch_installed_and_held(host):
    held = set(host.check_output("apt-mark showhold").split())
    for name in DRIVER_PACKAGES:
        assert host.package(name).version == "590.48.01-1", name
        assert name in held, name


def test_pins_follow_the_new_branch(host):
    prefs = host.file("/etc/apt/preferences.d/nvidia-cuda").content_string
    assert "Package: nvidia-open\nPin: version 590.48.01-1" in prefs
    assert "580.95.05" not in prefs


def test_toolkit_untouched(host):
    assert host.package("cuda-toolkit-13-0").version == "13.0.2-1"
    log = host.file("/var/log/dpkg.log").content_string
    # installed once (in prepare), never removed or reinstalled by the upgrade
    assert log.count("install cuda-toolkit-13-0:amd64") == 1
    assert "remove cuda-" not in log


def test_running_stack_reports_new_driver(host):
    report = json.loads(host.file("/var/lib/nvidia-cuda/report.json").content_string)
    assert report["driver"]["version"] == "590.48.01"
    assert report["driver"]["cuda_version"] == "13.1"
    assert report["kernel"]["machine_code"] == "sm_120"
    assert "590.48.01" in host.check_output("nvidia-smi")
