#!/usr/bin/env python3
"""Stage one Hugging Face model revision on this host: plan, fetch, verify, manifest, progress.

Installed by role sglang_model on every GPU host and run as root. Hub downloads run in the
role's venv with the real, pinned ``huggingface_hub``: its metadata request (token, redirects,
errors) for every file and ``hf_hub_download`` for the small ones; the bytes of LFS files (the
weights) move through the standard library (class Mover: resumable, hashed as they arrive,
written back as they land). Everything else (preflight, check, verify, prune, peer
copies over rsync, local directories) needs only Python's standard library, so the role can
also run it read-only with the system Python before anything is installed.

Layout of a model directory ``<root>/<name>/``::

    <sha>/                  the verified files, read-only (dirs 0555, files 0444, root);
                            for a local source, a symlink to that directory
    <sha>.manifest.json     written last: revision, every file with size, mtime and hash,
                            when and from where. A directory without it is not staged.
    current -> <sha>        switched by the role once the revision is verified
    .staging/<sha>/         downloads in progress (the client's local_dir, rsync's target)
    .staging/<sha>.journal  one JSON line per file verified in staging (size, mtime, hash)
    .staging/<sha>.lock     one staging run per revision at a time (flock)

A run killed at any point leaves a consistent state: partial files stay in staging (the
Mover and the client resume them with an HTTP Range request, rsync appends), verified files are in the
journal (size and mtime; never hashed again), and a revision is complete only when its
directory was renamed into place and its manifest written. Files are checked with the
Hub's own rule (``hf cache verify``): sha256 for LFS files, the git blob id for the others,
the size where a source publishes nothing else.

Subcommands print one JSON object on stdout; failures print ``sglang_model_stage: <why>``
on stderr and exit 1 (2 for usage errors):

    preflight   read-only state of this host for the role's validation (spec: --spec-b64)
    sync        stage one model revision from the Hub, a peer (rsync) or a local directory
                (spec on stdin); also repairs a staged copy whose files changed
    verify      rehash a staged revision (quick: size+mtime, full: every byte); reopens a
                corrupted copy for repair when --reopen is given
    check       quick manifest check of staged model directories (the server's pre-start check)
    prune       remove revisions beyond a count; never current, a wanted one or one in use
    plan        plan a revision with the real client (model_info with file metadata)
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import errno
import fcntl
import fnmatch
import hashlib
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

TOOL_VERSION = 1
BLOCK = 8 << 20
RUN_DIR = Path("/run/sglang-model")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
# Paths the client itself keeps out of a local_dir (huggingface_hub utils/_paths.py FORBIDDEN_FOLDERS).
FORBIDDEN_TOP = (".git", ".cache")


class StageError(Exception):
    """A failure the user sees as one message (never a token, never a traceback)."""


# --------------------------------------------------------------------------- hashing


def git_blob_sha1(path: Path, size: int | None = None) -> str:
    """git's blob id of a file: sha1 over "blob <size>\\0" and the content (what the Hub calls oid)."""
    size = path.stat().st_size if size is None else size
    h = hashlib.sha1(b"blob %d\0" % size)
    _feed(h, path)
    return h.hexdigest()


def sha256_file(path: Path, counter=None) -> str:
    h = hashlib.sha256()
    _feed(h, path, counter)
    return h.hexdigest()


def _feed(h, path: Path, counter=None) -> None:
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(min(BLOCK, os.fstat(f.fileno()).st_size + 1))  # a small file: a small buffer
        view = memoryview(buf)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])  # hashlib releases the GIL: threads hash in parallel
            if counter is not None:
                counter(n)


def rule(entry: dict) -> tuple[str, str | None]:
    """(algorithm, expected) for a plan entry: the Hub's verification rule."""
    if entry.get("sha256"):
        return "sha256", entry["sha256"].lower()
    if entry.get("blob_id"):
        return "git-sha1", entry["blob_id"].lower()
    return "size", None


def hash_of(path: Path, algo: str, counter=None) -> str | None:
    if algo == "sha256":
        return sha256_file(path, counter)
    if algo == "git-sha1":
        size = path.stat().st_size
        value = git_blob_sha1(path, size)
        if counter is not None:
            counter(size)
        return value
    return None


# --------------------------------------------------------------------------- small helpers


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def human(n: float) -> str:
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"


def duration(seconds) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def progress_line(p: dict) -> str:
    """One poll's line: bytes done and total, rate, ETA, files done (the role prints it as is)."""
    total, done = p.get("bytes_total") or 0, p.get("bytes_done") or 0
    pct = f" ({100.0 * done / total:.1f}%)" if total else ""
    rate = f"{human(p['rate'])}/s" if p.get("rate") is not None else "rate ?"
    return (f"{human(done)} of {human(total)}{pct}, {rate}, ETA {duration(p.get('eta'))}, "
            f"files {p.get('files_done', 0)}/{p.get('files_total', '?')} ({p.get('phase', '?')})")


def summary_line(o: dict) -> str:
    """The result of a sync, in words (the role prints it after the last progress line)."""
    rate = f" at {human(o['rate'])}/s" if o.get("rate") else ""
    checked = f"{o['rehashed_files']} files rehashed, " if o.get("rehashed_files") else ""
    bad = ", ".join(o.get("repaired") or [])
    what = {"verified": f"verified ({checked}nothing fetched)",
            "staged": f"staged: {o.get('fetched_files', 0)} files, {human(o.get('fetched_bytes'))} fetched{rate}"
                      + (f" (corrupted files replaced: {bad})" if bad else ""),
            "reopened": f"corrupted files found and set aside for a new fetch: {bad}"}.get(o.get("status"),
                                                                                          o.get("status", "done"))
    return f"{what} in {o.get('seconds', '?')} s"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str, mode: int = 0o644, durable: bool = True) -> None:
    """Write a file whole: a temporary file in the same directory, renamed over.

    durable: fsync the file and its directory (not for the progress file, rewritten every few
    seconds during a download: each fsync would wait for the download's own writeback).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def symlink_atomic(target: str, link: Path) -> None:
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    fsync_dir(link.parent)


def ensure_dir(path: Path, mode: int) -> None:
    """Create a directory with exactly this mode (whatever the umask); an existing one is left alone."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, mode)


def safe_relpath(path: str) -> str:
    """A repository path that is safe to join under a directory (no absolute path, no ..)."""
    parts = path.split("/")
    if (not path or path.startswith("/") or "\0" in path or "\\" in path
            or any(p in ("", ".", "..") for p in parts)):
        raise StageError(f"refusing the repository path {path!r}: not a plain relative path")
    if parts[0] in FORBIDDEN_TOP:
        raise StageError(f"refusing the repository path {path!r}: {parts[0]}/ is reserved for git and the client")
    return path


def select(paths, allow, ignore):
    """huggingface_hub's filter_repo_objects: fnmatch (``*`` crosses ``/``), a trailing ``/`` means the folder."""
    def widen(p):
        return p + "*" if p.endswith("/") else p
    allow = None if allow is None else [widen(p) for p in allow]
    ignore = None if ignore is None else [widen(p) for p in ignore]
    for path in paths:
        if allow is not None and not any(fnmatch.fnmatch(path, p) for p in allow):
            continue
        if ignore is not None and any(fnmatch.fnmatch(path, p) for p in ignore):
            continue
        yield path


def model_paths(model_dir: Path, sha: str) -> dict:
    staging = model_dir / ".staging"
    return {
        "final": model_dir / sha,
        "manifest": model_dir / f"{sha}.manifest.json",
        "staging_root": staging,
        "staging": staging / sha,
        "journal": staging / f"{sha}.journal",
        "lock": staging / f"{sha}.lock",
        "current": model_dir / "current",
    }


def load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- manifest checks


def manifest_matches(manifest: dict | None, plan: dict | None) -> bool:
    """The manifest describes exactly the planned files (same paths, sizes and hashes)."""
    if not manifest or manifest.get("format") != 1 or not isinstance(manifest.get("files"), list):
        return False
    if plan is None:
        return True
    if manifest.get("revision") != plan["revision"]:
        return False
    have = {f["path"]: (f["size"], f.get("algo"), f.get("hash")) for f in manifest["files"]}
    want = {}
    for entry in plan["files"]:
        algo, expected = rule(entry)
        want[entry["path"]] = (entry["size"], algo, expected)
    return have == want


