"""Parsers of the PCIe platform of a GPU host, and the reader of its /sys.

Plain functions on the texts the tools print (``lspci -vvv``, ``nvidia-smi -q``,
``nvidia-smi topo -p2p``, the kernel log, /proc/cmdline) and on the files of /sys, so that
they are unit-tested on outputs recorded on real machines. Nothing here runs a program;
``read_sysfs`` only reads files under a root (``/`` on a host, a recorded tree in tests).
Standard library only: the module gpu_preflight_pcie ships it to the host.
"""

from __future__ import annotations

import os
import re

BDF_RE = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
LSPCI_HEAD_RE = re.compile(r"^((?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) (.*)$")
# GT/s per lane of each PCIe generation, as lspci and /sys print them.
GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}  # per direction, after line coding
ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
# Bits that send peer-to-peer requests or completions up to the root complex instead of across the switch.
ACS_REDIRECT_FLAGS = ("ReqRedir", "CmpltRedir", "EgressCtrl")
XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)(?:, (.*))?")
KERNEL_BDF = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
KERNEL_DEV_RE = re.compile(r"\b(%s)\b" % KERNEL_BDF)
AER_SOURCE_RE = re.compile(r"received: (%s)" % KERNEL_BDF)
LINK_EVENT_RE = re.compile(r"(Link Down|Surprise Down|link down|AER: (?:Uncorrect|Correct)\w* (?:\(\w+\) )?error|"
                           r"Uncorrected \(Fatal\)|Uncorrected \(Non-Fatal\)|Corrected error)")
NOT_REPORTED = {"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown", "[unknown error]",
                "[insufficient permissions]", "requested functionality has been deprecated"}


def norm_bdf(text: str) -> str | None:
    """'00000000:18:00.0', '18:00.0' or '0000:18:00.0' -> '0000:18:00.0' (lower case, 4-digit domain)."""
    m = BDF_RE.match(text.strip())
    if not m:
        return None
    domain = (m.group(1) or "0").lower()[-4:].rjust(4, "0")
    return "%s:%s:%s.%s" % (domain, m.group(2).lower(), m.group(3).lower(), m.group(4))


def gen_of_speed(text) -> int | None:
    """'32.0 GT/s PCIe', '32GT/s', '8 GT/s' -> 5, 3; None when unknown."""
    m = re.search(r"([0-9.]+)\s*GT/s", str(text or ""))
    return GEN_BY_GTS.get(float(m.group(1))) if m else None


def link_gbps(gen, width) -> float | None:
    """Nominal bandwidth per direction, GB/s."""
    if not isinstance(gen, int) or not isinstance(width, int) or gen not in LANE_GBPS:
        return None
    return round(LANE_GBPS[gen] * width, 1)


def size_bytes(text: str) -> int | None:
    """lspci's region sizes: '16M', '128G', '32K', '256' -> bytes."""
    m = re.fullmatch(r"([0-9]+)([KMGT]?)", text.strip())
    if not m:
        return None
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " ")


def flags(text: str) -> dict:
    """'SrcValid+ TransBlk- ReqRedir+' -> {'SrcValid': True, 'TransBlk': False, 'ReqRedir': True}."""
    return {name: sign == "+" for name, sign in re.findall(r"([A-Za-z][A-Za-z0-9_]*)([+-])", text)}


# ---------------------------------------------------------------- lspci -vvv

