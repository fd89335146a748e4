"""Action sglang_model_wait: wait for a background staging job, one progress line per poll.

The job is files/sglang_model_stage.py started with ``async``/``poll: 0``; it rewrites a small JSON
progress file (bytes done and total, rate, ETA, files done, and the line to print: the tool
owns the wording, this plugin only shows it). Each poll reads the job's status
(ansible.builtin.async_status) and that file (ansible.builtin.slurp) on the host and prints one line
on the controller, e.g.::

    gpu1 | target: 212.4 GB of 547.0 GB (38.8%), 1.0 GB/s, ETA 5m21s, files 24/71 (downloading)

When the job ends, the task's result is the tool's JSON (changed, fetched bytes, ...); a failed job
fails the task with the tool's message (it never carries the token).
"""

from __future__ import annotations

import base64
import json
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("jid", "progress", "label", "delay", "timeout"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        jid = args.get("jid")
        if not jid:
            raise AnsibleActionFail("sglang_model_wait needs jid (the ansible_job_id of an async task)")
        label = args.get("label") or "staging"
        delay = max(1.0, float(args.get("delay", 30)))
        deadline = time.monotonic() + float(args.get("timeout", 86400)) + 120
        host = task_vars.get("inventory_hostname", "?")
        # What the async_status action adds before running its module: where async jobs keep results.
        async_dir = self.get_shell_option("async_dir", default="~/.ansible_async")
        while True:
            status = self._execute_module(module_name="ansible.builtin.async_status",
                                          module_args={"jid": jid, "mode": "status", "_async_dir": async_dir},
                                          task_vars=task_vars)
            if status.get("finished") or (status.get("failed") and "started" not in status):
                break
            if status.get("failed"):
                raise AnsibleActionFail(f"{label}: lost the background job {jid}: {status.get('msg', '')}")
            display.display(f"{host} | {label}: {self._progress(args.get('progress'), task_vars)}")
            if time.monotonic() > deadline:
                raise AnsibleActionFail(f"{label}: still running after {args.get('timeout')} s "
                                        "(sglang_model_timeout); the job keeps its partial files for the next run")
            time.sleep(delay)
        self._execute_module(module_name="ansible.builtin.async_status",
                             module_args={"jid": jid, "mode": "cleanup", "_async_dir": async_dir}, task_vars=task_vars)
        rc = status.get("rc", 1)
        stdout = (status.get("stdout") or "").strip()
        if rc != 0:
            said = (status.get("stderr") or status.get("msg") or "no output").strip().splitlines()
            result.update(failed=True, rc=rc, msg=f"{label} failed: " + " | ".join(said[-4:]))
            return result
        try:
            outcome = json.loads(stdout.splitlines()[-1])
        except (ValueError, IndexError):
            result.update(failed=True, rc=rc, msg=f"{label}: the staging tool printed no result: {stdout[-300:]}")
            return result
        result.update(outcome)
        result["changed"] = bool(outcome.get("changed"))
        result["msg"] = f"{label}: {outcome.get('summary') or outcome.get('status', 'done')}"
        display.display(f"{host} | {result['msg']}")
        return result

    def _progress(self, path, task_vars) -> str:
        if not path:
            return "running"
        got = self._execute_module(module_name="ansible.builtin.slurp", module_args={"src": path},
                                   task_vars=task_vars)
        if got.get("failed") or "content" not in got:
            return "starting"
        try:
            return json.loads(base64.b64decode(got["content"])).get("line") or "running"
        except ValueError:
            return "running"
