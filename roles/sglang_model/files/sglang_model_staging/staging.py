"""The staging area of one revision: its directory, its journal of verified files, its lock."""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import sys
import threading
from pathlib import Path

from .checks import hash_of, model_paths, rule
from .fsutil import fsync_file, write_atomic
from .progress import Progress


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
