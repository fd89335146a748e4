"""The staging tool (roles/sglang_model/files/sglang_model_stage.py) with the real huggingface_hub client
(the role's pinned version) against the Hub TEST DOUBLE: staging, reruns, kills, corruption, the Hub
going away, full verification, free space, local sources, checks and pruning.

Bytes are counted by the double (what it served per file), so "fetched again" means on the wire.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from model_kit import FIGURES, FILTERS, HUB_VERSION, plan_for, size_of, tool_cli

import synthetic_model
import waiting
from http_proxy import ForwardProxy


def revision(hub_root, repo="test-org/tiny", rev="main"):
    return synthetic_model.load_revision(hub_root, repo, rev)


def wait_for(predicate):
    return waiting.wait_for(predicate, timeout=30, step=0.05)


def read_progress(spec) -> dict:
    try:
        return json.loads(Path(spec["progress"]).read_text())
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- staging from scratch


def test_stages_a_revision_read_only_with_a_manifest(stager, hub_root, double):
    rev = revision(hub_root)
    spec = stager.spec(rev)
    result = stager.ok(spec)
    assert result["status"] == "staged" and result["changed"] is True
    final = Path(result["path"])
    assert final == stager.root / "model" / rev.sha
    planned = {f["path"] for f in spec["plan"]["files"]}
    on_disk = {p.relative_to(final).as_posix() for p in final.rglob("*") if p.is_file()}
    assert on_disk == planned  # nothing else: no README, docs/, .gitattributes, no client metadata
    assert "README.md" not in planned and "docs/deploy_guidance.md" not in planned
    assert {"config.json", "tiktoken.model", "modeling_kimi.py", "chat_template.jinja",
            "model.safetensors.index.json"} <= planned
    assert (final.stat().st_mode & 0o777) == 0o555
    assert all((final / p).stat().st_mode & 0o777 == 0o444 for p in planned)
    manifest = json.loads(Path(result["manifest"]).read_text())
    assert manifest["revision"] == rev.sha and manifest["repo_id"] == "test-org/tiny"
    assert manifest["source"] == {"kind": "hub", "endpoint": double.url}
    assert manifest["client"] == f"huggingface_hub {HUB_VERSION}" and manifest["staged_at"]
    by_path = {f["path"]: f for f in manifest["files"]}
    for path in planned:
        meta = rev.files[path]
        assert by_path[path]["size"] == meta["size"]
        if meta["lfs"]:
            assert by_path[path]["algo"] == "sha256"
            assert by_path[path]["hash"] == meta["lfs"]["sha256"]
        else:
            assert by_path[path]["algo"] == "git-sha1" and by_path[path]["hash"] == meta["blob_id"]
    # Each planned file crossed the wire exactly once.
    served = double.stats()["files"]
    assert {k.split("/", 2)[2]: v for k, v in served.items()} == {p: rev.files[p]["size"] for p in planned}
    assert not (stager.root / "model" / ".staging" / rev.sha).exists()
    progress = read_progress(spec)
    assert progress["phase"] == "done" and progress["bytes_done"] == progress["bytes_total"] == size_of(spec["plan"])
    assert progress["files_done"] == progress["files_total"] == len(planned)


def test_rerun_changes_nothing_and_fetches_nothing(stager, hub_root, double):
    rev = revision(hub_root)
    spec = stager.spec(rev)
    stager.ok(spec)
    double.reset()
    rc, result, err, elapsed = stager.run(spec)
    assert rc == 0, err
    assert result["status"] == "verified" and result["changed"] is False and result["rehashed_files"] == 0
    assert double.stats()["total_bytes"] == 0 and double.stats()["requests"] == {}
    FIGURES.append(f"rerun of the tool on a staged revision (size+mtime, no request to the Hub): {elapsed:.2f} s")


def test_a_branch_is_resolved_once_and_the_manifest_says_which(stager, hub_root, hub_python, double):
    out = tool_cli("plan", "--endpoint", double.url, "--repo-id", "test-org/evolving", "--revision", "next",
                   "--hf-home", str(stager.tmp / "hf"), "--allow", "*.json", python=hub_python)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["revision"] == revision(hub_root, "test-org/evolving", "next").sha
    assert plan["revision"] != revision(hub_root, "test-org/evolving", "main").sha
    assert plan["requested_revision"] == "next" and {f["path"] for f in plan["files"]} == {
        "config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer_config.json"}


def test_the_roles_plan_equals_the_real_clients(stager, hub_root, hub_python, double):
    """The filter plugin plans from model info exactly as the tool's plan (the real client) does."""
    args = ["plan", "--endpoint", double.url, "--repo-id", "test-org/tiny", "--hf-home", str(stager.tmp / "hf")]
    for p in ["*.json", "*.py", "*.safetensors", "*.model", "*.tiktoken", "*.jinja", "*.txt"]:
        args += ["--allow", p]
    out = tool_cli(*args, "--ignore", "docs/*", "--ignore", "*.md", python=hub_python)
    assert out.returncode == 0, out.stderr
    client_plan = json.loads(out.stdout)
    import urllib.request
    info = json.loads(urllib.request.urlopen(f"{double.url}/api/models/test-org/tiny/revision/main?blobs=true").read())
    role_plan = FILTERS.sglang_model_plan(info, ["*.json", "*.py", "*.safetensors", "*.model", "*.tiktoken",
                                                 "*.jinja", "*.txt"], ["docs/*", "*.md"])
    assert role_plan["revision"] == client_plan["revision"]
    assert sorted(role_plan["files"], key=lambda f: f["path"]) == sorted(client_plan["files"], key=lambda f: f["path"])


