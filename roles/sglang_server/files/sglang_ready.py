#!/usr/bin/env python3
"""Wait a bounded time for an SGLang server to serve; tell starting from dead.

Readiness is ``/health_generate`` answering 200: it runs a real one-token
generation, unlike ``/v1/models``, which answers before warm-up. The systemd unit is
watched at the same time, so a server that crashed ends the wait at once instead of
after the full timeout: as soon as its main process died (the unit waits out
RestartSec in ``auto-restart``), not only once systemd restarted it.

Exit codes: 0 ready; 3 still starting after --seconds (call again: one line of
progress per call); 1 the unit failed, stopped or restarted since --restarts.
One JSON line on stdout says which, with the elapsed time and the unit's state (when ready: the probes
it sent, 1 when the server served already, and the epoch of the 200).

Usage: sglang_ready.py --url http://127.0.0.1:30000 --unit sglang-server --seconds 30 --restarts N
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request


def unit_state(unit: str) -> dict:
    out = subprocess.run(["systemctl", "show", unit, "--property=ActiveState,SubState,NRestarts,ExecMainStatus"],
                         capture_output=True, text=True, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def probe(url: str, timeout: float) -> int | str:
    try:
        with urllib.request.urlopen(url + "/health_generate", timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError) as exc:
        return type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="server base URL")
    ap.add_argument("--unit", required=True, help="systemd unit of the server")
    ap.add_argument("--seconds", type=float, default=30, help="how long this call waits")
    ap.add_argument("--restarts", type=int, default=0, help="NRestarts of the unit when the wait began")
    ap.add_argument("--interval", type=float, default=2.0)
    args = ap.parse_args(argv)

    started = time.monotonic()
    deadline = started + args.seconds
    last = None
    probes = 0
    while True:
        state = unit_state(args.unit)
        restarts = int(state.get("NRestarts", "0") or 0)
        crashed = state.get("SubState", "").startswith("auto-restart")  # dead, waiting out RestartSec
        if state.get("ActiveState") in ("failed", "inactive") or restarts > args.restarts or crashed:
            why = ("restarted by systemd after a crash" if restarts > args.restarts else
                   "crashed (systemd restarts it after RestartSec)" if crashed else state.get("ActiveState"))
            print(json.dumps({"ready": False, "dead": True, "why": why, "unit": state}))
            return 1
        last = probe(args.url.rstrip("/"), timeout=max(1.0, min(10.0, deadline - time.monotonic())))
        probes += 1
        if last == 200:
            # ready_epoch: when this call saw the first 200; probes: how many it sent (1: it was serving already)
            print(json.dumps({"ready": True, "waited_s": round(time.monotonic() - started, 1), "probes": probes,
                              "ready_epoch": round(time.time(), 3), "unit": state}))
            return 0
        if time.monotonic() >= deadline:
            print(json.dumps({"ready": False, "dead": False, "health_generate": last, "unit": state}))
            return 3
        time.sleep(min(args.interval, max(0.0, deadline - time.monotonic())))


if __name__ == "__main__":
    sys.exit(main())
