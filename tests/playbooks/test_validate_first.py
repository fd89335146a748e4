"""site.yml validates every role on every host before any host changes (playbooks/validate.yml).

A fresh test host (a real systemd container, nothing installed yet; the Hub TEST DOUBLE on its
loopback for sglang_model's checks) is both a GPU host and a router host. For a bad value of each
role, site.yml must fail in its first play, naming the variable, with the host's snapshot (files under
/etc, /usr, /opt, /var/lib..., dpkg state, holds, users) identical before and after: no driver, no
build, no user was touched first. The GPU hosts' cases run as one site.yml run with one inventory host
per case (tests/harness/bad_inputs.py), beside a host with good settings: every bad host is named in
that one run, and the good host is stopped too, before any change.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess

import pytest

import bad_inputs
from repo import ROOT
from testhost import SNAPSHOT, TestHost, harness_or_skip

SITE = ROOT / "site.yml"

# The order of the GPU hosts' checks (playbooks/validate.yml).
ROLE_ORDER = ["nvidia_cuda", "sglang_build", "sglang_eagle3_patch", "gpu_preflight", "sglang_server", "sglang_model",
              "sglang_bench"]

# One bad value per role: (role, extra vars, what the failure must name).
CASES = [
    ("nvidia_cuda", {"nvidia_cuda_driver_branch": "58"}, "nvidia_cuda_driver_branch"),
    ("sglang_build", {"sglang_build_sglang_version": "latest!"}, "sglang_build_sglang_version"),
    ("sglang_eagle3_patch", {"sglang_eagle3_patch_class": "1NotAClass"}, "sglang_eagle3_patch_class"),
    ("gpu_preflight", {"gpu_preflight_expected_gpu_count": 0}, "gpu_preflight_expected_gpu_count"),
    ("sglang_model", {"sglang_model_keep_revisions": 0}, "sglang_model_keep_revisions"),
    ("sglang_build (the copy of the release root an earlier version kept)", {"sglang_build_root": "/data/sglang"},
     "sglang_build_root is no longer read: set sglang_common_release_root instead"),
    ("sglang_server", {"sglang_server_tp_size": 3}, "sglang_server_tp_size"),
    ("sglang_server (argument spec type)", {"sglang_server_port": "http"}, "sglang_server_port"),
    ("sglang_bench", {"sglang_bench_confidence": 1.5}, "sglang_bench_confidence"),
    ("sglang_router", {"sglang_router_policy": "fastest"}, "sglang_router_policy"),
]


@pytest.fixture(scope="module")
def host():
    harness = harness_or_skip()
    h = TestHost("pytest-validate-first", harness["image"], harness["mirror"]).start()
    yield h
    h.remove()


def inventory(host: TestHost, path):
    """The host in gpu_hosts and in sglang_routers, with the demo inventory's group_vars."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "group_vars").symlink_to(ROOT / "inventory" / "demo" / "group_vars")
    line = f"{host.name} ansible_connection=sglang_testhost ansible_python_interpreter=/usr/bin/python3\n"
    (path / "hosts.ini").write_text(f"[gpu_hosts]\n{line}[sglang_routers]\n{line}"
                                    "[sglang_routers:vars]\nsglang_router_host=127.0.0.1\n")
    return path


