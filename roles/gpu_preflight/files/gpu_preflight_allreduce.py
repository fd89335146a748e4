#!/usr/bin/env python3
"""NCCL all-reduce across every GPU of this host, one process per GPU: latency and bus bandwidth.

Why: with tensor parallelism every decode step (and EAGLE-3's verify pass) ends in an
all-reduce of a few kilobytes (Kimi-K2.5: 7168 hidden values in bf16, 14 KB per token); on
the reference host (8 GPUs on PCIe) that all-reduce decided whether speculative decoding
paid off at all. A slow link, a GPU without peer access or a hanging NCCL init shows up
here in a minute rather than after a 10-minute model load.

How: this file is started with any python3 (the orchestrator uses the standard library
only). It finds a Python that has torch (the release venv's first, then the system's),
starts one worker process per GPU with it (``--worker``), and waits for them with a
deadline: on timeout every worker is killed and the reason names the step each rank was
in, so a hung NCCL init fails the play instead of hanging it. Workers time each
all-reduce with CUDA events, eagerly and (for small messages) replayed from a CUDA graph,
as the server's decode does; the median over the iterations of the slowest rank counts.
Bus bandwidth follows nccl-tests: algbw * 2(n-1)/n.

Output: one JSON object on stdout (status passed, failed or skipped, with a reason), exit
code 0 unless this program itself breaks. ``--device cpu --backend gloo`` runs the same
orchestration on CPUs, for testing it where there is no GPU.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
GRAPH_OPS = 20  # all-reduces captured in one CUDA graph; a replay's time / GRAPH_OPS is one op
FAILED_RANK_GRACE_S = 10.0
PROBE = r"""
import json, sys
import torch
info = {"executable": sys.executable, "torch": torch.__version__, "cuda": torch.version.cuda,
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0, "nccl": None}
try:
    v = torch.cuda.nccl.version()
    info["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
except Exception:
    pass
print(json.dumps(info))
"""
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_SYMM_MEM", "NVSHMEM_", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


# ---------------------------------------------------------------- pure functions (unit-tested)

def parse_sizes(text: str) -> list[int]:
    """'16384,268435456' -> [16384, 268435456]; every size a positive integer, ascending, no duplicates."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(r"[0-9]+", part) or int(part) <= 0:
            raise ValueError("message sizes must be positive integers (bytes), got %r" % part)
        sizes.append(int(part))
    if not sizes or sorted(set(sizes)) != sizes:
        raise ValueError("message sizes must be given once each, ascending: %s" % text)
    return sizes


def median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def algbw_gbps(size_bytes: int, micros: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes per second, as nccl-tests counts)."""
    return size_bytes / (micros * 1e-6) / 1e9 if micros > 0 else 0.0


def busbw_gbps(size_bytes: int, micros: float, n: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: algbw * 2(n-1)/n, comparable with a link's speed."""
    return algbw_gbps(size_bytes, micros) * 2 * (n - 1) / n if n > 0 else 0.0


def aggregate(ranks: list[dict], n: int) -> list[dict]:
    """One row per message size from the workers' per-iteration times.

    Each rank's median counts, and of those the slowest rank's (an all-reduce is done when
    the last rank is). latency_us is the CUDA-graph time where one was measured (what the
    server's decode sees), else the eager one.
    """
    rows = []
    for i, first in enumerate(ranks[0]["sizes"]):
        size = first["bytes"]
        eager = max(median(r["sizes"][i]["eager_us"]) for r in ranks)
        row = {"bytes": size, "eager_us": round(eager, 2), "eager_busbw_gbps": round(busbw_gbps(size, eager, n), 2)}
        graphs = [r["sizes"][i].get("graph_us") for r in ranks]
        if all(graphs):
            graph = max(median(g) for g in graphs)
            row.update(graph_us=round(graph, 2), graph_busbw_gbps=round(busbw_gbps(size, graph, n), 2))
        row["timing"] = "cuda_graph" if "graph_us" in row else "eager"
        row["latency_us"] = row.get("graph_us", row["eager_us"])
        row["algbw_gbps"] = round(algbw_gbps(size, row["latency_us"]), 2)
        row["busbw_gbps"] = round(busbw_gbps(size, row["latency_us"], n), 2)
        rows.append(row)
    return rows


def nccl_check(name: str, status: str, expected, found, message: str) -> dict:
    return {"phase": "nccl", "name": name, "status": status, "expected": expected, "found": found, "message": message}


def threshold_check(name: str, n: int, row: dict | None, key: str, threshold: float, expected: str, passes,
                    message) -> dict:
    """One threshold check of a measured size: n/a (1 GPU, no threshold, size not measured) or pass/fail."""
    if n < 2 or row is None or not threshold:
        return nccl_check(name, "n/a", expected, row and row[key],
                          "not checked: " + ("1 GPU, no peer" if n < 2 else "no threshold" if row else "size not measured"))
    return nccl_check(name, "pass" if passes(row[key]) else "fail", expected, row[key], message())


def evaluate(rows: list[dict], n: int, correct: bool, latency_size: int, max_latency_us: float,
             bandwidth_size: int, min_busbw_gbps: float) -> list[dict]:
    """The checks of a measured run: the sum was right, small messages fast enough, large ones wide enough.

    A threshold of 0 is recorded but not checked; with one GPU neither applies (no link is crossed).
    """
    by_size = {r["bytes"]: r for r in rows}
    checks = [nccl_check("allreduce_sum", "pass" if correct else "fail", "sum of ranks", "right" if correct else "wrong",
                         "every rank received the right sum" if correct else "an all-reduce gave a wrong sum")]
    lat, bw = by_size.get(latency_size), by_size.get(bandwidth_size)
    checks.append(threshold_check(
        "latency", n, lat, "latency_us", max_latency_us, "<= %g us at %d B" % (max_latency_us, latency_size),
        lambda found: found <= max_latency_us,
        lambda: "all-reduce of %d B took %.1f us (%s), gpu_preflight_nccl_max_latency_us is %g"
                % (latency_size, lat["latency_us"], lat["timing"].replace("_", " "), max_latency_us)))
    checks.append(threshold_check(
        "bus_bandwidth", n, bw, "busbw_gbps", min_busbw_gbps, ">= %g GB/s at %d B" % (min_busbw_gbps, bandwidth_size),
        lambda found: found >= min_busbw_gbps,
        lambda: "all-reduce of %d B: bus bandwidth %.1f GB/s, gpu_preflight_nccl_min_busbw_gbps is %g"
                % (bandwidth_size, bw["busbw_gbps"], min_busbw_gbps)))
    return checks


def p2p_side(run: dict, n: int, latency_size: int, bandwidth_size: int) -> dict:
    """One side of a P2P comparison: its latency and bus bandwidth, or why it did not finish."""
    transports = (run.get("nccl_log") or {}).get("transports")
    if not run["ok"]:
        return {"status": "failed", "reason": run["reason"], "latency_us": None, "busbw_gbps": None,
                "transports": transports, "results": []}
    rows = aggregate(run["ranks"], n)
    by_size = {r["bytes"]: r for r in rows}
    lat, bw = by_size.get(latency_size), by_size.get(bandwidth_size)
    return {"status": "measured", "reason": None, "latency_us": lat["latency_us"] if lat else None,
            "busbw_gbps": bw["busbw_gbps"] if bw else None, "transports": transports, "results": rows}


def compare_p2p(with_run: dict, without_run: dict, n: int, latency_size: int, bandwidth_size: int,
                primary: str) -> dict:
    """The all-reduce with and without NCCL's P2P transport (NCCL_P2P_DISABLE=1), side by side: what P2P costs
    or saves on this host. ``primary`` names the side the checks judged (the server's setting)."""
    sides = {"with_p2p": p2p_side(with_run, n, latency_size, bandwidth_size),
             "without_p2p": p2p_side(without_run, n, latency_size, bandwidth_size)}

    def text(label, side):
        if side["status"] != "measured":
            return "%s: did not finish (%s)" % (label, (side["reason"] or "")[:200])
        return "%s: %s B in %s us, %s B at %s GB/s bus bandwidth (%s)" % (
            label, latency_size, side["latency_us"], bandwidth_size, side["busbw_gbps"],
            ", ".join(side["transports"] or []) or "transports not reported")

    summary = "; ".join([text("with P2P", sides["with_p2p"]), text("without P2P (NCCL_P2P_DISABLE=1)", sides["without_p2p"])])
    w, wo = sides["with_p2p"], sides["without_p2p"]
    if w["latency_us"] and wo["latency_us"] and w["busbw_gbps"] and wo["busbw_gbps"]:
        summary += "; without P2P the small all-reduce takes %.2fx the time and the large one gets %.0f%% of the " \
                   "bus bandwidth" % (wo["latency_us"] / w["latency_us"], 100.0 * wo["busbw_gbps"] / w["busbw_gbps"])
    return {"primary": primary, "summary": summary, **sides}


def parse_nccl_log(text: str) -> dict:
    """What NCCL said with NCCL_DEBUG=INFO: its version, the transports it chose and the settings it read."""
    version = re.search(r"NCCL version ([0-9][0-9.]*[^\s]*)", text)
    transports = sorted(set(re.findall(r"Channel [0-9/]+ ?: .*? via (\S+)", text)))
    settings = dict(re.findall(r"NCCL INFO (\w+) set by environment to (\S+?)\.?$", text, re.M))
    return {"version": version.group(1) if version else None, "transports": transports, "settings": settings}


def busy_gpus(csv_text: str, max_used_mib: int) -> list[int]:
    """GPU indexes whose memory in use exceeds max_used_mib, from 'index, memory.used' CSV (nounits)."""
    busy = []
    for line in csv_text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) == 2 and cols[0].isdigit() and cols[1].isdigit() and int(cols[1]) > max_used_mib:
            busy.append(int(cols[0]))
    return busy


