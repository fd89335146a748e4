"""A command started in the background whose output is read while it runs.

Why: a test that starts ``ansible-playbook`` with ``stdout=PIPE`` and polls the host until the play
reaches a given step reads nothing meanwhile; once the play has written what the pipe holds
(64 KiB on Linux) it blocks on its next line and never reaches that step. That happened to the
tuning test of molecule/sglang_bench when the play grew (its first candidates write about 66 KiB):
the test waited its 600 s for a step the blocked play could not reach. Here a thread drains the pipe
into memory from the start.

Usage: ``job = Background(argv, cwd=..., env=...)``; ``job.poll()``, ``job.pid``, ``job.output()`` (all
so far), ``job.communicate(timeout)`` (waits; returns ``(output, None)`` like ``Popen.communicate``).
"""

from __future__ import annotations

import subprocess
import threading


class Background:
    def __init__(self, argv: list[str], **popen) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)
        self._chunks: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self._chunks.append(line)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=30)
        return rc

    def output(self) -> str:
        with self._lock:
            return "".join(self._chunks)

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        self.wait(timeout)
        return self.output(), None
