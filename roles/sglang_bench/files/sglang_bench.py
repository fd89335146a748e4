#!/usr/bin/env python3
"""Benchmark an SGLang server's generation speed: the number to compare after every upgrade.

The command line of package sglang_benchmark beside this file (installed beside it on the host:
the result schema and the request protocol, the HTTP transport, the runner, the result document,
the CLI; its __init__ says what is measured and how). Standard library only.

Example:
    sglang_bench.py --url http://127.0.0.1:30000 --runs 10 --max-tokens 256 --label eagle3 --json out.json
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def _package():
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    # No __pycache__ beside the installed package: the role installs exactly its files.
    sys.dont_write_bytecode = True
    return importlib.import_module("sglang_benchmark")


_client = _package()
# The package's names, for callers that load this file as a module.
globals().update({name: getattr(_client, name) for name in _client.__all__})

if __name__ == "__main__":
    sys.exit(_client.main())
