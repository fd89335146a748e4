"""The simulator reads a local model directory as SGLang 0.5.9 does: config.json at once, the
index's shards at load time; a partial staging fails the start (the model is a synthetic one)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import requests

from simtruth import READY_TEXT
from synthetic_model import make_repo


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    rev = make_repo(root, "test-org/kimi-sim", shards=3, shard_mb=0.05, seed=5)
    return rev.directory


def copy_of(model_dir: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "model"
    shutil.copytree(model_dir, dest)
    return dest


def test_a_complete_directory_serves_and_is_recognised_as_kimi_k25(start_sim, model_dir):
    sim = start_sim(model=str(model_dir), env={"SGLANG_SIM_LOAD_SECONDS": "0.2"}, wait=READY_TEXT)
    info = requests.get(sim.url + "/get_model_info", timeout=5).json()
    assert info["model_path"] == str(model_dir)
    assert requests.get(sim.url + "/health_generate", timeout=5).status_code == 200


def test_a_missing_shard_fails_the_load_naming_it(start_sim, model_dir, tmp_path):
    model = copy_of(model_dir, tmp_path)
    shards = sorted(json.loads((model / "model.safetensors.index.json").read_text())["weight_map"].values())
    (model / shards[-1]).unlink()
    sim = start_sim(model=str(model), env={"SGLANG_SIM_LOAD_SECONDS": "0.2"}, wait="listening on")
    assert sim.wait_exit() == 1
    assert f"No such file or directory: '{model / shards[-1]}'" in sim.stderr()
    assert READY_TEXT not in sim.stdout()


def test_a_missing_draft_shard_fails_too(start_sim, model_dir, tmp_path):
    draft = copy_of(model_dir, tmp_path)
    for shard in draft.glob("*.safetensors"):
        shard.unlink()
    args = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft),
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    sim = start_sim(args, model=str(model_dir), env={"SGLANG_SIM_LOAD_SECONDS": "0.2"}, wait="listening on")
    assert sim.wait_exit() == 1
    assert str(draft) in sim.stderr() and "weight file(s)" in sim.stderr()


def test_a_directory_without_config_fails_at_once(start_sim, model_dir, tmp_path):
    model = copy_of(model_dir, tmp_path)
    (model / "config.json").unlink()
    sim = start_sim(model=str(model), wait=None)
    assert sim.wait_exit() == 1
    assert "does not appear to have a file named config.json" in sim.stderr()
