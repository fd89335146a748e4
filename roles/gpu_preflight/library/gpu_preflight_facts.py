#!/usr/bin/python
"""Ansible module: what a GPU host has now, compared with what the inventory expects.

Read-only (supports check mode, never reports a change). Loading Kimi-K2.5 takes 8-10
minutes; a GPU that is missing, of the wrong kind, with pending ECC repairs, or a host
without disk, RAM or /dev/shm for the model must be found before that, with a message
that names what differs. This module gathers (nvidia-smi, the kernel log, statvfs,
/proc/meminfo), parses and decides; the parsers and deciders are plain functions so
that they are unit-tested on outputs recorded on real GPUs.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_preflight_facts
short_description: GPU inventory and host capacity of a GPU server, checked against expectations
description:
  - I(phase=inventory) reads C(nvidia-smi --query-gpu) (count, name, compute capability, memory, driver,
    persistence mode, and where reported ECC mode and errors, retired pages, remapped rows, PCIe link),
    C(nvidia-smi topo -m) (NVLink or PCIe between GPUs), C(nvidia-smi topo -p2p r) (peer reads, recorded),
    C(nvidia-smi nvlink -s) (link speeds) and the kernel log (NVIDIA Xid errors), and compares them with I(expect).
  - I(phase=host) reads the free disk space for the model, the RAM and the size of /dev/shm and
    compares them with I(expect).
  - Fields an nvidia-smi does not know are recorded as not reported, never guessed.
options:
  phase:
    description: What to gather and check.
    type: str
    choices: [inventory, host]
    required: true
  expect:
    description: The expectations (see the role's README); keys not given are not checked.
    type: dict
    default: {}
  nvidia_smi:
    description: nvidia-smi program to ask.
    type: str
    default: nvidia-smi
  model_path:
    description: Directory that holds (or will hold) the model; its nearest existing parent is measured.
    type: path
    default: /srv/models
  shm_path:
    description: The shared-memory file system NCCL and the server use.
    type: path
    default: /dev/shm
author: sglang-ansible
"""

RETURN = r"""
gpu_preflight:
  description: The gathered facts of the phase (inventory, or host).
  returned: always
  type: dict
checks:
  description: One entry per check, with phase, name, status (pass, fail, n/a), expected, found and message.
  returned: always
  type: list
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule

CORE_FIELDS = ["index", "name", "uuid", "compute_cap", "memory.total", "memory.used", "driver_version",
               "persistence_mode", "pci.bus_id"]
# Health and link fields: not every driver or GPU reports each one, so they are asked for
# separately and a field nvidia-smi rejects is recorded as not reported.
HEALTH_FIELDS = ["ecc.mode.current", "ecc.errors.uncorrected.volatile.total",
                 "ecc.errors.uncorrected.aggregate.total", "retired_pages.pending",
                 "remapped_rows.pending", "remapped_rows.failure",
                 "pcie.link.gen.max", "pcie.link.gen.current", "pcie.link.width.max", "pcie.link.width.current"]
NOT_REPORTED = {"", "n/a", "[n/a]", "not supported", "[not supported]", "[unknown error]", "unknown error",
                "[insufficient permissions]", "[gpu requires reset]"}
PCIE_LINK_TYPES = {"SYS", "NODE", "PHB", "PXB", "PIX", "SOC", "PCI"}
# GB/s per lane and direction after line coding (8b/10b up to gen 2, 128b/130b from gen 3 on).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # nvidia-smi underlines topo's header even into a pipe
XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)(?:, (.*))?")


def scalar(text: str):
    """An nvidia-smi cell: None when not reported, int when integral, else the stripped string."""
    value = text.strip()
    if value.lower() in NOT_REPORTED:
        return None
    if re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    return value


def parse_csv_rows(text: str, fields: list[str]) -> list[dict]:
    """Rows of ``--query-gpu=FIELDS --format=csv,noheader,nounits`` as dicts of raw strings."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != len(fields):
            raise ValueError("unexpected nvidia-smi line (%d fields, want %d): %r" % (len(cols), len(fields), line))
        rows.append(dict(zip(fields, cols, strict=True)))
    return rows


