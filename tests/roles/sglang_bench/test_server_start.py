"""The start each benchmark measured: sglang_bench.py keeps role sglang_server's record of the running server's
start (--start-record) in the result's environment, only when it is that start; the report lists each start
once and the play's line names the newest session's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from repo import ROOT, load

sys.path.insert(0, str(ROOT / "roles" / "sglang_bench" / "files"))
from sglang_benchmark import cli

report = load("roles/sglang_bench/files/sglang_bench_report.py")
data = load("tests/roles/sglang_bench/benchdata.py", "sglang_bench_benchdata")
SCRIPT = ROOT / "roles" / "sglang_bench" / "files" / "sglang_bench_report.py"


def start_record(pid: int, started: float, invocation: str = "f" * 32) -> dict:
    return {"invocation_id": invocation, "main_pid": str(pid), "started_epoch": started, "ready_s": 81.59,
            "ready_from": "--ready", "summary": "ready 81.59 s after launch, target weights 4.4 s, CUDA graphs 25.3 s",
            "phases": [{"phase": "weights_begin->weights_end", "seconds": 4.41},
                       {"phase": "graphs_begin->graphs_end", "seconds": 25.3}],
            "weights": [{"model": "target", "type": "LlamaForCausalLM", "elapsed_s": 4.41, "mem_usage_gib": 32.06,
                         "avail_before_gib": 139.09}],
            "cuda_graphs": [{"name": "target prefill", "elapsed_s": 16.39}, {"name": "draft decode", "elapsed_s": 1.64}],
            "jit": {"count": 3}, "errors": []}


def test_the_record_of_the_running_servers_start_is_kept_compact(tmp_path):
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        began = cli.process_started(server.pid)
        assert began is not None and abs(began - time.time()) < 5
        path = tmp_path / "last.json"
        path.write_text(json.dumps(start_record(server.pid, began)))
        kept = cli.server_start(str(path))["server_start"]
        assert kept == {"invocation_id": "f" * 32, "started_epoch": began, "ready_s": 81.59, "ready_from": "--ready",
                        "summary": start_record(0, 0)["summary"],
                        "phases": {"weights_begin->weights_end": 4.41, "graphs_begin->graphs_end": 25.3},
                        "weights": [{"model": "target", "type": "LlamaForCausalLM", "elapsed_s": 4.41,
                                     "mem_usage_gib": 32.06}],
                        "cuda_graphs_s": 18.03, "jit_messages": 3}
        # the same process, a record of another start of it (before a crash or a reboot: it started 10 s apart)
        path.write_text(json.dumps(start_record(server.pid, began - 10)))
        assert "not the running server's" in cli.server_start(str(path))["server_start_unknown"]
    finally:
        server.kill()
        server.wait()
    path.write_text(json.dumps(start_record(server.pid, began)))  # its process is gone
    assert "server_start" not in cli.server_start(str(path))
    assert cli.server_start(str(tmp_path / "none.json")) == {"server_start_unknown": f"no start record ({tmp_path}/none.json)"}
    (tmp_path / "bad.json").write_text("{")
    assert "bad.json" in cli.server_start(str(tmp_path / "bad.json"))["server_start_unknown"]
    assert cli.process_started(os.getpid()) is not None


def test_the_report_lists_each_measured_start_once_and_names_the_newest_sessions(tmp_path):
    host_dir = tmp_path / "gpu1"
    s1, s2 = data.session(1), data.session(2)
    for session, label, invocation, ready in [(s1, "baseline", "a" * 32, 70.0), (s1, "eagle3", "a" * 32, 70.0),
                                              (s2, "eagle3", "b" * 32, 81.59)]:
        doc = data.result_doc(label, [100.0, 101.0, 99.5], session)
        rec = start_record(1, 0.0, invocation)
        doc["environment"]["server_start"] = {**cli_compact(rec), "ready_s": ready}
        (host_dir).mkdir(parents=True, exist_ok=True)
        (host_dir / f"{session}-{label}.json").write_text(json.dumps(doc))
    data.write(host_dir, data.session(3), "eagle3", [100.0, 100.5])  # an older bench's result: no start
    proc = subprocess.run([sys.executable, str(SCRIPT), "--results-dir", str(tmp_path), "--host", "gpu1", "--no-plot"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = (host_dir / "report.md").read_text()
    rows = [ln for ln in text.split("## Server starts")[1].splitlines() if ln.startswith(f"| {s1}") or ln.startswith(f"| {s2}")]
    assert rows == [f"| {s1} | r1 | 70.0 | {start_record(0, 0)['summary']} |",
                    f"| {s2} | r1 | 81.59 | {start_record(0, 0)['summary']} |"]
    assert json.loads(proc.stdout)["server_start"] is None  # the newest session (3) measured no recorded start
    (host_dir / f"{data.session(3)}-eagle3.json").unlink()
    proc = subprocess.run([sys.executable, str(SCRIPT), "--results-dir", str(tmp_path), "--host", "gpu1", "--no-plot"],
                          capture_output=True, text=True, timeout=120)
    assert json.loads(proc.stdout)["server_start"]["invocation_id"] == "b" * 32


def cli_compact(record: dict) -> dict:
    return {"invocation_id": record["invocation_id"], "ready_s": record["ready_s"], "summary": record["summary"]}
