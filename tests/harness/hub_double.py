"""TEST DOUBLE of the Hugging Face Hub's HTTP API: serves synthetic model repositories from a directory.

Written from the client's source (huggingface_hub 1.17.0, the version role sglang_model pins;
the same endpoints in 0.36 and 2.x): only what the real client calls, answered the way the
client parses it.

    GET  /api/models/{repo}[/revision/{rev}][?blobs=true]   HfApi.model_info (hf_api.py): {id, sha,
         gated, siblings[{rfilename[, size, blobId, lfs{sha256, size, pointerSize}]}]}
    GET  /api/models/{repo}/tree/{rev}[/{path}]?recursive=..  HfApi.list_repo_tree: [{type, path, size,
         oid, lfs{oid, size, pointerSize}}], paginated with `Link: <url>; rel="next"` (utils/_pagination.py)
    POST /api/models/{repo}/paths-info/{rev}                 HfApi.get_paths_info (form: paths, expand)
    HEAD /{repo}/resolve/{rev}/{file}                        get_hf_file_metadata (file_download.py):
         X-Repo-Commit; regular files 200 with ETag (the git blob id) and Content-Length; LFS files
         302 to the "CDN" with X-Linked-Etag (sha256) and X-Linked-Size. No Xet headers, so the
         client downloads over plain HTTP.
    GET  /{repo}/resolve/{rev}/{file}, GET /cdn/{repo}/{sha256}   http_get: 200, or 206 for
         `Range: bytes=N-` with Content-Range (the client resumes a partial file this way); with
         --cdn-base (another host name) the CDN answers 400 to a request carrying Authorization
    errors: 404 + X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound (+ X-Repo-Commit);
         gated repos: 401 GatedRepo without a token, 403 GatedRepo with a token that has no access;
         401 "Invalid credentials in Authorization header" for an unknown token (utils/_http.py).

Repository layout under --root (tests/harness/synthetic_model.py writes it)::

    <org>/<name>/hub.json                {"refs": {"main": "<sha>"}, "gated": false | "manual",
                                          "authorized_tokens": [...], "created": "..."}
    <org>/<name>/revisions/<sha>/...     the files of that commit
    <org>/<name>/revisions/<sha>.meta.json   {"files": {path: {size, blob_id, lfs: {sha256, size,
                                          pointer_size} | null}}} (computed at start when absent)

Test controls (never part of the real Hub):

    GET  /_double/stats          bytes served per file, requests per kind, total
    POST /_double/reset          zero the counters
    POST /_double/fault          JSON: {"mode": "cut", "after_bytes": N, "glob": "*.safetensors",
                                 "count": 1} closes the connection mid-body; {"mode": "down"} closes
                                 every connection at once (the Hub gone); {"mode": "error", "status":
                                 503}; {"rate": BYTES_PER_S} throttles every body; {"mode": "none"};
                                 "ignore_range": true beside any mode answers Range with the whole
                                 file (200), as some CDNs do
    --stats-file PATH            the stats, rewritten after every response (for hosts read from outside)
    --token T / --tokens-file F  the tokens it accepts (others: 401); gated repos name theirs in hub.json

Run: ``python3 tests/harness/hub_double.py --root DIR --port N`` (stdlib only, Python 3.9+), or
import it: ``HubDouble(root).start()``.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LABEL = "hub-double (TEST DOUBLE of the Hugging Face Hub)"
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
CHUNK = 4 << 20
LFS_GLOBS = ("*.safetensors", "*.bin", "*.model", "*.tiktoken", "*.pt", "*.gguf", "*.png", "*.pdf")
LFS_MIN_SIZE = 10 << 20


# --------------------------------------------------------------------------- hashes (the Hub's)


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def file_meta(path: Path, rel: str) -> dict:
    """size, blob id and LFS info of one file, as the Hub reports them (blob id of the pointer for LFS)."""
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as f:
        while True:
            block = f.read(CHUNK)
            if not block:
                break
            sha256.update(block)
            sha1.update(block)
    if is_lfs(rel, size):
        digest = sha256.hexdigest()
        pointer = lfs_pointer(digest, size)
        return {"size": size, "blob_id": git_blob_id(pointer),
                "lfs": {"sha256": digest, "size": size, "pointer_size": len(pointer)}}
    return {"size": size, "blob_id": sha1.hexdigest(), "lfs": None}


def is_lfs(rel: str, size: int) -> bool:
    return size >= LFS_MIN_SIZE or any(fnmatch.fnmatch(rel, g) for g in LFS_GLOBS)


# --------------------------------------------------------------------------- repositories


class Repo:
    def __init__(self, repo_id: str, directory: Path):
        self.id, self.dir = repo_id, directory
        self.config = json.loads((directory / "hub.json").read_text())
        self.refs = dict(self.config.get("refs", {}))
        self._meta: dict[str, dict] = {}
        self._lock = threading.Lock()

    @property
    def gated(self):
        return self.config.get("gated", False)

    def resolve(self, rev: str) -> str | None:
        if rev in self.refs:
            return self.refs[rev]
        if SHA_RE.match(rev) and (self.dir / "revisions" / rev).is_dir():
            return rev
        return None

    def meta(self, sha: str) -> dict:
        with self._lock:
            if sha not in self._meta:
                cached = self.dir / "revisions" / f"{sha}.meta.json"
                if cached.exists():
                    self._meta[sha] = json.loads(cached.read_text())["files"]
                else:
                    base = self.dir / "revisions" / sha
                    files = {}
                    for p in sorted(base.rglob("*")):
                        if p.is_file():
                            rel = p.relative_to(base).as_posix()
                            files[rel] = file_meta(p, rel)
                    self._meta[sha] = files
            return self._meta[sha]

    def path(self, sha: str, rel: str) -> Path:
        return self.dir / "revisions" / sha / rel

    def by_sha256(self, digest: str) -> Path | None:
        for sha in sorted({*self.refs.values(), *(p.name for p in (self.dir / "revisions").iterdir() if p.is_dir())}):
            for rel, m in self.meta(sha).items():
                if m["lfs"] and m["lfs"]["sha256"] == digest:
                    return self.path(sha, rel)
        return None


class Hub:
    """Repositories found under a root directory (org/name/hub.json)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def repo(self, repo_id: str) -> Repo | None:
        if repo_id.count("/") != 1 or ".." in repo_id:
            return None
        d = self.root / repo_id
        return Repo(repo_id, d) if (d / "hub.json").is_file() else None