def quick_check(directory: Path, files: list[dict]) -> list[dict]:
    """Files whose size or mtime differ from the manifest (or that are missing): the suspects."""
    suspects = []
    for f in files:
        try:
            st = os.stat(directory / f["path"])
        except OSError:
            suspects.append({**f, "why": "missing"})
            continue
        if st.st_size != f["size"]:
            suspects.append({**f, "why": f"size {st.st_size}, manifest {f['size']}"})
        elif st.st_mtime_ns != f["mtime_ns"]:
            suspects.append({**f, "why": "mtime changed"})
    return suspects


def resolve_staged(path: Path) -> tuple[Path, Path]:
    """(revision entry, manifest) for a staged path such as <root>/<name>/current or .../<sha>.

    Follows symlinks one hop at a time until a path with a manifest beside it: current ->
    <sha> (whose manifest is <sha>.manifest.json) -> perhaps a local source directory.
    """
    p = Path(path)
    for _ in range(16):
        manifest = p.with_name(p.name + ".manifest.json")
        if manifest.exists():
            return p, manifest
        if not p.is_symlink():
            break
        target = os.readlink(p)
        p = (p.parent / target) if not os.path.isabs(target) else Path(target)
    raise StageError(f"{path}: no manifest beside it (not staged by sglang_model, or its staging is incomplete)")


def check_staged(path: Path, full: bool = False, workers: int = 4) -> dict:
    entry, manifest_path = resolve_staged(path)
    manifest = load_json(manifest_path)
    if not manifest_matches(manifest, None):
        raise StageError(f"{path}: the manifest {manifest_path} is unreadable or incomplete")
    directory = Path(os.path.realpath(entry))
    if not directory.is_dir():
        raise StageError(f"{path}: {directory} is not a directory (manifest {manifest_path})")
    if full:
        bad = rehash(directory, manifest["files"], workers)
    else:
        bad = quick_check(directory, manifest["files"])
    if bad:
        listed = ", ".join(f"{b['path']} ({b['why']})" for b in bad[:8])
        more = f" and {len(bad) - 8} more" if len(bad) > 8 else ""
        raise StageError(f"{path}: {len(bad)} of {len(manifest['files'])} files differ from the manifest "
                         f"{manifest_path}: {listed}{more}")
    return {"path": str(path), "dir": str(directory), "manifest": str(manifest_path),
            "repo_id": manifest.get("repo_id"), "revision": manifest.get("revision"),
            "files": len(manifest["files"]), "bytes": sum(f["size"] for f in manifest["files"])}


def rehash(directory: Path, files: list[dict], workers: int, counter=None) -> list[dict]:
    """Hash every file (in parallel) and return those whose hash or size differ."""
    def one(f):
        p = directory / f["path"]
        try:
            size = p.stat().st_size
        except OSError:
            return {**f, "why": "missing"}
        if size != f["size"]:
            return {**f, "why": f"size {size}, expected {f['size']}"}
        got = hash_of(p, f["algo"], counter)
        if f["algo"] != "size" and got != f["hash"]:
            return {**f, "why": f"{f['algo']} {got[:12]}..., expected {f['hash'][:12]}..."}
        return None
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        return [r for r in pool.map(one, files) if r is not None]


# --------------------------------------------------------------------------- progress


class ByteCounter:
    """Bytes hashed so far, added to by several hashing threads."""

    def __init__(self, start: int = 0):
        self._n, self._lock = start, threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self._n += n

    def value(self) -> int:
        return self._n


class Progress:
    """One JSON file the role's poll loop reads: bytes done and total, rate, ETA, files done.

    ``measure`` returns the bytes present now; the rate is taken over the last 20 seconds.
    """

    def __init__(self, path: Path | None, name: str, total_bytes: int, total_files: int, source: str):
        self.path, self.name, self.source = path, name, source
        self.total_bytes, self.total_files = total_bytes, total_files
        self.phase = "starting"
        self.files_done = 0
        self.measure = lambda: 0
        self.samples: list[tuple[float, int]] = []
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = None

    def start(self, interval: float = 2.0) -> Progress:
        if self.path is not None:
            self._thread = threading.Thread(target=self._loop, args=(interval,), daemon=True)
            self._thread.start()
        return self

    def _loop(self, interval):
        while not self._stop.wait(interval):
            self.write()

    def snapshot(self) -> dict:
        done = min(self.measure(), self.total_bytes)
        t = time.monotonic()
        self.samples.append((t, done))
        self.samples = [s for s in self.samples if t - s[0] <= 20] or [(t, done)]
        t0, d0 = self.samples[0]
        # The rate over the last 20 seconds, as soon as there are two samples a second apart.
        rate = (done - d0) / (t - t0) if t - t0 >= 1 else None
        eta = (self.total_bytes - done) / rate if rate else None
        snap = {"name": self.name, "phase": self.phase, "source": self.source, "bytes_done": done,
                "bytes_total": self.total_bytes, "rate": rate, "eta": eta, "files_done": self.files_done,
                "files_total": self.total_files, "elapsed": round(t - self.started, 1), "pid": os.getpid()}
        snap["line"] = progress_line(snap)
        return snap

    def write(self) -> None:
        if self.path is None:
            return
        with contextlib.suppress(OSError):
            write_atomic(self.path, json.dumps(self.snapshot()), durable=False)

    def stop(self, phase: str) -> None:
        self.phase = phase
        self._stop.set()
        self.write()


# --------------------------------------------------------------------------- the staging area


