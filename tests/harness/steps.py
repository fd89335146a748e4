"""Harness steps that fail in one line, with the failing tool's own words.

Every harness entry point (hostsetup, mirror, sources, demo) runs its external commands
through ``run()`` and its ``main()`` through ``guarded()``: a failing command becomes one
line naming the step, the command and the last lines of its stderr (podman's, apt's,
pip's), never a Python traceback.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import urllib.error
from collections.abc import Callable


class StepFailed(Exception):
    """A harness step failed; the message is the one line the user sees."""


def _tail(text: str | None, lines: int = 3) -> str:
    kept = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


def run(step: str, cmd: list[str], *, check: bool = True, quiet: bool = True,
        **kw) -> subprocess.CompletedProcess:
    """Run ``cmd``; on failure raise StepFailed naming ``step`` with its stderr.

    ``quiet`` captures stdout and stderr (stdout is returned); otherwise stdout goes to
    the terminal (long downloads show their progress) and only stderr is captured.
    """
    if quiet:
        kw.setdefault("capture_output", True)
    else:
        kw.setdefault("stderr", subprocess.PIPE)
    try:
        proc = subprocess.run(cmd, text=True, **kw)
    except FileNotFoundError as exc:
        raise StepFailed(f"{step}: {cmd[0]} is not installed ({exc.strerror})") from None
    if check and proc.returncode != 0:
        said = _tail(proc.stderr) or _tail(proc.stdout) or "no output"
        raise StepFailed(f"{step}: `{shlex.join(cmd[:6])}{' ...' if len(cmd) > 6 else ''}` "
                         f"exited {proc.returncode}: {said}")
    return proc


def guarded(prog: str, main: Callable[[], int]) -> int:
    """Run ``main``; a StepFailed (or an unreachable URL) becomes one line on stderr and exit 1."""
    try:
        return main()
    except StepFailed as exc:
        print(f"[{prog}] FAILED: {exc}", file=sys.stderr, flush=True)
    except urllib.error.URLError as exc:
        print(f"[{prog}] FAILED: {getattr(exc, 'url', '') or ''} unreachable: {exc.reason}", file=sys.stderr,
              flush=True)
    except KeyboardInterrupt:
        print(f"[{prog}] interrupted", file=sys.stderr, flush=True)
        return 130
    return 1
