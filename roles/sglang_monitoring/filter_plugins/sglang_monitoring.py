"""Prometheus' scrape targets from the inventory (role sglang_monitoring).

    {{ groups | sglang_monitoring_targets(hostvars, inventory_hostname, server_group='gpu_hosts',
                                          router_group='sglang_routers', required=true) }}
    -> {'jobs': {'sglang_server': [{'host': 'gpu1', 'target': '10.0.0.5:30000'}], 'sglang_router': [...],
                 'node': [...], 'dcgm': [...]},
        'errors': ['... naming the host and the variable ...']}

Servers: the endpoint role sglang_server records on every GPU host (its local fact,
hostvars[h].ansible_local.sglang_server.endpoint), only hosts that serve HTTP (single nodes and multi-node
heads); a server bound to loopback is scraped only from its own host. Routers: where role sglang_router
records its Prometheus endpoint (hostvars[h].ansible_local.sglang_router: prometheus_host, prometheus_port).
A host whose role has recorded nothing yet is an error naming it (run that role first) when ``required``,
else it is left out (the validation before any host changes: a new host's roles record on their first run).
Node exporter and DCGM: the endpoint this role's validation publishes on each GPU host
(hostvars[h].sglang_monitoring_exporter_endpoint).

    {{ inventory_hostname | sglang_monitoring_taken_ports(hostvars, server=true, router=false) }}
    -> [30000]: the ports this host's SGLang server (with ``server``) and router (with ``router``) recorded
       taking; [] before their first run there

This module is the role's only reader of the servers' endpoints (ansible_local.sglang_server.endpoint) and the
routers' ports (ansible_local.sglang_router); its tasks use these filters.
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


def local_fact(hostvars, host, role):
    """What ``role`` recorded on ``host`` (hostvars[host].ansible_local[role]), or {}: none recorded, or the host's
    facts not gathered in this run."""
    try:
        fact = hostvars[host]["ansible_local"][role]
    except (KeyError, TypeError):
        return {}
    except Exception:  # an undefined Ansible variable raises its own error class
        return {}
    return fact if isinstance(fact, dict) else {}


def _serves_http(endpoint):
    return str(endpoint.get("serves_http")).lower() in ("true", "1")


def sglang_monitoring_targets(groups, hostvars, me, server_group="gpu_hosts", router_group="sglang_routers",
                              required=True):
    jobs = {"sglang_server": [], "sglang_router": [], "node": [], "dcgm": []}
    errors = []
    for host in groups.get(server_group, []):
        hv = hostvars[host]
        endpoint = local_fact(hostvars, host, "sglang_server").get("endpoint")
        if not endpoint:
            if required:
                errors.append(f"{host} (group {server_group}) has no serving endpoint in its local fact "
                              "ansible_local.sglang_server (/etc/ansible/facts.d/sglang_server.fact): run the server role "
                              "on it first (playbooks/server.yml), and no --limit that leaves it out of this run (its "
                              "facts are read), so that its server's address is known")
        elif _serves_http(endpoint):
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
        router = local_fact(hostvars, host, "sglang_router")
        if "prometheus_port" not in router:
            if required:
                errors.append(f"{host} (group {router_group}) has no router in its local fact ansible_local.sglang_router "
                              "(/etc/ansible/facts.d/sglang_router.fact): run the router role on it first "
                              "(playbooks/router.yml), and no --limit that leaves it out of this run (its facts are read), "
                              "so that where its router serves its metrics is known")
            continue
        bind = str(router.get("prometheus_host", ""))
        port = router["prometheus_port"]
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


def sglang_monitoring_taken_ports(host, hostvars, server=True, router=True):
    """The ports the SGLang server and the router on ``host`` recorded (their local facts), for the clash check."""
    ports = []
    if server:
        endpoint = local_fact(hostvars, host, "sglang_server").get("endpoint") or {}
        if "port" in endpoint:
            ports.append(int(endpoint["port"]))
    if router:
        recorded = local_fact(hostvars, host, "sglang_router")
        if "port" in recorded:
            ports += [int(recorded["port"]), int(recorded["prometheus_port"])]
    return ports


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
                "sglang_monitoring_mountpoint": sglang_monitoring_mountpoint,
                "sglang_monitoring_taken_ports": sglang_monitoring_taken_ports}
