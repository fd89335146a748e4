"""Old revisions removed: never current, a wanted one, a protected one or one a process uses."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path

from .checks import SHA_RE, load_json, under
from .fsutil import fsync_dir


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
