"""Bad inputs fail in the role's validation, before any change, naming the variable; the token is never printed.

Runs the real playbooks/model.yml (check mode, tag sglang_model_validate) with Ansible on local hosts of
a throwaway inventory against the Hub TEST DOUBLE; the validation reads the hosts (the staging tool's
preflight) and the double (model info, HEAD of a file), as it would a real Hub. The single-host cases
run as one playbook run, one inventory host per case (each host's own failure read from the output,
tests/harness/bad_inputs.py), as a site with one bad host among many would.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from model_kit import ALLOW, IGNORE, OTHER_TOKEN, TOKEN

import bad_inputs
from repo import ROOT

ANSIBLE = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin" / "ansible-playbook"
INVALID_TOKEN = "hf_test_only_invalid_77e0"


def model(name="target", repo="test-org/tiny", revision="main", **kw):
    return {"name": name, "repo_id": repo, "revision": revision, "allow_patterns": ALLOW, "ignore_patterns": IGNORE,
            **kw}


def validate(tmp_path, double, models=None, hosts=("gpu1",), host_vars=None, extra=None, **settings):
    """Run the role's validation; returns (rc, output). host_vars: {host: {variable: value}}; extra: extra vars
    (they outrank the facts the play gathers here)."""
    common = {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3",
              "ansible_become": False, "sglang_common_models_root": str(tmp_path / "models"),
              "sglang_model_hub_endpoint": double.url, "sglang_model_min_free_gb": 0,
              "sglang_model_server_writable_paths": [str(tmp_path / "server-home")],
              "sglang_model_models": models if models is not None else [model()]}
    common.update(settings)
    inventory = {"all": {"vars": common, "children": {"gpu_hosts": {"hosts": {
        h: (host_vars or {}).get(h, {}) for h in hosts}}}}}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run([str(ANSIBLE), "-i", str(inv), str(ROOT / "playbooks" / "model.yml"), "--check",
                           "--tags", "sglang_model_validate", "-v", *(["-e", json.dumps(extra)] if extra else [])],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    for secret in (TOKEN, OTHER_TOKEN, INVALID_TOKEN):
        assert secret not in out, f"a token was printed:\n{out[-3000:]}"
    return proc.returncode, out


def test_good_inputs_pass_and_report_the_resolved_revision(tmp_path, double, hub_root):
    import synthetic_model
    sha = synthetic_model.load_revision(hub_root, "test-org/tiny").sha
    rc, out = validate(tmp_path, double, sglang_model_hf_token=TOKEN)
    assert rc == 0, out[-3000:]
    assert f"revision main -> {sha} (resolved now: pin it in sglang_model_models)" in out
    assert "changed=0" in out and not (tmp_path / "models").exists()


# Cases the Hub decides: one run each (the hosts of a play must agree on the models, the Hub and the token).
HUB_CASES = [
    ("unknown repository", [model(repo="test-org/missing")], {},
     "sglang_model_models[0] (target).repo_id 'test-org/missing' was not found on"),
    ("unknown revision", [model(revision="v9.9")], {},
     "sglang_model_models[0] (target).revision 'v9.9' does not exist in test-org/tiny"),
    ("gated, no token", [model(repo="test-org/gated")], {},
     "test-org/gated is gated and sglang_model_hf_token is empty (401 GatedRepo)"),
    ("gated, token without access", [model(repo="test-org/gated")], {"sglang_model_hf_token": OTHER_TOKEN},
     "the account of sglang_model_hf_token has no access to it (403 GatedRepo)"),
    ("invalid token", [model()], {"sglang_model_hf_token": INVALID_TOKEN},
     "sglang_model_hf_token was rejected by"),
    ("patterns matching nothing", [model(allow_patterns=["*.gguf"])], {},
     "allow_patterns [\"*.gguf\"] and ignore_patterns"),
]
# Cases of one host's own values: one run, one inventory host per case (tests/harness/bad_inputs.py).
HOST_CASES = [
    ("too little space", None, {"sglang_model_min_free_gb": 10 ** 9},
     "plus sglang_model_min_free_gb (1000000000 GB)"),
    ("root inside the server's writable paths", None, {"sglang_model_server_writable_paths": ["/tmp"]},
     "which the SGLang server may write (sglang_model_server_writable_paths)"),
    # playbooks/model.yml validates the server too: on a host where the server has not run, its own check.
    ("root inside the server's home", None,
     {"sglang_server_home": "/tmp/sglang-home", "sglang_common_models_root": "/tmp/sglang-home/models"},
     "/tmp/sglang-home/models is inside /tmp/sglang-home or /var/cache/sglang, which the server may write"),
    ("duplicate names", [model(), model()], {}, "sglang_model_models: the name 'target' is used twice"),
    ("missing revision", [{"name": "target", "repo_id": "test-org/tiny"}], {},
     "missing required arguments: revision"),
    ("unknown source", [model(source="s3")], {}, "value of source must be one of: hub, local"),
    ("an entry that is not a dict", ["target"], {}, "'sglang_model_models' is of type str and we were unable to convert to dict"),
    ("local source without a directory", [model(source="local", local_dir="relative")], {},
     "local_dir must be an absolute path when source is local"),
]


@pytest.mark.parametrize(("case", "models", "settings", "expected"), HUB_CASES, ids=[c[0] for c in HUB_CASES])
def test_bad_input_fails_naming_the_variable(tmp_path, double, case, models, settings, expected):
    rc, out = validate(tmp_path, double, models=models, **settings)
    assert rc != 0, f"{case}: passed\n{out[-2000:]}"
    assert expected in out, f"{case}:\n{out[-3000:]}"
    assert not (tmp_path / "models").exists()


@pytest.fixture(scope="module")
def batch(tmp_path_factory, module_double):
    """Every host case as its own inventory host of one run: (rc, output, {host: its failure}, {host: changed})."""
    tmp = tmp_path_factory.mktemp("cases")
    host_vars = {bad_inputs.alias(case): dict(settings, **({"sglang_model_models": models} if models else {}))
                 for case, models, settings, _ in HOST_CASES}
    rc, out = validate(tmp, module_double, hosts=tuple(host_vars), host_vars=host_vars)
    recap = {m["host"]: int(m.group(3)) for m in bad_inputs.RECAP.finditer(out)}
    return rc, out, bad_inputs.failures_by_host(out), recap, tmp


@pytest.mark.parametrize(("case", "expected"), [(c[0], c[3]) for c in HOST_CASES], ids=[c[0] for c in HOST_CASES])
def test_a_hosts_bad_value_fails_that_host_naming_the_variable(batch, case, expected):
    rc, out, failures, recap, tmp = batch
    host = bad_inputs.alias(case)
    assert rc != 0, out[-2000:]
    assert expected in failures.get(host, ""), f"{case}:\n{failures.get(host) or out[-3000:]}"
    assert recap[host] == 0, f"{case}: changed {recap[host]}"
    assert not (tmp / "models").exists()


def test_the_paths_the_server_recorded_on_the_host_are_kept_clear(tmp_path, double):
    """Once the server has run on a host, its local fact names what it may write (role sglang_server records
    it): this role reads the paths from there, not from the server's variables."""
    home = tmp_path / "elsewhere"  # not the server's sglang_server_home: only the fact names it
    rc, out = validate(tmp_path, double, sglang_common_models_root=str(home / "models"),
                       extra={"ansible_local": {"sglang_server": {"schema": 1, "writable_paths": [str(home)]}}})
    assert rc != 0, out[-2000:]
    assert f"sglang_common_models_root {home}/models is inside {home}, which the SGLang server may write" in out, out[-3000:]
    assert not home.exists()


