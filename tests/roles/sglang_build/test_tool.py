"""The build tool's rules, on this machine without a container: identities, the rendered
source-build command and environment, recovery after a kill, pruning, and the arch
check (a real FlashInfer unit through a real nvcc, where one is installed).

The spec is the one the role renders from its defaults (through Ansible itself), so
a default that stops reproducing the reference host fails here.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from repo import ROOT, load

FILES = ROOT / "roles" / "sglang_build" / "files"
# On a host nvidia_cuda_verify.py (role nvidia_cuda, tasks_from: tools) ships next to the tool, which
# imports its cubin reader from there; here it is loaded first, under the name the tool imports.
load("roles/nvidia_cuda/files/nvidia_cuda_verify.py")
sb = load("roles/sglang_build/files/sglang_build_tool")

RENDER = """
- name: Render the sglang_build spec from the role's defaults
  hosts: localhost
  gather_facts: false
  vars:
    ansible_facts: {processor_vcpus: 4}
  tasks:
    - name: Load the role's defaults and vars
      ansible.builtin.include_role:
        name: sglang_build
        tasks_from: validate
        public: true
    - name: Write the spec
      ansible.builtin.copy:
        content: "{{ __sglang_build_spec | to_nice_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""


def render_spec(tmp_path: Path, *extra: str) -> dict:
    play = tmp_path / "render.yml"
    play.write_text(RENDER)
    out = tmp_path / "spec.json"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(play), "-e", f"out={out}",
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           *extra], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def default_spec(tmp_path_factory):
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook not on PATH (make venv)")
    return render_spec(tmp_path_factory.mktemp("render"))


def build(spec: dict, root: Path | None = None) -> sb.Build:
    spec = copy.deepcopy(spec)
    if root is not None:
        spec["root"] = str(root)
    return sb.Build(spec, python_version="3.12")


def test_defaults_reproduce_the_reference_host(default_spec):
    c = default_spec["components"]
    assert default_spec["release_set"] == "0.5.9"
    # torch's version is SGLang's pin (test_release_sets.py), in PyTorch's cu130 build.
    assert (c["torch"]["mode"], c["torch"]["version"], c["torch"]["index_url"]) == (
        "wheel", "", "https://download.pytorch.org/whl/cu130")
    assert default_spec["torch_local_version"] == "+cu130"
    assert c["sgl_kernel"]["version"] == "0.3.21+cu130" and "+cu130" in c["sgl_kernel"]["wheel_url"]
    assert c["flashinfer"]["version"] == ""  # SGLang's pin: 0.6.3
    assert (c["sglang"]["mode"], c["sglang"]["ref"], c["sglang"]["version"]) == ("source", "v0.5.9", "0.5.9")
    assert default_spec["pip"]["overrides"] == ["nvidia-cudnn-cu13==9.15.1.9"]
    assert default_spec["cuda"] == {"version": "13.0", "home": "/usr/local/cuda-13.0"}
    assert default_spec["arch"] == {"torch_cuda_arch_list": "12.0", "flashinfer_cuda_arch_list": "12.0a"}
    assert default_spec["max_jobs"] == 4  # 0 means the host's vCPUs


def test_same_inputs_same_release_and_each_input_changes_it(default_spec):
    base = build(default_spec)
    assert build(default_spec).release_id == base.release_id
    for path, value in [(("components", "sglang", "ref"), "v0.5.10"), (("arch", "flashinfer_cuda_arch_list"), "9.0a"),
                        (("components", "torch", "index_url"), None), (("cuda", "version"), "13.1"),
                        (("patch", "id"), "other"), (("components", "flashinfer", "version"), "0.6.4")]:
        spec = copy.deepcopy(default_spec)
        if value is None:  # an index URL is not an input of the wheel: the same wheel from a mirror
            spec["components"]["torch"]["index_url"] = "https://mirror.example/cu130"
            assert build(spec).release_id == base.release_id
            continue
        node = spec
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert build(spec).release_id != base.release_id, path
    assert build(default_spec).release_id.startswith("sglang-0.5.9-")


