"""Run tests/device/testbed.py on the lent machine across several calls of at most 10 minutes.

A call of the device tool ends its command after 10 minutes, and the test bed takes longer; a
process in its own session outlives the call while the machine stays warm. So:

  start ARGS...  start testbed.py (or --script, another proof of tests/device taking WORK first, e.g.
                 restart_proof.py) with ARGS in a new session (setsid), its output to WORK/daemon.log;
  wait           follow it: print each new line of its summary, up to --seconds, then copy its pack
                 (and the log) to --out; exit 0 when it has finished, 3 while it still runs.

Usage: python3 tests/device/testbed_daemon.py start --work /tmp/tb -- --parts ... --pack /tmp/tb.tar.gz
       python3 tests/device/testbed_daemon.py wait --work /tmp/tb --pack /tmp/tb.tar.gz --out $OUT --seconds 560
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def start(work: Path, rest: list[str], script: str = "testbed.py") -> int:
    work.mkdir(parents=True, exist_ok=True)
    state = work / "daemon.json"
    if state.exists() and alive(json.loads(state.read_text())["pid"]):
        print(f"already running: {state.read_text()}")
        return 0
    log = open(work / "daemon.log", "ab")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, str(HERE / script), str(work), *rest], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=HERE.parents[1])
    state.write_text(json.dumps({"pid": proc.pid, "started": time.time(), "argv": rest}))
    print(f"started pid {proc.pid}")
    return 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie of ours is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def wait(work: Path, pack: Path | None, out: Path | None, seconds: float) -> int:
    state = json.loads((work / "daemon.json").read_text())
    summary = work / "summary.txt"
    seen = work / ".daemon-seen"
    shown = int(seen.read_text()) if seen.exists() else 0
    deadline = time.monotonic() + seconds
    running = True
    while True:
        lines = summary.read_text().splitlines() if summary.exists() else []
        for line in lines[shown:]:
            print(line[:1500], flush=True)
        shown = len(lines)
        seen.write_text(str(shown))
        running = alive(state["pid"])
        if not running or time.monotonic() > deadline:
            break
        time.sleep(5)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        if pack is not None and pack.exists():
            shutil.copy(pack, out / pack.name)
        log = work / "daemon.log"
        if log.exists():
            data = log.read_bytes()
            (out / "daemon-log-tail.txt").write_bytes(data[-200_000:])
    print("finished" if not running else f"still running after {seconds:.0f} s")
    return 0 if not running else 3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("start")
    s.add_argument("--work", type=Path, required=True)
    s.add_argument("--script", default="testbed.py", help="the proof in tests/device to run (default testbed.py)")
    s.add_argument("rest", nargs=argparse.REMAINDER)
    w = sub.add_parser("wait")
    w.add_argument("--work", type=Path, required=True)
    w.add_argument("--pack", type=Path)
    w.add_argument("--out", type=Path)
    w.add_argument("--seconds", type=float, default=560)
    args = ap.parse_args()
    if args.command == "start":
        rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
        return start(args.work, rest, args.script)
    return wait(args.work, args.pack, args.out, args.seconds)


if __name__ == "__main__":
    sys.exit(main())
