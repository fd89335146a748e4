"""The command line: ``python3 -m sglang_interface_check SGLANG_DIR [--model M] [--algorithm A]
[--class C] [--json]``; exit 0 when the model provides every required method, 1 when one is
missing, 2 when the input cannot be analysed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

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


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sglang_interface_check",
                                     description=PACKAGE_DOC.split("\n\n")[0])
    parser.add_argument("sglang_dir", type=Path, help="the sglang package directory (the one holding srt/)")
    parser.add_argument("--model", default="kimi_k25", help="module name under srt/models (default: kimi_k25)")
    parser.add_argument("--algorithm", default="EAGLE3", help="speculative algorithm (default: EAGLE3)")
    parser.add_argument("--class", dest="only_class", help="check only this EntryClass class")
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    args = parser.parse_args(argv)
    try:
        report = check(args.sglang_dir, args.model, args.algorithm, args.only_class)
    except CheckError as exc:
        if args.json:
            print(json.dumps({"ok": False, "error": str(exc)}, indent=2))
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else render_text(report))
    return 0 if report["ok"] else 1
