#!/usr/bin/python
"""Ansible module: write the preflight report and decide pass or fail.

Why a module and not a copy task: a preflight measures, and measurements differ on every
run (free disk, microseconds, GB/s). Writing them must not make every run "changed", or a
converged host never reruns with changed=0; reporting "ok" for a verdict that flipped from
passed to failed would hide what matters. So the report carries a ``decision`` section that
holds only what was decided: every check's phase, name, status and expectation, the GPUs'
identity and the NCCL step's status and reason. The module reports changed exactly when
that section differs from the one in the file on the host; the file itself always holds
the latest measurements. Check mode writes nothing and says whether the decision would
change; diff mode shows the decision sections.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_preflight_report
short_description: Write the GPU preflight report; changed only when its decision changed
description:
  - Adds C(result) (passed or failed) and C(decision) to I(report) and writes it as JSON to I(path) (mode 0644).
  - Reports changed only when the decision differs from the one already in I(path).
options:
  path:
    description: Report file on the host.
    type: path
    required: true
  report:
    description: The report (checks, inventory, host, nccl sections and measurements).
    type: dict
    required: true
author: sglang-ansible
"""

RETURN = r"""
report:
  description: The report as written, with result and decision.
  returned: always
  type: dict
failures:
  description: The message of every failed check.
  returned: always
  type: list
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def failures(report: dict) -> list[str]:
    """The messages of every failed check, inventory first, then PCIe, host, NCCL."""
    msgs = ["%s/%s: %s" % (c["phase"], c["name"], c["message"]) for c in report.get("checks", []) if c["status"] == "fail"]
    nccl = report.get("nccl") or {}
    if nccl.get("status") == "failed" and not any(c["status"] == "fail" for c in nccl.get("checks", [])):
        msgs.append("nccl/all_reduce: %s" % nccl.get("reason"))
    msgs.extend("nccl/%s: %s" % (c["name"], c["message"]) for c in nccl.get("checks", []) if c["status"] == "fail")
    return msgs


def decision(report: dict) -> dict:
    """What was decided, without what was measured: equal on every run of an unchanged, healthy host."""
    inv = report.get("inventory") or {}
    nccl = report.get("nccl") or {}
    return {
        "result": "failed" if failures(report) else "passed",
        "phases": sorted(report.get("phases", [])),
        "checks": [{k: c[k] for k in ("phase", "name", "status", "expected")}
                   for c in report.get("checks", []) + nccl.get("checks", [])],
        "gpus": [{k: g.get(k) for k in ("index", "name", "uuid", "compute_cap", "memory_total_mib", "driver_version",
                                        "pci_bus_id")} for g in inv.get("gpus", [])],
        "interconnect": (inv.get("topology") or {}).get("interconnect"),
        "nccl": {"status": nccl.get("status"), "reason": nccl.get("reason") if nccl.get("status") != "failed" else None,
                 "world_size": nccl.get("world_size")},
    }


def measured(report: dict) -> str | None:
    """What the all-reduce measured on this host, in words: the consequence each PCIe finding is read against."""
    nccl = report.get("nccl") or {}
    rows = nccl.get("results") or []
    if not rows:
        return "not measured: %s" % (nccl.get("reason") or "the NCCL step did not run") if report.get("pcie") else None
    small, large = rows[0], rows[-1]
    text = "%d GPU(s): %d B in %s us (%s), %d B at %s GB/s bus bandwidth" % (
        nccl.get("world_size") or 0, small["bytes"], small["latency_us"], small["timing"], large["bytes"], large["busbw_gbps"])
    if (nccl.get("world_size") or 0) < 2:
        text += " (1 GPU: no link crossed, the figures only show that NCCL runs)"
    comparison = nccl.get("p2p_comparison")
    return text + ("; " + comparison["summary"] if comparison else "")


def attach_measured(report: dict) -> None:
    """Each PCIe finding carries the measured all-reduce figures (measurements: not part of the decision)."""
    pcie = report.get("pcie")
    if not pcie:
        return
    pcie["measured"] = measured(report)
    for finding in pcie.get("findings", []):
        finding["measured"] = pcie["measured"]


def render(report: dict) -> str:
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


def previous_decision(path: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh).get("decision")
    except (OSError, ValueError, AttributeError):
        return None


def main() -> None:
    module = AnsibleModule(argument_spec={"path": {"type": "path", "required": True},
                                          "report": {"type": "dict", "required": True}},
                           supports_check_mode=True)
    path, report = module.params["path"], dict(module.params["report"])
    attach_measured(report)
    report["decision"] = decision(report)
    report["result"] = report["decision"]["result"]
    report["failures"] = failures(report)
    before = previous_decision(path)
    changed = before != report["decision"]
    result = {"changed": changed, "report": report, "failures": report["failures"]}
    if module._diff:
        result["diff"] = {"before": json.dumps(before, indent=2, sort_keys=True) + "\n" if before else "",
                          "after": json.dumps(report["decision"], indent=2, sort_keys=True) + "\n",
                          "before_header": path + " (decision)", "after_header": path + " (decision)"}
    if not module.check_mode:
        directory = os.path.dirname(path) or "."
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".report-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(render(report))
        os.chmod(tmp, 0o644)
        module.atomic_move(tmp, path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