def parse_lspci(text: str) -> dict:
    """``lspci -vvv -nn`` (with or without -D): per device, what the preflight needs.

    Per device: class code, vendor:device ids, the PCIe port type, LnkCap (speed, width, ASPM
    support), LnkCtl (ASPM enabled), LnkSta (speed, width, downgraded), the ACS capability and
    control flags, memory regions, NUMA node, driver, and whether the capabilities were
    readable at all (lspci prints ``<access denied>`` to other users than root).
    """
    devices: dict = {}
    current = None
    for line in text.splitlines():
        head = LSPCI_HEAD_RE.match(line)
        if head:
            bdf = norm_bdf(head.group(1))
            rest = head.group(2)
            cls = re.match(r"(.*?) \[([0-9a-fA-F]{4})\]:", rest)
            ids = re.findall(r"\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]", rest)
            current = devices[bdf] = {
                "bdf": bdf, "description": rest[:200], "class_name": cls.group(1) if cls else None,
                "class": cls.group(2).lower() if cls else None,
                "ids": ("%s:%s" % ids[-1]).lower() if ids else None,
                "port_type": None, "lnkcap": None, "lnkctl": None, "lnksta": None, "acs_cap": None, "acs_ctl": None,
                "regions": {}, "numa_node": None, "driver": None, "caps_readable": True}
            continue
        if current is None or not line.strip():
            continue
        body = line.strip()
        if body.startswith("Capabilities: <access denied>"):
            current["caps_readable"] = False
        elif m := re.match(r"Capabilities: \[[0-9a-f]+\] Express \(v\d\) (.+?)(?:, (?:MSI|IntMsgNum) .*)?$", body):
            current["port_type"] = re.sub(r" \(Slot[+-]\)", "", m.group(1))
        elif m := re.match(r"LnkCap:\s*Port #\d+, Speed (\S+?)(?:GT/s)?, Width x(\d+), ASPM ([^,]+)", body):
            current["lnkcap"] = {"gen": gen_of_speed(m.group(1) + "GT/s"), "width": int(m.group(2)),
                                 "aspm_support": m.group(3).strip()}
        elif m := re.match(r"LnkCtl:\s*ASPM ([^;]+);", body):
            current["lnkctl"] = {"aspm": m.group(1).strip()}
        elif m := re.match(r"LnkSta:\s*Speed (\S+?)(?:GT/s)?( \(downgraded\)| \(ok\))?, Width x(\d+)( \(downgraded\)| \(ok\))?",
                           body):
            current["lnksta"] = {"gen": gen_of_speed(m.group(1) + "GT/s"), "width": int(m.group(3)),
                                 "speed_downgraded": bool(m.group(2) and "downgraded" in m.group(2)),
                                 "width_downgraded": bool(m.group(4) and "downgraded" in m.group(4))}
        elif body.startswith("ACSCap:"):
            current["acs_cap"] = flags(body[7:])
        elif body.startswith("ACSCtl:"):
            current["acs_ctl"] = flags(body[7:])
        elif m := re.match(r"Region (\d+): Memory at \S+ \(([^)]*)\)(?: \[[a-z]+\])? \[size=(\w+)\]", body):
            current["regions"][int(m.group(1))] = {"bytes": size_bytes(m.group(3)), "kind": m.group(2)}
        elif m := re.match(r"NUMA node: (-?\d+)", body):
            current["numa_node"] = int(m.group(1))
        elif m := re.match(r"Kernel driver in use: (\S+)", body):
            current["driver"] = m.group(1)
    return devices


def acs_redirects(device: dict) -> list[str] | None:
    """The ACS bits of a bridge that redirect peer traffic upstream, as enabled now; None when unknown."""
    ctl = device.get("acs_ctl") if device else None
    if ctl is None:
        return None
    return [f for f in ACS_REDIRECT_FLAGS if ctl.get(f)]


# ---------------------------------------------------------------- nvidia-smi -q

