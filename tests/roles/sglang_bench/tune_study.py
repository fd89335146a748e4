#!/usr/bin/env python3
"""The tuner's acceptance trials at scale (issue 40): seeded tunings through the tool's commands on a synthetic
host (tunehost.py), the role's defaults, the tuner told neither the per-run nor the start-to-start spread.

    PYTHONPATH=tests/harness python3 tests/roles/sglang_bench/tune_study.py [--trials 1000] [--hosts noisy,...]

Per host and response: the share of tunings with the acceptance's event (flat: the start kept; every other
setting 2% slower: a worse one served; a smooth interior optimum 10% up: a setting within 2% of it served) with
its binomial 95% interval (Wilson), and the restarts per tuning (mean, median, 90th percentile, max), the final
restart onto the served settings included. test_tune_acceptance.py runs fewer trials of the same.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness"))
from repo import load

tunehost = load(Path(__file__).resolve().parent / "tunehost.py", "tunehost")

# (per-run CV, start-to-start CV): the acceptance's noisy host; the same runs with quiet restarts; a quiet
# host like the 8B shape on the H200 (CV 0.2-0.3% within a session, 0.1-0.9% across restarts).
HOSTS = {"noisy": (0.05, 0.05), "quiet-restarts": (0.05, 0.0), "quiet": (0.003, 0.005)}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--hosts", default="noisy,quiet-restarts,quiet")
    ap.add_argument("--responses", default=",".join(tunehost.RESPONSES))
    ap.add_argument("--seed", type=int, default=40)
    ap.add_argument("--in-process", action="store_true",
                    help="drive the search's generator directly (the same decisions as the commands, ~3x faster)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting other than the role's default (a YAML value), e.g. surface=true budget_minutes=960")
    args = ap.parse_args()
    changes = {}
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in tunehost.role_settings():
            ap.error(f"--set {item}: no setting {key!r} in the role's tune settings")
        changes[key] = yaml.safe_load(value)
    settings = tunehost.role_settings(**changes)
    print(f"role defaults: budget {settings['budget_minutes']} min, {settings['restart_minutes']} min per restart, "
          f"{settings['runs']} runs per {settings['measure_minutes']} min, confidence {settings['confidence']}, "
          f"min gain {settings['min_gain_pct']}%; {args.trials} trials"
          + "".join(f", {k} {v}" for k, v in changes.items()) + (
              f", stated restart CV {settings['restart_cv_pct']}%" if "restart_cv_pct" in settings else ""))
    for host in args.hosts.split(","):
        run_cv, start_cv = HOSTS[host]
        for name in args.responses.split(","):
            rng = random.Random(f"{args.seed}-{host}-{name}")
            began = time.monotonic()
            hits, restarts, served = 0, [], []
            for _ in range(args.trials):
                tuning = (tunehost.tune_in_process if args.in_process else tunehost.tune_host)(
                    settings, tunehost.RESPONSES[name], rng, run_cv, start_cv)
                hits += tunehost.outcome(name, tuning)
                restarts.append(tuning.restarts)
                served.append((tuning.served, tunehost.RESPONSES[name](tuning.served)))
            lo, hi = wilson(hits, args.trials)
            restarts.sort()
            print(f"{host:15s} (runs {run_cv:.1%}, starts {start_cv:.1%}) {name:22s}: {hits / args.trials:6.1%} "
                  f"[{lo:.1%}, {hi:.1%}]  restarts mean {statistics.fmean(restarts):.1f}, median "
                  f"{statistics.median(restarts):g}, p90 {restarts[int(0.9 * len(restarts))]}, max {restarts[-1]} "
                  f"({time.monotonic() - began:.0f} s)", flush=True)
            if name.startswith("interior"):  # what served, beside the acceptance's event
                start = tunehost.RESPONSES[name](tunehost.START)
                kept = sum(p == tunehost.START for p, _v in served)
                better = sum(v > start for p, v in served if p != tunehost.START)
                worse = sum(v < start for _p, v in served)
                print(f"{'':52s}  the start kept {kept / args.trials:.1%}, a better setting served "
                      f"{better / args.trials:.1%}, a worse one {worse / args.trials:.1%}; mean gain served "
                      f"{statistics.fmean(v / start - 1 for _p, v in served):+.2%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
