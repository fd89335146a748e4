"""Verifier of molecule/sglang_build: the converged release, checked from outside Ansible; then, on
the same host, the release lifecycle through the scenario's playbook: a version bump that rebuilds
only SGLang beside the old release, a build killed midway that is never current and that the next run
recovers (with pruning), and bad inputs that fail before any change. The tests run in file order.
(Check mode on a bare host: tests/roles/sglang_build/test_lifecycle.py.)
"""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from background import Background

testinfra_hosts = ["podman://molecule-sglang-build"]
ROOT = Path(__file__).resolve().parents[3]
CONVERGE = ROOT / "molecule" / "sglang_build" / "converge.yml"
BUMP = ["-e", "sglang_build_sglang_ref=v0.5.10", "-e", "sglang_build_sglang_version=0.5.10"]
# A changed FlashInfer input: a new FlashInfer wheel, and so a new release.
FLASHINFER_CHANGE = ["-e", json.dumps({"sglang_build_flashinfer_env": {"FLASHINFER_BUILD_NOTE": "lifecycle-test"}})]
STATE: dict = {}


def manifest(host):
    return json.loads(host.file("/opt/sglang/current/manifest.json").content_string)


def test_current_points_at_a_complete_release_owned_by_the_build_user(host):
    current = host.file("/opt/sglang/current")
    assert current.is_symlink and current.linked_to.startswith("/opt/sglang/releases/sglang-0.5.9-")
    assert host.file(current.linked_to + "/.complete").exists
    release = current.linked_to.rsplit("/", 1)[-1]
    assert releases(host) == {release: True} and manifest(host)["release_id"] == release
    # idempotence and check mode ran the read-only check only: every build phase ran once
    log = host.file(f"/opt/sglang/logs/{release}.log").content_string
    assert [len(re.findall(rf"phase {p} of ", log)) for p in ("fetch", "wheels", "venv", "aot")] == [1, 1, 1, 1], log[-3000:]
    STATE["first"] = release
    assert host.file(current.linked_to).user == "sglang-build"
    assert host.user("sglang-build").shell == "/usr/sbin/nologin"
    assert host.file("/opt/sglang").user == "root"


def test_installed_versions_are_the_requested_ones(host):
    py = "/opt/sglang/current/venv/bin/python"
    out = host.check_output(py + " -c 'import importlib.metadata as m; "
                            "print(*(m.version(d) for d in (\"sglang\", \"flashinfer-python\", \"sgl-kernel\", \"torch\")))'")
    assert out.split() == ["0.5.9", "0.6.3", "0.3.21", "2.13.0+cpu"]
    m = manifest(host)
    assert {n: c["installed"] for n, c in m["components"].items()} == {
        "sglang": "0.5.9", "flashinfer": "0.6.3", "sgl_kernel": "0.3.21", "torch": "2.13.0+cpu"}


def test_sglang_model_files_are_found(host):
    m = manifest(host)
    assert host.file(m["sglang_dir"] + "/srt/models/kimi_k25.py").exists
    assert m["model_files"] > 100


def test_manifest_records_arch_and_a_real_sm120a_compile(host):
    arch = manifest(host)["arch"]
    assert arch["torch_cuda_arch_list"] == "12.0" and arch["flashinfer_cuda_arch_list"] == "12.0a"
    check = arch["check"]
    assert check["status"] == "passed", check
    (unit,) = check["units"]
    assert unit["target"] == "sm_120a" and unit["sm"] == 120 and unit["compiled"]
    assert unit["read_by"] in ("cuobjdump", "ELF header (no cuobjdump)")


def test_source_builds_are_in_the_wheelhouse_with_their_record(host):
    m = manifest(host)
    for name in ("flashinfer", "sglang"):
        build = m["components"][name]["build"]
        wheel = f"/opt/sglang/wheelhouse/{m['components'][name]['key']}/{build['wheel']}"
        assert host.file(wheel).exists, wheel
        assert build["env"]["FLASHINFER_CUDA_ARCH_LIST"] == "12.0a"
        assert build["env"]["CUDA_HOME"] == "/usr/local/cuda-13.0"
    fi = m["components"]["flashinfer"]["build"]
    assert fi["ref"] == "v0.6.3" and re.fullmatch(r"[0-9a-f]{40}", fi["commit"])
    assert fi["env"]["TORCH_CUDA_ARCH_LIST"] == "12.0"
    assert m["components"]["sgl_kernel"]["mode"] == "wheel"


