"""Multi-node tensor parallelism of role sglang_server: the plan filter, the rendered units, bad inventories.

1. The filter (roles/sglang_server/filter_plugins/sglang_multinode.py) called directly, for 2 and 4
   hosts: one --dist-init-addr on every node, ranks 0..n-1 once each, explicit ranks honoured,
   and every inventory it must refuse.
2. Through Ansible's own variable resolution: ansible-playbook over a throwaway inventory of 2 and
   of 4 local hosts runs the role's validation (tasks/validate.yml) and renders each host's unit and
   environment file into a temporary directory (nothing else on this machine is touched); the
   arguments of every unit are read back.
3. Bad inventories fail in that validation with a message naming the problem and render nothing;
   and through playbooks/server.yml against a real (container) host, whose files are unchanged.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from repo import ROOT, load
from testhost import SNAPSHOT, TestHost

ROLE = ROOT / "roles" / "sglang_server"
mn = load("roles/sglang_server/filter_plugins/sglang_multinode.py")

PORT = 20000  # the role's default sglang_server_dist_init_port


def hostvars(n: int, group: str = "llm", tp: int | None = None, gpus: int = 8, **per_host) -> dict:
    """n hosts gpu1..gpuN of one group, tp = 8 per node unless given; per_host: {host: {var: value}}."""
    hv = {}
    for i in range(1, n + 1):
        host = f"gpu{i}"
        hv[host] = {
            "sglang_server_multinode_group": group,
            "sglang_server_node_rank": None,
            "sglang_server_tp_size": tp if tp is not None else 8 * n,
            "sglang_server_gpu_count": gpus,
            "sglang_server_model_path": "moonshotai/Kimi-K2.5",
            "sglang_server_dist_init_host": "",
            "sglang_server_dist_init_port": PORT,
            "ansible_host": f"10.0.0.{10 + i}",
        }
        hv[host].update(per_host.get(host, {}))
    return hv


def plans(hv: dict, group: str = "llm", **kw) -> dict:
    groups = {group: list(hv)}
    return {h: mn.sglang_multinode_plan(hv, groups, group, h, **kw) for h in hv}


# --------------------------------------------------------------------------- 1. the filter

@pytest.mark.parametrize("n", [2, 4])
def test_plan_gives_every_node_one_address_and_its_own_rank(n):
    hv = hostvars(n)
    got = plans(hv)
    addresses = {p["dist_init_addr"] for p in got.values()}
    assert addresses == {f"10.0.0.11:{PORT}"}, addresses
    ranks = [got[h]["node_rank"] for h in hv]
    assert ranks == list(range(n))  # inventory order
    assert sorted(ranks) == list(range(n)) and len(set(ranks)) == n
    for plan in got.values():
        assert plan["nnodes"] == n and plan["head"] == "gpu1" and plan["tp_per_node"] == 8
        assert plan["endpoint"] is (plan["node_rank"] == 0)
        assert plan["members"] == [{"host": f"gpu{i + 1}", "rank": i} for i in range(n)]
    assert [h for h, p in got.items() if p["endpoint"]] == ["gpu1"]


def test_explicit_ranks_are_honoured_and_pick_the_head():
    hv = hostvars(4, **{f"gpu{i}": {"sglang_server_node_rank": 4 - i} for i in range(1, 5)})
    got = plans(hv)
    assert {h: p["node_rank"] for h, p in got.items()} == {"gpu1": 3, "gpu2": 2, "gpu3": 1, "gpu4": 0}
    assert {p["head"] for p in got.values()} == {"gpu4"}
    assert {p["dist_init_addr"] for p in got.values()} == {f"10.0.0.14:{PORT}"}
    assert got["gpu1"]["members"][0] == {"host": "gpu4", "rank": 0}


def test_explicit_ranks_as_inventory_strings_and_mixed_with_index():
    # gpu1 and gpu2 swap; gpu3 keeps its index 2 (null). INI inventories give strings.
    hv = hostvars(3, gpu1={"sglang_server_node_rank": "1"}, gpu2={"sglang_server_node_rank": 0})
    got = plans(hv)
    assert [got[h]["node_rank"] for h in ("gpu1", "gpu2", "gpu3")] == [1, 0, 2]
    assert got["gpu3"]["head"] == "gpu2"


def test_address_from_dist_init_host_then_ansible_host_then_name():
    hv = hostvars(2, gpu1={"sglang_server_dist_init_host": "ib0.gpu1"}, gpu2={"sglang_server_dist_init_host": "ib0.gpu1"})
    assert {p["dist_init_addr"] for p in plans(hv).values()} == {f"ib0.gpu1:{PORT}"}
    hv = hostvars(2, gpu1={"ansible_host": ""})
    assert {p["dist_init_addr"] for p in plans(hv).values()} == {f"gpu1:{PORT}"}
    hv = hostvars(2, gpu1={"ansible_host": "fd00::11"})
    assert {p["dist_init_addr"] for p in plans(hv).values()} == {f"[fd00::11]:{PORT}"}
    hv = hostvars(2, **{h: {"sglang_server_dist_init_port": 29500} for h in ("gpu1", "gpu2")})
    assert {p["dist_init_addr"] for p in plans(hv).values()} == {"10.0.0.11:29500"}


def test_defaults_fill_what_a_host_lacks():
    hv = hostvars(2)
    for h in hv:
        del hv[h]["sglang_server_dist_init_port"], hv[h]["sglang_server_node_rank"]
    got = plans(hv, defaults={"sglang_server_dist_init_port": 12345, "sglang_server_node_rank": None})
    assert {p["dist_init_addr"] for p in got.values()} == {"10.0.0.11:12345"}


def test_single_node_without_a_group():
    plan = mn.sglang_multinode_plan({}, {}, "", "gpu1")
    assert plan["nnodes"] == 1 and plan["node_rank"] == 0 and plan["endpoint"] is True
    assert plan["dist_init_addr"] == "" and plan["members"] == [{"host": "gpu1", "rank": 0}]


ERRORS = [
    # (id, n, per-host overrides, group, groups override, expected message parts)
    ("group-missing", 2, {}, "nope", None, ["sglang_server_multinode_group", "no group 'nope'"]),
    ("group-empty", 2, {}, "llm", {"llm": []}, ["inventory group 'llm' is empty"]),
    ("host-not-in-group", 2, {}, "llm", {"llm": ["gpu2"]}, ["gpu1 is not a member of inventory group 'llm'"]),
    ("duplicate-explicit-ranks", 2, {"gpu1": {"sglang_server_node_rank": 1}}, "llm", None,
     ["gpu1 and gpu2 both have node rank 1", "sglang_server_node_rank"]),
    ("duplicate-rank-4-hosts", 4, {"gpu4": {"sglang_server_node_rank": 0}}, "llm", None,
     ["gpu1 and gpu4 both have node rank 0"]),
    ("rank-gap", 2, {"gpu2": {"sglang_server_node_rank": 2}}, "llm", None,
     ["node ranks must be exactly 0..1", "gpu1=0, gpu2=2"]),
    ("rank-negative", 2, {"gpu1": {"sglang_server_node_rank": -1}, "gpu2": {"sglang_server_node_rank": 0}}, "llm", None,
     ["node ranks must be exactly 0..1"]),
    ("rank-not-an-int", 2, {"gpu2": {"sglang_server_node_rank": "one"}}, "llm", None,
     ["sglang_server_node_rank of host gpu2 must be an integer"]),
    ("tp-disagrees", 2, {"gpu2": {"sglang_server_tp_size": 8}}, "llm", None,
     ["disagree on sglang_server_tp_size", "gpu1=16", "gpu2=8"]),
    ("model-disagrees", 2, {"gpu2": {"sglang_server_model_path": "other/model"}}, "llm", None,
     ["disagree on sglang_server_model_path", "other/model"]),
    ("port-disagrees", 4, {"gpu3": {"sglang_server_dist_init_port": 20001}}, "llm", None,
     ["disagree on sglang_server_dist_init_port", "gpu3=20001"]),
    ("dist-host-disagrees", 2, {"gpu2": {"sglang_server_dist_init_host": "10.9.9.9"}}, "llm", None,
     ["disagree on sglang_server_dist_init_host"]),
    ("tp-not-divisible-by-nodes", 4, {h: {"sglang_server_tp_size": 6} for h in ("gpu1", "gpu2", "gpu3", "gpu4")}, "llm",
     None, ["sglang_server_tp_size 6 is not divisible by its 4 nodes"]),
    ("tp-per-node-not-dividing-gpus", 2, {"gpu2": {"sglang_server_gpu_count": 4}}, "llm", None,
     ["16 / 2 = 8 GPUs per node does not divide sglang_server_gpu_count of host gpu2 (4)"]),
    ("tp-per-node-not-dividing-gpus-6", 2, {"gpu1": {"sglang_server_gpu_count": 12}}, "llm", None,
     ["sglang_server_gpu_count of host gpu1 (12)"]),
    ("member-names-another-group", 2, {"gpu2": {"sglang_server_multinode_group": ""}}, "llm", None,
     ["gpu2 is in inventory group 'llm' but its sglang_server_multinode_group is ''"]),
    ("port-out-of-range", 2, {h: {"sglang_server_dist_init_port": 70000} for h in ("gpu1", "gpu2")}, "llm", None,
     ["sglang_server_dist_init_port must be between 1 and 65535"]),
]


@pytest.mark.parametrize("n,per_host,group,groups,expect", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_plan_refuses_a_bad_group(n, per_host, group, groups, expect):
    hv = hostvars(n, **per_host)
    groups = groups if groups is not None else {"llm": list(hv)}
    with pytest.raises(mn.AnsibleFilterError) as err:
        mn.sglang_multinode_plan(hv, groups, group, "gpu1")
    for part in expect:
        assert part in str(err.value), str(err.value)


def test_plan_refuses_a_group_with_a_node_outside_the_play():
    hv = hostvars(4)
    with pytest.raises(mn.AnsibleFilterError, match=r"gpu3, gpu4 not in this play"):
        mn.sglang_multinode_plan(hv, {"llm": list(hv)}, "llm", "gpu1", play_hosts=["gpu1", "gpu2"])
    assert mn.sglang_multinode_plan(hv, {"llm": list(hv)}, "llm", "gpu1", play_hosts=list(hv))["nnodes"] == 4


def test_unready_nodes():
    ready = "__sglang_server_ready"
    hv = {"a": {ready: {"rc": 0}}, "b": {ready: {"rc": 1}}, "c": {}, "d": {ready: {"rc": 0}}}
    assert mn.sglang_multinode_unready(["a", "b", "c", "d"], hv, ["a", "b", "c"]) == ["b", "c", "d"]
    assert mn.sglang_multinode_unready(["a"], hv, ["a"]) == []


# --------------------------------------------------------------------------- 2. through Ansible

RENDER_PLAY = """\
---
- name: Validate and render every node's sglang_server files into a temporary directory
  hosts: {group}
  gather_facts: false
  tasks:
    - name: Run the role's validation (assertions and facts only)
      ansible.builtin.include_role:
        name: sglang_server
        tasks_from: validate
        public: true
      vars:
        sglang_server_tp_size: {tp}   # a role variable: hostvars does not show it to the other nodes

    - name: Render the unit
      ansible.builtin.template:
        src: {role}/templates/sglang-server.service.j2
        dest: "{out}/{{{{ inventory_hostname }}}}.service"
        mode: "0600"
      vars:
        sglang_server_tp_size: {tp}
        # What tasks/model.yml settles from the staged models (role sglang_model) on a real run.
        __sglang_server_model_dir: /srv/models/target/0123456789abcdef0123456789abcdef01234567
        __sglang_server_draft_dir: /srv/models/draft/0123456789abcdef0123456789abcdef01234567
        __sglang_server_model_name: moonshotai/Kimi-K2.5

    - name: Render the environment file
      ansible.builtin.template:
        src: {role}/templates/sglang-server.env.j2
        dest: "{out}/{{{{ inventory_hostname }}}}.env"
        mode: "0600"

    - name: Write the endpoint (recorded for other roles in ansible_local.sglang_server) and the plan
      ansible.builtin.copy:
        content: "{{{{ {{'endpoint': __sglang_server_endpoint, 'plan': __sglang_server_plan}} | to_json }}}}"
        dest: "{out}/{{{{ inventory_hostname }}}}.json"
        mode: "0600"