class Staging:
    """The staging directory of one revision, its journal of verified files and its lock."""

    def __init__(self, model_dir: Path, plan: dict):
        self.model_dir, self.plan = model_dir, plan
        self.p = model_paths(model_dir, plan["revision"])
        self.entries = {f["path"]: f for f in plan["files"]}
        self.verified: dict[str, dict] = {}
        self._jlock = threading.Lock()
        # fsync and journal in the background: a download worker moves on to its next file while
        # the verified one goes to disk (the journal line is written only after its fsync).
        self._durable = concurrent.futures.ThreadPoolExecutor(2)
        self._pending: list[concurrent.futures.Future] = []
        self.timing: dict[str, float] = {}  # seconds of the fetch's phases, for the result

    # The lock: a second run for the same revision (an async job that outlived its play) waits.
    @contextlib.contextmanager
    def locked(self, progress: Progress | None = None):
        self.p["staging_root"].mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.p["staging_root"], 0o700)
        fd = os.open(self.p["lock"], os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                print(f"waiting for the staging run already in progress (pid {holder or '?'})", file=sys.stderr)
                if progress is not None:
                    progress.phase = f"waiting for pid {holder or '?'}"
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)

    def load_journal(self) -> None:
        """Files verified by an earlier run, still with the size and mtime they were verified with."""
        self.verified = {}
        try:
            lines = self.p["journal"].read_text(encoding="utf-8").splitlines()
        except OSError:
            return
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line torn by a kill
            entry = self.entries.get(rec.get("path"))
            if entry is None:
                continue
            algo, expected = rule(entry)
            if rec.get("algo") != algo or rec.get("hash") != expected or rec.get("size") != entry["size"]:
                continue
            try:
                st = os.stat(self.p["staging"] / rec["path"])
            except OSError:
                continue
            if st.st_size == rec["size"] and st.st_mtime_ns == rec["mtime_ns"]:
                self.verified[rec["path"]] = rec

    def record(self, rec: dict) -> None:
        with self._jlock:
            with open(self.p["journal"], "a", encoding="utf-8") as f:
                f.write(json.dumps(rec, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
            self.verified[rec["path"]] = rec

    def rewrite_journal(self) -> None:
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.verified.values())
        write_atomic(self.p["journal"], text, 0o600)

    def verify_file(self, path: str, counter=None, digest: str | None = None) -> tuple[bool, str]:
        """Hash one staged file against the plan; a good file is fsynced and journaled.

        `digest` is the sha256 the Mover computed while the file arrived; when it matches, the
        file is not read again (any other value, or none, means a full hash).
        """
        entry = self.entries[path]
        target = self.p["staging"] / path
        try:
            size = target.stat().st_size
        except OSError:
            return False, "missing"
        if size != entry["size"]:
            return False, f"size {size}, expected {entry['size']}"
        algo, expected = rule(entry)
        got = digest if (digest is not None and algo == "sha256" and digest == expected) else hash_of(target, algo, counter)
        if algo != "size" and got != expected:
            return False, f"{algo} {got}, expected {expected}"
        self._pending.append(self._durable.submit(self._persist, path, size, algo, expected))
        return True, ""

    def _persist(self, path: str, size: int, algo: str, expected: str) -> None:
        target = self.p["staging"] / path
        fsync_file(target)  # verified means on disk: a power cut must not leave a journaled file torn
        st = target.stat()
        self.record({"path": path, "size": size, "mtime_ns": st.st_mtime_ns, "algo": algo, "hash": expected})

    def done_count(self) -> int:
        """Files verified, counting those whose fsync is still under way."""
        return len(self.verified) + sum(1 for f in self._pending if not f.done())

    def flush(self) -> None:
        """Wait until every verified file is on disk and journaled."""
        while self._pending:
            self._pending.pop().result()

    def discard(self, path: str) -> None:
        """Remove a bad file and the client's metadata about it (the next fetch starts clean)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.p["staging"] / path)
        meta = self.p["staging"] / ".cache" / "huggingface" / "download" / (path + ".metadata")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(meta)
        self.verified.pop(path, None)

    def bytes_present(self) -> int:
        """Bytes of planned files on disk now: verified, complete and partial (the client's .incomplete)."""
        total = 0
        for path, entry in self.entries.items():
            if path in self.verified:
                total += entry["size"]
                continue
            with contextlib.suppress(OSError):
                total += min(os.stat(self.p["staging"] / path).st_size, entry["size"])
        dl = self.p["staging"] / ".cache" / "huggingface" / "download"
        if dl.is_dir():
            for root, _dirs, names in os.walk(dl):
                for n in names:
                    if n.endswith(".incomplete"):
                        with contextlib.suppress(OSError):
                            total += os.stat(os.path.join(root, n)).st_size
        return total

    def adopt_unverified(self, workers: int, progress: Progress) -> None:
        """Hash staged files of the planned size that no journal line covers (a run killed before hashing)."""
        todo = []
        for path, entry in self.entries.items():
            if path in self.verified:
                continue
            try:
                size = os.stat(self.p["staging"] / path).st_size
            except OSError:
                continue
            if size == entry["size"]:
                todo.append(path)
            elif size > entry["size"]:
                self.discard(path)  # longer than the file can be: not a partial of it
        if not todo:
            return
        progress.phase = "hashing files found in staging"

        def one(path):
            ok, _why = self.verify_file(path)
            if not ok:
                self.discard(path)
        with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
            list(pool.map(one, todo))
        self.flush()

    def missing(self) -> list[dict]:
        return [e for p, e in self.entries.items() if p not in self.verified]


# --------------------------------------------------------------------------- sources


def hub_environment(source: dict, hf_home: str) -> None:
    """Settings the client reads at import: endpoint, private HF_HOME, timeouts, proxy, CA bundle."""
    env = os.environ
    ensure_dir(Path(hf_home), 0o700)
    env["HF_HOME"] = hf_home
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    env["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    env["HF_HUB_ETAG_TIMEOUT"] = str(source.get("etag_timeout", 10))
    env["HF_HUB_DOWNLOAD_TIMEOUT"] = str(source.get("download_timeout", 60))
    env["HF_ENDPOINT"] = source["endpoint"].rstrip("/")
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("HF_TOKEN", None)
    if source.get("xet"):
        env.pop("HF_HUB_DISABLE_XET", None)
    else:
        env["HF_HUB_DISABLE_XET"] = "1"  # plain HTTP: resumable with Range, works through any mirror
    for key, value in (source.get("proxy_env") or {}).items():
        env[str(key)] = str(value)
    if source.get("ca_bundle"):
        env["SSL_CERT_FILE"] = source["ca_bundle"]  # httpx (the client's HTTP library) reads it
        env["REQUESTS_CA_BUNDLE"] = source["ca_bundle"]


def tune_transport(read_size: int) -> None:
    """Move bytes in `read_size` pieces: socket reads (httpcore: 64 KiB) and the client's writes (10 MB).

    The client streams through httpx/httpcore, which parses every 64 KiB read in Python, and gathers
    10 MB per write (httpx's ByteChunker copies each piece into a buffer first). On a host with few
    cores that caps staging far below the link: measured here with 805 MB and 8 files at a time,
    the untuned client took 4.6 s, 1 MiB reads 2.5 s, 1 MiB reads and writes 1.4 s (curl: 1.3 s).
    Smaller writes also put a killed download's bytes on disk sooner (resume loses at most one
    piece). Requests, headers, resume, retries and checks stay the client's own; where an
    attribute is missing (another version) nothing changes.
    """
    if read_size <= 0:
        return
    try:
        from httpcore._sync import http11  # noqa: PLC0415
        from huggingface_hub import constants  # noqa: PLC0415
    except ImportError:
        return
    if isinstance(getattr(http11.HTTP11Connection, "READ_NUM_BYTES", None), int):
        http11.HTTP11Connection.READ_NUM_BYTES = read_size
    if isinstance(getattr(constants, "DOWNLOAD_CHUNK_SIZE", None), int):
        constants.DOWNLOAD_CHUNK_SIZE = read_size


def read_token(source: dict):
    """The token from its 0600 file, or False (never a token found elsewhere on the host)."""
    path = source.get("token_file") or ""
    if path and os.path.isfile(path):
        token = Path(path).read_text(encoding="utf-8").strip()
        if token:
            return token
    return False


def describe_hub_error(exc: BaseException, repo_id: str, what: str, token) -> tuple[str, bool]:
    """(message, fatal) for an exception of the client; fatal errors are not retried."""
    from huggingface_hub import errors as hf_errors  # noqa: PLC0415 (only in the venv)

    status = getattr(getattr(exc, "response", None), "status_code", None)
    name = type(exc).__name__
    if isinstance(exc, hf_errors.GatedRepoError):
        if status == 403:
            return (f"{repo_id} is gated and the account of sglang_model_hf_token has no access to it "
                    f"(403 GatedRepo): accept its conditions on the Hub with that account", True)
        return (f"{repo_id} is gated and "
                f"{'sglang_model_hf_token is empty' if not token else 'sglang_model_hf_token was not accepted'} "
                f"(401 GatedRepo): set it from ansible-vault", True)
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return f"{repo_id}: revision not found ({status} RevisionNotFound) while fetching {what}", True
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        return (f"{repo_id}: repository not found ({status} RepoNotFound) while fetching {what}, "
                "or it is private and sglang_model_hf_token has no access", True)
    if isinstance(exc, getattr(hf_errors, "RemoteEntryNotFoundError", hf_errors.EntryNotFoundError)):
        return f"{repo_id}: {what} does not exist at this revision ({status} EntryNotFound)", True
    if status == 401:
        return f"{repo_id}: sglang_model_hf_token was rejected (401) while fetching {what}", True
    if status == 403:
        return f"{repo_id}: access forbidden (403) while fetching {what}", True
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"no space left on the device while writing {what}", True
    text = str(exc).strip().splitlines()
    return f"{what}: {name}: {text[0] if text else ''}".strip(), False


class MoveError(Exception):
    """A transfer that failed; `fatal` ones (a refusal, a plan that disagrees) are not retried."""

    def __init__(self, message: str, fatal: bool = False):
        super().__init__(message)
        self.fatal = fatal


def shown(url: str) -> str:
    """A URL for messages: no query string (a CDN's signed URL carries its credentials there)."""
    u = urllib.parse.urlsplit(url)
    return f"{u.scheme}://{u.netloc}{u.path}"


class Mover:
    """Move one file's bytes over HTTP(S) with the standard library: resumable, hashed, durable.

    The client (huggingface_hub) still does everything but the bytes: the file's metadata request
    with the vault token (which answers where the bytes are: the Hub itself, a CDN, or Xet's bridge),
    the headers. Its own byte path (httpx, httpcore, h11) copies each piece in Python several times;
    here each piece is read straight into one buffer (`readinto`), written and hashed, and every
    WRITEBACK bytes pushed to disk (`sync_file_range`), all with the interpreter lock released, so
    threads overlap on few cores. Measured: README, Throughput.

    The partial file is the client's own `.incomplete` (same name, same place), so a download started
    by either resumes in the other. Settings follow the client's: the proxy variables of the
    environment (`https_proxy`, `no_proxy`, ...), the CA bundle (`SSL_CERT_FILE`, else the system's
    and certifi's), `Accept-Encoding: identity`, redirects followed with the Authorization header
    dropped when the host changes, a stalled read given up after the download timeout, and a broken
    stream resumed with `Range` up to 5 times in a row without new bytes.
    """

    STALLS = 5
    REDIRECTS = 8
    WRITEBACK = 32 << 20  # bytes between writeback starts (sync_file_range); 0: only the fsync at the end

    def __init__(self, source: dict, read_size: int):
        self.timeout = float(source.get("download_timeout", 60))
        self.read_size = max(64 << 10, read_size)
        self.ca_bundle = source.get("ca_bundle") or ""
        self._ssl: ssl.SSLContext | None = None
        self._ssl_lock = threading.Lock()
        self.proxies = urllib.request.getproxies_environment()

    @property
    def ssl(self) -> ssl.SSLContext:
        """The TLS context, made at the first https URL (loading CA files costs ~0.1 s)."""
        with self._ssl_lock:
            if self._ssl is None:
                if self.ca_bundle:
                    self._ssl = ssl.create_default_context(cafile=self.ca_bundle)
                else:
                    self._ssl = ssl.create_default_context()
                    with contextlib.suppress(ImportError, OSError):
                        import certifi  # noqa: PLC0415 (the client's dependency, in its venv)
                        self._ssl.load_verify_locations(certifi.where())
            return self._ssl

    def proxy_for(self, u: urllib.parse.SplitResult) -> str | None:
        if urllib.request.proxy_bypass_environment(u.netloc, self.proxies):
            return None
        return self.proxies.get(u.scheme) or self.proxies.get("all")

    def supports(self, url: str) -> bool:
        """False where the client must move the bytes itself (a proxy spoken to over TLS)."""
        u = urllib.parse.urlsplit(url)
        proxy = self.proxy_for(u)
        return u.scheme in ("http", "https") and (proxy is None or urllib.parse.urlsplit(proxy).scheme == "http")

    def connect(self, u: urllib.parse.SplitResult) -> tuple[http.client.HTTPConnection, str, dict]:
        """A connection for URL u, the request target, and headers for the proxy."""
        port = u.port or (443 if u.scheme == "https" else 80)
        target = u.path or "/"
        if u.query:
            target += "?" + u.query
        proxy = self.proxy_for(u)
        if proxy is None:
            if u.scheme == "https":
                return http.client.HTTPSConnection(u.hostname, port, timeout=self.timeout, context=self.ssl), target, {}
            return http.client.HTTPConnection(u.hostname, port, timeout=self.timeout), target, {}
        p = urllib.parse.urlsplit(proxy)
        auth = {}
        if p.username:
            pair = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password or '')}"
            auth["Proxy-Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        if u.scheme == "https":  # CONNECT through the proxy, then TLS with the origin
            conn = http.client.HTTPSConnection(p.hostname, p.port or 80, timeout=self.timeout, context=self.ssl)
            conn.set_tunnel(u.hostname, port, headers=auth)
            return conn, target, {}
        return http.client.HTTPConnection(p.hostname, p.port or 80, timeout=self.timeout), \
            urllib.parse.urlunsplit(u._replace(fragment="")), auth

    def open(self, url: str, headers: dict, offset: int):
        """GET url from byte `offset`, following redirects: (connection, response)."""
        headers = {k: v for k, v in headers.items() if v is not None}
        headers["Accept-Encoding"] = "identity"
        if offset:
            headers["Range"] = f"bytes={offset}-"
        for _ in range(self.REDIRECTS):
            u = urllib.parse.urlsplit(url)
            conn, target, extra = self.connect(u)
            try:
                conn.request("GET", target, headers={**headers, **extra})
                resp = conn.getresponse()
            except BaseException:
                conn.close()
                raise
            if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
                resp.read(1 << 16)
                conn.close()
                nxt = urllib.parse.urljoin(url, resp.getheader("Location"))
                if urllib.parse.urlsplit(nxt).netloc != u.netloc:
                    headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
                url = nxt
                continue
            return conn, resp, url
        raise MoveError(f"more than {self.REDIRECTS} redirects from {shown(url)}")

    def fetch(self, url: str, headers: dict, incomplete: Path, final: Path, size: int, what: str) -> str:
        """Download url into `incomplete` (resuming what it holds), then rename it to `final`.

        Returns the sha256 of the file's bytes; the caller compares it with the plan's.
        """
        incomplete.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(incomplete, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            pos = os.fstat(fd).st_size
            if pos > size:  # longer than the file can be: not a partial of it
                os.ftruncate(fd, 0)
                pos = 0
            h = hashlib.sha256()
            buf = bytearray(self.read_size)
            view = memoryview(buf)
            done = 0
            while done < pos:  # the bytes a killed run left: hashed, not fetched again
                n = os.preadv(fd, [view[:min(len(view), pos - done)]], done)
                if not n:
                    break
                h.update(view[:n])
                done += n
            stalls, why = 0, ""
            while pos < size:
                before = pos
                try:
                    pos, h = self.transfer(url, headers, fd, pos, size, h, view, what)
                except MoveError:
                    raise
                except (OSError, http.client.HTTPException) as exc:
                    why = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
                else:
                    why = "the connection closed early"
                if pos >= size:
                    break
                stalls = 0 if pos > before else stalls + 1
                if stalls >= self.STALLS:
                    raise MoveError(f"{what}: no new bytes from {shown(url)} after {self.STALLS} attempts "
                                    f"({why}; {pos} of {size} bytes on disk)")
                time.sleep(1)
            os.fsync(fd)
        finally:
            os.close(fd)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(incomplete, final)
        return h.hexdigest()

    def transfer(self, url, headers, fd, pos, size, h, view, what):
        """One request from byte `pos`: (bytes on disk now, hash of them)."""
        conn, resp, where = self.open(url, headers, pos)
        try:
            if resp.status == 200 and pos:
                os.ftruncate(fd, 0)  # the server ignored Range: start over (as the client does)
                pos, h = 0, hashlib.sha256()
            elif resp.status == 206:
                got = re.match(r"bytes (\d+)-", resp.getheader("Content-Range") or "")
                if not got or int(got.group(1)) != pos:
                    raise MoveError(f"{what}: {shown(where)} answered Range bytes={pos}- with "
                                    f"Content-Range {resp.getheader('Content-Range')!r}")
            elif resp.status != 200:
                code = resp.getheader("X-Error-Code") or ""
                text = (resp.getheader("X-Error-Message") or resp.read(1 << 12).decode(errors="replace")).strip()
                raise MoveError(f"{what}: HTTP {resp.status}{' ' + code if code else ''} from {shown(where)}"
                                f"{': ' + text.splitlines()[0][:200] if text else ''}")
            sync = getattr(os, "sync_file_range", None) if self.WRITEBACK else None
            synced = pos
            while pos < size:
                n = resp.readinto(view[:min(len(view), size - pos)])
                if not n:
                    break
                piece = view[:n]
                written = 0
                while written < n:
                    written += os.pwrite(fd, piece[written:], pos + written)
                h.update(piece)
                pos += n
                if sync is not None and pos - synced >= self.WRITEBACK:
                    # Start writing back what arrived, in large ranges: the fsync at the end has little left.
                    sync(fd, synced, pos - synced, os.SYNC_FILE_RANGE_WRITE)
                    synced = pos
            return pos, h
        finally:
            conn.close()


def fetch_hub(spec: dict, staging: Staging, files: list[dict], progress: Progress) -> int:
    """Download files into staging, verifying each as it lands.

    Every file: the client's metadata request (the token, errors, where the bytes are), then the
    Mover's download; Xet transfers (when enabled) and TLS proxies through the client's hf_hub_download.
    """
    source = spec["source"]
    hub_environment(source, spec["hf_home"])
    read_size = int(source.get("read_size", 1 << 20))
    started = time.monotonic()
    tune_transport(read_size)
    # After the environment is set: the client reads it at import.
    from huggingface_hub import get_hf_file_metadata, get_session, hf_hub_download, hf_hub_url  # noqa: PLC0415
    from huggingface_hub._local_folder import get_local_download_paths  # noqa: PLC0415
    from huggingface_hub.utils import build_hf_headers  # noqa: PLC0415

    get_session()  # the client's HTTP session (an SSL context, once), made here, not by 8 threads queueing for it
    staging.timing["client_start"] = round(time.monotonic() - started, 3)

    token = read_token(source)
    repo_id, sha = spec["repo_id"], spec["plan"]["revision"]
    endpoint = source["endpoint"].rstrip("/")
    etag_timeout = float(source.get("etag_timeout", 10))
    mover = Mover(source, read_size if read_size > 0 else 1 << 20)
    attempts = max(1, int(spec.get("retries", 3)))
    fetched = {"files": 0}
    stop = threading.Event()
    progress.phase = "downloading"

    def with_client(path: str) -> None:
        hf_hub_download(repo_id, path, revision=sha, local_dir=str(staging.p["staging"]), token=token,
                        endpoint=endpoint, etag_timeout=etag_timeout)

    def move(entry: dict) -> str | None:
        """One file: the client's metadata request, then the Mover's download. Its sha256, if moved."""
        path = entry["path"]
        url = hf_hub_url(repo_id, path, revision=sha, endpoint=endpoint)
        meta = get_hf_file_metadata(url, token=token, timeout=etag_timeout, endpoint=endpoint)
        if meta.xet_file_data is not None and source.get("xet"):
            with_client(path)  # hf_xet's native transfer
            return None
        lfs = bool(entry.get("sha256"))
        if meta.size != entry["size"] or (lfs and meta.etag != entry["sha256"]):
            hub, planned = f"{meta.size} bytes", f"{entry['size']} bytes"
            if lfs:
                hub, planned = f"{hub}, sha256 {meta.etag}", f"{planned}, sha256 {entry['sha256']}"
            raise MoveError(f"{repo_id}: the Hub describes {path} as {hub}; the plan as {planned}", fatal=True)
        headers = build_hf_headers(token=token)
        location = url
        # As the client does: a metadata answer that redirected elsewhere (a CDN: a signed URL) is
        # fetched directly, without the token; Xet-backed files from the resolve URL, redirects followed.
        if meta.xet_file_data is None and meta.location and meta.location != url:
            location = meta.location
            if urllib.parse.urlsplit(location).netloc != urllib.parse.urlsplit(url).netloc:
                headers.pop("authorization", None)
        if not mover.supports(location):
            with_client(path)
            return None
        incomplete = get_local_download_paths(staging.p["staging"], path).incomplete_path(meta.etag or "none")
        digest = mover.fetch(location, headers, incomplete, staging.p["staging"] / path, entry["size"], path)
        return digest if lfs else None

    def one(entry):
        path = entry["path"]
        for attempt in range(1, attempts + 1):
            if stop.is_set():
                return
            digest = None
            try:
                digest = move(entry)
            except MoveError as exc:
                message, fatal = str(exc), exc.fatal
            except Exception as exc:  # noqa: BLE001 (every client error becomes one clear message)
                message, fatal = describe_hub_error(exc, repo_id, path, token)
            else:
                ok, why = staging.verify_file(path, digest=digest)
                if ok:
                    fetched["files"] += 1
                    progress.files_done = staging.done_count()
                    return
                staging.discard(path)
                message, fatal = f"{repo_id}: {path} does not match the Hub's checksum ({why})", False
            if fatal or attempt == attempts:
                stop.set()
                raise StageError(f"{message} (from {endpoint}, attempt {attempt} of {attempts})") from None
            time.sleep(min(30, 2 ** attempt))
    run_parallel(one, sorted(files, key=lambda e: -e["size"]), int(source.get("max_workers", 8)), stop)
    return fetched["files"]


def run_parallel(fn, items, workers: int, stop: threading.Event) -> None:
    """Run fn over items; the first failure stops the others and is raised."""
    pool = concurrent.futures.ThreadPoolExecutor(max(1, workers))
    futures = [pool.submit(fn, item) for item in items]
    try:
        for fut in concurrent.futures.as_completed(futures):
            fut.result()
    except BaseException:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


RSYNC_ERRORS = {
    5: "the peer refused the copy (rsync: authentication or module error)",
    10: "cannot reach the peer's rsync daemon (socket error)",
    12: "rsync protocol stream error (the peer went away?)",
    23: "some files could not be copied (missing on the peer?)",
    30: "timeout while copying from the peer",
    35: "timeout waiting for the peer's rsync daemon",
}


def balanced(files: list[dict], n: int) -> list[list[dict]]:
    """Split files into n lists of about equal bytes (largest first onto the lightest list)."""
    buckets = [[] for _ in range(max(1, n))]
    loads = [0] * len(buckets)
    for f in sorted(files, key=lambda e: -e["size"]):
        i = loads.index(min(loads))
        buckets[i].append(f)
        loads[i] += f["size"]
    return [b for b in buckets if b]


def fetch_rsync(spec: dict, staging: Staging, files: list[dict], progress: Progress) -> int:
    """Copy files from a peer's verified copy through its one-round rsync daemon, then verify each."""
    source = spec["source"]
    rsync = shutil.which("rsync")
    if rsync is None:
        raise StageError("rsync is not installed on this host (the role installs it for fan-out)")
    progress.phase = f"copying from {source.get('peer', 'a peer')}"
    stop = threading.Event()
    count = {"files": 0}
    workdir = staging.p["staging_root"]
    attempts = max(1, int(spec.get("retries", 3)))

    def bucket_copy(index_and_bucket):
        index, bucket = index_and_bucket
        pending = list(bucket)
        for attempt in range(1, attempts + 1):
            if stop.is_set() or not pending:
                return
            listing = workdir / f"{spec['plan']['revision']}.rsync-{index}.list"
            listing.write_text("".join(e["path"] + "\n" for e in pending), encoding="utf-8")
            argv = [rsync, "--files-from", str(listing), "--times",
                    "--append-verify", "--timeout", str(int(source.get("io_timeout", 120))),
                    "--contimeout", "30", "--no-motd", "--password-file", source["password_file"],
                    *(["--address", source["address"]] if source.get("address") else []),
                    source["url"].rstrip("/") + "/", str(staging.p["staging"]) + "/"]
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            listing.unlink(missing_ok=True)
            if proc.returncode != 0:
                said = " | ".join(line.strip() for line in proc.stderr.strip().splitlines()[-3:])
                if attempt == attempts or proc.returncode == 5:
                    stop.set()
                    raise StageError(f"copy from {source.get('peer', source['url'])} failed: "
                                     f"{RSYNC_ERRORS.get(proc.returncode, f'rsync exit {proc.returncode}')}: {said}")
                time.sleep(min(30, 2 ** attempt))
                continue
            still = []
            for entry in pending:
                ok, why = staging.verify_file(entry["path"])
                if ok:
                    count["files"] += 1
                    progress.files_done = staging.done_count()
                else:
                    staging.discard(entry["path"])
                    still.append((entry, why))
            pending = [e for e, _ in still]
            if pending and attempt == attempts:
                stop.set()
                raise StageError(f"copy from {source.get('peer')}: {pending[0]['path']} does not match the "
                                 f"manifest after {attempts} copies ({still[0][1]})")
    buckets = balanced(files, int(source.get("streams", 4)))
    run_parallel(bucket_copy, list(enumerate(buckets)), len(buckets), stop)
    return count["files"]


# --------------------------------------------------------------------------- sync


def manifest_for(spec: dict, entries: list[dict], directory: Path, source: dict) -> dict:
    plan = spec["plan"]
    where = {k: v for k, v in source.items() if k in ("kind", "endpoint", "peer", "path")}
    return {
        "format": 1,
        "tool": f"sglang_model_stage.py {TOOL_VERSION}",
        "client": spec.get("client", ""),
        "name": spec["name"],
        "repo_id": spec["repo_id"],
        "revision": plan["revision"],
        "requested_revision": spec.get("requested_revision", plan["revision"]),
        "allow_patterns": spec.get("allow_patterns"),
        "ignore_patterns": spec.get("ignore_patterns"),
        "path": str(directory),
        "source": where,
        "staged_at": now_iso(),
        "total_bytes": sum(e["size"] for e in entries),
        "files": sorted(entries, key=lambda e: e["path"]),
    }


def make_read_only(directory: Path) -> None:
    """Files 0444 and directories 0555, owned by root: readable by the server, changed by nobody."""
    def fix(path, mode):
        if os.geteuid() == 0:
            os.chown(path, 0, 0)
        os.chmod(path, mode)
    for root, dirs, names in os.walk(directory, topdown=False):
        for n in names:
            fix(os.path.join(root, n), 0o444)
        for d in dirs:
            fix(os.path.join(root, d), 0o555)
    fix(directory, 0o555)


def tidy_staging(staging: Staging) -> None:
    """Leave only the planned files: the client's metadata and anything unplanned go."""
    root = staging.p["staging"]
    shutil.rmtree(root / ".cache", ignore_errors=True)
    for dirpath, dirnames, names in os.walk(root, topdown=False):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), root)
            if rel not in staging.entries:
                os.unlink(os.path.join(dirpath, n))
        for d in dirnames:
            full = os.path.join(dirpath, d)
            with contextlib.suppress(OSError):
                os.rmdir(full)  # only empty directories go


def reopen(p: dict, manifest: dict | None, bad: set[str], staging: Staging) -> None:
    """Turn a staged revision with bad files back into a staging area (the manifest goes first)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(p["manifest"])
    fsync_dir(p["manifest"].parent)
    if p["staging"].exists():
        shutil.rmtree(p["staging"])
    p["staging_root"].mkdir(mode=0o700, parents=True, exist_ok=True)
    os.rename(p["final"], p["staging"])
    os.chmod(p["staging"], 0o700)
    fsync_dir(p["staging_root"])
    staging.verified = {}
    for f in (manifest or {}).get("files", []):
        if f["path"] in bad or f["path"] not in staging.entries:
            continue
        try:
            st = os.stat(p["staging"] / f["path"])
        except OSError:
            continue
        if st.st_size == f["size"] and st.st_mtime_ns == f["mtime_ns"]:
            staging.verified[f["path"]] = {k: f[k] for k in ("path", "size", "mtime_ns", "algo", "hash")}
    staging.rewrite_journal()
    for path in bad:
        staging.discard(path)


def sync(spec: dict) -> dict:
    plan = spec["plan"]
    sha = plan["revision"]
    if not SHA_RE.match(sha):
        raise StageError(f"the plan's revision {sha!r} is not a commit sha")
    for entry in plan["files"]:
        safe_relpath(entry["path"])
    model_dir = Path(spec["model_dir"])
    source = spec["source"]
    mode = spec.get("verify", "quick")
    workers = int(spec.get("hash_workers") or min(16, os.cpu_count() or 1))
    total = sum(e["size"] for e in plan["files"])
    progress = Progress(Path(spec["progress"]) if spec.get("progress") else None, spec["name"], total,
                        len(plan["files"]), source["kind"]).start(float(spec.get("progress_interval", 2)))
    started = time.monotonic()
    try:
        if source["kind"] == "local":
            result = sync_local(spec, model_dir, mode, workers, progress)
        else:
            result = sync_copy(spec, model_dir, mode, workers, progress)
    except BaseException:
        progress.stop("failed")
        raise
    progress.stop("done")
    result["seconds"] = round(time.monotonic() - started, 2)
    if result.get("fetched_bytes") and result["seconds"] > 0:
        result["rate"] = round(result["fetched_bytes"] / result["seconds"])
    result["summary"] = summary_line(result)
    return result


def sync_copy(spec: dict, model_dir: Path, mode: str, workers: int, progress: Progress) -> dict:
    plan = spec["plan"]
    source = spec["source"]
    p = model_paths(model_dir, plan["revision"])
    staging = Staging(model_dir, plan)
    result = {"name": spec["name"], "revision": plan["revision"], "path": str(p["final"]),
              "manifest": str(p["manifest"]), "changed": False, "fetched_files": 0, "fetched_bytes": 0,
              "rehashed_files": 0, "repaired": [], "source": source["kind"]}
    ensure_dir(model_dir, 0o755)
    with staging.locked(progress):
        manifest = load_json(p["manifest"])
        if p["final"].is_symlink():
            # Staged from a local directory before; now copied: the link and its manifest go.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p["manifest"])
            p["final"].unlink()
            manifest = None
        if p["final"].is_dir() and not p["final"].is_symlink():
            if manifest_matches(manifest, plan):
                if mode == "full":
                    progress.phase = "verifying (full)"
                    hashed = ByteCounter()
                    progress.measure = hashed.value
                    bad = rehash(p["final"], manifest["files"], workers, hashed.add)
                    result["rehashed_files"] = len(manifest["files"])
                else:
                    progress.phase = "checking (size and mtime)"
                    suspects = quick_check(p["final"], manifest["files"])
                    bad = rehash(p["final"], suspects, workers) if suspects else []
                    result["rehashed_files"] = len(suspects)
                    good = {s["path"] for s in suspects} - {b["path"] for b in bad}
                    if good and not bad:
                        refresh_mtimes(p, manifest, good)
                        result["changed"] = True
                if not bad:
                    progress.files_done = len(manifest["files"])
                    progress.measure = lambda: sum(f["size"] for f in manifest["files"])
                    result["status"] = "verified"
                    return result
                result["repaired"] = sorted(b["path"] for b in bad)
                if not spec.get("fetch", True):
                    reopen(p, manifest, {b["path"] for b in bad}, staging)
                    result.update(changed=True, status="reopened")
                    return result
                reopen(p, manifest, {b["path"] for b in bad}, staging)
                result["changed"] = True
            else:
                # Renamed into place but no manifest (killed just before writing it), or a plan that
                # changed: every file is hashed again from staging.
                reopen(p, None, set(), staging)
                result["changed"] = True
        elif manifest is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p["manifest"])  # a manifest without its directory describes nothing
        if not spec.get("fetch", True):
            raise StageError(f"{spec['name']}: no verified copy of {plan['revision']} at {p['final']}")
        p["staging"].mkdir(mode=0o700, parents=True, exist_ok=True)
        staging.load_journal()
        staging.adopt_unverified(workers, progress)
        progress.measure = staging.bytes_present
        progress.files_done = staging.done_count()
        missing = staging.missing()
        start_bytes = staging.bytes_present()
        if missing:
            result["changed"] = True
            check_space(p["staging"], sum(e["size"] for e in missing) - partial_bytes(staging, missing),
                        int(spec.get("min_free_bytes", 0)))
            fetch = fetch_hub if source["kind"] == "hub" else fetch_rsync
            started = time.monotonic()
            result["fetched_files"] = fetch(spec, staging, missing, progress)
            staging.flush()
            # How long the bytes took (client_start: importing the client and its HTTP session).
            result["timing"] = {"fetch": round(time.monotonic() - started, 3), **staging.timing}
            leftover = staging.missing()
            if leftover:
                raise StageError(f"{len(leftover)} planned files are still missing after the fetch, "
                                 f"e.g. {leftover[0]['path']}")
        result["fetched_bytes"] = max(0, plan_total(plan) - start_bytes)
        progress.phase = "finalizing"
        tidy_staging(staging)
        make_read_only(p["staging"])
        os.rename(p["staging"], p["final"])
        fsync_dir(model_dir)
        entries = [staging.verified[e["path"]] for e in plan["files"]]
        write_atomic(p["manifest"], json.dumps(manifest_for(spec, entries, p["final"], source), indent=1,
                                               sort_keys=True) + "\n", 0o444)
        p["journal"].unlink(missing_ok=True)
        progress.files_done = len(entries)
        result.update(changed=True, status="staged")
        return result


def plan_total(plan: dict) -> int:
    return sum(e["size"] for e in plan["files"])


def partial_bytes(staging: Staging, missing: list[dict]) -> int:
    return max(0, staging.bytes_present() - sum(staging.entries[p]["size"] for p in staging.verified))


def refresh_mtimes(p: dict, manifest: dict, paths: set[str]) -> None:
    """Files touched but identical (rehashed): record their new mtime so the next check is quick again."""
    for f in manifest["files"]:
        if f["path"] in paths:
            f["mtime_ns"] = os.stat(p["final"] / f["path"]).st_mtime_ns
    write_atomic(p["manifest"], json.dumps(manifest, indent=1, sort_keys=True) + "\n", 0o444)


def check_space(where: Path, need: int, margin: int) -> None:
    st = os.statvfs(where)
    free = st.f_bavail * st.f_frsize
    if free < need + margin:
        raise StageError(f"{where} has {human(free)} free ({free} bytes); the files still to fetch need "
                         f"{human(need)} ({need} bytes) plus the margin {human(margin)}")


def sync_local(spec: dict, model_dir: Path, mode: str, workers: int, progress: Progress) -> dict:
    """A directory already on the host (a shared filesystem): verified in place, never copied."""
    plan = spec["plan"]
    src = Path(spec["source"]["path"])
    p = model_paths(model_dir, plan["revision"])
    result = {"name": spec["name"], "revision": plan["revision"], "path": str(p["final"]),
              "manifest": str(p["manifest"]), "changed": False, "fetched_files": 0, "fetched_bytes": 0,
              "rehashed_files": 0, "repaired": [], "source": "local", "local_dir": str(src)}
    problems = local_problems(src, plan)
    if problems:
        raise StageError(problems)
    real = Path(os.path.realpath(src))
    ensure_dir(model_dir, 0o755)
    manifest = load_json(p["manifest"])
    known = {}
    if manifest_matches(manifest, plan) and manifest.get("path") == str(real) and mode != "full":
        known = {f["path"]: f for f in manifest["files"]}
    todo = [e for e in plan["files"]
            if e["path"] not in known or quick_check(real, [known[e["path"]]])]
    hashed = ByteCounter(sum(e["size"] for e in plan["files"] if e["path"] not in {t["path"] for t in todo}))
    progress.measure = hashed.value
    progress.phase = "verifying the local directory"
    entries = dict(known)

    def one(entry):
        algo, expected = rule(entry)
        target = real / entry["path"]
        got = hash_of(target, algo, hashed.add)
        if algo != "size" and got != expected:
            return entry["path"], f"{algo} {got[:12]}..., expected {expected[:12]}..."
        st = target.stat()
        entries[entry["path"]] = {"path": entry["path"], "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                  "algo": algo, "hash": expected}
        progress.files_done += 1
        return None
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        bad = [b for b in pool.map(one, todo) if b]
    result["rehashed_files"] = len(todo)
    if bad:
        listed = ", ".join(f"{path} ({why})" for path, why in bad[:5])
        raise StageError(f"sglang_model_models[{spec['name']}].local_dir {src}: {len(bad)} files do not match "
                         f"the Hub's checksums for {plan['revision']}: {listed} (a local source is never repaired)")
    ordered = [entries[e["path"]] for e in plan["files"]]
    if not (manifest_matches(manifest, plan) and manifest.get("path") == str(real)
            and {f["path"]: f["mtime_ns"] for f in manifest["files"]} == {f["path"]: f["mtime_ns"] for f in ordered}):
        if p["final"].is_symlink() or not p["final"].exists():
            symlink_atomic(str(real), p["final"])
        else:
            raise StageError(f"{p['final']} exists and is not a link to the local source {real}")
        write_atomic(p["manifest"], json.dumps(manifest_for(spec, ordered, real, spec["source"]), indent=1,
                                               sort_keys=True) + "\n", 0o444)
        result["changed"] = True
    elif not (p["final"].is_symlink() and os.readlink(p["final"]) == str(real)):
        symlink_atomic(str(real), p["final"])
        result["changed"] = True
    result["status"] = "verified"
    progress.files_done = len(ordered)
    return result


def local_problems(src: Path, plan: dict) -> str:
    if not src.is_dir():
        return f"the local source directory {src} does not exist (sglang_model_models[].local_dir)"
    sizes = {}
    for e in plan["files"]:
        with contextlib.suppress(OSError):
            sizes[e["path"]] = os.stat(src / e["path"]).st_size
    problems = size_problems(plan["files"], sizes)
    if problems:
        return (f"the local source directory {src} lacks files of revision {plan['revision']} "
                f"(sglang_model_models[].local_dir): {problems}")
    return ""


def size_problems(expected: list[dict], sizes: dict[str, int]) -> str:
    """What a directory lacks against the plan's files ({path, size}), from the sizes found in it (a path
    absent from `sizes` is missing): "N missing: a, b; M of another size: c (1 bytes, expected 2)", or "".
    The controller's check of a local source (filter_plugins/sglang_model.py) reads it from here too."""
    missing = [e["path"] for e in expected if e["path"] not in sizes]
    wrong = [f"{e['path']} ({sizes[e['path']]} bytes, expected {e['size']})" for e in expected
             if e["path"] in sizes and sizes[e["path"]] != e["size"]]
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    if wrong:
        parts.append(f"{len(wrong)} of another size: {', '.join(wrong[:5])}{' ...' if len(wrong) > 5 else ''}")
    return "; ".join(parts)


