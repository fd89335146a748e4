"""Run several cases of the ServerArgs check in one process of a release's Python (its SGLang is
imported once, not once per case): ``python -B serverargs_cases.py TOOL < cases.json``.

Each case: {"argv": [...], "api_key_set": bool, "model_dir": str|null, "metadata_dir": str|null,
"env": {...}}; ``metadata_dir`` goes first on sys.path for that case (a directory of dist-info
TEST DOUBLES: another torch or cuDNN version than the venv holds). Or a command line of the tool:
{"cli": [...]}: TOOL run as ``__main__`` with those arguments (as ``python -B TOOL ...`` runs it:
its directory first on sys.path, its exit status from SystemExit, its stdout read from file
descriptor 1, so that a print of SGLang's import below Python's sys.stdout shows too); its report
is {"exit": status, "stdout": text}. Such a case goes first, so that it imports the release's SGLang
itself, as the role's process does. Prints the reports as JSON.
"""

import contextlib
import importlib
import importlib.util
import json
import os
import runpy
import sys
import tempfile

spec = importlib.util.spec_from_file_location("sglang_server_args_check", sys.argv[1])
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
# The reports' channel: a copy of file descriptor 1, which a command-line case takes over while it runs.
report_out = os.fdopen(os.dup(1), "w")


def command_line(args: list[str]) -> dict:
    """The tool as a script: its exit status and what it wrote to file descriptor 1."""
    saved_argv, saved_path, saved_fd = sys.argv, list(sys.path), os.dup(1)
    with tempfile.TemporaryFile() as captured:
        sys.stdout.flush()
        os.dup2(captured.fileno(), 1)
        sys.argv = [sys.argv[1], *args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
            status = 0  # the tool's __main__ always exits; a script that falls off its end exits 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.stdout.flush()
            os.dup2(saved_fd, 1)
            os.close(saved_fd)
            sys.argv, sys.path[:] = saved_argv, saved_path
        captured.seek(0)
        return {"exit": status, "stdout": captured.read().decode()}


reports = []
for case in json.load(sys.stdin):
    if "cli" in case:
        reports.append(command_line(case["cli"]))
        continue
    saved_env = dict(os.environ)
    os.environ.update(case.get("env") or {})
    if case.get("metadata_dir"):
        sys.path.insert(0, case["metadata_dir"])
    importlib.invalidate_caches()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            reports.append(tool.check(case["argv"], case.get("api_key_set", False), case.get("model_dir")))
    finally:
        if case.get("metadata_dir"):
            sys.path.remove(case["metadata_dir"])
        os.environ.clear()
        os.environ.update(saved_env)
print(json.dumps(reports), file=report_out)
report_out.flush()
