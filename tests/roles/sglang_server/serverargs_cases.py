"""Run several cases of the ServerArgs check in one process of a release's Python (its SGLang is
imported once, not once per case): ``python serverargs_cases.py TOOL < cases.json``.

Each case: {"argv": [...], "api_key_set": bool, "model_dir": str|null, "metadata_dir": str|null,
"env": {...}}; ``metadata_dir`` goes first on sys.path for that case (a directory of dist-info
TEST DOUBLES: another torch or cuDNN version than the venv holds). Prints the reports as JSON.
"""

import contextlib
import importlib
import importlib.util
import json
import os
import sys

spec = importlib.util.spec_from_file_location("sglang_server_args_check", sys.argv[1])
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)

reports = []
for case in json.load(sys.stdin):
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
print(json.dumps(reports))
