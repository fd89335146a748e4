"""The progress file the role's poll loop reads, and the lines it prints."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

from .fsutil import write_atomic


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
