"""files/sglang_bench_report.py: loading the history, the Markdown of smoke, A/B and sweep
sessions, and the plot."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from repo import ROOT, load

report = load("roles/sglang_bench/files/sglang_bench_report.py")
data = load("tests/roles/sglang_bench/benchdata.py", "sglang_bench_benchdata")
SCRIPT = ROOT / "roles" / "sglang_bench" / "files" / "sglang_bench_report.py"
HOST = "gpu1"
S1, S2, S3 = data.session(1), data.session(2), data.session(3)


def run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--results-dir", str(tmp_path), "--host", HOST, *args],
                          capture_output=True, text=True, timeout=120)


def table_rows(text: str, header_start: str) -> list[list[str]]:
    """The cells of the rows of the Markdown table whose header line starts with header_start."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header_start))
    rows = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return rows


# ------------------------------------------------------------------ loading

def test_load_orders_sessions_and_skips_foreign_json(tmp_path):
    host_dir = tmp_path / HOST
    data.write(host_dir, S2, "eagle3", [100.0, 102.0], release="r2")
    data.write(host_dir, S1, "eagle3", [98.0, 99.0], release="r1")
    doc = data.result_doc("baseline", [90.0, 91.0], S1)
    del doc["environment"]["session"], doc["environment"]["release_id"]
    (host_dir / f"{S1}-baseline.json").write_text(json.dumps(doc))  # session from the file name
    (host_dir / "notes.json").write_text(json.dumps({"schema": "other/1"}))
    (host_dir / "list.json").write_text("[1, 2]")
    results = report.load(host_dir)
    assert [(r["_session"], r["label"], r["_release"]) for r in results] == [
        (S1, "baseline", "?"), (S1, "eagle3", "r1"), (S2, "eagle3", "r2")]
    assert results[-1]["_file"] == f"{S2}-eagle3.json"
    assert report.run_values(results[-1]) == [100.0, 102.0]


def test_run_values_keep_only_successful_numeric_runs():
    doc = {"runs": [{"ok": True, "tok_s": 10.0}, {"ok": False, "tok_s": 5.0}, {"ok": True, "tok_s": None},
                    {"ok": True, "tok_s": True}, {"ok": True, "tok_s": 12}, "junk"]}
    assert report.run_values(doc) == [10.0, 12.0]
    assert report.run_values({}) == []


def test_previous_session_skips_failed_and_other_labels(tmp_path):
    host_dir = tmp_path / HOST
    data.write(host_dir, S1, "eagle3", [100.0, 101.0, 99.0], release="r1")
    data.write(host_dir, S2, "eagle3", [10.0], failure="warmup failed", release="r2")
    data.write(host_dir, S2, "baseline", [70.0, 71.0], release="r2")
    data.write(host_dir, S3, "eagle3", [98.0, 100.0, 99.0], release="r3")
    ev = report.evaluate(report.load(host_dir), None, 5.0, "eagle3")
    (row,) = ev["rows"]
    assert row["previous"] == pytest.approx(100.0) and row["vs_previous"]["reference_session"] == S1
    assert row["vs_previous"]["reference_release"] == "r1"
    assert ev["sessions"] == [S1, S2, S3] and ev["session"] == S3


# ------------------------------------------------------------------ the Markdown

def test_single_label_report(tmp_path):
    host_dir = tmp_path / HOST
    old = data.normal(1, 10, 100.0, 3.0)
    new = data.SEED_EAGLE3
    data.write(host_dir, S1, "eagle3", old, release="r1", accept=2.5)
    data.write(host_dir, S2, "eagle3", new, release="r2", accept=2.4)
    proc = run(tmp_path, "--baseline-tok-s", "96.1", "--no-plot")
    assert proc.returncode in (0, 1), proc.stderr
    text = (host_dir / "report.md").read_text()
    ev = json.loads(proc.stdout)
    cmp = ev["rows"][0]["vs_previous"]
    assert text.startswith(f"# Benchmark report: {HOST}\n")
    assert f"Newest session `{S2}`" in text and "configured baseline 96.1 tok/s." in text
    assert "significant at 95% confidence" in text and "inconclusive and passes" in text
    (row,) = table_rows(text, "| label | concurrency |")
    change = (statistics.fmean(new) - statistics.fmean(old)) / statistics.fmean(old) * 100
    aggregate = json.loads((host_dir / f"{S2}-eagle3.json").read_text())["aggregate_tok_s"]
    assert row == ["eagle3", "1", "96.1", "87.5-103.5", "10", "2.40", f"{aggregate:.1f}",
                   f"{change:+.1f}% {cmp['verdict']}", f"+0.0% {ev['rows'][0]['vs_baseline']['verdict']}", "r2"]
    comparisons = table_rows(text, "| label | against |")
    assert len(comparisons) == 2
    prev, base = comparisons
    lo, hi = cmp["ci"]
    assert prev[:5] == ["eagle3", f"previous session `{S1}` (r1)", f"{statistics.fmean(old):.1f} (10)", "96.1 (10)",
                        f"{cmp['diff']:+.1f} ({lo:+.1f} to {hi:+.1f})"]
    assert prev[6] == f"Welch's t-test, p={cmp['p']:.4f}" and prev[7] == f"**{cmp['verdict']}**"
    assert base[1:4] == ["configured baseline", "96.1 (configured)", "96.1 (10)"] and base[6].startswith("one-sample")
    assert "EAGLE-3 speedup" not in text
    history = table_rows(text, "| session | label | release |")
    assert history == [[S1, "eagle3", "r1", f"{statistics.fmean(old):.1f}", f"{min(old):.1f}-{max(old):.1f}", "1"],
                       [S2, "eagle3", "r2", "96.1", "87.5-103.5", "1"]]
    assert "history.png" not in text


