"""Filters of role sglang_router: the router's workers, from the endpoints the servers record.

Every GPU host's server records where it serves in its local fact (role sglang_server, on every run of the
role): ``hostvars[host].ansible_local.sglang_server.endpoint``. The router does not derive any of it again;
it only picks the hosts that serve HTTP (a single node, or the head of a multi-node group: the other ranks
answer a health stub only, which a router would take for a healthy worker) and checks what concerns the
router itself:

    {{ groups[sglang_router_worker_group] | sglang_router_endpoints(hostvars) }}
    -> [{"host": "gpu1", "url": "http://10.0.0.11:30000", "local_url": "http://127.0.0.1:30000", "keyed": true}, ...]
       (url: where the router reaches it; local_url: where its own host does; keyed: clients must send the key)

    {{ groups[sglang_router_worker_group] | sglang_router_endpoints(hostvars, required=false) }}
    -> the same, leaving out the hosts whose server has recorded none yet (check mode: a new host's server
       records its endpoint on its first run)

    {{ hosts | sglang_router_key_mismatches(hostvars, sglang_common_api_key) }}
    -> names of the hosts whose server is given another API key (sglang_common_api_key; never the keys)

    {{ inventory_hostname | sglang_router_server_port(hostvars) }}
    -> the port the server on that host recorded, or None (no server has run there)

This module is the role's only reader of the server's record: its tasks use these filters.

The drain (what a server still has in flight) is module sglang_router_drain's (library/).

Bad inventories raise AnsibleFilterError with a message naming the hosts and the variable: no
worker hosts, a GPU host whose server has recorded no endpoint (required), two hosts giving the
same URL.
"""

from __future__ import annotations

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - tests import the module without Ansible too
    class AnsibleFilterError(Exception):
        pass


def recorded_endpoint(host, hostvars):
    """The endpoint ``host``'s server recorded (ansible_local.sglang_server.endpoint), or None."""
    try:
        endpoint = hostvars[host]["ansible_local"]["sglang_server"]["endpoint"]
    except (KeyError, TypeError):
        endpoint = None
    except Exception:  # an undefined Ansible variable raises its own error class
        endpoint = None
    return endpoint if isinstance(endpoint, dict) and endpoint else None


def _endpoint(host, hostvars):
    endpoint = recorded_endpoint(host, hostvars)
    if endpoint is None:
        raise AnsibleFilterError(
            f"{host} has no serving endpoint in its local fact ansible_local.sglang_server "
            "(/etc/ansible/facts.d/sglang_server.fact): run the server role on it first (playbooks/server.yml, "
            "role sglang_server, which records it on every run). If it ran, is its fact missing from this run "
            f"(--limit leaving {host} out of every play, so its facts were not gathered)? The router needs every "
            "GPU host of its worker group.")
    return endpoint


def sglang_router_endpoints(hosts, hostvars, required=True):
    """The GPU hosts that serve HTTP, in inventory order, with their URLs; with ``required`` false, the hosts
    whose server has recorded no endpoint yet are left out instead of failing."""
    hosts = list(hosts or [])
    if not hosts:
        raise AnsibleFilterError(
            "sglang_router_worker_group names no hosts: the router needs at least one GPU host "
            "(add hosts to the group, e.g. gpu_hosts, or set sglang_router_worker_urls)")
    endpoints, urls = [], {}
    for host in hosts:
        if not required and recorded_endpoint(host, hostvars) is None:
            continue
        endpoint = _endpoint(host, hostvars)
        if not endpoint["serves_http"]:
            continue
        url = endpoint["url"]
        if url in urls:
            raise AnsibleFilterError(
                f"{urls[url]} and {host} both give the worker URL {url}: set sglang_server_advertise_address "
                "or sglang_server_port so that every GPU host has its own")
        urls[url] = host
        endpoints.append({"host": host, "url": url, "local_url": endpoint["local_url"],
                          "keyed": bool(endpoint.get("api_key_sha256"))})
    return endpoints


def sglang_router_server_port(host, hostvars):
    """The port the server on ``host`` recorded, or None where none has run (a router-only host, a new host)."""
    endpoint = recorded_endpoint(host, hostvars)
    return None if endpoint is None else int(endpoint["port"])


def sglang_router_key_mismatches(hosts, hostvars, key):
    """Hosts whose server is given another API key than ``key``: the shared setting sglang_common_api_key as the
    inventory sets it for each (names only, never keys). The setting, not the hash a server recorded: a key
    changed in this run is checked before any host changes, against what every server will be given."""
    want = str(key or "")
    found = []
    for host in hosts or []:
        try:
            theirs = hostvars[host].get("sglang_common_api_key", "")
        except (KeyError, TypeError):
            theirs = ""
        if str(theirs or "") != want:
            found.append(host)
    return found


class FilterModule:
    def filters(self):
        return {
            "sglang_router_endpoints": sglang_router_endpoints,
            "sglang_router_key_mismatches": sglang_router_key_mismatches,
            "sglang_router_server_port": sglang_router_server_port,
        }