def parse_gpus(text: str) -> list[dict]:
    """The core inventory, from a CSV of CORE_FIELDS."""
    gpus = []
    for row in parse_csv_rows(text, CORE_FIELDS):
        total, used = scalar(row["memory.total"]), scalar(row["memory.used"])
        gpus.append({
            "index": int(row["index"]),
            "name": row["name"],
            "uuid": row["uuid"],
            "compute_cap": row["compute_cap"],
            "memory_total_mib": total if isinstance(total, int) else None,
            "memory_used_mib": used if isinstance(used, int) else None,
            "driver_version": row["driver_version"],
            "persistence_mode": row["persistence_mode"],
            "pci_bus_id": row["pci.bus_id"],
        })
    return gpus


def parse_health(text: str, fields: list[str]) -> dict[int, dict]:
    """Health fields by GPU index, from a CSV of ``index`` + FIELDS; keys are the field names with '_' for '.'."""
    health = {}
    for row in parse_csv_rows(text, ["index"] + fields):
        health[int(row["index"])] = {f.replace(".", "_"): scalar(row[f]) for f in fields}
    return health


def parse_matrix(text: str) -> tuple[list[str], dict, dict]:
    """A GPU-by-GPU matrix of ``nvidia-smi topo`` (-m or -p2p): row labels, {(a, b): cell} for a < b, and
    the cells after the device columns of each row (CPU and NUMA affinity in ``topo -m``)."""
    lines = [ln for ln in ANSI_RE.sub("", text).splitlines() if ln.strip()]
    # The header row names the columns and has an empty first cell; the GPU rows start with their name.
    header = next((ln for ln in lines if re.search(r"\bGPU0\b", ln) and ln.split("\t")[0].strip() == ""), None)
    if header is None:
        return [], {}, {}
    columns = [c.strip() for c in header.split("\t")]
    columns = [c for c in columns if re.fullmatch(r"(GPU|NIC)[0-9]+", c)]
    gpus, pairs, rest = [], {}, {}
    for line in lines:
        cells = line.split("\t")
        label = cells[0].strip()
        if not re.fullmatch(r"GPU[0-9]+", label):
            continue
        gpus.append(label)
        rest[label] = [c.strip() for c in cells[1 + len(columns):]]
        for col, value in zip(columns, [c.strip() for c in cells[1:1 + len(columns)]], strict=False):
            if col.startswith("GPU") and int(col[3:]) > int(label[3:]):
                pairs[(int(label[3:]), int(col[3:]))] = value
    return gpus, pairs, rest


def parse_topology(text: str) -> dict:
    """``nvidia-smi topo -m``: the link type between every pair of GPUs and what they add up to.

    interconnect is 'nvlink' when every pair is joined by NVLink (NV#), 'pcie' when none is,
    'mixed' otherwise, 'none' for a single GPU and 'unknown' when the matrix cannot be read.
    """
    gpus, pairs, rest = parse_matrix(text)
    links = [{"a": a, "b": b, "type": t} for (a, b), t in sorted(pairs.items())]
    types = sorted(set(pairs.values()))
    nv = [t for t in types if t.startswith("NV")]
    if not gpus:
        interconnect = "unknown"
    elif len(gpus) == 1:
        interconnect = "none"
    elif len(pairs) != len(gpus) * (len(gpus) - 1) // 2:
        interconnect = "unknown"
    elif len(nv) == len(types):
        interconnect = "nvlink"
    elif not nv and all(t in PCIE_LINK_TYPES for t in types):
        interconnect = "pcie"
    else:
        interconnect = "mixed" if nv else "unknown"
    affinity = {g: {"cpu": r[0] if r else None, "numa": r[1] if len(r) > 1 else None} for g, r in rest.items()}
    return {"gpus": gpus, "links": links, "interconnect": interconnect, "link_types": types, "affinity": affinity}


