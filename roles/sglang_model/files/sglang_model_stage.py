#!/usr/bin/env python3
"""Stage one Hugging Face model revision on this host (role sglang_model): the command line.

The tool is the package sglang_model_staging beside this file (its docstring: the layout of a
model directory, the subcommands, the modules). Run as root by the role.
"""

import os
import sys

if __name__ == "__main__":
    from sglang_model_staging.cli import main

    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Crash-only: downloads still running in worker threads after a failure are abandoned, not
    # awaited (their partial files stay resumable; everything verified is journaled and fsynced).
    os._exit(code)