# --------------------------------------------------------------------------- kills and resume


def test_a_kill_mid_file_resumes_without_fetching_completed_files(stager, hub_root, double):
    """The client writes 10 MB at a time into <file>.<etag>.incomplete and resumes it with Range."""
    rev = revision(hub_root, "test-org/small")
    spec = stager.spec(rev)
    spec["source"]["max_workers"] = 1  # one file at a time: the kill lands inside one file
    largest = max(f["size"] for f in spec["plan"]["files"])
    double.fault(rate=16 << 20)  # 16 MB/s per body
    proc = stager.popen(spec)
    staging = stager.root / "model" / ".staging" / rev.sha

    def partial_under_way():
        if read_progress(spec).get("files_done", 0) < 1:
            return None
        found = list((staging / ".cache").rglob("*.incomplete")) if staging.exists() else []
        return found if found and found[0].stat().st_size >= 10 << 20 else None
    # Kill once a shard is complete and the next one has 10 MB on disk.
    wait_for(partial_under_way)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = double.stats()["files"]
    final = stager.root / "model" / rev.sha
    assert not final.exists() and not (stager.root / "model" / f"{rev.sha}.manifest.json").exists()
    assert list((staging / ".cache").rglob("*.incomplete")), "the file under way stays as the client's .incomplete"
    double.fault(rate=0)
    double.reset()
    result = stager.ok(spec)
    again = double.stats()["files"]
    sizes = {k: rev.files[k.split("/", 2)[2]]["size"] for k in {*before, *again}}
    completed = [k for k, v in before.items() if v == sizes[k]]
    assert completed and all(k not in again for k in completed), (completed, again)
    # Bytes served twice: what the killed run received that the rerun asked for again.
    twice = sum(max(0, before.get(k, 0) + again.get(k, 0) - sizes[k]) for k in sizes)
    assert twice < largest, f"{twice} bytes fetched twice, more than one file ({largest})"
    assert result["status"] == "staged"
    resumed = [k for k in again if k in before]
    FIGURES.append(f"kill mid-file then rerun: {twice} bytes fetched twice (largest file {largest} bytes); "
                   f"{len(completed)} completed files not requested again, {len(resumed)} partial file resumed "
                   f"with Range, {sum(again.values())} bytes fetched by the rerun in all")