def where(progress_files: list[str]) -> str:
    """'rank 0 at <step>, rank 1 at <step>' from the workers' progress files."""
    parts = []
    for rank, path in enumerate(progress_files):
        try:
            with open(path, encoding="utf-8") as fh:
                step = fh.read().strip() or "starting"
        except OSError:
            step = "starting"
        parts.append("rank %d at '%s'" % (rank, step))
    return ", ".join(parts)


def run_workers(cmds: list[list[str]], env: dict, timeout: float, progress_files: list[str],
                log_files: list[str]) -> dict:
    """Start one process per command, wait with a deadline, kill all on timeout or after one fails.

    Each worker runs in its own session so that it and anything it started can be killed.
    Returns {"ok": bool, "reason": str|None, "rcs": [...]}.
    """
    procs = []
    for cmd, log in zip(cmds, log_files, strict=True):
        with open(log, "wb") as fh:
            procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                          env=env, start_new_session=True))
    deadline = time.monotonic() + timeout
    failed_since = None
    reason = None
    while True:
        rcs = [p.poll() for p in procs]
        if all(rc is not None for rc in rcs):
            break
        now = time.monotonic()
        if any(rc not in (None, 0) for rc in rcs):
            failed_since = failed_since or now
            if now - failed_since > FAILED_RANK_GRACE_S:
                reason = "other ranks did not finish %g s after one failed" % FAILED_RANK_GRACE_S
                break
        if now > deadline:
            reason = ("no result within %.0f s (gpu_preflight_nccl_timeout): %s; all workers killed"
                      % (timeout, where(progress_files)))
            break
        time.sleep(0.1)
    if reason:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in procs:
            p.wait()
    rcs = [p.returncode for p in procs]
    failed = [r for r, rc in enumerate(rcs) if rc != 0]
    if failed and (not reason or reason.startswith("other ranks")):
        first = failed[0]
        with open(log_files[first], encoding="utf-8", errors="replace") as fh:
            tail = [ln for ln in fh.read().splitlines() if ln.strip() and " NCCL INFO " not in ln][-3:]
        reason = "rank %d failed (exit code %s) %s: %s" % (first, rcs[first], where([progress_files[first]]).split(" ", 2)[2],
                                                            " | ".join(tail)[-600:] or "no output")
    return {"ok": reason is None, "reason": reason, "rcs": rcs}