def test_no_leftovers_and_local_facts_for_other_roles(host):
    assert host.check_output("ls -A /opt/sglang/work") == ""
    facts = json.loads(host.file("/etc/ansible/facts.d/sglang_build.fact").content_string)
    assert facts["schema"] == 2 and facts["root"] == "/opt/sglang", facts
    current = facts["current"]
    assert current["id"] == STATE["first"] and current["python"] == "/opt/sglang/current/venv/bin/python", current
    m = manifest(host)
    assert (current["version"], current["patch_id"], current["sglang_dir"]) == (
        "0.5.9", m["inputs"]["patch"]["id"], m["sglang_dir"]), current
    assert sorted(facts["releases"]) == sorted(host.check_output("ls /opt/sglang/releases").split()), facts
    assert facts["releases"][STATE["first"]]["dir"] == f"/opt/sglang/releases/{STATE['first']}"


def test_flashinfer_modules_compiled_into_the_release_for_sm120a(host):
    """converge.yml's small set (silu_and_mul), compiled by the AOT step with the mirror's nvcc 13.0,
    checked by the fatbin-header reader (the mirror has no cuobjdump), where FlashInfer loads it."""
    m = manifest(host)
    aot = m["flashinfer_aot"]
    assert aot["status"] == "passed", aot
    assert aot["modules_requested"] == ["activation silu"]
    (mod,) = aot["modules"]
    assert mod["name"] == "silu_and_mul" and mod["expected"] == ["sm_120a"] and mod["archs"] == ["sm_120a"]
    assert mod["missing"] == [] and mod["read_by"] == "fatbin headers (no cuobjdump)"
    stamp = json.loads(host.file("/opt/sglang/current/flashinfer_aot.json").content_string)
    so = host.file(stamp["modules"][0]["so"])
    assert stamp["arch_list"] == "12.0a" and stamp["modules"][0]["so"].startswith(m["sglang_dir"].rsplit("/sglang", 1)[0])
    assert so.exists and so.user == "sglang-build" and so.mode & 0o044 == 0o044  # the server reads it, cannot change it
    print(f"\nFlashInfer AOT on the test host: silu_and_mul for sm_120a in {stamp['seconds']} s")


def test_flashinfer_resolves_the_module_to_the_release_copy(host):
    """The release's FlashInfer, as the server runs it (its own writable workspace), would load the
    compiled copy and compile nothing (there is no driver here to load it for real)."""
    probe = ("import flashinfer.jit as j; s = j.gen_act_and_mul_module('silu'); print(s.is_aot, s.aot_path)")
    out = host.check_output("cd /tmp && FLASHINFER_WORKSPACE_BASE=$(mktemp -d) FLASHINFER_CUDA_ARCH_LIST=12.0a "
                            f"/opt/sglang/current/venv/bin/python -c \"{probe}\" 2>/dev/null")
    is_aot, path = out.split()
    assert is_aot == "True" and path.endswith("/flashinfer/data/aot/silu_and_mul/silu_and_mul.so")


# ------------------------------------------------------------------ lifecycle (bump, kill, recover, prune)

