"""The role's pure functions (filter_plugins/sglang_model.py): pattern selection as the real client does it,
plans, the fan-out schedule (about log2(N) rounds, only verified sources), host state and messages."""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess

import pytest
from model_kit import FILTERS as F

PATHS = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
         "model.safetensors.index.json", "tokenizer_config.json", "tiktoken.model", "modeling_kimi.py",
         "docs/guide.md", "docs/img/a.png", "figures/arch.png", "README.md", "sub/dir/config.json", ".gitattributes"]
PATTERNS = [None, [], ["*.json"], ["*.safetensors", "*.json"], ["docs/"], ["docs/*"], ["*.md"], ["sub/*"],
            ["model-0000[12]*"], ["*"], ["config.json"], ["*/config.json"]]


def test_selection_is_the_real_clients(hub_python):
    """sglang_model_select == huggingface_hub.utils.filter_repo_objects for every combination here."""
    cases = list(itertools.product(PATTERNS, PATTERNS))
    script = ("import json, sys\nfrom huggingface_hub.utils import filter_repo_objects\n"
              "paths, cases = json.loads(sys.stdin.read())\n"
              "print(json.dumps([list(filter_repo_objects(paths, allow_patterns=a, ignore_patterns=i)) for a, i in cases]))")
    out = subprocess.run([str(hub_python), "-c", script], input=json.dumps([PATHS, cases]), capture_output=True,
                         text=True, check=True)
    client = json.loads(out.stdout)
    for (allow, ignore), expected in zip(cases, client, strict=True):
        assert F.sglang_model_select(PATHS, allow, ignore) == expected, (allow, ignore)


def info(*siblings, sha="a" * 40):
    return {"id": "o/m", "sha": sha, "siblings": list(siblings)}


def test_plan_takes_sizes_and_hashes_from_model_info():
    plan = F.sglang_model_plan(info(
        {"rfilename": "config.json", "size": 10, "blobId": "b" * 40},
        {"rfilename": "model.safetensors", "size": 99, "blobId": "c" * 40,
         "lfs": {"sha256": "d" * 64, "size": 99, "pointerSize": 134}},
        {"rfilename": ".git/config", "size": 1, "blobId": "e" * 40},
        {"rfilename": "README.md", "size": 5, "blobId": "f" * 40}), ["*.json", "*.safetensors"], ["*.md"])
    assert plan["revision"] == "a" * 40 and plan["total_bytes"] == 109
    assert plan["files"] == [{"path": "config.json", "size": 10, "blob_id": "b" * 40, "sha256": None},
                             {"path": "model.safetensors", "size": 99, "blob_id": "c" * 40, "sha256": "d" * 64}]
    assert ".git/config" not in plan["repo_files"]


@pytest.mark.parametrize("bad", ["../x.json", "/etc/passwd", "a/../../b", "a//b"])
def test_plan_refuses_unsafe_paths(bad):
    with pytest.raises(F.AnsibleFilterError, match="refusing the repository path"):
        F.sglang_model_plan(info({"rfilename": bad, "size": 1, "blobId": "b" * 40}), None, None)


def test_plan_needs_a_commit_and_sizes():
    with pytest.raises(F.AnsibleFilterError, match="no commit sha"):
        F.sglang_model_plan({"id": "o/m"}, None, None)
    with pytest.raises(F.AnsibleFilterError, match="no size"):
        F.sglang_model_plan(info({"rfilename": "config.json"}), None, None)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9, 16, 31, 32, 33, 64, 100])
def test_fanout_takes_ceil_log2_rounds(n):
    hosts = [f"gpu{i}" for i in range(1, n + 1)]
    rounds = F.sglang_model_fanout_schedule(hosts[:1], hosts[1:])
    assert len(rounds) == (math.ceil(math.log2(n)) if n > 1 else 0)
    assert len(rounds) == F.sglang_model_rounds_needed(n)
    have = {hosts[0]}
    for pairs in rounds:
        assert len({p["src"] for p in pairs}) == len(pairs)  # a source serves one host per round
        assert {p["src"] for p in pairs} <= have  # only hosts that hold a verified copy serve
        have |= {p["dst"] for p in pairs}
    assert have == set(hosts)


