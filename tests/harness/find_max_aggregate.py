#!/usr/bin/env python3
"""Find the highest aggregate tok/s the benchmark client measures within 2% of the truth here.

Why: the client and the simulator share this machine's CPUs, so above some event rate the
client (or the simulator) falls behind and the measured figure is the machine's limit, not
the server's.  The accuracy tests must stay below that rate; this script says where it is.

Method: for each concurrency C, start the simulator with EAGLE-3 on (accept length A) and a
per-request decode rate, run the client with --runs C --concurrency C, and compare the
measured aggregate tok/s and mean per-request tok/s with tests/harness/simtruth.py.  The
output length grows with the rate so that every batch lasts about --batch-seconds: then the
fixed start-up cost of a batch (requests read one by one, the partly wasted last verify
step) weighs the same at every rate and what is found is the event rate this machine can
time.  The rate doubles until either figure is off by more than 2%, then bisects between
the last good and first bad rate.  Reports the highest aggregate figure within 2%, as JSON.
Other load on the machine lowers the figure: note it with the result.

Usage: python tests/harness/find_max_aggregate.py [--concurrency 64 128] [--batch-seconds 6]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from simtruth import BENCH, launch_sim, sim_env, truth


def measure(concurrency: int, decode_tok_s: float, batch_seconds: float, accept: float, ttft_ms: float,
            workdir: Path) -> dict[str, float]:
    max_tokens = int(batch_seconds * decode_tok_s * accept)
    env = sim_env(decode_tok_s, ttft_ms, accept_length=accept)
    args = ["--model-path", "sim/model", "--speculative-algorithm", "EAGLE3",
            "--max-running-requests", str(concurrency)]
    proc, url = launch_sim(args, env, workdir / "sim.log")
    try:
        out = workdir / "bench.json"
        subprocess.run([sys.executable, str(BENCH), "--url", url, "--runs", str(concurrency), "--concurrency",
                        str(concurrency), "--warmup", "1", "--max-tokens", str(max_tokens), "--input-len", "32",
                        "--json", str(out)], check=True, capture_output=True, timeout=300)
        result = json.loads(out.read_text())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    want = truth(max_tokens, decode_tok_s, ttft_ms, batch=concurrency, accept_length=accept)
    return {
        "concurrency": concurrency,
        "decode_tok_s_setting": decode_tok_s,
        "max_tokens": max_tokens,
        "truth_aggregate_tok_s": want.aggregate_tok_s,
        "aggregate_tok_s": result["aggregate_tok_s"],
        "aggregate_error": result["aggregate_tok_s"] / want.aggregate_tok_s - 1,
        "mean_tok_s_error": result["mean_tok_s"] / want.tok_s - 1,
        "events_per_s": concurrency * decode_tok_s,
    }


def within(point: dict[str, float], tolerance: float) -> bool:
    return abs(point["aggregate_error"]) <= tolerance and abs(point["mean_tok_s_error"]) <= tolerance


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--batch-seconds", type=float, default=6.0, help="target length of one batch")
    parser.add_argument("--accept-length", type=float, default=2.5)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--start-rate", type=float, default=50.0, help="first per-request decode steps/s")
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--bisect-steps", type=int, default=3)
    args = parser.parse_args(argv)
    best: dict[str, float] | None = None
    points = []
    with tempfile.TemporaryDirectory() as tmp:
        for conc in args.concurrency:
            good, bad, rate = None, None, args.start_rate
            while bad is None:
                point = measure(conc, rate, args.batch_seconds, args.accept_length, args.ttft_ms, Path(tmp))
                points.append(point)
                print(json.dumps(point), file=sys.stderr, flush=True)
                if within(point, args.tolerance):
                    good, rate = point, rate * 2
                else:
                    bad = point
            for _ in range(args.bisect_steps if good else 0):
                rate = (good["decode_tok_s_setting"] + bad["decode_tok_s_setting"]) / 2
                point = measure(conc, rate, args.batch_seconds, args.accept_length, args.ttft_ms, Path(tmp))
                points.append(point)
                print(json.dumps(point), file=sys.stderr, flush=True)
                good, bad = (point, bad) if within(point, args.tolerance) else (good, point)
            if good and (best is None or good["aggregate_tok_s"] > best["aggregate_tok_s"]):
                best = good
    print(json.dumps({"best_within_tolerance": best, "points": points}, indent=1))
    return 0 if best else 1


if __name__ == "__main__":
    sys.exit(main())
