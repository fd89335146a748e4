"""restart_curate.py's acceptance (issue 42) and restart_projection.py's arithmetic, on the committed figures and
on small hand-made ones (no device, no packs)."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs/validation/restart-h200"


def module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests/device" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


curate = module("restart_curate")
projection = module("restart_projection")

BANDWIDTH = {"cold_8_threads": {"gb_per_s": 2.0}, "cold_1_thread": {"gb_per_s": 1.5},
             "warm_8_threads": {"gb_per_s": 40.0},
             "h2d": {"pinned_h2d_gb_per_s": 50.0, "pageable_h2d_gb_per_s": 9.0}}
GPU = "NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 9.0"


def figures(**start) -> dict:
    base = {"machine": "x-b", "gpu": GPU, "start": "warm", "session": 1, "ready_rc": 0, "ready_s_log": 40.0,
            "resident_before_start_gb": 20.0, "marks": {"weights_begin": 5.0},
            "weights": [{"model": "target", "elapsed_s": 0.6}]}
    base.update(start)
    return {"machines": {"x-a": {"gpu": GPU, "checkpoint": {"bytes": 20_000_000_000}, "bandwidth": BANDWIDTH},
                         "x-b": {"gpu": GPU}},
            "starts": [base]}


def test_session_of_strips_the_call_letter_only():
    assert curate.session_of("h100-after-b") == "h100-after"
    assert curate.session_of("h100-a") == "h100"
    assert curate.session_of("h100-after") == "h100-after"


def test_warm_start_is_held_to_the_slower_of_page_cache_and_link():
    # 20 GB in 0.6 s = 33.3 GB/s against min(40 page cache, 50 link) = 40: 83%, met; ready 40 <= 30 + 0.5.
    (row,) = curate.assess(figures())
    assert row["path"] == "warm" and row["bound"] == "page_cache" and row["bound_gb_per_s"] == 40.0
    assert row["weights_share_of_bound"] == pytest.approx(0.833, abs=1e-3)
    assert row["weights_share_of_link"] == pytest.approx(0.667, abs=1e-3)
    assert row["weights_criterion"] == "met" and row["ready_limit_s"] == 30.5
    assert row["ready_criterion"] == "not met" and row["verdict"] == "not met"
    assert row["same_session"] is True and row["bandwidth_source"] == "x-a"


def test_cold_start_is_held_to_the_disk():
    # 20 GB in 13 s = 1.54 GB/s against the disk's 2.0: 77%, met; ready 35 <= 30 + 10.
    (row,) = curate.assess(figures(resident_before_start_gb=0.0, weights=[{"model": "target", "elapsed_s": 13.0}],
                                   ready_s_log=35.0))
    assert (row["path"], row["bound"], row["verdict"]) == ("cold", "disk_cold", "met")
    assert row["ready_limit_s"] == 40.0


def test_a_prewarmed_start_is_warm_and_carries_its_warm_up():
    warm_up = {"status": "read", "why": "x", "seconds": 10.0, "read_bytes": 20_000_000_000, "gb_per_s": 2.0}
    (row,) = curate.assess(figures(start="prewarmed", prewarm=warm_up))
    assert row["path"] == "warm" and row["prewarm"]["read_gb"] == 20.0
    assert "warm-up: read, 20.0 GB in 10.0 s" in curate.acceptance_table([row])


def test_a_partly_resident_or_failed_start_is_not_assessed():
    (row,) = curate.assess(figures(resident_before_start_gb=10.0))
    assert row["verdict"].startswith("not assessed") and "50%" in row["verdict"]
    (row,) = curate.assess(figures(ready_rc=1, ready_s_log=None))
    assert row["verdict"] == "not assessed: the start did not become ready"
    (row,) = curate.assess(figures(weights=[]))
    assert row["verdict"] == "not assessed: no target weight load in its log"


def test_bandwidth_from_another_session_is_said_and_another_gpu_refused():
    f = figures()
    del f["machines"]["x-a"]["bandwidth"]
    (row,) = curate.assess(f)
    assert row["verdict"].startswith("not assessed: no bandwidth")
    other = {"gpu": GPU, "bandwidth": BANDWIDTH}
    (row,) = curate.assess(f, ("old.json:y-a", other))
    assert row["same_session"] is False and row["bandwidth_source"] == "old.json:y-a"
    (row,) = curate.assess(f, ("old.json:z-a", {"gpu": "NVIDIA H200, 580", "bandwidth": BANDWIDTH}))
    assert "another GPU" in row["verdict"]


def test_committed_after_figures_are_not_met_against_the_before_h100():
    after = json.loads((DOCS / "after/figures.json").read_text())
    before = json.loads((DOCS / "figures.json").read_text())
    rows = curate.assess(after, ("figures.json:h100-a", before["machines"]["h100-a"]))
    assert [r["start"] for r in rows] == ["warm-fresh", "warm", "warm-bounded"]
    for r in rows:
        assert r["path"] == "warm" and r["bound_gb_per_s"] == 37.2 and r["verdict"] == "not met"
        assert 0.2 < r["weights_share_of_bound"] < 0.3 and 0.15 < r["weights_share_of_link"] < 0.17


def test_projection_adds_up_and_names_every_input():
    after = json.loads((DOCS / "after/figures.json").read_text())
    before = json.loads((DOCS / "figures.json").read_text())
    m = projection.measured(after, "after", before["machines"]["h100-a"], "before:h100-a", before)
    p = projection.project(m)
    phases = {r["phase"]: r["seconds"] for r in p["phases"]}
    summed = [k for k in phases if not k.startswith("weights:") and k != "INT4 repack"]
    for i in (0, 1):
        assert p["warm_restart_s"][i] == pytest.approx(sum(phases[k][i] for k in summed), abs=0.11)
    # the weights phase is the larger of the copies out of the page cache and the link
    w = phases["weights phase (the two overlap)"]
    assert w[1] == max(phases["weights: page cache -> each rank's memory"][1],
                       phases["weights: each GPU's share over its link"][1])
    # 8 x 68.4 GB at 8 x the 37.2 GB/s measured (1.8 s) .. 8 x 547 GB at the assumed 100 GB/s (43.8 s)
    assert phases["weights: page cache -> each rank's memory"] == [1.8, 43.8]
    # then the link's 68.4 GB a GPU at the loader's 8.48-9.11 GB/s is the longer
    assert w[0] == phases["weights: each GPU's share over its link"][0] == 7.5
    assert p["room_for_repack_s"][0] == pytest.approx(120 - p["warm_restart_s"][1], abs=0.11)
    for key, (_, _, why) in projection.ASSUMPTIONS.items():
        assert why, key
    text = projection.markdown(m, p)
    assert "+ R" in text and "Assumptions:" in text


def test_projection_needs_each_start_it_reads():
    after = json.loads((DOCS / "after/figures.json").read_text())
    broken = copy.deepcopy(after)
    broken["starts"] = [s for s in broken["starts"] if s["start"] != "warm-bounded"]
    before = json.loads((DOCS / "figures.json").read_text())
    with pytest.raises(SystemExit, match="warm-bounded"):
        projection.measured(broken, "after", before["machines"]["h100-a"], "before:h100-a", None)
