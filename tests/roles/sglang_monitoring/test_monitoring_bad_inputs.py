"""Bad monitoring settings fail in playbooks/monitoring.yml's validate-first play, naming the variable.

The inventory is this machine over a local connection, in gpu_hosts, sglang_routers and monitoring at
once, with the demo inventory's settings; the playbook runs in check mode (nothing could change even if
validation let a bad value through), and each failure must come from the validate-first play, before
any play of the monitoring itself. tests/molecule/multihost proves the good settings on real hosts.
Each host's server and router have run: what they recorded (ansible_local.sglang_server's endpoint on port
30000, ansible_local.sglang_router on 30080 with its metrics on 29000) is given as the host's ansible_local,
with fact gathering off (ANSIBLE_GATHERING=explicit), since every host of the inventory is this machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
import yaml

import bad_inputs
from repo import ROOT

PLAYBOOK = ROOT / "playbooks" / "monitoring.yml"
# What the host's server and router recorded (roles sglang_server and sglang_router, their defaults).
RECORDED = {"sglang_server": {"schema": 2, "endpoint": {
                "host": "localhost", "serves_http": True, "group": "", "node_rank": 0, "nnodes": 1,
                "address": "127.0.0.1", "port": 30000, "url": "http://127.0.0.1:30000", "bind": "127.0.0.1",
                "local_url": "http://127.0.0.1:30000", "api_key_sha256": ""}},
            "sglang_router": {"schema": 1, "host": "127.0.0.1", "port": 30080, "prometheus_host": "127.0.0.1",
                              "prometheus_port": 29000}}
GOOD_HASH = "$2b$12$hNf2lSsxfm0.i4a.1kVpSOVyBCfIB51VRjgBUyv6kdnyTlgWj81Ay"

CASES = [
    ("unknown server group", {"sglang_monitoring_server_group": "gpu_hostz"}, "sglang_monitoring_server_group=gpu_hostz"),
    ("unknown router group", {"sglang_monitoring_router_group": "routerz"}, "sglang_monitoring_router_group=routerz"),
    ("prometheus on the server's port", {"sglang_monitoring_prometheus_port": 30000}, "sglang_monitoring_prometheus_port 30000"),
    ("node exporter on the router's port", {"sglang_monitoring_node_exporter_port": 30080},
     "sglang_monitoring_node_exporter_port 30080"),
    ("prometheus on the router's metrics port", {"sglang_monitoring_prometheus_port": 29000},
     "sglang_monitoring_prometheus_port 29000"),
    ("threshold of the wrong type", {"sglang_monitoring_kv_usage_ratio": "ninety"}, "sglang_monitoring_kv_usage_ratio"),
    ("threshold out of range", {"sglang_monitoring_kv_usage_ratio": 90}, "sglang_monitoring_kv_usage_ratio"),
    ("duration without a unit", {"sglang_monitoring_down_for": "60"}, "sglang_monitoring_down_for"),
    ("router alert duration without a unit", {"sglang_monitoring_router_circuit_open_window": "10"},
     "sglang_monitoring_router_circuit_open_window"),
    ("basic auth without a password hash", {"sglang_monitoring_basic_auth_users": {"prom": ""},
                                            "sglang_monitoring_scrape_user": "prom",
                                            "sglang_monitoring_scrape_password": "x"}, "these have none: prom"),
    ("basic auth with a plain password", {"sglang_monitoring_basic_auth_users": {"prom": "secret-password"},
                                          "sglang_monitoring_scrape_user": "prom",
                                          "sglang_monitoring_scrape_password": "secret-password"}, "these have none: prom"),
    ("basic auth without a scrape password", {"sglang_monitoring_basic_auth_users": {"prom": GOOD_HASH},
                                              "sglang_monitoring_scrape_user": "prom"}, "sglang_monitoring_scrape_password"),
    ("TLS certificate without its key", {"sglang_monitoring_tls_cert_file": "/etc/ssl/prom.crt"},
     "sglang_monitoring_tls_key_file"),
    ("a baseline without tok/s", {"sglang_monitoring_bench_baseline": {"eagle3": {"accept_length": 2.4}}},
     "sglang_monitoring_bench_baseline"),
    ("the router's metrics port set here", {"sglang_monitoring_router_metrics_port": 29001},
     "sglang_monitoring_router_metrics_host and sglang_monitoring_router_metrics_port are no longer read"),
]


def run(tmp_path, extra: dict) -> subprocess.CompletedProcess:
    inv = tmp_path / "inventory"
    inv.mkdir()
    (inv / "group_vars").symlink_to(ROOT / "inventory" / "demo" / "group_vars")
    host = {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                          "ansible_local": RECORDED}}
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "gpu_hosts": {"hosts": host}, "monitoring": {"hosts": {"localhost": {}}},
        "sglang_routers": {"hosts": {"localhost": {"sglang_router_host": "127.0.0.1"}}}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_GATHERING="explicit")
    return subprocess.run(["ansible-playbook", "-i", str(inv), str(PLAYBOOK), "--check",
                           "-e", json.dumps(extra),
                           "--skip-tags", "monitoring"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_good_settings_pass_validation(tmp_path) -> None:
    proc = run(tmp_path, {})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "TASK [sglang_monitoring : Check that every target is known and reachable from Prometheus]" in out


def run_batch(tmp_path, cases: dict[str, dict]) -> subprocess.CompletedProcess:
    """Every case in one run: each its own inventory host (this machine again, over a local connection)
    in the three groups, with the case's values as host variables (tests/harness/bad_inputs.py)."""
    inv = tmp_path / "inventory"
    inv.mkdir()
    (inv / "group_vars").symlink_to(ROOT / "inventory" / "demo" / "group_vars")
    hosts = {bad_inputs.alias(case): {"ansible_connection": "local",
                                      "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                                      "sglang_router_host": "127.0.0.1",
                                      "ansible_local": RECORDED, **extra}
             for case, extra in cases.items()}
    names = {name: {} for name in hosts}
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts, "children": {
        "gpu_hosts": {"hosts": names}, "monitoring": {"hosts": names}, "sglang_routers": {"hosts": names}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_GATHERING="explicit")
    return subprocess.run(["ansible-playbook", "-i", str(inv), str(PLAYBOOK), "--check", "--skip-tags", "monitoring"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    proc = run_batch(tmp_path_factory.mktemp("batch"), {c[0]: c[1] for c in CASES})
    return proc, bad_inputs.failures_by_host(proc.stdout)


@pytest.mark.parametrize("case,expect", [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_value_fails_in_validation_naming_it(batch, case, expect) -> None:
    proc, failures = batch
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert expect in failures.get(bad_inputs.alias(case), ""), out[-4000:]
    plays = re.findall(r"^PLAY \[(.+?)\]", proc.stdout, re.M)
    assert plays and all(p.startswith("Check the ") for p in plays), f"a play past validation started: {plays}"
