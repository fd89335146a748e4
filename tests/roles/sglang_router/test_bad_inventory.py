"""Bad inventories fail in the router play's validation, before any host changes, naming the problem.

Runs the real playbooks/router.yml with Ansible against throwaway inventories of local hosts,
in check mode and limited to the validation phase (tag sglang_router_validate). What a GPU host's server
recorded (ansible_local.sglang_server) is given as the host's ansible_local with fact gathering off
(ANSIBLE_GATHERING=explicit), since every host of these inventories is this machine.
"""

import os
import subprocess

import pytest
import yaml

from repo import ROOT

KEY = "test-only-inventory-key"
CONTROL = "test-only-inventory-control-plane-key"


def run_router_validation(tmp_path, inventory):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_GATHERING="explicit")
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
    return {"all": {"vars": {"sglang_common_api_key": KEY, "sglang_router_control_plane_api_key": CONTROL},
                    "children": groups}}


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


def served(host, address, port=30000):
    """The local fact of a GPU host whose server ran: the endpoint role sglang_server recorded."""
    return {"sglang_server": {"schema": 2, "endpoint": {
        "host": host, "serves_http": True, "group": "", "node_rank": 0, "nnodes": 1, "address": address, "port": port,
        "url": f"http://{address}:{port}", "bind": "0.0.0.0", "local_url": f"http://127.0.0.1:{port}",
        "api_key_sha256": ""}}}


def test_router_port_equal_to_the_port_its_hosts_server_recorded_fails(tmp_path):
    gpus = dict(GOOD, router1=local(ansible_host="10.0.0.13", ansible_local=served("router1", "10.0.0.13")))
    rc, out = run_router_validation(tmp_path, inventory(gpus, router_vars={"sglang_router_port": 30000}))
    assert rc != 0, out[-3000:]
    assert "router1 runs an SGLang server on port 30000 and sglang_router_port is the same" in out
    assert "changed=0" in out
    # The same host before its server's first run: nothing recorded to compare yet (the router's own run checks it).
    gpus = dict(GOOD, router1=local(ansible_host="10.0.0.13"))
    rc, out = run_router_validation(tmp_path, inventory(gpus, router_vars={"sglang_router_port": 30000}))
    assert rc == 0, out[-3000:]


def test_the_servers_settings_are_not_the_routers_to_check(tmp_path):
    """The router reads where the servers serve from what they recorded (ansible_local.sglang_server), never from
    their settings: playbooks/router.yml does not run role sglang_server's checks. A multi-node group whose nodes
    both claim rank 0 is refused by the server's own validation (tests/roles/sglang_server/test_multinode.py), before
    any of its nodes records an endpoint; the router's validation does not look at it."""
    nodes = {n: local(ansible_host=f"10.1.0.{i}", sglang_server_multinode_group="tp16", sglang_server_node_rank=0)
             for i, n in enumerate(["node0", "node1"])}
    inv = inventory(nodes, children={"tp16": {"hosts": {n: {} for n in nodes}}})
    rc, out = run_router_validation(tmp_path, inv)
    assert rc == 0, out[-3000:]
    assert "both have node rank" not in out and "sglang_server :" not in out, out[-3000:]


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


@pytest.mark.parametrize("bad", [{"sglang_router_policy": "fastest"}, {"sglang_router_port": "http"},
                                 {"sglang_router_distribution": "sgl-router"}])
def test_bad_variables_fail_in_the_argument_spec(tmp_path, bad):
    rc, out = run_router_validation(tmp_path, inventory(GOOD, router_vars=bad))
    assert rc != 0 and next(iter(bad)) in out, out[-3000:]


