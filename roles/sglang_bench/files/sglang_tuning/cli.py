"""The command line: plan, next, record, report (JSON on stdout; a bad setting exits 2 naming its
variable)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .config import Config
from .report import render, render_plot, summary, winner_yaml
from .rules import TuneError, as_vars, label_of
from .state import State, record

DESCRIPTION = "EAGLE-3 tuning on the controller: the candidates, the search, the record and the report."


def plan(settings: dict[str, Any], state_path: Path, check: bool) -> dict[str, Any]:
    config = Config.from_settings(settings, require_start=not check)
    grid = config.grid()
    out = {
        "start": as_vars(config.start), "objective": config.objective, "grid_points": len(grid),
        "rejected": [f"{label_of(p)}: {why}" for p, why in config.rejected()],
        "max_candidates": config.max_candidates(), "max_measurements": config.max_measurements(),
        "candidate_minutes": config.candidate_minutes, "runs": config.runs, "start_runs": config.start_runs,
        "max_runs": config.max_runs, "confidence": config.confidence,
        # The search stops before the budget: at most the budget, the extra runs and the end included.
        "estimate_minutes": config.budget_minutes, "full_grid_minutes": len(grid) * config.candidate_minutes,
        "budget_minutes": config.budget_minutes,
        "launch_rule": (f"checked against the launch facts for sglang {config.launch.version} on compute capability "
                        f"{config.launch.arch} (model {config.launch.model or 'not given'})" if config.launch
                        else "not checked here (no launch check recorded on the host for the release that serves): the "
                             "server's pre-start check refuses a "
                             "candidate SGLang cannot start, and the search records it as failed"),
    }
    if not check:
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps({"settings": settings, "measurements": [], "results": []}, indent=1) + "\n",
                              encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    p_plan = sub.add_parser("plan")
    p_plan.add_argument("--state", type=Path, required=True)
    p_plan.add_argument("--check", action="store_true", help="check the settings only; write nothing")
    p_next = sub.add_parser("next")
    p_next.add_argument("--state", type=Path, required=True)
    p_rec = sub.add_parser("record")
    p_rec.add_argument("--state", type=Path, required=True)
    p_rec.add_argument("--label", required=True)
    group = p_rec.add_mutually_exclusive_group(required=True)
    group.add_argument("--result", type=Path)
    group.add_argument("--failed", help="why it failed; - reads it from stdin")
    p_rec.add_argument("--aggregate", type=Path)
    p_rep = sub.add_parser("report")
    p_rep.add_argument("--state", type=Path, required=True)
    p_rep.add_argument("--out-dir", type=Path, required=True)
    p_rep.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "plan":
            out = plan(json.load(sys.stdin), args.state, args.check)
        elif args.command == "next":
            out = State(args.state).next()
        elif args.command == "record":
            failed = sys.stdin.read() if args.failed == "-" else args.failed
            out = record(State(args.state), args.label, args.result, args.aggregate, failed)
        else:
            state = State(args.state)
            out = summary(state)
            args.out_dir.mkdir(parents=True, exist_ok=True)
            plot = None
            if not args.no_plot:
                render_plot(state, args.out_dir / "tune.png")
                plot = "tune.png"
            (args.out_dir / "winner.yml").write_text(winner_yaml(out), encoding="utf-8")
            (args.out_dir / "report.md").write_text(render(state, out, plot), encoding="utf-8")
            out["report"] = str(args.out_dir / "report.md")
            out["winner_yaml"] = winner_yaml(out)
    except TuneError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0
