"""TEST HARNESS ONLY: the test-speed hooks, loaded at the start of every Python the test targets run.

The Makefile puts this directory first on PYTHONPATH for pytest, molecule, `make test` and `make demo`
(HARNESS_ENV), so that Python imports this module at start-up (site.py's ``sitecustomize``); the
operators' `make venv` installs none of it. It loads tests/harness/zip_pycache.py (the bytecode of
Ansible's module zips kept between tasks), tests/harness/ansiballz_cache.py (module payloads, routing
tables and parsed YAML files shared between the ansible-playbook runs of one `make test`; inactive
unless run_tests.py sets SGLANG_TEST_ANSIBALLZ_CACHE), tests/harness/template_cache.py (Jinja2
templates compiled once per `make test`, same condition), tests/harness/plugin_warm.py (Jinja2 filter
and test plugins loaded in ansible-playbook before it forks a task's worker, not again in each worker)
and tests/harness/run_cost.py (each ansible-playbook run's CPU time, for the table of where a job's
time went; inactive unless run_tests.py sets SGLANG_TEST_RUN_COST), then the ``sitecustomize`` this
one hides, if any (Debian's, for instance).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_HARNESS = os.path.dirname(_HERE)


def _load() -> None:
    sys.path.insert(0, _HARNESS)
    # A speed-up must never stop an interpreter from starting.
    try:
        with contextlib.suppress(Exception):
            import zip_pycache  # noqa: F401
        with contextlib.suppress(Exception):
            import ansiballz_cache  # noqa: F401
        with contextlib.suppress(Exception):
            import template_cache  # noqa: F401
        with contextlib.suppress(Exception):
            import plugin_warm  # noqa: F401
        with contextlib.suppress(Exception):
            import run_cost

            run_cost.watch_playbook()
    finally:
        sys.path.remove(_HARNESS)


def _chain() -> None:
    """Run the next sitecustomize.py on the path, the one this module shadows (as site.py: one that
    fails is not fatal)."""
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == _HERE:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_sitecustomize_shadowed", candidate)
            if spec is not None and spec.loader is not None:
                with contextlib.suppress(Exception):
                    spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_load()
_chain()