# --------------------------------------------------------------------------- preflight


def nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def under(child: str, parent: str) -> bool:
    child, parent = os.path.normpath(child), os.path.normpath(parent)
    return child == parent or child.startswith(parent.rstrip("/") + "/")


def preflight(spec: dict) -> dict:
    """What validation needs to know about this host; reads only."""
    root = Path(spec["root"])
    existing = nearest_existing(root)
    real_root = os.path.join(os.path.realpath(existing), os.path.relpath(root, existing)) if existing != root \
        else os.path.realpath(root)
    real_root = os.path.normpath(real_root)
    st = os.statvfs(existing)
    out = {"root": str(root), "root_realpath": real_root, "root_exists": root.is_dir(),
           "free_bytes": st.f_bavail * st.f_frsize, "fs_checked_at": str(existing),
           "inside_writable": [w for w in spec.get("writable_paths", [])
                               if under(real_root, os.path.realpath(w)) or under(str(root), w)],
           "cpus": os.cpu_count() or 1, "models": {}}
    for m in spec.get("models", []):
        out["models"][m["name"]] = preflight_model(root / m["name"], m, spec.get("writable_paths", []))
    return out


def preflight_model(model_dir: Path, m: dict, writable: list[str]) -> dict:
    info = {"revisions": {}, "current": None, "staging": {}, "local": None}
    cur = model_dir / "current"
    if cur.is_symlink():
        info["current"] = os.readlink(cur)
    if model_dir.is_dir():
        for manifest_path in sorted(model_dir.glob("*.manifest.json")):
            sha = manifest_path.name[: -len(".manifest.json")]
            manifest = load_json(manifest_path)
            rev = {"complete": False}
            if manifest_matches(manifest, None) and manifest.get("revision") == sha:
                directory = Path(os.path.realpath(model_dir / sha))
                suspects = quick_check(directory, manifest["files"]) if directory.is_dir() else [{"why": "gone"}]
                rev = {"complete": not suspects, "suspects": len(suspects), "repo_id": manifest.get("repo_id"),
                       "allow_patterns": manifest.get("allow_patterns"),
                       "ignore_patterns": manifest.get("ignore_patterns"),
                       "total_bytes": manifest.get("total_bytes"), "staged_at": manifest.get("staged_at"),
                       "source": manifest.get("source"), "path": str(directory),
                       "files": [{k: f.get(k) for k in ("path", "size", "algo", "hash")} for f in manifest["files"]]}
            info["revisions"][sha] = rev
        staging_root = model_dir / ".staging"
        if staging_root.is_dir():
            for d in staging_root.iterdir():
                if d.is_dir() and SHA_RE.match(d.name):
                    info["staging"][d.name] = journal_bytes(staging_root / f"{d.name}.journal", d)
    if m.get("source") == "local" and m.get("local_dir"):
        src = Path(m["local_dir"])
        local = {"path": str(src), "exists": src.is_dir(), "realpath": os.path.realpath(src), "files": {},
                 "inside_writable": [w for w in writable if under(os.path.realpath(src), os.path.realpath(w))]}
        if local["exists"]:
            for dirpath, dirnames, names in os.walk(src):
                dirnames[:] = [d for d in dirnames if not (dirpath == str(src) and d in FORBIDDEN_TOP)]
                for n in names:
                    full = os.path.join(dirpath, n)
                    with contextlib.suppress(OSError):
                        local["files"][os.path.relpath(full, src)] = os.stat(full).st_size
        info["local"] = local
    return info


