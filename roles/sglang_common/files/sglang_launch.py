#!/usr/bin/env python3
"""Start SGLang with secrets that never reach argv or the logs.

SGLang 0.5.x takes the API key only as ``--api-key`` (visible to every user through
``ps`` and /proc/PID/cmdline), and its engine logs ``server_args=ServerArgs(...)``
with the key in clear (sglang/srt/entrypoints/engine.py, ``logger.info(f"{server_args=}")``),
so journald would keep it. This launcher:

* reads the key from the environment (``SGLANG_LAUNCH_API_KEY``, set by the unit's
  0600 EnvironmentFile) and appends ``--api-key`` to ``sys.argv`` inside the Python
  process, which /proc/PID/cmdline does not show; the same for a gateway's control-plane
  key (``SGLANG_LAUNCH_CONTROL_PLANE_API_KEY``: smg and sglang-router take it only as
  ``--control-plane-api-keys id:name:role:key``; it becomes their one admin key);
* runs the server in a child whose stdout and stderr (inherited by every worker
  process) go through a pipe; the parent copies the stream to its own stdout with
  every secret value (the key and ``HF_TOKEN``) replaced by ``***``;
* forwards SIGTERM/SIGINT/SIGHUP to the child and exits with the child's status, so
  systemd sees the server's real exit code; the kernel kills the child if the launcher
  itself is killed (``kill -9`` of the main PID), so it never outlives it.

Usage: sglang_launch.py (--module sglang.launch_server | --script PATH) -- SERVER_ARGS...
"""

from __future__ import annotations

import argparse
import ctypes
import os
import runpy
import signal
import sys
import threading

SECRET_ENV = ("SGLANG_LAUNCH_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
CONTROL_PLANE_ENV = "SGLANG_LAUNCH_CONTROL_PLANE_API_KEY"
# id:name:role of the control-plane key (the gateway's audit log names the id, never the key).
CONTROL_PLANE_ENTRY = "ansible:sglang-ansible:admin:"
# Flags that carry a secret: only ever from the environment.
SECRET_FLAGS = {"--api-key": "SGLANG_LAUNCH_API_KEY", "--control-plane-api-keys": CONTROL_PLANE_ENV}
MASK = b"***"
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to kill the server when the launcher dies, even by SIGKILL.

    Without it, ``kill -9`` of the main PID would leave the server running and holding
    its port, and systemd would first have to find and kill it before restarting. A
    launcher that dies is already the abnormal case: the server's normal shutdown goes
    through the SIGTERM the launcher forwards.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def redact(chunk: bytes, secrets: list[bytes]) -> bytes:
    for secret in secrets:
        chunk = chunk.replace(secret, MASK)
    return chunk


def copy_redacted(fd: int, secrets: list[bytes], out=None) -> None:
    """Copy fd to out line by line, redacting; a secret never spans two lines of output."""
    out = out or sys.stdout.buffer
    pending = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except InterruptedError:
            continue
        if not data:
            break
        pending += data
        *lines, pending = pending.split(b"\n")
        if lines:
            out.write(redact(b"\n".join(lines) + b"\n", secrets))
            out.flush()
    if pending:
        out.write(redact(pending, secrets))
        out.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" in argv:
        split = argv.index("--")
        own, server_args = argv[:split], argv[split + 1:]
    else:
        own, server_args = argv, []
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = ap.add_mutually_exclusive_group(required=True)
    target.add_argument("--module", help="module to run as __main__, e.g. sglang.launch_server")
    target.add_argument("--script", help="script to run as __main__")
    args = ap.parse_args(own)
    for arg in server_args:
        for flag, env in SECRET_FLAGS.items():
            if arg == flag or arg.startswith(flag + "="):
                ap.error(f"{flag} must come from {env}, not the command line")

    api_key = os.environ.pop("SGLANG_LAUNCH_API_KEY", "")
    control_plane_key = os.environ.pop(CONTROL_PLANE_ENV, "")
    secrets = sorted({s.encode() for s in [api_key, control_plane_key] + [os.environ.get(k, "") for k in SECRET_ENV[1:]]
                      if s}, key=len, reverse=True)
    if api_key:
        server_args = server_args + ["--api-key", api_key]
    if control_plane_key:
        server_args = server_args + ["--control-plane-api-keys", CONTROL_PLANE_ENTRY + control_plane_key]

    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:
        die_with_parent()
        if os.getppid() == 1:  # the launcher died before prctl took effect
            os._exit(1)
        os.close(read_fd)
        os.dup2(write_fd, 1)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        name = args.module or args.script
        sys.argv = [name] + server_args
        try:
            if args.module:
                runpy.run_module(args.module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(args.script, run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        except BaseException:  # the traceback must reach the journal, redacted
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    os.close(write_fd)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: os.kill(child, signum))
    # Copy in a thread: workers that outlive the server could hold the pipe open, and
    # the exit status must follow the server's own exit, not the pipe's end.
    copier = threading.Thread(target=copy_redacted, args=(read_fd, secrets), daemon=True)
    copier.start()
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    copier.join(timeout=5)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
