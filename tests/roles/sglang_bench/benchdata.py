"""Synthetic benchmark histories for the report's tests, in the client's own result format.

Each result document is built the way files/sglang_bench.py builds it: Run records (one per
measured request, with the tok/s the report works on) summarized by the client's own
``summarize``, so the report is tested on the documents it meets in production.
Loaded by the tests with ``repo.load`` (no sys.path changes).
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

from repo import ROOT, load

# The benchmark client ships with the role (it used to live in files/).
BENCH = load(next(p for p in (ROOT / "roles/sglang_bench/files/sglang_bench.py", ROOT / "files/sglang_bench.py")
                  if p.exists()), "sglang_bench_client")
TOKENS = 256

# The reference host's figures (README, issue 17): ten EAGLE-3 runs spanning 87.5 to 103.5
# around a mean of 96.1, and the no-speculation baseline's mean of 92.6 with a similar spread.
SEED_EAGLE3 = [87.5, 91.2, 93.0, 94.6, 95.8, 97.1, 98.4, 99.3, 100.6, 103.5]
SEED_BASELINE = [84.9, 87.8, 89.6, 91.0, 92.3, 93.5, 94.7, 96.0, 97.4, 98.8]


def normal(seed: int, n: int, mean: float, sd: float) -> list[float]:
    """n draws from N(mean, sd), seeded."""
    rng = random.Random(seed)
    return [rng.gauss(mean, sd) for _ in range(n)]


def exactly(seed: int, n: int, mean: float, sd: float) -> list[float]:
    """n seeded normal draws rescaled to exactly this sample mean and sample standard deviation."""
    z = normal(seed, n, 0.0, 1.0)
    zm, zs = statistics.fmean(z), statistics.stdev(z)
    return [mean + sd * (v - zm) / zs for v in z]


def result_doc(label: str, values: list[float], session: str, release: str = "r1", concurrency: int = 1,
               failure: str | None = None, accept: float | None = None) -> dict:
    """A result document as sglang_bench.py writes it, with these per-run tok/s."""
    runs, clock = [], 1000.0
    for i, tok_s in enumerate(values):
        seconds = TOKENS / tok_s
        run = BENCH.Run(index=i, ok=True, tokens=TOKENS, prompt_tokens=128, seconds=seconds, tok_s=tok_s,
                        decode_tok_s=tok_s * 1.05, ttft_ms=50.0, tpot_ms=1000.0 / tok_s, accept_length=accept,
                        events=TOKENS, t_send=clock, t_last=clock + seconds)
        if concurrency == 1:
            clock += seconds
        runs.append(run)
    stats = BENCH.summarize(runs)
    return {
        "schema": BENCH.SCHEMA, "label": label, "ok": failure is None, "failure": failure,
        "started_at": f"{session[:4]}-{session[4:6]}-{session[6:8]}T{session[9:11]}:{session[11:13]}:00+00:00",
        "finished_at": None, "config": {"runs": len(values), "concurrency": concurrency, "max_tokens": TOKENS},
        "concurrency": concurrency, "runs_attempted": len(values), "warmup_errors": [], **stats,
        "server_avg_spec_accept_length": None, "runs": [r.public() for r in runs],
        "environment": {"session": session, "host": "gpu1", "release_id": release},
    }


def write(host_dir: Path, session: str, label: str, values: list[float], **kw) -> Path:
    """Write one result where the role fetches it: <host_dir>/<session>-<label>.json."""
    host_dir.mkdir(parents=True, exist_ok=True)
    path = host_dir / f"{session}-{label}.json"
    path.write_text(json.dumps(result_doc(label, values, session, **kw), indent=1))
    return path


def session(day: int) -> str:
    """A session id as the role makes it (the play's start time, UTC)."""
    return f"202607{day:02d}T120000Z"