def test_a_file_killed_after_download_but_before_hashing_is_hashed_not_fetched(stager, hub_root, double, tool_module):
    rev = revision(hub_root)
    spec = stager.spec(rev)
    stager.ok(spec)
    model = stager.root / "model"
    # Put the revision back into staging as a killed run leaves it: files there, journal gone.
    os.chmod(model / rev.sha, 0o755)
    os.rename(model / rev.sha, model / ".staging" / rev.sha)
    (model / f"{rev.sha}.manifest.json").unlink()
    double.reset()
    result = stager.ok(spec)
    assert result["status"] == "staged" and double.stats()["total_bytes"] == 0


# --------------------------------------------------------------------------- corruption


def corrupt(path: Path, keep_mtime=False):
    st = path.stat()
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.chmod(path, 0o444)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_corrupted_shard_is_found_and_only_it_is_fetched_again(stager, hub_root, double):
    rev = revision(hub_root)
    spec = stager.spec(rev)
    final = Path(stager.ok(spec)["path"])
    shard = "model-00002-of-00004.safetensors"
    corrupt(final / shard)
    double.reset()
    result = stager.ok(spec)
    assert result["repaired"] == [shard] and result["status"] == "staged"
    assert double.stats()["files"] == {f"test-org/tiny/{shard}": rev.files[shard]["size"]}
    assert stager.ok(spec)["status"] == "verified"


def test_a_truncated_shard_is_found_and_fetched_again(stager, hub_root, double):
    rev = revision(hub_root)
    spec = stager.spec(rev)
    final = Path(stager.ok(spec)["path"])
    shard = "model-00003-of-00004.safetensors"
    os.chmod(final / shard, 0o644)
    os.truncate(final / shard, 1000)
    double.reset()
    result = stager.ok(spec)
    assert result["repaired"] == [shard]
    assert double.stats()["files"] == {f"test-org/tiny/{shard}": rev.files[shard]["size"]}


def test_bit_rot_with_the_same_mtime_needs_full_verification(stager, hub_root, double):
    """Quick mode trusts size and mtime; full mode rehashes every byte (in parallel) and finds it."""
    rev = revision(hub_root)
    spec = stager.spec(rev)
    final = Path(stager.ok(spec)["path"])
    shard = "model-00001-of-00004.safetensors"
    corrupt(final / shard, keep_mtime=True)
    assert stager.ok(spec)["status"] == "verified"  # quick: not seen (by design: no 547 GB rehash)
    double.reset()
    full = dict(spec, verify="full", hash_workers=4)
    result = stager.ok(full)
    assert result["repaired"] == [shard] and result["rehashed_files"] == len(spec["plan"]["files"])
    assert double.stats()["files"] == {f"test-org/tiny/{shard}": rev.files[shard]["size"]}
    progress = read_progress(full)
    assert progress["phase"] == "done"


def test_full_verification_alone_reopens_a_corrupted_copy_and_fetches_nothing(stager, hub_root, double):
    rev = revision(hub_root)
    spec = stager.spec(rev)
    final = Path(stager.ok(spec)["path"])
    corrupt(final / "config.json", keep_mtime=True)
    double.reset()
    result = stager.ok(dict(spec, verify="full", fetch=False))
    assert result["status"] == "reopened" and result["repaired"] == ["config.json"]
    assert double.stats()["total_bytes"] == 0
    assert not final.exists() and not Path(result["manifest"]).exists()  # never complete while broken
    double.reset()
    assert stager.ok(spec)["status"] == "staged"
    assert double.stats()["files"] == {"test-org/tiny/config.json": rev.files["config.json"]["size"]}


# --------------------------------------------------------------------------- the byte path (the tool's Mover)


