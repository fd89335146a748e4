"""The patch module on real SGLang releases: version awareness, idempotence, safety of the write."""

from __future__ import annotations

import os

import pytest

from repo import load

support = load("tests/roles/sglang_eagle3_patch/patch_support.py", "sglang_eagle3_patch_support")
KIMI, NEWEST, PATCHED_UPSTREAM, UNPATCHED = support.KIMI, support.NEWEST, support.PATCHED_UPSTREAM, support.UNPATCHED

CLASS = "KimiK25ForConditionalGeneration"


def patch_args(tree, block, **extra):
    return dict(path=str(tree), class_name=CLASS, inner_attr="language_model", block=block, **extra)


def interface_rc(tree) -> int:
    return support.run_interface_check(str(tree)).returncode


def test_unpatched_release_is_patched_and_then_passes_the_interface_check(tree_copy, run_module, rendered_block):
    tree = tree_copy(UNPATCHED)
    before = (tree / KIMI).read_bytes()
    assert interface_rc(tree) == 1
    rc, result = run_module(**patch_args(tree, rendered_block))
    assert rc == 0, result
    assert result["changed"] is True
    assert result["added"] == ["set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"]
    after = (tree / KIMI).read_text()
    assert after != before.decode()
    compile(after, KIMI, "exec")
    assert after.index("# END sglang_eagle3_patch") < after.index("EntryClass = [")
    assert interface_rc(tree) == 0


def test_second_run_changes_nothing(tree_copy, run_module, rendered_block):
    tree = tree_copy(UNPATCHED)
    run_module(**patch_args(tree, rendered_block))
    once = (tree / KIMI).read_bytes()
    rc, result = run_module(**patch_args(tree, rendered_block))
    assert rc == 0
    assert result["changed"] is False
    assert result["added"] == []
    assert result["managed"] == ["set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"]
    assert (tree / KIMI).read_bytes() == once


@pytest.mark.parametrize("version", [PATCHED_UPSTREAM, NEWEST])
def test_releases_that_have_the_methods_stay_byte_identical(tree_copy, run_module, rendered_block, version):
    tree = tree_copy(version)
    before = (tree / KIMI).read_bytes()
    stat_before = os.stat(tree / KIMI)
    rc, result = run_module(**patch_args(tree, rendered_block))
    assert rc == 0, result
    assert result["changed"] is False
    assert set(result["present"]) == {"set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"}
    assert (tree / KIMI).read_bytes() == before
    assert os.stat(tree / KIMI).st_mtime_ns == stat_before.st_mtime_ns
    assert interface_rc(tree) == 0


def test_only_missing_methods_are_added(tree_copy, run_module, rendered_block):
    """A release that has one of the methods already keeps its own version of it."""
    tree = tree_copy(UNPATCHED)
    source = (tree / KIMI).read_text()
    own = "    def get_embed_and_head(self):\n        return self.language_model.get_embed_and_head()\n\n"
    (tree / KIMI).write_text(source.replace("    def load_weights(", own + "    def load_weights(", 1))
    rc, result = run_module(**patch_args(tree, rendered_block))
    assert rc == 0
    assert result["added"] == ["set_eagle3_layers_to_capture", "set_embed_and_head"]
    assert result["present"] == ["get_embed_and_head"]
    assert (tree / KIMI).read_text().count("def get_embed_and_head(") == 1


def test_changed_template_replaces_the_managed_block(tree_copy, run_module, rendered_block, patch_module):
    tree = tree_copy(UNPATCHED)
    original = (tree / KIMI).read_text()
    run_module(**patch_args(tree, rendered_block))
    smaller = rendered_block.split("\n\n    def get_embed_and_head")[0] + "\n"
    rc, result = run_module(**patch_args(tree, smaller))
    assert rc == 0 and result["changed"] is True
    assert result["added"] == []
    assert result["managed"] == ["set_eagle3_layers_to_capture"]
    text = (tree / KIMI).read_text()
    assert text.count("# BEGIN sglang_eagle3_patch") == 1
    assert "def get_embed_and_head(" not in text
    # Taking the block out gives back the release's file exactly.
    assert patch_module.strip_block(text, "sglang_eagle3_patch") == original


