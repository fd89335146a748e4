"""The pre-start ServerArgs check (roles/sglang_server/files/sglang_server_args_check.py).

Against real release trees, no containers: SGLang 0.5.9 and 0.5.10 unpacked from their PyPI sdists, 0.5.17
and 0.5.23 from their wheels, in local venvs with what their ``sglang.srt.server_args`` imports
(tests/harness/serverargs_release.py, cached). The reference command line as the role renders it for each
release (its own tables templated by Ansible, the example inventory's settings, the release's features
asked of its real tree: tests/roles/sglang_server/role_render.py) parses with no deprecation warning; the
command lines of the role's other settings pass, and a flag or a value each release rejects fails, naming
the flag and the release's own message. The cuDNN rule and the message parsing as units.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

import serverargs_release
import sglang_sources
from repo import load

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "roles" / "sglang_server" / "files" / "sglang_server_args_check.py"
CASES = Path(__file__).with_name("serverargs_cases.py")
RELEASES = ["0.5.9", "0.5.10", "0.5.17", "0.5.23"]
SDIST_RELEASES = ["0.5.9", "0.5.10"]  # the later ones publish wheels only
rr = load("tests/roles/sglang_server/role_render.py")


def load_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = load_file("sglang_server_args_check", TOOL)
options_filter = load_file("sglang_server_options", ROOT / "roles" / "sglang_server" / "filter_plugins" /
                           "sglang_server_options.py")


def rendered(extra_args=(), renames=None, **changes) -> list[str]:
    """A command line of the role's options table (vars/main.yml) at the role's defaults, with changes, for a
    release that names the options as `renames` says (its features)."""
    options = {"model_path": "/var/lib/sglang/models/target", "tp_size": 8, "host": "127.0.0.1", "port": 30000,
               "mem_fraction_static": 0.9, "served_model_name": "moonshotai/Kimi-K2.5", "trust_remote_code": True,
               "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
               "speculative_num_draft_tokens": 4, "speculative_draft_model_path": "/var/lib/sglang/models/draft",
               "cuda_graph_max_bs": None, "cuda_graph_max_bs_prefill": None, "max_running_requests": None,
               "context_length": None,
               "attention_backend": "", "enable_flashinfer_allreduce_fusion": False, "enable_torch_symm_mem": False,
               "enable_metrics": True, "nnodes": None, "node_rank": None, "dist_init_addr": None}
    options.update(changes)
    return options_filter.sglang_server_argv(options, list(extra_args), renames)


NO_SPECULATION = {"speculative_algorithm": "", "speculative_num_steps": None, "speculative_eagle_topk": None,
                  "speculative_num_draft_tokens": None, "speculative_draft_model_path": None}


def good(renames: dict) -> dict:
    """The role's other settings, each a command line the release must take."""
    return {
        "defaults": {"argv": rendered(renames=renames), "api_key_set": True},
        "no speculation": {"argv": rendered(renames=renames, **NO_SPECULATION)},
        "multi-node rank 1": {"argv": rendered(renames=renames, tp_size=16, nnodes=2, node_rank=1,
                                               dist_init_addr="10.0.0.11:20000")},
        "tuned": {"argv": rendered(renames=renames, attention_backend="flashinfer", cuda_graph_max_bs=64,
                                   max_running_requests=48, context_length=131072, speculative_eagle_topk=4,
                                   speculative_num_draft_tokens=8)},
        # The CUDA graphs sized to what the host serves (sglang_server_cuda_graph_max_bs auto, a prefill bound).
        "graphs follow the host": {"argv": rendered(renames=renames, cuda_graph_max_bs=16, max_running_requests=16,
                                                    cuda_graph_max_bs_prefill=2048)},
        "kimi parsers": {"argv": rendered(["--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2"], renames)},
    }


