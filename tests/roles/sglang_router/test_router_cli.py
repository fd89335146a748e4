"""Every flag the router's unit renders parses in the pinned release's own argument parser, with its value.

The unit is rendered by Ansible from the role's template (playbooks below, on local hosts of a test
inventory: the servers record their endpoints, tests/harness/server_facts.py; the router role validates and
renders), its ExecStart is read back as systemd reads it, and the argv after the launcher's ``--`` goes
through the real parser of the release the role pins (tests/harness/router_cli.py: the PyPI wheel's own
``RouterArgs``). Once with the role's defaults, once with every setting changed, so each variable is
seen to reach its flag, and the flag its field.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

import router_cli
import server_facts
from repo import ROOT
from simtruth import free_port

DEFAULTS = yaml.safe_load((ROOT / "roles/sglang_router/defaults/main.yml").read_text())
PINNED = (DEFAULTS["sglang_router_distribution"], DEFAULTS["sglang_router_version"])
LEGACY = ("sglang-router", "0.3.2")  # still selectable (sglang_router_distribution): its parser takes the same argv
KEY = "test-only-cli-key"
CONTROL_KEY = "test-only-cli-control-plane-key"
LAUNCHER = ROOT / "roles/sglang_common/files/sglang_launch.py"

# variable -> the RouterArgs field its flag sets, and a value other than the default.
SETTINGS = {
    "sglang_router_host": ("host", "127.0.0.1"),
    "sglang_router_port": ("port", 30081),
    "sglang_router_policy": ("policy", "round_robin"),
    "sglang_router_prometheus_host": ("prometheus_host", "0.0.0.0"),
    "sglang_router_prometheus_port": ("prometheus_port", 29001),
    "sglang_router_health_check_endpoint": ("health_check_endpoint", "/health_generate"),
    "sglang_router_health_check_timeout_secs": ("health_check_timeout_secs", 45),
    "sglang_router_health_check_interval_secs": ("health_check_interval_secs", 15),
    "sglang_router_health_failure_threshold": ("health_failure_threshold", 4),
    "sglang_router_health_success_threshold": ("health_success_threshold", 5),
    "sglang_router_retry_max_retries": ("retry_max_retries", 3),
    "sglang_router_retry_initial_backoff_ms": ("retry_initial_backoff_ms", 100),
    "sglang_router_retry_max_backoff_ms": ("retry_max_backoff_ms", 20000),
    "sglang_router_retry_backoff_multiplier": ("retry_backoff_multiplier", 2.5),
    "sglang_router_retry_jitter_factor": ("retry_jitter_factor", 0.1),
    "sglang_router_cb_failure_threshold": ("cb_failure_threshold", 20),
    "sglang_router_cb_success_threshold": ("cb_success_threshold", 6),
    "sglang_router_cb_timeout_duration_secs": ("cb_timeout_duration_secs", 90),
    "sglang_router_cb_window_duration_secs": ("cb_window_duration_secs", 300),
    "sglang_router_request_timeout_secs": ("request_timeout_secs", 3600),
    "sglang_router_shutdown_grace_period_secs": ("shutdown_grace_period_secs", 240),
    "sglang_router_worker_startup_timeout_secs": ("worker_startup_timeout_secs", 900),
    "sglang_router_log_level": ("log_level", "debug"),
}
CHANGED = {var: value for var, (_field, value) in SETTINGS.items()} | {"sglang_router_timeout_stop_sec": 250}
WORKERS = ["http://10.0.0.11:30000", "http://10.0.0.12:30000"]

PLAYBOOK = server_facts.RECORD_PLAY.format(hosts="gpu_hosts") + """
- hosts: sglang_routers
  gather_facts: false
  tasks:
    - ansible.builtin.include_role: {name: sglang_router, tasks_from: validate, public: true}
    - ansible.builtin.include_role: {name: sglang_router, tasks_from: endpoints, public: true}
    - ansible.builtin.template:
        src: "{{ unit_template }}"
        dest: "{{ out }}"
        mode: "0644"
      delegate_to: localhost
    - ansible.builtin.template:
        src: "{{ env_template }}"
        dest: "{{ out }}.env"
        mode: "0600"
      delegate_to: localhost
"""


def local(**hostvars):
    return {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}", **hostvars}


def render_unit(tmp_path, router_vars):
    inventory = {"all": {"vars": {"sglang_common_api_key": KEY, "sglang_router_control_plane_api_key": CONTROL_KEY,
                                  "sglang_server_host": "0.0.0.0"}, "children": {
        "gpu_hosts": {"hosts": {"gpu1": local(ansible_host="10.0.0.11"), "gpu2": local(ansible_host="10.0.0.12")}},
        "sglang_routers": {"hosts": {"router1": local(**router_vars)}}}}}
    (tmp_path / "hosts.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    out = tmp_path / "sglang-router.service"
    env = server_facts.env()
    proc = subprocess.run(
        ["ansible-playbook", "-i", str(tmp_path / "hosts.json"), str(tmp_path / "play.yml"), "-e", f"out={out}",
         "-e", f"facts_root={tmp_path / 'hosts'}",
         "-e", f"unit_template={ROOT / 'roles/sglang_router/templates/sglang-router.service.j2'}",
         "-e", f"env_template={ROOT / 'roles/sglang_router/templates/sglang-router.env.j2'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return out.read_text()


def exec_start(unit):
    """ExecStart's words as systemd reads them: continued lines joined, quotes, %% and $$ undone."""
    lines = unit.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ExecStart="))
    words = []
    for line in lines[start:]:
        words.append(line.removesuffix("\\"))
        if not line.endswith("\\"):
            break
    argv = shlex.split(" ".join(words).removeprefix("ExecStart="))
    return [w.replace("%%", "%").replace("$$", "$") for w in argv]


