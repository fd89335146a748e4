"""prometheus.yml, the web configuration and the rules as the role renders them from an inventory, checked by
the real promtool (`check config`, which also loads the rule files; `check web-config`).

The play runs on this machine over a local connection and only renders into a temporary directory: the
role's validation computes the targets from the inventory and what its hosts' roles recorded (two GPU hosts
whose servers recorded their endpoints, one a multi-node worker that serves no HTTP; a router that recorded
its metrics on all interfaces; a DCGM exporter on one host), then the templates are rendered with the role's
own defaults and vars. The targets filter alone: a host whose role recorded nothing yet.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

import promtool as promtool_harness
from repo import ROLES, ROOT, load

ROLE = ROLES / "sglang_monitoring"
HASH = "$2b$12$hNf2lSsxfm0.i4a.1kVpSOVyBCfIB51VRjgBUyv6kdnyTlgWj81Ay"


def endpoint(host: str, serves: bool) -> dict:
    """What the host's server recorded (role sglang_server's local fact, ansible_local.sglang_server)."""
    return {"sglang_server": {"schema": 2, "endpoint": {
        "host": host, "serves_http": serves, "url": f"http://{host}:30000", "local_url": "http://127.0.0.1:30000",
        "bind": "0.0.0.0", "port": 30000}}}


PLAY = """
- hosts: monitoring
  gather_facts: true
  vars_files: [{defaults}, {vars}]
  tasks:
    - ansible.builtin.include_role:
        name: sglang_monitoring
        tasks_from: validate
    - ansible.builtin.template:
        src: {templates}/{{{{ item.src }}}}
        dest: {out}/{{{{ item.dest }}}}
        mode: "0600"
      loop:
        - {{src: prometheus.yml.j2, dest: prometheus.yml}}
        - {{src: web-config.yml.j2, dest: web-config.yml}}
        - {{src: sglang-alerts.rules.yml.j2, dest: rules/sglang-alerts.rules.yml}}
        - {{src: prometheus.default.j2, dest: default-prometheus}}
        - {{src: sglang-bench-metrics.service.j2, dest: sglang-bench-metrics.service}}
        - {{src: sglang-bench-metrics.path.j2, dest: sglang-bench-metrics.path}}
    - ansible.builtin.copy:
        content: "{{{{ sglang_monitoring_scrape_password }}}}"
        dest: {out}/scrape-password
        mode: "0600"