def test_a_component_key_depends_on_its_own_inputs_only(default_spec):
    spec = copy.deepcopy(default_spec)
    spec["components"]["flashinfer"]["mode"] = "source"
    spec["components"]["sgl_kernel"].update(mode="source", version="0.3.21")
    before = build(spec).keys
    bumped = copy.deepcopy(spec)
    bumped["components"]["sglang"]["ref"] = "v0.5.10"
    after = build(bumped).keys
    assert after["sglang"] != before["sglang"]
    assert {k: v for k, v in after.items() if k != "sglang"} == {k: v for k, v in before.items() if k != "sglang"}
    # sgl-kernel is a torch extension: a new torch means a new sgl-kernel wheel; FlashInfer's stays.
    torch2 = copy.deepcopy(spec)
    torch2["components"]["torch"]["version"] = "2.9.2+cu130"
    keys = build(torch2).keys
    assert keys["sgl_kernel"] != before["sgl_kernel"] and keys["flashinfer"] == before["flashinfer"]


def test_sgl_kernel_source_build_renders_command_and_environment(tmp_path):
    spec = render_spec(tmp_path, "-e", "sglang_build_sgl_kernel_mode=source", "-e", "sglang_build_sgl_kernel_version=0.3.21",
                       "-e", "sglang_build_torch_version=2.9.1+cu130", "-e", "sglang_build_max_jobs=6")
    plan = build(spec, tmp_path / "opt").plan()
    sk = plan["components"]["sgl_kernel"]
    assert sk["mode"] == "source" and sk["ref"] == "v0.5.9" and not sk["cached"]
    assert sk["env"]["TORCH_CUDA_ARCH_LIST"] == "12.0"
    assert sk["env"]["FLASHINFER_CUDA_ARCH_LIST"] == "12.0a"
    assert sk["env"]["MAX_JOBS"] == "6"
    assert sk["env"]["CMAKE_ARGS"] == "-DSGL_KERNEL_COMPILE_THREADS=1"
    assert sk["env"]["CUDA_HOME"] == "/usr/local/cuda-13.0"
    assert sk["env"]["PATH"].startswith("/usr/local/cuda-13.0/bin:")
    cmd = sk["command"]
    assert cmd[1:5] == ["-m", "pip", "wheel", "--no-deps"]
    assert "--no-build-isolation" in cmd  # built against the release's torch, not an isolated one
    assert cmd[-1].endswith("/work/sgl_kernel/sgl-kernel")
    assert plan["to_build"] == ["sgl_kernel", "sglang"]


def test_credentials_in_urls_are_masked():
    assert sb.mask("--index-url https://user:s3cret@pypi.corp/simple x") == "--index-url https://***@pypi.corp/simple x"
    assert "s3cret" not in sb.mask(json.dumps({"u": "http://tok@h/"}))


def make_release(root: Path, name: str, age: float, keys=()) -> Path:
    rel = root / "releases" / name
    rel.mkdir(parents=True)
    (rel / "manifest.json").write_text(json.dumps({"components": {k: {"key": k} for k in keys}}))
    (rel / sb.COMPLETE).write_text("")
    stamp = time.time() - age
    os.utime(rel / sb.COMPLETE, (stamp, stamp))
    return rel


