"""Helpers of the sglang_model tests: the staging tool run with the real, pinned huggingface_hub
client against the Hub TEST DOUBLE, plans of synthetic revisions, the collected figures.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import synthetic_model
from repo import load, role_file

TOOL = role_file("sglang_model", "files", "sglang_model_stage.py")
PACKAGE = role_file("sglang_model", "files", "sglang_model_staging")
FILTERS = load(role_file("sglang_model", "filter_plugins", "sglang_model.py"), "sglang_model_filters")
CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible"))
HUB_VERSION = re.search(r'^sglang_model_hub_version: "([^"]+)"',
                        role_file("sglang_model", "defaults", "main.yml").read_text(), re.M).group(1)
TOKEN = "hf_test_only_authorized_5c1e"
OTHER_TOKEN = "hf_test_only_no_access_9a2b"
ALLOW = ["*.json", "*.py", "*.safetensors", "*.model", "*.tiktoken", "*.jinja", "*.txt"]
IGNORE = ["docs/*", "figures/*", "*.md"]
# Figures printed at the end of the run (conftest.py's terminal summary).
FIGURES: list[str] = []


def plan_for(rev: synthetic_model.Revision, allow=ALLOW, ignore=IGNORE) -> dict:
    """The plan the role would make for a synthetic revision (same selection rule)."""
    chosen = FILTERS.sglang_model_select(sorted(rev.files), allow, ignore)
    return {"revision": rev.sha, "files": rev.planned(chosen)}


def size_of(plan: dict) -> int:
    return sum(f["size"] for f in plan["files"])


class Stager:
    """Runs the staging tool (the role's file) with the pinned client against the double."""

    def __init__(self, python: Path, double, root: Path, tmp: Path):
        self.python, self.double, self.root, self.tmp = python, double, root, tmp

    def spec(self, rev, name="model", source=None, **extra) -> dict:
        spec = {"name": name, "repo_id": rev.repo_id, "requested_revision": "main", "plan": plan_for(rev),
                "allow_patterns": ALLOW, "ignore_patterns": IGNORE, "model_dir": str(self.root / name),
                "hf_home": str(self.tmp / "hf-home"), "progress": str(self.tmp / f"{name}.progress.json"),
                "progress_interval": 0.2,
                "source": source or {"kind": "hub", "endpoint": self.double.url, "max_workers": 4,
                                     "download_timeout": 10, "etag_timeout": 5},
                "retries": 2, "client": f"huggingface_hub {HUB_VERSION}"}
        spec.update(extra)
        return spec

    def popen(self, spec: dict, command="sync") -> subprocess.Popen:
        proc = subprocess.Popen([str(self.python), str(TOOL), command], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdin.write(json.dumps(spec))
        proc.stdin.close()
        proc.stdin = None  # communicate() later reads only
        return proc

    def run(self, spec: dict, command="sync", timeout=300):
        started = time.monotonic()
        proc = self.popen(spec, command)
        out, err = proc.communicate(timeout=timeout)
        elapsed = time.monotonic() - started
        result = json.loads(out) if proc.returncode == 0 and out.strip() else None
        return proc.returncode, result, err, elapsed

    def ok(self, spec: dict, command="sync") -> dict:
        rc, result, err, _ = self.run(spec, command)
        assert rc == 0, err
        return result


def tool_cli(*args, python=sys.executable, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), str(TOOL), *args], capture_output=True, text=True, **kw)
