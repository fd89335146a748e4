"""A seeded synthetic host for the EAGLE-3 tuner's trials, driven through the tool's command protocol.

The tuner (roles/sglang_bench/files/sglang_tune.py) is driven exactly as playbooks/tasks/tune_host.yml and
tune_step.yml drive it: `plan` with the role's settings on stdin, then `next` / `record` until `next` names no
candidate, then `report`; the host then serves what the report names. Between the calls this host does what
role sglang_server and the benchmark client do on a real one:

- a candidate whose settings differ from what the server runs is a restart (role sglang_server restarts only
  when the unit or its environment changes; the same settings change nothing), and every start of the server
  draws its own speed factor, 1 + N(0, start_cv), which all the runs of that start share and none of them shows;
- each measured run's tok/s is truth(point) x that factor x (1 + N(0, run_cv)), written as the benchmark
  client's result document (schema sglang-bench/1, per-run tok/s) that `record --result` reads;
- a point whose truth is None does not start (out of memory): `record --failed`, and the server is down.

The tool is called in this process (its main() with stdin and stdout redirected): a subprocess per call would
cost more than the search. Loaded by the tests and by tune_study.py with repo.load.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

from repo import ROOT, load

tune = load("roles/sglang_bench/files/sglang_tune.py", "sglang_tune")
DEFAULTS = yaml.safe_load((ROOT / "roles" / "sglang_bench" / "defaults" / "main.yml").read_text())
START = (3, 1, 4)  # the inventory's (and sglang_server's default) EAGLE-3 settings
Truth = Callable[[tuple[int, int, int]], float | None]


def role_settings(**change: Any) -> dict[str, Any]:
    """What the role hands the tool's `plan`: vars/main.yml's __sglang_bench_tune_settings (its keys and the
    variable each one templates, with its filter) with every variable at the role's default
    (defaults/main.yml), the start given; `change` overrides."""
    templated = yaml.safe_load((ROOT / "roles" / "sglang_bench" / "vars" / "main.yml").read_text())
    casts = {"int": int, "float": float, "bool": bool}
    base = {}
    for key, template in templated["__sglang_bench_tune_settings"].items():
        found = re.fullmatch(r"\{\{\s*(sglang_bench_\w+)\s*(?:\|\s*(\w+)\s*)?\}\}", template)
        assert found, (key, template)
        value = DEFAULTS[found.group(1)]
        base[key] = casts[found.group(2)](value) if found.group(2) else value
    base["start"] = dict(zip(tune.AXES, START, strict=True))
    return {**base, **change}


def tool(*args: Any, stdin: str | None = None) -> dict[str, Any]:
    """One command of the tool, in this process; its JSON answer."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            mock.patch.object(sys, "stdin", io.StringIO(stdin or "")):
        rc = tune.main([str(a) for a in args])
    if rc != 0:
        raise RuntimeError(f"sglang_tune.py {args[0]} exited {rc}: {err.getvalue()}")
    return json.loads(out.getvalue())


def bench_result(values: list[float]) -> dict[str, Any]:
    """The benchmark client's result document (sglang_bench.py), as `record --result` reads it."""
    return {"schema": "sglang-bench/1", "ok": True, "failure": None, "concurrency": 1,
            "mean_tok_s": sum(values) / len(values), "ok_runs": len(values),
            "runs": [{"ok": True, "tok_s": v} for v in values], "accept_length": None,
            "server_avg_spec_accept_length": None, "aggregate_tok_s": None}


@dataclass
class Host:
    """The server on one synthetic host: what it runs, this start's speed factor, the restarts so far."""

    truth: Truth
    rng: random.Random
    run_cv: float
    start_cv: float
    running: Any = START  # the settings it serves; None: without speculation; "down": a start failed
    factor: float = 1.0
    restarts: int = 0
    starts: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.factor = self.draw()  # the start that serves when the tuning begins
        self.starts.append(self.running)

    def draw(self) -> float:
        return 1.0 + self.rng.gauss(0.0, self.start_cv)

    def serve(self, point: Any) -> bool:
        """Role sglang_server with these settings: a restart when they differ from what runs (or it is down).
        False when the start fails."""
        if point != self.running:
            self.restarts += 1
            self.starts.append(point)
            self.factor = self.draw()
            self.running = point
        if point is not None and self.truth(point) is None:
            self.running = "down"
            return False
        return True

    def runs(self, point: Any, n: int) -> list[float]:
        value = 50.0 if point is None else self.truth(point)
        return [value * self.factor * (1.0 + self.rng.gauss(0.0, self.run_cv)) for _ in range(n)]


