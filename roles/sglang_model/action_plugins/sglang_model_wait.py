"""Action sglang_model_wait: wait for a background staging job, one progress line per poll.

The job is files/sglang_model_stage.py started with ``async``/``poll: 0``; it rewrites a small JSON
progress file (bytes done and total, rate, ETA, files done). Each poll reads the job's status
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


def _size(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _duration(seconds) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def progress_line(p: dict) -> str:
    total = p.get("bytes_total") or 0
    done = p.get("bytes_done") or 0
    pct = f" ({100.0 * done / total:.1f}%)" if total else ""
    rate = f"{_size(p['rate'])}/s" if p.get("rate") is not None else "rate ?"
    return (f"{_size(done)} of {_size(total)}{pct}, {rate}, ETA {_duration(p.get('eta'))}, "
            f"files {p.get('files_done', 0)}/{p.get('files_total', '?')} ({p.get('phase', '?')})")


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
        result["msg"] = self._summary(label, outcome)
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
            return progress_line(json.loads(base64.b64decode(got["content"])))
        except ValueError:
            return "running"

    @staticmethod
    def _summary(label: str, o: dict) -> str:
        fetched = o.get("fetched_bytes") or 0
        rate = f" at {_size(o['rate'])}/s" if o.get("rate") else ""
        checked = f"{o['rehashed_files']} files rehashed, " if o.get("rehashed_files") else ""
        bad = ", ".join(o.get("repaired") or [])
        what = {"verified": f"verified ({checked}nothing fetched)",
                "staged": f"staged: {o.get('fetched_files', 0)} files, {_size(fetched)} fetched{rate}"
                          + (f" (corrupted files replaced: {bad})" if bad else ""),
                "reopened": f"corrupted files found and set aside for a new fetch: {bad}"}.get(o.get("status"),
                                                                                              o.get("status", "done"))
        return f"{label}: {what} in {o.get('seconds', '?')} s"
