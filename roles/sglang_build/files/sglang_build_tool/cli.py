"""The command line of sglang_build.py: one subcommand per phase, one JSON object on stdout."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pwd
from pathlib import Path

from .build import Build
from .plan import SPEC_ENV, BuildError, load_spec, log
from .prune import prune


def drop_privileges(user: str | None) -> None:
    """Build as the dedicated user: files it writes are its own, never root's."""
    if not user or os.geteuid() != 0:
        return
    pw = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)
    os.environ.update(HOME=pw.pw_dir, USER=user, LOGNAME=user)
    os.umask(0o022)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build SGLang, sgl-kernel, FlashInfer and torch into versioned releases")
    ap.add_argument("phase", choices=["plan", "fetch", "wheels", "venv", "aot", "check", "prune"])
    ap.add_argument("--spec", help=f"spec JSON file (default: the {SPEC_ENV} environment variable)")
    ap.add_argument("--run-as", help="drop root privileges to this user first")
    ap.add_argument("--root", help="prune: the releases root")
    ap.add_argument("--keep", type=int, default=3, help="prune: releases to keep (at least 2)")
    ap.add_argument("--dry-run", action="store_true", help="prune: say what would go, remove nothing")
    ap.add_argument("--protect", action="append", default=[],
                    help="prune: a release directory never pruned (what the server serves, its previous release)")
    args = ap.parse_args(argv)
    drop_privileges(args.run_as)

    if args.phase == "prune":
        if args.keep < 2:
            raise SystemExit("--keep must be at least 2 (the current release and the one the server goes back to)")
        root = Path(args.root)
        with lock(root, args.dry_run):
            print(json.dumps(prune(root, args.keep, args.dry_run, tuple(args.protect))))
        return 0

    try:
        build = Build(load_spec(args.spec))
    except ValueError as err:  # a module descriptor or derived setting the tool cannot use
        print(json.dumps({"failed": True, "msg": str(err)}))
        return 1
    if args.phase == "plan":
        print(json.dumps(build.plan()))
        return 0
    for sub in ("releases", "wheelhouse", "src", "work", "logs"):
        (build.root / sub).mkdir(parents=True, exist_ok=True)
    with lock(build.root):
        if build.complete and args.phase != "check":
            print(json.dumps({"changed": False, "release_id": build.release_id, "complete": True}))
            return 0
        try:
            recovered = build.recover() if args.phase in ("fetch", "wheels", "venv", "aot") else []
            log(f"phase {args.phase} of {build.release_id}", build.logfile)
            result = getattr(build, f"phase_{args.phase}")()
        except BuildError as err:
            log(f"FAILED: {err}", build.logfile)
            print(json.dumps({"failed": True, "msg": str(err), "release_id": build.release_id,
                              "log": str(build.logfile)}))
            return 1
        if recovered:
            result.update(changed=True, recovered=recovered)
        print(json.dumps(dict(result, release_id=build.release_id, log=str(build.logfile))))
    return 0


class lock:  # used as `with lock(root):`
    """An exclusive flock on ROOT/.build.lock: one build or prune at a time per host."""

    def __init__(self, root: Path, shared: bool = False):
        self.path, self.shared, self.fh = root / "wheelhouse" / ".build.lock", shared, None

    def __enter__(self):
        if self.shared and not self.path.exists():
            return self
        self.fh = self.path.open("a")
        fcntl.flock(self.fh, fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.fh:
            self.fh.close()