def test_first_session_has_no_comparison_and_passes(tmp_path):
    data.write(tmp_path / HOST, S1, "eagle3", [40.0, 41.0, 39.5])
    proc = run(tmp_path, "--no-plot")
    assert proc.returncode == 0
    text = (tmp_path / HOST / "report.md").read_text()
    assert "| eagle3 | 1 | 40.2 | 39.5-41.0 | 3 |" in text and "## Comparisons" not in text
    assert "## Gate\n\n- pass\n" in text


def test_ab_report_says_whether_the_speedup_is_significant(tmp_path):
    host_dir = tmp_path / HOST
    baseline, eagle3 = data.normal(5, 10, 92.6, 1.0), data.normal(6, 10, 110.0, 1.5)
    data.write(host_dir, S1, "baseline", baseline)
    data.write(host_dir, S1, "eagle3", eagle3, accept=2.4)
    proc = run(tmp_path, "--no-plot")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    speedup = statistics.fmean(eagle3) / statistics.fmean(baseline)
    assert out["speedup"] == pytest.approx(speedup) and out["ab"]["verdict"] == "faster" and out["ab"]["significant"]
    text = (host_dir / "report.md").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("EAGLE-3 speedup"))
    assert f"**{speedup:.3f}x**" in line and "**significant**: EAGLE-3 is faster at 95% confidence" in line
    (ab_row,) = table_rows(text, "| label | against |")
    assert ab_row[1] == "baseline (A/B, same session)" and ab_row[7] == "**faster**" and ab_row[8] == "-"
    assert [r[0] for r in table_rows(text, "| label | concurrency |")] == ["baseline", "eagle3"]


def test_ab_with_single_runs_has_no_test(tmp_path):
    host_dir = tmp_path / HOST
    data.write(host_dir, S1, "baseline", [90.0])
    data.write(host_dir, S1, "eagle3", [99.0])
    assert run(tmp_path, "--no-plot").returncode == 0
    text = (host_dir / "report.md").read_text()
    assert "**1.100x** (fewer than 2 runs per label: no test)." in text


def test_sweep_report_compares_each_level_with_its_previous_session(tmp_path):
    host_dir = tmp_path / HOST
    for session, scale in ((S1, 1.0), (S2, 0.7)):
        data.write(host_dir, session, "sweep-c1", [40.0 * scale, 40.2 * scale], concurrency=1)
        data.write(host_dir, session, "sweep-c4", [36.0 * scale, 36.4 * scale, 35.8 * scale, 36.1 * scale],
                   concurrency=4)
    proc = run(tmp_path, "--no-plot")
    assert proc.returncode == 1  # a 30% drop at both levels
    out = json.loads(proc.stdout)
    assert [r["label"] for r in out["rows"]] == ["sweep-c1", "sweep-c4"]
    assert [r["vs_previous"]["verdict"] for r in out["rows"]] == ["slower", "slower"]
    assert len(out["failures"]) == 2
    text = (host_dir / "report.md").read_text()
    rows = table_rows(text, "| label | concurrency |")
    c4 = next(r for r in rows if r[0] == "sweep-c4")
    doc = json.loads((host_dir / f"{S2}-sweep-c4.json").read_text())
    assert c4[1] == "4" and c4[6] == f"{doc['aggregate_tok_s']:.1f}" and doc["aggregate_tok_s"] > 3 * doc["mean_tok_s"]
    assert c4[7].startswith("-30.0% slower")
    assert [r[0] for r in table_rows(text, "| label | against |")] == ["sweep-c1", "sweep-c4"]
    assert text.count("- FAIL: [sweep-c") == 2


# ------------------------------------------------------------------ the plot

def test_plot_is_written_and_linked(tmp_path):
    import matplotlib.image

    host_dir = tmp_path / HOST
    data.write(host_dir, S1, "eagle3", [95.0, 97.0], release="r1")
    data.write(host_dir, S2, "eagle3", [96.0, 98.0], release="r2")
    data.write(host_dir, S2, "sweep-c4", [30.0, 31.0], concurrency=4)  # not on the single-stream plot
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    png = host_dir / "history.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert matplotlib.image.imread(png).shape[:2] == (450, 900)  # 9 x 4.5 in at 100 dpi
    assert "![tok/s per release](history.png)" in (host_dir / "report.md").read_text()
    assert not list(host_dir.glob("*.tmp*"))
    png.unlink()
    assert run(tmp_path, "--no-plot").returncode == 0 and not png.exists()


def test_render_plot_draws_one_series_per_single_stream_label(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    host_dir = tmp_path / HOST
    data.write(host_dir, S1, "baseline", [90.0, 91.0])
    data.write(host_dir, S1, "eagle3", [95.0, 97.0])
    data.write(host_dir, S2, "eagle3", [96.0, 98.0], release="r2")
    data.write(host_dir, S2, "sweep-c4", [30.0, 31.0], concurrency=4, release="r2")
    seen = {}
    real_close = plt.close

    def keep(fig):
        ax = fig.axes[0]
        seen["labels"] = sorted(t.get_text() for t in ax.get_legend().get_texts())
        seen["ticks"] = [t.get_text() for t in ax.get_xticklabels()]
        real_close(fig)

    monkeypatch.setattr(plt, "close", keep)
    report.render_plot(report.load(host_dir), host_dir / "history.png", HOST)
    assert seen["labels"] == ["baseline", "eagle3"]
    assert seen["ticks"] == [f"{S1}\nr1", f"{S2}\nr2"]
    assert (host_dir / "history.png").exists()
