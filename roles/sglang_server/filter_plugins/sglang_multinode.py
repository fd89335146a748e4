"""Filters of role sglang_server: the plan of a multi-node tensor-parallel group.

One model served by several hosts together: SGLang runs ``tp_size / nnodes`` TP ranks on
each node (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``, the same address on
every node; sglang/srt/entrypoints/engine.py:925-937 of 0.5.9). This filter derives each
host's part from the inventory and refuses an inventory that cannot work, before anything
on a host changes:

    {{ member_vars | sglang_multinode_plan(groups, sglang_server_multinode_group, inventory_hostname,
                                           play_hosts=ansible_play_hosts) }}
    -> {"group": "llm_a", "nnodes": 2, "node_rank": 1, "head": "gpu1", "tp_per_node": 8,
        "dist_init_addr": "10.0.0.11:20000", "endpoint": false,
        "members": [{"host": "gpu1", "rank": 0}, {"host": "gpu2", "rank": 1}]}

``member_vars`` maps each member's inventory name to its variables (``hostvars`` itself, or
the settings the role published per host, which include play and role variables that
``hostvars`` does not show). ``defaults`` fills what a member's mapping lacks. An empty group
name is a single node: ``nnodes`` 1, ``node_rank`` 0, no address.

The variables read per member: sglang_server_node_rank (null: the host's index in the group
in inventory order), sglang_server_tp_size, sglang_server_gpu_count, sglang_server_model_path,
sglang_server_dist_init_host ("": the head's ansible_host, else its inventory name),
sglang_server_dist_init_port, sglang_server_multinode_group and ansible_host.
"""

from __future__ import annotations

import ipaddress

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - the tests also import the module without Ansible
    class AnsibleFilterError(Exception):
        pass

# Members must agree on these: one model, one TP size, one rendezvous address.
AGREE = ("sglang_server_tp_size", "sglang_server_model_path", "sglang_server_dist_init_port",
         "sglang_server_dist_init_host")
INT_VARS = ("sglang_server_tp_size", "sglang_server_gpu_count", "sglang_server_dist_init_port")
UNSET = object()


def _lookup(mapping, name, default=UNSET):
    try:
        return mapping[name]
    except (KeyError, TypeError):
        return default
    except Exception:  # an undefined Ansible variable raises its own error class
        return default


