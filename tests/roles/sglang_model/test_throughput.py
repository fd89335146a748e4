"""Staging throughput against raw curl of the same files from the same Hub TEST DOUBLE (goal: 80%).

The model is synthetic (6 shards of 128 MB plus its small files, 805 MB) and cached. Every side
downloads every planned file with 8 transfers at a time to the same filesystem:

- curl, to the page cache; and curl followed by `sync` (the bytes on disk, as the tool leaves them);
- the client alone: hf_hub_download per file with the tool's transport tuning, nothing else;
- the staging tool: the client's metadata request per file, its bytes moved by the tool's own
  stdlib mover hashing sha256 as they arrive, fsync, journal, manifest, and the Python start with
  the client's import (0.4 s, reported apart: a fixed cost per run, not per byte).

Three interleaved rounds, best of each. On this 2-core machine the double, the client and the hashing
share the cores, so the figures are noisy; the assertion only catches gross regressions.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time

import pytest

import hub_double
import synthetic_model
from model_kit import CACHE, FIGURES, TOOL, Stager, plan_for, size_of

# Assertions about time: run alone (tests/harness/run_tests.py runs the timing tests last).
pytestmark = pytest.mark.timing

BENCH = {"repo": "test-org/bench", "shards": 6, "shard_mb": 128, "seed": 7}


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


def test_staging_throughput_against_curl(bench_hub, hub_python, tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    double = hub_double.HubDouble(bench_hub).start()
    try:
        rev = synthetic_model.load_revision(bench_hub, BENCH["repo"])
        plan = plan_for(rev)
        total = size_of(plan)
        urls = []
        for f in plan["files"]:
            urls += ["-o", str(tmp_path / "curl" / f["path"]), f"{double.url}/{rev.repo_id}/resolve/{rev.sha}/{f['path']}"]

        def curl(sync: bool) -> float:
            shutil.rmtree(tmp_path / "curl", ignore_errors=True)
            (tmp_path / "curl").mkdir()
            subprocess.run(["sync"], check=True)
            started = time.monotonic()
            subprocess.run(["curl", "-sfL", "--no-progress-meter", "--parallel", "--parallel-max", "8", *urls],
                           check=True)
            if sync:
                subprocess.run(["sync"], check=True)
            return time.monotonic() - started

        stager = Stager(hub_python, double, tmp_path / "models", tmp_path)
        client_only = (
            "import json, os, sys, time\n"
            "from concurrent.futures import ThreadPoolExecutor\n"
            "spec = json.loads(sys.argv[1])\n"
            "tool = {}\n"
            "exec(compile(open(spec['tool']).read(), spec['tool'], 'exec'), tool)\n"
            "tool['hub_environment']({'endpoint': spec['url']}, spec['hf_home'])\n"
            "tool['tune_transport'](1 << 20)\n"
            "from huggingface_hub import hf_hub_download\n"
            "t = time.monotonic()\n"
            "with ThreadPoolExecutor(8) as pool:\n"
            "    list(pool.map(lambda f: hf_hub_download(spec['repo'], f, revision=spec['sha'], local_dir=spec['dir'],"
            " endpoint=spec['url']), spec['files']))\n"
            "print(time.monotonic() - t)\n")

        def client() -> float:
            shutil.rmtree(tmp_path / "client", ignore_errors=True)
            subprocess.run(["sync"], check=True)
            arg = json.dumps({"tool": str(TOOL), "url": double.url, "hf_home": str(tmp_path / "hf"), "repo": rev.repo_id,
                              "sha": rev.sha, "dir": str(tmp_path / "client"), "files": [f["path"] for f in plan["files"]]})
            out = subprocess.run([str(hub_python), "-c", client_only, arg], capture_output=True, text=True, check=True)
            return float(out.stdout.strip().splitlines()[-1])

        inside: list[float] = []
        moving: list[float] = []  # the fetch phase less the client's import and HTTP session

        def stage() -> float:
            shutil.rmtree(tmp_path / "models", ignore_errors=True)
            subprocess.run(["sync"], check=True)
            spec = stager.spec(rev, name="bench")
            spec["source"]["max_workers"] = 8
            rc, result, err, elapsed = stager.run(spec)
            assert rc == 0 and result["status"] == "staged", err
            inside.append(result["seconds"])
            moving.append(result["timing"]["fetch"] - result["timing"].get("client_start", 0))
            return elapsed

        # Interleaved rounds, best of each: the machine's other load hits every side alike.
        runs: dict[str, list[float]] = {"curl": [], "curl_sync": [], "client": [], "stage": []}
        for _ in range(3):
            runs["curl"].append(curl(False))
            runs["curl_sync"].append(curl(True))
            runs["client"].append(client())
            runs["stage"].append(stage())
        curl_s, curl_sync_s, client_s, stage_s = (min(runs[k]) for k in ("curl", "curl_sync", "client", "stage"))
        served = double.stats()["total_bytes"]
    finally:
        double.stop()
    def mbs(seconds):
        return f"{total / seconds / 1e6:.0f} MB/s ({seconds:.2f} s)"
    FIGURES.append(
        f"staging throughput, {total / 1e6:.0f} MB, 8 at a time: raw curl {mbs(curl_s)}; curl + sync {mbs(curl_sync_s)}; "
        f"the client alone (tuned) {mbs(client_s)} = {100 * curl_s / client_s:.0f}% of curl; the staging tool "
        f"(+ hash, fsync, manifest, start) {mbs(stage_s)} = {100 * curl_s / stage_s:.0f}% of curl, "
        f"{100 * curl_sync_s / stage_s:.0f}% of curl + sync; without the Python start {mbs(min(inside))} = "
        f"{100 * curl_s / min(inside):.0f}% of curl; the transfer alone (without the client's import) "
        f"{mbs(min(moving))} = {100 * curl_s / min(moving):.0f}% of curl, {100 * curl_sync_s / min(moving):.0f}% "
        f"of curl + sync")
    assert served >= 3 * total  # every staging run fetched everything from the double
    # Figures only: a 2-core machine shared with other work is too noisy for a throughput gate; this
    # catches gross regressions (a staging run several times slower than curl with sync).
    # Not tighter: right after the whole suite (podman still cleaning up behind it) the transfer measured
    # 2.6 s in all three rounds here (43% of curl + sync; 0.99 s a few minutes later): every fsync then
    # waits for other writers' data, while curl + sync flushes once.
    assert curl_sync_s / stage_s >= 0.3, FIGURES[-1]
