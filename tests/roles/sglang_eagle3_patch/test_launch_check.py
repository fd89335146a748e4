"""The launch-settings check: facts per release and architecture, impossible settings, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from repo import load

support = load("tests/roles/sglang_eagle3_patch/patch_support.py", "sglang_eagle3_patch_support")
LAUNCH_CHECK, NEWEST, PATCHED_UPSTREAM, UNPATCHED = (support.LAUNCH_CHECK, support.NEWEST, support.PATCHED_UPSTREAM,
                                                  support.UNPATCHED)

FACTS = LAUNCH_CHECK.with_name("sglang_launch_facts.json")
# The recipe published for the public Kimi-K2.5 EAGLE-3 draft, on 8 GPUs.
GOOD = {
    "tp_size": 8,
    "mem_fraction_static": 0.9,
    "speculative_algorithm": "EAGLE3",
    "speculative_draft_model_path": "/models/kimi-k25-eagle3",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "extra_args": ["--trust-remote-code"],
}


def run(settings: dict, version: str = UNPATCHED, arch: str = "12.0", gpus: int = 8,
        model: str | None = None) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, str(LAUNCH_CHECK), "--sglang-version", version, "--arch", arch,
         "--gpu-count", str(gpus), "--args-json", "-", "--json", *(["--model", model] if model else [])],
        input=json.dumps(settings), check=False, capture_output=True, text=True,
    )
    return done.returncode, json.loads(done.stdout)


def ids(report: dict, kind: str) -> set[str]:
    return {entry["id"] for entry in report[kind]}


def test_the_published_recipe_passes():
    rc, report = run(GOOD)
    assert rc == 0
    assert report["failures"] == [] and report["warnings"] == []
    assert report["facts_checked"] > 0


@pytest.mark.parametrize(
    ("version", "arch", "rc", "failures", "warnings"),
    [
        (UNPATCHED, "12.0", 1, {"torch-symm-mem-keyerror-sm120"}, set()),
        ("0.5.13.post1", "12.0", 1, {"torch-symm-mem-keyerror-sm120"}, set()),
        ("0.5.14", "12.0", 0, set(), {"torch-symm-mem-noop-sm120"}),
        (NEWEST, "12.0", 0, set(), {"torch-symm-mem-noop-sm120"}),
        (UNPATCHED, "9.0", 0, set(), set()),
    ],
)
def test_torch_symm_mem_depends_on_release_and_arch(version, arch, rc, failures, warnings):
    code, report = run(dict(GOOD, enable_torch_symm_mem=True), version=version, arch=arch)
    assert code == rc
    assert ids(report, "failures") == failures
    assert ids(report, "warnings") == warnings


def test_a_flag_in_extra_args_counts_like_a_setting():
    _, structured = run(dict(GOOD, enable_torch_symm_mem=True))
    _, raw = run(dict(GOOD, extra_args=["--trust-remote-code", "--enable-torch-symm-mem"]))
    assert ids(structured, "failures") == ids(raw, "failures") == {"torch-symm-mem-keyerror-sm120"}


def test_failing_fact_cites_its_source():
    _, report = run(dict(GOOD, enable_torch_symm_mem=True))
    sources = report["failures"][0]["sources"]
    assert any("device_communicators/all_reduce_utils.py:3-16 (sglang 0.5.9)" in s for s in sources)


@pytest.mark.parametrize("version", [UNPATCHED, PATCHED_UPSTREAM, "0.5.13"])
def test_flashinfer_allreduce_fusion_is_a_noop_warning_on_sm120_before_0_5_14(version):
    rc, report = run(dict(GOOD, enable_flashinfer_allreduce_fusion=True), version=version)
    assert rc == 0
    assert ids(report, "warnings") == {"flashinfer-allreduce-fusion-noop-sm120"}
    _, hopper = run(dict(GOOD, enable_flashinfer_allreduce_fusion=True), version=version, arch="9.0")
    assert hopper["warnings"] == []


@pytest.mark.parametrize("version", ["0.5.14", "0.5.17", "0.5.20", "0.5.21", NEWEST])
def test_flashinfer_allreduce_fusion_fails_on_sm120_from_0_5_14_naming_the_variable(version):
    """The deprecated flag becomes backend auto, whose resolution raises 'requires SM90 or SM10X' in the warmup
    after the weights loaded (read in 0.5.14 ... 0.5.23): refused before any restart, naming the role's variable."""
    rc, report = run(dict(GOOD, enable_flashinfer_allreduce_fusion=True), version=version)
    assert rc == 1 and ids(report, "failures") == {"flashinfer-allreduce-fusion-fails-sm120"}, report
    assert "flashinfer-allreduce-fusion-noop-sm120" in report["facts_not_applicable"]
    failure = report["failures"][0]
    assert "sglang_server_enable_flashinfer_allreduce_fusion" in failure["fix"] and "SM90 or SM10X" in failure["effect"]
    assert failure["sources"][0].startswith("python/sglang/srt/arg_groups/serving_hook.py:285-301 (sglang 0.5.23)")
    # A backend given through the extra arguments fails alike; forced off, on Hopper or Blackwell, or on one GPU it
    # does not (a TP group of one builds no fusion workspace).
    assert run(dict(GOOD, extra_args=["--flashinfer-allreduce-fusion-backend", "trtllm"]), version=version)[0] == 1
    fused = dict(GOOD, enable_flashinfer_allreduce_fusion=True)
    assert run(dict(fused, extra_args=["--enforce-disable-flashinfer-allreduce-fusion"]), version=version)[0] == 0
    assert run(fused, version=version, arch="9.0")[0] == 0 and run(fused, version=version, arch="10.0")[0] == 0
    assert run(dict(fused, tp_size=1), version=version, gpus=1)[0] == 0


