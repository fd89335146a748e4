"""The router's workers come from the endpoints the servers record: computed once, in sglang_server, and read
from its local fact (hostvars[host].ansible_local.sglang_server.endpoint).

The server side runs for real (ansible-playbook: role sglang_server's validation settles each endpoint and its
fact module records it, on local hosts of a test inventory, each into its own facts.d: tests/harness/
server_facts.py); the router side is the role's own task (tasks/endpoints.yml, the step of its run after the
validation) and its filter.
"""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

import server_facts
from repo import ROOT, load

filters = load("roles/sglang_router/filter_plugins/sglang_router.py", "sglang_router_filters")


def ep(host, url, serves_http=True, key=None):
    """A GPU host's variables as the router sees them: the endpoint its server recorded (ansible_local), and the
    shared API key as the inventory sets it for the host (None: not set there)."""
    port = url.rsplit(":", 1)[-1]
    hostvars = {"ansible_local": {"sglang_server": {"schema": 2, "endpoint": {
        "host": host, "url": url, "serves_http": serves_http, "port": int(port) if port.isdigit() else 0,
        "local_url": f"http://127.0.0.1:{port}",
        "api_key_sha256": hashlib.sha256(key.encode()).hexdigest() if key else ""}}}}
    return hostvars if key is None else dict(hostvars, sglang_common_api_key=key)


def test_only_hosts_that_serve_http_are_workers_in_inventory_order():
    hostvars = {"a": ep("a", "http://10.0.0.1:30000"), "b": ep("b", "http://10.0.0.2:30000", serves_http=False),
                "c": ep("c", "http://10.0.0.3:31000")}
    assert filters.sglang_router_endpoints(["a", "b", "c"], hostvars) == [
        {"host": "a", "url": "http://10.0.0.1:30000", "local_url": "http://127.0.0.1:30000", "keyed": False},
        {"host": "c", "url": "http://10.0.0.3:31000", "local_url": "http://127.0.0.1:31000", "keyed": False}]


def test_the_endpoint_tells_where_its_own_host_reaches_it_and_whether_it_wants_the_key():
    """What the drain (tasks/leave.yml) needs of the host's own server, from the same record as the workers."""
    hostvars = {"gpu1": ep("gpu1", "http://10.0.0.1:31000", key="k1")}
    assert filters.sglang_router_endpoints(["gpu1"], hostvars) == [
        {"host": "gpu1", "url": "http://10.0.0.1:31000", "local_url": "http://127.0.0.1:31000", "keyed": True}]


def test_the_port_a_hosts_server_recorded_or_none_before_its_first_run():
    hostvars = {"gpu1": ep("gpu1", "http://10.0.0.1:31000"), "router1": {"ansible_local": {}}, "new": {}}
    assert filters.sglang_router_server_port("gpu1", hostvars) == 31000
    assert filters.sglang_router_server_port("router1", hostvars) is None
    assert filters.sglang_router_server_port("new", hostvars) is None


@pytest.mark.parametrize("facts", [{}, {"ansible_local": {}}, {"ansible_local": {"sglang_server": {"schema": 1}}}],
                         ids=["no-facts-gathered", "server-never-ran", "older-role-version"])
def test_a_gpu_host_whose_server_recorded_no_endpoint_fails_naming_it(facts):
    with pytest.raises(filters.AnsibleFilterError,
                       match=r"gpu2 has no serving endpoint in its local fact ansible_local.sglang_server .*"
                             r"run the server role on it first .*--limit leaving gpu2 out"):
        filters.sglang_router_endpoints(["gpu1", "gpu2"], {"gpu1": ep("gpu1", "http://h:1"), "gpu2": facts})


def test_check_mode_leaves_out_the_hosts_not_recorded_yet():
    hostvars = {"gpu1": ep("gpu1", "http://h:1"), "gpu2": {"ansible_local": {}}}
    assert [e["host"] for e in filters.sglang_router_endpoints(["gpu1", "gpu2"], hostvars, required=False)] == ["gpu1"]
    with pytest.raises(filters.AnsibleFilterError, match="sglang_router_worker_group names no hosts"):
        filters.sglang_router_endpoints([], {}, required=False)


def test_no_gpu_hosts_fails_naming_the_group_variable():
    with pytest.raises(filters.AnsibleFilterError, match="sglang_router_worker_group names no hosts"):
        filters.sglang_router_endpoints([], {})


def test_two_hosts_with_the_same_url_fail():
    hostvars = {"a": ep("a", "http://10.0.0.1:30000"), "b": ep("b", "http://10.0.0.1:30000")}
    with pytest.raises(filters.AnsibleFilterError, match="a and b both give the worker URL http://10.0.0.1:30000"):
        filters.sglang_router_endpoints(["a", "b"], hostvars)


def test_key_mismatches_compare_the_shared_setting_and_name_hosts_never_keys():
    hostvars = {"a": ep("a", "u1", key="k1"), "b": ep("b", "u2", key="other"), "c": ep("c", "u3")}
    assert filters.sglang_router_key_mismatches(["a", "b", "c"], hostvars, "k1") == ["b", "c"]
    assert filters.sglang_router_key_mismatches(["c"], hostvars, "") == []


