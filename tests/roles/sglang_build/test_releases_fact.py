"""The local fact role sglang_build records for its readers (library/sglang_build_releases.py), read from a
releases root laid out as the build lays it out: complete releases only, current through its link, a link
moved by hand still naming the release it points at, and the file written only when it changes."""

from __future__ import annotations

import json
from pathlib import Path

from fact_module import load_fact_module, run_fact_module

MODULE = "roles/sglang_build/library/sglang_build_releases.py"
mod = load_fact_module(MODULE, "sglang_build_releases")


def release(root: Path, name: str, version: str | None = "0.5.23", complete: bool = True) -> Path:
    path = root / "releases" / name
    site = path / "venv" / "lib" / "python3.12" / "site-packages" / "sglang"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    if version is not None:
        (path / "manifest.json").write_text(json.dumps({
            "versions": {"sglang": version}, "sglang_dir": str(site), "release_set": version,
            "inputs": {"patch": {"id": "eagle3-v1"}}}))
    if complete:
        (path / ".complete").write_text("")
    return path


def test_current_previous_and_the_complete_releases(tmp_path):
    root = tmp_path / "opt"
    new, old = release(root, "sglang-0.5.23-a"), release(root, "sglang-0.5.17-b", "0.5.17")
    release(root, "sglang-0.5.23-building", complete=False)  # a build killed midway: never listed
    (root / "current").symlink_to(new)
    (root / "previous").symlink_to(old)  # an older version's link: not part of the fact
    fact = mod.describe(str(root))
    assert fact["schema"] == 2 and fact["root"] == str(root)
    assert sorted(fact["releases"]) == ["sglang-0.5.17-b", "sglang-0.5.23-a"]
    assert "previous" not in fact  # the one previous is role sglang_server's
    current = fact["current"]
    assert (current["id"], current["dir"], current["version"], current["patch_id"]) == (
        "sglang-0.5.23-a", str(new.resolve()), "0.5.23", "eagle3-v1")
    assert current["python"] == f"{root}/current/venv/bin/python"  # the unit follows the link
    assert fact["releases"]["sglang-0.5.17-b"]["python"] == f"{old.resolve()}/venv/bin/python"
    assert current["sglang_dir"].endswith("site-packages/sglang")


def test_a_release_laid_out_by_hand_and_a_missing_package(tmp_path):
    root = tmp_path / "opt"
    by_hand = release(root, "r1", version=None)  # no manifest: the venv's site-packages says where sglang is
    gone = release(root, "r2")
    for item in sorted((gone / "venv").rglob("*"), reverse=True):  # its venv removed since its check
        item.rmdir() if item.is_dir() else item.unlink()
    (root / "current").symlink_to(by_hand)
    fact = mod.describe(str(root))
    assert fact["releases"]["r1"]["sglang_dir"].endswith("python3.12/site-packages/sglang")
    assert fact["releases"]["r1"]["version"] == ""
    assert fact["releases"]["r2"]["sglang_dir"] == ""


def test_no_root_yet(tmp_path):
    assert mod.describe(str(tmp_path / "none")) == {"schema": 2, "root": str(tmp_path / "none"), "current": None,
                                                    "releases": {}}


def test_written_atomically_and_only_when_it_changes(tmp_path):
    fact_file = tmp_path / "facts.d" / "sglang_build.fact"
    root = tmp_path / "opt"
    (root / "current").parent.mkdir(parents=True)
    (root / "current").symlink_to(release(root, "r1"))

    def run(check_mode=False, diff=False):
        """The module as Ansible runs it (an arguments file)."""
        return run_fact_module(MODULE, {"root": str(root), "fact_file": str(fact_file)}, tmp_path, check_mode, diff)

    first = run(check_mode=True, diff=True)
    assert first["changed"] and not fact_file.exists() and '"id": "r1"' in first["diff"]["after"]
    assert run()["changed"] and json.loads(fact_file.read_text())["current"]["id"] == "r1"
    assert oct(fact_file.stat().st_mode & 0o777) == "0o644"
    again = run()
    assert not again["changed"] and again["releases"]["current"]["id"] == "r1"
    assert [p.name for p in fact_file.parent.iterdir()] == ["sglang_build.fact"]  # no temporary file left
    (root / "current").unlink()
    (root / "current").symlink_to(release(root, "r2"))
    assert run()["changed"] and json.loads(fact_file.read_text())["current"]["id"] == "r2"
