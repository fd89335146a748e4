"""Filters of role sglang_router: the router's workers, from the servers' published endpoints.

Every GPU host's server publishes where it serves (role sglang_server, ``tasks_from: endpoint``,
also run by its validation): ``hostvars[host].sglang_server_endpoint``. The router does not
derive any of it again; it only picks the hosts that serve HTTP (a single node, or the head of
a multi-node group: the other ranks answer a health stub only, which a router would take for
a healthy worker) and checks what concerns the router itself:

    {{ groups[sglang_router_worker_group] | sglang_router_endpoints(hostvars) }}
    -> [{"host": "gpu1", "url": "http://10.0.0.11:30000"}, ...]

    {{ hosts | sglang_router_key_mismatches(hostvars, sglang_common_api_key) }}
    -> names of the hosts whose server expects another API key (never the keys)

The drain (what a server still has in flight) is module sglang_router_drain's (library/).

Bad inventories raise AnsibleFilterError with a message naming the hosts and the variable: no
worker hosts, a GPU host whose endpoint was not published in this run, two hosts giving the
same URL.
"""

from __future__ import annotations

import hashlib

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - tests import the module without Ansible too
    class AnsibleFilterError(Exception):
        pass


def _endpoint(host, hostvars):
    try:
        endpoint = hostvars[host]["sglang_server_endpoint"]
    except (KeyError, TypeError):
        endpoint = None
    except Exception:  # an undefined Ansible variable raises its own error class
        endpoint = None
    if not endpoint:
        raise AnsibleFilterError(
            f"{host} has no sglang_server_endpoint: its server settings were not checked in this run "
            "(role sglang_server, tasks_from: endpoint; every playbook's validate-first play does it for the "
            f"GPU hosts in the play). Is {host} left out by --limit? The router needs every GPU host in the play.")
    return endpoint


def sglang_router_endpoints(hosts, hostvars):
    """The GPU hosts that serve HTTP, in inventory order, with their URLs."""
    hosts = list(hosts or [])
    if not hosts:
        raise AnsibleFilterError(
            "sglang_router_worker_group names no hosts: the router needs at least one GPU host "
            "(add hosts to the group, e.g. gpu_hosts, or set sglang_router_worker_urls)")
    endpoints, urls = [], {}
    for host in hosts:
        endpoint = _endpoint(host, hostvars)
        if not endpoint["serves_http"]:
            continue
        url = endpoint["url"]
        if url in urls:
            raise AnsibleFilterError(
                f"{urls[url]} and {host} both give the worker URL {url}: set sglang_server_advertise_address "
                "or sglang_server_port so that every GPU host has its own")
        urls[url] = host
        endpoints.append({"host": host, "url": url})
    return endpoints


def sglang_router_key_mismatches(hosts, hostvars, key):
    """Hosts whose server expects another API key than ``key`` (names only, never keys)."""
    want = hashlib.sha256(str(key).encode()).hexdigest() if key else ""
    return [h for h in hosts or [] if _endpoint(h, hostvars)["api_key_sha256"] != want]


class FilterModule:
    def filters(self):
        return {
            "sglang_router_endpoints": sglang_router_endpoints,
            "sglang_router_key_mismatches": sglang_router_key_mismatches,
        }
