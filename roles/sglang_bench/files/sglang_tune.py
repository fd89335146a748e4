#!/usr/bin/env python3
"""EAGLE-3 tuning on the controller: plan, next, record, report.

The command line of package sglang_tuning beside this file (files/sglang_tuning/: the rules, the
settings, the statistics, the search, the state file, the report, the CLI; its __init__ says how
the search decides). Usage as before: sglang_tune.py {plan,next,record,report} --state FILE ...
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def _package():
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module("sglang_tuning")


_tuning = _package()
# The package's names, for callers that load this file as a module.
globals().update({name: getattr(_tuning, name) for name in _tuning.__all__})

if __name__ == "__main__":
    sys.exit(_tuning.main())