def test_strip_block_restores_the_original(tree_copy, patch_module, rendered_block):
    tree = tree_copy(UNPATCHED)
    original = (tree / KIMI).read_text()
    desired, added, _ = patch_module.compute(original, CLASS, "language_model", rendered_block, "sglang_eagle3_patch")
    assert added
    assert patch_module.strip_block(desired, "sglang_eagle3_patch") == original


def test_check_mode_reports_the_change_and_writes_nothing(tree_copy, run_module, rendered_block):
    tree = tree_copy(UNPATCHED)
    before = (tree / KIMI).read_bytes()
    rc, result = run_module(check_mode=True, diff=True, **patch_args(tree, rendered_block))
    assert rc == 0
    assert result["changed"] is True
    assert "def set_eagle3_layers_to_capture(self, layer_ids=None):" in result["diff"]["after"]
    assert result["diff"]["before"] == before.decode()
    assert (tree / KIMI).read_bytes() == before
    assert not [n for n in os.listdir(tree / "srt/models") if n.endswith(".tmp")]


def test_mode_and_owner_are_kept_and_no_temp_file_is_left(tree_copy, run_module, rendered_block):
    tree = tree_copy(UNPATCHED)
    target = tree / KIMI
    target.chmod(0o640)
    if os.geteuid() == 0:
        os.chown(target, 65534, 65534)
    before = os.stat(target)
    rc, _ = run_module(**patch_args(tree, rendered_block))
    assert rc == 0
    after = os.stat(target)
    assert after.st_ino != before.st_ino  # replaced by rename, not rewritten in place
    assert (after.st_mode, after.st_uid, after.st_gid) == (before.st_mode, before.st_uid, before.st_gid)
    assert not [n for n in os.listdir(target.parent) if n.endswith(".tmp")]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("class KimiK25ForConditionalGeneration:\n    def __init__(self):\n        self.language_model = 1\n",
         "no 'EntryClass = ...' line"),
        ("class Other:\n    pass\n\n\nEntryClass = [Other]\n", "class KimiK25ForConditionalGeneration is not defined"),
        ("class KimiK25ForConditionalGeneration(:\n    pass\n\nEntryClass = []\n", "does not parse"),
        (
            "class KimiK25ForConditionalGeneration:\n    def __init__(self):\n        self.text_model = 1\n\n\nEntryClass = []\n",
            "never sets self.language_model",
        ),
    ],
    ids=["no-entry-class", "class-not-found", "syntax-error", "no-inner-attribute"],
)
def test_malformed_targets_fail_cleanly_and_stay_untouched(tree_copy, run_module, rendered_block, content, message):
    tree = tree_copy(UNPATCHED)
    (tree / KIMI).write_text(content)
    rc, result = run_module(**patch_args(tree, rendered_block))
    assert rc != 0
    assert result["failed"] is True
    assert message in result["msg"]
    assert (tree / KIMI).read_text() == content


def test_a_block_that_is_not_only_methods_is_refused(tree_copy, run_module):
    tree = tree_copy(UNPATCHED)
    before = (tree / KIMI).read_bytes()
    rc, result = run_module(**patch_args(tree, "import os\n\ndef x(self):\n    pass\n"))
    assert rc != 0
    assert "may only hold method definitions" in result["msg"]
    assert (tree / KIMI).read_bytes() == before


def test_damaged_markers_are_refused(tree_copy, run_module, rendered_block):
    tree = tree_copy(UNPATCHED)
    run_module(**patch_args(tree, rendered_block))
    damaged = "\n".join(line for line in (tree / KIMI).read_text().splitlines()
                        if "# END sglang_eagle3_patch" not in line) + "\n"
    (tree / KIMI).write_text(damaged)
    rc, result = run_module(**patch_args(tree, rendered_block))
    assert rc != 0
    assert "markers are damaged" in result["msg"]
    assert (tree / KIMI).read_text() == damaged


def test_a_written_file_that_does_not_compile_is_put_back(tmp_path, patch_module):
    target = tmp_path / "model.py"
    original = b"x = 1\n"
    target.write_bytes(original)
    target.chmod(0o600)
    with pytest.raises(patch_module.PatchError, match="original was restored"):
        patch_module.replace_file(str(target), b"def broken(:\n", original)
    assert target.read_bytes() == original
    assert target.stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["model.py"]


def test_missing_sglang_directory_fails(tmp_path, run_module, rendered_block):
    rc, result = run_module(**patch_args(tmp_path / "nowhere", rendered_block))
    assert rc != 0
    assert "not an sglang package directory" in result["msg"]
