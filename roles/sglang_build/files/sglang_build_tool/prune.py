"""Old releases and the wheels no kept release uses removed; never current, nor what the server serves or
goes back to."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from .plan import COMPLETE


def prune(root: Path, keep: int, dry_run: bool, protect: tuple[str, ...] = ()) -> dict:
    """Keep the newest `keep` complete releases and always current and the release directories in `protect`
    (what role sglang_server serves and its previous release, its rollback target); drop the rest.

    Newest is by completion time (the .complete marker). Wheelhouse entries that no
    kept release uses go too, except those newer than the oldest kept release (a
    build in progress may be about to use them).
    """
    releases = root / "releases"
    protected = {str(Path(p).resolve()) for p in protect if p}
    if (root / "current").is_symlink():
        protected.add(str((root / "current").resolve()))
    complete = sorted((p for p in releases.glob("*") if (p / COMPLETE).is_file()),
                      key=lambda p: (p / COMPLETE).stat().st_mtime, reverse=True)
    kept = [p for p in complete if str(p.resolve()) in protected]
    for path in complete:
        if len(kept) >= keep:
            break
        if path not in kept:
            kept.append(path)
    drop = [p for p in complete if p not in kept]
    used = set()
    for path in kept:
        manifest = path / "manifest.json"
        if manifest.exists():
            used.update(c["key"] for c in json.loads(manifest.read_text())["components"].values())
    oldest = min(((p / COMPLETE).stat().st_mtime for p in kept), default=time.time())
    drop_wheels = [w for w in (root / "wheelhouse").glob("*") if w.is_dir() and not w.name.startswith(".")
                   and w.name not in used and w.stat().st_mtime < oldest]
    if not dry_run:
        for path in drop + drop_wheels:
            shutil.rmtree(path)
            (root / "logs" / f"{path.name}.log").unlink(missing_ok=True)
    return {"changed": bool(drop or drop_wheels), "kept": [p.name for p in kept], "removed": [p.name for p in drop],
            "removed_wheels": [w.name for w in drop_wheels], "dry_run": dry_run}