def parse_p2p(text: str) -> dict:
    """``nvidia-smi topo -p2p r``: whether every pair of GPUs can read each other's memory directly (OK),
    which NCCL needs for its fast P2P transport; otherwise it goes through host memory."""
    gpus, pairs, _ = parse_matrix(text)
    if len(gpus) < 2:
        return {"all_ok": None, "not_ok": []}
    not_ok = ["GPU%d-GPU%d: %s" % (a, b, v) for (a, b), v in sorted(pairs.items()) if v != "OK"]
    return {"all_ok": not not_ok and bool(pairs), "not_ok": not_ok}


def parse_nvlink_status(text: str) -> dict[int, dict]:
    """``nvidia-smi nvlink -s``: per GPU, each link's speed (GB/s, None when inactive) and their sum."""
    result: dict[int, dict] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"GPU ([0-9]+):", line)
        if m:
            current = int(m.group(1))
            result[current] = {"links": {}, "active": 0, "gbps": 0.0}
            continue
        m = re.match(r"\s*Link ([0-9]+):\s*(.*)$", line)
        if m and current is not None:
            speed = re.match(r"([0-9.]+) GB/s", m.group(2).strip())
            gbps = float(speed.group(1)) if speed else None
            entry = result[current]
            entry["links"][int(m.group(1))] = gbps
            if gbps:
                entry["active"] += 1
                entry["gbps"] = round(entry["gbps"] + gbps, 3)
    return result


def parse_xids(text: str) -> list[dict]:
    """NVIDIA Xid events in a kernel log ('NVRM: Xid (PCI:0000:18:00): 79, pid=..., GPU has fallen off the bus.')."""
    events = []
    for line in text.splitlines():
        m = XID_RE.search(line)
        if m:
            events.append({"pci": m.group(1), "xid": int(m.group(2)), "text": (m.group(3) or "").strip()[:200]})
    return events


def pcie_nominal_gbps(gen, width) -> float | None:
    """Nominal PCIe bandwidth per direction in GB/s for a link generation and width."""
    if not isinstance(gen, int) or not isinstance(width, int) or gen not in PCIE_LANE_GBPS:
        return None
    return round(PCIE_LANE_GBPS[gen] * width, 1)


def version_tuple(version: str) -> tuple:
    return tuple(int(p) for p in re.findall(r"[0-9]+", version or ""))


def nominal_link(inventory: dict) -> dict:
    """The nominal GPU-to-GPU bandwidth per direction: NVLink as nvidia-smi reports it, else the PCIe link."""
    topo = inventory.get("topology", {})
    nvlink = inventory.get("nvlink", {})
    if topo.get("interconnect") in ("nvlink", "mixed") and nvlink:
        per_gpu = [v["gbps"] for v in nvlink.values() if v.get("active")]
        if per_gpu:
            links = min(v["active"] for v in nvlink.values() if v.get("active"))
            return {"kind": "nvlink", "gbps": min(per_gpu), "basis": "%d active NVLink links per GPU, sum of "
                    "the per-link speeds nvidia-smi nvlink -s reports (slowest GPU)" % links}
    widths = [(g.get("pcie_link_gen_max"), g.get("pcie_link_width_max")) for g in inventory.get("health", {}).values()]
    speeds = [pcie_nominal_gbps(gen, width) for gen, width in widths]
    speeds = [s for s in speeds if s]
    if speeds:
        gen, width = min((w for w in widths if pcie_nominal_gbps(*w)), key=lambda w: pcie_nominal_gbps(*w))
        return {"kind": "pcie", "gbps": min(speeds), "basis": "PCIe gen %s x%s (pcie.link.gen.max, pcie.link.width.max), "
                "slowest GPU" % (gen, width)}
    return {"kind": topo.get("interconnect", "unknown"), "gbps": None, "basis": "not reported"}


def check(phase: str, name: str, status: str, expected, found, message: str) -> dict:
    return {"phase": phase, "name": name, "status": status, "expected": expected, "found": found, "message": message}