def run(host, tmp_path, playbook, *args):
    inv = inventory(host, tmp_path / "inventory")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_CONNECTION_PLUGINS=str(ROOT / "tests" / "harness" / "connection_plugins"),
               NVIDIA_MIRROR_DIR=str(host.mirror_dir), ANSIBLE_NOCOLOR="1")
    return subprocess.run(["ansible-playbook", "-i", str(inv), str(playbook), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_the_same_inventory_without_a_bad_value_passes_validation_unchanged(host, tmp_path):
    """So each case below fails because of its own bad value, nothing else."""
    before = host.sh(SNAPSHOT).stdout
    proc = run(host, tmp_path, ROOT / "playbooks" / "validate.yml")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert re.search(rf"{re.escape(host.name)}\s*:\s*ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", proc.stdout)
    for role in (*ROLE_ORDER, "sglang_router"):
        assert f"TASK [{role} : " in proc.stdout, f"{role} was not validated"
    assert host.sh(SNAPSHOT).stdout == before, "validation changed the host"


GPU_CASES = [c for c in CASES if c[0] != "sglang_router"]
GOOD = "good-settings"


@pytest.fixture(scope="module")
def batch(host, tmp_path_factory):
    """site.yml once over a host per GPU case and one with good settings (all aliases of the test host)."""
    cases = {c[0]: c[1] for c in GPU_CASES} | {GOOD: {}}
    return bad_inputs.run(host, SITE, cases, tmp_path_factory.mktemp("inventory"), timeout=600)


@pytest.mark.parametrize("case,expect", [(c[0], c[2]) for c in GPU_CASES], ids=[c[0] for c in GPU_CASES])
def test_a_bad_value_fails_in_the_first_play_with_the_host_unchanged(batch, case, expect):
    assert batch.returncode != 0, batch.out[-3000:]
    assert expect in batch.failure(case), batch.out[-4000:]
    assert batch.plays and all(p.startswith("Check the ") for p in batch.plays), \
        f"a play past validation started: {batch.plays}"
    recap = batch.recap[bad_inputs.alias(case)]
    assert (recap["changed"], recap["unreachable"], recap["failed"]) == (0, 0, 1), batch.out[-3000:]
    assert batch.unchanged, "the host changed"


def test_a_host_with_good_settings_is_stopped_with_the_bad_hosts_named(batch):
    """The checks ran to the end on every host (each bad one is named above); then the good host stops
    the run, naming every host whose checks failed, in inventory order, with its failed roles in the
    play's order: the case's own role, and any other role that checks the same value through it (the
    server and the build run the patch role's checks; the benchmark reads the server's endpoint)."""
    named = summary(batch)
    assert [h for h, _ in named] == [bad_inputs.alias(c[0]) for c in GPU_CASES], batch.failure(GOOD)
    for (_, roles), case in zip(named, GPU_CASES, strict=True):
        assert case[0].split()[0] in roles, (case, roles)
        assert roles == [r for r in ROLE_ORDER if r in roles], (case, roles)
    assert batch.recap[bad_inputs.alias(GOOD)]["changed"] == 0 and batch.recap[bad_inputs.alias(GOOD)]["failed"] == 1


def summary(batch) -> list[tuple[str, list[str]]]:
    """The hosts and roles named by the good host's stop (tasks/validate_stop.yml), in its order."""
    stop = " ".join(batch.failure(GOOD).split())
    assert "The settings checks failed on " in stop, batch.out[-4000:]
    named = stop.split("The settings checks failed on ", 1)[1].split(" (each host's reason", 1)[0]
    return [(m[1], m[2].split(", ")) for m in re.finditer(r"(\S+) \[([^\]]*)\](?:, |$)", named)]


@pytest.mark.parametrize("extra,expect", [c[1:] for c in CASES if c not in GPU_CASES],
                         ids=[c[0] for c in CASES if c not in GPU_CASES])
def test_a_bad_router_value_fails_in_the_first_play_with_the_host_unchanged(host, tmp_path, extra, expect):
    before = host.sh(SNAPSHOT).stdout
    proc = run(host, tmp_path, SITE, "-e", json.dumps(extra))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert expect in out, out[-4000:]
    plays = re.findall(r"^PLAY \[(.+?)\]", proc.stdout, re.M)
    assert plays and all(p.startswith("Check the ") for p in plays), f"a play past validation started: {plays}"
    assert re.search(rf"{re.escape(host.name)}\s*:\s*ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", proc.stdout), \
        out[-3000:]
    assert host.sh(SNAPSHOT).stdout == before, "the host changed"


# ------------------------------------------------------------------ every role on every host, the same in every run

# Bad values of three roles on one host and of one role on another, beside a good host. The first
# host's models root lies inside the server's home: the server's own checks refuse it (they own the
# paths the server may write), so no check depends on another role's having run first.
MANY = {
    "three-roles": {"nvidia_cuda_driver_branch": "58", "sglang_common_models_root": "/var/lib/sglang/models",
                    "sglang_bench_confidence": 1.5},
    "one-role": {"sglang_server_tp_size": 3},
    GOOD: {},
}
# Each bad host's roles in the play's order, each with the words its own check's message must show.
MANY_FAILED = {
    "three-roles": [("nvidia_cuda", "nvidia_cuda_driver_branch must be three digits"),
                    ("sglang_server", "/var/lib/sglang/models is inside /var/lib/sglang or /var/cache/sglang"),
                    ("sglang_bench", "sglang_bench_confidence (1.5) must be a number between 0 and 1")],
    "one-role": [("sglang_server", "sglang_server_tp_size must divide sglang_server_gpu_count")],
}
# Three hash seeds: Python sets (ansible's intersect/difference) order the same names differently in each.
SEEDS = ("0", "1", "2")
# The roles of these runs, named as a playbook may name them (upgrade.yml names sglang_model before
# sglang_server): the play's own order decides. Only the roles with a bad value, to keep each run short.
MANY_ROLES = ["sglang_bench", "sglang_model", "sglang_server", "nvidia_cuda"]


@pytest.fixture(scope="module")
def seeded(host, tmp_path_factory):
    """playbooks/validate.yml over the same inventory once per hash seed."""
    extra = json.dumps({"sglang_validate_roles": MANY_ROLES})
    return {seed: bad_inputs.run(host, ROOT / "playbooks" / "validate.yml", MANY, tmp_path_factory.mktemp(f"seed{seed}"),
                                 "-e", extra, timeout=600, env={"PYTHONHASHSEED": seed}) for seed in SEEDS}


def host_stop(batch, case: str) -> str:
    """The stop of a host whose roles failed (tasks/validate_stop.yml), whitespace folded."""
    text = " ".join(batch.failure(case).split())
    found = re.search(rf"The settings checks of .*? failed on {re.escape(bad_inputs.alias(case))}: .*?"
                      r"Nothing has been changed on any host", text)
    assert found, batch.failure(case)[-3000:] or batch.out[-3000:]
    return found[0]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_role_on_every_host_is_named_in_one_run_with_the_hosts_unchanged(seeded, seed):
    """Each role's checks run on each host even after another role failed there: every bad value of the
    inventory is named in this one run, each by its role's own check, before any host changes."""
    batch = seeded[seed]
    assert batch.returncode != 0, batch.out[-3000:]
    assert batch.plays and all(p.startswith("Check the ") for p in batch.plays), batch.plays
    assert batch.unchanged, "the host changed"
    for case, failed in MANY_FAILED.items():
        stop = host_stop(batch, case)
        roles = ", ".join(role for role, _ in failed)
        assert stop.startswith(f"The settings checks of {roles} failed on "), stop
        own = " ".join(batch.failure(case).split()).replace(stop, "")  # what the roles' own checks printed
        for role, words in failed:
            assert f"{role}: {words}" in stop, stop
            assert words in own, f"{role}'s own message is missing: {own[-3000:]}"
        recap = batch.recap[bad_inputs.alias(case)]
        assert (recap["changed"], recap["unreachable"], recap["failed"]) == (0, 0, 1), batch.out[-3000:]
    assert summary(batch) == [(bad_inputs.alias(c), [r for r, _ in f]) for c, f in MANY_FAILED.items()], batch.failure(GOOD)
    assert batch.recap[bad_inputs.alias(GOOD)]["changed"] == 0


def test_the_same_inventory_names_the_same_problems_in_every_run(seeded):
    """Whatever the hash seed: the same hosts, roles and messages, in the same order."""
    first = problems(seeded[SEEDS[0]])
    assert [h for h, _ in first] == [bad_inputs.alias(c) for c in MANY], first
    for seed in SEEDS[1:]:
        other = problems(seeded[seed])
        assert other == first, "\n".join(difflib.unified_diff(
            [f"{h}: {line}" for h, lines in first for line in lines],
            [f"{h}: {line}" for h, lines in other for line in lines],
            f"PYTHONHASHSEED={SEEDS[0]}", f"PYTHONHASHSEED={seed}", lineterm=""))


def problems(batch) -> list[tuple[str, list[str]]]:
    """Each host's failures, hosts in inventory order (the output interleaves them as the hosts answer;
    a blank line may follow a failure or not, as the next host's result comes)."""
    return [(h, [line for line in batch.failures[h].splitlines() if line.strip()])
            for h in sorted(batch.failures, key=[bad_inputs.alias(c) for c in MANY].index)]


# ------------------------------------------------------------------ roles validate once per run, per values

ONCE = """---
- name: Validate first
  ansible.builtin.import_playbook: {validate}
  vars:
    sglang_validate_roles: [sglang_server]

- name: The server role in the same run, {what}
  hosts: gpu_hosts
  become: true
  roles:
    - role: sglang_server
      vars: {role_vars}
"""


@pytest.mark.parametrize(("what", "role_vars", "validated"), [
    ("with the values validated above", {}, False),
    ("with a value changed after validation (a rollout or tuning run's include)", {"sglang_server_tp_size": 3}, True),
])
def test_a_role_skips_its_checks_only_for_the_values_this_run_validated(host, tmp_path, what, role_vars, validated):
    """Validated once per run: the role's own checks run again when its values differ (and then stop
    the run naming the variable before any change), not when they are the ones already checked."""
    playbook = tmp_path / "once.yml"
    playbook.write_text(ONCE.format(validate=ROOT / "playbooks" / "validate.yml", what=what,
                                    role_vars=json.dumps(role_vars)))
    before = host.sh(SNAPSHOT).stdout
    proc = run(host, tmp_path, playbook, "--tags", "sglang_server_validate")  # the checks, none of the changes
    out = proc.stdout + proc.stderr
    role_play = out.split("PLAY [The server role in the same run")[1]
    if validated:
        assert proc.returncode != 0 and "sglang_server_tp_size" in role_play, out[-4000:]
    else:
        assert proc.returncode == 0, out[-4000:]
        assert re.search(r"TASK \[sglang_server : Validate the server settings[^\n]*\n(?:[^\n]*\n)*?skipping: ",
                         role_play), role_play[-3000:]
        assert "TASK [sglang_server : Remember that these sglang_server settings" not in role_play
    assert host.sh(SNAPSHOT).stdout == before, "the host changed"