@dataclass
class Tuning:
    served: tuple[int, int, int]
    restarts: int  # the host's, the final one onto the served settings included
    summary: dict[str, Any]
    asked: list[dict[str, Any]]
    host: Host


def point_of(candidate: dict[str, Any]) -> Any:
    return None if candidate["baseline"] else (candidate["num_steps"], candidate["eagle_topk"],
                                               candidate["num_draft_tokens"])


def tune_host(settings: dict[str, Any], truth: Truth, rng: random.Random, run_cv: float, start_cv: float,
              workdir: Path | None = None) -> Tuning:
    """One tuning through the commands on a synthetic host; the host ends serving what the report names."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tune-")))
        state = workdir / "state.json"
        host = Host(truth, rng, run_cv, start_cv, running=tuple(settings["start"][a] for a in tune.AXES))
        tool("plan", "--state", state, stdin=json.dumps(settings))
        asked = []
        while (step := tool("next", "--state", state))["candidate"] is not None:
            cand = step["candidate"]
            asked.append(cand)
            point = point_of(cand)
            if not host.serve(point):
                tool("record", "--state", state, "--label", cand["label"], "--failed", "-",
                     stdin="torch.OutOfMemoryError: CUDA out of memory")
                continue
            result = workdir / "result.json"
            result.write_text(json.dumps(bench_result(host.runs(point, cand["runs"]))))
            tool("record", "--state", state, "--label", cand["label"], "--result", result)
        summary = tool("report", "--state", state, "--out-dir", workdir, "--no-plot")
        served = tuple(summary["serving"][a] for a in tune.AXES)
        host.serve(served)  # playbooks/tasks/tune_serve.yml
        return Tuning(served, host.restarts, summary, asked, host)


def tune_in_process(settings: dict[str, Any], truth: Truth, rng: random.Random, run_cv: float,
                    start_cv: float) -> Tuning:
    """tune_host's tuning without the commands: the search's generator (sglang_tune.drive) driven directly, the
    host drawing from `rng` in the same order. The commands replay that generator from the state file, so the
    same seed gives the same asks, the same served settings and the same restarts, about three times faster
    (tune_study.py --in-process; test_tune_acceptance.py checks the two agree)."""
    config = tune.Config.from_settings(settings)
    host = Host(truth, rng, run_cv, start_cv, running=config.start)
    asked = []

    def measure(ask):
        asked.append(ask)
        if not host.serve(ask.point):
            return {"label": ask.label, "status": "failed", "why": "torch.OutOfMemoryError: CUDA out of memory"}
        return {"label": ask.label, "status": "ok", "single": host.runs(ask.point, ask.runs)}

    search, pending = tune.drive(config, measure)
    assert pending is None
    served = tune.serving(search)
    host.serve(served)  # playbooks/tasks/tune_serve.yml
    return Tuning(served, host.restarts, {"decision": search.decision, "stop": search.stop}, asked, host)


# ---------------------------------------------------------------- the responses of the acceptance trials

def flat(_point: Any) -> float:
    """Every setting equal."""
    return 100.0


def others_slower(point: Any) -> float:
    """Every setting but the start 2% slower."""
    return 100.0 if point == START else 98.0


def paraboloid(optimum: tuple[int, int, int], top: float, start_value: float = 100.0) -> Truth:
    """A smooth response over (steps, log2 topk, log2 draft tokens), one unit per listed step of each: `top` at
    `optimum`, `start_value` at the start, falling with the squared distance."""
    import math

    def x(p):
        return p[0], math.log2(p[1]), math.log2(p[2])

    def d2(p):
        return sum((a - b) ** 2 for a, b in zip(x(p), x(optimum), strict=True))

    return lambda p: top - (top - start_value) * d2(p) / d2(START)


# The optimum 6/2/8 inside the default grid on all three axes, 10% above the start; within 2% of it
# (>= 107.8): steps 5-7 with topk 1, 2 or 4 and draft tokens near 8.
INTERIOR = paraboloid((6, 2, 8), 110.0)
RESPONSES = {"flat": flat, "others 2% slower": others_slower, "interior optimum +10%": INTERIOR}


def outcome(name: str, tuning: Tuning) -> bool:
    """The acceptance's event for each response: the start kept; a worse one served; within 2% of the optimum."""
    if name == "flat":
        return tuning.served == START
    if name == "others 2% slower":
        return tuning.served != START
    return INTERIOR(tuning.served) >= 0.98 * 110.0
