"""Verifier of molecule/sglang_eagle3_patch: the patch in SGLang source trees, read back with git.

prepare cloned the local sglang repository (real PyPI sdists, tests/harness/sources.py) at
v0.5.9 and v0.5.10 into /usr/src, owned by the user sglang-dev, and recorded each kimi_k25.py's
stat in /usr/src/sglang-eagle3-before.json; converge ran the role (as root) on both trees.
git runs as the trees' owner (root would meet git's "dubious ownership" refusal).
"""

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

NAME = "molecule-sglang-eagle3-patch"
testinfra_hosts = [f"podman://{NAME}"]
ROOT = Path(__file__).resolve().parents[3]
TREE = {"0.5.9": "/usr/src/sglang-0.5.9", "0.5.10": "/usr/src/sglang-0.5.10"}
MODEL = "python/sglang/srt/models/kimi_k25.py"
CHECKER = "/usr/local/libexec/sglang-ansible"  # holds the package sglang_interface_check/
BEGIN, END = "# BEGIN sglang_eagle3_patch", "# END sglang_eagle3_patch"
METHODS = ["set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"]
REQUIRED = {"set_eagle3_layers_to_capture", "get_embed_and_head"}  # of a target, for EAGLE3


def git(host, tree, *args):
    return host.check_output(shlex.join(["runuser", "-u", "sglang-dev", "--", "git", "-C", tree, *args]))


def sha256(host, path):
    return host.check_output("sha256sum %s", path).split()[0]


def before(host):
    return json.loads(host.file("/usr/src/sglang-eagle3-before.json").content_string)


def interface_check(host, package_dir):
    out = host.run(f"cd {CHECKER} && python3 -B -m sglang_interface_check {package_dir} --json")
    return out.rc, json.loads(out.stdout)


@pytest.fixture(scope="module")
def pristine(host):
    """v0.5.9's committed tree (python/ only), outside any git repository, removed afterwards."""
    tmp = host.check_output("mktemp -d /tmp/sglang-pristine.XXXXXX")
    host.run_expect([0], f"runuser -u sglang-dev -- git -C {TREE['0.5.9']} archive HEAD python | tar -x -C {tmp}")
    yield tmp
    host.run_expect([0], f"rm -rf {tmp}")


def test_trees_are_the_release_tags_and_the_record_is_their_pristine_file(host):
    for version, tree in TREE.items():
        assert git(host, tree, "describe", "--tags", "--exact-match", "HEAD") == f"v{version}"
        blob = host.check_output(f"runuser -u sglang-dev -- git -C {tree} show HEAD:{MODEL} | sha256sum").split()[0]
        assert before(host)[version]["checksum"] == blob
        assert host.file(tree).user == "sglang-dev"


def test_0_5_9_has_the_marked_block_once_inside_the_class_before_entryclass(host):
    text = host.file(f"{TREE['0.5.9']}/{MODEL}").content_string
    lines = text.splitlines()
    assert sum(line.strip().startswith(BEGIN) for line in lines) == 1
    assert sum(line.strip() == END for line in lines) == 1
    begin = next(i for i, line in enumerate(lines) if line.strip().startswith(BEGIN))
    end = next(i for i, line in enumerate(lines) if line.strip() == END)
    entry = next(i for i, line in enumerate(lines) if line.startswith("EntryClass"))
    cls = next(i for i, line in enumerate(lines) if line.startswith("class KimiK25ForConditionalGeneration("))
    assert cls < begin < end < entry
    block = "\n".join(lines[begin:end])
    for method in METHODS:
        assert text.count(f"    def {method}(") == 1, method
        assert f"    def {method}(" in block, method


def test_0_5_9_patched_file_compiles(host):
    # The bytecode goes to /tmp: a __pycache__ in the tree would show up in git status.
    host.run_expect([0], f"PYTHONPYCACHEPREFIX=/tmp/pycache python3 -m py_compile {TREE['0.5.9']}/{MODEL}")


def test_0_5_9_passes_the_interface_check(host):
    rc, report = interface_check(host, f"{TREE['0.5.9']}/python/sglang")
    assert rc == 0 and report["ok"], report
    assert REQUIRED <= set(report["required"])
    (cls,) = report["classes"]
    assert cls["missing"] == {}
    for method in REQUIRED:
        assert cls["provided"][method].startswith("KimiK25ForConditionalGeneration"), cls["provided"]


def test_0_5_9_only_kimi_k25_is_modified_by_additions_alone_owner_and_mode_kept(host):
    tree = TREE["0.5.9"]
    assert git(host, tree, "status", "--porcelain", "--untracked-files=all", "--ignored") == f" M {MODEL}"
    added, deleted, path = git(host, tree, "diff", "--numstat").split("\t")
    assert path == MODEL and int(added) > 0 and deleted == "0"
    was, now = before(host)["0.5.9"], host.file(f"{tree}/{MODEL}")
    assert sha256(host, f"{tree}/{MODEL}") != was["checksum"]
    assert (now.user, now.group, f"{now.mode:04o}") == (was["pw_name"], was["gr_name"], was["mode"])
    assert host.check_output(f"find {tree}/python/sglang/srt/models -name '.kimi_k25.py.*'") == ""  # no temp file left


def test_0_5_10_is_byte_identical_to_its_checkout_and_passes_on_its_own_methods(host):
    tree = TREE["0.5.10"]
    assert git(host, tree, "status", "--porcelain", "--untracked-files=all", "--ignored") == ""
    assert sha256(host, f"{tree}/{MODEL}") == before(host)["0.5.10"]["checksum"]
    assert BEGIN not in host.file(f"{tree}/{MODEL}").content_string
    rc, report = interface_check(host, f"{tree}/python/sglang")
    assert rc == 0 and report["classes"][0]["missing"] == {}, report


def test_the_check_fails_on_the_unpatched_0_5_9_naming_both_methods(host, pristine):
    rc, report = interface_check(host, f"{pristine}/python/sglang")
    assert rc == 1 and not report["ok"]
    (cls,) = report["classes"]
    assert set(cls["missing"]) == REQUIRED, cls["missing"]
    for info in cls["missing"].values():
        assert info["call_sites"], info


def test_check_mode_on_an_unpatched_tree_shows_the_patch_and_writes_nothing(host, pristine):
    model = f"{pristine}/{MODEL}"
    was = sha256(host, model)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
                           str(ROOT / "molecule" / "sglang_eagle3_patch" / "converge.yml"), "--check", "--diff",
                           "-e", json.dumps({"eagle3_test_trees": [pristine]})],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    print(f"check mode on a pristine 0.5.9 tree: {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, out[-4000:]
    assert f"+    {BEGIN}" in out and "+    def set_eagle3_layers_to_capture(self, layer_ids=None):" in out, out[-4000:]
    assert "changed=1" in out and "failed=0" in out, out[-4000:]
    assert sha256(host, model) == was
