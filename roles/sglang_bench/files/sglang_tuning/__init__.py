"""EAGLE-3 tuning on the controller: the candidates, the search, the record and the report.

The play (roles/sglang_bench, tasks/tune.yml) restarts the server and measures; this tool decides
what to measure next and what the results mean. It keeps no state of its own beyond one JSON file
(the settings and every measurement so far, in order) and replays the search from it on every call,
so a call always answers the same way for the same measurements, and a rerun after an interrupted
play starts a fresh search.

A point is (speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens), with
SGLang's rules applied before anything restarts:
  - topk 1: the draft tokens are steps + 1 (SGLang replaces any other value, server_args.py);
  - topk > 1: 2 <= draft tokens <= 1 + topk + (steps - 1) * topk^2, the candidates of the draft tree
    SGLang selects the verified tokens among (more cannot be selected);
  - given the settings' `launch` (the server's launch check, release, GPU and model): no point its facts
    refuse, such as topk > 1 on an MLA model where the attention backend has no tree attention.

The search: coordinate descent from the settings the server runs. Along one parameter at a time it
tries the next value of that parameter's list and moves there when the candidate is significantly
faster than the best so far, first upwards, then downwards; passes over the three parameters repeat
until a whole pass moves nowhere or the budget ends. A topk or steps move tries the draft tokens
scaled with it (the tree keeps its width per step) and unchanged. A candidate that looked faster but
not significantly so is followed by the next point beyond it (on a smooth response the gain grows
with the distance: a step too small to resolve may resolve in two). Why this search: every
candidate costs a server restart (8-10 minutes of weight loading on the reference host) and a run
costs seconds, so restarts are what must be few; successive halving saves runs, not restarts (every
candidate of its first round is started).

The unit of evidence is a start of the server, not a run: every run of one start shares that start's
speed, which none of them shows (the toy on the H200 moved 0.8-13.7% between restarts of one setting,
docs/validation/sglang_serve-h200; an 8B shape with CUDA graphs there 0.1-0.9%, issue 40). A point's
figure is the mean of its starts' means, and two points are compared with the gate's test over starts
(files/sglang_bench_report.py: starts_test, each start's mean spread by its runs and by the host's
start-to-start spread, Satterthwaite's degrees of freedom). That spread is measured here, never assumed
(restart_spread: the points measured on two starts or more, pooled, with their degrees of freedom): the
first comparison's reference gets a second start (A/B/A) before anything is decided, and every further
start of a point measured before adds to it. Role sglang_server restarts only when the settings change,
so a point gets a new start only after another point ran: the starts interleave (A/B/A/B).
  - A move (the search's): a one-sided test over starts ("the candidate is faster") rejects at
    1 - confidence AND the observed gain is above min_gain_pct. A candidate gets one start of `runs`
    runs (the start START_RUNS_FACTOR x as many). An inconclusive comparison with a gain above
    min_gain_pct gets what pays more power per minute at the observed difference: more runs on the
    start the server runs (no restart; while its runs, not the spread between starts, limit it) or a
    start of the other point (a restart); at most LOOKS looks per comparison, MAX_STARTS starts of a
    point and MAX_RUNS_FACTOR x `runs` runs per start, and none when even MAX_STARTS starts of each
    could not resolve it (power below HOPE): restarts are spent where they decide something. Repeated
    looks: two equal settings make a move in at most LOOKS x (1 - confidence) of comparisons
    (Bonferroni; the unit tests measure it). A false move costs restarts, not the served settings:
  - The served settings: after the search, fresh starts of the best point and of the start, in pairs,
    interleaved (the runs and the starts that selected the best are biased upwards, and the start's were
    the reference those selections were made against), as many pairs as 80% power at the gain the search
    saw needs (at most CONFIRM_MAX_PAIRS, and what the budget leaves); the best serves only when its fresh
    starts are faster than the start's by the same test and gain, at (1 - confidence) / CONFIRM_LOOKS per
    look, at most CONFIRM_LOOKS looks (Bonferroni). Whatever the search did, a winner no faster than the
    start serves in at most 1 - confidence of tunings; otherwise the start's settings stay ("no
    significant gain"). The report gives the gain with its interval and the spread it used.
  The budget keeps what the end needs at least (one pair of fresh starts, a restart back to the start)
  and stops the search before a measurement that would not leave it; the confirmation spends the rest.

Commands (JSON on stdout; a bad setting exits 2 naming its variable):
  plan   --state FILE [--check]     settings JSON on stdin; the grid, the budget, the estimate
  next   --state FILE               the next measurement ({label, runs, ...}), or null when done
  record --state FILE --label L (--result JSON [--aggregate JSON] | --failed WHY|-)
                                    a label measured before gets the new runs added to its old ones
  report --state FILE --out-dir DIR [--no-plot]   report.md, tune.png, winner.yml
"""

from __future__ import annotations

from .cli import main, plan
from .config import Config
from .report import render, render_plot, restarts, summary, winner_yaml
from .rules import (
    AXES,
    BEST_RUNS_FACTOR,
    CONFIRM_LOOKS,
    CONFIRM_MAX_PAIRS,
    LOOKS,
    MAX_RUNS_FACTOR,
    MAX_STARTS,
    OBJECTIVES,
    SEARCH_ORDER,
    START_RUNS_FACTOR,
    VAR,
    LaunchRule,
    Point,
    TuneError,
    as_vars,
    canonical,
    label_of,
    neighbours,
    rejection,
    tree_candidates,
)
from .search import UNKNOWN, Ask, BudgetSpent, Search, drive, serving
from .state import State, record
from .stats import Sample, Start, gate, objective_values, one_sided

__all__ = [
    "AXES",
    "BEST_RUNS_FACTOR",
    "CONFIRM_LOOKS",
    "CONFIRM_MAX_PAIRS",
    "LOOKS",
    "MAX_RUNS_FACTOR",
    "MAX_STARTS",
    "OBJECTIVES",
    "SEARCH_ORDER",
    "START_RUNS_FACTOR",
    "UNKNOWN",
    "VAR",
    "Ask",
    "BudgetSpent",
    "Config",
    "LaunchRule",
    "Point",
    "Sample",
    "Start",
    "Search",
    "State",
    "TuneError",
    "as_vars",
    "canonical",
    "drive",
    "gate",
    "label_of",
    "main",
    "neighbours",
    "objective_values",
    "one_sided",
    "plan",
    "record",
    "rejection",
    "render",
    "render_plot",
    "restarts",
    "serving",
    "summary",
    "tree_candidates",
    "winner_yaml",
]
