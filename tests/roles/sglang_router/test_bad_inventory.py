"""Bad inventories fail in the router play's validation, before any host changes, naming the problem.

Runs the real playbooks/router.yml with Ansible against throwaway inventories of local hosts,
in check mode and limited to the validation phase (tag sglang_router_validate).
"""

import os
import subprocess

import pytest
import yaml

from repo import ROOT

KEY = "test-only-inventory-key"


def run_router_validation(tmp_path, inventory):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
    proc = subprocess.run(["ansible-playbook", "-i", str(inv), str(ROOT / "playbooks" / "router.yml"),
                           "--check", "--tags", "sglang_router_validate"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def local(**hostvars):
    return {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3", **hostvars}


def inventory(gpu_hosts, router_vars=None, children=None, router_name="router1"):
    groups = {"gpu_hosts": {"hosts": gpu_hosts},
              "sglang_routers": {"hosts": {router_name: local(**(router_vars or {}))}}}
    groups.update(children or {})
    return {"all": {"vars": {"sglang_common_api_key": KEY}, "children": groups}}


GOOD = {"gpu1": local(ansible_host="10.0.0.11"), "gpu2": local(ansible_host="10.0.0.12")}


def test_a_good_inventory_passes_validation(tmp_path):
    rc, out = run_router_validation(tmp_path, inventory(GOOD))
    assert rc == 0, out[-3000:]
    assert "changed=0" in out and "failed=0" in out


def test_no_gpu_hosts_fails(tmp_path):
    inv = inventory({})
    inv["all"]["children"]["gpu_hosts"] = {"hosts": {}}
    rc, out = run_router_validation(tmp_path, inv)
    assert rc != 0 and "sglang_router_worker_group names no hosts" in out, out[-3000:]
    assert "changed=0" in out


def test_router_port_equal_to_the_server_port_on_one_host_fails(tmp_path):
    gpus = dict(GOOD, router1=local(ansible_host="10.0.0.13"))
    rc, out = run_router_validation(tmp_path, inventory(gpus, router_vars={"sglang_router_port": 30000}))
    assert rc != 0, out[-3000:]
    assert "router1 runs an SGLang server on port 30000 and sglang_router_port is the same" in out
    assert "changed=0" in out


def test_duplicate_node_ranks_fail(tmp_path):
    nodes = {n: local(ansible_host=f"10.1.0.{i}", sglang_server_multinode_group="tp16", sglang_server_node_rank=0)
             for i, n in enumerate(["node0", "node1"])}
    inv = inventory(nodes, children={"tp16": {"hosts": {n: {} for n in nodes}}})
    rc, out = run_router_validation(tmp_path, inv)
    assert rc != 0 and "node0 and node1 both have node rank 0" in out, out[-3000:]


def test_a_worker_with_another_api_key_fails_naming_the_host_not_the_key(tmp_path):
    gpus = dict(GOOD, gpu2=local(ansible_host="10.0.0.12", sglang_common_api_key="another-key-9"))
    rc, out = run_router_validation(tmp_path, inventory(gpus))
    assert rc != 0 and "The servers on gpu2 expect another API key than this router's sglang_common_api_key" in out, \
        out[-3000:]
    assert "another-key-9" not in out and KEY not in out


def test_the_api_key_under_its_old_name_fails_naming_the_new_one(tmp_path):
    """An inventory written for the versions before sglang_common_api_key: refused before any change (the server's
    old name: tests/roles/sglang_server/test_server_bad_inputs.py)."""
    inv = inventory(GOOD)
    inv["all"]["vars"]["sglang_router_api_key"] = KEY
    rc, out = run_router_validation(tmp_path, inv)
    assert rc != 0 and "sglang_router_api_key is no longer read: set sglang_common_api_key instead" in out, out[-3000:]
    assert KEY not in out and "changed=0" in out


@pytest.mark.parametrize("bad", [{"sglang_router_policy": "fastest"}, {"sglang_router_port": "http"}])
def test_bad_variables_fail_in_the_argument_spec(tmp_path, bad):
    rc, out = run_router_validation(tmp_path, inventory(GOOD, router_vars=bad))
    assert rc != 0 and next(iter(bad)) in out, out[-3000:]