def router_argv(unit):
    argv = exec_start(unit)
    return argv[argv.index("--") + 1:]


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    return {"defaults": render_unit(tmp_path_factory.mktemp("defaults"), {}),
            "changed": render_unit(tmp_path_factory.mktemp("changed"), CHANGED)}


def parsed(dist_version, argv):
    proc = router_cli.parse(*dist_version, argv)
    assert proc.returncode == 0, f"{dist_version} refused the argv {argv}:\n{proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def pinned(units):
    return {name: parsed(PINNED, router_argv(unit)) for name, unit in units.items()}


@pytest.mark.parametrize("which", ["defaults", "changed"])
def test_every_rendered_flag_is_one_of_the_pinned_releases_own(pinned, units, which):
    """No flag is a prefix argparse would expand, a misspelling, or another release's."""
    assert pinned[which]["unknown_flags"] == []
    rendered = {w for w in router_argv(units[which]) if w.startswith("--")}
    assert len(rendered) == len(SETTINGS) + 1  # + --worker-urls: every setting above renders one flag


@pytest.mark.parametrize("variable", sorted(SETTINGS))
def test_each_setting_reaches_its_field_in_the_pinned_release(pinned, variable):
    field, changed = SETTINGS[variable]
    assert pinned["defaults"]["args"][field] == DEFAULTS[variable]
    assert pinned["changed"]["args"][field] == changed


def test_the_workers_reach_the_pinned_release(pinned):
    assert pinned["defaults"]["args"]["worker_urls"] == WORKERS


def test_the_defaults_fit_long_requests(pinned, units):
    """The values the router really runs with by default, against the issue's numbers."""
    args = pinned["defaults"]["args"]
    assert args["health_check_endpoint"] == "/health" and args["health_check_timeout_secs"] > 20
    assert args["cb_failure_threshold"] >= 2
    stop = int(re.search(r"^TimeoutStopSec=(\d+)$", units["defaults"], re.M).group(1))
    assert stop >= args["shutdown_grace_period_secs"] + 5


def test_the_unit_stops_after_the_grace_it_renders(pinned, units):
    stop = int(re.search(r"^TimeoutStopSec=(\d+)$", units["changed"], re.M).group(1))
    assert (stop, pinned["changed"]["args"]["shutdown_grace_period_secs"]) == (250, 240)


@pytest.mark.parametrize("misspelt", ["--health-check-timeout", "--health-check-timout-secs", "--cb-failure-treshold"])
def test_a_misspelt_flag_is_caught(units, misspelt):
    """An abbreviation argparse would accept is reported; a wrong name is refused."""
    argv = router_argv(units["defaults"])
    flag = {"--health-check-timeout": "--health-check-timeout-secs", "--health-check-timout-secs":
            "--health-check-timeout-secs", "--cb-failure-treshold": "--cb-failure-threshold"}[misspelt]
    argv[argv.index(flag)] = misspelt
    proc = router_cli.parse(*PINNED, argv)
    assert proc.returncode != 0 or misspelt in json.loads(proc.stdout)["unknown_flags"]


@pytest.mark.parametrize("which", ["defaults", "changed"])
def test_sglang_router_takes_the_same_argv_with_the_same_values(pinned, units, which):
    """sglang-router 0.3.2, still selectable, runs the same unit argv: none of the role's flags is smg's alone."""
    got = parsed(LEGACY, router_argv(units[which]))
    assert got["unknown_flags"] == []
    fields = [field for field, _value in SETTINGS.values()] + ["worker_urls"]
    assert {f: got["args"][f] for f in fields} == {f: pinned[which]["args"][f] for f in fields}


def test_the_unit_runs_the_pinned_gateway_and_its_keys_stay_in_the_environment_file(units, tmp_path):
    unit = units["defaults"]
    assert "/opt/sglang-router/smg-1.13.0/venv/bin/python /opt/sglang-router/bin/sglang_launch.py --module " \
           "smg.launch_router -- \\\n" in unit
    assert KEY not in unit and CONTROL_KEY not in unit and "control-plane" not in unit
    env = render_unit(tmp_path, {}) and (tmp_path / "sglang-router.service.env").read_text()
    assert f'SGLANG_LAUNCH_API_KEY="{KEY}"' in env and f'SGLANG_LAUNCH_CONTROL_PLANE_API_KEY="{CONTROL_KEY}"' in env


