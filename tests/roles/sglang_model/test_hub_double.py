"""The Hub TEST DOUBLE answers the real client (the role's pinned huggingface_hub) as the Hub does:
model info with file metadata, the paginated tree, paths-info, resolve with redirects and ranges, the
error codes; and the client's own checksum verification agrees with what the staging tool wrote."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request

from model_kit import TOKEN

import synthetic_model


def client(python, double, code: str, tmp_path) -> dict:
    script = ("import json, os, sys\n"
              f"os.environ.update(HF_ENDPOINT={double.url!r}, HF_HOME={str(tmp_path / 'hf')!r}, HF_HUB_DISABLE_XET='1',"
              " HF_HUB_DISABLE_TELEMETRY='1')\n"
              "from huggingface_hub import HfApi, hf_hub_download, snapshot_download\n"
              "api = HfApi()\nout = {}\n" + code + "\nprint(json.dumps(out))\n")
    proc = subprocess.run([str(python), "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_tree_listing_paginates_and_paths_info_answers(hub_python, double, hub_root, tmp_path):
    rev = synthetic_model.load_revision(hub_root, "test-org/tiny")
    out = client(hub_python, double, (
        "out['tree'] = [[f.path, f.size, f.blob_id, f.lfs.sha256 if f.lfs else None]"
        " for f in api.list_repo_tree('test-org/tiny', recursive=True) if hasattr(f, 'blob_id')]\n"
        "out['top'] = sorted(f.path for f in api.list_repo_tree('test-org/tiny'))\n"
        "out['info'] = [[p.path, getattr(p, 'size', 0)]"
        " for p in api.get_paths_info('test-org/tiny', ['config.json', 'docs', 'nope'])]\n"),
        tmp_path)
    assert {p: (s, b, h) for p, s, b, h in out["tree"]} == {
        p: (m["size"], m["blob_id"], m["lfs"]["sha256"] if m["lfs"] else None) for p, m in rev.files.items()}
    assert double.stats()["requests"]["tree"] > 3  # 15 entries at 5 a page: followed Link rel=next
    assert "docs" in out["top"] and "docs/deploy_guidance.md" not in out["top"]
    assert sorted(out["info"]) == sorted([["config.json", rev.files["config.json"]["size"]], ["docs", 0]])


def test_snapshot_download_and_the_clients_own_checksums_agree_with_the_tool(stager, hub_python, double, hub_root,
                                                                             tmp_path):
    rev = synthetic_model.load_revision(hub_root, "test-org/tiny")
    staged = stager.ok(stager.spec(rev))["path"]
    out = client(hub_python, double, (
        f"v = api.verify_repo_checksums('test-org/tiny', revision={rev.sha!r}, local_dir={staged!r})\n"
        "out['checked'], out['mismatches'], out['extra'] = v.checked_count, v.mismatches, v.extra_paths\n"
        "out['missing'] = v.missing_paths\n"
        f"out['snap'] = snapshot_download('test-org/tiny', revision='main', local_dir={str(tmp_path / 'snap')!r},"
        " allow_patterns=['*.json'])\n"), tmp_path)
    assert out["mismatches"] == [] and out["extra"] == [] and out["checked"] == len(stager.spec(rev)["plan"]["files"])
    assert set(out["missing"]) == {"README.md", "docs/deploy_guidance.md", ".gitattributes"}  # left out by patterns
    assert sorted(p.name for p in (tmp_path / "snap").iterdir() if p.is_file()) == [
        "config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer_config.json"]


def test_resolve_headers_ranges_and_errors(double, hub_root):
    rev = synthetic_model.load_revision(hub_root, "test-org/tiny")
    shard = "model-00001-of-00004.safetensors"

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    opener = urllib.request.build_opener(NoRedirect)

    def head(path, **headers):
        req = urllib.request.Request(double.url + path, method="HEAD", headers=headers)
        try:
            r = opener.open(req)
        except urllib.error.HTTPError as e:
            return e.code, e.headers
        return r.status, r.headers
    status, h = head(f"/test-org/tiny/resolve/main/{shard}")
    assert status == 302 and h["X-Repo-Commit"] == rev.sha and h["X-Linked-Size"] == str(rev.files[shard]["size"])
    assert h["X-Linked-Etag"] == f'"{rev.files[shard]["lfs"]["sha256"]}"' and "/cdn/" in h["Location"]
    status, h = head("/test-org/tiny/resolve/main/config.json")
    assert status == 200 and h["ETag"] == f'"{rev.files["config.json"]["blob_id"]}"'
    req = urllib.request.Request(h.get("Location") or f"{double.url}/test-org/tiny/resolve/main/config.json",
                                 headers={"Range": "bytes=10-"})
    with urllib.request.urlopen(req) as r:
        assert r.status == 206 and r.headers["Content-Range"] == f"bytes 10-{rev.files['config.json']['size'] - 1}/" \
                                                                f"{rev.files['config.json']['size']}"
        assert r.read() == (rev.directory / "config.json").read_bytes()[10:]
    for path, status_code, code in [("/test-org/none/resolve/main/config.json", 404, "RepoNotFound"),
                                    ("/test-org/tiny/resolve/v9/config.json", 404, "RevisionNotFound"),
                                    ("/test-org/tiny/resolve/main/absent.json", 404, "EntryNotFound"),
                                    ("/test-org/gated/resolve/main/config.json", 401, "GatedRepo")]:
        status, h = head(path)
        assert (status, h["X-Error-Code"]) == (status_code, code), path
    status, h = head("/test-org/gated/resolve/main/config.json", Authorization=f"Bearer {TOKEN}")
    assert status == 200
    assert double.stats()["total_bytes"] == rev.files["config.json"]["size"] - 10  # HEADs send no body
