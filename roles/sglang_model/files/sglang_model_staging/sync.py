"""One revision staged: checked in place, repaired, fetched into staging, renamed into place, manifest last."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

from .checks import (
    SHA_RE,
    TOOL_VERSION,
    StageError,
    hash_of,
    load_json,
    local_problems,
    manifest_matches,
    model_paths,
    quick_check,
    rehash,
    rule,
    safe_relpath,
)
from .fsutil import ensure_dir, fsync_dir, symlink_atomic, write_atomic
from .hub import fetch_hub
from .progress import ByteCounter, Progress, human, summary_line
from .rsync import fetch_rsync
from .staging import Staging


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


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
