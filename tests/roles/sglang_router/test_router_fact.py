"""The local fact role sglang_router records for the monitoring (library/sglang_router_fact.py): where the router
serves and publishes its metrics, with the types its readers compare, the file written only when it changes,
mode 0644, and check mode writing nothing (as Ansible runs the module, with sglang_common's module_utils)."""

from __future__ import annotations

import json

from fact_module import run_fact_module

MODULE = "roles/sglang_router/library/sglang_router_fact.py"


def test_written_only_when_it_changes_and_check_mode_writes_nothing(tmp_path):
    fact_file = tmp_path / "facts.d" / "sglang_router.fact"

    def run(check_mode=False, diff=False, **settings):
        params = {"host": "0.0.0.0", "port": "30080", "prometheus_host": "127.0.0.1", "prometheus_port": 29000,
                  "fact_file": str(fact_file), **settings}
        return run_fact_module(MODULE, params, tmp_path, check_mode, diff)

    first = run(check_mode=True, diff=True)
    assert first["changed"] and not fact_file.exists() and '"prometheus_port": 29000' in first["diff"]["after"]
    assert run()["changed"]
    assert json.loads(fact_file.read_text()) == {"schema": 1, "host": "0.0.0.0", "port": 30080,
                                                 "prometheus_host": "127.0.0.1", "prometheus_port": 29000}
    assert oct(fact_file.stat().st_mode & 0o777) == "0o644"
    assert not run()["changed"]
    moved = run(prometheus_host="10.0.0.9", prometheus_port=29001)
    assert moved["changed"] and moved["router"]["prometheus_port"] == 29001
    assert [p.name for p in fact_file.parent.iterdir()] == ["sglang_router.fact"]  # no temporary file left
