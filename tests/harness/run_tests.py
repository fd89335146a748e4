"""`make test`: lint, pytest and every molecule scenario, two at a time, then the timing tests alone.

Why: the whole suite is about 80 minutes of work on this 2-core machine run one job after the other,
yet most of it waits (test hosts booting, simulated model loads, readiness polls, a router draining):
two jobs side by side fill those waits. Tests whose assertions are about time (pytest marker
``timing``: the benchmark client's accuracy, staging throughput, the checker's speed) are not run
beside anything: they run last, alone.

Each job's output goes to ``<logs>/<job>.log``; a line is printed when a job starts and when it
ends (its time and result); at the end a table of every job's time, and the last lines of each
failed job's log. Exit status 1 when any job failed.

Usage: python3 tests/harness/run_tests.py [--jobs 2] [--logs .test-logs] [--scenarios "a b c"] [--no-lint]
(the environment is the Makefile's: the venv on PATH, TESTHOST_IMAGE, NVIDIA_MIRROR_DIR, ...).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from repo import ROOT


@dataclass
class Job:
    name: str
    argv: list[str]
    rc: int | None = None
    seconds: float = 0.0
    log: Path = field(default=Path())


def log(msg: str) -> None:
    print(f"[test] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def run(job: Job, logs: Path) -> None:
    job.log = logs / f"{job.name}.log"
    log(f"start {job.name}: {' '.join(job.argv)}")
    started = time.monotonic()
    with open(job.log, "w") as out:
        job.rc = subprocess.run(job.argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    job.seconds = time.monotonic() - started
    log(f"{'ok  ' if job.rc == 0 else 'FAIL'} {job.name}: {job.seconds:.0f} s")


def run_all(jobs: list[Job], width: int, logs: Path) -> None:
    """Run jobs in the caller's order, at most `width` at once."""
    pending = list(jobs)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                job = pending.pop(0)
            run(job, logs)

    threads = [threading.Thread(target=worker) for _ in range(max(1, width))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("TEST_JOBS", "2")))
    ap.add_argument("--logs", default=str(ROOT / ".test-logs"))
    ap.add_argument("--scenarios", default=os.environ.get("SCENARIOS", ""))
    ap.add_argument("--no-lint", action="store_true", help="skip yamllint and ansible-lint")
    args = ap.parse_args(argv)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    scenarios = args.scenarios.split()
    began = time.monotonic()
    # The longest jobs first, so that the last ones to start are short.
    side_by_side = [Job("pytest", [sys.executable, "-m", "pytest", "-q", "--durations=40", "-m", "not timing", "tests"])]
    side_by_side += [Job(f"molecule-{s}", ["molecule", "test", "-s", s]) for s in scenarios]
    # Lint is a job like the others (about a minute and a half): last, where a lane would idle.
    if not args.no_lint:
        side_by_side.append(Job("lint", ["bash", "-c", "yamllint -s . && ansible-lint"]))
    # Longest first (seconds measured two at a time on this machine kind, 2026-12-01), so that the
    # last jobs to start are short and both lanes end together; a job not listed goes first.
    expected = {"pytest": 1859, "molecule-multihost": 1704, "molecule-sglang_bench": 898, "molecule-default": 783,
                "molecule-sglang_model": 407, "molecule-sglang_build": 384, "molecule-sglang_server": 326,
                "molecule-sglang_eagle3_patch": 164, "molecule-nvidia_cuda": 140, "molecule-gpu_preflight": 135,
                "lint": 121, "molecule-nvidia_cuda_preinstalled": 77}
    side_by_side.sort(key=lambda j: -expected.get(j.name, 10**6))
    run_all(side_by_side, args.jobs, logs)
    alone = [Job("pytest-timing", [sys.executable, "-m", "pytest", "-q", "-m", "timing", "tests"])]
    run_all(alone, 1, logs)
    jobs = side_by_side + alone
    total = time.monotonic() - began
    print("\n== times (wall; two jobs at a time, then the timing tests alone)")
    for job in jobs:
        print(f"{job.name:32s} {job.seconds:7.0f} s  {'ok' if job.rc == 0 else 'FAILED (rc %s)' % job.rc}")
    print(f"{'all':32s} {total:7.0f} s")
    failed = [j for j in jobs if j.rc != 0]
    for job in failed:
        lines = job.log.read_text(errors="replace").splitlines()
        print(f"\n== {job.name} failed; last lines of {job.log}:")
        print("\n".join(lines[-60:]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
