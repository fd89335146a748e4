"""TEST HARNESS ONLY: load Ansible's Jinja2 filter and test plugins in ansible-playbook itself, before it
forks a worker for a task.

Why: Ansible runs every task of every host in a worker forked from the ansible-playbook process. The
first filter or test a task's templates use (`| int`, `is defined`...) makes the plugin loader read
every filter (or test) plugin file on its paths and wrap what they hold. ansible-playbook itself
rarely templates, so its loader stays empty, and each worker does that work again and throws it away
when it exits: about 10 ms of CPU per task here (a playbook of 200 `assert` tasks on one host: 7.0-8.6
CPU-s before, 5.3-6.1 after; in a validation run of role sglang_model, cProfile in every worker, 333
rebuilds in 224 workers, before). Loaded in the parent, the wrappers are inherited by every fork.

What a task gets is unchanged: the loader's own code fills its own cache, the same way the first
worker would, from the same paths. Ansible clears that cache when it adds a plugin path (a role's
filter_plugins, found when a role is loaded), so the hook fills it again just before each worker is
started (`StrategyBase._queue_task`), while it is empty.
Loaded by startup/sitecustomize.py wherever the harness's PYTHONPATH is set (pytest, molecule,
`make test`, `make demo`); SGLANG_TEST_NO_PLUGIN_WARM=1 turns it off, to compare. Any error leaves
Ansible as it is.
"""

from __future__ import annotations

import os
import sys

MODULE = "ansible.plugins.strategy"


def _patch(strategy) -> None:
    from ansible.plugins.loader import filter_loader, test_loader

    real = strategy.StrategyBase._queue_task

    def _queue_task(self, host, task, task_vars, play_context):
        for loader, name in ((filter_loader, "int"), (test_loader, "defined")):
            # A lookup of any builtin name fills the loader's cache of every plugin (its own code); the
            # lookup itself costs ~2 ms, so only while the cache is empty (unknown attribute: always).
            if not getattr(loader, "_cached_non_collection_wrappers", None):
                try:
                    loader.get(name)
                except Exception:  # the worker loads them as Ansible does
                    pass
        return real(self, host, task, task_vars, play_context)

    strategy.StrategyBase._queue_task = _queue_task


if os.path.basename(sys.argv[0] if sys.argv else "") == "ansible-playbook" and not os.environ.get("SGLANG_TEST_NO_PLUGIN_WARM"):
    from import_hooks import patch_on_import

    patch_on_import({MODULE: _patch})
