"""sglang_build's FlashInfer AOT step on this machine: the module set and where it comes from, the
arch list and its validation, the release id, the arch reader, and (where nvcc 13.0 is installed)
the real phase: FlashInfer's JIT driven ahead of time into a release's AOT directory for sm_120a,
the check reading the arch back, a rerun compiling nothing, a module without its arch and an arch
nvcc cannot build both failing. No GPU is needed (CPU torch; the kernels are compiled, not run):
the H200 run is docs/validation/flashinfer_aot-h200/.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from repo import ROOT, load

ROLE = ROOT / "roles" / "sglang_build"
load("roles/nvidia_cuda/files/nvidia_cuda_verify.py")
sb = load("roles/sglang_build/files/sglang_build_tool")
NVCC = Path("/usr/local/cuda-13.0/bin/nvcc")
needs_nvcc = pytest.mark.skipif(not NVCC.exists(), reason=f"no nvcc at {NVCC} (the test hosts have it after nvidia_cuda)")
needs_ansible = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not on PATH (make venv)")

RENDER = """
- name: Render the sglang_build spec
  hosts: localhost
  gather_facts: false
  vars:
    ansible_facts: {processor_vcpus: 4}
  tasks:
    - name: Validate and load the role's defaults and vars
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


def render(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    play, out = tmp_path / "render.yml", tmp_path / "spec.json"
    play.write_text(RENDER)
    out.unlink(missing_ok=True)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(play), "-e", f"out={out}",
                           "-e", f"ansible_python_interpreter={sys.executable}", *extra],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def ev(obj) -> list[str]:
    return ["-e", json.dumps(obj)]


# ----------------------------------------------------------------- variables, derivation, identity
def test_defaults_specs_and_readme_agree():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    options = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    readme = set(re.findall(r"^\| `(sglang_build_\w+)` \|", (ROLE / "README.md").read_text(), re.M))
    # The README's tables are generated (tests/harness/readme_vars.py): the main entry's rows and those only
    # another entry point takes (sglang_build_switch_to, tasks_from switch).
    assert set(defaults) == set(options) == readme - {"sglang_build_switch_to"}
    for name, spec in options.items():
        assert spec["default"] == defaults[name], name


@needs_ansible
def test_arch_list_is_derived_from_what_nvidia_cuda_detected_and_an_explicit_list_wins(tmp_path):
    def gpus(*caps):
        return {"ansible_local": {"nvidia_cuda": {"gpus": [{"compute_cap": c} for c in caps]}}}

    cases = [
        ([], "12.0a", "sglang_build_default_compute_capability: nvidia_cuda detected no GPU"),
        (ev(gpus("12.0", "9.0", "12.0")),
         "9.0a 12.0a", "detected by nvidia_cuda"),
        (ev(gpus("8.9")), "8.9", "detected by nvidia_cuda"),
        (ev({**gpus("9.0"), "sglang_build_flashinfer_cuda_arch_list": "12.0a"}),
         "12.0a", "sglang_build_flashinfer_cuda_arch_list"),
    ]
    for extra, arch, source in cases:
        proc, spec = render(tmp_path, *extra)
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert spec["arch"]["flashinfer_cuda_arch_list"] == arch, extra
        assert source in spec["flashinfer_aot"]["arch_list_from"], spec["flashinfer_aot"]
        if "ansible_local" not in str(extra):
            assert "derived from compute capability 12.0" in spec["flashinfer_aot"]["arch_list_from"]