def evaluate_inventory(inv: dict, expect: dict) -> list[dict]:
    """Compare a gathered inventory with the expectations; one check per property, each naming what differs."""
    def c(name, ok, expected, found, message):
        return check("inventory", name, "n/a" if ok is None else ("pass" if ok else "fail"), expected, found, message)

    if inv.get("error"):
        return [c("nvidia_smi", False, "nvidia-smi answers", inv["error"],
                  "nvidia-smi did not answer: %s" % inv["error"])]
    gpus = inv.get("gpus", [])
    health = inv.get("health", {})
    checks = []

    def per_gpu(field):
        return ", ".join("GPU %d: %s" % (g["index"], g.get(field)) for g in gpus)

    if "gpu_count" in expect:
        want = int(expect["gpu_count"])
        found = ", ".join("%d %s (%s)" % (g["index"], g["name"], g["pci_bus_id"]) for g in gpus) or "none"
        checks.append(c("gpu_count", len(gpus) == want, want, len(gpus),
                        "expected %d GPU(s) (gpu_preflight_expected_gpu_count), nvidia-smi lists %d: %s"
                        % (want, len(gpus), found)))
    if expect.get("gpu_name"):
        bad = [g for g in gpus if not re.search(expect["gpu_name"], g["name"])]
        names = sorted({g["name"] for g in gpus})
        checks.append(c("gpu_name", bool(gpus) and not bad, expect["gpu_name"], names,
                        "every GPU's name must match '%s' (gpu_preflight_expected_gpu_name); %s"
                        % (expect["gpu_name"], "differs: " + ", ".join("GPU %d is %s" % (g["index"], g["name"]) for g in bad)
                           if bad else "found %s" % (", ".join(names) or "no GPU"))))
    if expect.get("compute_capability"):
        bad = [g for g in gpus if g["compute_cap"] != expect["compute_capability"]]
        checks.append(c("compute_capability", bool(gpus) and not bad, expect["compute_capability"],
                        sorted({g["compute_cap"] for g in gpus}),
                        "expected compute capability %s on every GPU (gpu_preflight_expected_compute_capability), found %s"
                        % (expect["compute_capability"], per_gpu("compute_cap") or "no GPU")))
    if expect.get("min_memory_mib"):
        want = int(expect["min_memory_mib"])
        bad = [g for g in gpus if (g["memory_total_mib"] or 0) < want]
        checks.append(c("gpu_memory", bool(gpus) and not bad, ">= %d MiB" % want,
                        sorted({g["memory_total_mib"] for g in gpus}, key=str),
                        "every GPU needs at least %d MiB (gpu_preflight_min_gpu_memory_mib)%s"
                        % (want, "; too small: " + ", ".join("GPU %d has %s MiB" % (g["index"], g["memory_total_mib"])
                                                             for g in bad) if bad else "")))
    if expect.get("min_driver_version"):
        want = expect["min_driver_version"]
        versions = sorted({g["driver_version"] for g in gpus})
        ok = bool(versions) and all(version_tuple(v) >= version_tuple(want) for v in versions)
        checks.append(c("driver_version", ok, ">= " + want, versions,
                        "driver %s, gpu_preflight_min_driver_version is %s" % (", ".join(versions) or "unknown", want)))
    if expect.get("persistence_mode"):
        bad = [g for g in gpus if g["persistence_mode"] != "Enabled"]
        checks.append(c("persistence_mode", bool(gpus) and not bad, "Enabled",
                        sorted({g["persistence_mode"] for g in gpus}),
                        "persistence mode must be on (gpu_preflight_require_persistence_mode)%s"
                        % ("; off on " + ", ".join("GPU %d" % g["index"] for g in bad) if bad else "")))
    if expect.get("require_ecc"):
        modes = {i: h.get("ecc_mode_current") for i, h in health.items()}
        known = {i: m for i, m in modes.items() if m is not None}
        bad = sorted(i for i, m in known.items() if m != "Enabled")
        checks.append(c("ecc_mode", None if not known else not bad, "Enabled", sorted(set(map(str, known.values()))),
                        "ECC must be on (gpu_preflight_require_ecc)" + ("; off on GPU " + ", ".join(map(str, bad))
                                                                         if bad else "" if known else ": not reported")))
    if "max_uncorrected_ecc_errors" in expect:
        want = int(expect["max_uncorrected_ecc_errors"])
        counts = {i: h.get("ecc_errors_uncorrected_volatile_total") for i, h in health.items()}
        known = {i: n for i, n in counts.items() if isinstance(n, int)}
        bad = sorted(i for i, n in known.items() if n > want)
        checks.append(c("ecc_errors", None if not known else not bad, "<= %d uncorrected (volatile)" % want,
                        {str(i): n for i, n in sorted(known.items())},
                        ("uncorrected ECC errors since the driver loaded: "
                         + ", ".join("GPU %d: %d" % (i, known[i]) for i in bad)
                         + " (gpu_preflight_max_uncorrected_ecc_errors is %d)" % want)
                        if bad else ("no uncorrected ECC errors" if known
                                     else "ECC error counts not reported (ECC off or not supported)")))
    pending = sorted(i for i, h in health.items() if h.get("retired_pages_pending") == "Yes")
    reported = [i for i, h in health.items() if h.get("retired_pages_pending") is not None]
    checks.append(c("retired_pages", None if not reported else not pending, "no page retirement pending",
                    {"pending": pending},
                    ("page retirement pending on GPU %s: reset the GPU or reboot first" % ", ".join(map(str, pending)))
                    if pending else ("no retirement pending" if reported else "retired pages not reported (row remapping GPUs)")))
    remap_pending = sorted(i for i, h in health.items() if h.get("remapped_rows_pending") == "Yes")
    remap_failed = sorted(i for i, h in health.items() if h.get("remapped_rows_failure") == "Yes")
    reported = [i for i, h in health.items() if h.get("remapped_rows_pending") is not None
                or h.get("remapped_rows_failure") is not None]
    msg = []
    if remap_pending:
        msg.append("row remapping pending on GPU %s: reset the GPU or reboot first" % ", ".join(map(str, remap_pending)))
    if remap_failed:
        msg.append("row remapping FAILED on GPU %s: the GPU needs service" % ", ".join(map(str, remap_failed)))
    checks.append(c("remapped_rows", None if not reported else not (remap_pending or remap_failed),
                    "no remapping pending or failed", {"pending": remap_pending, "failure": remap_failed},
                    "; ".join(msg) or ("no remapping pending or failed" if reported else "remapped rows not reported")))
    if expect.get("min_pcie_width"):
        want = int(expect["min_pcie_width"])
        widths = {i: h.get("pcie_link_width_current") for i, h in health.items()}
        known = {i: w for i, w in widths.items() if isinstance(w, int)}
        bad = sorted(i for i, w in known.items() if w < want)
        checks.append(c("pcie_link_width", None if not known else not bad, ">= x%d" % want,
                        {str(i): w for i, w in sorted(known.items())},
                        ("PCIe link narrower than x%d (gpu_preflight_min_pcie_link_width): " % want
                         + ", ".join("GPU %d at x%d" % (i, known[i]) for i in bad)) if bad
                        else ("every link x%d or wider" % want if known else "PCIe link width not reported")))
    if expect.get("interconnect") and expect["interconnect"] != "any":
        want, found = expect["interconnect"], inv.get("topology", {}).get("interconnect", "unknown")
        checks.append(c("interconnect", None if found == "none" else found == want, want, found,
                        "expected %s between the GPUs (gpu_preflight_expected_interconnect), nvidia-smi topo -m shows %s (%s)"
                        % (want, found, ", ".join(inv.get("topology", {}).get("link_types", [])) or "no GPU pairs")))
    if "fatal_xids" in expect:
        xid = inv.get("xid", {})
        fatal = sorted({e["xid"] for e in xid.get("events", []) if e["xid"] in set(expect["fatal_xids"])})
        if not xid.get("readable"):
            checks.append(c("xid_errors", None, "no fatal Xid", None,
                            "kernel log not readable here (%s): Xid errors not checked" % xid.get("reason", "?")))
        else:
            others = sorted({e["xid"] for e in xid.get("events", [])} - set(fatal))
            checks.append(c("xid_errors", not fatal, "none of %s" % sorted(expect["fatal_xids"]),
                            {"fatal": fatal, "other": others},
                            ("fatal NVIDIA Xid error(s) %s in the kernel log since boot (gpu_preflight_fatal_xids): %s"
                             % (fatal, "; ".join("%s: Xid %d %s" % (e["pci"], e["xid"], e["text"])
                                                 for e in xid["events"] if e["xid"] in fatal)[:600]))
                            if fatal else "no fatal Xid in the kernel log since boot%s"
                            % (" (others: %s)" % others if others else "")))
    return checks


