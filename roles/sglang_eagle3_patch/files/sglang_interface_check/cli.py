"""The command line: ``python3 -m sglang_interface_check SGLANG_DIR [--model M] [--algorithm A]
[--class C] [--json]``; exit 0 when the model provides every required method, 1 when one is
missing, 2 when the input cannot be analysed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from . import __doc__ as PACKAGE_DOC
from .analysis import check
from .tree import CheckError


def render_text(report: dict) -> str:
    lines = [
        f"sglang {report['sglang_version']} at {report['sglang_dir']}",
        f"model {report['model_file']}, algorithm {report['algorithm']}"
        + (f" (from {report['algorithm_requested']})" if report["algorithm_requested"].upper() != report["algorithm"] else ""),
        f"target-model methods SGLang calls for {report['algorithm']}: {', '.join(report['required']) or 'none'}",
    ]
    for cls in report["classes"]:
        for method, where in cls["provided"].items():
            lines.append(f"  ok       {cls['class']}.{method}  (defined in {where})")
        for method, info in cls["missing"].items():
            lines.append(f"  MISSING  {cls['class']}.{method}: {info['reason']}")
            for site in info["call_sites"]:
                lines.append(f"           needed by {site['file']}:{site['line']}  {site['call']}")
    lines.extend(f"note: {n}" for n in report["notes"])
    missing = sorted({m for c in report["classes"] for m in c["missing"]})
    verdict = "OK: the model provides every required method" if report["ok"] else f"FAIL: missing {', '.join(missing)}"
    lines.append(f"{verdict} ({report['elapsed_s']:.2f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sglang_interface_check",
                                     description=PACKAGE_DOC.split("\n\n")[0])
    parser.add_argument("sglang_dir", type=Path, help="the sglang package directory (the one holding srt/)")
    parser.add_argument("--model", default="kimi_k25", help="module name under srt/models (default: kimi_k25)")
    parser.add_argument("--algorithm", default="EAGLE3", help="speculative algorithm (default: EAGLE3)")
    parser.add_argument("--class", dest="only_class", help="check only this EntryClass class")
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    args = parser.parse_args(argv)
    return emit(lambda: check(args.sglang_dir, args.model, args.algorithm, args.only_class), render_text,
                CheckError, args.json)


def emit(make_report: Callable[[], dict], render: Callable[[dict], str], errors: type[Exception] | tuple,
         as_json: bool) -> int:
    """Print a checker's report and return its exit code, the same for both checkers of this role
    (this package and sglang_launch_check.py): 0 when the report is ok, 1 when it fails, 2 when the
    check cannot run (one of ``errors``: then {"ok": false, "error": ...} in JSON, or a line on stderr)."""
    try:
        report = make_report()
    except errors as exc:
        if as_json:
            print(json.dumps({"ok": False, "error": str(exc)}, indent=2))
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if as_json else render(report))
    return 0 if report["ok"] else 1
