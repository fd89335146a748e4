"""Files written whole and durably (a temporary file renamed over, fsync of the file and its directory)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


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
