"""Time a playbook's first converge against a fresh test host and its no-op rerun.

Each round starts a new container host, converges the playbook (first), converges it
again (no-op: the recap must say changed=0) and removes the host. Prints each round
and the medians. Used for the figures in the closing notes and docs/validation.

Usage: python3 tests/harness/timing.py [--rounds 3] [--playbook playbooks/cuda.yml]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hostsetup
import mirror
from testhost import TestHost

ROOT = Path(__file__).resolve().parents[2]


def converge(inv: Path, playbook: str, env: dict) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "-i", str(inv), playbook], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{playbook} failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    changed = re.search(r"changed=(\d+)", proc.stdout.split("PLAY RECAP")[-1])
    return elapsed, changed.group(1) if changed else "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--playbook", default="playbooks/cuda.yml")
    args = ap.parse_args(argv)
    mirror_dir = mirror.ensure()
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), NVIDIA_MIRROR_DIR=str(mirror_dir))
    firsts, noops = [], []
    with tempfile.TemporaryDirectory() as tmp:
        inv_dir = Path(tmp)
        (inv_dir / "group_vars").symlink_to(ROOT / "inventory" / "demo" / "group_vars")
        for i in range(args.rounds):
            host = TestHost("timing-host", hostsetup.image_ref(), mirror_dir).start()
            try:
                inv = host.inventory(inv_dir / "hosts.ini")
                first, c1 = converge(inv, args.playbook, env)
                noop, c2 = converge(inv, args.playbook, env)
            finally:
                host.remove()
            if c2 != "0":
                raise SystemExit(f"round {i + 1}: the rerun changed {c2} task(s)")
            firsts.append(first)
            noops.append(noop)
            print(f"round {i + 1}: first converge {first:.1f} s (changed={c1}), no-op rerun {noop:.1f} s (changed=0)",
                  flush=True)
    print(f"median of {args.rounds}: first converge {statistics.median(firsts):.1f} s, "
          f"no-op rerun {statistics.median(noops):.1f} s ({args.playbook})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