def test_prune_keeps_n_newest_and_never_current_nor_what_the_server_serves_or_goes_back_to(tmp_path):
    for sub in ("releases", "wheelhouse", "logs"):
        (tmp_path / sub).mkdir()
    old_current = make_release(tmp_path, "r1", 500, ["w-old"])
    make_release(tmp_path, "r2", 400)
    make_release(tmp_path, "r3", 300)
    make_release(tmp_path, "r4", 200, ["w-new"])
    make_release(tmp_path, "r5", 100)
    (tmp_path / "releases" / "r6-incomplete").mkdir()  # a build in progress is not prune's business
    for key, age in (("w-old", 900), ("w-new", 900), ("w-unused", 900)):
        (tmp_path / "wheelhouse" / key).mkdir()
        os.utime(tmp_path / "wheelhouse" / key, (time.time() - age,) * 2)
    (tmp_path / "current").symlink_to(old_current)  # e.g. rolled back to the oldest
    (tmp_path / "previous").symlink_to(tmp_path / "releases" / "r3")  # an older version's link: protects nothing
    served = (str(tmp_path / "releases" / "r2"), "")  # role sglang_server's previous (its rollback target); no serving

    dry = sb.prune(tmp_path, 3, dry_run=True, protect=served)
    assert sorted(dry["removed"]) == ["r3", "r4"] and (tmp_path / "releases" / "r3").exists()
    result = sb.prune(tmp_path, 3, dry_run=False, protect=served)
    assert sorted(p.name for p in (tmp_path / "releases").iterdir()) == ["r1", "r2", "r5", "r6-incomplete"]
    assert sorted(result["kept"]) == ["r1", "r2", "r5"]
    assert sorted(p.name for p in (tmp_path / "wheelhouse").iterdir()) == ["w-old"]
    assert sb.prune(tmp_path, 3, dry_run=False, protect=served)["changed"] is False
    # without the server's record, r2 is one of the oldest: the newest 3 with current are r1, r5 and r2 still
    assert sb.prune(tmp_path, 2, dry_run=True)["removed"] == ["r2"]


def test_recover_removes_what_a_killed_build_left(default_spec, tmp_path):
    b = build(default_spec, tmp_path)
    for sub in ("releases", "wheelhouse", "work", "logs"):
        (tmp_path / sub).mkdir()
    done = make_release(tmp_path, "done", 10)
    half = tmp_path / "releases" / "half-built"
    (half / "venv" / "lib").mkdir(parents=True)
    tmp_wheel = tmp_path / "wheelhouse" / ".sglang-source-x.tmp-123"
    tmp_wheel.mkdir()
    (tmp_path / "work" / "sglang").mkdir()
    removed = b.recover()
    assert not half.exists() and not tmp_wheel.exists() and not (tmp_path / "work" / "sglang").exists()
    assert done.exists() and len(removed) == 3


def flashinfer_include(tmp_path: Path) -> Path | None:
    cache = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible"))
    sdist = cache / "sdists" / "flashinfer_python-0.6.3.tar.gz"
    if not sdist.exists():
        return None
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/include/flashinfer/" in m.name]
        tar.extractall(tmp_path, members=members, filter="data")
    return next(tmp_path.glob("*/include"))


def test_arch_check_compiles_a_real_flashinfer_unit_for_sm120a(default_spec, tmp_path):
    nvcc = Path(default_spec["cuda"]["home"]) / "bin" / "nvcc"
    if not nvcc.exists():
        pytest.skip(f"no nvcc at {nvcc} (it is on the test hosts after nvidia_cuda)")
    include = flashinfer_include(tmp_path)
    if include is None:
        pytest.skip("flashinfer 0.6.3 sdist not cached (python3 tests/harness/sources.py)")
    result = build(default_spec, tmp_path).arch_check(str(include))
    assert result["status"] == "passed", result
    (unit,) = result["units"]
    assert unit["target"] == "sm_120a" and unit["sm"] == 120 and unit["compiled"]
    # A wrong arch is caught, not waved through.
    spec = copy.deepcopy(default_spec)
    spec["arch"]["flashinfer_cuda_arch_list"] = "9.0a"
    assert build(spec, tmp_path).arch_check(str(include))["units"][0]["sm"] == 90


def test_arch_check_is_skipped_without_nvcc(default_spec, tmp_path):
    spec = copy.deepcopy(default_spec)
    spec["cuda"]["home"] = str(tmp_path / "no-cuda")
    assert build(spec, tmp_path).arch_check("/nowhere") == {"status": "skipped",
                                                            "reason": f"no nvcc at {tmp_path}/no-cuda/bin/nvcc"}