def journal_bytes(journal: Path, staging_dir: Path) -> int:
    """Bytes already verified in a staging area (still the size and mtime they were verified with)."""
    total = 0
    seen = set()
    try:
        lines = journal.read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    for line in lines:
        try:
            rec = json.loads(line)
            st = os.stat(staging_dir / rec["path"])
        except (ValueError, OSError, KeyError, TypeError):
            continue
        if rec["path"] not in seen and st.st_size == rec["size"] and st.st_mtime_ns == rec["mtime_ns"]:
            seen.add(rec["path"])
            total += rec["size"]
    return total


# --------------------------------------------------------------------------- prune


def in_use_paths() -> set[str]:
    """Real paths that running processes name in their arguments, hold open or map."""
    used: set[str] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        base = f"/proc/{pid}"
        with contextlib.suppress(OSError):
            for arg in Path(base, "cmdline").read_bytes().split(b"\0"):
                if arg.startswith(b"/"):
                    used.add(os.fsdecode(arg))
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"{base}/fd"):
                with contextlib.suppress(OSError):
                    used.add(os.readlink(f"{base}/fd/{fd}"))
        with contextlib.suppress(OSError):
            for line in Path(base, "maps").read_text(errors="replace").splitlines():
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    used.add(parts[5])
    return used


