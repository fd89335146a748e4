# TEST HARNESS ONLY: when each task of a playbook began and ended on each host, for the molecule verifiers.
"""Write every task's start and every host's result, with the time to the millisecond, as JSON lines.

Why: a verifier that puts a playbook's steps beside what it measured meanwhile (molecule multihost's
rollout timeline: a host's leave, drain, restart and return, and the requests in flight at each)
needs the steps' times; the default output's timestamps (profile_tasks) are whole seconds and text.

Enabled for one ansible-playbook with ``ANSIBLE_CALLBACK_PLUGINS=tests/harness/callback_plugins``,
``ANSIBLE_CALLBACKS_ENABLED=sglang_task_times`` (beside the configured ones) and the file in
``SGLANG_TEST_TASK_TIMES``; without that variable it writes nothing. One line per event:
``{"t": <epoch seconds>, "event": "start" | "ok" | "failed" | "skipped" | "unreachable" | "included",
"task": "<role> : <name>", "host": "<inventory host>"}``, and ``"msg"`` where an ok or failed result has a
message (an assert's, a debug's, a failure's; what the default output prints too, so no secret: no_log
results carry none).
"""

from __future__ import annotations

import json
import os
import threading
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: sglang_task_times
    type: aggregate
    short_description: TEST HARNESS ONLY - task start and result times as JSON lines
    description:
      - Appends one JSON line per task start and per host result to the file in SGLANG_TEST_TASK_TIMES.
    requirements:
      - enabled in callbacks_enabled (ANSIBLE_CALLBACKS_ENABLED)
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sglang_task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._path = os.environ.get("SGLANG_TEST_TASK_TIMES", "")
        self._lock = threading.Lock()

    def _write(self, event, task, host="", msg=None):
        if not self._path:
            return
        line = {"t": round(time.time(), 3), "event": event, "task": task.get_name() if task else "", "host": host}
        if isinstance(msg, str) and msg:
            line["msg"] = msg[:8000]
        with self._lock, open(self._path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._write("start", task)

    def v2_playbook_on_handler_task_start(self, task):
        self._write("start", task)

    def _result(self, event, result):
        msg = result._result.get("msg") if event in ("ok", "failed") and not result._result.get("_ansible_no_log") else None
        self._write(event, result._task, result._host.get_name(), msg)

    def v2_runner_on_ok(self, result):
        self._result("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result("failed", result)

    def v2_runner_on_skipped(self, result):
        self._result("skipped", result)

    def v2_runner_on_unreachable(self, result):
        self._result("unreachable", result)

    def v2_playbook_on_include(self, included_file):
        for host in included_file._hosts:
            self._write("included", included_file._task, host.get_name())
