"""The router's view of the inventory: which GPU hosts are workers, at which URL, and bad inventories."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "sglang_router_filters", ROOT / "roles" / "sglang_router" / "filter_plugins" / "sglang_router.py")
filters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(filters)
endpoints = filters.sglang_router_endpoints


def test_one_worker_per_gpu_host_in_inventory_order_with_address_and_port():
    hostvars = {"gpu1": {"ansible_host": "10.0.0.11"},
                "gpu2": {"ansible_host": "10.0.0.12", "sglang_server_port": 31000},
                "gpu3": {"sglang_router_worker_address": "gpu3.internal", "ansible_host": "192.0.2.3"},
                "gpu4": {}}
    got = endpoints(["gpu1", "gpu2", "gpu3", "gpu4"], hostvars, {}, "http")
    assert got == [{"host": "gpu1", "url": "http://10.0.0.11:30000"},
                   {"host": "gpu2", "url": "http://10.0.0.12:31000"},
                   {"host": "gpu3", "url": "http://gpu3.internal:30000"},
                   {"host": "gpu4", "url": "http://gpu4:30000"}]


def test_ipv6_addresses_are_bracketed():
    got = endpoints(["g"], {"g": {"ansible_host": "fd00::11"}}, {}, "https")
    assert got == [{"host": "g", "url": "https://[fd00::11]:30000"}]


@pytest.mark.parametrize("size", [2, 4])
def test_a_multi_node_group_is_one_worker_its_head(size):
    names = [f"node{i}" for i in range(size)]
    hostvars = {n: {"sglang_server_multinode_group": "tp16", "ansible_host": f"10.1.0.{i}"} for i, n in enumerate(names)}
    hostvars["solo"] = {"ansible_host": "10.2.0.1"}
    got = endpoints(names + ["solo"], hostvars, {"tp16": names}, "http")
    assert got == [{"host": "node0", "url": "http://10.1.0.0:30000"}, {"host": "solo", "url": "http://10.2.0.1:30000"}]


def test_explicit_node_ranks_choose_the_head():
    names = ["a", "b"]
    hostvars = {"a": {"sglang_server_multinode_group": "g", "sglang_server_node_rank": 1},
                "b": {"sglang_server_multinode_group": "g", "sglang_server_node_rank": 0}}
    assert endpoints(names, hostvars, {"g": names}) == [{"host": "b", "url": "http://b:30000"}]


def test_no_gpu_hosts_fails_naming_the_group_variable():
    with pytest.raises(filters.AnsibleFilterError, match="sglang_router_worker_group names no hosts"):
        endpoints([], {}, {})


def test_duplicate_head_ranks_fail_naming_both_hosts():
    hostvars = {"a": {"sglang_server_multinode_group": "g", "sglang_server_node_rank": 0},
                "b": {"sglang_server_multinode_group": "g", "sglang_server_node_rank": 0}}
    with pytest.raises(filters.AnsibleFilterError, match="a and b both have node rank 0"):
        endpoints(["a", "b"], hostvars, {"g": ["a", "b"]})


def test_two_hosts_with_the_same_url_fail():
    hostvars = {"a": {"ansible_host": "10.0.0.1"}, "b": {"ansible_host": "10.0.0.1"}}
    with pytest.raises(filters.AnsibleFilterError, match="a and b both give the worker URL http://10.0.0.1:30000"):
        endpoints(["a", "b"], hostvars, {})


def test_key_mismatches_name_hosts_never_keys():
    hostvars = {"a": {"sglang_server_api_key": "k1"}, "b": {"sglang_server_api_key": "other"}, "c": {}}
    assert filters.sglang_router_key_mismatches(["a", "b", "c"], hostvars, "k1") == ["b", "c"]
    assert filters.sglang_router_key_mismatches(["c"], hostvars, "") == []