def prune(spec: dict) -> dict:
    """Keep the newest `keep` complete revisions of each model; never current, wanted, protected or in use."""
    root = Path(spec["root"])
    keep = max(1, int(spec.get("keep", 2)))
    dry = bool(spec.get("dry_run"))
    used = in_use_paths()
    protect = [os.path.realpath(p) for p in spec.get("protect", [])]
    removed, kept = [], []
    for m in spec["models"]:
        model_dir = root / m["name"]
        if not model_dir.is_dir():
            continue
        wanted = set(m.get("keep_revisions", []))
        cur = model_dir / "current"
        if cur.is_symlink():
            wanted.add(os.path.basename(os.readlink(cur)))
        revs = []
        for manifest_path in model_dir.glob("*.manifest.json"):
            sha = manifest_path.name[: -len(".manifest.json")]
            manifest = load_json(manifest_path) or {}
            revs.append((manifest.get("staged_at") or "", sha))
        revs.sort(reverse=True)
        protected_now = set(wanted)
        for _when, sha in revs:
            entry = model_dir / sha
            real = os.path.realpath(entry)
            busy = any(under(u, real) or under(u, str(entry)) for u in used) or any(under(real, p) for p in protect)
            if busy:
                protected_now.add(sha)
        survivors = [sha for _w, sha in revs if sha in protected_now]
        for _when, sha in revs:
            if sha in protected_now:
                continue
            if len(survivors) < keep:
                survivors.append(sha)
                continue
            removed.append(f"{m['name']}/{sha}")
            if not dry:
                remove_revision(model_dir, sha)
        kept += [f"{m['name']}/{s}" for s in survivors]
        # Staging leftovers of revisions nobody wants any more (a branch that moved on, a finished
        # revision's lock): never one that a running staging job holds.
        staging_root = model_dir / ".staging"
        if staging_root.is_dir():
            for d in sorted(staging_root.iterdir()):
                sha = d.name.split(".")[0]
                if not SHA_RE.match(sha) or sha in wanted or has_lock_holder(staging_root / f"{sha}.lock"):
                    continue
                if d.name.endswith(".lock") and sha in survivors:
                    continue
                removed.append(f"{m['name']}/.staging/{d.name}")
                if not dry:
                    if d.is_dir() and not d.is_symlink():
                        shutil.rmtree(d)
                    else:
                        d.unlink(missing_ok=True)
    return {"changed": bool(removed), "removed": removed, "kept": kept, "dry_run": dry}