def test_with_sglang_router_selected_the_unit_runs_it_and_its_parser_takes_the_argv(tmp_path):
    unit = render_unit(tmp_path, {"sglang_router_distribution": "sglang-router", "sglang_router_version": "0.3.2"})
    assert "/opt/sglang-router/sglang-router-0.3.2/venv/bin/python /opt/sglang-router/bin/sglang_launch.py " \
           "--module sglang_router.launch_router -- \\\n" in unit
    assert parsed(LEGACY, router_argv(unit))["unknown_flags"] == []


# Run by the launcher as the router module would be: the pinned release's parser on what the launcher hands it.
PROBE = r"""
import argparse, dataclasses, hashlib, json, sys
from smg.router_args import RouterArgs
parser = argparse.ArgumentParser(prog="smg")
RouterArgs.add_cli_args(parser, use_router_prefix=False)
args = RouterArgs.from_cli_args(parser.parse_args(sys.argv[1:]), use_router_prefix=False)
# The keys as hashes: the launcher masks the keys themselves in what it passes on.
print(json.dumps({"control_plane": [[i, n, hashlib.sha256(k.encode()).hexdigest(), r]
                                    for i, n, k, r in args.control_plane_api_keys],
                  "api_key": hashlib.sha256((args.api_key or "").encode()).hexdigest()}))
"""


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_launcher_gives_the_pinned_release_its_control_plane_key_as_its_one_admin_key(units, tmp_path):
    """The environment file's keys reach the pinned release's own parser through the launcher, as the gateway
    is started: the clients' key as --api-key, the control-plane key as the only --control-plane-api-keys
    entry, with the admin role (smg refuses a control-plane call of any other role: 403)."""
    (tmp_path / "probe_router.py").write_text(PROBE)
    env = dict(os.environ, PYTHONPATH=f"{router_cli.unpacked(*PINNED)}:{tmp_path}", PYTHONDONTWRITEBYTECODE="1",
               SGLANG_LAUNCH_API_KEY=KEY, SGLANG_LAUNCH_CONTROL_PLANE_API_KEY=CONTROL_KEY)
    proc = subprocess.run([sys.executable, str(LAUNCHER), "--module", "probe_router", "--",
                           *router_argv(units["defaults"])], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got == {"control_plane": [["ansible", "sglang-ansible", sha(CONTROL_KEY), "admin"]], "api_key": sha(KEY)}


def test_the_launcher_refuses_a_control_plane_key_in_argv(units):
    argv = router_argv(units["defaults"]) + ["--control-plane-api-keys", f"x:x:admin:{CONTROL_KEY}"]
    proc = subprocess.run([sys.executable, str(LAUNCHER), "--module", "smg.launch_router", "--", *argv],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "SGLANG_LAUNCH_CONTROL_PLANE_API_KEY" in proc.stderr


def wait_for(url, proc, log, key=None):
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            return urllib.request.urlopen(request(url, key), timeout=2).status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            time.sleep(0.5)
    raise AssertionError(log.read_text(errors="replace")[-3000:])


def request(url, key=None, body=None, method=None):
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    return urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                  headers=headers, method=method)


def status(url, key=None, body=None, method=None):
    try:
        with urllib.request.urlopen(request(url, key, body, method), timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_pinned_gateway_starts_with_the_rendered_argv_keeps_its_control_plane_and_shuts_down_gracefully(tmp_path):
    """The real gateway (its Rust core checks its own configuration on start), started as the unit starts it
    (the launcher, the environment file's keys), takes the argv the unit renders and answers /liveness; its
    worker API answers only the control-plane key (no key, or the clients' key: 401); on SIGTERM it starts the
    graceful shutdown the stop timeout waits for, and nothing it logged holds either key. The workers are closed
    local ports: the gateway's start does not wait for them."""
    port, metrics = free_port(), free_port()
    argv = router_argv(render_unit(tmp_path, {"sglang_router_host": "127.0.0.1", "sglang_router_port": port,
                                              "sglang_router_prometheus_port": metrics}))
    argv = argv[:argv.index("--worker-urls") + 1] + [f"http://127.0.0.1:{free_port()}"]
    log = tmp_path / "router.log"
    python = router_cli.venv(*PINNED) / "bin" / "python"
    env = dict(os.environ, SGLANG_LAUNCH_API_KEY=KEY, SGLANG_LAUNCH_CONTROL_PLANE_API_KEY=CONTROL_KEY)
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(python), str(LAUNCHER), "--module", "smg.launch_router", "--", *argv],
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(base + "/liveness", proc, log) == 200
        assert [status(base + "/workers", key)[0] for key in (None, KEY, CONTROL_KEY)] == [401, 401, 200]
        assert status(base + "/generate", KEY, {"text": "x"})[0] != 401  # the clients' key is the data plane's
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text(errors="replace")
    assert "graceful shutdown" in text and "Control plane API key authentication enabled (1 keys)" in text
    assert KEY not in text and CONTROL_KEY not in text
