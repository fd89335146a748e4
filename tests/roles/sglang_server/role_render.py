"""TEST ONLY: what role sglang_server renders for a release and a host, without a host or a play.

The role's own tables (defaults/main.yml, vars/main.yml, filter_plugins/) templated by Ansible's own
Templar, with the example inventory's settings (inventory/example/group_vars/gpu_hosts/sglang_server.yml),
the release's features (files/sglang_release_features.py on the release's real tree from PyPI) and
gpu_preflight's local fact as gpu_preflight's vars/main.yml renders it from the output of its own parsers
(library/gpu_preflight_facts.py, module_utils/gpu_preflight_pcie_*.py) on nvidia-smi's outputs.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import filter_loader
from ansible.template import Templar, trust_as_template

import sglang_sources
from repo import ROOT, load

SERVER = ROOT / "roles" / "sglang_server"
PREFLIGHT = ROOT / "roles" / "gpu_preflight"
EXAMPLE = ROOT / "inventory" / "example" / "group_vars" / "gpu_hosts" / "sglang_server.yml"
SDIST_RELEASES = ("0.5.9", "0.5.10")  # the later ones publish wheels only
# The files of the sglang package the features tool reads.
FEATURE_FILES = ("_version.py", "srt/environ.py", "srt/server_args.py", "srt/arg_groups/fields/",
                 "srt/distributed/device_communicators/pcie_ipc_ar.py")
# What the role's own tasks set before rendering (tasks/model.yml, validate.yml): a single node.
TASK_FACTS = {"__sglang_server_model_dir": "/var/lib/sglang/models/target",
              "__sglang_server_draft_dir": "/var/lib/sglang/models/draft",
              "__sglang_server_model_name": "moonshotai/Kimi-K2.5",
              "__sglang_server_plan": {"nnodes": 1, "node_rank": 0, "dist_init_addr": ""},
              "sglang_common_release_root": "/opt/sglang", "vault_sglang_api_key": ""}

features_tool = load(SERVER / "files" / "sglang_release_features.py")
preflight_facts = load(PREFLIGHT / "library" / "gpu_preflight_facts.py")
pcie_parse = load(PREFLIGHT / "module_utils" / "gpu_preflight_pcie_parse.py")
pcie_findings = load(PREFLIGHT / "module_utils" / "gpu_preflight_pcie_findings.py")  # imports the parser by name
filter_loader.add_directory(str(SERVER / "filter_plugins"))


def trust(value: Any) -> Any:
    """Strings of the role's YAML are templates (Ansible trusts what it loads from a role or an inventory)."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: trust(v) for k, v in value.items()}
    if isinstance(value, list):
        return [trust(v) for v in value]
    return value


def yaml_file(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def render(variables: dict, *names: str) -> dict:
    templar = Templar(loader=DataLoader(), variables=trust(variables))
    return {name: templar.template(trust_as_template("{{ %s }}" % name)) for name in names}


def release_tree(version: str, dest: Path) -> Path:
    """The files of release `version`'s sglang package the features tool reads, from its PyPI sdist (0.5.9,
    0.5.10) or its Python 3.11 wheel (later), under dest/sglang."""
    wanted = lambda member: any(member == f or (f.endswith("/") and member.startswith(f)) for f in FEATURE_FILES)  # noqa: E731
    if version in SDIST_RELEASES:
        with tarfile.open(sglang_sources.sdist(version)) as tar:
            prefix = f"sglang-{version}/sglang/"
            for member in tar.getmembers():
                if member.isfile() and member.name.startswith(prefix) and wanted(member.name[len(prefix):]):
                    target = dest / "sglang" / member.name[len(prefix):]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(member).read())
    else:
        with zipfile.ZipFile(sglang_sources.wheel(version, "3.11")) as whl:
            for member in whl.namelist():
                if member.startswith("sglang/") and not member.endswith("/") and wanted(member[len("sglang/"):]):
                    target = dest / member
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(whl.read(member))
    return dest / "sglang"


def features(version: str, tmp: Path) -> dict:
    """What the features tool reports on release `version`'s real tree."""
    return features_tool.features(release_tree(version, tmp / f"sglang-{version}"))