def has_lock_holder(lock: Path) -> bool:
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def remove_revision(model_dir: Path, sha: str) -> None:
    """The manifest first (the revision stops being complete), then the files."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(model_dir / f"{sha}.manifest.json")
    fsync_dir(model_dir)
    entry = model_dir / sha
    if entry.is_symlink():
        entry.unlink()  # a local source: the directory is not ours
    elif entry.is_dir():
        shutil.rmtree(entry)


# --------------------------------------------------------------------------- plan (real client)


def plan_with_client(args) -> dict:
    """Plan a revision exactly as the role does, through the real client (model_info with file metadata)."""
    source = {"endpoint": args.endpoint, "token_file": args.token_file or "", "ca_bundle": args.ca_bundle or ""}
    hub_environment(source, args.hf_home)
    from huggingface_hub import HfApi  # noqa: PLC0415

    token = read_token(source)
    info = HfApi(endpoint=args.endpoint.rstrip("/")).model_info(args.repo_id, revision=args.revision,
                                                                 files_metadata=True, token=token)
    siblings = {s.rfilename: s for s in info.siblings or []}
    chosen = list(select(sorted(siblings), args.allow or None, args.ignore or None))
    files = []
    for path in chosen:
        s = siblings[path]
        if path.split("/")[0] in FORBIDDEN_TOP:
            continue
        files.append({"path": safe_relpath(path), "size": s.size, "blob_id": s.blob_id,
                      "sha256": s.lfs.sha256 if s.lfs else None})
    if not files:
        raise StageError(f"{args.repo_id}@{info.sha}: the patterns match no file")
    return {"repo_id": args.repo_id, "requested_revision": args.revision, "revision": info.sha, "files": files,
            "total_bytes": sum(f["size"] for f in files)}


# --------------------------------------------------------------------------- command line


def read_spec(args) -> dict:
    if getattr(args, "spec_b64", None):
        return json.loads(base64.b64decode(args.spec_b64))
    return json.loads(sys.stdin.read())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pf = sub.add_parser("preflight", help="read-only state of this host (JSON spec, base64)")
    pf.add_argument("--spec-b64", required=True)
    sub.add_parser("sync", help="stage one model revision (JSON spec on stdin)")
    vf = sub.add_parser("verify", help="rehash a staged revision (JSON spec on stdin)")
    vf.add_argument("--reopen", action="store_true", help="turn a corrupted copy back into staging for repair")
    ck = sub.add_parser("check", help="quick manifest check of staged model directories")
    ck.add_argument("paths", nargs="+")
    ck.add_argument("--full", action="store_true", help="rehash every file instead of size and mtime")
    pr = sub.add_parser("prune", help="remove old revisions (JSON spec on stdin)")
    pr.add_argument("--spec-b64")
    pl = sub.add_parser("plan", help="plan a revision with the real client")
    pl.add_argument("--endpoint", default=os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    pl.add_argument("--repo-id", required=True)
    pl.add_argument("--revision", default="main")
    pl.add_argument("--allow", action="append")
    pl.add_argument("--ignore", action="append")
    pl.add_argument("--token-file")
    pl.add_argument("--ca-bundle")
    pl.add_argument("--hf-home", default="/var/lib/sglang-model/hf-home")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "preflight":
            out = preflight(read_spec(args))
        elif args.cmd == "sync":
            out = sync(read_spec(args))
        elif args.cmd == "verify":
            spec = read_spec(args)
            spec["fetch"] = False
            if not args.reopen:
                out = check_staged(Path(spec["model_dir"]) / spec["plan"]["revision"], full=True,
                                   workers=int(spec.get("hash_workers") or min(16, os.cpu_count() or 1)))
                out["changed"] = False
            else:
                out = sync({**spec, "verify": "full"})
        elif args.cmd == "check":
            out = {"changed": False, "checked": [check_staged(Path(p), full=args.full) for p in args.paths]}
        elif args.cmd == "prune":
            out = prune(read_spec(args))
        else:
            out = plan_with_client(args)
    except StageError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{exc.filename or ''}: {exc.strerror or exc}")
    print(json.dumps(out, sort_keys=True))
    return 0


def fail(message: str) -> int:
    print(f"sglang_model_stage: {message}", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Crash-only: downloads still running in worker threads after a failure are abandoned, not
    # awaited (their partial files stay resumable; everything verified is journaled and fsynced).
    os._exit(code)