"""


def render(tmp_path, extra: dict) -> subprocess.CompletedProcess:
    out = tmp_path / "etc"
    (out / "rules").mkdir(parents=True)
    inv = {"all": {"children": {
        "gpu_hosts": {"hosts": {
            "gpu1": {"ansible_local": endpoint("gpu1", True),
                     "sglang_monitoring_exporter_endpoint": {"address": "10.0.0.1", "port": 9100, "dcgm_port": 9400}},
            "gpu2": {"ansible_local": endpoint("gpu2", False),
                     "sglang_monitoring_exporter_endpoint": {"address": "10.0.0.2", "port": 9100, "dcgm_port": 0}}}},
        "sglang_routers": {"hosts": {"router1": {"ansible_host": "10.0.0.9", "ansible_local": {"sglang_router": {
            "schema": 1, "host": "0.0.0.0", "port": 30080, "prometheus_host": "0.0.0.0", "prometheus_port": 29001}}}}},
        "monitoring": {"hosts": {"localhost": {"ansible_connection": "local",
                                               "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    (tmp_path / "play.yml").write_text(PLAY.format(defaults=ROLE / "defaults" / "main.yml", vars=ROLE / "vars" / "main.yml",
                                                   templates=ROLE / "templates", out=out))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROLES), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FILTER_PLUGINS=f"{ROLES / 'sglang_common' / 'filter_plugins'}:{ROLE / 'filter_plugins'}")
    extra = {"sglang_monitoring_config_dir": str(out), "sglang_monitoring_listen_address": "10.0.0.8", **extra}
    return subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
                           "-e", json.dumps(extra)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("auth", [False, True], ids=["plain", "basic-auth"])
def test_rendered_configuration_passes_promtool(tmp_path, auth) -> None:
    extra = {"sglang_monitoring_basic_auth_users": {"admin": HASH}, "sglang_monitoring_scrape_user": "admin",
             "sglang_monitoring_scrape_password": "test", "sglang_monitoring_alertmanagers": ["10.0.0.7:9093"]} if auth else {}
    proc = render(tmp_path, extra)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    etc = tmp_path / "etc"
    tool = str(promtool_harness.promtool())
    check = subprocess.run([tool, "check", "config", str(etc / "prometheus.yml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    check = subprocess.run([tool, "check", "web-config", str(etc / "web-config.yml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    config = yaml.safe_load((etc / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    static = {name: [(c["targets"][0], c["labels"]["host"]) for c in job["static_configs"]] for name, job in jobs.items()}
    assert static["sglang_server"] == [("gpu1:30000", "gpu1")]  # gpu2 serves no HTTP (a multi-node worker)
    assert static["node"] == [("10.0.0.1:9100", "gpu1"), ("10.0.0.2:9100", "gpu2")]
    assert static["dcgm"] == [("10.0.0.1:9400", "gpu1")]
    assert static["sglang_router"] == [("10.0.0.9:29001", "router1")]  # the port the router recorded
    assert static["prometheus"] == [("10.0.0.8:9090", "localhost")]
    assert "--web.listen-address=10.0.0.8:9090" in (etc / "default-prometheus").read_text()
    if auth:
        assert jobs["node"]["basic_auth"] == {"username": "admin", "password_file": str(etc / "scrape-password")}
        assert "basic_auth" not in jobs["sglang_server"]  # SGLang's /metrics has no auth
        assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["10.0.0.7:9093"]
        assert "test" not in (etc / "prometheus.yml").read_text().split()
        assert yaml.safe_load((etc / "web-config.yml").read_text()) == {"basic_auth_users": {"admin": HASH}}


filters = load(ROLE / "filter_plugins" / "sglang_monitoring.py", "sglang_monitoring_filters")
EXPORTER = {"sglang_monitoring_exporter_endpoint": {"address": "10.0.0.1", "port": 9100, "dcgm_port": 0}}


@pytest.mark.parametrize("facts", [{}, {"ansible_local": {}}], ids=["not-gathered", "never-ran"])
def test_a_host_whose_role_recorded_nothing_is_named_with_the_role_to_run_first(facts) -> None:
    groups = {"gpu_hosts": ["gpu1", "gpu2"], "sglang_routers": ["router1"]}
    hostvars = {"gpu1": {"ansible_local": endpoint("gpu1", True), **EXPORTER}, "gpu2": {**facts, **EXPORTER},
                "router1": dict(facts)}
    got = filters.sglang_monitoring_targets(groups, hostvars, "prom1")
    assert got["jobs"]["sglang_server"] == [{"host": "gpu1", "target": "gpu1:30000"}]
    assert got["jobs"]["sglang_router"] == []
    assert len(got["errors"]) == 2, got["errors"]
    assert got["errors"][0].startswith("gpu2 (group gpu_hosts) has no serving endpoint in its local fact "
                                       "ansible_local.sglang_server (/etc/ansible/facts.d/sglang_server.fact): run the "
                                       "server role on it first (playbooks/server.yml)")
    assert got["errors"][1].startswith("router1 (group sglang_routers) has no router in its local fact "
                                       "ansible_local.sglang_router (/etc/ansible/facts.d/sglang_router.fact): run the "
                                       "router role on it first (playbooks/router.yml)")
    # The validation before any host changes: those not recorded yet are left out, nothing else changes.
    lenient = filters.sglang_monitoring_targets(groups, hostvars, "prom1", required=False)
    assert lenient["errors"] == [] and lenient["jobs"] == got["jobs"]


def test_the_ports_a_hosts_server_and_router_recorded_for_the_clash_check() -> None:
    router = {"sglang_router": {"port": 30080, "prometheus_port": 29000}}
    hostvars = {"both": {"ansible_local": {**endpoint("both", True), **router}}, "new": {}, "bare": {"ansible_local": {}}}
    assert filters.sglang_monitoring_taken_ports("both", hostvars) == [30000, 30080, 29000]
    assert filters.sglang_monitoring_taken_ports("both", hostvars, server=True, router=False) == [30000]
    assert filters.sglang_monitoring_taken_ports("both", hostvars, server=False, router=True) == [30080, 29000]
    assert filters.sglang_monitoring_taken_ports("new", hostvars) == []
    assert filters.sglang_monitoring_taken_ports("bare", hostvars) == []


@pytest.mark.parametrize("starts_dir", ["", "/var/lib/sglang/starts"], ids=["no-record", "record"])
def test_the_publishing_unit_keeps_its_lines_with_and_without_a_start_record(tmp_path, starts_dir) -> None:
    """The service's ExecStart ends where its line ends (a Jinja block tag at a line's end once ate the newline:
    the textfile became 'sglang_server_start.promNoNewPrivileges=yes' and the hardening line was lost), and the
    path unit watches the start records only where the server records them."""
    proc = render(tmp_path, {"__sglang_monitoring_starts_dir": starts_dir})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    unit = (tmp_path / "etc" / "sglang-bench-metrics.service").read_text().splitlines()
    exec_line = next(i for i, line in enumerate(unit) if line.startswith("ExecStart="))
    assert unit[exec_line + 1] == "NoNewPrivileges=yes"
    assert unit[exec_line].endswith("/sglang_server_start.prom" if starts_dir else "/bench-baselines.json")
    assert (f"--start-record {starts_dir}/last.json" in unit[exec_line]) is bool(starts_dir)
    watched = [line for line in (tmp_path / "etc" / "sglang-bench-metrics.path").read_text().splitlines()
               if line.startswith("PathChanged=")]
    assert len(watched) == (2 if starts_dir else 1) and (f"PathChanged={starts_dir}" in watched) is bool(starts_dir)