# ---------------------------------------------------------------- the worker (runs with torch)

def worker(args: argparse.Namespace) -> int:
    """One rank: init NCCL on its GPU, check a sum, time all-reduces of every size, write JSON."""
    def progress(step: str) -> None:
        with open(args.progress, "w", encoding="utf-8") as fh:
            fh.write(step)

    progress("import torch")
    import torch
    import torch.distributed as dist

    rank, n = args.rank, args.world_size
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        dev = torch.device("cpu")
    dtype = getattr(torch, args.dtype)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    progress("init_process_group")
    kwargs = {"backend": args.backend, "init_method": "tcp://127.0.0.1:%d" % args.port, "rank": rank,
              "world_size": n, "timeout": datetime.timedelta(seconds=args.timeout)}
    try:
        dist.init_process_group(device_id=dev, **kwargs) if cuda else dist.init_process_group(**kwargs)
    except TypeError:  # torch < 2.3 has no device_id (no eager NCCL init)
        dist.init_process_group(**kwargs)

    progress("first all-reduce (sum check)")
    x = torch.full((4096,), float(rank + 1), dtype=torch.float32, device=dev)
    dist.all_reduce(x)
    sync()
    correct = bool(torch.all(x == n * (n + 1) / 2).item())

    def fence() -> None:
        flag = torch.ones(1, device=dev)
        dist.all_reduce(flag)
        sync()

    out = {"rank": rank, "correct": correct, "torch": torch.__version__, "sizes": [], "graph_error": None,
           "device": torch.cuda.get_device_name(dev) if cuda else "cpu"}
    graphs_ok = cuda and args.cuda_graphs
    for size in args.sizes:
        progress("all-reduce of %d B (eager)" % size)
        buf = torch.randn(size // DTYPE_BYTES[args.dtype], device=dev).to(dtype)
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        fence()
        if cuda:
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(args.iters)]
            for start, end in events:
                start.record()
                dist.all_reduce(buf)
                end.record()
            sync()
            eager = [start.elapsed_time(end) * 1000.0 for start, end in events]
        else:
            eager = []
            for _ in range(args.iters):
                t0 = time.perf_counter()
                dist.all_reduce(buf)
                eager.append((time.perf_counter() - t0) * 1e6)
        row = {"bytes": size, "eager_us": eager}
        if graphs_ok and size <= args.graph_max_size:
            progress("all-reduce of %d B (CUDA graph capture)" % size)
            captured, graph = 1, None
            try:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        dist.all_reduce(buf)
                torch.cuda.current_stream().wait_stream(side)
                sync()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    for _ in range(GRAPH_OPS):
                        dist.all_reduce(buf)
                sync()
            except Exception as exc:  # a rank that cannot capture must still agree with the others below
                captured, out["graph_error"] = 0, "%s: %s" % (type(exc).__name__, str(exc)[:300])
            agree = torch.tensor([captured], dtype=torch.int32, device=dev)
            dist.all_reduce(agree, op=dist.ReduceOp.MIN)
            sync()
            if agree.item() == 1:
                progress("all-reduce of %d B (CUDA graph replay)" % size)
                graph.replay()
                sync()
                events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(args.iters)]
                for start, end in events:
                    start.record()
                    graph.replay()
                    end.record()
                sync()
                row["graph_us"] = [start.elapsed_time(end) * 1000.0 / GRAPH_OPS for start, end in events]
            else:
                out["graph_error"] = out["graph_error"] or "another rank could not capture a CUDA graph"
                graphs_ok = False
            del graph
            fence()
        out["sizes"].append(row)
        del buf
    progress("done")
    dist.destroy_process_group()
    with open(args.result, "w", encoding="utf-8") as fh:
        json.dump(out, fh)
    return 0


