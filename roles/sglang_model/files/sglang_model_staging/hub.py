"""Downloads from the Hub (or a mirror) through the real, pinned huggingface_hub client.

The client answers every file's metadata request (the token, errors, redirects to a CDN) and moves
the small files, Xet transfers and those behind a TLS proxy; the Mover (mover.py) moves the rest.
"""

from __future__ import annotations

import errno
import os
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from .checks import FORBIDDEN_TOP, StageError, safe_relpath, select
from .fsutil import ensure_dir
from .mover import MoveError, Mover
from .progress import Progress
from .staging import Staging, run_parallel


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
    from huggingface_hub import errors as hf_errors  # only in the venv

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


def fetch_hub(spec: dict, staging: Staging, files: list[dict], progress: Progress) -> int:
    """Download files into staging, verifying each as it lands.

    Every file: the client's metadata request (the token, errors, where the bytes are), then the
    Mover's download; Xet transfers (when enabled) and TLS proxies through the client's hf_hub_download.
    """
    source = spec["source"]
    hub_environment(source, spec["hf_home"])
    read_size = int(source.get("read_size", 1 << 20))
    started = time.monotonic()
    # After the environment is set: the client reads it at import.
    from huggingface_hub import get_hf_file_metadata, get_session, hf_hub_download, hf_hub_url

    # The client's own name for a partial download (a private module: no public function names it),
    # so that a file started by either the client or the Mover resumes in the other. Read, never patched.
    from huggingface_hub._local_folder import get_local_download_paths
    from huggingface_hub.utils import build_hf_headers

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
            except Exception as exc:  # every client error becomes one clear message
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


def plan_with_client(args) -> dict:
    """Plan a revision exactly as the role does, through the real client (model_info with file metadata)."""
    source = {"endpoint": args.endpoint, "token_file": args.token_file or "", "ca_bundle": args.ca_bundle or ""}
    hub_environment(source, args.hf_home)
    from huggingface_hub import HfApi

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