def test_fanout_with_several_holders_needs_fewer_rounds():
    hosts = [f"gpu{i}" for i in range(1, 33)]
    assert len(F.sglang_model_fanout_schedule(hosts[:4], hosts[4:])) == 3  # 4 -> 8 -> 16 -> 32
    assert F.sglang_model_rounds_needed(32, 4) == 3


def test_fanout_never_pairs_a_host_without_a_verified_copy():
    """Round by round as the role runs it: holders are recomputed; a failed copy never becomes a source."""
    rnd = random.Random(5)
    hosts = [f"gpu{i}" for i in range(1, 21)]
    have = {"gpu1"}
    failed = set()
    rounds = 0
    while set(hosts) - have - failed:
        holders = [h for h in hosts if h in have]
        needers = [h for h in hosts if h not in have and h not in failed]
        pairs = F.sglang_model_fanout_pairs(holders, needers)
        assert pairs and all(p["src"] in have for p in pairs)
        for p in pairs:
            if rnd.random() < 0.2:
                failed.add(p["dst"])  # the play drops it; it is never a source
            else:
                have.add(p["dst"])
        rounds += 1
    assert not (have & failed) and rounds <= 8


def test_no_source_no_schedule():
    with pytest.raises(F.AnsibleFilterError, match="no host holds a verified copy"):
        F.sglang_model_fanout_schedule([], ["gpu1"])


def hv(**have):
    return {h: {"__sglang_model_have": {"target": v}} for h, v in have.items()}


def test_direct_fetchers():
    hub = {"name": "target", "source": "hub"}
    assert F.sglang_model_direct(["a", "b", "c"], hv(a=False, b=False, c=False), hub) == ["a"]
    assert F.sglang_model_direct(["a", "b", "c"], hv(a=False, b=False, c=False), hub, seed="c") == ["c"]
    assert F.sglang_model_direct(["a", "b", "c"], hv(a=True, b=False, c=False), hub) == []  # copies only
    assert F.sglang_model_direct(["a", "b"], hv(a=True, b=False), hub, fanout=False) == ["b"]
    assert F.sglang_model_direct(["a", "b"], hv(a=False, b=False), {"name": "target", "source": "local"}) == ["a", "b"]
    assert F.sglang_model_direct(["a", "b"], hv(a=True, b=True), hub) == []
    # Named sources: a holder that is not one does not count, so the seed reads the Hub.
    assert F.sglang_model_direct(["a", "b", "c"], hv(a=True, b=False, c=False), hub, sources=["b"]) == ["b"]


def test_normalize_fills_defaults_and_refuses_bad_entries():
    out = F.sglang_model_normalize([{"name": "target", "repo_id": "o/m", "revision": "c" * 40}])
    assert out[0]["source"] == "hub" and out[0]["pinned"] is True and out[0]["index"] == 0
    for bad, msg in [([], "is empty"), ([{"name": "t", "repo_id": "o/m"}], "revision is required"),
                     ([{"name": "a/b", "repo_id": "o/m", "revision": "main"}], "plain directory name"),
                     ([{"name": "current", "repo_id": "o/m", "revision": "main"}], "plain directory name"),
                     ([{"name": "t", "repo_id": "om", "revision": "main"}], "<owner>/<name>"),
                     ([{"name": "t", "repo_id": "o/m", "revision": "../x"}], "not a commit, branch or tag"),
                     ([{"name": "t", "repo_id": "o/m", "revision": "main", "allow_patterns": "*.json"}], "list of patterns")]:
        with pytest.raises(F.AnsibleFilterError, match=msg):
            F.sglang_model_normalize(bad)


MODEL = {"name": "target", "repo_id": "o/m", "revision": "main", "index": 0, "pinned": False}