# Each bad value with what the validation says of it. The check names every bad value of a run at once, so the
# values go in five runs whose variables do not meet (one run per value cost 16 playbooks, ~200 s of the suite):
# each message names its own variable and value, so a condition that fired only because another value was bad
# would still show as a missing message.
BAD_LONG_REQUEST_SETTINGS = [
    [({"sglang_router_health_check_timeout_secs": 5},
      "sglang_router_health_check_timeout_secs is 5: it must be above 20, since SGLang answers /health after a generation"),
     ({"sglang_router_health_check_interval_secs": 0}, "sglang_router_health_check_interval_secs must be at least 1"),
     ({"sglang_router_health_failure_threshold": 0}, "sglang_router_health_failure_threshold (0)"),
     ({"sglang_router_retry_max_retries": 0}, "sglang_router_retry_max_retries must be at least 1"),
     ({"sglang_router_retry_initial_backoff_ms": 40000}, "sglang_router_retry_initial_backoff_ms (40000) must be"),
     ({"sglang_router_retry_backoff_multiplier": 0.5}, "sglang_router_retry_backoff_multiplier must be at least 1"),
     ({"sglang_router_retry_jitter_factor": 1.5}, "sglang_router_retry_jitter_factor must be between 0 and 1"),
     ({"sglang_router_cb_failure_threshold": 1},
      "sglang_router_cb_failure_threshold must be at least 2, got 1: with 1, one long prefill"),
     ({"sglang_router_cb_window_duration_secs": 0}, "sglang_router_cb_window_duration_secs (0) must be at least 1"),
     ({"sglang_router_request_timeout_secs": 0}, "sglang_router_request_timeout_secs must be at least 1"),
     ({"sglang_router_timeout_stop_sec": 30},
      "sglang_router_timeout_stop_sec (30) must be at least sglang_router_shutdown_grace_period_secs (180) + 5")],
    [({"sglang_router_health_check_endpoint": "/health_generate", "sglang_router_health_check_timeout_secs": 20},
      "sglang_router_health_check_timeout_secs is 20: it must be above 20"),
     ({"sglang_router_shutdown_grace_period_secs": 300},
      "sglang_router_timeout_stop_sec (195) must be at least sglang_router_shutdown_grace_period_secs (300) + 5")],
    [({"sglang_router_health_check_endpoint": "health"},
      "sglang_router_health_check_endpoint must be a path starting with / (e.g. /health), got health.")],
    # the drain's settings are checked on their own, after the long-request settings passed
    [({"sglang_router_drain_settle": 0},
      "sglang_router_drain_settle must be at least 1 and below sglang_router_drain_timeout (600), got 0")],
    [({"sglang_router_drain_settle": 30, "sglang_router_drain_timeout": 30},
      "sglang_router_drain_settle must be at least 1 and below sglang_router_drain_timeout (30), got 30")],
]


@pytest.mark.parametrize("cases", BAD_LONG_REQUEST_SETTINGS,
                         ids=["independent", "pairs", "endpoint", "drain-zero", "drain-at-timeout"])
def test_a_bad_long_request_setting_fails_naming_the_variable(tmp_path, cases):
    bad = {k: v for values, _says in cases for k, v in values.items()}
    assert len(bad) == sum(len(values) for values, _says in cases)  # no variable set twice in one run
    rc, out = run_router_validation(tmp_path, inventory(GOOD, router_vars=bad))
    assert rc != 0, out[-3000:]
    flat = " ".join(out.split())  # one message naming them all, folded across lines
    missing = [says for _values, says in cases if " ".join(says.split()) not in flat]
    assert missing == [], (missing, out[-3000:])
    assert "changed=0" in out


def test_every_bad_long_request_setting_is_named_in_one_run(tmp_path):
    bad = {"sglang_router_health_check_timeout_secs": 10, "sglang_router_cb_failure_threshold": 1,
           "sglang_router_timeout_stop_sec": 30}
    rc, out = run_router_validation(tmp_path, inventory(GOOD, router_vars=bad))
    assert rc != 0, out[-3000:]
    said = ["sglang_router_health_check_timeout_secs is 10: it must be above 20",
            "sglang_router_cb_failure_threshold must be at least 2, got 1",
            "sglang_router_timeout_stop_sec (30) must be at least"]
    assert any(all(s in line for s in said) for line in out.splitlines()), out[-3000:]


def test_a_shorter_grace_with_a_shorter_stop_timeout_passes(tmp_path):
    """The stop timeout follows the grace: both lowered together is a valid pair."""
    good = {"sglang_router_shutdown_grace_period_secs": 25, "sglang_router_timeout_stop_sec": 30,
            "sglang_router_health_check_endpoint": "/health_generate", "sglang_router_health_check_timeout_secs": 21}
    rc, out = run_router_validation(tmp_path, inventory(GOOD, router_vars=good))
    assert rc == 0, out[-3000:]


