#!/usr/bin/python
"""Where this host's router serves as the local fact ansible_local.sglang_router (role sglang_router, tasks/config.yml)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_fact
short_description: Record where the router serves and publishes its metrics as the local fact sglang_router
description:
  - The one interface between role sglang_router and the roles that need to know where the router is (role
    sglang_monitoring: Prometheus' router target, and the ports a host's monitoring must leave free); nothing is
    started or asked.
  - The fact, schema 1 -- C(host), the address the router binds (I(host)); C(port), its port (I(port)); C(prometheus_host)
    and C(prometheus_port), where it serves its Prometheus metrics (I(prometheus_host), I(prometheus_port)).
  - Writes I(fact_file) (JSON) when its content differs, atomically, mode 0644, owned by root (role sglang_common's
    module_utils). Supports check mode and diff mode.
options:
  host:
    description: The address the router binds (--host).
    type: str
    required: true
  port:
    description: The router's port (--port).
    type: int
    required: true
  prometheus_host:
    description: The address of its Prometheus endpoint (--prometheus-host).
    type: str
    required: true
  prometheus_port:
    description: The port of its Prometheus endpoint (--prometheus-port).
    type: int
    required: true
  fact_file:
    description: The local fact file to write.
    type: path
    default: /etc/ansible/facts.d/sglang_router.fact
author: sglang-ansible
"""

EXAMPLES = r"""
- name: Record where the router serves for other roles (ansible_local.sglang_router)
  sglang_router_fact:
    host: 0.0.0.0
    port: 30080
    prometheus_host: 127.0.0.1
    prometheus_port: 29000
"""

RETURN = r"""
router:
  description: The fact as written (see the description).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_common_local_fact import record_local_fact

SCHEMA = 1


def describe(host: str, port: int, prometheus_host: str, prometheus_port: int) -> dict:
    return {"schema": SCHEMA, "host": str(host), "port": int(port), "prometheus_host": str(prometheus_host),
            "prometheus_port": int(prometheus_port)}


def main() -> None:
    module = AnsibleModule(argument_spec={
        "host": {"type": "str", "required": True},
        "port": {"type": "int", "required": True},
        "prometheus_host": {"type": "str", "required": True},
        "prometheus_port": {"type": "int", "required": True},
        "fact_file": {"type": "path", "default": "/etc/ansible/facts.d/sglang_router.fact"},
    }, supports_check_mode=True)
    fact = describe(**{name: module.params[name] for name in ("host", "port", "prometheus_host", "prometheus_port")})
    module.exit_json(**record_local_fact(module, fact, module.params["fact_file"], "router"))


if __name__ == "__main__":
    main()