@pytest.mark.parametrize(("answer", "token", "kind", "expected"), [
    ({"status": 200}, False, "info", ""),
    ({"status": 302}, False, "file", ""),
    ({"status": -1, "msg": "Connection refused"}, False, "info", "is unreachable from gpu1: Connection refused"),
    ({"status": 404, "code": "RepoNotFound"}, False, "info", ".repo_id 'o/m' was not found on"),
    ({"status": 401, "code": "RepoNotFound"}, True, "info", "or it is private and sglang_model_hf_token has no access"),
    ({"status": 404, "code": "RevisionNotFound"}, False, "info", ".revision 'main' does not exist in o/m"),
    ({"status": 401, "code": "GatedRepo"}, False, "file", "sglang_model_hf_token is empty (401 GatedRepo)"),
    ({"status": 401, "code": "GatedRepo"}, True, "file", "sglang_model_hf_token is not accepted (401 GatedRepo)"),
    ({"status": 403, "code": "GatedRepo"}, True, "file", "has no access to it (403 GatedRepo)"),
    ({"status": 401, "message": "Invalid credentials in Authorization header"}, True, "info", "was rejected by"),
    ({"status": 500, "message": "boom"}, False, "info", "answered 500 for o/m"),
])
def test_hub_problem_messages(answer, token, kind, expected):
    message = F.sglang_model_hub_problem({"code": "", "message": "", **answer}, MODEL, "https://hub", token, "gpu1", kind)
    assert (message == "") if expected == "" else (expected in message), message


def test_answer_drops_the_request_and_keeps_the_hubs_words():
    registered = {"item": {"name": "target", "index": 0}, "status": 401, "x_error_code": "GatedRepo",
                  "x_error_message": "restricted", "invocation": {"module_args": {"headers": {"Authorization": "Bearer hf_x"}}}}
    answer = F.sglang_model_answer(registered)
    assert "hf_x" not in json.dumps(answer)
    assert answer == {"name": "target", "index": 0, "status": 401, "code": "GatedRepo", "message": "restricted",
                      "msg": "", "json": None, "commit": "", "location": ""}


def test_host_state_counts_what_is_already_staged():
    model = {"name": "target", "repo_id": "o/m", "source": "hub", "allow_patterns": ["*"], "ignore_patterns": None,
             "index": 0, "local_dir": ""}
    plan = {"revision": "a" * 40, "total_bytes": 1000, "files": []}
    pre = {"models": {"target": {"revisions": {}, "staging": {"a" * 40: 400}}}}
    assert F.sglang_model_host_state(pre, [model], {"target": plan})["target"]["need_bytes"] == 600
    pre["models"]["target"]["revisions"]["a" * 40] = {"complete": True, "repo_id": "o/m", "allow_patterns": ["*"],
                                                     "ignore_patterns": None, "source": {"kind": "hub"}}
    state = F.sglang_model_host_state(pre, [model], {"target": plan})["target"]
    assert state["have"] is True and state["need_bytes"] == 0
    # Another pattern set means another selection: not the same copy.
    state = F.sglang_model_host_state(pre, [dict(model, allow_patterns=["*.json"])], {"target": plan})["target"]
    assert state["have"] is False


def test_one_progress_line_per_poll():
    """The tool words the lines the role prints (progress per poll, the result at the end)."""
    from repo import load, role_file
    tool = load(role_file("sglang_model", "files", "sglang_model_staging", "progress.py"))
    line = tool.progress_line({"bytes_done": 212_400_000_000, "bytes_total": 547_000_000_000, "rate": 1.04e9,
                               "eta": 321, "files_done": 24, "files_total": 71, "phase": "downloading"})
    assert line == "212.4 GB of 547.0 GB (38.8%), 1.0 GB/s, ETA 5m21s, files 24/71 (downloading)"
    assert "rate ?, ETA ?" in tool.progress_line({"bytes_done": 0, "bytes_total": 10, "rate": None, "eta": None})
    summary = tool.summary_line({"status": "staged", "fetched_files": 2, "fetched_bytes": 3e9,
                                 "rate": 1e9, "seconds": 3.0, "repaired": ["a.safetensors"]})
    assert summary == "staged: 2 files, 3.0 GB fetched at 1.0 GB/s (corrupted files replaced: a.safetensors) in 3.0 s"
