#!/usr/bin/python
"""What this host's server serves, and where, as the local fact ansible_local.sglang_server (role sglang_server,
tasks/facts.yml)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server_releases
short_description: Record where the server serves, the release it serves and the one before it as the local fact sglang_server
description:
  - The one interface between role sglang_server and the readers of what it serves and where (roles sglang_router,
    sglang_bench and sglang_monitoring, role sglang_build's pruning, the upgrade and rollback playbooks), read from
    the server's own records in its home directory and the endpoint its settings give; nothing is started or asked.
  - The fact, schema 2 -- C(serving), the release that last became ready (the state file serving-release, written
    after every successful start) and C(previous), the release that served before it (previous-release: written
    when a different release becomes ready, kept when the release going back is the previous one itself), each
    a release directory or "" (none recorded); C(serving_id) and C(previous_id), their directories' names;
    C(writable_paths), the directories the server's unit may write (I(writable_paths)), which role sglang_model
    keeps the models and their local sources out of; C(starts_dir), where each start's phases are recorded
    (sglang_start_phases.py --record; C(last.json) the newest), which role sglang_bench reads with its results;
    C(endpoint), where the server is reached (I(endpoint), schema 2).
    C(previous) is the one "previous" of the project, playbooks/rollback.yml's target; role sglang_build
    never prunes C(serving) or C(previous). The release the next start runs is role sglang_build's
    (ansible_local.sglang_build.current).
  - Writes I(fact_file) (JSON) when its content differs, atomically, mode 0644, owned by root (role sglang_common's
    module_utils). Supports check mode and diff mode.
options:
  home:
    description: The server's home directory, which holds serving-release and previous-release.
    type: path
    required: true
  writable_paths:
    description: The directories the server may write (its unit's ReadWritePaths).
    type: list
    elements: path
    default: []
  endpoint:
    description:
      - Where this host's server is reached, as its settings give it (tasks/validate.yml settles it with the
        multi-node plan) -- C(host), C(serves_http) (a single node or node rank 0: the only nodes that serve HTTP),
        C(group), C(node_rank), C(nnodes), C(address), C(port), C(url) (from other hosts), C(bind), C(local_url)
        (from the host itself) and C(api_key_sha256) (the sha256 of the API key clients must send, "" when none:
        readers compare, the key itself is never recorded). Recorded with these types whatever the task passed.
    type: dict
    required: true
  fact_file:
    description: The local fact file to write.
    type: path
    default: /etc/ansible/facts.d/sglang_server.fact
author: sglang-ansible
"""

EXAMPLES = r"""
- name: Record what serves for other roles (ansible_local.sglang_server)
  sglang_server_releases:
    home: /var/lib/sglang
    writable_paths: [/var/lib/sglang, /var/cache/sglang]
    endpoint: "{{ __sglang_server_endpoint }}"
"""

RETURN = r"""
releases:
  description: The fact as written (see the description).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.sglang_common_local_fact import fact_module_main

SCHEMA = 2
RECORDS = {"serving": "serving-release", "previous": "previous-release"}
# The endpoint's fields and their types (readers compare port, rank and serves_http as these).
ENDPOINT = {"host": str, "serves_http": bool, "group": str, "node_rank": int, "nnodes": int, "address": str,
            "port": int, "url": str, "bind": str, "local_url": str, "api_key_sha256": str}


def recorded(home: str, name: str) -> str:
    try:
        with open(os.path.join(home, name), encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def settled(endpoint: dict) -> dict:
    """The endpoint's fields with their types (a task's template may hand over "30000", "True")."""
    missing = sorted(set(ENDPOINT) - set(endpoint))
    if missing:
        raise ValueError(f"the endpoint lacks {', '.join(missing)}")
    out = {}
    for name, kind in ENDPOINT.items():
        value = endpoint[name]
        if kind is bool:
            value = value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes")
        out[name] = kind(value)
    return out


def describe(home: str, writable_paths: list | None = None, endpoint: dict | None = None) -> dict:
    fact: dict = {"schema": SCHEMA}
    for key, name in RECORDS.items():
        release = recorded(home, name)
        fact[key] = release
        fact[f"{key}_id"] = os.path.basename(os.path.normpath(release)) if release else ""
    fact["writable_paths"] = list(writable_paths or [])
    fact["starts_dir"] = os.path.join(home, "starts")
    if endpoint is not None:
        fact["endpoint"] = settled(endpoint)
    return fact


def main() -> None:
    fact_module_main("sglang_server", "home", describe, "releases",
                     {"writable_paths": {"type": "list", "elements": "path", "default": []},
                      "endpoint": {"type": "dict", "required": True}})

if __name__ == "__main__":
    main()
