"""Small helpers the molecule verifiers and tests share: wait for a condition, find a test host's
address on its podman network, keep a scenario's measured figures in one JSON file."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float = 120, step: float = 0.3, what: str = "condition") -> Any:
    """Call ``predicate`` every ``step`` seconds until it returns something true, and return that;
    fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout} s")


def address(container: str) -> str:
    """The container's IP address on its (first) podman network."""
    out = subprocess.run(["podman", "inspect", container], capture_output=True, text=True, check=True).stdout
    networks = json.loads(out)[0]["NetworkSettings"]["Networks"]
    return next(iter(networks.values()))["IPAddress"]


def record_figures(path: Path, **figures: Any) -> None:
    """Merge ``figures`` into the JSON file at ``path`` (a scenario's measurements) and print them."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(figures)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print("figures:", json.dumps(figures))
