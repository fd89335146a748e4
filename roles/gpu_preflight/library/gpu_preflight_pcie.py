#!/usr/bin/python
"""Ansible module: the PCIe platform of a GPU host, per GPU and per pair, with named findings.

Read-only (supports check mode, never reports a change). What breaks hosts of PCIe GPUs in
the field is the platform, not the software: ACS or an IOMMU in translation mode between
GPUs (NCCL's P2P hangs or crawls), links trained down, a small BAR1, ASPM and link drops.
This module gathers (lspci, nvidia-smi -q and topo -p2p, /sys, /proc/cmdline, the kernel
log); parsing and judging live in module_utils (gpu_preflight_pcie_parse,
gpu_preflight_pcie_findings), unit-tested on outputs recorded on real machines.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_preflight_pcie
short_description: PCIe platform of a GPU host (links, BAR1, NUMA, ACS, IOMMU, ASPM, P2P), with findings and fixes
description:
  - Reads C(lspci -vvv -nn -D), C(nvidia-smi -q), C(nvidia-smi topo -p2p r|w|n|a|p), /sys/bus/pci/devices,
    /sys/class/iommu, /sys/kernel/iommu_groups, the ASPM policy, /proc/cmdline and the kernel log.
  - Reports per GPU (link generation and width current against maximum, BAR1, NUMA node, IOMMU domain, ASPM,
    persistence, ECC, retired pages and remapped rows, AER counts, Xid history) and per pair (topology, the P2P
    matrix, the bridges between them and their ACS state), each field filled or null with its reason.
  - Returns one check per named finding and the kernel parameters of the fixes asked for.
options:
  gpus:
    description: The GPUs, as gpu_preflight_facts lists them (index, pci_bus_id).
    type: list
    elements: dict
    required: true
  topology_links:
    description: The GPU pairs and link types of C(nvidia-smi topo -m) (a, b, type).
    type: list
    elements: dict
    default: []
  nvidia_smi:
    description: nvidia-smi program.
    type: str
    default: nvidia-smi
  lspci:
    description: lspci program.
    type: str
    default: lspci
  ignore:
    description: Finding names whose errors are recorded as warnings.
    type: list
    elements: str
    default: []
  fixes:
    description: The fix variables of the role and their values (gpu_preflight_fix_*).
    type: dict
    default: {}
author: sglang-ansible
"""

RETURN = r"""
pcie:
  description: >-
    gpus, pairs, platform, findings, na (catalogue name -> why not judged), p2p_suspect, peer_to_peer (whether
    the GPUs reach each other directly: status ok, not_ok, in_doubt, unknown or n/a, and why), kernel_params, sources.
  returned: always
  type: dict
checks:
  description: One check per catalogue finding (phase pcie; pass, fail, warn or n/a).
  returned: always
  type: list
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu_preflight_pcie_findings import (
    FINDINGS,
    assemble,
    checks,
    find,
    kernel_params,
    p2p_suspect,
    params_in_effect,
    peer_to_peer,
    summary_lines,
)
from ansible.module_utils.gpu_preflight_pcie_parse import (
    norm_bdf,
    parse_kernel_log,
    parse_lspci,
    parse_p2p_matrix,
    parse_smi_q,
    read_sysfs,
    smi_gpu,
)


def program(module: AnsibleModule, name: str):
    path = name if "/" in name else module.get_bin_path(name)
    return path if path and os.access(path, os.X_OK) else None


def run(module: AnsibleModule, argv: list[str]) -> tuple[str | None, str | None]:
    """(stdout, None) or (None, why it failed)."""
    rc, out, err = module.run_command(argv)
    if rc != 0:
        return None, ("rc=%d: %s" % (rc, (err or out).strip()[:200]))
    return out, None


def gather(module: AnsibleModule) -> dict:
    p = module.params
    gpus = [{"index": int(g["index"]), "bus_id": norm_bdf(str(g["pci_bus_id"])) or str(g["pci_bus_id"])}
            for g in p["gpus"]]
    raw = {"gpus": gpus, "topology_links": p["topology_links"], "sources": {}}
    smi = program(module, p["nvidia_smi"])
    lspci = program(module, p["lspci"])
    if lspci:
        out, raw["lspci_error"] = run(module, [lspci, "-vvv", "-nn", "-D"])
        raw["lspci"] = parse_lspci(out) if out is not None else None
    else:
        raw["lspci"], raw["lspci_error"] = None, "%s not installed (package pciutils)" % p["lspci"]
    if smi:
        out, raw["smi_error"] = run(module, [smi, "-q"])
        raw["smi"] = {bdf: smi_gpu(fields) for bdf, fields in parse_smi_q(out).items()} if out is not None else None
        if raw["smi"] == {}:
            raw["smi"], raw["smi_error"] = None, "printed no GPU section"
        raw["p2p"], raw["p2p_errors"] = {}, {}
        for mode in ("r", "w", "n", "a", "p"):
            if len(gpus) < 2:
                raw["p2p_errors"][mode] = "1 GPU: no pair"
                continue
            out, err = run(module, [smi, "topo", "-p2p", mode])
            if out is not None:
                raw["p2p"][mode] = parse_p2p_matrix(out)
            else:
                raw["p2p_errors"][mode] = err
    else:
        raw["smi"], raw["smi_error"] = None, "%s not found" % p["nvidia_smi"]
        raw["p2p"], raw["p2p_errors"] = {}, {m: raw["smi_error"] for m in "rwnap"}
    dmesg = module.get_bin_path("dmesg")
    if dmesg:
        out, raw["kernel_log_error"] = run(module, [dmesg])
        raw["kernel_log"] = parse_kernel_log(out) if out is not None else None
    else:
        raw["kernel_log"], raw["kernel_log_error"] = None, "dmesg not found"
    raw["sysfs"] = read_sysfs("/", [g["bus_id"] for g in gpus])
    raw["sources"] = {"lspci": raw.get("lspci_error") or "read", "nvidia_smi_q": raw.get("smi_error") or "read",
                      "kernel_log": raw.get("kernel_log_error") or "read",
                      "topo_p2p": raw["p2p_errors"] or "read", "sysfs": "read"}
    return raw


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gpus": {"type": "list", "elements": "dict", "required": True},
            "topology_links": {"type": "list", "elements": "dict", "default": []},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "lspci": {"type": "str", "default": "lspci"},
            "ignore": {"type": "list", "elements": "str", "default": []},
            "fixes": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    unknown = sorted(set(module.params["ignore"]) - set(FINDINGS))
    if unknown:
        module.fail_json(msg="unknown finding name(s) %s; known: %s" % (unknown, sorted(FINDINGS)))
    raw = gather(module)
    record = assemble(raw)
    found, na = find(record)
    params = kernel_params(module.params["fixes"], record["pairs"])
    record.update(findings=found, na=na, p2p_suspect=p2p_suspect(found), peer_to_peer=peer_to_peer(record["pairs"], found),
                  sources=raw["sources"],
                  summary=summary_lines(record), kernel_params=params_in_effect(params, record["platform"]["cmdline"]))
    module.exit_json(changed=False, pcie=record,
                     checks=checks(found, na, module.params["ignore"], module.params["fixes"]))


if __name__ == "__main__":
    main()
