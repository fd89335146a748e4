#!/usr/bin/env python3
"""Read a staged model's files into the page cache before a planned restart, with progress, bounded by RAM.

Why: a restart whose weights come from the page cache reads them at memory speed instead of the disk's
(docs/validation/restart-h200: 4.4 s warm against 22 s cold for 34 GB on the H200 test bed's disk). After a
reboot, or once other files pushed the model out, the first start pays the disk. This reads the files the
server will load, ahead of the restart, while the old server still serves; pages already resident are
counted (mincore) and not read again.

It reads only when what is missing fits: the bytes not yet resident must be at most the host's available
memory (MemAvailable of /proc/meminfo) less --reserve-gib; otherwise it reads nothing and says why (a warm-up
that does not fit evicts its own first pages, or pushes out what the server needs, and gains nothing).

Output: progress lines on stderr every --progress-s seconds; one JSON object on stdout (and in --json):
{"status": "read" | "resident" | "skipped", "why", "files", "bytes", "resident_before", "resident_after",
"read_bytes", "seconds", "gb_per_s", "mem_available", "reserve"}. Exit 0 for each of those (a skip is a
decision, not a failure), 2 when a path is not a directory or holds no file.

Usage: sglang_page_cache_warm.py DIR [DIR...] [--reserve-gib 16] [--threads 8] [--json FILE] [--dry-run]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import mmap
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

GIB = 1 << 30
BLOCK = 16 << 20
# Files a loader never opens: the staging's own records and the repository's text.
SKIP_SUFFIXES = (".md", ".txt", ".lock", ".part")


def model_files(dirs: list[Path]) -> list[Path]:
    """Every regular file under the directories (weights, index, config, tokenizer), largest first; symlinks
    followed (a Hugging Face snapshot links into its blobs), each file once."""
    seen: dict[Path, Path] = {}
    for top in dirs:
        for root, _, names in os.walk(top, followlinks=True):
            for name in names:
                path = Path(root) / name
                if name.endswith(SKIP_SUFFIXES) or not path.is_file():
                    continue
                seen.setdefault(path.resolve(), path)
    return sorted(seen, key=lambda p: (-p.stat().st_size, str(p)))


def _libc():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    return libc


def resident_bytes(path: Path, libc=None) -> int:
    """Bytes of the file in the page cache (mincore over a read-only mapping, which reads nothing); 0 when it
    cannot be told."""
    size = path.stat().st_size
    if size == 0:
        return 0
    libc = libc or _libc()
    page = mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return 0
        try:
            vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
            if libc.mincore(addr, size, vec) != 0:
                return 0
            return min(size, sum(v & 1 for v in vec) * page)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def mem_available(meminfo: str | None = None) -> int:
    """MemAvailable of /proc/meminfo, in bytes (the kernel's estimate of what can be had without swapping)."""
    text = meminfo if meminfo is not None else Path("/proc/meminfo").read_text()
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no MemAvailable in /proc/meminfo")


def plan(sizes: int, resident: int, available: int, reserve: int) -> tuple[str, str]:
    """(status, why) before reading: resident, skipped or read."""
    missing = sizes - resident
    if missing <= 0:
        return "resident", f"all {sizes / 1e9:.2f} GB already in the page cache"
    room = available - reserve
    if missing > room:
        return "skipped", (f"{missing / 1e9:.2f} GB to read do not fit: {available / GIB:.1f} GiB available "
                           f"(MemAvailable) less a reserve of {reserve / GIB:.1f} GiB leaves {max(room, 0) / GIB:.1f} GiB")
    return "read", f"{missing / 1e9:.2f} GB to read, {room / GIB:.1f} GiB of room"


class Progress:
    def __init__(self, total: int, every: float, out=sys.stderr) -> None:
        self.total, self.every, self.out = total, every, out
        self.done, self.lock = 0, threading.Lock()
        self.started = self.last = time.monotonic()

    def add(self, n: int) -> None:
        with self.lock:
            self.done += n
            now = time.monotonic()
            if now - self.last >= self.every:
                self.last = now
                self.say(now)

    def say(self, now: float) -> None:
        rate = self.done / max(now - self.started, 1e-9)
        pct = 100.0 * self.done / self.total if self.total else 100.0
        print(f"page cache: read {self.done / 1e9:.2f} of {self.total / 1e9:.2f} GB ({pct:.0f}%), {rate / 1e9:.2f} GB/s",
              file=self.out, flush=True)


def read_file(path: Path, progress: Progress) -> int:
    """Read the file through the page cache (sequential advice first); the bytes read."""
    total = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        buf = bytearray(BLOCK)
        view = memoryview(buf)
        while True:
            n = os.readv(fd, [view])
            if n <= 0:
                break
            total += n
            progress.add(n)
    finally:
        os.close(fd)
    return total


def warm(dirs: list[Path], reserve: int, threads: int, every: float, dry_run: bool = False,
         meminfo: str | None = None) -> dict:
    files = model_files(dirs)
    libc = _libc()
    sizes = sum(p.stat().st_size for p in files)
    before = sum(resident_bytes(p, libc) for p in files)
    available = mem_available(meminfo)
    status, why = plan(sizes, before, available, reserve)
    result = {"status": status, "why": why, "dirs": [str(d) for d in dirs], "files": len(files), "bytes": sizes,
              "resident_before": before, "resident_after": before, "read_bytes": 0, "seconds": 0.0,
              "gb_per_s": None, "mem_available": available, "reserve": reserve, "threads": threads}
    if status != "read" or dry_run:
        if dry_run and status == "read":
            result["why"] += " (dry run: nothing read)"
        return result
    progress = Progress(sizes - before, every)
    started = time.monotonic()
    # Only the files not wholly resident; each read whole (a partly resident file costs its missing pages).
    todo = [p for p in files if resident_bytes(p, libc) < p.stat().st_size]
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        read = sum(pool.map(lambda p: read_file(p, progress), todo))
    seconds = time.monotonic() - started
    progress.say(time.monotonic())
    after = sum(resident_bytes(p, libc) for p in files)
    result.update(resident_after=after, read_bytes=read, seconds=round(seconds, 2),
                  gb_per_s=round(read / seconds / 1e9, 2) if seconds > 0 else None)
    if after < sizes:
        result["why"] += f"; {(sizes - after) / 1e9:.2f} GB not resident after the read (evicted under pressure)"
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="the model directories the server loads (target, draft)")
    ap.add_argument("--reserve-gib", type=float, default=16.0,
                    help="memory left available after the read (default %(default)s GiB)")
    ap.add_argument("--threads", type=int, default=8, help="files read at once (default %(default)s)")
    ap.add_argument("--progress-s", type=float, default=10.0, help="seconds between progress lines")
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--dry-run", action="store_true", help="say what would be read, read nothing")
    args = ap.parse_args(argv)
    bad = [str(d) for d in args.dirs if not d.is_dir()]
    if bad or not model_files(args.dirs):
        print(json.dumps({"status": "error", "why": f"not a directory or no file in it: {bad or args.dirs}"}))
        return 2
    result = warm(args.dirs, int(args.reserve_gib * GIB), args.threads, args.progress_s, args.dry_run)
    text = json.dumps(result, sort_keys=True)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