GOOD_NAMES = list(good({}))
# name: (changes, extra arguments, the step that refuses, a flag it must name, the release's words)
BAD = {
    "unknown flag": ({}, ["--no-such-flag", "1"], "parse", "--no-such-flag", "unrecognized arguments: --no-such-flag 1"),
    "bad choice": ({"attention_backend": "bogus"}, [], "parse", "--attention-backend", "invalid choice: 'bogus'"),
    "bad int": ({"tp_size": "eight"}, [], "parse", "--tp-size", "invalid int value: 'eight'"),
    "bad float": ({"mem_fraction_static": "most"}, [], "parse", "--mem-fraction-static", "invalid float value: 'most'"),
    "post-init check": ({}, ["--enable-tokenizer-batch-encode", "--enable-dynamic-batch-tokenizer"],
                        "_handle_tokenizer_batching", "--enable-dynamic-batch-tokenizer", "Cannot enable both"),
}
# The tool's command line as the role runs it, with a value the release refuses.
CLI_REFUSAL = ["--json", "--api-key-set", "--argv-json", json.dumps(rendered(attention_backend="bogus"))]
# A host of 8 SM120 GPUs over PCIe with P2P (gpu_preflight's fact): the reference host.
REFERENCE_HOST = rr.preflight_fact(
    rr.rtx_pro_6000(8), rr.nvidia_smi_matrix(8, lambda a, b: "PIX" if a // 2 == b // 2 else "SYS"),
    rr.nvidia_smi_matrix(8, lambda a, b: "OK", affinity=False), rr.nvidia_smi_matrix(8, lambda a, b: "OK", affinity=False))


@pytest.fixture(scope="module", params=RELEASES)
def release(request) -> tuple[str, Path]:
    return request.param, serverargs_release.ensure(request.param)


def run_cases(venv: Path, cases: list[dict]) -> list[dict]:
    proc = subprocess.run([str(venv / "bin" / "python"), "-B", str(CASES), str(TOOL)], input=json.dumps(cases),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def release_run(release, tmp_path_factory) -> dict:
    """Every case on one release, in one process of its Python: the role's rendering of the reference host for
    it (its features asked of its tree), the GOOD and BAD command lines, the legacy --cuda-graph-max-bs, and on
    0.5.9 the tool's command line and the cuDNN cases. {"features", "rendered": {name: the role's rendering}, "cases",
    "reports"}."""
    version, venv = release
    features = rr.features(version, tmp_path_factory.mktemp("tree"))
    renames = features["options"]
    # First, so that it imports the release's SGLang itself: the tool as the role runs it (a script, its exit status
    # and its stdout), on the release with torch 2.9.1 in production.
    cases = {"command line": {"cli": CLI_REFUSAL}} if version == "0.5.9" else {}
    role = {"reference": rr.server(features, REFERENCE_HOST),
            "reference tuned": rr.server(features, REFERENCE_HOST, sglang_server_cuda_graph_max_bs=64)}
    cases.update({name: {"argv": r["argv"], "api_key_set": True, "env": r["env"]} for name, r in role.items()})
    cases.update(good(renames))
    cases.update({name: {"argv": rendered(extra, renames, **changes)} for name, (changes, extra, *_) in BAD.items()})
    cases["legacy cuda graph flag"] = {"argv": rendered(cuda_graph_max_bs=64)}
    if version == "0.5.9":
        cases.update(cudnn_cases(tmp_path_factory.mktemp("cudnn")))
    reports = dict(zip(cases, run_cases(venv, list(cases.values())), strict=True))
    return {"features": features, "rendered": role, "cases": cases, "reports": reports}


@pytest.fixture(scope="module")
def reports(release_run) -> dict:
    return release_run["reports"]


def expected_checks(version: str) -> list[str]:
    return [n for name in tool.GPU_FREE_CHECKS[version]
            for n in ([f"{name}({flag})" for flag, _ in tool.BUCKET_OPTIONS] if name == "validate_buckets_rule" else [name])]


def assert_checked(version: str, report: dict) -> None:
    """Every check listed for the release exists there and ran on these values; a release without a list
    (0.5.23) had its command line parsed, nothing more, and the report says so."""
    if version in tool.GPU_FREE_CHECKS:
        assert report["checks"] == expected_checks(version) and report["not_evaluated"] == [], report
    else:
        assert report["checks"] == [] and [n["check"] for n in report["not_evaluated"]] == ["*"], report


@pytest.mark.parametrize("name", ["reference", "reference tuned"])
def test_the_reference_command_line_parses_with_no_deprecation_warning(release, release_run, name):
    """Kimi-K2.5, tp 8, EAGLE-3 3/1/4, the example inventory's settings, on the reference host: as the role
    renders it for this release, the release takes it, warns of nothing deprecated, and gets the flags and the
    environment it reads."""
    version, _ = release
    report, argv = release_run["reports"][name], release_run["cases"][name]["argv"]
    env = release_run["cases"][name]["env"]
    assert "refused" not in report and report["sglang_version"] == version, report
    assert report["parsed"] == len(argv)
    assert not [w for w in report["warnings"] if "deprecat" in w.lower()], report["warnings"]
    assert_checked(version, report)
    decode = version not in ("0.5.9", "0.5.10")
    if name == "reference tuned":
        flag = "--cuda-graph-max-bs-decode" if decode else "--cuda-graph-max-bs"
        assert argv[argv.index(flag) + 1] == "64"
    assert ("SGLANG_ENABLE_SPEC_V2" in env) is not decode
    assert ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE" in env) is (version == "0.5.23")
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "4" and argv[argv.index("--tp-size") + 1] == "8"


def test_the_legacy_cuda_graph_flag_is_what_each_release_says(release, reports):
    """Why the role renames it: 0.5.9 takes --cuda-graph-max-bs, 0.5.17 warns at every start that it is
    deprecated, 0.5.23 refuses it as ambiguous (the warning capture of the check, proven on a real one)."""
    version, _ = release
    report = reports["legacy cuda graph flag"]
    if version == "0.5.23":
        assert report["refused"]["message"] == ("ambiguous option: --cuda-graph-max-bs could match "
                                                "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"), report
    elif version == "0.5.17":
        assert "refused" not in report
        assert any("'--cuda-graph-max-bs' is deprecated" in w and "--cuda-graph-max-bs-decode" in w
                   for w in report["warnings"]), report["warnings"]
    else:
        assert "refused" not in report and not [w for w in report["warnings"] if "deprecat" in w.lower()], report


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_the_rendered_command_lines_pass_every_check(release, release_run, name):
    version, _ = release
    report = release_run["reports"][name]
    assert "refused" not in report, report
    assert report["sglang_version"] == version
    assert report["parsed"] == len(release_run["cases"][name]["argv"])
    assert_checked(version, report)
    assert report["cudnn"]["verdict"] == "pass"


@pytest.mark.parametrize("name", list(BAD))
def test_a_flag_or_value_the_release_rejects_is_refused_naming_it(release, reports, name):
    version, _ = release
    *_, step, flag, words = BAD[name]
    if step != "parse" and version not in tool.GPU_FREE_CHECKS:  # parsed only: the check cannot see it, and says so
        assert "refused" not in reports[name] and reports[name]["not_evaluated"][0]["check"] == "*", reports[name]
        return
    refusal = reports[name].get("refused")
    assert refusal is not None, reports[name]
    assert refusal["step"] == step and flag in refusal["flags"] and words in refusal["message"], refusal


@pytest.mark.parametrize("release", ["0.5.9"], indirect=True)
def test_the_command_line_tool_exits_1_with_the_refusal_as_json(release, reports):
    """The tool as the role runs it (the other cases call its check()): run as a script in the release's Python,
    which it imports itself (serverargs_cases.py runs this case first, with the tool's directory on sys.path as
    `python -B TOOL` has it), exit status 1 and nothing on stdout but the report."""
    result = reports["command line"]
    assert result["exit"] == 1, result
    report = json.loads(result["stdout"])
    assert report["sglang_version"] == "0.5.9" and report["refused"]["flags"] == ["--attention-backend"]


def test_a_release_that_cannot_import_its_server_args_cannot_be_checked(tmp_path):
    """The test hosts' releases without the closure: exit 2, saying so (the role fails on it)."""
    proc = subprocess.run(["python3", "-I", str(TOOL), "--json", "--argv-json", "[]"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and "cannot import the release's sglang.srt.server_args" in proc.stdout


# --------------------------------------------------------------------------- the cuDNN rule

KIMI = ["KimiK25ForConditionalGeneration"]
MULTIMODAL = ["KimiK25ForConditionalGeneration", "Qwen2VLForConditionalGeneration"]


@pytest.mark.parametrize("torch, cudnn, archs, verdict", [
    ("2.9.1+cu130", ("nvidia-cudnn-cu13", "9.13.0.50"), KIMI, "refuse"),
    ("2.9.1+cu130", ("nvidia-cudnn-cu13", "9.16.0.29"), KIMI, "pass"),
    ("2.9.1+cu130", ("nvidia-cudnn-cu13", "9.13.0.50"), ["DeepseekV3ForCausalLM"], "pass"),
    ("2.11.0", ("nvidia-cudnn-cu13", "9.13.0.50"), KIMI, "pass"),
    ("2.9.1+cpu", None, KIMI, "pass"),
    ("2.9.1+cu130", None, KIMI, "warn"),
    ("2.9.1+cu130", ("nvidia-cudnn-cu13", "9.13.0.50"), None, "warn"),
])
def test_cudnn_rule(torch, cudnn, archs, verdict):
    result = tool.cudnn_rule(torch, cudnn, archs, MULTIMODAL, escape_set=False)
    assert result["verdict"] == verdict, result
    if verdict == "refuse":
        assert "sglang_build_pip_overrides" in result["reason"] and "9.13.0.50" in result["reason"]
        assert "SGLANG_DISABLE_CUDNN_CHECK" in result["reason"] and "no fix" in result["reason"]


def test_upstreams_escape_passes_with_a_warning_that_it_is_no_fix():
    result = tool.cudnn_rule("2.9.1+cu130", ("nvidia-cudnn-cu13", "9.13.0.50"), KIMI, MULTIMODAL, escape_set=True)
    assert result["verdict"] == "warn" and "no fix" in result["reason"]


def test_the_cudnn_wheel_is_the_one_torch_requires():
    installed = {"nvidia-cudnn-cu13": "9.16.0.29", "nvidia-cudnn-cu12": "9.10.2.21"}
    assert tool.torch_cudnn_dist(['nvidia-cudnn-cu13==9.13.0.50; platform_system == "Linux"'], installed) == \
        "nvidia-cudnn-cu13"
    assert tool.torch_cudnn_dist([], installed) == "nvidia-cudnn-cu12"  # unknown: the older one
    assert tool.torch_cudnn_dist([], {"nvidia-cudnn-cu13": None, "nvidia-cudnn-cu12": None}) is None


def dist_info(root: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """TEST DOUBLE of an installed distribution's metadata (no code): another version than the venv's."""
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    info.joinpath("METADATA").write_text("Metadata-Version: 2.1\n" f"Name: {name}\nVersion: {version}\n"
                                         + "".join(f"Requires-Dist: {r}\n" for r in requires))


def cudnn_cases(root: Path) -> dict:
    """Kimi-K2.5's and a text-only model's config.json, and the metadata of torch 2.9.1+cu130 with its
    cuDNN wheel at 9.13 and 9.16 (dist-info doubles ahead of the venv's CPU torch)."""
    for model, archs in {"kimi": KIMI, "deepseek": ["DeepseekV3ForCausalLM"]}.items():
        (root / model).mkdir()
        (root / model / "config.json").write_text(json.dumps({"architectures": archs}))
    for cudnn in ["9.13.0.50", "9.16.0.29"]:
        dist_info(root / cudnn, "torch", "2.9.1+cu130", (f"nvidia-cudnn-cu13=={cudnn}",))
        dist_info(root / cudnn, "nvidia-cudnn-cu13", cudnn)
    return {"cudnn 9.13 kimi": {"argv": rendered(), "model_dir": str(root / "kimi"), "metadata_dir": str(root / "9.13.0.50")},
            "cudnn 9.16 kimi": {"argv": rendered(), "model_dir": str(root / "kimi"), "metadata_dir": str(root / "9.16.0.29")},
            "cudnn 9.13 text-only": {"argv": rendered(), "model_dir": str(root / "deepseek"),
                                     "metadata_dir": str(root / "9.13.0.50")},
            "cudnn 9.13 kimi escaped": {"argv": rendered(), "model_dir": str(root / "kimi"),
                                        "metadata_dir": str(root / "9.13.0.50"),
                                        "env": {"SGLANG_DISABLE_CUDNN_CHECK": "1"}}}


@pytest.mark.parametrize("release", ["0.5.9"], indirect=True)  # the release with torch 2.9.1 in production
def test_kimi_on_torch_2_9_1_with_cudnn_9_13_is_refused_through_the_release(release, reports):
    """Through SGLang 0.5.9's own list of multimodal architectures and the release's package metadata:
    refused naming the fix; cuDNN 9.16 or a text-only model pass; upstream's escape passes, warned."""
    refused = reports["cudnn 9.13 kimi"]
    assert refused["refused"]["step"] == "cudnn", refused
    assert "KimiK25ForConditionalGeneration is multimodal" in refused["refused"]["message"]
    assert "sglang_build_pip_overrides" in refused["refused"]["message"]
    assert refused["cudnn"]["torch"] == "2.9.1+cu130" and refused["cudnn"]["verdict"] == "refuse"
    for name in ("cudnn 9.16 kimi", "cudnn 9.13 text-only"):
        assert "refused" not in reports[name] and reports[name]["cudnn"]["verdict"] == "pass", reports[name]
    escaped = reports["cudnn 9.13 kimi escaped"]
    assert "refused" not in escaped and escaped["cudnn"]["verdict"] == "warn", escaped


def release_file(version: str, member: str) -> str:
    """A file of the release's sglang package, from its PyPI sdist or (wheels only) its wheel."""
    if version in SDIST_RELEASES:
        with tarfile.open(sglang_sources.sdist(version)) as tar:
            return tar.extractfile(f"sglang-{version}/sglang/{member}").read().decode()
    with zipfile.ZipFile(sglang_sources.wheel(version, "3.11")) as whl:
        return whl.read(f"sglang/{member}").decode()


@pytest.mark.parametrize("version", RELEASES)
def test_kimi_k25_is_in_the_releases_own_multimodal_list(version, tmp_path):
    target = tmp_path / "sglang" / "srt" / "configs" / "model_config.py"
    target.parent.mkdir(parents=True)
    target.write_text(release_file(version, "srt/configs/model_config.py"))
    archs = tool.multimodal_architectures(tmp_path / "sglang")
    assert "KimiK25ForConditionalGeneration" in archs and "DeepseekV3ForCausalLM" not in archs
    if version == "0.5.17":  # its list names another module-level tuple: *MIMO_V2_MULTIMODAL_ARCHS
        assert "MiMoV2ForCausalLM" in archs


# --------------------------------------------------------------------------- what the checks may touch

# Names that ask the GPU or load the model (the hazards of ServerArgs' other steps).
HAZARDS = {"get_device", "get_device_memory_capacity", "get_device_sm", "get_device_name", "get_device_capability",
           "is_cuda", "is_hip", "is_npu", "is_xpu", "is_cpu", "is_musa", "get_model_config", "ModelConfig",
           "model_config", "get_hf_config", "cpu_has_amx_support", "xpu_has_xmx_support", "is_flashinfer_available",
           "is_triton_kernels_available", "get_nvgpu_memory_capacity", "check_gguf_file", "is_remote_url",
           "get_quantization_config", "cuda", "download_and_get_path", "is_blackwell_supported",
           "is_hopper_with_cuda_12_3", "is_sm90_supported", "is_sm100_supported", "is_sm120_supported"}


@pytest.mark.parametrize("version", [v for v in RELEASES if v in tool.GPU_FREE_CHECKS])
def test_the_listed_checks_touch_neither_gpu_nor_model(version):
    """Each check listed for a release, with the methods it calls on itself, names none of the calls
    that ask the GPU or load the model, in that release's own server_args.py."""
    source = release_file(version, "srt/server_args.py")
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}

    def touched(name, seen):
        if name in seen:
            return set()
        seen.add(name)
        names, found = set(), set()
        for node in ast.walk(methods[name]):
            names.add(node.id if isinstance(node, ast.Name) else getattr(node, "attr", None))
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                    and node.attr in methods):
                found |= touched(node.attr, seen)
        return found | (names & HAZARDS)

    for name in tool.GPU_FREE_CHECKS[version]:
        assert name in methods, f"{name} is not in SGLang {version}"
        assert not touched(name, set()), f"{name} of SGLang {version} touches {touched(name, set())}"
    # The audit sees the hazards it is about: ServerArgs' memory step asks the GPU in both releases.
    assert touched("_handle_gpu_memory_settings", set()) and touched("_handle_model_specific_adjustments", set())


def test_messages_name_their_flags():
    assert tool.flags_in("argument --tp-size/--tensor-parallel-size: invalid int value: 'x'") == \
        ["--tp-size", "--tensor-parallel-size"]
    assert tool.flags_in("unrecognized arguments: --foo 1 --bar") == ["--foo", "--bar"]
    options = frozenset({"--enable-hierarchical-cache", "--disable-radix-cache", "--port"})
    assert tool.flags_in("The arguments enable-hierarchical-cache and disable-radix-cache are mutually "
                         "exclusive", options) == ["--enable-hierarchical-cache", "--disable-radix-cache"]
    assert tool.flags_in("the port is used", options) == []
    assert tool.release_key("0.5.10.post1") == "0.5.10" and tool.release_key("0.5.9") == "0.5.9"
