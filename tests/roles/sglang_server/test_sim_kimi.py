"""The Kimi-K2.5 + EAGLE-3 start-up crash, driven by SGLang 0.5.9's real kimi_k25.py."""

from __future__ import annotations

import ast
import shutil
import time
from pathlib import Path

import pytest
import requests

from simtruth import REFERENCE_LAUNCH

ERROR = "AttributeError: 'KimiK25ForConditionalGeneration' object has no attribute '{}'"
DELEGATIONS = {
    "set_eagle3_layers_to_capture": "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
                                    "        return self.language_model.set_eagle3_layers_to_capture(layer_ids)\n",
    "get_embed_and_head": "    def get_embed_and_head(self):\n"
                          "        return self.language_model.get_embed_and_head()\n",
    "set_embed_and_head": "    def set_embed_and_head(self, embed, head):\n"
                          "        return self.language_model.set_embed_and_head(embed, head)\n",
}


def copy_with_methods(sglang_dir: Path, dest: Path, methods: list[str]) -> Path:
    """A copy of the sglang dir whose KimiK25ForConditionalGeneration gains `methods`."""
    target = dest / "sglang"
    shutil.copytree(sglang_dir, target)
    kimi = target / "srt" / "models" / "kimi_k25.py"
    lines = kimi.read_text(encoding="utf-8").splitlines(keepends=True)
    cls = next(n for n in ast.parse("".join(lines)).body
               if isinstance(n, ast.ClassDef) and n.name == "KimiK25ForConditionalGeneration")
    added = "".join("\n" + DELEGATIONS[m] for m in methods)
    kimi.write_text("".join(lines[: cls.end_lineno]) + added + "".join(lines[cls.end_lineno:]), encoding="utf-8")
    return target


def start_reference(start_sim, sglang_dir: Path, load_seconds: str = "0", extra_env: dict | None = None,
                    model: str = REFERENCE_LAUNCH[1], wait: str | None = None):
    env = {"SGLANG_SIM_SGLANG_DIR": str(sglang_dir), "SGLANG_SIM_LOAD_SECONDS": load_seconds, **(extra_env or {})}
    return start_sim(REFERENCE_LAUNCH[2:], env=env, model=model, wait=wait)


def test_unpatched_0_5_9_crashes_like_sglang(start_sim, sdist_sglang_dir: Path) -> None:
    sim = start_reference(start_sim, sdist_sglang_dir, load_seconds="1.0", wait="listening on")
    assert requests.get(sim.url + "/health_generate", timeout=5).status_code == 503
    assert sim.wait_exit() == 1
    assert time.monotonic() - sim.started >= 1.0  # after the load time, as the real one ~8 min in
    err = sim.stderr().rstrip().splitlines()
    assert err[-1] == ERROR.format("set_eagle3_layers_to_capture")
    assert "Traceback (most recent call last):" in sim.stderr()
    runner = sdist_sglang_dir / "srt" / "model_executor" / "model_runner.py"
    cited = next(line for line in err if str(runner) in line)
    lineno = int(cited.split("line ")[1].split(",")[0])
    assert "set_eagle3_layers_to_capture" in runner.read_text().splitlines()[lineno - 1]
    assert "The server is fired up" not in sim.stdout()


def test_patched_copy_with_three_methods_starts(start_sim, sdist_sglang_dir: Path, tmp_path: Path) -> None:
    patched = copy_with_methods(sdist_sglang_dir, tmp_path, list(DELEGATIONS))
    sim = start_reference(start_sim, patched, wait="The server is fired up and ready to roll!")
    assert requests.get(sim.url + "/health_generate", timeout=5).status_code == 200
    assert sim.stderr() == ""


def test_half_patched_copy_crashes_on_the_next_call(start_sim, sdist_sglang_dir: Path, tmp_path: Path) -> None:
    """With only set_eagle3_layers_to_capture, SGLang gets further and fails in the EAGLE worker."""
    patched = copy_with_methods(sdist_sglang_dir, tmp_path, ["set_eagle3_layers_to_capture"])
    sim = start_reference(start_sim, patched)
    assert sim.wait_exit() == 1
    assert sim.stderr().rstrip().splitlines()[-1] == ERROR.format("get_embed_and_head")
    assert "eagle_worker.py" in sim.stderr()


@pytest.mark.parametrize(("model", "fault", "crashes"), [
    ("some-org/Other-Model", "", False),  # the check is for Kimi-K2.5 only...
    ("some-org/Other-Model", "crash_on_start_missing_eagle3", True),  # ...unless forced
    ("/models/Kimi-K2.5-INT4", "", True),  # local paths with the name count
])
def test_check_applies_to_kimi_or_when_forced(start_sim, sdist_sglang_dir: Path, model: str, fault: str,
                                              crashes: bool) -> None:
    sim = start_reference(start_sim, sdist_sglang_dir, model=model, extra_env={"SGLANG_SIM_FAULT": fault},
                          wait=None if crashes else "The server is fired up and ready to roll!")
    if crashes:
        assert sim.wait_exit() == 1
        assert sim.stderr().rstrip().endswith(ERROR.format("set_eagle3_layers_to_capture"))


def test_reported_version_comes_from_the_sglang_dir(start_sim, sdist_sglang_dir: Path, tmp_path: Path) -> None:
    patched = copy_with_methods(sdist_sglang_dir, tmp_path, list(DELEGATIONS))
    version_file = patched / "_version.py"
    version_file.write_text(version_file.read_text().replace("'0.5.9'", "'0.5.9.post7'"))
    sim = start_reference(start_sim, patched, wait="The server is fired up and ready to roll!")
    assert requests.get(sim.url + "/get_server_info", timeout=5).json()["version"] == "0.5.9.post7"
