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

The statistics are the bench gate's (files/sglang_bench_report.py: Welch's t-test on the per-run
values, its power for the runs needed). On the reference host one run's tok/s spreads by about 5%,
so two equal settings measured with 5 runs each differ by 3% (one standard deviation): a
threshold on means moves on noise.
  - A move (the search's): a one-sided Welch's t-test ("the candidate is faster") rejects at
    1 - confidence AND the observed gain is above min_gain_pct. A candidate gets `runs` runs (the
    start START_RUNS_FACTOR x as many, the best BEST_RUNS_FACTOR x when the search moves to it,
    while the server runs them: no restart). An inconclusive comparison with a gain above
    min_gain_pct gets more runs, as many as 80% power at the observed difference needs, on the
    candidate while the server runs it, on the best when the candidate alone cannot resolve it: at
    most LOOKS looks per comparison and MAX_RUNS_FACTOR x `runs` runs per point. Repeated looks: two
    equal settings make a move in at most LOOKS x (1 - confidence) of comparisons (Bonferroni over
    the looks; the unit tests measure it). A false move costs restarts, not the served settings:
  - The served settings: after the search the best point gets `runs` fresh runs (the final restart
    onto it; the runs that selected it are biased upwards and are left out), and it serves only when
    they are faster than the start's runs by the same test and gain, at (1 - confidence) /
    CONFIRM_LOOKS per look, at most CONFIRM_LOOKS looks (Bonferroni). Whatever the search did, a
    winner no faster than the start serves in at most 1 - confidence of tunings; otherwise the start's
    settings stay ("no significant gain"). The report gives the gain with its interval.
  A start of the server has its own speed, which its runs do not show (docs/validation/sglang_serve-h200:
  session means of equal settings moved by 0.8-13.7% between restarts). The served settings' test
  (the winner's fresh runs on their own start against the start's) adds it as a known variance,
  restart_cv_pct (sglang_bench_restart_cv_pct, the gate's figure) of each mean: no number of runs
  reduces it, so a gain must stand out of it. The search's moves leave it out (two of its points are
  two starts too): a move it makes on a lucky start costs restarts, never the served settings.
  The budget keeps what the end needs (a restart onto the winner, its fresh runs, a restart back to
  the start) and stops the search before a measurement that would not leave it.

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
    LOOKS,
    MAX_RUNS_FACTOR,
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
from .stats import Sample, gate, objective_values, one_sided

__all__ = [
    "AXES",
    "BEST_RUNS_FACTOR",
    "CONFIRM_LOOKS",
    "LOOKS",
    "MAX_RUNS_FACTOR",
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
