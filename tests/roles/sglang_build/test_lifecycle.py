"""The release lifecycle on a real (container) host, through the real playbook.

Sources are real: git repositories made from SGLang's and FlashInfer's PyPI sdists,
served on the host's loopback (tests/harness/sources.py). TEST ONLY: every
component is installed with --no-deps and torch is a CPU wheel (see
inventory/demo/group_vars/gpu_hosts/sglang_build.yml). The host has no nvcc, so
the arch compile check says "skipped" here; molecule/sglang_build runs it.

The tests run in order on one host: check mode on the bare host, build, rerun,
check mode, bump, kill and recover (with pruning), then bad inputs on the host that
now holds releases.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from repo import ROOT

PLAYBOOK = ROOT / "playbooks" / "build.yml"
BUMP = ["-e", "sglang_build_sglang_ref=v0.5.10", "-e", "sglang_build_sglang_version=0.5.10"]
# A changed FlashInfer input: a new FlashInfer wheel, and so a new release.
FLASHINFER_CHANGE = ["-e", json.dumps({"sglang_build_flashinfer_env": {"FLASHINFER_BUILD_NOTE": "lifecycle-test"}})]
STATE: dict = {}


def recap(out: str) -> dict:
    match = re.search(r"ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", out)
    assert match, out[-3000:]
    return {"ok": int(match[1]), "changed": int(match[2]), "failed": int(match[3])}


def current(host) -> str:
    return host.sh("readlink /opt/sglang/current").stdout.strip().rsplit("/", 1)[-1]


def previous(host) -> str:
    return host.sh("readlink /opt/sglang/previous || true").stdout.strip().rsplit("/", 1)[-1]


def releases(host) -> dict[str, bool]:
    out = host.sh("cd /opt/sglang/releases && for d in *; do [ -e $d/.complete ] && echo $d 1 || echo $d 0; done")
    return {name: flag == "1" for name, flag in (line.split() for line in out.stdout.splitlines())}


def manifest(host, release: str) -> dict:
    return host.json(f"/opt/sglang/releases/{release}/manifest.json")


def timed(run_playbook, host, *args):
    started = time.monotonic()
    proc = run_playbook(host, PLAYBOOK, *args)
    return proc, round(time.monotonic() - started, 1)


def test_check_mode_on_a_bare_host_changes_nothing_and_says_what_it_would_build(buildhost, run_playbook):
    before = buildhost.sh("ls -A /opt; ls /etc/ansible 2>&1; getent passwd sglang || true").stdout
    proc, _ = timed(run_playbook, buildhost, "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert recap(proc.stdout)["changed"] > 0
    assert re.search(r"Would build release sglang-0\.5\.9-[0-9a-f]{12} \(flashinfer, sglang\)", proc.stdout)
    assert buildhost.sh("ls -A /opt; ls /etc/ansible 2>&1; getent passwd sglang || true").stdout == before


def test_converge_builds_a_checked_complete_release(buildhost, run_playbook):
    proc, seconds = timed(run_playbook, buildhost)
    assert proc.returncode == 0, proc.stdout[-4000:]
    release = current(buildhost)
    assert releases(buildhost) == {release: True}
    m = manifest(buildhost, release)
    assert m["release_id"] == release and release.startswith("sglang-0.5.9-")
    installed = {name: c["installed"] for name, c in m["components"].items()}
    assert installed == {"torch": "2.13.0+cpu", "sgl_kernel": "0.3.21", "flashinfer": "0.6.3", "sglang": "0.5.9"}
    fi = m["components"]["flashinfer"]["build"]
    assert fi["ref"] == "v0.6.3" and re.fullmatch(r"[0-9a-f]{40}", fi["commit"])
    assert fi["env"]["FLASHINFER_CUDA_ARCH_LIST"] == "12.0a" and fi["env"]["TORCH_CUDA_ARCH_LIST"] == "12.0"
    assert m["arch"]["flashinfer_cuda_arch_list"] == "12.0a" and m["arch"]["torch_cuda_arch_list"] == "12.0"
    assert m["arch"]["check"]["status"] == "skipped"  # no nvcc on this host; molecule/sglang_build has one
    assert m["model_files"] > 100 and m["sglang_dir"].endswith("/site-packages/sglang")
    assert m["components"]["sgl_kernel"]["mode"] == "wheel"
    # Built and owned by the dedicated user; the patch hook ran on the release.
    assert buildhost.sh(f"stat -c %U /opt/sglang/releases/{release}/venv/bin/python3").stdout.strip() == "sglang-build"
    facts = buildhost.json("/etc/ansible/facts.d/sglang_build.fact")
    assert facts["release_id"] == release and facts["current_dir"] == "/opt/sglang/current"
    STATE.update(first=release, full_build_s=seconds)


def test_rerun_changes_nothing_and_builds_nothing(buildhost, run_playbook):
    phases = f"grep -cE 'phase (fetch|wheels|venv) ' /opt/sglang/logs/{STATE['first']}.log"
    before = buildhost.sh(phases).stdout
    proc, seconds = timed(run_playbook, buildhost)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert recap(proc.stdout)["changed"] == 0, proc.stdout[-4000:]
    assert "complete, nothing to build" in proc.stdout
    assert buildhost.sh(phases).stdout == before  # no build phase ran (the read-only check does)
    STATE["noop_s"] = seconds


def test_check_mode_on_a_converged_host_reports_no_change(buildhost, run_playbook):
    proc, _ = timed(run_playbook, buildhost, "--check", "--diff")
    assert proc.returncode == 0 and recap(proc.stdout)["changed"] == 0, proc.stdout[-4000:]


def test_bump_rebuilds_only_sglang_beside_the_old_release(buildhost, run_playbook):
    proc, seconds = timed(run_playbook, buildhost, *BUMP)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "to build: sglang;" in proc.stdout
    new, old = current(buildhost), STATE["first"]
    assert new != old and new.startswith("sglang-0.5.10-")
    assert releases(buildhost) == {old: True, new: True} and previous(buildhost) == old
    m_old, m_new = manifest(buildhost, old), manifest(buildhost, new)
    assert m_new["components"]["sglang"]["installed"] == "0.5.10"
    assert m_new["components"]["sglang"]["key"] != m_old["components"]["sglang"]["key"]
    # The same FlashInfer wheel, built once for the first release (same build record).
    assert m_new["components"]["flashinfer"]["build"] == m_old["components"]["flashinfer"]["build"]
    log = buildhost.sh(f"cat /opt/sglang/logs/{new}.log").stdout
    assert "sglang: building a wheel" in log and "flashinfer: building" not in log
    STATE.update(second=new, bump_s=seconds)


KILL_TREE = r"""
pids=$(pgrep -f '[s]glang_build.py wheels')
[ -n "$pids" ] || exit 3
all=""
collect() { all="$all $1"; kill -STOP $1 2>/dev/null; for c in $(ps -o pid= --ppid $1); do collect $c; done; }
for p in $pids; do collect $p; done
kill -KILL $all
"""


def test_a_build_killed_midway_is_never_current_and_the_next_run_recovers(buildhost, run_playbook):
    before = current(buildhost)
    job = run_playbook(buildhost, PLAYBOOK, *BUMP, *FLASHINFER_CHANGE, wait=False)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # wait until FlashInfer's wheel is being built
        if buildhost.sh("ls -d /opt/sglang/wheelhouse/.flashinfer-*.tmp-* 2>/dev/null", check=False).stdout.strip():
            break
        assert job.poll() is None, job.stdout.read()[-4000:]
        time.sleep(1)
    else:
        pytest.fail("the FlashInfer build never started")
    assert buildhost.sh(KILL_TREE, check=False).returncode == 0
    out = job.communicate(timeout=300)[0]
    assert job.returncode != 0, out[-3000:]
    # Nothing half-built is current or complete; the leftovers are still there.
    assert current(buildhost) == before
    assert all(releases(buildhost).values()), releases(buildhost)
    assert buildhost.sh("ls -d /opt/sglang/wheelhouse/.flashinfer-*.tmp-*", check=False).returncode == 0

    proc, seconds = timed(run_playbook, buildhost, *BUMP, *FLASHINFER_CHANGE, "-e", "sglang_build_keep_releases=2")
    assert proc.returncode == 0, proc.stdout[-4000:]
    third = current(buildhost)
    log = buildhost.sh(f"cat /opt/sglang/logs/{third}.log").stdout
    assert "recovered: removed leftover /opt/sglang/wheelhouse/.flashinfer-" in log
    assert buildhost.sh("ls -a /opt/sglang/wheelhouse /opt/sglang/work").stdout.count(".tmp-") == 0
    assert third not in (STATE["first"], STATE["second"]) and previous(buildhost) == STATE["second"]
    # Pruning kept 2: the current and the previous; the first release and the wheels only it used are gone.
    assert releases(buildhost) == {STATE["second"]: True, third: True}
    wheels = buildhost.sh("ls /opt/sglang/wheelhouse").stdout.split()
    assert not any(w.startswith("sglang-source-v0.5.9-") for w in wheels), wheels
    assert sum(w.startswith("flashinfer-") for w in wheels) == 2, wheels  # the second release still uses the old one
    STATE["recover_s"] = seconds
    print("\n[sglang_build timings, s] " + json.dumps(STATE))  # shown with pytest -s


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
def test_bad_input_fails_before_any_change(buildhost, run_playbook, extra, expect):
    before = buildhost.sh(SNAPSHOT).stdout
    proc = run_playbook(buildhost, PLAYBOOK, "-e", json.dumps(extra))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert expect in out, out[-3000:]
    assert recap(out)["changed"] == 0, out[-3000:]
    assert buildhost.sh(SNAPSHOT).stdout == before, "the host changed"