def evaluate_host(host: dict, expect: dict) -> list[dict]:
    """Compare free disk (counting the model bytes already there), RAM and /dev/shm with the expectations."""
    checks = []
    if "model_size_gb" in expect:
        disk = host["disk"]
        want = float(expect["model_size_gb"])
        have = (disk["free_bytes"] + disk["model_bytes"]) / 1e9
        ok = have >= want
        checks.append(check("host", "disk", "pass" if ok else "fail", ">= %g GB for the model" % want, round(have, 1),
                            "the model needs %g GB (gpu_preflight_model_size_gb) under %s: %.1f GB free on %s "
                            "+ %.1f GB of it already there"
                            % (want, disk["model_path"], disk["free_bytes"] / 1e9, disk["measured_path"],
                               disk["model_bytes"] / 1e9)))
    if "min_ram_gib" in expect:
        want = float(expect["min_ram_gib"])
        have = host["ram"]["total_kib"] / 1048576
        ok = have >= want
        checks.append(check("host", "ram", "pass" if ok else "fail", ">= %g GiB" % want, round(have, 1),
                            "%.1f GiB of RAM, gpu_preflight_min_ram_gib is %g" % (have, want)))
    if "min_shm_gib" in expect:
        want = float(expect["min_shm_gib"])
        shm = host["shm"]
        if shm.get("size_bytes") is None:
            checks.append(check("host", "shm", "fail", ">= %g GiB" % want, "missing",
                                "%s is not a mounted file system: %s" % (shm["path"], shm.get("error"))))
        else:
            have = shm["size_bytes"] / 2 ** 30
            ok = have >= want
            checks.append(check("host", "shm", "pass" if ok else "fail", ">= %g GiB" % want, round(have, 2),
                                "%s is %.2f GiB, gpu_preflight_min_shm_gib is %g" % (shm["path"], have, want)))
    return checks


