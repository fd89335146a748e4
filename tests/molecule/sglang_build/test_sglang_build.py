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


def test_flashinfer_modules_compiled_into_the_release_for_sm120a(host):
    """converge.yml's small set (silu_and_mul), compiled by the AOT step with the mirror's nvcc 13.0,
    checked by the fatbin-header reader (the mirror has no cuobjdump), where FlashInfer loads it."""
    m = manifest(host)
    aot = m["flashinfer_aot"]
    assert aot["status"] == "passed", aot
    assert aot["modules_requested"] == ["activation silu"]
    (mod,) = aot["modules"]
    assert mod["name"] == "silu_and_mul" and mod["expected"] == ["sm_120a"] and mod["archs"] == ["sm_120a"]
    assert mod["missing"] == [] and mod["read_by"] == "fatbin headers (no cuobjdump)"
    stamp = json.loads(host.file("/opt/sglang/current/flashinfer_aot.json").content_string)
    so = host.file(stamp["modules"][0]["so"])
    assert stamp["arch_list"] == "12.0a" and stamp["modules"][0]["so"].startswith(m["sglang_dir"].rsplit("/sglang", 1)[0])
    assert so.exists and so.user == "sglang-build" and so.mode & 0o044 == 0o044  # the server reads it, cannot change it
    print(f"\nFlashInfer AOT on the test host: silu_and_mul for sm_120a in {stamp['seconds']} s")


def test_flashinfer_resolves_the_module_to_the_release_copy(host):
    """The release's FlashInfer, as the server runs it (its own writable workspace), would load the
    compiled copy and compile nothing (there is no driver here to load it for real)."""
    probe = ("import flashinfer.jit as j; s = j.gen_act_and_mul_module('silu'); print(s.is_aot, s.aot_path)")
    out = host.check_output("cd /tmp && FLASHINFER_WORKSPACE_BASE=$(mktemp -d) FLASHINFER_CUDA_ARCH_LIST=12.0a "
                            f"/opt/sglang/current/venv/bin/python -c \"{probe}\" 2>/dev/null")
    is_aot, path = out.split()
    assert is_aot == "True" and path.endswith("/flashinfer/data/aot/silu_and_mul/silu_and_mul.so")
