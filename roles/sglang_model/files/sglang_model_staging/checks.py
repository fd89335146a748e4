"""The staging tool's read-only half: hashing with the Hub's rule, manifests, and what a host holds.

Only Python's standard library and no import of the package's other modules: the role also runs
this file alone, as a script sent with the task (ansible.builtin.script), with the host's system
Python before anything is installed (validation: ``preflight``; the server's pre-start checks:
``check``). The rest of the package builds on it.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import fnmatch
import hashlib
import json
import os
import re
import sys
from pathlib import Path

TOOL_VERSION = 1


BLOCK = 8 << 20


SHA_RE = re.compile(r"^[0-9a-f]{40}$")


# Paths the client itself keeps out of a local_dir (huggingface_hub utils/_paths.py FORBIDDEN_FOLDERS).
FORBIDDEN_TOP = (".git", ".cache")


class StageError(Exception):
    """A failure the user sees as one message (never a token, never a traceback)."""


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


# --------------------------------------------------------------------------- command line (read-only)


def fail(message: str) -> int:
    print(f"sglang_model_stage: {message}", file=sys.stderr, flush=True)
    return 1


def answer(produce) -> int:
    """Print the JSON object produce() returns (exit 0), or its failure in one line on stderr (exit 1)."""
    try:
        out = produce()
    except StageError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{exc.filename or ''}: {exc.strerror or exc}")
    print(json.dumps(out, sort_keys=True))
    return 0


def add_commands(sub) -> None:
    """The read-only subcommands, for this file's own command line and the tool's."""
    pf = sub.add_parser("preflight", help="read-only state of this host (JSON spec, base64)")
    pf.add_argument("--spec-b64", required=True)
    ck = sub.add_parser("check", help="quick manifest check of staged model directories")
    ck.add_argument("paths", nargs="+")
    ck.add_argument("--full", action="store_true", help="rehash every file instead of size and mtime")


def run(args) -> dict:
    """preflight or check, as parsed by add_commands' parsers."""
    if args.cmd == "preflight":
        return preflight(json.loads(base64.b64decode(args.spec_b64)))
    return {"changed": False, "checked": [check_staged(Path(p), full=args.full) for p in args.paths]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="sglang_model_stage.py's read-only subcommands (preflight, check)")
    add_commands(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(argv)
    return answer(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