KEY = "test-only-endpoint-key"
INVENTORY = {
    "all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "sglang_common_api_key": KEY, "sglang_router_control_plane_api_key": "test-only-control-plane-k",
                 "sglang_server_host": "0.0.0.0"},
        "children": {
            "gpu_hosts": {"hosts": {
                "gpu1": {"ansible_host": "10.0.0.11"},
                "gpu2": {"ansible_host": "10.0.0.12", "sglang_server_port": 31000},
                "gpu3": {"ansible_host": "192.0.2.3", "sglang_server_advertise_address": "gpu3.internal"},
                "gpu4": {},
                "v6": {"ansible_host": "fd00::11", "sglang_server_host": "fd00::11"},
                "node0": {"ansible_host": "10.1.0.1", "sglang_server_multinode_group": "tp16"},
                "node1": {"ansible_host": "10.1.0.2", "sglang_server_multinode_group": "tp16"},
            }},
            "tp16": {"hosts": {"node0": {}, "node1": {}}},
            "sglang_routers": {"hosts": {"router1": {}}},
        },
    },
}

PLAYBOOK = server_facts.RECORD_PLAY.format(hosts="{servers}") + """
- hosts: sglang_routers
  gather_facts: false
  tasks:
    - ansible.builtin.include_role: {name: sglang_router, tasks_from: endpoints}
    - ansible.builtin.copy:
        content: "{{ {'workers': __sglang_router_endpoints,
                      'gpu1': hostvars.gpu1.ansible_local.sglang_server.endpoint} | to_json }}"
        dest: "{{ out }}"
      delegate_to: localhost
"""


def run_endpoints(tmp_path, inventory, servers="gpu_hosts"):
    (tmp_path / "hosts.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAYBOOK.replace("{servers}", servers))
    out = tmp_path / "out.json"
    proc = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.json"), str(tmp_path / "play.yml"),
                           "-e", f"out={out}", "-e", f"facts_root={tmp_path / 'hosts'}"],
                          cwd=ROOT, env=server_facts.env(), capture_output=True, text=True, timeout=300)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_the_servers_endpoints_become_the_routers_workers(tmp_path):
    proc, got = run_endpoints(tmp_path, INVENTORY)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert [{"host": w["host"], "url": w["url"]} for w in got["workers"]] == [
        {"host": "gpu1", "url": "http://10.0.0.11:30000"},
        {"host": "gpu2", "url": "http://10.0.0.12:31000"},
        {"host": "gpu3", "url": "http://gpu3.internal:30000"},
        {"host": "gpu4", "url": "http://gpu4:30000"},
        {"host": "v6", "url": "http://[fd00::11]:30000"},
        {"host": "node0", "url": "http://10.1.0.1:30000"},  # the head of tp16; node1 serves no HTTP
    ]
    # Where the host itself reaches its server (the drain), and that it wants the key: from the same record.
    assert got["workers"][0]["local_url"] == "http://127.0.0.1:30000" and got["workers"][0]["keyed"] is True
    # A server bound to an IPv6 address is reached there, in brackets.
    assert got["workers"][4]["host"] == "v6" and got["workers"][4]["local_url"] == "http://[fd00::11]:30000"
    gpu1 = got["gpu1"]
    assert gpu1 == {"host": "gpu1", "serves_http": True, "group": "", "node_rank": 0, "nnodes": 1, "address": "10.0.0.11",
                    "port": 30000, "url": "http://10.0.0.11:30000", "bind": "0.0.0.0", "local_url": "http://127.0.0.1:30000",
                    "api_key_sha256": hashlib.sha256(KEY.encode()).hexdigest()}
    # The file as the role writes it on a host: 0644, its hash, never the key.
    fact_file = tmp_path / "hosts" / "gpu1" / "facts.d" / "sglang_server.fact"
    assert oct(fact_file.stat().st_mode & 0o777) == "0o644"
    assert json.loads(fact_file.read_text())["endpoint"] == gpu1 and KEY not in fact_file.read_text()
    node1 = json.loads((tmp_path / "hosts" / "node1" / "facts.d" / "sglang_server.fact").read_text())["endpoint"]
    assert (node1["serves_http"], node1["group"], node1["node_rank"], node1["nnodes"]) == (False, "tp16", 1, 2)


def test_explicit_node_ranks_choose_the_head(tmp_path):
    inventory = json.loads(json.dumps(INVENTORY))
    hosts = inventory["all"]["children"]["gpu_hosts"]["hosts"]
    hosts["node0"]["sglang_server_node_rank"] = 1
    hosts["node1"]["sglang_server_node_rank"] = 0
    proc, got = run_endpoints(tmp_path, inventory)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert {"host": "node1", "url": "http://10.1.0.2:30000"} in [{"host": w["host"], "url": w["url"]} for w in got["workers"]]
    assert all(w["host"] != "node0" for w in got["workers"])


def test_the_routers_run_fails_naming_a_gpu_host_whose_server_has_not_run(tmp_path):
    proc, got = run_endpoints(tmp_path, INVENTORY, servers="gpu_hosts:!gpu4")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and got is None, out[-3000:]
    assert "gpu4 has no serving endpoint in its local fact ansible_local.sglang_server" in out, out[-3000:]
    assert "run the server role on it first (playbooks/server.yml" in out, out[-3000:]