def test_a_drain_settle_that_is_no_number_fails_in_the_argument_spec(tmp_path):
    rc, out = run_router_validation(tmp_path, inventory(GOOD, router_vars={"sglang_router_drain_settle": "soon"}))
    assert rc != 0 and "sglang_router_drain_settle" in out, out[-3000:]


@pytest.mark.parametrize(("bad", "says"), [
    ({"sglang_router_version": "0.3.2"}, "sglang_router_distribution is smg and sglang_router_version 0.3.2"),
    ({"sglang_router_version": "1.12.0"}, "sglang_router_distribution is smg and sglang_router_version 1.12.0"),
    ({"sglang_router_distribution": "sglang-router"},
     "sglang_router_distribution is sglang-router and sglang_router_version 1.13.0"),
])
def test_a_distribution_and_version_that_do_not_go_together_fail(tmp_path, bad, says):
    """An inventory that pinned sglang-router's 0.3.2 without naming the distribution is told how to move or stay."""
    rc, out = run_router_validation(tmp_path, inventory(GOOD, router_vars=bad))
    assert rc != 0 and says in out, out[-3000:]
    assert "sets sglang_router_distribution: sglang-router" in out and "changed=0" in out


def test_sglang_router_stays_selectable(tmp_path):
    good = {"sglang_router_distribution": "sglang-router", "sglang_router_version": "0.3.2"}
    rc, out = run_router_validation(tmp_path, inventory(GOOD, router_vars=good))
    assert rc == 0, out[-3000:]


@pytest.mark.parametrize(("control", "says"), [
    ("", "sglang_router_control_plane_api_key (empty) must be at least 16 characters"),
    ("short-key", "sglang_router_control_plane_api_key (9 characters, not shown) must be at least 16"),
    (KEY, "and another value than that key"),
    ("a control plane key with spaces", "without spaces or quotes"),
])
def test_a_missing_short_or_shared_control_plane_key_fails_without_showing_it(tmp_path, control, says):
    inv = inventory(GOOD)
    inv["all"]["vars"]["sglang_router_control_plane_api_key"] = control
    rc, out = run_router_validation(tmp_path, inv)
    assert rc != 0 and says in out, out[-3000:]
    assert "changed=0" in out and (not control or control not in out) and KEY not in out
    if not control:  # a site that upgraded the roles: told how to make the key and where to set it
        said = " ".join(out.split())
        assert "ansible-vault edit" in said and "secrets.token_urlsafe(32)" in said, out[-3000:]
        assert "set sglang_router_control_plane_api_key from it in group_vars/sglang_routers/" in said, out[-3000:]


def test_a_vault_without_the_control_plane_key_is_told_how_to_add_it_before_any_host_changes(tmp_path):
    """Issue 43: a site that upgrades the roles has no control-plane key in its vault yet. With the role README's
    line (no default) the vault variable is undefined: validation fails, naming it and how to add it. (Without the
    line, or with inventory/example's default, the key is empty: the parametrized test above.)"""
    inv = inventory(GOOD)
    inv["all"]["vars"]["sglang_router_control_plane_api_key"] = "{{ vault_sglang_router_control_plane_api_key }}"
    rc, out = run_router_validation(tmp_path, inv)
    said = " ".join(out.split())
    assert rc != 0, out[-3000:]
    assert ("'vault_sglang_router_control_plane_api_key' is undefined: the inventory reads it from the vault, which "
            "lacks it. Add it with ansible-vault edit") in said, out[-3000:]
    assert "secrets.token_urlsafe(32)" in said and "Nothing has been changed on any host" in said
    assert "changed=0" in out


def test_a_control_plane_key_in_the_free_arguments_fails(tmp_path):
    bad = {"sglang_router_extra_args": ["--control-plane-api-keys", "x:y:admin:zzzzzzzzzzzzzzzzzz"]}
    rc, out = run_router_validation(tmp_path, inventory(GOOD, router_vars=bad))
    assert rc != 0 and "sglang_router_extra_args must not carry" in out, out[-3000:]