def _as_int(value, what):
    if isinstance(value, bool):
        raise AnsibleFilterError(f"{what} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise AnsibleFilterError(f"{what} must be an integer, got {value!r}") from None


def _address(host):
    """A host for HOST:PORT: an IPv6 literal in brackets, as SGLang parses it (utils/common.py configure_ipv6)."""
    host = str(host).strip()
    try:
        if ipaddress.ip_address(host.strip("[]")).version == 6:
            return f"[{host.strip('[]')}]"
    except ValueError:
        pass
    return host


def _member_settings(host, member_vars, defaults):
    hvars = _lookup(member_vars, host, None)
    if hvars is None:
        raise AnsibleFilterError(f"no variables for host {host}: it is not in the inventory")
    settings = {}
    for name in AGREE + ("sglang_server_gpu_count", "sglang_server_node_rank", "sglang_server_multinode_group",
                         "ansible_host"):
        value = _lookup(hvars, name)
        if value is UNSET:
            value = defaults.get(name)
        settings[name] = value
    for name in INT_VARS:
        if settings[name] is None:
            raise AnsibleFilterError(f"{name} of host {host} is not set")
        settings[name] = _as_int(settings[name], f"{name} of host {host}")
    return settings


def sglang_multinode_plan(member_vars, groups, group, host, defaults=None, play_hosts=None):
    """The multi-node plan of ``host`` (see the module docstring); AnsibleFilterError when it cannot work."""
    defaults = dict(defaults or {})
    group = "" if group is None else str(group)
    if not group:
        return {"group": "", "nnodes": 1, "node_rank": 0, "head": host, "dist_init_addr": "", "endpoint": True,
                "members": [{"host": host, "rank": 0}]}

    found = _lookup(groups, group, None)
    if found is None:
        raise AnsibleFilterError(
            f"sglang_server_multinode_group is {group!r} (host {host}), but the inventory has no group {group!r}: "
            "add the hosts that serve the model together to that group")
    members = list(found)
    if not members:
        raise AnsibleFilterError(
            f"sglang_server_multinode_group is {group!r} (host {host}), but inventory group {group!r} is empty")
    if host not in members:
        raise AnsibleFilterError(
            f"{host}: sglang_server_multinode_group is {group!r}, but {host} is not a member of inventory group "
            f"{group!r} ({', '.join(members)})")
    if play_hosts is not None:
        play_hosts = set(play_hosts)
        missing = [m for m in members if m not in play_hosts]
        if missing:
            raise AnsibleFilterError(
                f"multi-node group {group!r}: {', '.join(missing)} not in this play (limited out, unreachable, "
                "failed, or in another serial batch): every node of the group must take part in one batch, "
                "the group starts and restarts together")

    settings = {m: _member_settings(m, member_vars, defaults) for m in members}

    for m, s in settings.items():
        own = s["sglang_server_multinode_group"] or ""
        if str(own) != group:
            raise AnsibleFilterError(
                f"{m} is in inventory group {group!r} but its sglang_server_multinode_group is {own!r}: "
                "set it for every member of the group (group_vars)")

    # Ranks: explicit where given, else the index in the group (inventory order).
    ranks = {}
    for index, m in enumerate(members):
        explicit = settings[m]["sglang_server_node_rank"]
        ranks[m] = index if explicit is None or str(explicit) == "" else _as_int(
            explicit, f"sglang_server_node_rank of host {m}")
    seen = {}
    for m in members:
        if ranks[m] in seen:
            raise AnsibleFilterError(
                f"multi-node group {group!r}: {seen[ranks[m]]} and {m} both have node rank {ranks[m]} "
                "(sglang_server_node_rank; null means the host's index in the group): every rank must be given once")
        seen[ranks[m]] = m
    nnodes = len(members)
    if sorted(ranks.values()) != list(range(nnodes)):
        got = ", ".join(f"{m}={ranks[m]}" for m in members)
        raise AnsibleFilterError(
            f"multi-node group {group!r}: node ranks must be exactly 0..{nnodes - 1} for its {nnodes} hosts "
            f"(sglang_server_node_rank), got {got}")

    for name in AGREE:
        values = {m: settings[m][name] for m in members}
        if len({str(v) for v in values.values()}) > 1:
            got = ", ".join(f"{m}={v!r}" for m, v in values.items())
            raise AnsibleFilterError(
                f"multi-node group {group!r}: its hosts disagree on {name} ({got}): one model is served with "
                "one setting on every node")

    head = seen[0]
    tp_size = settings[head]["sglang_server_tp_size"]
    if tp_size < 1 or tp_size % nnodes:
        raise AnsibleFilterError(
            f"multi-node group {group!r}: sglang_server_tp_size {tp_size} is not divisible by its {nnodes} nodes "
            "(SGLang runs tp_size / nnodes ranks on each node)")
    tp_per_node = tp_size // nnodes
    for m in members:
        gpus = settings[m]["sglang_server_gpu_count"]
        if gpus < tp_per_node or gpus % tp_per_node:
            raise AnsibleFilterError(
                f"multi-node group {group!r}: sglang_server_tp_size / nodes = {tp_size} / {nnodes} = {tp_per_node} "
                f"GPUs per node does not divide sglang_server_gpu_count of host {m} ({gpus})")

    port = settings[head]["sglang_server_dist_init_port"]
    if not 1 <= port <= 65535:
        raise AnsibleFilterError(f"sglang_server_dist_init_port must be between 1 and 65535, got {port}")
    address = (settings[head]["sglang_server_dist_init_host"] or settings[head]["ansible_host"] or head)
    return {
        "group": group,
        "nnodes": nnodes,
        "node_rank": ranks[host],
        "head": head,
        "tp_per_node": tp_per_node,
        "dist_init_addr": f"{_address(address)}:{port}",
        "endpoint": ranks[host] == 0,
        "members": [{"host": seen[r], "rank": r} for r in range(nnodes)],
    }


def sglang_multinode_unready(hosts, hostvars, play_hosts, result="__sglang_server_ready"):
    """The hosts, of ``hosts``, that did not become ready: left the play, or their wait result has rc != 0."""
    play_hosts = set(play_hosts or [])
    unready = []
    for h in hosts or []:
        rc = _lookup(_lookup(_lookup(hostvars, h, None), result, None), "rc", None)
        if h not in play_hosts or rc is None or str(rc) != "0":
            unready.append(h)
    return unready


class FilterModule:
    def filters(self):
        return {
            "sglang_multinode_plan": sglang_multinode_plan,
            "sglang_multinode_unready": sglang_multinode_unready,
        }
