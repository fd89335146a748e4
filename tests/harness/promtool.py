"""Prometheus' promtool for tests, from the distribution's own package, extracted (cached), never installed.

Why: the monitoring role's alert rules, their unit tests and its configuration template are checked
with the real promtool of the Prometheus the role installs (Debian 12's `prometheus` package), without
installing Prometheus on this machine. `apt-get download prometheus` fetches the .deb into the cache,
`dpkg-deb -x` unpacks it beside it; the package's version names the directory, so a new version is a
new directory and an unpacked one is reused.

    python3 tests/harness/promtool.py            # prints the path of promtool
    python3 tests/harness/promtool.py check rules FILE   # runs it
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from steps import StepFailed, guarded, run

CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible")) / "promtool"


def candidate_version() -> str:
    """The version apt would download (apt-cache policy's Candidate)."""
    out = run("apt-cache policy prometheus", ["apt-cache", "policy", "prometheus"]).stdout
    for line in out.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "Candidate" and value.strip() not in ("", "(none)"):
            return value.strip()
    raise StepFailed("promtool: apt knows no 'prometheus' package (run apt-get update)")


def promtool() -> Path:
    """Path of the cached promtool, fetching and unpacking the package on first use."""
    existing = sorted(CACHE.glob("*/usr/bin/promtool"))
    if existing and not os.environ.get("PROMTOOL_REFRESH"):
        return existing[-1]
    version = candidate_version()
    dest = CACHE / version.replace(":", "_")
    tool = dest / "usr" / "bin" / "promtool"
    if tool.is_file():
        return tool
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        run("apt-get download prometheus", ["apt-get", "download", "-q", f"prometheus={version}"], cwd=tmp)
        debs = list(Path(tmp).glob("prometheus_*.deb"))
        if not debs:
            raise StepFailed(f"promtool: apt-get download left no prometheus .deb in {tmp}")
        unpacked = Path(tmp) / "root"
        run("dpkg-deb -x", ["dpkg-deb", "-x", str(debs[0]), str(unpacked)])
        if not (unpacked / "usr" / "bin" / "promtool").is_file():
            raise StepFailed(f"promtool: {debs[0].name} has no usr/bin/promtool")
        os.replace(unpacked, dest)
    return tool


def main(argv: list[str]) -> int:
    tool = promtool()
    if not argv:
        print(tool)
        return 0
    return subprocess.run([str(tool), *argv], check=False).returncode


if __name__ == "__main__":
    sys.exit(guarded("promtool", lambda: main(sys.argv[1:])))