@pytest.mark.parametrize("ranges", [True, False], ids=["range", "server-ignores-range"])
def test_a_body_cut_mid_file_is_resumed_in_the_same_run(stager, hub_root, double, ranges):
    """A stream that breaks goes on from its last byte (Range), or from byte 0 where the server ignores Range."""
    rev = revision(hub_root, "test-org/small")
    spec = stager.spec(rev)
    shard = "model-00002-of-00003.safetensors"
    size, cut = rev.files[shard]["size"], 5 << 20
    double.fault(mode="cut", after_bytes=cut, glob=shard, count=1, ignore_range=not ranges)
    result = stager.ok(spec)
    assert result["status"] == "staged" and result["fetched_files"] == len(spec["plan"]["files"])
    served = double.stats()["files"][f"test-org/small/{shard}"]
    assert served == (size if ranges else cut + size), served
    assert double.stats()["requests"]["GET cdn"] == 1 + sum(1 for f in spec["plan"]["files"] if f["sha256"])


def test_the_token_goes_to_the_hub_and_never_to_a_cdn_on_another_host(stager, hub_root, double, tmp_path):
    """The Hub redirects LFS files to a signed CDN URL on another host: fetched without the token."""
    from model_kit import TOKEN
    double.server.cdn_base = f"http://localhost:{double.port}"  # the same double under another host name
    rev = revision(hub_root, "test-org/gated")
    (tmp_path / "token").write_text(TOKEN)
    spec = stager.spec(rev)
    spec["source"]["token_file"] = str(tmp_path / "token")
    assert stager.ok(spec)["status"] == "staged"
    requests = double.stats()["requests"]
    assert requests["GET cdn"] == sum(1 for f in spec["plan"]["files"] if f["sha256"]), requests
    assert "GET cdn with Authorization" not in requests, requests


def test_the_mover_follows_a_redirect_to_another_host_without_the_token(hub_root, double, tool_module, tmp_path):
    """Xet-backed files are fetched from the resolve URL, redirects followed (as the client does)."""
    from model_kit import TOKEN
    double.server.cdn_base = f"http://localhost:{double.port}"
    rev = revision(hub_root, "test-org/gated")
    entry = next(f for f in plan_for(rev)["files"] if f["sha256"])
    mover = tool_module.Mover({"download_timeout": 10}, 1 << 20)
    url = f"{double.url}/{rev.repo_id}/resolve/{rev.sha}/{entry['path']}"
    digest = mover.fetch(url, {"authorization": f"Bearer {TOKEN}"}, tmp_path / "part.incomplete", tmp_path / "done",
                         entry["size"], entry["path"])
    assert digest == entry["sha256"] and (tmp_path / "done").stat().st_size == entry["size"]
    assert not (tmp_path / "part.incomplete").exists()
    assert double.stats()["requests"] == {"GET resolve": 1, "GET cdn": 1}


def test_every_request_goes_through_the_sites_proxy_with_its_credentials(stager, hub_root, double):
    proxy = ForwardProxy(user="site", password="p@ss word").start()
    try:
        rev = revision(hub_root)
        spec = stager.spec(rev)
        spec["source"]["proxy_env"] = {"http_proxy": proxy.url, "HTTP_PROXY": proxy.url, "no_proxy": "",
                                       "NO_PROXY": ""}
        result = stager.ok(spec)
        seen = proxy.stats()
    finally:
        proxy.stop()
    assert result["status"] == "staged"
    served = double.stats()
    assert seen["refused"] == 0 and seen["bytes"] == served["total_bytes"] == size_of(spec["plan"])
    # Both HTTP stacks (the client's metadata requests, the Mover's downloads) went through it.
    assert sum(seen["forwarded"].values()) == sum(served["requests"].values()), (seen, served["requests"])
    assert served["requests"]["HEAD resolve"] == len(spec["plan"]["files"])


