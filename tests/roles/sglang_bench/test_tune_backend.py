"""The tuner's candidates and the server's launch check agree on topk > 1 (sglang_tune.py's `launch` settings
read the facts of roles/sglang_eagle3_patch/files/sglang_launch_facts.json through its checker).

Kimi-K2.5 is an MLA model: its draft tree (topk > 1) needs an attention backend with tree attention. The
release's default backend for MLA is fa3 on Hopper, flashinfer or trtllm_mla on SM100 and triton on SM120;
FlashInfer-MLA, FlashMLA and TRT-LLM-MLA raise for topk > 1.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from repo import ROOT, load

tune = load("roles/sglang_bench/files/sglang_tune.py", "sglang_tune")
TOOL = ROOT / "roles" / "sglang_bench" / "files" / "sglang_tune.py"
CHECK = ROOT / "roles" / "sglang_eagle3_patch" / "files" / "sglang_launch_check.py"
DEFAULTS = yaml.safe_load((ROOT / "roles" / "sglang_bench" / "defaults" / "main.yml").read_text())
SERVER = {"tp_size": 8, "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/models/draft"}


def settings(version: str, arch: str, **server) -> dict:
    return {"num_steps": DEFAULTS["sglang_bench_tune_num_steps"], "eagle_topk": DEFAULTS["sglang_bench_tune_eagle_topk"],
            "num_draft_tokens": DEFAULTS["sglang_bench_tune_num_draft_tokens"],
            "start": {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}, "objective": "single",
            "budget_minutes": 180,
            "launch": {"check": str(CHECK), "sglang_version": version, "arch": arch, "gpu_count": 8,
                       "model": "kimi_k25", "args": dict(SERVER, **server)}}


@pytest.mark.parametrize(
    ("version", "arch", "server", "tree"),
    [
        ("0.5.9", "12.0", {}, True),     # the reference host: triton
        ("0.5.9", "9.0", {}, True),      # Hopper: fa3
        ("0.5.9", "10.0", {}, False),    # SM100: trtllm_mla for the DeepSeek family
        ("0.5.10", "10.0", {}, False),
        ("0.5.17", "10.0", {}, False),   # SM100: flashinfer
        ("0.5.17", "12.0", {}, True),
        ("0.5.17", "12.0", {"attention_backend": "flashinfer"}, False),
        ("0.5.9", "10.0", {"attention_backend": "triton"}, True),
    ],
)
def test_the_grid_holds_topk_above_1_only_where_the_backend_has_tree_attention(version, arch, server, tree):
    config = tune.Config.from_settings(settings(version, arch, **server))
    plain = tune.Config.from_settings({k: v for k, v in settings(version, arch).items() if k != "launch"})
    grid = config.grid()
    assert any(p[1] > 1 for p in grid) == tree
    assert {p for p in grid if p[1] == 1} == {p for p in plain.grid() if p[1] == 1}
    if tree:
        assert grid == plain.grid()
    else:
        refused = [why for p, why in config.rejected() if p[1] > 1 and tune.rejection(p) is None]
        assert refused and all("spec-topk-above-1-mla-backend" in why for why in refused)


def test_the_search_never_asks_for_a_refused_point():
    """Topk > 1 pays on this response, but the backend has no tree: the search stays on the chain (topk 1)."""
    config = tune.Config.from_settings(settings("0.5.17", "10.0"))

    def measure(ask):
        value = 100.0 * (1.2 if ask.point and ask.point[1] > 1 else 1.0) + (ask.point[0] if ask.point else 0)
        return {"label": ask.label, "status": "ok", "single": [value + i * 0.01 for i in range(ask.runs)]}

    asked = []

    def answer(ask):
        asked.append(ask.point)
        return measure(ask)

    search, pending = tune.drive(config, answer)
    assert pending is None and asked
    assert all(p is None or p[1] == 1 for p in asked), asked
    assert search.best[1] == 1


def test_a_start_the_server_cannot_run_is_refused_naming_the_variable():
    raw = settings("0.5.17", "10.0")
    raw["start"] = {"num_steps": 3, "eagle_topk": 2, "num_draft_tokens": 6}
    with pytest.raises(tune.TuneError, match=r"^sglang_bench_tune_start .*spec-topk-above-1-mla-backend"):
        tune.Config.from_settings(raw)


def test_plan_lists_the_refused_points_and_says_it_checked(tmp_path):
    done = subprocess.run([sys.executable, str(TOOL), "plan", "--state", str(tmp_path / "s.json"), "--check"],
                          input=json.dumps(settings("0.5.9", "10.0")), check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["launch_rule"].startswith("checked against the launch facts for sglang 0.5.9 on compute capability 10.0")
    assert out["grid_points"] == 8  # steps 1-8 at topk 1 only
    assert any("tune-s3-k2-n6: spec-topk-above-1-mla-backend" in line for line in out["rejected"])
    bad = subprocess.run([sys.executable, str(TOOL), "plan", "--state", str(tmp_path / "s.json"), "--check"],
                         input=json.dumps({**settings("0.5.9", "10.0"), "launch": {"check": "/nowhere"}}),
                         check=False, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("launch must give")