"""


def write_inventory(path: Path, hosts: list[tuple[str, dict]], group_vars: dict, group: str = "llm") -> None:
    lines = [f"[{group}]"]
    for name, hvars in hosts:
        lines.append(" ".join([name] + [f"{k}={v}" for k, v in hvars.items()]))
    lines.append(f"[{group}:vars]")
    lines += [f"{k}={v}" for k, v in group_vars.items()]
    lines += ["ansible_connection=local", f"ansible_python_interpreter={sys.executable}"]
    path.write_text("\n".join(lines) + "\n")


def ansible_playbook(inventory: Path, playbook: Path, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, **(env_extra or {}), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(["ansible-playbook", "-i", str(inventory), str(playbook), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def render(tmp_path: Path, hosts: list[tuple[str, dict]], group_vars: dict, tp: int) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out"
    out.mkdir()
    write_inventory(tmp_path / "hosts.ini", hosts, dict({"sglang_server_multinode_group": "llm"}, **group_vars))
    play = tmp_path / "render.yml"
    play.write_text(RENDER_PLAY.format(group="llm", tp=tp, role=ROLE, out=out))
    return ansible_playbook(tmp_path / "hosts.ini", play), out


def unit_args(unit: str) -> list[str]:
    """The server arguments of ExecStart, as the template quotes them (one per line)."""
    body = unit.split(" -- \\\n", 1)[1]
    args = []
    for line in body.splitlines():
        found = re.fullmatch(r'\s+"((?:[^"\\]|\\.)*)"( \\)?', line)
        if not found:
            break
        args.append(found.group(1))
        if not found.group(2):
            break
    return args


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


@pytest.mark.parametrize("n", [2, 4])
def test_rendered_units_of_a_group(tmp_path, n):
    # The head is the second host (explicit ranks): inventory order alone would pick gpu1.
    ranks = [1, 0] + list(range(2, n))
    hosts = [(f"gpu{i + 1}", {"ansible_host": f"10.1.0.{i + 1}", "sglang_server_node_rank": ranks[i]}) for i in range(n)]
    proc, out = render(tmp_path, hosts, {"sglang_server_nccl_socket_ifname": "eth1", "sglang_server_nccl_ib_hca": "mlx5_0"},
                       tp=8 * n)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    seen = {}
    for i, (name, _) in enumerate(hosts):
        unit = (out / f"{name}.service").read_text()
        args = unit_args(unit)
        assert flag(args, "--tp-size") == str(8 * n)
        assert flag(args, "--nnodes") == str(n), args
        assert flag(args, "--dist-init-addr") == f"10.1.0.2:{PORT}", args  # the head's ansible_host
        seen[name] = int(flag(args, "--node-rank"))
        assert f"node rank {ranks[i]} of {n} in group llm" in unit
        assert "DeviceAllow=char-infiniband_verbs rw" in unit
        env = (out / f"{name}.env").read_text()
        for line in ['NCCL_SOCKET_IFNAME="eth1"', 'GLOO_SOCKET_IFNAME="eth1"', 'NCCL_IB_HCA="mlx5_0"']:
            assert line in env.splitlines(), env
        facts = json.loads((out / f"{name}.json").read_text())
        assert facts["endpoint"]["serves_http"] is (ranks[i] == 0) and facts["endpoint"]["node_rank"] == ranks[i]
        assert facts["plan"]["head"] == "gpu2" and facts["plan"]["tp_per_node"] == 8
    assert seen == {name: ranks[i] for i, (name, _) in enumerate(hosts)}
    assert sorted(seen.values()) == list(range(n))


def test_rendered_unit_of_a_single_node_has_no_multinode_flags(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    write_inventory(tmp_path / "hosts.ini", [("gpu1", {})], {}, group="solo")
    play = tmp_path / "render.yml"
    play.write_text(RENDER_PLAY.format(group="solo", tp=8, role=ROLE, out=out))
    proc = ansible_playbook(tmp_path / "hosts.ini", play)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    unit = (out / "gpu1.service").read_text()
    args = unit_args(unit)
    assert flag(args, "--tp-size") == "8" and "--enable-metrics" in args
    # Kimi-K2.5's parsers, rendered by default for the reference model (sglang_server_model_module kimi_k25).
    assert flag(args, "--tool-call-parser") == flag(args, "--reasoning-parser") == "kimi_k2"
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(args)
    assert "infiniband" not in unit and "NCCL_SOCKET_IFNAME" not in (out / "gpu1.env").read_text()
    assert json.loads((out / "gpu1.json").read_text())["endpoint"]["serves_http"] is True
    # SGLang's own server by default, and the description names no other module.
    assert "/sglang_launch.py --module sglang.launch_server -- \\\n" in unit and " - module " not in unit


def test_rendered_unit_runs_the_launch_module_with_its_environment(tmp_path):
    """sglang_server_launch_module and sglang_server_launch_env: the module ExecStart's launcher runs,
    named in the description, and its environment written after sglang_server_env."""
    out = tmp_path / "out"
    out.mkdir()
    launch = {"sglang_server_launch_module": "site_wrapper.launch",
              "sglang_server_launch_env": '{"PYTHONPATH":"/opt/site","SITE_WRAPPER_TRACE":"1"}'}
    write_inventory(tmp_path / "hosts.ini", [("gpu1", {})], launch, group="solo")
    play = tmp_path / "render.yml"
    play.write_text(RENDER_PLAY.format(group="solo", tp=8, role=ROLE, out=out))
    proc = ansible_playbook(tmp_path / "hosts.ini", play)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    unit = (out / "gpu1.service").read_text()
    assert "/sglang_launch.py --module site_wrapper.launch -- \\\n" in unit
    assert unit.split("\nDescription=", 1)[1].splitlines()[0].endswith(" - module site_wrapper.launch")
    assert unit_args(unit)[:2] == ["--model-path", "/srv/models/target/0123456789abcdef0123456789abcdef01234567"]
    env = (out / "gpu1.env").read_text().splitlines()
    assert env.index('SGLANG_ENABLE_SPEC_V2="1"') < env.index('PYTHONPATH="/opt/site"') < env.index('SITE_WRAPPER_TRACE="1"')


BAD_INVENTORIES = [
    ("duplicate-ranks", [("gpu1", {"sglang_server_node_rank": 0}), ("gpu2", {"sglang_server_node_rank": 0})], {}, 16,
     "gpu1 and gpu2 both have node rank 0"),
    ("tp-not-divisible-by-nodes", [(f"gpu{i}", {}) for i in range(1, 5)], {}, 6,
     "sglang_server_tp_size 6 is not divisible by its 4 nodes"),
    ("tp-per-node-not-dividing-gpus", [("gpu1", {}), ("gpu2", {"sglang_server_gpu_count": 4})], {}, 16,
     "does not divide sglang_server_gpu_count of host gpu2 (4)"),
    ("model-disagrees", [("gpu1", {}), ("gpu2", {"sglang_server_model_path": "other/model"})], {}, 16,
     "disagree on sglang_server_model_path"),
    ("multinode-flags-in-extra-args", [("gpu1", {}), ("gpu2", {})], {"sglang_server_extra_args": '["--nnodes","2"]'}, 16,
     "sglang_server_extra_args must not carry --nnodes"),
    ("rendezvous-port-is-http-port", [("gpu1", {}), ("gpu2", {})], {"sglang_server_dist_init_port": 30000}, 16,
     "sglang_server_dist_init_port and sglang_server_port are both 30000"),
]


@pytest.mark.parametrize("hosts,group_vars,tp,expect", [b[1:] for b in BAD_INVENTORIES], ids=[b[0] for b in BAD_INVENTORIES])
def test_bad_inventory_fails_in_validation_on_every_node(tmp_path, hosts, group_vars, tp, expect):
    proc, out = render(tmp_path, hosts, group_vars, tp=tp)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-4000:]
    assert expect in text, text[-4000:]
    for name, _ in hosts:
        assert re.search(rf"^{name}\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", text, re.M), text[-3000:]
    assert list(out.iterdir()) == [], "something was rendered after a failed validation"


# --------------------------------------------------------------------------- 3. a real host

@pytest.fixture(scope="module")
def host(harness):
    h = TestHost("pytest-server-multinode", harness["image"], harness["mirror"]).start()
    yield h
    h.remove()


@pytest.mark.parametrize("case", ["duplicate-ranks", "tp-not-divisible-by-nodes"])
def test_bad_inventory_changes_nothing_on_a_real_host(host, tmp_path, case):
    """playbooks/server.yml, all of the role, over two inventory names of one container host."""

    hosts, tp, expect = {
        "duplicate-ranks": (["node-a rank=1", "node-b rank=1"], 16, "node-a and node-b both have node rank 1"),
        "tp-not-divisible-by-nodes": (["node-a", "node-b", "node-c"], 16,
                                      "sglang_server_tp_size 16 is not divisible by its 3 nodes"),
    }[case]
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    lines = ["[kimi]"]
    for spec in hosts:
        name, *rank = spec.split()
        lines.append(f"{name} ansible_connection=sglang_testhost ansible_host={host.name} "
                     "ansible_python_interpreter=/usr/bin/python3"
                     + (f" sglang_server_node_rank={rank[0].split('=')[1]}" if rank else ""))
    lines += ["[gpu_hosts:children]", "kimi", "[kimi:vars]", "sglang_server_multinode_group=kimi",
              f"sglang_server_tp_size={tp}"]
    (inventory / "hosts.ini").write_text("\n".join(lines) + "\n")
    (inventory / "group_vars").symlink_to(ROOT / "inventory" / "demo" / "group_vars")
    before = host.sh(SNAPSHOT).stdout
    proc = ansible_playbook(inventory, ROOT / "playbooks" / "server.yml", env_extra={"NVIDIA_MIRROR_DIR": str(host.mirror_dir)})
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-4000:]
    assert expect in text, text[-4000:]
    assert "changed=0" in text and not re.search(r"changed=[1-9]", text), text[-3000:]
    assert host.sh(SNAPSHOT).stdout == before, "the host changed"


# --------------------------------------------------------------------------- 4. a group of real hosts


# A real two-host group (head first, restart together, roll back together, back after both hosts
# restart) runs in molecule multihost, on its two GPU hosts (tests/molecule/multihost).