def test_metadata_that_disagrees_with_the_plan_fails_before_a_byte(stager, hub_root, double):
    rev = revision(hub_root)
    spec = stager.spec(rev)
    shard = next(f for f in spec["plan"]["files"] if f["sha256"])
    shard["size"] += 1
    rc, _r, err, _ = stager.run(spec)
    assert rc == 1 and f"the Hub describes {shard['path']} as {shard['size'] - 1} bytes" in err, err
    assert double.stats()["files"].get(f"test-org/tiny/{shard['path']}", 0) == 0


# --------------------------------------------------------------------------- failures


def test_the_hub_going_away_mid_run_fails_clearly_and_marks_nothing_complete(stager, hub_root, double):
    rev = revision(hub_root)
    spec = stager.spec(rev, retries=1)
    spec["source"]["max_workers"] = 1
    double.fault(rate=4 << 20)
    proc = stager.popen(spec)
    wait_for(lambda: read_progress(spec).get("files_done", 0) >= 2 and double.stats()["total_bytes"] > 5 << 20)
    double.fault(mode="down")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert err.startswith("sglang_model_stage: ") and double.url in err, err
    assert "Traceback" not in err
    model = stager.root / "model"
    assert not (model / rev.sha).exists() and not (model / f"{rev.sha}.manifest.json").exists()
    journal = (model / ".staging" / f"{rev.sha}.journal").read_text().splitlines()
    assert len(journal) >= 2  # what was verified stays verified for the next run
    double.fault(mode="none", rate=0)
    double.reset()
    assert stager.ok(spec)["status"] == "staged"
    assert double.stats()["total_bytes"] < size_of(spec["plan"])


def test_too_little_space_fails_before_the_first_byte_naming_both_numbers(stager, hub_root, double):
    rev = revision(hub_root)
    spec = stager.spec(rev, min_free_bytes=10 ** 18)
    rc, _result, err, _ = stager.run(spec)
    assert rc == 1
    assert "free" in err and str(size_of(spec["plan"])) in err and "margin" in err, err
    assert double.stats()["total_bytes"] == 0


@pytest.mark.parametrize(("repo", "token", "expected"), [
    ("test-org/missing", None, "repository not found (404 RepoNotFound)"),
    ("test-org/gated", None, "is gated and sglang_model_hf_token is empty (401 GatedRepo)"),
    ("test-org/gated", "other", "has no access to it (403 GatedRepo)"),
])
def test_hub_refusals_name_the_cause_and_never_the_token(stager, hub_root, double, tmp_path, repo, token, expected):
    from model_kit import OTHER_TOKEN
    rev = revision(hub_root, "test-org/gated")
    spec = stager.spec(rev, repo_id=repo)
    if token:
        (tmp_path / "token").write_text(OTHER_TOKEN)
        spec["source"]["token_file"] = str(tmp_path / "token")
    rc, _r, err, _ = stager.run(spec)
    assert rc == 1 and expected in err, err
    assert OTHER_TOKEN not in err


def test_the_authorized_token_reads_a_gated_repo(stager, hub_root, double, tmp_path):
    from model_kit import TOKEN
    rev = revision(hub_root, "test-org/gated")
    (tmp_path / "token").write_text(TOKEN + "\n")
    spec = stager.spec(rev)
    spec["source"]["token_file"] = str(tmp_path / "token")
    assert stager.ok(spec)["status"] == "staged"


def test_plan_errors_of_the_real_client(stager, hub_python, double):
    base = ["plan", "--endpoint", double.url, "--hf-home", str(stager.tmp / "hf")]
    out = tool_cli(*base, "--repo-id", "test-org/tiny", "--revision", "nope", python=hub_python)
    assert out.returncode == 1 and "Revision Not Found" in out.stderr or "RevisionNotFound" in out.stderr
    out = tool_cli(*base, "--repo-id", "test-org/tiny", "--allow", "*.gguf", python=hub_python)
    assert out.returncode == 1 and "the patterns match no file" in out.stderr


