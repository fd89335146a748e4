"""Verifier of molecule/sglang_build: the converged release, checked from outside Ansible."""

import json

testinfra_hosts = ["podman://molecule-sglang-build"]


def manifest(host):
    return json.loads(host.file("/opt/sglang/current/manifest.json").content_string)


def test_current_points_at_a_complete_release_owned_by_the_build_user(host):
    current = host.file("/opt/sglang/current")
    assert current.is_symlink and current.linked_to.startswith("/opt/sglang/releases/sglang-0.5.9-")
    assert host.file(current.linked_to + "/.complete").exists
    assert host.file(current.linked_to).user == "sglang-build"
    assert host.user("sglang-build").shell == "/usr/sbin/nologin"
    assert host.file("/opt/sglang").user == "root"


def test_installed_versions_are_the_requested_ones(host):
    py = "/opt/sglang/current/venv/bin/python"
    out = host.check_output(py + " -c 'import importlib.metadata as m; "
                            "print(*(m.version(d) for d in (\"sglang\", \"flashinfer-python\", \"sgl-kernel\", \"torch\")))'")
    assert out.split() == ["0.5.9", "0.6.3", "0.3.21", "2.13.0+cpu"]
    m = manifest(host)
    assert {n: c["installed"] for n, c in m["components"].items()} == {
        "sglang": "0.5.9", "flashinfer": "0.6.3", "sgl_kernel": "0.3.21", "torch": "2.13.0+cpu"}


def test_sglang_model_files_are_found(host):
    m = manifest(host)
    assert host.file(m["sglang_dir"] + "/srt/models/kimi_k25.py").exists
    assert m["model_files"] > 100


def test_manifest_records_arch_and_a_real_sm120a_compile(host):
    arch = manifest(host)["arch"]
    assert arch["torch_cuda_arch_list"] == "12.0" and arch["flashinfer_cuda_arch_list"] == "12.0a"
    check = arch["check"]
    assert check["status"] == "passed", check
    (unit,) = check["units"]
    assert unit["target"] == "sm_120a" and unit["sm"] == 120 and unit["compiled"]
    assert unit["read_by"] in ("cuobjdump", "ELF header (no cuobjdump)")


def test_source_builds_are_in_the_wheelhouse_with_their_record(host):
    m = manifest(host)
    for name in ("flashinfer", "sglang"):
        build = m["components"][name]["build"]
        wheel = f"/opt/sglang/wheelhouse/{m['components'][name]['key']}/{build['wheel']}"
        assert host.file(wheel).exists, wheel
        assert build["env"]["FLASHINFER_CUDA_ARCH_LIST"] == "12.0a"
        assert build["env"]["CUDA_HOME"] == "/usr/local/cuda-13.0"


def test_no_leftovers_and_local_facts_for_other_roles(host):
    assert host.check_output("ls -A /opt/sglang/work") == ""
    facts = json.loads(host.file("/etc/ansible/facts.d/sglang_build.fact").content_string)
    assert facts["current_dir"] == "/opt/sglang/current"
    assert facts["python"] == "/opt/sglang/current/venv/bin/python"