# ---------------------------------------------------------------- the orchestrator (standard library only)

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(candidates: list[str], deadline: float) -> tuple[dict | None, list[str]]:
    """The first candidate interpreter that imports torch, with what it says about CUDA and NCCL."""
    tried = []
    for cand in candidates:
        path = cand if "/" in cand else shutil.which(cand)
        if not path or not os.access(path, os.X_OK):
            tried.append("%s: not found" % cand)
            continue
        try:
            proc = subprocess.run([path, "-c", PROBE], capture_output=True, text=True,
                                  timeout=max(5.0, min(180.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            tried.append("%s: 'import torch' did not return in time" % cand)
            continue
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["exit code %d" % proc.returncode])[-1]
            tried.append("%s: %s" % (cand, last[:200]))
            continue
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        info["path"] = path
        return info, tried
    return None, tried


def p2p_disabled(env: dict) -> bool:
    return str(env.get("NCCL_P2P_DISABLE", "0")).strip() in ("1", "true", "True", "yes")


def measure(args: argparse.Namespace, python: str, n: int, env: dict, deadline: float, log_dir: str | None) -> dict:
    """One run of the workers: {ok, reason, ranks, nccl_log}."""
    with tempfile.TemporaryDirectory(prefix="gpu-preflight-") as tmp:
        port = free_port()
        files = {k: [os.path.join(tmp, "%s%d" % (k, r)) for r in range(n)] for k in ("result", "progress", "log")}
        common = ["--sizes", ",".join(map(str, args.sizes)), "--dtype", args.dtype, "--warmup", str(args.warmup),
                  "--iters", str(args.iters), "--graph-max-size", str(args.graph_max_size), "--backend", args.backend,
                  "--device", args.device, "--timeout", str(args.timeout), "--world-size", str(n), "--port", str(port),
                  "--cuda-graphs" if args.cuda_graphs else "--no-cuda-graphs"]
        cmds = [[python, os.path.abspath(__file__), "--worker", "--rank", str(r), "--result", files["result"][r],
                 "--progress", files["progress"][r], *common] for r in range(n)]
        outcome = run_workers(cmds, env, max(1.0, deadline - time.monotonic()), files["progress"], files["log"])
        logs = ""
        for log in files["log"]:
            with open(log, encoding="utf-8", errors="replace") as fh:
                logs += fh.read()
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)
            for rank, log in enumerate(files["log"]):
                shutil.copy(log, os.path.join(log_dir, "rank%d.log" % rank))
        ranks = []
        if outcome["ok"]:
            for path in files["result"]:
                with open(path, encoding="utf-8") as fh:
                    ranks.append(json.load(fh))
    return {"ok": outcome["ok"], "reason": outcome["reason"], "ranks": ranks,
            "nccl_log": parse_nccl_log(logs) if args.backend == "nccl" else None}


def orchestrate(args: argparse.Namespace) -> dict:
    started = time.monotonic()
    deadline = started + args.timeout
    cuda = args.device == "cuda"
    report = {"status": "skipped", "reason": None, "checks": [], "results": [], "world_size": None,
              "python": None, "torch": None, "nccl": None, "nccl_log": None, "graph_error": None,
              "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
              "config": {"sizes": args.sizes, "dtype": args.dtype, "warmup": args.warmup, "iters": args.iters,
                         "cuda_graphs": args.cuda_graphs, "graph_max_size": args.graph_max_size,
                         "backend": args.backend, "device": args.device, "timeout_s": args.timeout}}
    unavailable = "failed" if args.required else "skipped"
    if cuda:
        if not glob.glob("/dev/nvidia[0-9]*"):
            report["reason"] = ("no GPU device nodes (/dev/nvidia[0-9]*) on this host: nothing to measure "
                                "(a CI or container host)")
            return report
        smi = shutil.which(args.nvidia_smi) if "/" not in args.nvidia_smi else args.nvidia_smi
        if smi and os.access(smi, os.X_OK):
            try:
                proc = subprocess.run([smi, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                                      capture_output=True, text=True, timeout=60)
                busy = busy_gpus(proc.stdout, args.max_used_mib) if proc.returncode == 0 else []
            except subprocess.TimeoutExpired:
                report.update(status="failed", reason="nvidia-smi did not answer within 60 s")
                return report
            if busy:
                report["reason"] = ("GPU %s has more than %d MiB in use (gpu_preflight_nccl_max_gpu_memory_used_mib): "
                                    "another GPU program runs, the all-reduce is not run beside it"
                                    % (", ".join(map(str, busy)), args.max_used_mib))
                return report
    # The interpreter running this program (Ansible's) comes last: a system-wide torch.
    candidates = args.python + ([sys.executable] if sys.executable not in args.python else [])
    info, tried = probe(candidates, deadline)
    if info is None:
        report.update(status=unavailable, reason="no Python with torch among %s (%s)" % (candidates, "; ".join(tried)))
        return report
    report.update(python=info["path"], torch=info["torch"], nccl=info["nccl"])
    n = info["device_count"] if cuda else args.world_size
    if n < 1:
        report.update(status=unavailable, reason="torch %s at %s sees no CUDA device" % (info["torch"], info["path"]))
        return report
    report["world_size"] = n

    env = dict(os.environ)
    if args.nccl_debug and "NCCL_DEBUG" not in env:
        env["NCCL_DEBUG"] = "INFO"
    first = measure(args, info["path"], n, env, deadline, args.log_dir)
    report["nccl_log"] = first["nccl_log"]
    if args.compare_p2p and n > 1:
        # The other P2P setting, with a deadline of its own: a P2P run that hung must not starve it.
        other = dict(env)
        if p2p_disabled(env):
            other.pop("NCCL_P2P_DISABLE")
        else:
            other["NCCL_P2P_DISABLE"] = "1"
        second = measure(args, info["path"], n, other, time.monotonic() + args.timeout,
                         args.log_dir and os.path.join(args.log_dir, "other-p2p"))
        runs = {not p2p_disabled(env): first, not p2p_disabled(other): second}
        report["p2p_comparison"] = compare_p2p(runs[True], runs[False], n, args.latency_size, args.bandwidth_size,
                                               primary="without_p2p" if p2p_disabled(env) else "with_p2p")
    elif args.compare_p2p:
        report["p2p_comparison"] = {"summary": "not compared: 1 GPU, no peer", "with_p2p": None, "without_p2p": None}
    if not first["ok"]:
        report.update(status="failed", reason=first["reason"])
        return report
    ranks = first["ranks"]
    report["devices"] = sorted({r["device"] for r in ranks})
    report["graph_error"] = next((r["graph_error"] for r in ranks if r["graph_error"]), None)
    report["results"] = aggregate(ranks, n)
    correct = all(r["correct"] for r in ranks)
    report["checks"] = evaluate(report["results"], n, correct, args.latency_size, args.max_latency_us,
                                args.bandwidth_size, args.min_busbw_gbps)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    if n == 1 and not failed:
        report.update(status="skipped", reason="1 GPU: an all-reduce has no peer and crosses no link; the 1-process "
                                               "NCCL run recorded here only shows that torch and NCCL work on this GPU")
    elif failed:
        report.update(status="failed", reason="; ".join(c["message"] for c in failed))
    else:
        report.update(status="passed", reason=None)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append", default=None,
                    help="interpreter to try for torch, in order (repeat); default: python3")
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes("16384,65536,262144,1048576,4194304,16777216,"
                                                                    "67108864,268435456"),
                    help="message sizes in bytes, comma-separated, ascending")
    ap.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default="bfloat16")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=True,
                    help="also time small messages replayed from a CUDA graph (as the server's decode runs)")
    ap.add_argument("--graph-max-size", type=int, default=4 * 2 ** 20)
    ap.add_argument("--latency-size", type=int, default=16384)
    ap.add_argument("--max-latency-us", type=float, default=0)
    ap.add_argument("--bandwidth-size", type=int, default=268435456)
    ap.add_argument("--min-busbw-gbps", type=float, default=0)
    ap.add_argument("--timeout", type=float, default=300, help="seconds for everything, NCCL init included")
    ap.add_argument("--required", action="store_true", help="no usable torch on a GPU host is a failure, not a skip")
    ap.add_argument("--max-used-mib", type=int, default=2048, help="skip when a GPU has more memory in use")
    ap.add_argument("--nvidia-smi", default="nvidia-smi")
    ap.add_argument("--nccl-debug", action=argparse.BooleanOptionalAction, default=True,
                    help="run NCCL with NCCL_DEBUG=INFO (unless set) to report its version, transports and settings")
    ap.add_argument("--compare-p2p", action="store_true",
                    help="also measure with NCCL_P2P_DISABLE toggled and report both (p2p_comparison)")
    ap.add_argument("--log-dir", help="keep each worker's output (NCCL's log) there as rank<N>.log")
    ap.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--world-size", type=int, default=2, help="processes with --device cpu (else one per GPU)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--progress", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.python = args.python or ["python3"]
    bad = [s for s in args.sizes if s % DTYPE_BYTES[args.dtype]]
    if bad:
        ap.error("sizes %s are not multiples of the %s element size (%d B)" % (bad, args.dtype, DTYPE_BYTES[args.dtype]))
    if args.worker:
        return worker(args)
    started = time.monotonic()
    report = orchestrate(args)
    report["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
