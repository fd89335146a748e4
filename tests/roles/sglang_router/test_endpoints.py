"""The router's workers come from the endpoints the servers publish: computed once, in sglang_server.

The server side runs for real (ansible-playbook, role sglang_server tasks_from: endpoint, on
local hosts of a test inventory); the router side is the role's own task (tasks_from: endpoints
is part of its validation) and its filter.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from repo import ROOT, load

filters = load("roles/sglang_router/filter_plugins/sglang_router.py", "sglang_router_filters")


def ep(host, url, serves_http=True, key=""):
    return {"sglang_server_endpoint": {"host": host, "url": url, "serves_http": serves_http,
                                       "api_key_sha256": hashlib.sha256(key.encode()).hexdigest() if key else ""}}


def test_only_hosts_that_serve_http_are_workers_in_inventory_order():
    hostvars = {"a": ep("a", "http://10.0.0.1:30000"), "b": ep("b", "http://10.0.0.2:30000", serves_http=False),
                "c": ep("c", "http://10.0.0.3:31000")}
    assert filters.sglang_router_endpoints(["a", "b", "c"], hostvars) == [
        {"host": "a", "url": "http://10.0.0.1:30000"}, {"host": "c", "url": "http://10.0.0.3:31000"}]


def test_a_gpu_host_without_a_published_endpoint_fails_naming_it():
    with pytest.raises(filters.AnsibleFilterError, match=r"gpu2 has no sglang_server_endpoint.*--limit"):
        filters.sglang_router_endpoints(["gpu1", "gpu2"], {"gpu1": ep("gpu1", "http://h:1"), "gpu2": {}})


def test_no_gpu_hosts_fails_naming_the_group_variable():
    with pytest.raises(filters.AnsibleFilterError, match="sglang_router_worker_group names no hosts"):
        filters.sglang_router_endpoints([], {})


def test_two_hosts_with_the_same_url_fail():
    hostvars = {"a": ep("a", "http://10.0.0.1:30000"), "b": ep("b", "http://10.0.0.1:30000")}
    with pytest.raises(filters.AnsibleFilterError, match="a and b both give the worker URL http://10.0.0.1:30000"):
        filters.sglang_router_endpoints(["a", "b"], hostvars)


def test_key_mismatches_compare_hashes_and_name_hosts_never_keys():
    hostvars = {"a": ep("a", "u1", key="k1"), "b": ep("b", "u2", key="other"), "c": ep("c", "u3")}
    assert filters.sglang_router_key_mismatches(["a", "b", "c"], hostvars, "k1") == ["b", "c"]
    assert filters.sglang_router_key_mismatches(["c"], hostvars, "") == []


INVENTORY = {
    "all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "sglang_common_api_key": "k", "sglang_router_control_plane_api_key": "test-only-control-plane-k",
                 "sglang_server_host": "0.0.0.0"},
        "children": {
            "gpu_hosts": {"hosts": {
                "gpu1": {"ansible_host": "10.0.0.11"},
                "gpu2": {"ansible_host": "10.0.0.12", "sglang_server_port": 31000},
                "gpu3": {"ansible_host": "192.0.2.3", "sglang_server_advertise_address": "gpu3.internal"},
                "gpu4": {},
                "v6": {"ansible_host": "fd00::11"},
                "node0": {"ansible_host": "10.1.0.1", "sglang_server_multinode_group": "tp16"},
                "node1": {"ansible_host": "10.1.0.2", "sglang_server_multinode_group": "tp16"},
            }},
            "tp16": {"hosts": {"node0": {}, "node1": {}}},
            "sglang_routers": {"hosts": {"router1": {}}},
        },
    },
}

PLAYBOOK = """
- hosts: gpu_hosts
  gather_facts: false
  tasks:
    - ansible.builtin.include_role: {name: sglang_server, tasks_from: endpoint}
- hosts: sglang_routers
  gather_facts: false
  tasks:
    - ansible.builtin.include_role: {name: sglang_router, tasks_from: endpoints}
    - ansible.builtin.copy:
        content: "{{ {'workers': __sglang_router_endpoints,
                      'gpu1': hostvars.gpu1.sglang_server_endpoint} | to_json }}"
        dest: "{{ out }}"
      delegate_to: localhost
"""


def run_endpoints(tmp_path, inventory):
    (tmp_path / "hosts.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    out = tmp_path / "out.json"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.json"), str(tmp_path / "play.yml"),
                           "-e", f"out={out}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_the_servers_endpoints_become_the_routers_workers(tmp_path):
    proc, got = run_endpoints(tmp_path, INVENTORY)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert got["workers"] == [
        {"host": "gpu1", "url": "http://10.0.0.11:30000"},
        {"host": "gpu2", "url": "http://10.0.0.12:31000"},
        {"host": "gpu3", "url": "http://gpu3.internal:30000"},
        {"host": "gpu4", "url": "http://gpu4:30000"},
        {"host": "v6", "url": "http://[fd00::11]:30000"},
        {"host": "node0", "url": "http://10.1.0.1:30000"},  # the head of tp16; node1 serves no HTTP
    ]
    gpu1 = got["gpu1"]
    assert gpu1["serves_http"] is True and gpu1["nnodes"] == 1 and gpu1["node_rank"] == 0
    assert gpu1["local_url"] == "http://127.0.0.1:30000"
    assert gpu1["api_key_sha256"] == hashlib.sha256(b"k").hexdigest()
    assert "k" not in json.dumps({k: v for k, v in gpu1.items() if k != "api_key_sha256"}).replace('"', " ").split()


def test_explicit_node_ranks_choose_the_head(tmp_path):
    inventory = json.loads(json.dumps(INVENTORY))
    hosts = inventory["all"]["children"]["gpu_hosts"]["hosts"]
    hosts["node0"]["sglang_server_node_rank"] = 1
    hosts["node1"]["sglang_server_node_rank"] = 0
    proc, got = run_endpoints(tmp_path, inventory)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert {"host": "node1", "url": "http://10.1.0.2:30000"} in got["workers"]
    assert all(w["host"] != "node0" for w in got["workers"])
