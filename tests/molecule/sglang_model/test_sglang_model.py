"""Verifier of molecule/sglang_model: two GPU test hosts after the role, checked from outside Ansible,
then the role again against a corrupted copy, killed and cut-off downloads and a bad input.

The Hub is the TEST DOUBLE on the first host (tests/harness/hub_double.py, 127.0.0.1:8090), which
counts the bytes it serves per file in /run/hub-double-stats.json.
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import testinfra

from background import Background
from waiting import wait_for

G1, G2 = "sglang-model-gpu1", "sglang-model-gpu2"
testinfra_hosts = [f"podman://{G1}", f"podman://{G2}"]
ROOT = Path(__file__).resolve().parents[3]
TOKEN = "hf_testonly_5d1c0a"
MODELS = ("target", "draft")
TOOL = "/opt/sglang-model/bin/sglang_model_stage.py"
gpu1 = testinfra.get_host(f"podman://{G1}")
gpu2 = testinfra.get_host(f"podman://{G2}")


def jsonof(h, path):
    return json.loads(h.file(path).content_string)


def manifest(h, name):
    current = h.file(f"/srv/models/{name}/current").linked_to
    return jsonof(h, f"{current}.manifest.json")


def stats():
    return jsonof(gpu1, "/run/hub-double-stats.json")


def double(**body):
    gpu1.run_expect([0], f"curl -sf -X POST -d '{json.dumps(body)}' http://127.0.0.1:8090/_double/" +
                    ("reset" if body.pop("reset", False) else "fault"))


def converge(*extra, background=False):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    argv = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
            str(ROOT / "molecule" / "sglang_model" / "converge.yml"), *extra]
    if background:
        return Background(argv, cwd=ROOT, env=env)  # its output read as it comes (tests/harness/background.py)
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def progress(name="target"):
    out = gpu1.run(f"cat /run/sglang-model/{name}.progress.json")
    return json.loads(out.stdout) if out.rc == 0 and out.stdout.strip() else {}


# --------------------------------------------------------------------------- after the converge


@pytest.mark.parametrize("name", MODELS)
def test_each_model_is_staged_read_only_with_its_manifest_and_current(host, name):
    current = host.file(f"/srv/models/{name}/current")
    assert current.is_symlink
    revision = os.path.basename(current.linked_to)
    staged = host.file(f"/srv/models/{name}/{revision}")
    assert staged.is_directory and staged.user == "root" and staged.mode == 0o555
    m = manifest(host, name)
    assert m["revision"] == revision and m["repo_id"].startswith("test-org/kimi-mini")
    # The target is pinned to its commit, the draft follows a branch (resolved once per run).
    assert m["requested_revision"] == (revision if name == "target" else "main")
    assert m["staged_at"] and m["client"] == "huggingface_hub 1.17.0"
    listed = {f["path"] for f in m["files"]}
    assert {"config.json", "model.safetensors.index.json", "tiktoken.model", "modeling_kimi.py"} <= listed
    assert not listed & {"README.md", "docs/deploy_guidance.md", ".gitattributes"}
    for f in m["files"]:
        file = host.file(f"{staged.path}/{f['path']}")
        assert file.size == f["size"] and file.mode == 0o444 and file.user == "root"
        assert f["algo"] == ("sha256" if f["path"].endswith((".safetensors", ".model")) else "git-sha1")
    leftovers = host.run(f"find /srv/models/{name}/.staging -mindepth 1 ! -name '*.lock'").stdout.strip()
    assert leftovers == ""


def test_the_servers_pre_start_check_accepts_the_staged_directories(host):
    out = host.run(f"python3 {TOOL} check /srv/models/target/current /srv/models/draft/current")
    assert out.rc == 0, out.stderr
    assert [c["revision"] for c in json.loads(out.stdout)["checked"]] == [manifest(host, n)["revision"] for n in MODELS]


def test_facts_for_other_roles(host):
    facts = jsonof(host, "/etc/ansible/facts.d/sglang_model.fact")
    assert facts["schema"] == 2 and facts["root"] == "/srv/models", facts
    assert set(MODELS) <= set(facts["models"]), facts
    for name in MODELS:
        m = facts["models"][name]
        assert m["current"] == f"/srv/models/{name}/current"
        assert m["path"] == host.file(m["current"]).linked_to and m["manifest"] == m["path"] + ".manifest.json"
        assert (m["revision"], m["repo_id"]) == (manifest(host, name)["revision"], manifest(host, name)["repo_id"])


def test_the_token_is_only_in_its_0600_file(host):
    token = host.file("/etc/sglang-model/hf_token")
    assert token.user == "root" and token.mode == 0o600 and token.content_string.strip() == TOKEN
    assert host.file("/etc/sglang-model").mode == 0o700
    assert TOKEN not in host.run("ps -eo args").stdout
    assert TOKEN not in host.run("cat /etc/ansible/facts.d/sglang_model.fact /srv/models/*/*.manifest.json "
                                 "/run/sglang-model/* 2>/dev/null; journalctl --no-pager -o cat").stdout


def test_the_hub_served_each_file_once_for_both_hosts():
    """gpu1 read the double; gpu2 copied from gpu1 (fan-out): the double served every byte once."""
    served = stats()["files"]
    expected = {}
    for name in MODELS:
        m = manifest(gpu1, name)
        expected.update({f"{m['repo_id']}/{f['path']}": f["size"] for f in m["files"]})
    assert served == expected
    for name in MODELS:
        assert manifest(gpu1, name)["source"] == {"kind": "hub", "endpoint": "http://127.0.0.1:8090"}
        assert manifest(gpu2, name)["source"] == {"kind": "rsync", "peer": G1}
        assert manifest(gpu2, name)["files"] == manifest(gpu1, name)["files"]


def test_the_copy_daemon_is_gone_after_the_rounds():
    for h in (gpu1, gpu2):
        assert not h.service("sglang-model-rsyncd").is_running
        # static: started only by the role, never at boot (is_enabled would be true for "static")
        assert h.run("systemctl is-enabled sglang-model-rsyncd").stdout.strip() == "static"
        assert h.run("ls /run/sglang-model/").stdout.split() == [f"{n}.progress.json" for n in sorted(MODELS)]
    unit = gpu1.file("/etc/systemd/system/sglang-model-rsyncd.service").content_string
    assert "RuntimeMaxSec=21600" in unit and "\n[Install]" not in unit


# --------------------------------------------------------------------------- the role again


def test_corrupted_shards_on_the_peer_are_found_and_copied_again_from_the_peer():
    """On gpu2: one shard changed in place (its mtime moves: the size+mtime check sees it) and one with
    bit rot (same size, same mtime: only sglang_model_verify=full sees it). One run with full
    verification finds both and copies just them again from gpu1, not from the Hub."""
    revision_dir = gpu2.file("/srv/models/target/current").linked_to
    changed, rotten = (f"{revision_dir}/model-0000{i}-of-00006.safetensors" for i in (2, 5))
    gpu2.run_expect([0], f"chmod 644 {changed} && printf 'x' | dd of={changed} bs=1 seek=4096 conv=notrunc "
                         f"status=none && chmod 444 {changed}")
    gpu2.run_expect([0], f"t=$(stat -c %y {rotten}) && chmod 644 {rotten} && printf 'y' | dd of={rotten} bs=1 "
                         f"seek=8192 conv=notrunc status=none && chmod 444 {rotten} && touch -d \"$t\" {rotten}")
    assert gpu2.run(f"python3 {TOOL} check /srv/models/target/current").rc == 1  # the changed one
    double(reset=True)
    rc, out, elapsed = converge("-e", "sglang_model_verify=full", "--tags", "sglang_model_verify,sglang_model_stage")
    assert rc == 0, out[-4000:]
    assert "(corrupted files replaced: model-00002-of-00006.safetensors, model-00005-of-00006.safetensors)" \
        in out, out[-4000:]
    assert gpu2.run(f"python3 {TOOL} check --full /srv/models/target/current").rc == 0
    assert stats()["total_bytes"] == 0  # repaired from gpu1, not from the Hub
    assert manifest(gpu2, "target")["source"] == {"kind": "rsync", "peer": G1}
    print(f"two corrupted shards on the peer (one found by size+mtime, one only by the full rehash) copied again "
          f"from gpu1 in a {elapsed:.0f} s converge with sglang_model_verify=full")


def test_a_killed_and_a_cut_off_download_resume_without_fetching_completed_files_again():
    """On gpu1 (the seed): drop the target revision; kill the staging job mid-download; then let the Hub go
    away mid-download (a clear failure, nothing complete); then stage again: completed files are never
    fetched again and a partial file resumes where it stopped."""
    current = gpu1.file("/srv/models/target/current").linked_to
    sha = os.path.basename(current)
    sizes = {f["path"]: f["size"] for f in manifest(gpu1, "target")["files"]}
    gpu1.run_expect([0], f"rm -f {current}.manifest.json && chmod -R u+w {current} && rm -rf {current}")
    double(reset=True)
    double(rate=6_000_000)
    limit = ["--limit", G1, "--tags", "sglang_model_stage"]

    # 1. kill -9 the background staging job mid-download
    play = converge(*limit, background=True)
    job = wait_for(lambda: (p := progress()) and p.get("phase") == "downloading" and p["bytes_done"] > 60e6 and p)
    gpu1.run_expect([0], f"kill -9 {job['pid']}")
    out = play.communicate(timeout=300)[0]
    assert play.returncode != 0, out[-3000:]
    assert not gpu1.file(f"{current}.manifest.json").exists and not gpu1.file(current).exists
    assert gpu1.run(f"python3 {TOOL} check /srv/models/target/current").rc == 1  # never complete
    after_kill = stats()["files"]

    # 2. the Hub goes away mid-download
    play = converge(*limit, background=True)
    wait_for(lambda: (p := progress()) and p.get("phase") == "downloading" and p.get("pid") != job["pid"]
             and stats()["total_bytes"] > sum(after_kill.values()) + 20e6)
    double(mode="down")
    out = play.communicate(timeout=300)[0]
    assert play.returncode != 0
    assert "target failed: sglang_model_stage: " in out and "(from http://127.0.0.1:8090" in out, out[-3000:]
    assert "Traceback" not in out
    assert not gpu1.file(f"{current}.manifest.json").exists and not gpu1.file(current).exists
    journal = gpu1.file(f"/srv/models/target/.staging/{sha}.journal").content_string.splitlines()
    after_cut = stats()["files"]

    # 3. the Hub is back: stage again
    double(mode="none", rate=0)
    rc, out, elapsed = converge(*limit)
    assert rc == 0, out[-4000:]
    served = stats()["files"]
    assert gpu1.run(f"python3 {TOOL} check --full /srv/models/target/current").rc == 0
    twice = sum(max(0, n - sizes[k.split("/", 2)[2]]) for k, n in served.items() if k.startswith("test-org/kimi-mini/"))
    completed_before = [k for k, n in after_kill.items() if n == sizes.get(k.split("/", 2)[2])]
    assert all(after_cut.get(k) == n for k, n in after_kill.items() if k in completed_before)
    assert all(served.get(k) == after_cut.get(k) for k in completed_before)
    assert twice < max(sizes.values()), f"{twice} bytes fetched twice over the two interruptions"
    print(f"kill -9 then Hub gone mid-download, then rerun: {twice} bytes fetched twice in all "
          f"({len(journal)} files verified before the cut-off kept); final converge {elapsed:.0f} s")


def test_a_bad_revision_fails_before_any_change():
    snapshot = ("find /srv/models /opt/sglang-model /etc/sglang-model /run/sglang-model -printf '%p %s %T@ %m\\n' "
                "| sort | sha256sum")
    before = gpu1.check_output(snapshot)
    models = [{"name": "target", "repo_id": "test-org/kimi-mini", "revision": "v0.0-missing"}]
    rc, out, _ = converge("--limit", G1, "-e", json.dumps({"sglang_model_models": models}))
    assert rc != 0
    assert "sglang_model_models[0] (target).revision 'v0.0-missing' does not exist in test-org/kimi-mini" in out
    assert TOKEN not in out
    assert gpu1.check_output(snapshot) == before
