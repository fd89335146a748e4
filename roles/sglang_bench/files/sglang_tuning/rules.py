"""The points and SGLang's rules on them: the settings' names, canonical points, the draft tree's
limits, the launch facts of the server (LaunchRule) and the neighbours the search steps to."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

AXES = ("num_steps", "eagle_topk", "num_draft_tokens")
OBJECTIVES = ("single", "throughput", "mix")
# The order the search moves the parameters in: the tree's width first (topk, then how many of its
# tokens are verified), then its depth.
SEARCH_ORDER = ("eagle_topk", "num_draft_tokens", "num_steps")
VAR = "sglang_bench_tune_"
Point = tuple[int, int, int]
# Looks at one comparison of a candidate with the best (the first included; each at 1 - confidence).
LOOKS = 4
# Starts of one point a comparison may ask for (a start is a restart: 8-10 minutes on the reference host).
MAX_STARTS = 4
# The confirmation (fresh starts of the best and of the start, in pairs): at most CONFIRM_LOOKS looks and at
# most CONFIRM_MAX_PAIRS pairs, each look at (1 - confidence) / CONFIRM_LOOKS. With the surface, whose
# confirmation is reserved in full (SURFACE_CONFIRM_MAX_PAIRS), serving a changed setting is held to
# CONFIRM_LEVEL x (1 - confidence), half a
# move's level (one-sided 0.025 at the default 0.95): a wrong move of the search costs restarts, a wrong serve
# every request until the next tuning. That level is spent across the looks (a union bound, as Haybittle and
# Peto do): a look another may follow tests at CONFIRM_INTERIM x the level, the last one at what is left, so
# that a gain the planned pairs leave unproven keeps nearly the whole level at the last look.
CONFIRM_LOOKS = 3
CONFIRM_LEVEL = 0.5
CONFIRM_INTERIM = 0.05
CONFIRM_MAX_PAIRS = 6
# With the surface (sglang_bench_tune_surface), whose best is located from every start and whose gain the
# confirmation must prove on fresh starts at up to this many pairs (kept in full for the end).
SURFACE_CONFIRM_MAX_PAIRS = 10
# The start's runs, in multiples of `runs`: every early comparison uses them, and they cost no restart
# (the server runs the start already).
START_RUNS_FACTOR = 2
# Most runs one start of a point gets, in multiples of `runs`.
MAX_RUNS_FACTOR = 5
# The runs the best so far gets, in multiples of `runs`, when the search moves to it and its runs (not the
# spread between starts) limit the comparisons to come.
BEST_RUNS_FACTOR = 3


class TuneError(Exception):
    """A bad setting (the message starts with the variable's name) or a state file out of order."""



def canonical(point: Point) -> Point:
    """SGLang's rule: with topk 1 the draft tokens are steps + 1."""
    steps, topk, draft = point
    return (steps, 1, steps + 1) if topk == 1 else (steps, topk, draft)


def tree_candidates(steps: int, topk: int) -> int:
    """Draft-tree nodes SGLang selects the verified draft tokens among: topk + (steps - 1) * topk^2."""
    return topk + (steps - 1) * topk * topk


def rejection(point: Point) -> str | None:
    """Why SGLang would refuse the (canonical) point, or None."""
    steps, topk, draft = point
    if steps < 1 or topk < 1:
        return f"steps {steps} and topk {topk} must be at least 1"
    if topk > 1 and draft < 2:
        return f"{draft} draft tokens: at least 2"
    if topk > 1 and draft - 1 > tree_candidates(steps, topk):
        return (f"{draft} draft tokens: a {steps}-step topk-{topk} tree has only {tree_candidates(steps, topk)} "
                f"candidates to select {draft - 1} from")
    return None


def label_of(point: Point | None) -> str:
    return "tune-baseline" if point is None else "tune-s{}-k{}-n{}".format(*point)


def as_vars(point: Point) -> dict[str, int]:
    return dict(zip(AXES, point, strict=True))


# The overlap scheduler's switch: topk 1 only, so the playbook leaves it out of a topk > 1 candidate's environment.
SPEC_V2 = "SGLANG_ENABLE_SPEC_V2"


class LaunchRule:
    """The server's launch check (roles/sglang_eagle3_patch/files/sglang_launch_check.py and its facts file,
    the one place SGLang's per-release rules live) asked about each point before the search may choose it:
    the settings `launch` give its path, the release, the GPU's compute capability, the GPU count, the model
    module and the server's other settings (its attention backend among them). A point the check fails
    (topk > 1 where the release's attention backend for this model has no tree attention) is no candidate;
    the server role runs the same check before every restart."""

    KEYS = ("check", "sglang_version", "arch", "gpu_count", "model", "args")

    def __init__(self, raw: dict[str, Any]) -> None:
        path = Path(str(raw["check"]))
        if not path.is_file():
            raise TuneError(f"launch: the launch check {path} does not exist")
        spec = importlib.util.spec_from_file_location("sglang_launch_check_for_tune", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.module = module
        self.facts = json.loads(path.with_name("sglang_launch_facts.json").read_text(encoding="utf-8"))
        self.version, self.arch = str(raw["sglang_version"]), str(raw["arch"])
        self.gpu_count, self.model = int(raw.get("gpu_count") or 1), raw.get("model") or None
        self.args = dict(raw.get("args") or {})
        self._seen: dict[Point, str | None] = {}

    @classmethod
    def from_settings(cls, raw: Any) -> LaunchRule | None:
        if not raw:
            return None
        if not isinstance(raw, dict) or any(raw.get(k) in (None, "") for k in ("check", "sglang_version", "arch")):
            raise TuneError(f"launch must give {', '.join(cls.KEYS)} (the server's launch check and what it needs), "
                            f"got {raw!r}")
        try:
            return cls(raw)
        except (OSError, ValueError, TypeError) as exc:
            raise TuneError(f"launch: the launch check cannot be used: {exc}") from None

    def refusal(self, point: Point) -> str | None:
        if point not in self._seen:
            steps, topk, draft = point
            args = dict(self.args, speculative_num_steps=steps, speculative_eagle_topk=topk,
                        speculative_num_draft_tokens=draft)
            if topk > 1:  # the server runs a topk > 1 candidate without it (sglang_server_env_unset in tune_step.yml)
                args["env"] = {k: v for k, v in (args.get("env") or {}).items() if k != SPEC_V2}
            report = self.module.check(self.facts, self.version, self.arch, self.gpu_count, args, self.model)
            self._seen[point] = "; ".join(
                f"{f['id']} (sglang {self.version}, compute capability {self.arch}, attention backend "
                f"{'/'.join(report['attention_backends']) or 'unknown'}): {f['fix']}" for f in report["failures"]
            ) or None
        return self._seen[point]



def _nearest_valid(steps: int, topk: int, target: float, drafts: list[int]) -> Point | None:
    if topk == 1:
        return canonical((steps, 1, steps + 1))
    valid = [d for d in drafts if rejection((steps, topk, d)) is None]
    if not valid:
        return None
    return (steps, topk, min(valid, key=lambda d: (abs(d - target), -d)))


def neighbours(point: Point, axis: str, direction: int, axes: dict[str, list[int]]) -> list[Point]:
    """The next points along one parameter (its next listed value), with SGLang's rules applied.

    A move of the steps or the topk changes the tree's shape: the first point keeps its width per
    step ((draft - 1) / steps, or / topk, scaled), the second keeps the draft tokens (where that is
    a different point), because which of the two pays depends on the memory and the verify cost.
    """
    steps, topk, draft = point
    values = axes[axis]
    current = {"num_steps": steps, "eagle_topk": topk, "num_draft_tokens": draft}[axis]
    later = [v for v in values if (v - current) * direction > 0]
    if not later:
        return []
    new = min(later, key=lambda v: abs(v - current))
    drafts = axes["num_draft_tokens"]
    if axis == "num_draft_tokens":
        candidates = [(steps, topk, new)]
    elif axis == "num_steps":
        candidates = [_nearest_valid(new, topk, 1 + (draft - 1) * new / steps, drafts),
                      _nearest_valid(new, topk, draft, drafts)]
    else:
        candidates = [_nearest_valid(steps, new, 1 + (draft - 1) * new / topk, drafts),
                      _nearest_valid(steps, new, draft, drafts)]
    out: list[Point] = []
    for candidate in candidates:
        if candidate is not None and candidate not in out and rejection(candidate) is None:
            out.append(candidate)
    return out