def converge(*extra, wait=True):
    """The scenario's converge (playbooks/build.yml with its vars) with extra arguments."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    argv = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(CONVERGE), *extra]
    if not wait:
        return Background(argv, cwd=ROOT, env=env)  # its output read as it comes (tests/harness/background.py)
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def recap(out):
    match = re.search(r"ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", out)
    assert match, out[-3000:]
    return {"ok": int(match[1]), "changed": int(match[2]), "failed": int(match[3])}


def link(host, name):
    return host.run(f"readlink /opt/sglang/{name} || true").stdout.strip().rsplit("/", 1)[-1]


def releases(host):
    out = host.check_output("cd /opt/sglang/releases && for d in *; do [ -e $d/.complete ] && echo $d 1 || echo $d 0; done")
    return {name: flag == "1" for name, flag in (line.split() for line in out.splitlines())}


def release_manifest(host, release):
    return json.loads(host.file(f"/opt/sglang/releases/{release}/manifest.json").content_string)


def test_bump_rebuilds_only_sglang_beside_the_old_release(host):
    started = time.monotonic()
    proc = converge(*BUMP)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "to build: sglang;" in proc.stdout
    new, old = link(host, "current"), STATE["first"]
    assert new != old and new.startswith("sglang-0.5.10-")
    assert releases(host) == {old: True, new: True}
    assert not host.file("/opt/sglang/previous").exists  # the one previous is role sglang_server's
    m_old, m_new = release_manifest(host, old), release_manifest(host, new)
    assert m_new["components"]["sglang"]["installed"] == "0.5.10"
    assert m_new["components"]["sglang"]["key"] != m_old["components"]["sglang"]["key"]
    # The same FlashInfer wheel, built once for the first release (same build record).
    assert m_new["components"]["flashinfer"]["build"] == m_old["components"]["flashinfer"]["build"]
    log = host.file(f"/opt/sglang/logs/{new}.log").content_string
    assert "sglang: building a wheel" in log and "flashinfer: building" not in log
    STATE.update(second=new, bump_s=round(time.monotonic() - started, 1))


KILL_TREE = r"""
pids=$(pgrep -f '[s]glang_build.py wheels')
[ -n "$pids" ] || exit 3
all=""
collect() { all="$all $1"; kill -STOP $1 2>/dev/null; for c in $(ps -o pid= --ppid $1); do collect $c; done; }
for p in $pids; do collect $p; done
kill -KILL $all
"""


def test_a_build_killed_midway_is_never_current_and_the_next_run_recovers(host):
    before = link(host, "current")
    job = converge(*BUMP, *FLASHINFER_CHANGE, wait=False)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # wait until FlashInfer's wheel is being built
        if host.run("ls -d /opt/sglang/wheelhouse/.flashinfer-*.tmp-* 2>/dev/null").stdout.strip():
            break
        assert job.poll() is None, job.output()[-4000:]
        time.sleep(1)
    else:
        pytest.fail("the FlashInfer build never started")
    assert host.run(KILL_TREE).rc == 0
    out = job.communicate(timeout=300)[0]
    assert job.returncode != 0, out[-3000:]
    # Nothing half-built is current or complete; the leftovers are still there.
    assert link(host, "current") == before
    assert all(releases(host).values()), releases(host)
    assert host.run("ls -d /opt/sglang/wheelhouse/.flashinfer-*.tmp-*").rc == 0

    started = time.monotonic()
    proc = converge(*BUMP, *FLASHINFER_CHANGE, "-e", "sglang_build_keep_releases=2")
    assert proc.returncode == 0, proc.stdout[-4000:]
    third = link(host, "current")
    log = host.file(f"/opt/sglang/logs/{third}.log").content_string
    assert "recovered: removed leftover /opt/sglang/wheelhouse/.flashinfer-" in log
    assert host.check_output("ls -a /opt/sglang/wheelhouse /opt/sglang/work").count(".tmp-") == 0
    assert third not in (STATE["first"], STATE["second"])
    # Pruning kept 2 (no server here, nothing else to keep): the two newest; the first release and the wheels
    # only it used are gone.
    assert releases(host) == {STATE["second"]: True, third: True}
    wheels = host.check_output("ls /opt/sglang/wheelhouse").split()
    assert not any(w.startswith("sglang-source-v0.5.9-") for w in wheels), wheels
    assert sum(w.startswith("flashinfer-") for w in wheels) == 2, wheels  # the second release still uses the old one
    STATE["recover_s"] = round(time.monotonic() - started, 1)
    print("\n[sglang_build timings, s] " + json.dumps(STATE))


SNAPSHOT = (
    "find /opt/sglang /etc/ansible /etc/passwd /etc/group -xdev \\( -type f -o -type l -o -type d \\) "
    "-printf '%p %s %T@ %m %u\\n' 2>/dev/null | sort | sha256sum"
)

BAD = [
    ("unknown-mode", {"sglang_build_flashinfer_mode": "binary"}, "sglang_build_flashinfer_mode"),
    ("empty-ref", {"sglang_build_sglang_ref": ""}, "sglang_build_sglang_ref"),
    ("malformed-flashinfer-arch", {"sglang_build_flashinfer_cuda_arch_list": "sm_120a"},
     "sglang_build_flashinfer_cuda_arch_list"),
    ("malformed-torch-arch", {"sglang_build_torch_cuda_arch_list": "12,0"}, "sglang_build_torch_cuda_arch_list"),
    ("keep-one", {"sglang_build_keep_releases": 1}, "sglang_build_keep_releases"),
    ("wheel-url-scheme", {"sglang_build_torch_wheel_url": "ftp://mirror/torch.whl"}, "sglang_build_torch_wheel_url"),
]


@pytest.mark.parametrize("extra,expect", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input_fails_before_any_change(host, extra, expect):
    """On the host that now holds releases: nothing under /opt/sglang, the facts or the users changes."""
    before = host.check_output(SNAPSHOT)
    proc = converge("-e", json.dumps(extra))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert expect in out, out[-3000:]
    assert recap(out)["changed"] == 0, out[-3000:]
    assert host.check_output(SNAPSHOT) == before, "the host changed"
