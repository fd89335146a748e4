"""The benchmark's results as node exporter textfile metrics (roles/sglang_monitoring/files/sglang_bench_textfile.py):
the newest result per label, its baseline (configured, else the median of the previous results), written
atomically, valid for `promtool check metrics`, and unchanged by a rerun with nothing new.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import promtool as promtool_harness
from repo import role_file

TOOL = role_file("sglang_monitoring", "files", "sglang_bench_textfile.py")


def result(label: str, tok_s: float | None, finished: str, accept: float | None = 2.4, ok: bool = True) -> dict:
    """The fields of sglang_bench.py's result document that the tool reads."""
    return {"schema": 1, "label": label, "ok": ok, "mean_tok_s": tok_s, "accept_length": accept,
            "finished_at": finished, "environment": {"release_id": "sglang-0.5.9-abc", "session": finished[:8]}}


def run(tmp_path: Path, baselines: dict | None = None) -> str:
    argv = [sys.executable, str(TOOL), "--results-dir", str(tmp_path / "results"), "--textfile",
            str(tmp_path / "textfile" / "sglang_bench.prom"), "--state", str(tmp_path / "state" / "history.json")]
    if baselines is not None:
        (tmp_path / "baselines.json").write_text(json.dumps(baselines))
        argv += ["--baselines", str(tmp_path / "baselines.json")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def metrics(tmp_path: Path) -> dict[str, float]:
    text = (tmp_path / "textfile" / "sglang_bench.prom").read_text()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+\}) (\S+)$", text, re.M)}


def write(tmp_path: Path, doc: dict) -> None:
    (tmp_path / "results").mkdir(exist_ok=True)
    (tmp_path / "results" / f"last-{doc['label']}.json").write_text(json.dumps(doc))


def test_history_baseline_and_a_regression(tmp_path: Path) -> None:
    write(tmp_path, result("eagle3", 96.0, "2026-12-01T08:00:00Z"))
    write(tmp_path, result("baseline", 40.0, "2026-12-01T08:00:00Z", accept=None))
    run(tmp_path)
    first = metrics(tmp_path)
    assert first['sglang_bench_tokens_per_second{label="eagle3"}'] == 96.0
    assert first['sglang_bench_accept_length{label="eagle3"}'] == 2.4
    assert first['sglang_bench_ok{label="eagle3"}'] == 1.0
    assert first['sglang_bench_info{label="eagle3",release="sglang-0.5.9-abc",session="2026-12-"}'] == 1.0
    assert not any(k.startswith("sglang_bench_baseline") for k in first)  # a first result has nothing to compare with
    assert not any(k.startswith('sglang_bench_accept_length{label="baseline"') for k in first)

    write(tmp_path, result("eagle3", 98.0, "2026-12-01T09:00:00Z"))
    run(tmp_path)
    write(tmp_path, result("eagle3", 76.8, "2026-12-01T10:00:00Z", accept=1.9))  # 20% below
    run(tmp_path)
    third = metrics(tmp_path)
    assert third['sglang_bench_tokens_per_second{label="eagle3"}'] == 76.8
    assert third['sglang_bench_baseline_tokens_per_second{label="eagle3",source="history"}'] == 97.0  # median of 96, 98
    assert third['sglang_bench_baseline_accept_length{label="eagle3",source="history"}'] == 2.4

    before = (tmp_path / "textfile" / "sglang_bench.prom").stat().st_mtime_ns
    assert "unchanged" in run(tmp_path)  # nothing new: same baseline, file untouched
    assert (tmp_path / "textfile" / "sglang_bench.prom").stat().st_mtime_ns == before
    assert metrics(tmp_path) == third


def test_configured_baseline_wins_and_a_failed_run_publishes_no_speed(tmp_path: Path) -> None:
    write(tmp_path, result("eagle3", 80.0, "2026-12-01T08:00:00Z"))
    write(tmp_path, result("sweep-c8", None, "2026-12-01T08:00:00Z", ok=False))
    run(tmp_path, {"eagle3": {"tok_s": 100.0, "accept_length": 2.5}})
    got = metrics(tmp_path)
    assert got['sglang_bench_baseline_tokens_per_second{label="eagle3",source="configured"}'] == 100.0
    assert got['sglang_bench_baseline_accept_length{label="eagle3",source="configured"}'] == 2.5
    assert got['sglang_bench_ok{label="sweep-c8"}'] == 0.0
    assert not any(k.startswith('sglang_bench_tokens_per_second{label="sweep-c8"') for k in got)


