"""Staging throughput against raw curl of the same files from the same Hub TEST DOUBLE (goal: 80%).

The model is synthetic (6 shards of 128 MB plus its small files, 805 MB) and cached. Every side
downloads every planned file with 8 transfers at a time to the same filesystem:

- curl, to the page cache; and curl followed by `sync` (the bytes on disk, as the tool leaves them);
- the client alone: hf_hub_download per file as the client ships (its 64 KiB socket reads and 10 MB
  writes: the tool no longer patches them), nothing else; the maintained client the Mover is held against;
- the staging tool: the client's metadata request per file, its bytes moved by the tool's own
  stdlib mover hashing sha256 as they arrive, fsync, journal, manifest, and the Python start with
  the client's import (reported apart: a fixed cost per run, not per byte).

Twice: on the disk (pytest's tmp_path), where the tool's fsync waits for the disk and raw curl
does not (805 MB stay in the page cache; 547 GB would not), and in memory (a tmpfs: fsync costs
nothing), where only the CPU work differs: the disk's noise apart from the tool's own cost. Three
interleaved rounds per place, each in another order; each side's best and range. On this 2-core
machine the double, the client and the hashing share the cores, and this machine's disk wrote
1 GiB in 0.7 s to 4.7 s within a minute (dd, conv=fsync), so the assertions only catch gross
regressions. The figures: printed on each run (the .test-logs/ of the run).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from model_kit import CACHE, FIGURES, TOOL, Stager, plan_for, size_of

import hub_double
import synthetic_model

# Assertions about time: run alone (tests/harness/run_tests.py runs the timing tests last).
pytestmark = pytest.mark.timing

BENCH = {"repo": "test-org/bench", "shards": 6, "shard_mb": 128, "seed": 7}
ROUNDS = 3

CLIENT_ONLY = (
    "import json, os, sys, time\n"
    "from concurrent.futures import ThreadPoolExecutor\n"
    "spec = json.loads(sys.argv[1])\n"
    "sys.path.insert(0, os.path.dirname(spec['tool']))\n"
    "from sglang_model_staging.hub import hub_environment\n"
    "hub_environment({'endpoint': spec['url']}, spec['hf_home'])\n"
    "from huggingface_hub import hf_hub_download\n"
    "t = time.monotonic()\n"
    "with ThreadPoolExecutor(8) as pool:\n"
    "    list(pool.map(lambda f: hf_hub_download(spec['repo'], f, revision=spec['sha'], local_dir=spec['dir'],"
    " endpoint=spec['url']), spec['files']))\n"
    "print(time.monotonic() - t)\n")


@pytest.fixture(scope="module")
def bench_hub():
    key = hashlib.sha256(json.dumps(BENCH, sort_keys=True).encode()).hexdigest()[:12]
    root = CACHE / "sglang-model-bench" / key
    if not (root / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        synthetic_model.make_repo(root, BENCH["repo"], shards=BENCH["shards"], shard_mb=BENCH["shard_mb"],
                                  seed=BENCH["seed"])
        (root / ".complete").write_text("")
    return root


def tmpfs_dir() -> Path | None:
    """A writable tmpfs with room for the three sides' copies of the model, or None."""
    with open("/proc/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[2] == "tmpfs"]
    for point in ("/dev/shm", *points):
        if point in points and os.access(point, os.W_OK) and shutil.disk_usage(point).free > 3 << 30:
            return Path(point)
    return None


def measure(where: Path, double, rev, plan, hub_python, sides) -> dict[str, list[float]]:
    """ROUNDS interleaved rounds of every side, downloading into `where`: seconds per side."""
    urls = []
    for f in plan["files"]:
        urls += ["-o", str(where / "curl" / f["path"]), f"{double.url}/{rev.repo_id}/resolve/{rev.sha}/{f['path']}"]

    def fresh(name: str) -> None:
        shutil.rmtree(where / name, ignore_errors=True)
        subprocess.run(["sync"], check=True)

    def curl(sync: bool) -> float:
        fresh("curl")
        (where / "curl").mkdir()
        started = time.monotonic()
        subprocess.run(["curl", "-sfL", "--no-progress-meter", "--parallel", "--parallel-max", "8", *urls], check=True)
        if sync:
            subprocess.run(["sync"], check=True)
        return time.monotonic() - started

    def client() -> float:
        fresh("client")
        arg = json.dumps({"tool": str(TOOL), "url": double.url, "hf_home": str(where / "hf"), "repo": rev.repo_id,
                          "sha": rev.sha, "dir": str(where / "client"), "files": [f["path"] for f in plan["files"]]})
        out = subprocess.run([str(hub_python), "-c", CLIENT_ONLY, arg], capture_output=True, text=True, check=True)
        return float(out.stdout.strip().splitlines()[-1])

    stager = Stager(hub_python, double, where / "models", where)
    runs: dict[str, list[float]] = {side: [] for side in (*sides, "inside", "transfer")}

    def stage() -> float:
        fresh("models")
        spec = stager.spec(rev, name="bench")
        spec["source"]["max_workers"] = 8
        served = double.stats()["total_bytes"]
        rc, result, err, elapsed = stager.run(spec)
        assert rc == 0 and result["status"] == "staged", err
        # Every staging run fetched every byte from the double (none taken from an earlier run).
        assert double.stats()["total_bytes"] - served >= size_of(plan)
        runs["inside"].append(result["seconds"])  # without the Python start
        # The fetch phase less the client's import and HTTP session.
        runs["transfer"].append(result["timing"]["fetch"] - result["timing"].get("client_start", 0))
        return elapsed

    do = {"curl": lambda: curl(False), "curl_sync": lambda: curl(True), "client": client, "stage": stage}
    # Interleaved rounds, each in another order: the machine's other load, and the writeback a side
    # leaves behind (flushed before the next starts), hit every side alike.
    for i in range(ROUNDS):
        for side in sides[i % len(sides):] + sides[:i % len(sides)]:
            runs[side].append(do[side]())
    for name in ("curl", "client", "models", "hf"):
        shutil.rmtree(where / name, ignore_errors=True)
    return runs


def report(place: str, total: int, runs: dict[str, list[float]]) -> str:
    best = {side: min(times) for side, times in runs.items()}

    def side(label: str, key: str, *against: str) -> str:
        times = runs[key]
        text = (f"{label} {total / best[key] / 1e6:.0f} MB/s ({best[key]:.2f} s; {min(times):.2f}-{max(times):.2f} s "
                f"in {len(times)})")
        shares = [f"{100 * best[a] / best[key]:.0f}% of {a.replace('_sync', ' + sync')}" for a in against]
        return text + (" = " + ", ".join(shares) if shares else "")

    sync = ("curl_sync",) if "curl_sync" in runs else ()
    parts = [side("raw curl", "curl")]
    if sync:
        parts.append(side("curl + sync", "curl_sync"))
    parts += [side("the client alone", "client", "curl"),
              side("the staging tool (+ hash, fsync, manifest, start)", "stage", "curl", *sync),
              side("without the Python start", "inside", "curl", *sync),
              side("the transfer alone (without the client's import)", "transfer", "curl", *sync)]
    return f"staging throughput {place}, {total / 1e6:.0f} MB, 8 at a time: " + "; ".join(parts)


def test_staging_throughput_against_curl(bench_hub, hub_python, tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    memory = tmpfs_dir()
    double = hub_double.HubDouble(bench_hub).start()
    try:
        rev = synthetic_model.load_revision(bench_hub, BENCH["repo"])
        plan = plan_for(rev)
        total = size_of(plan)
        on_disk = measure(tmp_path, double, rev, plan, hub_python, ("curl", "curl_sync", "client", "stage"))
        in_memory = None
        if memory is not None:
            where = Path(memory) / f"sglang-throughput-{os.getpid()}"
            where.mkdir()
            try:
                in_memory = measure(where, double, rev, plan, hub_python, ("curl", "client", "stage"))
            finally:
                shutil.rmtree(where, ignore_errors=True)
    finally:
        double.stop()
    FIGURES.append(report("on the disk", total, on_disk))
    if in_memory is None:
        FIGURES.append("staging throughput in memory: not measured (no writable tmpfs with 3 GiB free)")
    else:
        FIGURES.append(report(f"in memory ({memory}, tmpfs)", total, in_memory))
    # Gross regressions only (a staging run several times slower than its reference): right after
    # the whole suite (podman still cleaning up behind it) the transfer on the disk measured 2.6 s in
    # all three rounds here (43% of curl + sync; 0.99 s a few minutes later): every fsync then waits
    # for other writers' data, while curl + sync flushes once.
    assert min(on_disk["curl_sync"]) / min(on_disk["stage"]) >= 0.3, FIGURES[-2 if in_memory else -1]
    if in_memory is not None:
        assert min(in_memory["curl"]) / min(in_memory["stage"]) >= 0.3, FIGURES[-1]