# --------------------------------------------------------------------------- the server


class State:
    """Counters and injected faults, shared by the request threads."""

    def __init__(self, stats_file: str | None = None):
        self.lock = threading.Lock()
        self.stats_file = stats_file
        self.fault: dict = {}
        self.rate = 0.0
        self.reset()

    def reset(self):
        with self.lock:
            self.files: dict[str, int] = {}
            self.requests: dict[str, int] = {}
            self.total = 0
        self.save()

    def count_request(self, kind: str):
        with self.lock:
            self.requests[kind] = self.requests.get(kind, 0) + 1

    def count_bytes(self, key: str, n: int):
        with self.lock:
            self.files[key] = self.files.get(key, 0) + n
            self.total += n

    def snapshot(self) -> dict:
        with self.lock:
            return {"label": LABEL, "files": dict(self.files), "requests": dict(self.requests),
                    "total_bytes": self.total, "fault": dict(self.fault), "rate": self.rate}

    def save(self):
        if not self.stats_file:
            return
        tmp = f"{self.stats_file}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.snapshot(), f)
        os.replace(tmp, self.stats_file)

    def take_cut(self, key: str) -> int | None:
        """Bytes after which to cut this body, when a cut fault matches it (consumes one count)."""
        with self.lock:
            f = self.fault
            if f.get("mode") != "cut" or not fnmatch.fnmatch(key, "*" + f.get("glob", "*")):
                return None
            if f.get("count", 1) == 0:
                return None
            if f.get("count", 1) > 0:
                f["count"] = f.get("count", 1) - 1
            return int(f.get("after_bytes", 0))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hub-double/1 (TEST DOUBLE)"
    hub: Hub
    state: State
    page_size = 50
    tokens: set[str] | None = None
    repo_not_found_status = 404

    def log_message(self, fmt, *args):  # quiet: tests read the stats instead
        if os.environ.get("HUB_DOUBLE_LOG"):
            sys.stderr.write("hub-double: " + (fmt % args) + "\n")

    # -- plumbing
    def hang_up(self):
        """Close the connection without an answer (the Hub gone, or a body cut mid-way)."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def send(self, status: int, body: bytes = b"", headers: dict | None = None, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        self.state.save()

    def send_json(self, obj, status=200, headers=None):
        self.send(status, json.dumps(obj).encode(), headers)

    def error(self, status: int, code: str | None, message: str, extra: dict | None = None):
        headers = {"X-Error-Message": message, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self.send_json({"error": message}, status, headers)

    def token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def bad_token(self) -> bool:
        tok = self.token()
        return tok is not None and self.tokens is not None and tok not in self.tokens

    def body_json(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    # -- dispatch
    def do_HEAD(self):
        self.route()

    def do_GET(self):
        self.route()

    def do_POST(self):
        self.route()

    def route(self):
        raw_path, _, query = self.path.partition("?")
        params = urllib.parse.parse_qs(query)
        segs = [urllib.parse.unquote(s) for s in raw_path.split("/")[1:]]
        if segs[:1] == ["_double"]:
            return self.control(segs[1:] if len(segs) > 1 else [""])
        fault = self.state.fault
        if fault.get("mode") == "down":
            return self.hang_up()  # only the test controls above still answer
        if fault.get("mode") == "error":
            return self.error(int(fault.get("status", 503)), None, "Service Unavailable (injected)")
        if self.bad_token():
            return self.error(401, None, "Invalid credentials in Authorization header")
        if segs[:2] == ["api", "models"] and len(segs) >= 4:
            return self.api(segs[2] + "/" + segs[3], segs[4:], params)
        if segs[:1] == ["cdn"] and len(segs) == 4:
            return self.cdn(segs[1] + "/" + segs[2], segs[3])
        if len(segs) >= 5 and segs[2] == "resolve":
            raw_segs = raw_path.split("/")[1:]
            rel = urllib.parse.unquote("/".join(raw_segs[4:]))
            return self.resolve(segs[0] + "/" + segs[1], segs[3], rel)
        if raw_path in ("", "/"):
            return self.send(200, f"{LABEL}\n".encode(), ctype="text/plain")
        return self.error(404, None, "Not Found")

    def control(self, segs):
        if segs[0] == "stats":
            return self.send_json(self.state.snapshot())
        if segs[0] == "reset" and self.command == "POST":
            self.state.reset()
            return self.send_json({"ok": True})
        if segs[0] == "fault" and self.command == "POST":
            body = self.body_json()
            with self.state.lock:
                if "rate" in body:
                    self.state.rate = float(body.pop("rate") or 0)
                if body:
                    self.state.fault = {} if body.get("mode") == "none" else body
            return self.send_json(self.state.snapshot())
        return self.error(404, None, "unknown control")

    # -- API
    def find_repo(self, repo_id: str):
        repo = self.hub.repo(repo_id)
        if repo is None:
            status = 401 if (self.repo_not_found_status == 401 and self.token() is None) else 404
            self.error(status, "RepoNotFound", "Repository not found")
        return repo

    def find_rev(self, repo: Repo, rev: str):
        sha = repo.resolve(rev)
        if sha is None:
            self.error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return sha

    def api(self, repo_id, rest, params):
        repo = self.find_repo(repo_id)
        if repo is None:
            return
        if not rest or rest[0] == "revision":
            self.state.count_request("model_info")
            sha = self.find_rev(repo, rest[1] if len(rest) > 1 else "main")
            if sha is None:
                return
            return self.send_json(self.model_info(repo, sha, params.get("blobs", ["false"])[0] in ("true", "True", "1")))
        if rest[0] == "tree" and len(rest) >= 2:
            self.state.count_request("tree")
            sha = self.find_rev(repo, rest[1])
            if sha is None:
                return
            return self.tree(repo, sha, "/".join(rest[2:]), params)
        if rest[0] == "paths-info" and len(rest) >= 2 and self.command == "POST":
            self.state.count_request("paths_info")
            sha = self.find_rev(repo, rest[1])
            if sha is None:
                return
            n = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(n).decode())
            meta = repo.meta(sha)
            folders = {rel.rsplit("/", 1)[0] for rel in meta if "/" in rel}
            folders |= {f.rsplit("/", i)[0] for f in list(folders) for i in range(1, f.count("/") + 1)}
            out = []
            for p in form.get("paths", []):
                if p in meta:
                    out.append(self.entry(p, meta[p]))
                elif p in folders:
                    out.append({"type": "directory", "oid": hashlib.sha1(p.encode()).hexdigest(), "size": 0, "path": p})
            return self.send_json(out)
        return self.error(404, None, "Not Found")

    def model_info(self, repo: Repo, sha: str, blobs: bool) -> dict:
        meta = repo.meta(sha)
        siblings = []
        for rel, m in meta.items():
            s = {"rfilename": rel}
            if blobs:
                s.update(size=m["size"], blobId=m["blob_id"])
                if m["lfs"]:
                    s["lfs"] = {"sha256": m["lfs"]["sha256"], "size": m["lfs"]["size"],
                                "pointerSize": m["lfs"]["pointer_size"]}
            siblings.append(s)
        created = repo.config.get("created", "2026-01-01T00:00:00.000Z")
        return {"_id": hashlib.md5(repo.id.encode()).hexdigest()[:24], "id": repo.id, "modelId": repo.id,
                "author": repo.id.split("/")[0], "sha": sha, "lastModified": created, "createdAt": created,
                "private": False, "disabled": False, "gated": repo.gated, "downloads": 0, "likes": 0,
                "tags": ["test-double"], "library_name": "transformers", "siblings": siblings,
                "usedStorage": sum(m["size"] for m in meta.values())}

    @staticmethod
    def entry(rel: str, m: dict) -> dict:
        e = {"type": "file", "oid": m["blob_id"], "size": m["size"], "path": rel}
        if m["lfs"]:
            e["lfs"] = {"oid": m["lfs"]["sha256"], "size": m["lfs"]["size"], "pointerSize": m["lfs"]["pointer_size"]}
        return e

    def tree(self, repo: Repo, sha: str, base: str, params):
        meta = repo.meta(sha)
        recursive = params.get("recursive", ["false"])[0] in ("true", "True", "1")
        prefix = base.rstrip("/") + "/" if base else ""
        entries, dirs = [], set()
        for rel in sorted(meta):
            if not rel.startswith(prefix):
                continue
            tail = rel[len(prefix):]
            parts = tail.split("/")
            for i in range(1, len(parts)):
                d = prefix + "/".join(parts[:i])
                if (recursive or i == 1) and d not in dirs:
                    dirs.add(d)
                    entries.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0,
                                    "path": d})
            if recursive or len(parts) == 1:
                entries.append(self.entry(rel, meta[rel]))
        if base and not entries:
            return self.error(404, "EntryNotFound", f"{base} does not exist on \"{sha}\"", {"X-Repo-Commit": sha})
        cursor = int(base64.urlsafe_b64decode(params["cursor"][0]).decode()) if "cursor" in params else 0
        page = entries[cursor: cursor + self.page_size]
        headers = {}
        if cursor + self.page_size < len(entries):
            q = {k: v[0] for k, v in params.items() if k != "cursor"}
            q["cursor"] = base64.urlsafe_b64encode(str(cursor + self.page_size).encode()).decode()
            host = self.headers.get("Host", "")
            path = self.path.partition("?")[0]
            headers["Link"] = f'<http://{host}{path}?{urllib.parse.urlencode(q)}>; rel="next"'
        return self.send_json(page, 200, headers)

    # -- files
    def gate(self, repo: Repo) -> bool:
        if not repo.gated:
            return True
        tok = self.token()
        if tok is None:
            self.error(401, "GatedRepo", f"Access to model {repo.id} is restricted. You must have access to it "
                       "and be authenticated to access it. Please log in.")
            return False
        if tok not in repo.config.get("authorized_tokens", []):
            self.error(403, "GatedRepo", f"Access to model {repo.id} is restricted and you are not in the "
                       f"authorized list. Visit https://huggingface.co/{repo.id} to ask for access.")
            return False
        return True

    def resolve(self, repo_id, rev, rel):
        self.state.count_request(f"{self.command} resolve")
        repo = self.find_repo(repo_id)
        if repo is None:
            return
        sha = self.find_rev(repo, rev)
        if sha is None or not self.gate(repo):
            return
        meta = repo.meta(sha).get(rel)
        if meta is None:
            return self.error(404, "EntryNotFound", f"{rel} does not exist on \"{sha}\"", {"X-Repo-Commit": sha})
        common = {"X-Repo-Commit": sha, "Accept-Ranges": "bytes"}
        if meta["lfs"]:
            digest = meta["lfs"]["sha256"]
            cdn = self.server.cdn_base or f"http://{self.headers.get('Host', '')}"
            location = f"{cdn}/cdn/{repo.id}/{digest}?name={urllib.parse.quote(rel)}"
            return self.send(302, b"", {**common, "Location": location, "X-Linked-Etag": f'"{digest}"',
                                        "X-Linked-Size": str(meta["size"]), "ETag": f'"{meta["blob_id"]}"'})
        return self.serve_file(repo.path(sha, rel), f"{repo.id}/{rel}", {**common, "ETag": f'"{meta["blob_id"]}"'})

    def cdn(self, repo_id, digest):
        self.state.count_request(f"{self.command} cdn")
        if self.server.cdn_base and self.headers.get("Authorization"):
            # A CDN on another host takes its signed URL alone (S3 refuses a second credential):
            # a client that forwards the Hub token there fails here, and the stats say so.
            self.state.count_request(f"{self.command} cdn with Authorization")
            return self.error(400, None, "Only one auth mechanism allowed")
        repo = self.hub.repo(repo_id)
        path = repo.by_sha256(digest) if repo else None
        if path is None:
            return self.error(404, None, "NoSuchKey")
        rel = path.relative_to(repo.dir / "revisions").as_posix().split("/", 1)[1]
        return self.serve_file(path, f"{repo.id}/{rel}", {"ETag": f'"{digest}"', "Accept-Ranges": "bytes"})

    def serve_file(self, path: Path, key: str, headers: dict):
        size = path.stat().st_size
        start, end, status = 0, size - 1, 200
        rng = None if self.state.fault.get("ignore_range") else self.headers.get("Range")
        if rng:
            m = re.match(r"bytes=(\d*)-(\d*)$", rng.strip())
            if not m or (m.group(1) == "" and m.group(2) == ""):
                return self.error(416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{size}"})
            if m.group(1) == "":
                start = max(0, size - int(m.group(2)))
            else:
                start = int(m.group(1))
                end = min(size - 1, int(m.group(2))) if m.group(2) else size - 1
            if start >= size or start > end:
                return self.error(416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{size}"})
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{size}"}
        length = end - start + 1
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD":
            self.state.save()
            return
        cut = self.state.take_cut(key)
        sent = 0
        t0 = time.monotonic()
        with open(path, "rb") as f:
            while sent < length:
                n = min(CHUNK if not self.state.rate else max(65536, int(self.state.rate / 10)), length - sent)
                if cut is not None and sent + n > cut:
                    n = max(0, cut - sent)
                if n:
                    done = self.connection.sendfile(f, offset=start + sent, count=n)
                    sent += done
                    self.state.count_bytes(key, done)
                if (cut is not None and sent >= cut) or self.state.fault.get("mode") == "down":
                    self.hang_up()
                    break
                if self.state.rate:
                    ahead = sent / self.state.rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        self.state.save()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64
    cdn_base = ""


class HubDouble:
    """The double in a background thread (for pytest); ``url`` is its HF_ENDPOINT."""

    def __init__(self, root, host="127.0.0.1", port=0, *, tokens=None, page_size=50, stats_file=None,
                 cdn_base="", repo_not_found_status=404):
        self.state = State(stats_file)
        handler = type("BoundHandler", (Handler,), {
            "hub": Hub(Path(root)), "state": self.state, "page_size": page_size,
            "tokens": set(tokens) if tokens else None, "repo_not_found_status": repo_not_found_status})
        self.server = Server((host, port), handler)
        self.server.cdn_base = cdn_base
        self.host, self.port = self.server.server_address[:2]
        self.url = f"http://{self.host}:{self.port}"
        self._thread = None

    def start(self) -> HubDouble:
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def stats(self) -> dict:
        return self.state.snapshot()

    def reset(self) -> None:
        self.state.reset()

    def fault(self, **fault) -> None:
        with self.state.lock:
            if "rate" in fault:
                self.state.rate = float(fault.pop("rate") or 0)
            if fault:
                self.state.fault = {} if fault.get("mode") == "none" else fault

    def bytes_for(self, suffix: str = "") -> int:
        return sum(n for k, n in self.stats()["files"].items() if k.endswith(suffix))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="TEST DOUBLE of the Hugging Face Hub HTTP API")
    ap.add_argument("--root", required=True, help="directory of <org>/<name>/ repositories")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--token", action="append", help="a valid token (repeat); none: every token is valid")
    ap.add_argument("--tokens-file", help="valid tokens, one per line (kept out of the command line)")
    ap.add_argument("--page-size", type=int, default=50, help="tree entries per page (Link: rel=next)")
    ap.add_argument("--stats-file", help="write the stats here after every response")
    ap.add_argument("--cdn-base", default="", help="base URL of LFS redirects (another host name: a real CDN)")
    ap.add_argument("--rate", type=float, default=0, help="bytes per second per body (0: unthrottled)")
    ap.add_argument("--repo-not-found-status", type=int, choices=(401, 404), default=404,
                    help="status of RepoNotFound without a token (the real Hub answers 401)")
    args = ap.parse_args(argv)
    tokens = list(args.token or [])
    if args.tokens_file:
        tokens += [t.strip() for t in Path(args.tokens_file).read_text().splitlines() if t.strip()]
    double = HubDouble(args.root, args.host, args.port, tokens=tokens or None, page_size=args.page_size,
                       stats_file=args.stats_file, cdn_base=args.cdn_base,
                       repo_not_found_status=args.repo_not_found_status)
    double.state.rate = args.rate
    print(f"{LABEL} serving {args.root} on {double.url}", flush=True)
    try:
        double.server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
