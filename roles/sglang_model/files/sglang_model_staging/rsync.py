"""Copies from a peer's verified copy through its one-round rsync daemon (fan-out)."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

from .checks import StageError
from .progress import Progress
from .staging import Staging, run_parallel

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
