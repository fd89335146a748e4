"""Verifier of molecule/nvidia_cuda: the converged host, checked from outside Ansible."""

import json

import pytest

testinfra_hosts = ["podman://molecule-nvidia-cuda"]

DRIVER_PACKAGES = ["nvidia-open", "nvidia-driver-cuda", "nvidia-kernel-open-dkms"]


def test_driver_packages_installed_at_exact_version_and_held(host):
    for name in DRIVER_PACKAGES:
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version == "580.95.05-1", name
    held = host.check_output("apt-mark showhold").split()
    assert set(DRIVER_PACKAGES) <= set(held)
    assert {"cuda-toolkit-13-0", "cuda-nvcc-13-0", "cuda-cudart-dev-13-0"} <= set(held)


def test_versions_pinned_and_kept_from_unattended_upgrades(host):
    prefs = host.file("/etc/apt/preferences.d/nvidia-cuda")
    assert prefs.mode == 0o644
    assert "Package: nvidia-open\nPin: version 580.95.05-1\nPin-Priority: 1001" in prefs.content_string
    assert "Package: cuda-toolkit-13-0\nPin: version 13.0.2-1" in prefs.content_string
    blacklist = host.file("/etc/apt/apt.conf.d/51nvidia-cuda-unattended-upgrades").content_string
    assert '"^nvidia\\-open$";' in blacklist


def test_apt_does_not_want_to_move_them(host):
    # The 590 branch is in the mirror; nothing may upgrade to it by itself.
    out = host.check_output("apt-get -s -o Debug::NoLocking=1 upgrade")
    assert "Inst nvidia" not in out and "Inst cuda" not in out


def test_repository_is_signed_by_the_verified_key(host):
    sources = host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").content_string
    assert "Signed-By: /etc/apt/keyrings/nvidia-cuda.asc" in sources
    assert "Suites: /" in sources
    key = host.check_output("gpg --batch --with-colons --show-keys /etc/apt/keyrings/nvidia-cuda.asc")
    fingerprint = host.file("/srv/nvidia-mirror/keys/fingerprint").content_string.strip()
    assert f"fpr:::::::::{fingerprint}:" in key


def test_cuda_on_path_and_linker_path_for_every_user(host):
    out = host.check_output("su -s /bin/bash nobody -c 'bash -lc \"command -v nvcc\"'")
    assert out == "/usr/local/cuda-13.0/bin/nvcc"
    assert "/usr/local/cuda-13.0/targets/x86_64-linux/lib" in host.check_output("ldconfig -v 2>/dev/null")


def test_persistenced_enabled_and_running(host):
    svc = host.service("nvidia-persistenced")
    assert svc.is_enabled and svc.is_running


def test_report_records_the_verified_stack(host):
    report = json.loads(host.file("/var/lib/nvidia-cuda/report.json").content_string)
    assert report["driver"]["version"] == "580.95.05"
    assert report["gpu_count"] == report["expected"]["gpu_count"] == 8
    assert {g["compute_cap"] for g in report["gpus"]} == {"12.0"}
    assert report["toolkit"]["version"] == "13.0"
    assert report["kernel"] == {"arch": "sm_120a", "compiled": True, "machine_code": "sm_120",
                                "run": "skipped: no GPU device nodes", "result": {}}
    local = json.loads(host.file("/etc/ansible/facts.d/nvidia_cuda.fact").content_string)
    assert local == report


@pytest.mark.parametrize("arch,sm", [("sm_120a", 120), ("sm_90", 90)])
def test_installed_nvcc_builds_real_device_code(host, arch, sm):
    # The toolkit in the mirror is NVIDIA's real compiler: the cubin it produces is a
    # CUDA ELF file whose header names the SM it was built for.
    host.run_expect([0], "mkdir -p /tmp/nvcc-check")
    host.run_expect([0], "printf '__global__ void k(int *x){x[0]=1;}\\n' > /tmp/nvcc-check/k.cu")
    host.run_expect([0], f"/usr/local/cuda-13.0/bin/nvcc -arch={arch} -cubin -o /tmp/nvcc-check/k.cubin /tmp/nvcc-check/k.cu")
    header = host.check_output("od -An -tu1 -N 52 -v /tmp/nvcc-check/k.cubin").split()
    assert header[:4] == ["127", "69", "76", "70"]  # \x7fELF
    assert header[7] == "65"  # ELFOSABI_CUDA
    assert int(header[49]) == sm  # e_flags bits 8-15 (ELF ABI v8)
