"""Prometheus' scrape targets from the inventory (role sglang_monitoring).

    {{ groups | sglang_monitoring_targets(hostvars, inventory_hostname, server_group='gpu_hosts',
                                          router_group='sglang_routers', router_host='127.0.0.1',
                                          router_port=29000) }}
    -> {'jobs': {'sglang_server': [{'host': 'gpu1', 'target': '10.0.0.5:30000'}], 'sglang_router': [...],
                 'node': [...], 'dcgm': [...]},
        'errors': ['... naming the host and the variable ...']}

Servers: the endpoint role sglang_server publishes on every GPU host (hostvars[h].sglang_server_endpoint,
validate-first play), only hosts that serve HTTP (single nodes and multi-node heads); a server bound to
loopback is scraped only from its own host. Routers: sglang-router's Prometheus endpoint
(sglang_router_prometheus_host/_port of the router host, else the given fallbacks). Node exporter and
DCGM: the endpoint this role's validation publishes on each GPU host
(hostvars[h].sglang_monitoring_exporter_endpoint).
"""

from __future__ import annotations

from urllib.parse import urlsplit

LOOPBACK = ("127.0.0.1", "::1", "localhost")
WILDCARD = ("0.0.0.0", "::", "")


def _hostport(address, port):
    address = str(address)
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"{address}:{int(port)}"


def sglang_monitoring_targets(groups, hostvars, me, server_group="gpu_hosts", router_group="sglang_routers",
                              router_host="127.0.0.1", router_port=29000):
    jobs = {"sglang_server": [], "sglang_router": [], "node": [], "dcgm": []}
    errors = []
    for host in groups.get(server_group, []):
        hv = hostvars[host]
        endpoint = hv.get("sglang_server_endpoint")
        if not endpoint:
            errors.append(f"{host} (group {server_group}) has published no sglang_server_endpoint: run the play on it "
                          f"too (no --limit that leaves it out), so that its server's address is known")
        elif str(endpoint.get("serves_http")).lower() in ("true", "1"):
            local = host == me
            if str(endpoint.get("bind")) in LOOPBACK and not local:
                errors.append(f"{host}'s server listens on {endpoint.get('bind')} (sglang_server_host): Prometheus on "
                              f"{me} cannot scrape it; bind the cluster interface or run Prometheus on {host}")
            else:
                url = endpoint["local_url"] if local else endpoint["url"]
                jobs["sglang_server"].append({"host": host, "target": urlsplit(str(url)).netloc})
        exporter = hv.get("sglang_monitoring_exporter_endpoint")
        if not exporter:
            errors.append(f"{host} (group {server_group}) has published no sglang_monitoring_exporter_endpoint: its "
                          f"validation did not run in this play (--limit?)")
            continue
        jobs["node"].append({"host": host, "target": _hostport(exporter["address"], exporter["port"])})
        if int(exporter.get("dcgm_port") or 0) > 0:
            jobs["dcgm"].append({"host": host, "target": _hostport(exporter["address"], exporter["dcgm_port"])})
    for host in groups.get(router_group, []):
        hv = hostvars[host]
        bind = str(hv.get("sglang_router_prometheus_host", router_host))
        port = hv.get("sglang_router_prometheus_port", router_port)
        if bind in LOOPBACK:
            if host != me:
                errors.append(f"{host}'s router serves its metrics on {bind} (sglang_router_prometheus_host): Prometheus "
                              f"on {me} cannot scrape it; set it to the router host's cluster address")
                continue
            address = "127.0.0.1" if bind != "::1" else "::1"
        elif bind in WILDCARD:
            address = hv.get("ansible_host", host)
        else:
            address = bind
        jobs["sglang_router"].append({"host": host, "target": _hostport(address, port)})
    return {"jobs": jobs, "errors": errors}


def sglang_monitoring_mountpoint(mounts, path):
    """The mount point (of Ansible's mount facts) that holds `path`: the longest prefix."""
    path = str(path).rstrip("/") or "/"
    best = "/"
    for mount in mounts or []:
        point = str(mount.get("mount", ""))
        if not point:
            continue
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best = point
    return best


def sglang_monitoring_static_config(target):
    """One target of sglang_monitoring_targets as a Prometheus static_config: its address and its host label."""
    return {"targets": [target["target"]], "labels": {"host": target["host"]}}


class FilterModule:
    def filters(self):
        return {"sglang_monitoring_targets": sglang_monitoring_targets,
                "sglang_monitoring_static_config": sglang_monitoring_static_config,
                "sglang_monitoring_mountpoint": sglang_monitoring_mountpoint}