def test_too_little_space_names_both_numbers(batch):
    failure = batch[2].get(bad_inputs.alias("too little space"), "")
    assert " free (" in failure and "bytes); staging needs " in failure and "bytes: target)" in failure, failure


@pytest.mark.parametrize("differs", ["models", "hub", "token"])
def test_hosts_that_disagree_on_the_models_the_hub_or_the_token_fail(tmp_path, double, differs):
    """The Hub is asked once per play and hosts copy from each other: a host's own list, Hub or token is refused."""
    own = {"models": {"sglang_model_models": [model(revision="v9.9")]},
           "hub": {"sglang_model_hub_endpoint": double.url + "/"},
           "token": {"sglang_model_hf_token": OTHER_TOKEN}}[differs]
    rc, out = validate(tmp_path, double, hosts=("gpu1", "gpu2", "gpu3"), host_vars={"gpu3": own},
                       sglang_model_hf_token=TOKEN)
    assert rc != 0, out[-2000:]
    failures = bad_inputs.failures_by_host(out)
    assert sorted(failures) == ["gpu1", "gpu2", "gpu3"], out[-3000:]  # the whole play stops, before the Hub
    for failure in failures.values():
        assert "must be the same on every host of this play" in failure, failure
        assert "they copy from each other. gpu3 differ from gpu1: set them" in failure, failure
    assert "Ask the Hub for each revision" not in out
    assert not (tmp_path / "models").exists()