def parse_meminfo(text: str) -> dict:
    values = {}
    for line in text.splitlines():
        m = re.match(r"(\w+):\s+([0-9]+)", line)
        if m:
            values[m.group(1)] = int(m.group(2))
    return {"total_kib": values.get("MemTotal", 0), "available_kib": values.get("MemAvailable", 0)}


def directory_bytes(path: str) -> int:
    """Bytes of the regular files under path (links not followed): a model already there needs no more room."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if not os.path.islink(os.path.join(root, name)):
                total += st.st_size
    return total


def gather_host(model_path: str, shm_path: str) -> dict:
    existing = model_path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing) or "/"
    st = os.statvfs(existing)
    disk = {"model_path": model_path, "measured_path": existing, "free_bytes": st.f_bavail * st.f_frsize,
            "total_bytes": st.f_blocks * st.f_frsize,
            "model_bytes": directory_bytes(model_path) if os.path.isdir(model_path) else 0}
    with open("/proc/meminfo", encoding="utf-8") as fh:
        ram = parse_meminfo(fh.read())
    shm = {"path": shm_path}
    if os.path.ismount(shm_path):
        sst = os.statvfs(shm_path)
        shm.update(size_bytes=sst.f_blocks * sst.f_frsize, free_bytes=sst.f_bavail * sst.f_frsize)
    else:
        shm.update(size_bytes=None, error="not a mount point" if os.path.exists(shm_path) else "does not exist")
    return {"disk": disk, "ram": ram, "shm": shm}


def gather_inventory(module: AnsibleModule) -> dict:
    name = module.params["nvidia_smi"]
    smi = name if "/" in name else module.get_bin_path(name)
    inv = {"nvidia_smi": smi, "error": None, "gpus": [], "health": {}, "health_fields": {}, "topology": {},
           "nvlink": {}, "p2p_read": {}, "xid": {}, "device_nodes": sorted(glob.glob("/dev/nvidia[0-9]*"))}
    if not smi or not os.access(smi, os.X_OK):
        inv["error"] = "%s not found" % name
        return inv
    rc, out, err = module.run_command([smi, "--query-gpu=" + ",".join(CORE_FIELDS), "--format=csv,noheader,nounits"])
    if rc != 0:
        inv["error"] = (out + err).strip()[:500] or "rc=%d" % rc
        return inv
    try:
        inv["gpus"] = parse_gpus(out)
    except ValueError as exc:
        module.fail_json(msg=str(exc))

    # All health fields in one call; if this nvidia-smi rejects one, ask field by field.
    def ask(fields):
        rc, out, _ = module.run_command([smi, "--query-gpu=index," + ",".join(fields), "--format=csv,noheader,nounits"])
        return parse_health(out, fields) if rc == 0 else None

    health = ask(HEALTH_FIELDS)
    if health is not None:
        inv["health_fields"] = {f: True for f in HEALTH_FIELDS}
    else:
        health = {g["index"]: {} for g in inv["gpus"]}
        for field in HEALTH_FIELDS:
            one = ask([field])
            inv["health_fields"][field] = one is not None
            for idx, values in (one or {}).items():
                health.setdefault(idx, {}).update(values)
            if one is None:
                for values in health.values():
                    values[field.replace(".", "_")] = None
    inv["health"] = health

    rc, out, err = module.run_command([smi, "topo", "-m"])
    inv["topology"] = parse_topology(out) if rc == 0 else {"interconnect": "unknown", "error": (out + err).strip()[:300]}
    if len(inv["gpus"]) == 1 and inv["topology"].get("interconnect") == "unknown":
        inv["topology"]["interconnect"] = "none"
    rc, out, err = module.run_command([smi, "topo", "-p2p", "r"])
    inv["p2p_read"] = parse_p2p(out) if rc == 0 else {"all_ok": None, "not_ok": [], "error": (out + err).strip()[:200]}
    rc, out, err = module.run_command([smi, "nvlink", "-s"])
    inv["nvlink"] = parse_nvlink_status(out) if rc == 0 else {}

    dmesg = module.get_bin_path("dmesg")
    if dmesg:
        rc, out, err = module.run_command([dmesg])
        inv["xid"] = ({"readable": True, "events": parse_xids(out)} if rc == 0
                      else {"readable": False, "reason": (err or out).strip()[:200] or "rc=%d" % rc})
    else:
        inv["xid"] = {"readable": False, "reason": "dmesg not found"}
    inv["link"] = nominal_link(inv)
    return inv


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "phase": {"type": "str", "required": True, "choices": ["inventory", "host"]},
            "expect": {"type": "dict", "default": {}},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "model_path": {"type": "path", "default": "/srv/models"},
            "shm_path": {"type": "path", "default": "/dev/shm"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["phase"] == "inventory":
        facts = gather_inventory(module)
        checks = evaluate_inventory(facts, p["expect"])
    else:
        facts = gather_host(p["model_path"], p["shm_path"])
        checks = evaluate_host(facts, p["expect"])
    module.exit_json(changed=False, gpu_preflight=facts, checks=checks)


if __name__ == "__main__":
    main()
