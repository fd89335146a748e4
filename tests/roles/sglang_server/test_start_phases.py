"""files/sglang_start_phases.py against real SGLang 0.5.17 logs recorded on the H200 (docs/validation/).

The figures asserted here are read off those logs by hand: the 8B shape's first start on a fresh
machine (docs/validation/testbed-h200/server/shape-server-1-8b-eagle3.log: EAGLE-3, CUDA graphs on,
Triton compiling the prefill graphs' kernels), its restart with the Triton cache kept (.log.gz), a
real-weights SmolLM2 start (a loader progress bar), and a start that failed in graph capture
(docs/validation/sglang_serve-h200/server-1-start.log); and issue 42's starts on a 34.36 GB real checkpoint
(docs/validation/restart-h200/starts: millisecond stamps, 18 shards loaded cold and warm, a start that
failed after its weights). Lines of other releases and of a
tensor-parallel rank are taken from SGLang's source (0.5.9's format strings, 0.5.17's
configure_logger prefix " TP<n>" and SGLANG_LOG_MS).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from repo import ROOT, load, role_file

PHASES = role_file("sglang_server", "files", "sglang_start_phases.py")
sp = load(PHASES, "sglang_start_phases")
TESTBED = ROOT / "docs/validation/testbed-h200/server"
SERVE = ROOT / "docs/validation/sglang_serve-h200"
RESTART = ROOT / "docs/validation/restart-h200/starts"


def read_log(path, **kw):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
        return sp.read(handle, **kw)


def seconds(result, phase):
    return next(s["seconds"] for s in result["phases"] if s["phase"] == phase)


def test_fresh_start_of_the_8b_shape_with_eagle3_and_cuda_graphs():
    r = read_log(TESTBED / "shape-server-1-8b-eagle3.log")
    assert r["found"] and r["origin"] == "first log line"
    target, draft = r["weights"]
    assert (target["model"], target["type"], target["elapsed_s"], target["mem_usage_gib"]) == (
        "target", "LlamaForCausalLM", 0.26, 15.02)
    assert target["avail_before_gib"] == 139.09 and target["avail_after_gib"] == 124.07
    assert target["mem_usage_bytes"] == int(15.02 * 2**30)
    assert (draft["model"], draft["type"], draft["elapsed_s"], draft["mem_usage_gib"]) == (
        "draft", "LlamaForCausalLMEagle3", 0.01, 2.14)
    assert [(g["name"], g["elapsed_s"], g["sizes"], g["backend"]) for g in r["cuda_graphs"]] == [
        ("target prefill", 79.96, 58, "breakable"), ("target verify", 5.99, 23, "full"),
        ("draft prefill", 1.61, 58, "breakable"), ("draft decode", 5.75, 23, "full"),
        ("draft extend", 1.35, 23, "full")]
    assert [(k["tokens"], k["k_gib"]) for k in r["kv_cache"]] == [(802708, 48.99), (802708, 1.53)]
    # 17:54:07 first line, 17:54:41 weights, 17:54:47 graphs begin, 17:56:21 graphs end,
    # 17:56:22 Uvicorn, 17:56:26 fired up, 17:56:28 the first 200 on /health_generate.
    assert r["marks"] == {"launch": None, "first_line": 0.0, "weights_begin": 34.0, "weights_end": 34.0,
                          "draft_weights_end": 38.0, "kv_cache_end": 40.0, "graphs_begin": 40.0,
                          "graphs_end": 134.0, "http_up": 135.0, "fired_up": 139.0, "ready": 141.0}
    assert r["ready_s"] == 141.0 and r["ready_from"].startswith("first 200 on /health_generate")
    assert seconds(r, "graphs_begin->graphs_end") == 94.0
    graphs = next(s for s in r["phases"] if s["phase"] == "graphs_begin->graphs_end")
    assert graphs["printed_s"] == round(79.96 + 5.99 + 1.61 + 5.75 + 1.35, 2)
    assert sum(s["seconds"] for s in r["phases"]) == 141.0  # the segments add up to the whole
    t = r["startup_timings"]
    assert t["load_weight"] == 0.26 and t["scheduler_e2e"] == 106.22 and t["tokenizer_e2e"] == 132.42
    assert t["cuda_graph"] == {"prefill": 79.96, "decode": 0.0, "target_verify": 5.99, "draft_prefill": 1.61,
                               "draft_decode": 5.75, "draft_extend": 1.35}
    assert r["errors"] == []
    assert r["jit"]["count"] == 0  # Triton compiles silently: its cache tells (tests/device/restart_proof.py)


def test_a_restart_with_the_triton_cache_kept_captures_the_prefill_graphs_in_ten_seconds():
    r = read_log(TESTBED / "shape-server-2-8b-eagle3-restart1.log.gz")
    graphs = {g["name"]: g["elapsed_s"] for g in r["cuda_graphs"]}
    assert graphs["target prefill"] == 10.0 and graphs["target verify"] == 2.5
    assert r["ready_s"] == 62.0 and seconds(r, "graphs_begin->graphs_end") == 16.0


def test_real_weights_and_the_loaders_progress_bar():
    r = read_log(TESTBED / "smol-server-1-smol-plain.log")
    assert [(w["model"], w["elapsed_s"], w["mem_usage_gib"]) for w in r["weights"]] == [("target", 0.16, 0.27)]
    assert r["loader_bars"]["Multi-thread loading shards"]["done"] == 1
    assert r["loader_bars"]["Multi-thread loading shards"]["percent"] == 100
    assert [g["name"] for g in r["cuda_graphs"]] == ["target prefill", "target decode"]
    assert r["marks"]["draft_weights_end"] is None
    assert r["ready_s"] == 49.0


def test_launch_and_readiness_given_from_outside_anchor_the_phases():
    first = read_log(TESTBED / "shape-server-1-8b-eagle3.log")["first_line_epoch"]
    r = read_log(TESTBED / "shape-server-1-8b-eagle3.log", started=first - 27.5, ready=first + 142.5)
    assert r["origin"] == "launch (--started)" and r["ready_from"] == "--ready"
    assert r["marks"]["first_line"] == 27.5 and r["ready_s"] == 170.0
    assert r["phases"][0] == {"phase": "launch->first_line", "what": "imports and argument parsing", "seconds": 27.5}
    assert round(sum(s["seconds"] for s in r["phases"]), 2) == 170.0


def test_a_start_that_failed_names_its_error_and_has_no_readiness():
    r = read_log(SERVE / "server-1-start.log")
    assert r["ready_s"] is None and r["marks"]["fired_up"] is None
    assert any("Traceback" in e for e in r["errors"])


def test_a_tensor_parallel_ranks_lines_milliseconds_and_older_releases_formats():
    lines = [
        "[2026-12-05 10:00:00.100 TP0] server_args=ServerArgs(model_path='/m')",
        "[2026-12-05 10:00:30.500 TP0] Load weight begin. avail mem=94.50 GB",
        "[2026-12-05 10:00:30.600 TP1] Load weight begin. avail mem=94.50 GB",
        "Multi-thread loading shards:  50% Completed | 32/64 [00:40<00:40, 1.25s/it]",
        "Multi-thread loading shards: 100% Completed | 64/64 [01:21<00:00, 1.27s/it]",
        "[2026-12-05 10:01:52.000 TP1] Load weight end. elapsed=81.40 s, type=DeepseekV3ForCausalLM, "
        "quant=compressed-tensors, avail mem=26.10 GB, mem usage=68.40 GB.",
        "[2026-12-05 10:01:52.250 TP0] Load weight end. elapsed=81.75 s, type=DeepseekV3ForCausalLM, "
        "quant=compressed-tensors, avail mem=26.10 GB, mem usage=68.40 GB.",
        "[2026-12-05 10:01:53 TP0] Try DeepGEMM JIT Compiling for <GEMM_NT_F8F8BF16> N=7168, K=2048, "
        "num_groups=1 with all Ms.",
        "[2026-12-05 10:01:55 TP0] Compiling a graph for dynamic shape takes 12.50 s",
        "[1/3] /usr/local/cuda/bin/nvcc -c batch_prefill.cu -o batch_prefill.cuda.o",
        "[2026-12-05 10:02:00 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB",
        "[2026-12-05 10:02:30 TP0] Capture cuda graph end. Time elapsed: 30.25 s. mem usage=1.20 GB. avail mem=18.80 GB.",
        "[2026-12-05 10:02:31 TP0] Capture draft cuda graph begin. This can take up to several minutes. avail mem=18.80 GB",
        "[2026-12-05 10:02:36 TP0] Capture draft cuda graph end. Time elapsed: 5.00 s. mem usage=0.50 GB. avail mem=18.30 GB.",
        "[2026-12-05 10:02:40] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        "[2026-12-05 10:02:45] The server is fired up and ready to roll!",
        '[2026-12-05 10:02:47] INFO:     127.0.0.1:5 - "GET /health_generate HTTP/1.1" 200 OK',
    ]
    r = sp.read(lines)
    assert [(w["rank"], w["model"], w["elapsed_s"], w["quantization"]) for w in r["weights"]] == [
        ("TP0", "target", 81.75, "quant=compressed-tensors"), ("TP1", "target", 81.4, "quant=compressed-tensors")]
    assert r["weights"][0]["gb_per_s"] == round(68.40 * 2**30 / 1e9 / 81.75, 2)
    assert r["marks"]["weights_begin"] == 30.4 and r["marks"]["weights_end"] == 111.9  # the first rank to end
    assert r["marks"]["draft_weights_end"] is None  # one weights end per rank: no draft
    assert r["loader_bars"]["Multi-thread loading shards"] == {"percent": 100, "done": 64, "total": 64,
                                                               "elapsed_s": 81.0, "t": 30.5}
    assert [(g["name"], g["elapsed_s"], g["mem_usage_gib"]) for g in r["cuda_graphs"]] == [
        ("all", 30.25, 1.2), ("draft", 5.0, 0.5)]
    assert r["jit"]["by_source"] == {"deep_gemm": 1, "ninja": 1, "torch_compile": 1}
    assert r["jit"]["seconds_printed"] == 12.5
    assert r["ready_s"] == 166.9


def test_the_command_line_reads_stdin_and_writes_json(tmp_path):
    log = (TESTBED / "smol-server-1-smol-plain.log").read_bytes()
    out = tmp_path / "phases.json"
    proc = subprocess.run([sys.executable, str(PHASES), "-", "--json", str(out)], input=log,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert b"target prefill" in proc.stdout
    assert json.loads(out.read_text())["ready_s"] == 49.0
    empty = subprocess.run([sys.executable, str(PHASES), "-", "--quiet"], input=b"no sglang here\n",
                           capture_output=True, timeout=60)
    assert empty.returncode == 1


@pytest.mark.parametrize("name", sorted(p.name for p in TESTBED.glob("*.log*")))
def test_every_recorded_start_of_the_test_bed_reads_whole(name):
    r = read_log(TESTBED / name)
    assert r["found"] and r["weights"] and r["cuda_graphs"] and r["ready_s"]
    assert r["errors"] == []
    assert all(s["seconds"] >= 0 for s in r["phases"])


def test_a_cold_start_of_a_real_34_gb_checkpoint_with_millisecond_stamps():
    first = None
    with gzip.open(RESTART / "h100-b-02-cold.log.gz", "rt") as handle:
        r = sp.read(handle)
        first = r["first_line_epoch"]
    with gzip.open(RESTART / "h100-b-02-cold.log.gz", "rt") as handle:
        anchored = sp.read(handle, started=first - 33.33)
    target, draft = anchored["weights"]
    assert (target["elapsed_s"], target["mem_usage_gib"], target["gb_per_s"]) == (24.51, 32.06, 1.4)
    assert (draft["type"], draft["mem_usage_gib"]) == ("LlamaForCausalLMEagle3", 4.62)
    assert anchored["loader_bars"]["Multi-thread loading shards"] == {
        "percent": 100, "done": 18, "total": 18, "elapsed_s": 24.0, "t": 71.98}
    marks = anchored["marks"]
    assert (marks["first_line"], marks["weights_begin"], marks["weights_end"]) == (33.33, 71.98, 96.49)
    assert (marks["graphs_begin"], marks["graphs_end"], marks["ready"]) == (100.99, 127.58, 131.33)
    assert anchored["startup_timings"]["load_weight"] == 24.53
    assert [g["elapsed_s"] for g in anchored["cuda_graphs"]] == [18.63, 3.65, 1.48, 1.41, 1.3]


def test_a_start_that_failed_after_its_weights_keeps_the_weights_and_names_the_error():
    r = read_log(RESTART / "h200-d-02-cold-tuned.log.gz")
    assert [(w["model"], w["elapsed_s"]) for w in r["weights"]] == [("target", 22.26)]
    assert r["ready_s"] is None and r["cuda_graphs"] == []
    assert any("Model loader extra config is not supported for load format LoadFormat.DUMMY" in e for e in r["errors"])


@pytest.mark.parametrize("name", sorted(str(p.relative_to(RESTART.parent)) for p in RESTART.parent.glob("**/starts/*.log.gz")))
def test_every_start_of_issue_42_reads_as_the_proof_recorded_it(name):
    """Every recorded start of docs/validation/restart-h200: BEFORE, AFTER, fst and the loaders compared."""
    log = RESTART.parent / name
    recorded = json.loads(log.with_name(log.name.replace(".log.gz", ".phases.json")).read_text())
    # Anchored where the proof anchored it (its launch), through the first line: the log's stamps are
    # the device's local time, read here in this machine's.
    first = read_log(log)["first_line_epoch"]
    r = read_log(log, started=first - recorded["marks"]["first_line"])
    # (to 0.01 s: the proof's launch had microseconds, the first line's offset here is rounded)
    assert {k: v for k, v in r["marks"].items() if v is not None} == pytest.approx(
        {k: v for k, v in recorded["marks"].items() if v is not None}, abs=0.011)
    assert [s["phase"] for s in r["phases"]] == [s["phase"] for s in recorded["phases"]]
    assert [s["seconds"] for s in r["phases"]] == pytest.approx([s["seconds"] for s in recorded["phases"]], abs=0.021)
    for mine, theirs in ((r["weights"], recorded["weights"]), (r["cuda_graphs"], recorded["cuda_graphs"])):
        assert [{k: v for k, v in x.items() if k not in ("begin", "end")} for x in mine] == [
            {k: v for k, v in x.items() if k not in ("begin", "end")} for x in theirs]
    if name == "fst/starts/h100-fst-b-02-warm-fst.log.gz":  # GPUDirect Storage refused the first shard: no weights
        assert r["weights"] == [] and any("cuFileHandleRegister" in e for e in r["errors"]), r["errors"]
        return
    # the 34.36 GB checkpoint, printed in GiB; fastsafetensors left twice that allocated (docs/validation/restart-h200)
    assert r["weights"][0]["mem_usage_gib"] == (64.09 if name.endswith("fst.log.gz") else 32.06)


# --- --record: one record per start (TEST DOUBLES of systemctl and journalctl on PATH: this machine runs no
# systemd; molecule sglang_server records real starts of the simulator's unit through the role's task)

def fake_systemd(tmp_path, monkeypatch, show: dict[str, str], journal_file):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text("#!/bin/sh\ncat <<'EOF'\n" + "".join(f"{k}={v}\n" for k, v in show.items())
                                       + "EOF\n")
    (bin_dir / "journalctl").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/journalctl.argv\n"
                                        f"zcat -f {journal_file}\n")
    for tool in ("systemctl", "journalctl"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")


def test_record_writes_each_start_once_and_keeps_the_newest(tmp_path, monkeypatch, capsys):
    log = RESTART / "h200-d-01-warm.log.gz"
    first_stamp = sp.read(gzip.open(log, "rt"))["first_line_epoch"]
    starts = tmp_path / "starts"
    answers = []
    for n, invocation in enumerate(["a" * 32, "b" * 32, "c" * 32]):
        fake_systemd(tmp_path, monkeypatch, {"ActiveState": "active", "InvocationID": invocation,
                                             "ExecMainStartTimestamp": f"@{first_stamp - 17 + n}",
                                             "ExecMainPID": "4242"}, log)
        for _ in range(2):  # the second run of the same start records nothing
            rc = sp.main(["--record", str(starts), "--unit", "sglang-server", "--keep", "2"]
                         + (["--ready", str(first_stamp + 60)] if n == 0 else []))
            answers.append((rc, json.loads(capsys.readouterr().out)))
    assert [(rc, a["recorded"]) for rc, a in answers] == [(0, True), (0, False)] * 3
    assert answers[1][1]["why"] == "this start is recorded" and answers[1][1]["file"] == answers[0][1]["file"]
    kept = sorted(p.name for p in starts.iterdir())
    assert len(kept) == 3 and kept[-1] == "last.json" and "aaaaaaaaaaaa" not in "".join(kept)  # keep 2: a's went
    assert all(oct(p.stat().st_mode & 0o777) == "0o640" for p in starts.iterdir())
    newest = json.loads((starts / "last.json").read_text())
    assert newest["invocation_id"] == "c" * 32 and (starts / kept[1]).read_text() == (starts / "last.json").read_text()
    # the journal of that invocation alone, read as this reader reads any log
    assert (tmp_path / "journalctl.argv").read_text().splitlines()[-1] == f"_SYSTEMD_INVOCATION_ID={'c' * 32} -o cat --no-pager"
    # the launch from systemd: 17 s before the first line (2 s later for c); ready from --ready, else the log
    first = answers[0][1]
    assert first["phases"]["launch->first_line"] == 17.0 and first["ready_s"] == 77.0 and first["ready_from"] == "--ready"
    assert answers[4][1]["phases"]["launch->first_line"] == 15.0 and answers[4][1]["ready_from"] != "--ready"
    assert first["summary"].startswith("ready 77.0 s after launch, imports 17.0 s, ") and "target weights" in first["summary"]


def test_record_of_a_unit_that_is_not_running_or_whose_journal_has_no_sglang_line(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty.log"
    empty.write_text("nothing SGLang printed\n")
    fake_systemd(tmp_path, monkeypatch, {"ActiveState": "activating", "InvocationID": "d" * 32,
                                         "ExecMainStartTimestamp": "@1796500000"}, empty)
    assert sp.main(["--record", str(tmp_path / "s"), "--unit", "sglang-server"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer == {"recorded": False, "why": "sglang-server is not running (activating): no start to record"}
    assert not (tmp_path / "s").exists()
    fake_systemd(tmp_path, monkeypatch, {"ActiveState": "active", "InvocationID": "d" * 32,
                                         "ExecMainStartTimestamp": "@1796500000"}, empty)
    assert sp.main(["--record", str(tmp_path / "s"), "--unit", "sglang-server"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["recorded"] and not answer["found"] and "holds no SGLang log line" in answer["why"]
    with pytest.raises(SystemExit):
        sp.main(["--record", str(tmp_path / "s"), "--unit", "sglang-server", "--keep", "0"])


def test_the_simulators_start_reads_in_the_order_of_a_real_sglang_start(start_sim):
    """The simulator (TEST ONLY) prints a start's lines in SGLang 0.5.17's words: the reader finds the same
    events in the same order as in a real EAGLE-3 start (issue 42's warm start on the H200); the CUDA graphs'
    lines say 0 s (the simulator captures none), and none with --disable-cuda-graph."""
    sim = start_sim(["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "draft"],
                    env={"SGLANG_SIM_LOAD_SECONDS": "0.3"})
    simulated = read_log(sim.out_path)
    real = read_log(RESTART / "h200-d-01-warm.log.gz")
    order = ["first_line", "weights_begin", "weights_end", "draft_weights_end", "kv_cache_end", "graphs_begin",
             "graphs_end", "http_up", "fired_up"]
    for result in (simulated, real):
        marks = [result["marks"][name] for name in order]
        # in order, to the second (Uvicorn stamps whole seconds, SGLang milliseconds)
        assert None not in marks and all(b >= a - 1 for a, b in zip(marks, marks[1:], strict=False)), result["marks"]
    assert [w["model"] for w in simulated["weights"]] == [w["model"] for w in real["weights"]] == ["target", "draft"]
    assert simulated["weights"][0]["elapsed_s"] >= 0.3 and simulated["kv_cache"]
    assert [(g["name"], g["elapsed_s"]) for g in simulated["cuda_graphs"]] == [
        ("target verify", 0.0), ("draft decode", 0.0), ("draft extend", 0.0)]
    assert {g["name"] for g in simulated["cuda_graphs"]} <= {g["name"] for g in real["cuda_graphs"]}
    plain = start_sim(["--disable-cuda-graph"], env={"SGLANG_SIM_LOAD_SECONDS": "0.1"})
    assert read_log(plain.out_path)["cuda_graphs"] == [] and len(read_log(plain.out_path)["weights"]) == 1
