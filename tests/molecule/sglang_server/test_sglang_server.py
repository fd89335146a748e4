"""Verifier of molecule/sglang_server: the service as users get it, checked from outside."""

import hashlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

from roles_alone import closure

NAME = "molecule-sglang-server"
testinfra_hosts = [f"podman://{NAME}"]
ROOT = Path(__file__).resolve().parents[3]
KEY = "test-only-key-7f3a9c"
HF = "hf_testonly_0d1e2f"
URL = "http://127.0.0.1:30000"


def curl(host, path, key=None, base=URL):
    auth = f"-H 'Authorization: Bearer {key}'" if key else ""
    return host.run(f"curl -s -o /dev/null -w '%{{http_code}}' {auth} {base}{path}").stdout


def wait_ready(host, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if curl(host, "/health_generate") == "200":
            return time.monotonic()
        time.sleep(0.5)
    raise AssertionError("server not ready in time:\n" + host.run("journalctl -u sglang-server -n 30 --no-pager").stdout)


def test_service_enabled_running_and_ready(host):
    svc = host.service("sglang-server")
    assert svc.is_enabled and svc.is_running
    assert curl(host, "/health_generate") == "200"


def test_unit_runs_the_release_through_the_launcher_as_the_service_user(host):
    unit = host.file("/etc/systemd/system/sglang-server.service").content_string
    assert "ExecStart=/opt/sglang/current/venv/bin/python /opt/sglang/bin/sglang_launch.py --module sglang_sim --" in unit
    for arg in ['"--tp-size" \\', '"8"', '"--speculative-algorithm" \\', '"EAGLE3"', '"--speculative-num-draft-tokens"']:
        assert arg in unit
    props = host.check_output("systemctl show sglang-server -p User -p Restart -p NoNewPrivileges -p ProtectSystem "
                              "-p ProtectHome -p PrivateTmp -p DevicePolicy -p LimitNOFILE -p TimeoutStartUSec")
    for expected in ["User=sglang", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict",
                     "ProtectHome=yes", "PrivateTmp=yes", "DevicePolicy=closed", "LimitNOFILE=1048576",
                     "TimeoutStartUSec=15min"]:
        assert expected in props
    assert "video" in host.user("sglang").groups


def test_secrets_only_in_the_0600_environment_file(host):
    env = host.file("/etc/sglang/sglang-server.env")
    assert env.user == "root" and env.mode == 0o600
    assert KEY in env.content_string and HF in env.content_string
    assert KEY not in host.file("/etc/systemd/system/sglang-server.service").content_string
    assert KEY not in host.check_output("ps -eo args")
    journal = host.check_output("journalctl -u sglang-server --no-pager -o cat")
    assert KEY not in journal and HF not in journal
    # The server does log its arguments with the key (as SGLang does); the launcher masks it.
    assert "api_key='***'" in journal


def test_api_key_enforced(host):
    assert curl(host, "/v1/models") == "401"
    assert curl(host, "/v1/models", key="wrong") == "401"
    assert curl(host, "/v1/models", key=KEY) == "200"


def test_caches_persist_under_var_cache(host):
    env = host.file("/etc/sglang/sglang-server.env").content_string
    assert 'FLASHINFER_WORKSPACE_BASE="/var/cache/sglang/flashinfer"' in env
    assert 'TRITON_CACHE_DIR="/var/cache/sglang/triton"' in env
    assert 'TVM_FFI_CACHE_DIR="/var/cache/sglang/tvm-ffi"' in env
    for sub in ["flashinfer", "triton", "torch", "tvm-ffi", "sglang/jit", "nv"]:
        d = host.file(f"/var/cache/sglang/{sub}")
        assert d.is_directory and d.user == "sglang"


def test_systemd_analyze_security_exposure(host):
    out = host.check_output("systemd-analyze security sglang-server --no-pager 2>&1 | tail -1")
    score = float(re.search(r"exposure level for sglang-server\.service: ([0-9.]+)", out).group(1))
    print(f"systemd-analyze security exposure: {score}")
    assert score <= 4.5, out


def test_kill_9_restarts_and_serves_again(host):
    pid = host.check_output("systemctl show -p MainPID --value sglang-server")
    host.run_expect([0], f"kill -9 {pid}")
    killed = time.monotonic()
    time.sleep(1)
    ready = wait_ready(host, timeout=90)
    new_pid = host.check_output("systemctl show -p MainPID --value sglang-server")
    assert new_pid != pid
    print(f"restart after kill -9: ready again in {ready - killed:.1f} s")


def test_each_start_is_recorded_once_with_its_phases(host):
    """The converge recorded the start it waited for (its ready time the wait's when the wait saw it come, else the
    access log's first 200: on a busy machine the simulator's 4 s load can end before the wait begins), the
    idempotence converge none;
    the start systemd made after kill -9 (no play waited for it) is recorded by the next run's task, here its tool
    as that task runs it, from the log alone; a second run records nothing."""
    starts = "/var/lib/sglang/starts"
    record = f"/usr/bin/python3 /opt/sglang/bin/sglang_start_phases.py --record {starts} --unit sglang-server --keep 20"
    names = sorted(host.file(starts).listdir())
    converged = [json.loads(host.file(f"{starts}/{n}").content_string) for n in names if n != "last.json"]
    assert len(converged) == 1 and "last.json" in names, names
    first = converged[0]
    assert first["ready_from"] in ("--ready", "first 200 on /health_generate in the access log"), first["ready_from"]
    assert first["found"] and not first["errors"], first["summary"]
    assert [w["model"] for w in first["weights"]] == ["target", "draft"] and first["weights"][0]["elapsed_s"] >= 1
    # in order, to the second: the simulator's log stamps whole seconds (SGLang's too, unless SGLANG_LOG_MS), the
    # launch is systemd's to the microsecond, so a line of the launch's own second reads up to 1 s before it
    marks = first["marks"]
    assert None not in (marks["weights_begin"], marks["fired_up"]), marks
    assert -1 < marks["weights_begin"] <= marks["fired_up"] <= first["ready_s"] + 1, marks
    assert (host.file(f"{starts}/last.json").mode, host.file(f"{starts}/last.json").user) == (0o640, "root")
    assert KEY not in host.file(f"{starts}/last.json").content_string
    answer = json.loads(host.check_output(record))
    assert answer["recorded"] and answer["ready_from"] != "--ready" and answer["ready_s"] > 0, answer
    again = json.loads(host.check_output(record))
    assert (again["recorded"], again["why"], again["file"]) == (False, "this start is recorded", answer["file"])
    newest = json.loads(host.file(f"{starts}/last.json").content_string)
    assert newest["invocation_id"] != first["invocation_id"] and newest["main_pid"] != first["main_pid"]
    print(f"start records: converge {first['summary']}; after kill -9 {answer['summary']}")


def switch_current(host, release):
    host.run_expect([0], f"ln -sfnT /opt/sglang/releases/{release} /opt/sglang/current.new && "
                         "mv -T /opt/sglang/current.new /opt/sglang/current")


def roles_path() -> str:
    path = os.environ.get("ANSIBLE_ROLES_PATH", "")
    assert Path(path).name == "sglang_server", f"not the roles path molecule.yml sets: {path!r}"
    return path


def test_the_scenario_runs_with_only_the_roles_sglang_server_declares():
    """Converge and idempotence passed, and the verifier's converges below run, with a roles path
    that holds sglang_server and the roles it declares (transitively), and no other role."""
    held = sorted(p.name for p in Path(roles_path()).iterdir())
    assert held == sorted(closure("sglang_server")), held
    assert {"sglang_bench", "sglang_router", "sglang_monitoring", "gpu_preflight"}.isdisjoint(held), held


def converge(*extra):
    # The roles path molecule.yml gives the scenario: the role alone with what it declares.
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=roles_path(),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
                           str(ROOT / "molecule" / "sglang_server" / "converge.yml"), *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return proc, time.monotonic() - started


def test_the_local_facts_record_what_serves_and_the_launch_check_it_passed(host):
    """What other roles read of this one: ansible_local.sglang_server (what serves, the one previous) and the
    launch check role sglang_eagle3_patch ran before the start (0600: the settings carry the server's
    environment), which sglang_bench's tuner asks again before its restarts."""
    fact_file = host.file("/etc/ansible/facts.d/sglang_server.fact")
    assert (fact_file.user, fact_file.group, fact_file.mode) == ("root", "root", 0o644)
    served = json.loads(fact_file.content_string)
    assert served["serving"] == host.file("/var/lib/sglang/serving-release").content_string.strip()
    assert served["serving_id"] == "r1-patched"
    # Where it serves (roles sglang_router, sglang_bench and sglang_monitoring read it): the key's hash, never the key.
    endpoint = served["endpoint"]
    assert endpoint["local_url"] == "http://127.0.0.1:30000" and endpoint["port"] == 30000
    assert (endpoint["serves_http"], endpoint["node_rank"], endpoint["nnodes"]) == (True, 0, 1)
    assert endpoint["api_key_sha256"] == hashlib.sha256(KEY.encode()).hexdigest()
    assert KEY not in fact_file.content_string
    assert curl(host, "/v1/models", key=KEY, base=endpoint["local_url"]) == "200"
    fact = host.file("/etc/ansible/facts.d/sglang_eagle3_patch.fact")
    assert (fact.user, fact.group, fact.mode) == ("root", "root", 0o600)
    launch = json.loads(fact.content_string)["launch"]
    assert launch["sglang_dir"].startswith("/opt/sglang/releases/r1-patched/")
    assert (launch["sglang_version"], launch["arch"]) == ("0.5.9", "12.0")
    assert launch["args"]["speculative_algorithm"] == "EAGLE3"
    assert host.file(launch["check"]).exists and host.file(launch["facts"]).exists
    assert "test-only-key" not in fact.content_string and "hf_testonly" not in fact.content_string


def test_checks_refuse_an_unpatched_release_in_seconds_without_a_restart(host):
    pid = host.check_output("systemctl show -p MainPID --value sglang-server")
    switch_current(host, "r2-unpatched")
    proc, elapsed = converge()
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert "is not ready for EAGLE3" in out and "set_eagle3_layers_to_capture is missing" in out, out[-4000:]
    assert "Nothing was restarted" in out and "current points at /opt/sglang/releases/r1-patched again" in out
    assert host.check_output("systemctl show -p MainPID --value sglang-server") == pid
    assert host.file("/opt/sglang/current").linked_to == "/opt/sglang/releases/r1-patched"
    assert curl(host, "/health_generate") == "200"
    print(f"unpatched release refused by the pre-start checks: whole play {elapsed:.1f} s")


def test_a_flag_the_release_rejects_is_refused_before_any_restart(host):
    """SGLang 0.5.9's own parser (the release's, imported by its Python) refuses a value outside its
    choices that the role's validation lets through (any string is an attention backend to it)."""
    pid = host.check_output("systemctl show -p MainPID --value sglang-server")
    proc, elapsed = converge("-e", "sglang_server_attention_backend=bogus")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert ("SGLang 0.5.9 refuses the server's settings (--attention-backend): argument --attention-backend: "
            "invalid choice: 'bogus'") in out, out[-4000:]
    assert "Nothing was restarted; the server was left as it was" in out, out[-4000:]
    assert host.check_output("systemctl show -p MainPID --value sglang-server") == pid
    assert host.file("/opt/sglang/current").linked_to == "/opt/sglang/releases/r1-patched"
    assert "--attention-backend" not in host.file("/etc/systemd/system/sglang-server.service").content_string
    assert curl(host, "/health_generate") == "200"
    print(f"flag refused by the release's ServerArgs before any restart: whole play {elapsed:.1f} s")
    # Check mode runs it too, the release being there: the same refusal.
    proc, elapsed = converge("--check", "-e", "sglang_server_attention_backend=bogus")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "invalid choice: 'bogus'" in out, out[-4000:]
    assert host.check_output("systemctl show -p MainPID --value sglang-server") == pid
    print(f"the same refused in check mode: whole play {elapsed:.1f} s")


def test_upgrade_that_fails_readiness_rolls_back(host):
    """A failure the checks cannot see (here: checks off) crashes the server; the role rolls back."""
    switch_current(host, "r2-unpatched")
    proc, elapsed = converge("-e", "sglang_server_preflight_checks=false")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert "AttributeError: 'KimiK25ForConditionalGeneration' object has no attribute" in out, out[-4000:]
    assert "release r2-unpatched did not become ready" in out, out[-4000:]
    assert "Rolled back: current -> /opt/sglang/releases/r1-patched" in out and "serves again" in out, out[-4000:]
    assert host.file("/opt/sglang/current").linked_to == "/opt/sglang/releases/r1-patched"
    # Switched by sglang_build, current's one writer: its local facts name the release current points at.
    facts = json.loads(host.file("/etc/ansible/facts.d/sglang_build.fact").content_string)
    assert facts["current"]["dir"] == "/opt/sglang/releases/r1-patched", facts
    assert curl(host, "/health_generate") == "200"
    assert KEY not in out
    print(f"failed upgrade + rollback, whole play: {elapsed:.1f} s")
