"""The local fact role sglang_server records for its readers (library/sglang_server_releases.py): the release
that last became ready and the one before it, read from the server's own state files, where it serves (its
endpoint, with the types its readers compare), and the file written only when it changes (as Ansible runs
the module)."""

from __future__ import annotations

import json

import pytest

from fact_module import load_fact_module, run_fact_module

MODULE = "roles/sglang_server/library/sglang_server_releases.py"
mod = load_fact_module(MODULE, "sglang_server_releases")
# As tasks/validate.yml settles it; a task's template may hand the numbers and the flag over as strings.
ENDPOINT = {"host": "gpu1", "serves_http": "True", "group": "", "node_rank": "0", "nnodes": "1", "address": "10.0.0.11",
            "port": "30000", "url": "http://10.0.0.11:30000", "bind": "0.0.0.0", "local_url": "http://127.0.0.1:30000",
            "api_key_sha256": "ab" * 32}


def test_serving_and_previous_from_the_state_files(tmp_path):
    (tmp_path / "serving-release").write_text("/opt/sglang/releases/sglang-0.5.23-a\n")
    (tmp_path / "previous-release").write_text("/opt/sglang/releases/sglang-0.5.17-b\n")
    assert mod.describe(str(tmp_path), ["/var/lib/sglang", "/var/cache/sglang"]) == {
        "schema": 2, "serving": "/opt/sglang/releases/sglang-0.5.23-a", "serving_id": "sglang-0.5.23-a",
        "previous": "/opt/sglang/releases/sglang-0.5.17-b", "previous_id": "sglang-0.5.17-b",
        "writable_paths": ["/var/lib/sglang", "/var/cache/sglang"], "starts_dir": f"{tmp_path}/starts"}


def test_a_host_that_never_served(tmp_path):
    assert mod.describe(str(tmp_path / "none")) == {"schema": 2, "serving": "", "serving_id": "", "previous": "",
                                                    "previous_id": "", "writable_paths": [],
                                                    "starts_dir": f"{tmp_path}/none/starts"}
    (tmp_path / "serving-release").write_text("/opt/sglang/releases/r1\n")  # served one release, no previous yet
    fact = mod.describe(str(tmp_path))
    assert (fact["serving_id"], fact["previous"], fact["previous_id"]) == ("r1", "", "")


def test_written_only_when_it_changes_and_check_mode_writes_nothing(tmp_path):
    home, fact_file = tmp_path / "home", tmp_path / "facts.d" / "sglang_server.fact"
    home.mkdir()
    (home / "serving-release").write_text("/opt/sglang/releases/r1\n")

    def run(check_mode=False, diff=False, endpoint=ENDPOINT):
        return run_fact_module(MODULE, {"home": str(home), "fact_file": str(fact_file), "writable_paths": [str(home)],
                                        "endpoint": endpoint}, tmp_path, check_mode, diff)

    first = run(check_mode=True, diff=True)
    assert first["changed"] and not fact_file.exists() and '"serving_id": "r1"' in first["diff"]["after"]
    assert run()["changed"] and json.loads(fact_file.read_text())["serving"] == "/opt/sglang/releases/r1"
    assert json.loads(fact_file.read_text())["writable_paths"] == [str(home)]
    assert oct(fact_file.stat().st_mode & 0o777) == "0o644"
    assert not run()["changed"]
    (home / "previous-release").write_text("/opt/sglang/releases/r1\n")  # a new release became ready
    (home / "serving-release").write_text("/opt/sglang/releases/r2\n")
    again = run()
    assert again["changed"] and (again["releases"]["serving_id"], again["releases"]["previous_id"]) == ("r2", "r1")
    assert [p.name for p in fact_file.parent.iterdir()] == ["sglang_server.fact"]  # no temporary file left
    # Where it serves changes (another port): the fact follows on the next run.
    moved = run(endpoint=dict(ENDPOINT, port=30001, url="http://10.0.0.11:30001", local_url="http://127.0.0.1:30001"))
    assert moved["changed"] and json.loads(fact_file.read_text())["endpoint"]["port"] == 30001
    assert not run(endpoint=dict(ENDPOINT, port=30001, url="http://10.0.0.11:30001",
                                 local_url="http://127.0.0.1:30001"))["changed"]


def test_the_endpoint_is_recorded_with_the_types_its_readers_compare(tmp_path):
    fact = mod.describe(str(tmp_path), [], ENDPOINT)
    assert fact["endpoint"] == {"host": "gpu1", "serves_http": True, "group": "", "node_rank": 0, "nnodes": 1,
                                "address": "10.0.0.11", "port": 30000, "url": "http://10.0.0.11:30000", "bind": "0.0.0.0",
                                "local_url": "http://127.0.0.1:30000", "api_key_sha256": "ab" * 32}
    assert mod.describe(str(tmp_path), [], dict(ENDPOINT, serves_http=False))["endpoint"]["serves_http"] is False
    assert mod.describe(str(tmp_path), [], dict(ENDPOINT, serves_http="False"))["endpoint"]["serves_http"] is False
    with pytest.raises(ValueError, match="the endpoint lacks api_key_sha256, port"):
        mod.describe(str(tmp_path), [], {k: v for k, v in ENDPOINT.items() if k not in ("port", "api_key_sha256")})