def test_an_unsafe_path_in_a_plan_is_refused(stager, hub_root, tool_module):
    rev = revision(hub_root)
    spec = stager.spec(rev)
    spec["plan"]["files"].append({"path": "../escape.json", "size": 1, "blob_id": "0" * 40, "sha256": None})
    rc, _r, err, _ = stager.run(spec)
    assert rc == 1 and "refusing the repository path '../escape.json'" in err


# --------------------------------------------------------------------------- local sources


def test_a_local_directory_is_verified_in_place_never_copied(stager, hub_root, double, tmp_path):
    rev = revision(hub_root)
    shared = tmp_path / "shared" / "tiny"
    shared.parent.mkdir()
    subprocess.run(["cp", "-r", str(rev.directory), str(shared)], check=True)
    spec = stager.spec(rev, source={"kind": "local", "path": str(shared)})
    result = stager.ok(spec)
    assert result["status"] == "verified" and result["changed"] is True
    entry = stager.root / "model" / rev.sha
    assert entry.is_symlink() and os.readlink(entry) == str(shared.resolve())
    assert double.stats()["total_bytes"] == 0
    assert json.loads(Path(result["manifest"]).read_text())["source"] == {"kind": "local", "path": str(shared)}
    rerun = stager.ok(spec)
    assert rerun["changed"] is False and rerun["rehashed_files"] == 0
    check = tool_cli("check", str(entry))
    assert check.returncode == 0, check.stderr


def test_a_local_directory_lacking_a_file_or_with_a_bad_one_fails(stager, hub_root, tmp_path):
    rev = revision(hub_root)
    shared = tmp_path / "shared"
    subprocess.run(["cp", "-r", str(rev.directory), str(shared)], check=True)
    (shared / "model-00004-of-00004.safetensors").unlink()
    rc, _r, err, _ = stager.run(stager.spec(rev, source={"kind": "local", "path": str(shared)}))
    assert rc == 1 and "lacks files" in err and "model-00004-of-00004.safetensors" in err
    rc, _r, err, _ = stager.run(stager.spec(rev, source={"kind": "local", "path": str(tmp_path / "absent")}))
    assert rc == 1 and "does not exist" in err
    subprocess.run(["cp", str(rev.directory / "model-00004-of-00004.safetensors"), str(shared)], check=True)
    corrupt(shared / "config.json")
    rc, _r, err, _ = stager.run(stager.spec(rev, source={"kind": "local", "path": str(shared)}))
    assert rc == 1 and "config.json" in err and "never repaired" in err


# --------------------------------------------------------------------------- check, preflight, prune


def test_check_accepts_a_staged_revision_and_refuses_anything_else(stager, hub_root, tmp_path):
    rev = revision(hub_root)
    final = Path(stager.ok(stager.spec(rev))["path"])
    current = final.parent / "current"
    current.symlink_to(rev.sha)
    out = tool_cli("check", str(current))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["checked"][0]["revision"] == rev.sha
    plain = tmp_path / "plain"
    plain.mkdir()
    out = tool_cli("check", str(plain))
    assert out.returncode == 1 and "no manifest" in out.stderr
    os.chmod(final / "config.json", 0o644)
    (final / "config.json").write_text("{}")
    out = tool_cli("check", str(current))
    assert out.returncode == 1 and "config.json" in out.stderr


def test_preflight_reports_holdings_staging_space_and_writable_paths(stager, hub_root, double, tool_module, tmp_path):
    rev = revision(hub_root)
    stager.ok(stager.spec(rev))
    pre = tool_module.preflight({"root": str(stager.root), "writable_paths": [str(tmp_path)],
                                 "models": [{"name": "model", "source": "hub"}, {"name": "other"}]})
    held = pre["models"]["model"]["revisions"][rev.sha]
    assert held["complete"] and held["repo_id"] == "test-org/tiny" and held["total_bytes"] == size_of(plan_for(rev))
    assert pre["free_bytes"] > 0 and pre["inside_writable"] == [str(tmp_path)]
    assert pre["models"]["other"]["revisions"] == {}


