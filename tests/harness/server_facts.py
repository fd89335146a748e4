"""The serving endpoints role sglang_server records, for the tests of its readers (roles sglang_router,
sglang_bench, sglang_monitoring): a play on the GPU hosts of a test inventory (local connection) runs the role's
own validation, which settles each host's endpoint with its multi-node plan, and its own fact module
(library/sglang_server_releases.py), which records it as on a real host, but into the host's own facts.d of
the test; the fact is then read as a play's fact gathering reads /etc/ansible/facts.d (setup's fact_path), so
hostvars[host].ansible_local.sglang_server.endpoint is what the readers see on real hosts."""

from __future__ import annotations

import os

from repo import ROOT

# {hosts}: the play's hosts. Needs -e facts_root=DIR and the environment of env().
RECORD_PLAY = """
- name: Record each GPU host's serving endpoint as role sglang_server does
  hosts: {hosts}
  gather_facts: false
  tasks:
    - name: Validate the server settings (role sglang_server), which settles the endpoint
      ansible.builtin.include_role:
        name: sglang_server
        tasks_from: validate
    - name: Record the local fact with the role's own module, into this host's facts.d of the test
      sglang_server_releases:
        home: "{{{{ facts_root }}}}/{{{{ inventory_hostname }}}}/home"
        writable_paths: []
        endpoint: "{{{{ __sglang_server_endpoint }}}}"
        fact_file: "{{{{ facts_root }}}}/{{{{ inventory_hostname }}}}/facts.d/sglang_server.fact"
    - name: Read the local facts as a play's fact gathering reads them
      ansible.builtin.setup:
        gather_subset: ["!all", "!min", local]
        fact_path: "{{{{ facts_root }}}}/{{{{ inventory_hostname }}}}/facts.d"
"""


def env(**extra: str) -> dict:
    """ansible-playbook's environment for RECORD_PLAY: the repository's configuration and roles, and the server's
    module with sglang_common's module_utils on Ansible's paths (a playbook's own task names it before any role
    is loaded)."""
    return dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
                ANSIBLE_LIBRARY=str(ROOT / "roles/sglang_server/library"),
                ANSIBLE_MODULE_UTILS=str(ROOT / "roles/sglang_common/module_utils"),
                ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", **extra)
