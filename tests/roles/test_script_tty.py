"""Every script a role sends (ansible.builtin.script) runs without a terminal over SSH.

Why: Ansible's SSH connection runs a script with `ssh -tt` (its option use_tty, default true: a command
without stdin gets a terminal), and a terminal merges the script's stderr into its stdout, with \\r\\n line
ends. The roles read those scripts' stdout as JSON (the ServerArgs check, the release's features, the build's
plan, the model's preflight and check, the CUDA check kernel, the NCCL benchmark), so one warning on stderr
(Python's, torch's) would break the run on a real host. The test hosts' connection
(tests/harness/connection_plugins) has no terminal and cannot show it; so this checks the tasks, and Ansible's
own SSH plugin's choice of -tt against the variable the tasks set."""

from __future__ import annotations

import yaml

from repo import ROOT


def script_tasks():
    """(file, task) for every ansible.builtin.script task under roles/, blocks included."""
    found = []

    def walk(tasks, path):
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            if "ansible.builtin.script" in task or "script" in task:
                found.append((path, task))
            for key in ("block", "rescue", "always"):
                walk(task.get(key), path)

    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        walk(yaml.safe_load(path.read_text()), path)
    return found


def test_every_script_task_turns_the_terminal_off():
    tasks = script_tasks()
    assert len(tasks) >= 7, [str(p) for p, _ in tasks]  # the seven named above
    missing = [f"{path.relative_to(ROOT)}: {task.get('name')}" for path, task in tasks
               if (task.get("vars") or {}).get("ansible_ssh_use_tty") is not False]
    assert missing == [], missing


def test_ansibles_ssh_connection_runs_a_script_without_a_terminal_when_told(monkeypatch):
    from ansible.playbook.play_context import PlayContext
    from ansible.plugins.loader import connection_loader

    def ssh_argv(task_vars):
        conn = connection_loader.get("ssh", PlayContext(), None)
        conn.set_options(var_options={"ansible_host": "gpu1", **task_vars})
        seen = []
        monkeypatch.setattr(conn, "_run", lambda cmd, in_data, sudoable=True, checkrc=True: seen.append(cmd) or (0, b"", b""))
        conn._connected = True
        conn.exec_command("/usr/bin/python3 /tmp/x/script.py", in_data=None, sudoable=True)  # as the script action runs it
        return [a.decode() if isinstance(a, bytes) else a for a in seen[0]]

    assert "-tt" in ssh_argv({})  # Ansible's default: the case the tasks guard against
    assert "-tt" not in ssh_argv({"ansible_ssh_use_tty": False})