def parse_smi_q(text: str) -> dict:
    """``nvidia-smi -q``: per GPU bus id (normalised), its fields as {'Section/Sub/Key': value}."""
    gpus: dict = {}
    current = None
    stack: list[tuple[int, str]] = []
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("="):
            continue
        m = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$", raw)
        if m:
            current = gpus[norm_bdf(m.group(1))] = {}
            stack = []
            continue
        if current is None:
            continue
        indent = len(raw) - len(raw.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        kv = re.match(r"^\s*(.+?)\s+: ?(.*)$", raw)
        if kv:
            current["/".join([s for _, s in stack] + [kv.group(1).strip()])] = kv.group(2).strip()
        else:
            stack.append((indent, raw.strip()))
    return gpus


def smi_value(fields: dict, key: str):
    """A field of parse_smi_q: None when absent or not reported, int for '16x', '262144 MiB', '5', else the text."""
    value = fields.get(key)
    if value is None or value.strip().lower() in NOT_REPORTED:
        return None
    m = re.fullmatch(r"(-?[0-9]+)\s*(?:x|MiB|KB/s)?", value.strip())
    return int(m.group(1)) if m else value.strip()


def smi_gpu(fields: dict) -> dict:
    """The PCIe, BAR1, ECC and memory-repair fields of one GPU of ``nvidia-smi -q``."""
    link = "PCI/GPU Link Info/"
    volatile = [v for k, v in ((k, smi_value(fields, k)) for k in fields)
                if k.startswith("ECC Errors/Volatile/") and "Uncorrectable" in k and isinstance(v, int)]
    aggregate = [v for k, v in ((k, smi_value(fields, k)) for k in fields)
                 if k.startswith("ECC Errors/Aggregate/") and "Uncorrectable" in k and isinstance(v, int)]
    return {
        "product": smi_value(fields, "Product Name"),
        "persistence_mode": smi_value(fields, "Persistence Mode"),
        "performance_state": smi_value(fields, "Performance State"),
        "virtualization_mode": smi_value(fields, "GPU Virtualization Mode/Virtualization Mode"),
        "gen_current": smi_value(fields, link + "PCIe Generation/Current"),
        "gen_max": smi_value(fields, link + "PCIe Generation/Max"),
        "gen_device_max": smi_value(fields, link + "PCIe Generation/Device Max"),
        "gen_host_max": smi_value(fields, link + "PCIe Generation/Host Max"),
        "width_current": smi_value(fields, link + "Link Width/Current"),
        "width_max": smi_value(fields, link + "Link Width/Max"),
        "replays": smi_value(fields, "PCI/Replays Since Reset"),
        "replay_rollovers": smi_value(fields, "PCI/Replay Number Rollovers"),
        "bar1_mib": smi_value(fields, "BAR1 Memory Usage/Total"),
        "memory_mib": smi_value(fields, "FB Memory Usage/Total"),
        "ecc_mode": smi_value(fields, "ECC Mode/Current"),
        "ecc_uncorrectable_volatile": sum(volatile) if volatile else None,
        "ecc_uncorrectable_aggregate": sum(aggregate) if aggregate else None,
        "retired_pages_single_bit": smi_value(fields, "Retired Pages/Single Bit ECC"),
        "retired_pages_double_bit": smi_value(fields, "Retired Pages/Double Bit ECC"),
        "retired_pages_pending": smi_value(fields, "Retired Pages/Pending Page Blacklist"),
        "remapped_rows_correctable": smi_value(fields, "Remapped Rows/Correctable Error"),
        "remapped_rows_uncorrectable": smi_value(fields, "Remapped Rows/Uncorrectable Error"),
        "remapped_rows_pending": smi_value(fields, "Remapped Rows/Pending"),
        "remapped_rows_failure": smi_value(fields, "Remapped Rows/Remapping Failure Occurred"),
    }


# ---------------------------------------------------------------- nvidia-smi topo -p2p

def parse_p2p_matrix(text: str) -> dict:
    """``nvidia-smi topo -p2p X``: {(a, b): status} for a < b ('OK', 'NS', 'CNS', 'GNS', 'TNS', 'U')."""
    clean = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    columns, pairs = [], {}
    for line in clean.splitlines():
        words = line.split()
        if not words or words[0] in ("Legend:",):
            continue
        if all(re.fullmatch(r"GPU[0-9]+", w) for w in words):
            columns = [int(w[3:]) for w in words]
        elif columns and re.fullmatch(r"GPU[0-9]+", words[0]) and len(words) == len(columns) + 1:
            row = int(words[0][3:])
            for col, value in zip(columns, words[1:], strict=True):
                if col > row:
                    pairs[(row, col)] = value
    return pairs


# ---------------------------------------------------------------- kernel log and command line

def parse_kernel_log(text: str) -> dict:
    """NVIDIA Xid events and PCIe link events (AER errors, link down) with the devices they name."""
    xids, link_events = [], []
    for line in text.splitlines():
        m = XID_RE.search(line)
        if m:
            pci = m.group(1)
            xids.append({"pci": norm_bdf(pci if pci.count(".") else pci + ".0") or pci, "xid": int(m.group(2)),
                         "text": (m.group(3) or "").strip()[:160]})
            continue
        e = LINK_EVENT_RE.search(line)
        if e:
            kind = ("link_down" if "down" in e.group(1).lower() else
                    "uncorrected" if "ncorrect" in e.group(1) else "corrected")
            # 'pcieport <port>: AER: ... error received: <source>' names the device in error after the port.
            source = AER_SOURCE_RE.search(line)
            devices = [source.group(1)] if source else KERNEL_DEV_RE.findall(line)
            link_events.append({"kind": kind, "devices": sorted({norm_bdf(d) for d in devices}),
                                "text": line.strip()[-200:]})
    return {"xids": xids, "link_events": link_events}


def parse_cmdline(text: str) -> dict:
    """/proc/cmdline: {name: value} ('' for a flag); 'pci' keeps every comma-separated option of every pci=."""
    params: dict = {}
    for word in re.findall(r'(?:[^\s"]|"[^"]*")+', text.strip()):
        name, _, value = word.partition("=")
        value = value.strip('"')
        if name == "pci":
            params.setdefault("pci", []).extend(value.split(","))
        else:
            params[name] = value
    return params


def aspm_policy(text: str) -> str | None:
    """/sys/module/pcie_aspm/parameters/policy: '[default] performance powersave' -> 'default'."""
    m = re.search(r"\[(\w+)\]", text or "")
    return m.group(1) if m else None


def aer_total(text: str | None) -> int | None:
    """/sys/bus/pci/devices/*/aer_dev_{correctable,fatal,nonfatal}: the TOTAL_ERR_* line."""
    m = re.search(r"^TOTAL_ERR_\w+ (\d+)$", text or "", re.M)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------- /sys

DEVICE_FILES = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width", "numa_node",
                "local_cpulist", "class", "vendor", "device", "link/l0s_aspm", "link/l1_aspm", "power/control",
                "aer_dev_correctable", "aer_dev_fatal", "aer_dev_nonfatal")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def read_sysfs(root: str, gpu_bdfs: list[str]) -> dict:
    """What /sys says about every GPU and every bridge above it, the IOMMU and ASPM, and /proc/cmdline.

    The upstream path of a GPU is read from its device directory's real path
    (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/...): every PCI address before the
    GPU's own is a bridge between it and the host bridge, nearest last.
    """
    def sys(*parts):
        return os.path.join(root, *parts)

    out = {"devices": {}, "gpus": {}, "iommu_units": None, "iommu_groups": None, "aspm_policy": None,
           "cmdline": _read(sys("proc", "cmdline")), "numa_nodes": None}
    units_dir = sys("sys", "class", "iommu")
    out["iommu_units"] = sorted(os.listdir(units_dir)) if os.path.isdir(units_dir) else None
    groups_dir = sys("sys", "kernel", "iommu_groups")
    out["iommu_groups"] = len(os.listdir(groups_dir)) if os.path.isdir(groups_dir) else None
    policy = _read(sys("sys", "module", "pcie_aspm", "parameters", "policy"))
    out["aspm_policy"] = {"raw": policy, "policy": aspm_policy(policy)} if policy is not None else None
    nodes_dir = sys("sys", "devices", "system", "node")
    if os.path.isdir(nodes_dir):
        out["numa_nodes"] = len([n for n in os.listdir(nodes_dir) if re.fullmatch(r"node[0-9]+", n)])

    def device(bdf):
        if bdf in out["devices"]:
            return
        base = sys("sys", "bus", "pci", "devices", bdf)
        info = {f: _read(os.path.join(base, f)) for f in DEVICE_FILES}
        group = os.path.join(base, "iommu_group")
        info["iommu_group"] = os.path.basename(os.readlink(group)) if os.path.islink(group) else None
        info["iommu_group_type"] = (_read(sys("sys", "kernel", "iommu_groups", info["iommu_group"], "type"))
                                    if info["iommu_group"] else None)
        resource = _read(os.path.join(base, "resource"))
        info["resource_bytes"] = []
        for line in (resource or "").splitlines():
            start, end, _flags = (int(x, 16) for x in line.split()[:3])
            info["resource_bytes"].append(end - start + 1 if end else 0)
        out["devices"][bdf] = {k: v for k, v in info.items() if v is not None}

    for bdf in gpu_bdfs:
        base = sys("sys", "bus", "pci", "devices", bdf)
        if not os.path.exists(base):
            out["gpus"][bdf] = {"present": False, "upstream": []}
            continue
        real = os.path.realpath(base)
        chain = [norm_bdf(p) for p in real.split(os.sep) if norm_bdf(p)]
        upstream = chain[:-1] if chain and chain[-1] == bdf else chain
        out["gpus"][bdf] = {"present": True, "upstream": upstream,
                            "host_bridge": next((p for p in real.split(os.sep) if p.startswith("pci")), None)}
        for dev in [bdf] + upstream:
            device(dev)
    return out