def test_output_passes_promtool_check_metrics(tmp_path: Path) -> None:
    write(tmp_path, result("eagle3", 96.0, "2026-12-01T08:00:00Z"))
    write(tmp_path, result("eagle3", 90.0, "2026-12-01T09:00:00Z"))
    run(tmp_path)
    write(tmp_path, result("eagle3", 91.0, "2026-12-01T10:00:00Z"))
    run(tmp_path)
    text = (tmp_path / "textfile" / "sglang_bench.prom").read_text()
    proc = subprocess.run([str(promtool_harness.promtool()), "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list((tmp_path / "textfile").iterdir()) == [tmp_path / "textfile" / "sglang_bench.prom"]  # no temp files


def test_no_results_directory_yet(tmp_path: Path) -> None:
    run(tmp_path)
    assert (tmp_path / "textfile" / "sglang_bench.prom").read_text() == ""


def test_the_newest_start_as_metrics_from_a_real_start_record(tmp_path):
    """Role sglang_server's record of a real start (issue 42's warm H200 start read by the role's reader, and a
    tensor-parallel log from its tests): the ready time, each phase, each model's weights and each CUDA graph as
    SGLang printed them for one rank; promtool accepts the file; no record, no metrics."""
    import gzip

    from repo import ROOT, load

    reader = load(role_file("sglang_server", "files", "sglang_start_phases.py"), "sglang_start_phases")
    log = ROOT / "docs/validation/restart-h200/starts/h200-d-01-warm.log.gz"
    started = json.loads((log.parent / "h200-d-01-warm.phases.json").read_text())["started_epoch"]
    record = reader.read(gzip.open(log, "rt"), started)
    (tmp_path / "starts").mkdir()
    (tmp_path / "starts" / "last.json").write_text(json.dumps(record))
    argv = [sys.executable, str(TOOL), "--results-dir", str(tmp_path / "results"), "--textfile",
            str(tmp_path / "textfile" / "sglang_bench.prom"), "--state", str(tmp_path / "state" / "history.json"),
            "--start-record", str(tmp_path / "starts" / "last.json"),
            "--start-textfile", str(tmp_path / "textfile" / "sglang_server_start.prom")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "the newest start" in proc.stdout, proc.stderr
    text = (tmp_path / "textfile" / "sglang_server_start.prom").read_text()
    got = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(sglang_server_start[^ {]*(?:\{[^}]*\})?) (\S+)$", text, re.M)}
    assert got["sglang_server_start_ready_seconds"] == record["ready_s"] == 81.59
    assert got["sglang_server_start_timestamp_seconds"] == started
    assert got['sglang_server_start_weights_seconds{model="target"}'] == 4.41
    assert got['sglang_server_start_weights_seconds{model="draft"}'] == 0.01
    assert got['sglang_server_start_cuda_graph_seconds{graph="target prefill"}'] == 16.39
    assert len([k for k in got if k.startswith("sglang_server_start_cuda_graph_seconds")]) == 5
    phases = {k: v for k, v in got.items() if k.startswith("sglang_server_start_phase_seconds")}
    graphs = 'sglang_server_start_phase_seconds{phase="graphs_begin->graphs_end",what="CUDA graph capture (every graph)"}'
    assert phases[graphs] == 25.27
    assert round(sum(phases.values()), 2) == record["ready_s"]  # the segments add up to the start
    check = subprocess.run([str(promtool_harness.promtool()), "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    # a tensor-parallel start: one rank's figures, not the sum of eight
    tp = reader.read([f"[2026-12-05 10:00:30.{r}00 TP{r}] Load weight begin. avail mem=94.50 GB" for r in (0, 1)]
                     + [f"[2026-12-05 10:01:52.{r}00 TP{r}] Load weight end. elapsed={81.4 + r} s, type=DeepseekV3ForCausalLM, "
                        "avail mem=30.1 GB, mem usage=64.0 GB." for r in (1, 0)])
    (tmp_path / "starts" / "last.json").write_text(json.dumps(tp))
    assert subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    text = (tmp_path / "textfile" / "sglang_server_start.prom").read_text()
    assert re.findall(r'^sglang_server_start_weights_seconds\{model="target"\} (\S+)$', text, re.M) == ["81.4"]
    (tmp_path / "starts" / "last.json").unlink()
    assert subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    assert (tmp_path / "textfile" / "sglang_server_start.prom").read_text() == ""