def nvidia_smi_matrix(n: int, cell, affinity: bool = True) -> str:
    """An `nvidia-smi topo -m` matrix of n GPUs (affinity: its CPU and NUMA columns, two NUMA nodes) or a
    `topo -p2p` one (affinity False), in nvidia-smi's format (tab-separated, the header's first cell empty),
    cell(a, b) for each pair a < b."""
    extra = "\tCPU Affinity\tNUMA Affinity" if affinity else ""
    lines = ["\t" + "\t".join(f"GPU{i}" for i in range(n)) + extra]
    for a in range(n):
        cells = "\t".join("X" if a == b else cell(min(a, b), max(a, b)) for b in range(n))
        node = 0 if a < n // 2 else 1
        lines.append(f"GPU{a}\t{cells}" + (f"\t{node * 32}-{node * 32 + 31}\t{node}" if affinity else ""))
    return "\n".join(lines) + "\n"


def preflight_fact(gpus_csv: str, topo_m: str, p2p_r: str | None = None, p2p_w: str | None = None,
                   fix_p2p_disable: bool = False) -> dict:
    """ansible_local.gpu_preflight as gpu_preflight writes it (its vars/main.yml __gpu_preflight_fact), from
    nvidia-smi's outputs through its parsers: --query-gpu's CSV, topo -m, topo -p2p r and w (no finding)."""
    gpus = preflight_facts.parse_gpus(gpus_csv)
    topology = preflight_facts.parse_topology(topo_m)
    reads = pcie_parse.parse_p2p_matrix(p2p_r) if p2p_r is not None else {}
    writes = pcie_parse.parse_p2p_matrix(p2p_w) if p2p_w is not None else {}
    pairs = [{"a": a, "b": b, "p2p": {"r": reads.get((a, b)), "w": writes.get((a, b))},
              "na": {f"p2p_{m}": f"nvidia-smi topo -p2p {m}: not recorded" for m, got in (("r", reads), ("w", writes))
                     if (a, b) not in got}}
             for a in range(len(gpus)) for b in range(a + 1, len(gpus))]
    variables = {**yaml_file(PREFLIGHT / "defaults" / "main.yml"), **yaml_file(PREFLIGHT / "vars" / "main.yml"),
                 "gpu_preflight_fix_nccl_p2p_disable": fix_p2p_disable,
                 "__gpu_preflight_gpus": {"gpu_preflight": {"gpus": gpus, "topology": topology}},
                 "__gpu_preflight_pcie": {"pcie": {"peer_to_peer": pcie_findings.peer_to_peer(pairs, [])}}}
    return render(variables, "__gpu_preflight_fact")["__gpu_preflight_fact"]


def rtx_pro_6000(n: int) -> str:
    """`nvidia-smi --query-gpu=<CORE_FIELDS> --format=csv,noheader,nounits` of n RTX PRO 6000 (SM120)."""
    return "".join(f"{i}, NVIDIA RTX PRO 6000 Blackwell Server Edition, GPU-{i:08d}-0000-0000-0000-000000000000, "
                   f"12.0, 97887, 0, 580.95.05, Enabled, 00000000:{0x18 + i:02X}:00.0\n" for i in range(n))


def server(features_of_release: dict, fact: dict | None = None, **settings) -> dict:
    """The server's argv, environment, launch-check settings and PCIe IPC decision as the role renders them for
    this release (its features) on a host with this gpu_preflight fact (None: the preflight never ran), with the
    example inventory's settings and `settings` over them."""
    variables = {**yaml_file(SERVER / "defaults" / "main.yml"), **yaml_file(EXAMPLE), **settings,
                 **yaml_file(SERVER / "vars" / "main.yml"), **TASK_FACTS,
                 "__sglang_server_release_features": features_of_release,
                 "ansible_facts": {"ansible_local": {"gpu_preflight": fact} if fact is not None else {}}}
    out = render(variables, "__sglang_server_argv", "__sglang_server_env", "__sglang_server_settings",
                 "__sglang_server_pcie_allreduce")
    return {"argv": out["__sglang_server_argv"], "env": out["__sglang_server_env"],
            "settings": out["__sglang_server_settings"], "pcie": out["__sglang_server_pcie_allreduce"]}


def recorded(path: Path) -> str:
    """A recorded output without the '# $ command' line the capture script puts first."""
    return "".join(line for line in io.StringIO(path.read_text()) if not line.startswith("# $ "))


def release_member(version: str, member: str) -> str | None:
    """A file of release `version`'s sglang package (path inside the package), or None where it has none."""
    if version in SDIST_RELEASES:
        with tarfile.open(sglang_sources.sdist(version)) as tar:
            try:
                return tar.extractfile(f"sglang-{version}/sglang/{member}").read().decode()
            except KeyError:
                return None
    with zipfile.ZipFile(sglang_sources.wheel(version, "3.11")) as whl:
        try:
            return whl.read(f"sglang/{member}").decode()
        except KeyError:
            return None
