"""The command line of sglang_model_stage.py: one JSON object on stdout, or ``sglang_model_stage: <why>``
on stderr and exit 1 (2 for usage errors). The subcommands: the package's docstring."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path

from . import checks
from .checks import check_staged
from .hub import plan_with_client
from .prune import prune
from .sync import sync


def read_spec(args) -> dict:
    if getattr(args, "spec_b64", None):
        return json.loads(base64.b64decode(args.spec_b64))
    return json.loads(sys.stdin.read())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Stage one Hugging Face model revision on this host")
    sub = ap.add_subparsers(dest="cmd", required=True)
    checks.add_commands(sub)
    sub.add_parser("sync", help="stage one model revision (JSON spec on stdin)")
    vf = sub.add_parser("verify", help="rehash a staged revision (JSON spec on stdin)")
    vf.add_argument("--reopen", action="store_true", help="turn a corrupted copy back into staging for repair")
    pr = sub.add_parser("prune", help="remove old revisions (JSON spec on stdin)")
    pr.add_argument("--spec-b64")
    pl = sub.add_parser("plan", help="plan a revision with the real client")
    pl.add_argument("--endpoint", default=os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    pl.add_argument("--repo-id", required=True)
    pl.add_argument("--revision", default="main")
    pl.add_argument("--allow", action="append")
    pl.add_argument("--ignore", action="append")
    pl.add_argument("--token-file")
    pl.add_argument("--ca-bundle")
    pl.add_argument("--hf-home", default="/var/lib/sglang-model/hf-home")
    args = ap.parse_args(argv)
    return checks.answer(lambda: run(args))


def run(args) -> dict:
    if args.cmd in ("preflight", "check"):
        return checks.run(args)
    if args.cmd == "sync":
        return sync(read_spec(args))
    if args.cmd == "verify":
        spec = read_spec(args)
        spec["fetch"] = False
        if args.reopen:
            return sync({**spec, "verify": "full"})
        out = check_staged(Path(spec["model_dir"]) / spec["plan"]["revision"], full=True,
                           workers=int(spec.get("hash_workers") or min(16, os.cpu_count() or 1)))
        out["changed"] = False
        return out
    if args.cmd == "prune":
        return prune(read_spec(args))
    return plan_with_client(args)