@pytest.mark.parametrize(
    ("change", "gpus", "expected"),
    [
        ({"tp_size": 16}, 8, {"parallel-size-exceeds-gpus"}),
        ({"tp_size": 4, "pp_size": 4}, 8, {"parallel-size-exceeds-gpus"}),
        ({"tp_size": 3}, 8, {"tp-size-not-dividing-gpus"}),
        ({"speculative_draft_model_path": None}, 8, {"eagle3-without-draft-model"}),
        ({"mem_fraction_static": 1.5}, 8, {"mem-fraction-static-out-of-range"}),
        ({"speculative_num_steps": None}, 8, {"speculative-params-without-num-steps"}),
        ({"speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8, "env": {"SGLANG_ENABLE_SPEC_V2": "1"}}, 8,
         {"spec-v2-topk-above-1"}),
    ],
)
def test_impossible_settings_fail(change, gpus, expected):
    rc, report = run(dict(GOOD, **change), gpus=gpus)
    assert rc == 1
    assert ids(report, "failures") == expected


@pytest.mark.parametrize("env", [{}, {"SGLANG_ENABLE_SPEC_V2": "0"}, {"OTHER": "1"}])
def test_a_setting_the_server_does_not_get_is_unset_not_its_own_name(env):
    """topk 4 without SGLANG_ENABLE_SPEC_V2 starts (playbooks/tune.yml leaves the variable out for topk > 1);
    an absent setting must not be read as the literal string of its name (which is truthy)."""
    rc, report = run(dict(GOOD, speculative_eagle_topk=4, speculative_num_draft_tokens=8, env=env))
    assert rc == 0 and "spec-v2-topk-above-1" not in ids(report, "failures"), report


def test_ignored_settings_warn():
    _, overridden = run(dict(GOOD, speculative_num_draft_tokens=6))
    assert ids(overridden, "warnings") == {"speculative-topk1-draft-tokens-overridden"}
    plain = {k: v for k, v in GOOD.items() if k != "speculative_algorithm"}
    _, no_algorithm = run(plain)
    assert ids(no_algorithm, "warnings") == {"speculative-settings-without-algorithm"}


def test_aliases_and_strings_are_normalised():
    rc, report = run({"tensor_parallel_size": "16", "speculative_algorithm": "eagle3", "speculative_draft_model_path": "/d"})
    assert rc == 1
    assert "parallel-size-exceeds-gpus" in ids(report, "failures")


def test_text_output_and_exit_codes():
    done = subprocess.run(
        [sys.executable, str(LAUNCH_CHECK), "--sglang-version", UNPATCHED, "--arch", "12.0", "--gpu-count", "8",
         "--args-json", "-"],
        input=json.dumps(dict(GOOD, enable_torch_symm_mem=True)), check=False, capture_output=True, text=True,
    )
    assert done.returncode == 1
    assert done.stdout.startswith("FAIL torch-symm-mem-keyerror-sm120:")
    bad = subprocess.run(
        [sys.executable, str(LAUNCH_CHECK), "--sglang-version", "latest", "--arch", "12.0", "--gpu-count", "8",
         "--args-json", "-"],
        input="{}", check=False, capture_output=True, text=True,
    )
    assert bad.returncode == 2
    assert "not a release version" in bad.stderr


def test_settings_file_argument(tmp_path: Path):
    settings = tmp_path / "server.json"
    settings.write_text(json.dumps(GOOD))
    done = subprocess.run(
        [sys.executable, str(LAUNCH_CHECK), "--sglang-version", UNPATCHED, "--arch", "12.0", "--gpu-count", "8",
         "--args-json", str(settings)],
        check=False, capture_output=True, text=True,
    )
    assert done.returncode == 0
    assert done.stdout.startswith("OK: 0 failure(s), 0 warning(s)")


def test_every_fact_is_well_formed_and_cited():
    facts = json.loads(FACTS.read_text())["facts"]
    assert len({f["id"] for f in facts}) == len(facts)
    for fact in facts:
        assert fact["severity"] in ("fail", "warn", "note")
        assert fact["when"] and fact["effect"] and fact["sources"]
        for source in fact["sources"]:
            assert source["file"] == "policy" or source["file"].startswith("python/sglang/srt/")


@pytest.mark.parametrize(
    ("version", "key"),
    [("0.5.9", ((0, 5, 9, 0), (4, 0), 0)), ("0.5.13.post1", ((0, 5, 13, 0), (4, 0), 1)),
     ("0.5.10rc0", ((0, 5, 10, 0), (3, 0), 0))],
)
def test_version_ordering(launch_check, version, key):
    assert launch_check.version_key(version) == key
    assert launch_check.version_key("0.5.10rc0") < launch_check.version_key("0.5.10") < launch_check.version_key("0.5.10.post1")


TREE = dict(GOOD, speculative_eagle_topk=4, speculative_num_draft_tokens=8)


@pytest.mark.parametrize(
    ("version", "arch", "backend", "used", "refused"),
    [
        # No backend given: the release's default for an MLA model on that GPU.
        ("0.5.9", "9.0", None, ["fa3"], False),
        ("0.5.9", "10.0", None, ["trtllm_mla"], True),
        ("0.5.9", "12.0", None, ["triton"], False),
        ("0.5.10", "10.0", None, ["trtllm_mla"], True),
        ("0.5.17", "9.0", None, ["fa3"], False),
        ("0.5.17", "10.0", None, ["flashinfer"], True),
        ("0.5.17", "12.0", None, ["triton"], False),
        # Given: whatever the GPU.
        ("0.5.9", "12.0", "flashinfer", ["flashinfer"], True),
        ("0.5.17", "12.0", "flashmla", ["flashmla"], True),
        ("0.5.9", "10.0", "triton", ["triton"], False),
        ("0.5.17", "9.0", "fa3", ["fa3"], False),
    ],
)
def test_topk_above_1_on_kimi_depends_on_the_backend_the_release_picks(version, arch, backend, used, refused):
    """Kimi-K2.5 is an MLA model: FlashInfer-MLA, FlashMLA and TRT-LLM-MLA have no tree attention for topk > 1
    (their draft backends raise at start-up), fa3 and triton do. topk 1 is never refused."""
    settings = dict(TREE, attention_backend=backend) if backend else TREE
    rc, report = run(settings, version=version, arch=arch, model="kimi_k25")
    assert report["attention_backends"] == used
    assert ("spec-topk-above-1-mla-backend" in ids(report, "failures")) == refused, report
    assert rc == (1 if refused else 0)
    if refused:  # the message names the variable to change
        assert "sglang_server_speculative_eagle_topk" in report["failures"][0]["fix"]
    rc1, chain = run(dict(settings, speculative_eagle_topk=1, speculative_num_draft_tokens=4), version=version,
                     arch=arch, model="kimi_k25")
    assert rc1 == 0 and chain["failures"] == []


def test_a_draft_or_decode_backend_given_counts_too():
    _rc, report = run(dict(TREE, attention_backend="triton", speculative_draft_attention_backend="flashinfer"),
                      version="0.5.17", model="kimi_k25")
    assert report["attention_backends"] == ["flashinfer", "triton"]
    assert ids(report, "failures") == {"spec-topk-above-1-mla-backend"}


def test_a_model_without_mla_is_not_held_to_the_mla_rule():
    rc, report = run(dict(TREE, attention_backend="flashinfer"), version="0.5.17", model="llama")
    assert rc == 0 and report["failures"] == []


@pytest.mark.parametrize(("version", "refused"), [("0.5.9", True), ("0.5.10", True), ("0.5.17", False)])
def test_trtllm_mha_refuses_topk_above_1_where_server_args_says_so(version, refused):
    rc, report = run(dict(TREE, decode_attention_backend="trtllm_mha"), version=version, arch="10.0", model="llama")
    assert ("spec-topk-above-1-trtllm-mha" in ids(report, "failures")) == refused
    assert rc == (1 if refused else 0)


@pytest.mark.parametrize(("backend", "refused"), [("triton", True), ("fa3", False), ("flashinfer", False)])
def test_topk_above_1_with_pages_needs_flashinfer_or_fa3(backend, refused):
    _rc, report = run(dict(TREE, attention_backend=backend, page_size=16), version="0.5.9", arch="9.0", model="llama")
    assert ("spec-topk-above-1-paged-backend" in ids(report, "failures")) == refused
    _rc, unpaged = run(dict(TREE, attention_backend=backend), version="0.5.9", arch="9.0", model="llama")
    assert unpaged["failures"] == []
