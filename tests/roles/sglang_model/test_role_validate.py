"""Bad inputs fail in the role's validation, before any change, naming the variable; the token is never printed.

Runs the real playbooks/model.yml (check mode, tag sglang_model_validate) with Ansible on local hosts of
a throwaway inventory against the Hub TEST DOUBLE; the validation reads the hosts (the staging tool's
preflight) and the double (model info, HEAD of a file), as it would a real Hub.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from model_kit import ALLOW, IGNORE, OTHER_TOKEN, TOKEN
from repo import ROOT

ANSIBLE = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin" / "ansible-playbook"
INVALID_TOKEN = "hf_test_only_invalid_77e0"


def model(name="target", repo="test-org/tiny", revision="main", **kw):
    return {"name": name, "repo_id": repo, "revision": revision, "allow_patterns": ALLOW, "ignore_patterns": IGNORE,
            **kw}


def validate(tmp_path, double, models=None, hosts=("gpu1",), host_vars=None, **settings):
    """Run the role's validation; returns (rc, output)."""
    common = {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3",
              "ansible_become": False, "sglang_model_root": str(tmp_path / "models"),
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
                           "--tags", "sglang_model_validate", "-v"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    for secret in (TOKEN, OTHER_TOKEN, INVALID_TOKEN):
        assert secret not in out, f"a token was printed:\n{out[-3000:]}"
    return proc.returncode, out


def test_good_inputs_pass_and_report_the_resolved_revision(tmp_path, double, hub_root):
    import synthetic_model  # noqa: PLC0415
    sha = synthetic_model.load_revision(hub_root, "test-org/tiny").sha
    rc, out = validate(tmp_path, double, sglang_model_hf_token=TOKEN)
    assert rc == 0, out[-3000:]
    assert f"revision main -> {sha} (resolved now: pin it in sglang_model_models)" in out
    assert "changed=0" in out and not (tmp_path / "models").exists()


@pytest.mark.parametrize(("case", "models", "settings", "expected"), [
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
    ("too little space", [model()], {"sglang_model_min_free_gb": 10 ** 9},
     "plus sglang_model_min_free_gb (1000000000 GB)"),
    ("root inside the server's writable paths", [model()], {"sglang_model_server_writable_paths": ["/tmp"]},
     "which the SGLang server may write (sglang_model_server_writable_paths)"),
    ("duplicate names", [model(), model()], {}, "sglang_model_models: the name 'target' is used twice"),
    ("missing revision", [{"name": "target", "repo_id": "test-org/tiny"}], {},
     "missing required arguments: revision"),
    ("unknown source", [model(source="s3")], {}, "value of source must be one of: hub, local"),
    ("local source without a directory", [model(source="local", local_dir="relative")], {},
     "local_dir must be an absolute path when source is local"),
])
def test_bad_input_fails_naming_the_variable(tmp_path, double, case, models, settings, expected):
    rc, out = validate(tmp_path, double, models=models, **settings)
    assert rc != 0, f"{case}: passed\n{out[-2000:]}"
    assert expected in out, f"{case}:\n{out[-3000:]}"
    assert not (tmp_path / "models").exists()


def test_too_little_space_names_both_numbers(tmp_path, double):
    rc, out = validate(tmp_path, double, sglang_model_min_free_gb=10 ** 9)
    assert rc != 0
    assert " free (" in out and "bytes); staging needs " in out and "bytes: target)" in out, out[-2000:]


def test_an_unreachable_hub_names_the_endpoint_and_the_network_settings(tmp_path, double):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out = validate(tmp_path, double, sglang_model_hub_endpoint=f"http://127.0.0.1:{port}")
    assert rc != 0
    assert f"sglang_model_hub_endpoint http://127.0.0.1:{port} is unreachable from gpu1" in out
    assert "sglang_model_proxy_env and sglang_model_ca_bundle" in out


def test_a_local_source_that_is_missing_or_lacks_files(tmp_path, double, hub_root):
    import shutil  # noqa: PLC0415

    import synthetic_model  # noqa: PLC0415
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
    hosts = {"gpu1": {"sglang_model_root": str(tmp_path / "gpu1")}, "gpu2": {"sglang_model_root": str(tmp_path / "gpu2")}}
    rc, out = validate(tmp_path, double, hosts=("gpu1", "gpu2"), host_vars=hosts, sglang_model_fanout_sources=["gpu2"])
    assert rc != 0
    assert "sglang_model_fanout_sources names gpu2, which hold no verified copy of target" in out, out[-2000:]
    rc, out = validate(tmp_path, double, hosts=("gpu1", "gpu2"), host_vars=hosts, sglang_model_fanout_sources=["gpu9"])
    assert rc != 0 and "must name hosts of this play" in out
    rc, out = validate(tmp_path, double, hosts=("gpu1", "gpu2"), host_vars=hosts)
    assert rc == 0, out[-2000:]
    assert "to stage: gpu1, gpu2 (gpu1 from the Hub), then 1 copy round(s) between hosts" in out