def test_prune_keeps_current_and_the_newest_and_never_one_in_use(stager, hub_root, tool_module):
    revs = [revision(hub_root, "test-org/evolving", "main"), revision(hub_root, "test-org/evolving", "next")]
    for r in revs:
        stager.ok(stager.spec(r, name="evo"))
        time.sleep(1.1)  # staged_at differs
    model = stager.root / "evo"
    (model / "current").symlink_to(revs[1].sha)
    spec = {"root": str(stager.root), "keep": 1, "models": [{"name": "evo", "keep_revisions": []}]}
    # In use: a process holds a file of the older revision open -> kept even beyond the count.
    holder = subprocess.Popen([sys.executable, "-c", "import sys,time; f=open(sys.argv[1]); time.sleep(60)",
                               str(model / revs[0].sha / "config.json")])
    try:
        wait_for(lambda: any(os.path.exists(f"/proc/{holder.pid}/fd/{n}") for n in range(3, 6)))
        out = tool_module.prune(spec)
        assert f"evo/{revs[0].sha}" not in out["removed"]
        assert set(out["kept"]) == {f"evo/{revs[0].sha}", f"evo/{revs[1].sha}"}
    finally:
        holder.kill()
        holder.wait()
    dry = tool_module.prune(dict(spec, dry_run=True))
    assert f"evo/{revs[0].sha}" in dry["removed"] and (model / revs[0].sha).exists()
    out = tool_module.prune(spec)
    assert out["removed"] == [f"evo/{revs[0].sha}", f"evo/.staging/{revs[0].sha}.lock"]
    assert out["kept"] == [f"evo/{revs[1].sha}"]
    assert tool_module.prune(spec)["changed"] is False
    assert not (model / revs[0].sha).exists() and not (model / f"{revs[0].sha}.manifest.json").exists()
    assert (model / revs[1].sha).exists() and (model / "current").resolve() == (model / revs[1].sha)


# --------------------------------------------------------------------------- rsync (fan-out transport)


def test_a_fanout_copy_through_an_rsync_daemon_is_verified(stager, hub_root, tmp_path):
    """The copy a destination makes from a source's verified revision (molecule runs it between hosts)."""
    import shutil
    import socket
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed here (molecule/sglang_model copies between two hosts with it)")
    rev = revision(hub_root)
    src = Path(stager.ok(stager.spec(rev, name="src"))["path"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "secrets").write_text("sglang-model:s3cret\n")
    (tmp_path / "pw").write_text("s3cret\n")
    os.chmod(tmp_path / "secrets", 0o600)
    os.chmod(tmp_path / "pw", 0o600)
    (tmp_path / "rsyncd.conf").write_text(
        f"address = 127.0.0.1\nport = {port}\nuse chroot = no\nread only = yes\nlist = no\n"
        f"[model]\n path = {src}\n auth users = sglang-model\n secrets file = {tmp_path / 'secrets'}\n"
        f" hosts allow = 127.0.0.1\n")
    daemon = subprocess.Popen(["rsync", "--daemon", "--no-detach", f"--config={tmp_path / 'rsyncd.conf'}"])
    try:
        time.sleep(0.5)
        source = {"kind": "rsync", "peer": "src", "url": f"rsync://sglang-model@127.0.0.1:{port}/model/",
                  "password_file": str(tmp_path / "pw"), "streams": 3}
        result = stager.ok(stager.spec(rev, name="dst", source=source))
        assert result["status"] == "staged" and result["fetched_bytes"] == size_of(plan_for(rev))
        assert json.loads(Path(result["manifest"]).read_text())["source"] == {"kind": "rsync", "peer": "src"}
    finally:
        daemon.terminate()
        daemon.wait()