@needs_ansible
def test_the_module_set_follows_the_server_settings_the_inventory_links(tmp_path):
    """The build reads no variable of the server's role (issue 41): its own three settings, which the example
    inventory links to the server's (group_vars/gpu_hosts/sglang_build.yml)."""
    proc, spec = render(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    aot = spec["flashinfer_aot"]
    assert (aot["enabled"], aot["modules"], aot["attention_backend"], aot["allreduce_fusion"],
            aot["speculative_algorithm"], aot["draft_head_dim"]) == (True, [], "", False, "EAGLE3", 128)
    # The reference host's defaults: SGLang picks triton attention on SM120, no FlashInfer module.
    assert sb.Build(spec, python_version="3.12").aot_modules == []
    example = yaml.safe_load((ROOT / "inventory/example/group_vars/gpu_hosts/sglang_build.yml").read_text())
    links = {k: v for k, v in example.items() if k.startswith("sglang_build_flashinfer_aot_")}
    assert sorted(links) == ["sglang_build_flashinfer_aot_allreduce_fusion", "sglang_build_flashinfer_aot_attention_backend",
                             "sglang_build_flashinfer_aot_speculative_algorithm"], links
    server = {"sglang_server_attention_backend": "flashinfer", "sglang_server_enable_flashinfer_allreduce_fusion": True,
              "sglang_server_speculative_algorithm": "EAGLE3"}
    proc, spec = render(tmp_path, *ev({**links, **server}))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (spec["flashinfer_aot"]["attention_backend"], spec["flashinfer_aot"]["allreduce_fusion"]) == ("flashinfer", True)
    labels = [sb.aot_label(m) for m in sb.Build(spec, python_version="3.12").aot_modules]
    assert labels == ["mla fa2 bfloat16 512/64", "prefill fa2 bfloat16 192/128", "prefill fa2 bfloat16 128/128",
                      "decode bfloat16 128", "cascade"]  # no trtllm_comm: SGLang 0.5.9 fuses only on SM90/SM100


@needs_ansible
def test_each_release_set_says_whether_its_sampler_takes_flashinfers_kernels(tmp_path):
    """The sampling module follows the set's own source (files/release_sets/<set>.json: flashinfer_sampling)."""
    for release_set, sampling, modules in (("0.5.9", False, []), ("0.5.17", True, ["sampling"]),
                                           ("0.5.23", True, ["sampling"])):
        proc, spec = render(tmp_path, "-e", f"sglang_build_release_set={release_set}")
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert spec["flashinfer_aot"]["sampling"] is sampling, release_set
        assert [sb.aot_label(m) for m in sb.Build(spec, python_version="3.12").aot_modules] == modules
    proc, spec = render(tmp_path, "-e", "sglang_build_release_set=0.5.23", "-e", "sglang_build_flashinfer_aot_sampling=false")
    assert proc.returncode == 0 and spec["flashinfer_aot"]["sampling"] is False


@needs_ansible
def test_an_mla_draft_needs_a_release_that_serves_it(tmp_path):
    proc, spec = render(tmp_path, "-e", "sglang_build_release_set=0.5.23",
                        "-e", "sglang_build_flashinfer_aot_draft_attention=mla",
                        "-e", "sglang_build_flashinfer_aot_attention_backend=flashinfer")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert [sb.aot_label(m) for m in sb.Build(spec, python_version="3.12").aot_modules] == [
        "mla fa2 bfloat16 512/64", "prefill fa2 bfloat16 192/128", "sampling"]
    proc, spec = render(tmp_path, "-e", "sglang_build_flashinfer_aot_draft_attention=mla")  # the 0.5.9 set
    assert proc.returncode != 0 and spec is None
    assert "sglang_build_flashinfer_aot_draft_attention is mla (lightseekorg/kimi-k2.5-eagle3-mla, " \
           "Eagle3DeepseekV2ForCausalLM), which SGLang 0.5.9 (release set 0.5.9) does not serve" in " ".join(proc.stdout.split())
    proc, _ = render(tmp_path, "-e", "sglang_build_flashinfer_aot_draft_attention=gqa")
    assert proc.returncode != 0 and "sglang_build_flashinfer_aot_draft_attention" in proc.stdout


@needs_ansible
def test_an_unknown_release_set_is_refused_naming_the_choices(tmp_path):
    proc, spec = render(tmp_path, "-e", "sglang_build_release_set=0.5.24")
    assert proc.returncode != 0 and spec is None
    assert "sglang_build_release_set" in proc.stdout and "0.5.9, 0.5.17, 0.5.23" in proc.stdout, proc.stdout[-2000:]


def test_derived_sets_for_each_setting():
    def labels(arch, **aot):
        base = {"enabled": True, "modules": [], "attention_backend": "", "allreduce_fusion": False,
                "speculative_algorithm": "EAGLE3", "draft_head_dim": 128}
        return [sb.aot_label(m) for m in sb.derive_aot_modules(dict(base, **aot), arch)]

    assert labels("12.0a") == [] and labels("9.0a 12.0a", attention_backend="fa3") == []
    assert labels("12.0a", attention_backend="flashinfer", speculative_algorithm="") == [
        "mla fa2 bfloat16 512/64", "prefill fa2 bfloat16 192/128"]
    assert labels("9.0a 12.0a", attention_backend="flashinfer", draft_head_dim=64) == [
        "mla fa2 bfloat16 512/64", "prefill fa2 bfloat16 192/128", "mla fa3 bfloat16 512/64",
        "prefill fa3 bfloat16 192/128", "prefill fa2 bfloat16 64/64", "prefill fa3 bfloat16 64/64",
        "decode bfloat16 64", "cascade"]
    assert labels("12.0a", allreduce_fusion=True) == []
    assert labels("9.0a 12.0a", allreduce_fusion=True) == ["trtllm_comm"]
    # 0.5.17 on: the sampler's top-k/top-p/min-p kernels from flashinfer.sampling.
    assert labels("12.0a", sampling=True) == ["sampling"]
    # Kimi-K2.5's MLA draft (Eagle3DeepseekV2ForCausalLM) runs on the target's FlashInfer MLA backend with the
    # target's layout: the target's modules, none of the MHA draft's.
    assert labels("12.0a", attention_backend="flashinfer", draft_attention="mla", sampling=True) == [
        "mla fa2 bfloat16 512/64", "prefill fa2 bfloat16 192/128", "sampling"]
    assert labels("12.0a", draft_attention="mla") == []  # triton attention (SM120's default): no FlashInfer module
    # An explicit list replaces the derived one; its descriptors are completed and deduplicated.
    explicit = labels("12.0a", attention_backend="flashinfer",
                      modules=[{"kind": "norm"}, {"kind": "activation"}, {"kind": "activation", "act": "silu"},
                               {"kind": "prefill", "head_dim_qk": 192, "head_dim_vo": 128, "dtype_kv": "float8_e4m3fn"}])
    assert explicit == ["norm", "activation silu", "prefill fa2 bfloat16 kv float8_e4m3fn 192/128"]


@pytest.mark.parametrize("desc, message", [
    ({"kind": "nrom"}, r"\[1\]: kind must be one of"),
    ({"kind": "mla", "backend": "fa9"}, r"\[1\]: backend must be one of fa2, fa3"),
    ({"kind": "prefill", "head_dim_qk": 0}, r"\[1\]: head_dim_qk must be a positive integer"),
    ({"kind": "norm", "act": "silu"}, r"\[1\]: norm takes no parameters, not act"),
    ({"kind": "decode", "sliding_window": "yes"}, r"\[1\]: sliding_window must be true or false"),
])
def test_a_bad_module_descriptor_is_named(desc, message):
    aot = {"enabled": True, "modules": [{"kind": "norm"}, desc]}
    with pytest.raises(ValueError, match=r"sglang_build_flashinfer_aot_modules" + message):
        sb.derive_aot_modules(aot, "12.0a")


@needs_ansible
def test_validation_and_the_plan_name_the_bad_list_items(tmp_path):
    """Validation (before any host changes) asks the build tool's own descriptor rules: every bad item
    named, its parameter too, not only its kind; the plan applies the same rules."""
    proc, _ = render(tmp_path, *ev({"sglang_build_flashinfer_aot_modules": [{"kind": "norm"}, {"kind": "mla", "dtype": "x"},
                                                                            {"kind": "nrom"}]}))
    assert proc.returncode != 0
    assert "sglang_build_flashinfer_aot_modules[1]: dtype must be one of" in proc.stdout, proc.stdout[-3000:]
    assert "sglang_build_flashinfer_aot_modules[2]: kind must be one of" in proc.stdout
    proc, spec = render(tmp_path, *ev({"sglang_build_flashinfer_aot_modules": [{"kind": "norm"}, {"kind": "mla"}]}))
    assert proc.returncode == 0, proc.stdout[-3000:]
    spec["flashinfer_aot"]["modules"][1]["dtype"] = "x"  # the plan's own check, on a spec that bypassed validation
    plan = subprocess.run([sys.executable, str(ROLE / "files" / "sglang_build.py"), "plan"], capture_output=True, text=True,
                          env=dict(os.environ, SGLANG_BUILD_SPEC=json.dumps(dict(spec, root=str(tmp_path / "opt")))),
                          check=False)
    assert plan.returncode == 1
    assert json.loads(plan.stdout)["msg"].startswith("sglang_build_flashinfer_aot_modules[1]: dtype must be one of")


def spec_with(spec: dict, **aot) -> dict:
    spec = copy.deepcopy(spec)
    spec["flashinfer_aot"].update(aot)
    return spec


@needs_ansible
def test_release_id_keeps_its_value_without_modules_and_changes_with_them(tmp_path):
    _, spec = render(tmp_path)
    off = spec_with(spec, enabled=False)
    base = sb.Build(off, python_version="3.12").release_id
    assert sb.Build(spec_with(spec, enabled=True), python_version="3.12").release_id == base  # derived set empty
    one = sb.Build(spec_with(spec, modules=[{"kind": "norm"}]), python_version="3.12").release_id
    assert one != base
    assert sb.Build(spec_with(spec, modules=[{"kind": "norm"}]), python_version="3.12").release_id == one
    assert sb.Build(spec_with(spec, modules=[{"kind": "rope"}]), python_version="3.12").release_id != one
    flash = sb.Build(spec_with(spec, attention_backend="flashinfer"), python_version="3.12").release_id
    assert flash not in (base, one)
    extra = copy.deepcopy(off)
    extra["pip"]["extra_packages"] = ["ninja==1.13.2"]
    assert sb.Build(extra, python_version="3.12").release_id != base


def test_unbuildable_archs():
    known = {f"compute_{n}" for n in (75, 80, 86, 89, 90, 100, 103, 110, 120, 121)}
    assert sb.unbuildable("9.0a 12.0a 10.0f 8.9 12.1a", known) == []
    assert sb.unbuildable("7.0 8.0a 9.0f 12.0 13.0a x", known) == ["7.0", "8.0a", "9.0f", "13.0a", "x"]


@needs_ansible
@needs_nvcc
def test_validation_names_the_variable_when_nvcc_cannot_build_an_arch(tmp_path):
    proc, _ = render(tmp_path, "-e", "sglang_build_flashinfer_cuda_arch_list='7.0 12.0a'")
    assert proc.returncode != 0
    assert f"sglang_build_flashinfer_cuda_arch_list: 7.0 cannot be built by {NVCC}" in proc.stdout
    proc, _ = render(tmp_path, *ev({"ansible_local": {"nvidia_cuda": {"gpus": [{"compute_cap": "7.0"}]}}}))
    assert proc.returncode != 0
    assert "sglang_build_flashinfer_cuda_arch_list (empty: derived from compute capability 7.0, detected by nvidia_cuda): " \
           "7.0 cannot be built" in proc.stdout


@needs_nvcc
def test_the_fatbin_reader_reads_what_nvcc_built(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n")
    arches = ["compute_120a,code=sm_120a", "compute_90a,code=sm_90a", "compute_120,code=sm_120", "compute_89,code=sm_89",
              "compute_120,code=compute_120"]
    subprocess.run([str(NVCC), "-shared", "-Xcompiler", "-fPIC", *(f"-gencode=arch={a}" for a in arches), "-o",
                    str(tmp_path / "k.so"), str(src)], check=True, capture_output=True)
    found = sb.fatbin_archs(tmp_path / "k.so")
    assert found["archs"] == ["sm_120", "sm_120a", "sm_89", "sm_90a"] and found["ptx"] == ["compute_120"]
    assert sb.list_archs(tmp_path / "k.so", tmp_path / "no-cuobjdump")["archs"] == found["archs"] \
        or shutil.which("cuobjdump")


# ----------------------------------------------------------------- the real phase, for sm_120a
@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A release as the venv phase leaves it: CPU torch, FlashInfer 0.6.3 and what it imports."""
    if not NVCC.exists():
        pytest.skip(f"no nvcc at {NVCC}")
    import aot_wheels

    import sources

    try:
        wheels = [*aot_wheels.ensure().glob("*.whl")]
        house = sources.ensure() / "wheelhouse"
    except Exception as err:  # no network and nothing cached
        pytest.skip(f"FlashInfer's test wheels are not available: {err}")
    # One version of each (the wheelhouse holds several of some: apache-tvm-ffi 0.1.11 is SGLang 0.5.17's pin):
    # the newest, as pip would pick for FlashInfer's own range.
    newest: dict[str, Path] = {}
    for w in house.glob("*.whl"):
        if re.match(r"(torch|apache_tvm_ffi|packaging|idna|typing_extensions)-", w.name):
            name, version = w.name.split("-")[:2]
            if name not in newest or Version(version) > Version(newest[name].name.split("-")[1]):
                newest[name] = w
    wheels += list(newest.values())
    root = tmp_path_factory.mktemp("opt")
    spec = json.loads(json.dumps({
        "root": str(root), "python": sys.executable, "cuda": {"version": "13.0", "home": str(NVCC.parents[1])},
        "arch": {"torch_cuda_arch_list": "12.0", "flashinfer_cuda_arch_list": "12.0a"}, "max_jobs": 2, "cmake_args": "",
        "pip": {"no_deps": True, "extra_packages": []}, "patch": {"id": ""},
        "components": {n: {"mode": "wheel", "version": "0", "wheel_url": ""} for n in sb.COMPONENTS},
        "flashinfer_aot": {"enabled": True, "modules": [{"kind": "activation", "act": "silu"}],
                           "arch_list_from": "sglang_build_flashinfer_cuda_arch_list"}}))
    if not (NVCC.parents[1] / "lib64" / "stubs" / "libcuda.so").exists():
        # The toolkit's link stub (NVIDIA's cuda-driver-dev) is missing here: an empty stand-in.
        (root / "stubs").mkdir()
        subprocess.run(["gcc", "-shared", "-fPIC", "-x", "c", "/dev/null", "-Wl,-soname,libcuda.so.1", "-o",
                        str(root / "stubs" / "libcuda.so")], check=True)
        spec["flashinfer_aot"]["env"] = {"FLASHINFER_EXTRA_LDFLAGS": f"-L{root / 'stubs'}"}
    build = sb.Build(spec, python_version="%d.%d" % sys.version_info[:2])
    for sub in ("releases", "wheelhouse", "src", "work", "logs"):
        (root / sub).mkdir()
    build.release.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(build.venv)], check=True)
    site = subprocess.run([str(build.venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                    "--target", site, *map(str, wheels)], check=True, capture_output=True)
    (build.release / "venv.json").write_text("{}")
    spec_path = root / "spec.json"
    spec_path.write_text(json.dumps(spec))
    return build, spec, spec_path


def phase(spec_path: Path) -> tuple[dict, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROLE / "files" / "sglang_build.py"), "aot", "--spec", str(spec_path)],
                          capture_output=True, text=True, check=False)
    return json.loads(proc.stdout.strip().splitlines()[-1]), round(time.monotonic() - started, 1)


def test_the_aot_phase_compiles_into_the_release_and_the_check_reads_the_arch(release):
    build, _spec, spec_path = release
    result, seconds = phase(spec_path)
    assert result.get("changed") is True and result["status"] == "compiled", result
    stamp = json.loads((build.release / sb.AOT_STAMP).read_text())
    (mod,) = stamp["modules"]
    assert mod["name"] == "silu_and_mul" and mod["expected_archs"] == ["sm_120a"] and mod["jobs"] >= 1
    so = Path(mod["so"])
    site = build.venv / "lib" / f"python{build.python_version}" / "site-packages"
    assert so == site / "flashinfer" / "data" / "aot" / "silu_and_mul" / "silu_and_mul.so" and so.is_file()
    assert not (build.root / "work" / "flashinfer-aot").exists()
    check = build.aot_check()
    assert check["status"] == "passed", check
    assert check["modules"][0]["archs"] == ["sm_120a"]
    print(f"\nFlashInfer AOT of silu_and_mul for sm_120a: {seconds} s (tool), {mod['wall_seconds']} s compile")
    # FlashInfer itself resolves the module to the release's copy: it would load it, not compile.
    probe = ("import flashinfer.jit as j; s = j.gen_act_and_mul_module('silu'); "
             "print(s.is_aot, s.aot_path)")
    out = subprocess.run([str(build.venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True,
                         env=dict(os.environ, FLASHINFER_WORKSPACE_BASE=str(build.root / "server-cache"),
                                  FLASHINFER_CUDA_ARCH_LIST="12.0a"))
    assert out.stdout.split() == ["True", str(so)]


def test_a_rerun_compiles_nothing(release):
    build, _spec, spec_path = release
    mtime = Path(json.loads((build.release / sb.AOT_STAMP).read_text())["modules"][0]["so"]).stat().st_mtime
    result, seconds = phase(spec_path)
    assert result["changed"] is False and result["status"] == "compiled" and seconds < 10, result
    assert Path(json.loads((build.release / sb.AOT_STAMP).read_text())["modules"][0]["so"]).stat().st_mtime == mtime


def test_a_module_without_its_target_arch_fails_the_check_named(release, tmp_path):
    build, _spec, _ = release
    so = Path(json.loads((build.release / sb.AOT_STAMP).read_text())["modules"][0]["so"])
    saved = tmp_path / "saved.so"
    shutil.copy2(so, saved)
    try:
        (tmp_path / "k.cu").write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n")
        subprocess.run([str(NVCC), "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90a,code=sm_90a", "-o",
                        str(so), str(tmp_path / "k.cu")], check=True, capture_output=True)
        check = build.aot_check()
        assert check["status"] == "failed"
        assert check["problems"] == ["silu_and_mul: no sm_120a code (it has sm_90a)"]
    finally:
        shutil.copy2(saved, so)
    assert build.aot_check()["status"] == "passed"


def test_an_arch_nvcc_cannot_build_fails_before_any_compile(release, tmp_path):
    _build, spec, _ = release
    bad = copy.deepcopy(spec)
    bad["root"] = str(tmp_path / "opt")
    bad["arch"]["flashinfer_cuda_arch_list"] = "7.0 12.0a"
    b = sb.Build(bad, python_version="%d.%d" % sys.version_info[:2])
    b.release.mkdir(parents=True)
    (b.release / "venv.json").write_text("{}")  # the arch is checked before the venv is used
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    result, seconds = phase(tmp_path / "bad.json")
    assert result["failed"] is True and seconds < 10
    assert result["msg"].startswith(f"sglang_build_flashinfer_cuda_arch_list: 7.0 cannot be built by {NVCC}")
    assert not (tmp_path / "opt" / "work" / "flashinfer-aot").exists()


def test_molecule_installs_the_pinned_dependencies():
    import aot_wheels

    converge = yaml.safe_load((ROOT / "molecule" / "sglang_build" / "converge.yml").read_text())
    extra = converge[0]["vars"]["sglang_build_pip_extra_packages"]
    assert extra == aot_wheels.DEPENDENCIES + aot_wheels.FROM_WHEELHOUSE
