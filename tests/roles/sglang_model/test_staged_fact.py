"""The local fact role sglang_model records for role sglang_server (library/sglang_model_staged.py), read from
a models root laid out as the role stages it: every model whose current link points at a revision, whichever
run staged it, with the repo_id its manifest names; the file written only when it changes."""

from __future__ import annotations

import json
from pathlib import Path

from fact_module import load_fact_module, run_fact_module

MODULE = "roles/sglang_model/library/sglang_model_staged.py"
mod = load_fact_module(MODULE, "sglang_model_staged")


def stage(root: Path, name: str, sha: str, repo_id: str | None = "test-org/tiny") -> Path:
    revision = root / name / sha
    revision.mkdir(parents=True)
    (revision / "config.json").write_text("{}")
    if repo_id is not None:
        (root / name / f"{sha}.manifest.json").write_text(json.dumps({"repo_id": repo_id, "revision": sha}))
    current = root / name / "current"
    if current.is_symlink():
        current.unlink()
    current.symlink_to(sha)
    return revision


def test_each_current_revision_with_its_repo_id(tmp_path):
    root = tmp_path / "models"
    target = stage(root, "target", "a" * 40, "moonshotai/Kimi-K2.5")
    stage(root, "draft", "b" * 40)
    (root / "half").mkdir()  # a staging that never got a current link: not listed
    (root / "half" / ("c" * 40)).mkdir()
    fact = mod.describe(str(root))
    assert fact["schema"] == 2 and sorted(fact["models"]) == ["draft", "target"]
    assert fact["models"]["target"] == {"path": str(target.resolve()), "revision": "a" * 40,
                                        "current": str(root / "target" / "current"),
                                        "manifest": f"{target.resolve()}.manifest.json", "repo_id": "moonshotai/Kimi-K2.5"}


def test_a_revision_without_manifest_and_a_dangling_link(tmp_path):
    root = tmp_path / "models"
    stage(root, "target", "a" * 40, repo_id=None)
    stage(root, "gone", "d" * 40)
    (root / "gone" / ("d" * 40) / "config.json").unlink()
    (root / "gone" / ("d" * 40)).rmdir()
    fact = mod.describe(str(root))
    assert fact["models"]["target"]["repo_id"] == "" and "gone" not in fact["models"]
    assert mod.describe(str(tmp_path / "none")) == {"schema": 2, "root": str(tmp_path / "none"), "models": {}}


def test_written_only_when_it_changes(tmp_path):
    root, fact_file = tmp_path / "models", tmp_path / "facts.d" / "sglang_model.fact"
    stage(root, "target", "a" * 40)

    def run(check_mode=False):
        return run_fact_module(MODULE, {"root": str(root), "fact_file": str(fact_file)}, tmp_path, check_mode)

    assert run(check_mode=True)["changed"] and not fact_file.exists()
    assert run()["changed"] and json.loads(fact_file.read_text())["models"]["target"]["revision"] == "a" * 40
    assert not run()["changed"]
    stage(root, "target", "e" * 40)  # a new revision made current
    assert run()["changed"] and json.loads(fact_file.read_text())["models"]["target"]["revision"] == "e" * 40
    assert [p.name for p in fact_file.parent.iterdir()] == ["sglang_model.fact"]
