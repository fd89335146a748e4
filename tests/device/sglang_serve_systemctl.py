#!/usr/bin/env python3
"""TEST ONLY: ``systemctl show UNIT --property=...`` on a machine without systemd (the lent GPU machine).

The device proof (sglang_serve_proof.py) plays systemd's part there: it starts the server from the
unit's ExecStart itself and writes the process's state to the JSON file named by
SGLANG_PROOF_UNIT_STATE ({"pid": N, "restarts": N, "exit_status": N or null}). The role's readiness
probe (roles/sglang_server/files/sglang_ready.py) asks ``systemctl show`` for ActiveState,
SubState, NRestarts and ExecMainStatus; this answers from that process as systemd would for a
Type=exec unit: active/running while the main process lives, failed/failed once it exited (a
zombie counts as exited), inactive/dead when nothing was started. Any other command exits 1.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in ("Z", "X")


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "show":
        print(f"systemctl (TEST ONLY stand-in): only 'show UNIT' is answered, got {argv}", file=sys.stderr)
        return 1
    try:
        state = json.loads(Path(os.environ["SGLANG_PROOF_UNIT_STATE"]).read_text())
    except (KeyError, OSError, ValueError):
        state = {}
    pid = state.get("pid")
    if not pid:
        active, sub = "inactive", "dead"
    elif alive(int(pid)):
        active, sub = "active", "running"
    else:
        active, sub = "failed", "failed"
    status = state.get("exit_status")
    print(f"ActiveState={active}\nSubState={sub}\nNRestarts={int(state.get('restarts') or 0)}\n"
          f"ExecMainStatus={0 if status is None else status}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