def test_an_unreachable_hub_names_the_endpoint_and_the_network_settings(tmp_path, double):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out = validate(tmp_path, double, sglang_model_hub_endpoint=f"http://127.0.0.1:{port}")
    assert rc != 0
    assert f"sglang_model_hub_endpoint http://127.0.0.1:{port} is unreachable from gpu1" in out
    assert "sglang_model_proxy_env and sglang_model_ca_bundle" in out


def test_a_local_source_that_is_missing_or_lacks_files(tmp_path, double, hub_root):
    import shutil

    import synthetic_model
    rev = synthetic_model.load_revision(hub_root, "test-org/tiny")
    rc, out = validate(tmp_path, double, models=[model(source="local", local_dir=str(tmp_path / "nfs" / "tiny"))])
    assert rc != 0 and f"local_dir {tmp_path / 'nfs' / 'tiny'} does not exist on this host" in out, out[-2000:]
    shutil.copytree(rev.directory, tmp_path / "nfs" / "tiny")
    (tmp_path / "nfs" / "tiny" / "model-00002-of-00004.safetensors").unlink()
    rc, out = validate(tmp_path, double, models=[model(source="local", local_dir=str(tmp_path / "nfs" / "tiny"))])
    assert rc != 0 and "lacks files of test-org/tiny@" in out and "model-00002-of-00004.safetensors" in out
    shutil.copy(rev.directory / "model-00002-of-00004.safetensors", tmp_path / "nfs" / "tiny")
    rc, out = validate(tmp_path, double, models=[model(source="local", local_dir=str(tmp_path / "nfs" / "tiny"))])
    assert rc == 0, out[-2000:]
    assert "to verify in place" in out


def test_a_fanout_source_without_a_verified_copy(tmp_path, double):
    hosts = {"gpu1": {"sglang_common_models_root": str(tmp_path / "gpu1")},
             "gpu2": {"sglang_common_models_root": str(tmp_path / "gpu2")}}
    rc, out = validate(tmp_path, double, hosts=("gpu1", "gpu2"), host_vars=hosts, sglang_model_fanout_sources=["gpu2"])
    assert rc != 0
    assert "sglang_model_fanout_sources names gpu2, which hold no verified copy of target" in out, out[-2000:]
    rc, out = validate(tmp_path, double, hosts=("gpu1", "gpu2"), host_vars=hosts, sglang_model_fanout_sources=["gpu9"])
    assert rc != 0 and "must name hosts of this play" in out
    rc, out = validate(tmp_path, double, hosts=("gpu1", "gpu2"), host_vars=hosts)
    assert rc == 0, out[-2000:]
    assert "to stage: gpu1, gpu2 (gpu1 from the Hub), then 1 copy round(s) between hosts" in out
