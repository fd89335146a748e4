"""What playbooks/validate.yml costs per role on one fresh test host (docs/validation-layers.md).

Starts a test host (tests/harness/testhost.py; the Hub TEST DOUBLE on it where MODEL_FIXTURES_DIR is
set), runs the validate-first playbook against it with the demo inventory RUNS times, and prints each
run's wall time and each GPU role's share, read from profile_tasks' timestamps.

Usage: python3 tests/harness/validation_cost.py [RUNS]   # the Makefile's environment (make pytest's)
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import hostsetup
import mirror
from repo import ROOT
from steps import guarded
from testhost import TestHost, run_playbook

STAMP = re.compile(r"(\d+):(\d+):(\d+\.\d+)\s*\**\s*$")


def role_seconds(stdout: str) -> dict[str, float]:
    """Seconds from each "Run the role's checks - <role>" task to the next role's (the last: to the play's end)."""
    marks, lines = [], stdout.splitlines()
    for line, after in itertools.pairwise(lines):
        task, stamp = re.match(r"TASK \[(.*)\]", line), STAMP.search(after)
        if task and stamp:
            h, m, s = stamp.groups()
            marks.append((task.group(1), int(h) * 3600 + int(m) * 60 + float(s)))
    end = next(at for name, at in marks if name.startswith("Remember what passed"))  # the GPU hosts' play
    starts = [(name.rsplit(" - ", 1)[1], at) for name, at in marks
              if name.startswith("Run the role's checks") and at < end]
    bounds = [at for _, at in starts[1:]] + [end]
    return {role: round(end - at, 1) for (role, at), end in zip(starts, bounds, strict=True)}


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    image = os.environ.get("TESTHOST_IMAGE") or hostsetup.image_ref()
    mirror_dir = Path(os.environ.get("NVIDIA_MIRROR_DIR") or mirror.ensure())
    host = TestHost("validation-cost", image, mirror_dir).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(runs):
                started = time.monotonic()
                proc = run_playbook(host, ROOT / "playbooks" / "validate.yml", Path(tmp), mirror_dir)
                wall = time.monotonic() - started
                if proc.returncode != 0:
                    print(proc.stdout[-3000:], proc.stderr[-2000:], file=sys.stderr)
                    return 1
                shares = role_seconds(proc.stdout)
                print(f"run {i + 1}: {wall:.1f} s; " + ", ".join(f"{r} {s}" for r, s in shares.items())
                      + f"; the GPU roles' checks {sum(shares.values()):.1f} s", flush=True)
    finally:
        host.remove()
    return 0


if __name__ == "__main__":
    sys.exit(guarded("validation-cost", main))
