"""Filters of role sglang_router: which GPU hosts are router workers, and at which URL.

An endpoint is a GPU host that serves requests: a single-node server, or the head (node rank 0)
of a multi-node tensor-parallel group (sglang_server_multinode_group). The other ranks of such a
group are never registered: in SGLang 0.5.9 they answer only a health stub (/health 200 always,
no generation: launch_dummy_health_check_server in sglang/srt/utils/common.py), so a router
would take them for healthy workers.

    {{ groups[sglang_router_worker_group] | sglang_router_endpoints(hostvars, groups, 'http') }}
    -> [{"host": "gpu1", "url": "http://10.0.0.11:30000"}, ...]

    {{ hosts | sglang_router_key_mismatches(hostvars, sglang_router_api_key) }}
    -> names of the hosts whose sglang_server_api_key differs (never the keys)

Bad inventories raise AnsibleFilterError with a message naming the hosts and the variable:
no worker hosts, two heads of one multi-node group, two hosts giving the same URL.
"""

from __future__ import annotations

import ipaddress

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - tests import the module without Ansible too
    class AnsibleFilterError(Exception):
        pass

SERVER_DEFAULT_PORT = 30000  # role sglang_server's default sglang_server_port


def _get(vars_, name, default=None):
    try:
        value = vars_[name]
    except (KeyError, TypeError):
        return default
    return default if value is None else value


def _node_rank(host, hvars, groups):
    group = _get(hvars, "sglang_server_multinode_group", "") or ""
    if not group:
        return group, 0
    explicit = _get(hvars, "sglang_server_node_rank")
    if explicit is not None and str(explicit) != "":
        return group, int(explicit)
    members = list(groups.get(group, []) if hasattr(groups, "get") else [])
    if host not in members:
        raise AnsibleFilterError(
            f"{host}: sglang_server_multinode_group is {group!r}, but the inventory group {group!r} "
            f"does not contain {host}")
    return group, members.index(host)


def _url(scheme, address, port):
    address = str(address)
    try:
        if ipaddress.ip_address(address.strip("[]")).version == 6:
            address = f"[{address.strip('[]')}]"
    except ValueError:
        pass
    return f"{scheme}://{address}:{int(port)}"


def sglang_router_endpoints(hosts, hostvars, groups, scheme="http"):
    """The GPU hosts that serve HTTP, in inventory order, with their URLs."""
    hosts = list(hosts or [])
    if not hosts:
        raise AnsibleFilterError(
            "sglang_router_worker_group names no hosts: the router needs at least one GPU host "
            "(add hosts to the group, e.g. gpu_hosts, or set sglang_router_worker_urls)")
    endpoints, heads, urls = [], {}, {}
    for host in hosts:
        hvars = hostvars[host]
        group, rank = _node_rank(host, hvars, groups)
        if group:
            if rank == 0 and group in heads:
                raise AnsibleFilterError(
                    f"multi-node group {group!r}: {heads[group]} and {host} both have node rank 0 "
                    "(sglang_server_node_rank): every rank must be given once")
            if rank != 0:
                continue
            heads[group] = host
        address = (_get(hvars, "sglang_router_worker_address", "")
                   or _get(hvars, "ansible_host", "") or host)
        url = _url(scheme, address, _get(hvars, "sglang_server_port", SERVER_DEFAULT_PORT))
        if url in urls:
            raise AnsibleFilterError(
                f"{urls[url]} and {host} both give the worker URL {url}: set sglang_router_worker_address "
                "or sglang_server_port so that every GPU host has its own")
        urls[url] = host
        endpoints.append({"host": host, "url": url})
    return endpoints


def sglang_router_key_mismatches(hosts, hostvars, key):
    """Hosts whose sglang_server_api_key is not the router's key (names only)."""
    return [h for h in hosts or [] if str(_get(hostvars[h], "sglang_server_api_key", "") or "") != str(key or "")]


class FilterModule:
    def filters(self):
        return {
            "sglang_router_endpoints": sglang_router_endpoints,
            "sglang_router_key_mismatches": sglang_router_key_mismatches,
        }
