"""What the PCIe platform of a GPU host means for NCCL: per GPU and per pair records, and named findings.

``assemble`` turns the parsed sources (nvidia-smi -q, lspci, /sys, topo -p2p, the kernel
log) into records where every field is either filled or null with its reason in ``na``.
``find`` applies the catalogue FINDINGS: each finding has a stable name, a severity, the
consequence for the server and the fix (with the role variable that applies it, if any).
``checks`` gives one check per catalogue entry: pass, fail (an error not ignored), warn
(a warning, or an ignored error) or n/a (the sources needed were not there, with why).
"""

from __future__ import annotations

try:  # on the host, as the module ships it
    from ansible.module_utils.gpu_preflight_pcie_parse import acs_redirects, aer_total, gen_of_speed, link_gbps, parse_cmdline
except ImportError:  # in the unit tests, loaded beside it
    from gpu_preflight_pcie_parse import acs_redirects, aer_total, gen_of_speed, link_gbps, parse_cmdline  # type: ignore

IDLE_STATES = {"P5", "P8", "P10", "P12", "P15"}
FINDINGS = {
    "pcie_link_width_degraded": {
        "severity": "error", "p2p": False, "variable": None,
        "consequence": "every transfer to the host and to the GPU's peers gets the bandwidth of the narrower link; "
                       "NCCL's bus bandwidth falls in step",
        "fix": "reseat the card and its riser or cable; set the slot's width and bifurcation in the BIOS; use a x16 slot"},
    "pcie_link_gen_degraded": {
        "severity": "error", "p2p": False, "variable": None,
        "consequence": "the link runs at a lower PCIe generation than the card's: each generation down halves its "
                       "bandwidth, for host transfers and peer-to-peer alike",
        "fix": "set the slot's link speed to Auto or the card's generation in the BIOS; check risers and retimers "
               "(one rated for a lower generation trains the link down); use a slot wired to a root port of the "
               "card's generation"},
    "bar1_small": {
        "severity": "error", "p2p": True, "variable": None,
        "consequence": "BAR1 maps the GPU's memory for its peers and the CPU; smaller than the memory, peer "
                       "transfers go through remapped windows and P2P slows down or fails",
        "fix": "enable Resizable BAR and Above 4G Decoding in the BIOS; on RTX PRO 6000 select the headless "
               "display mode (NVIDIA Display Mode Selector) for the full BAR1"},
    "acs_redirect_enabled": {
        "severity": "error", "p2p": True, "variable": "gpu_preflight_fix_acs_redirect_off",
        "consequence": "ACS on a bridge between these GPUs redirects their peer traffic up to the root complex: "
                       "NCCL's P2P transport runs slowly or hangs",
        "fix": "disable ACS in the BIOS, or clear its redirect bits on these bridges with the kernel parameter "
               "pci=disable_acs_redir=<bridges> (gpu_preflight_fix_acs_redirect_off); NCCL_P2P_DISABLE=1 "
               "(gpu_preflight_fix_nccl_p2p_disable) is the slow fallback"},
    "iommu_translation": {
        "severity": "error", "p2p": True, "variable": "gpu_preflight_fix_iommu_passthrough",
        "consequence": "the IOMMU translates the GPUs' DMA: peer-to-peer transfers fault, hang NCCL or crawl",
        "fix": "kernel parameter iommu=pt (gpu_preflight_fix_iommu_passthrough), or the IOMMU off in the BIOS; "
               "NCCL_P2P_DISABLE=1 (gpu_preflight_fix_nccl_p2p_disable) is the slow fallback"},
    "aspm_enabled": {
        "severity": "warning", "p2p": False, "variable": "gpu_preflight_fix_pcie_aspm_off",
        "consequence": "link power states add exit latency to small transfers (the decode all-reduce) and are "
                       "reported with surprise link-downs under sustained load",
        "fix": "kernel parameter pcie_aspm=off (gpu_preflight_fix_pcie_aspm_off), or ASPM off in the BIOS"},
    "pcie_link_down": {
        "severity": "error", "p2p": True, "variable": "gpu_preflight_fix_pcie_port_pm_off",
        "consequence": "the link of this GPU or a bridge above it went down or had uncorrectable errors: the GPU "
                       "falls off the bus (Xid 79) and the server dies with it",
        "fix": "kernel parameters pcie_port_pm=off (gpu_preflight_fix_pcie_port_pm_off) and pcie_aspm=off "
               "(gpu_preflight_fix_pcie_aspm_off); if it persists, reseat or replace the riser, cable or slot"},
    "pcie_corrected_errors": {
        "severity": "warning", "p2p": False, "variable": None,
        "consequence": "corrected link errors cost replays (bandwidth) and often precede a link going down",
        "fix": "reseat the card and its riser or cable; a count that keeps rising points at the slot or riser"},
    "p2p_unsupported": {
        "severity": "warning", "p2p": True, "variable": "gpu_preflight_fix_nccl_p2p_disable",
        "consequence": "the driver reports no peer reads or writes between these GPUs: NCCL moves their data "
                       "through host memory (SHM), slower and with more latency",
        "fix": "look for ACS, the IOMMU or a small BAR1 among the findings; NCCL_P2P_DISABLE=1 "
               "(gpu_preflight_fix_nccl_p2p_disable) makes the host-memory path explicit"},
    "numa_node_unknown": {
        "severity": "warning", "p2p": False, "variable": None,
        "consequence": "the kernel does not know which socket the GPU hangs off: the server's threads and "
                       "buffers cannot be placed next to it",
        "fix": "enable the ACPI SRAT / NUMA settings in the BIOS (NPS, sub-NUMA clustering as wanted)"},
}


def _first(*candidates):
    """The first (value, source) whose value is not None: (None, None) when none."""
    for value, source in candidates:
        if value is not None:
            return value, source
    return None, None


def _int(text):
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def assemble(raw: dict) -> dict:
    """Per GPU and per pair records from the parsed sources (see gather in library/gpu_preflight_pcie.py).

    raw: gpus [{index, bus_id}], smi {bdf: smi_gpu} or None, smi_error, lspci {bdf: device} or None,
    lspci_error, sysfs (read_sysfs), p2p {mode: {(a, b): status}}, p2p_errors {mode: reason},
    kernel_log (parse_kernel_log) or None, kernel_log_error, topology_links [{a, b, type}].
    """
    smi, lspci, sysfs = raw.get("smi"), raw.get("lspci"), raw.get("sysfs") or {}
    sys_devices, sys_gpus = sysfs.get("devices", {}), sysfs.get("gpus", {})
    no_smi = "nvidia-smi -q: %s" % (raw.get("smi_error") or "no such GPU")
    no_lspci = "lspci: %s" % (raw.get("lspci_error") or "device not listed")
    log = raw.get("kernel_log")
    gpus = []
    for g in raw.get("gpus", []):
        bdf, na = g["bus_id"], {}
        s = (smi or {}).get(bdf) or {}
        d = (lspci or {}).get(bdf) or {}
        y = sys_devices.get(bdf, {})
        where = sys_gpus.get(bdf, {})
        upstream = where.get("upstream", [])
        port = sys_devices.get(upstream[-1], {}) if upstream else {}
        port_l = (lspci or {}).get(upstream[-1], {}) if upstream else {}
        rec = {"index": g["index"], "bus_id": bdf, "na": na, "upstream": upstream if where.get("present") else None,
               "sources": {"nvidia_smi_q": bool(s), "lspci": bool(d), "sysfs": bool(where.get("present"))}}
        if not where.get("present"):
            na["upstream"] = "not in /sys/bus/pci/devices (a container, or GPUs this kernel does not list)"
        elif not upstream:
            rec["upstream_note"] = "on the root bus: no bridge between the GPU and the host bridge (a virtual machine)"

        def put(key, pair, reason, rec=rec, na=na):  # this GPU's record (bound now, not at the loop's end)
            rec[key], src = pair
            if src:
                rec.setdefault("from", {})[key] = src
            else:
                na[key] = reason

        lnkcap, lnksta = d.get("lnkcap") or {}, d.get("lnksta") or {}
        put("gen_card_max", _first((s.get("gen_device_max"), "nvidia-smi -q Device Max"), (lnkcap.get("gen"), "lspci LnkCap"),
                                   (gen_of_speed(y.get("max_link_speed")), "/sys max_link_speed")),
            "not reported (%s; %s; /sys has no max_link_speed)" % (no_smi, no_lspci))
        port_gen = _first(((port_l.get("lnkcap") or {}).get("gen"), "lspci LnkCap of the port above"),
                          (gen_of_speed(port.get("max_link_speed")), "/sys max_link_speed of the port above"))
        put("gen_host_max", _first((s.get("gen_host_max"), "nvidia-smi -q Host Max"), port_gen),
            "not reported (nvidia-smi -q Host Max N/A; no port above the GPU in /sys or lspci)")
        reach = s.get("gen_max")
        if reach is None and rec["gen_card_max"] and rec["gen_host_max"]:
            reach = min(rec["gen_card_max"], rec["gen_host_max"])
        put("gen_max", (reach, "nvidia-smi -q Max" if s.get("gen_max") is not None else "card and port maxima")
            if reach is not None else (None, None), "not reported: neither nvidia-smi -q Max nor both ends' maxima")
        put("gen_current", _first((s.get("gen_current"), "nvidia-smi -q Current"), (lnksta.get("gen"), "lspci LnkSta"),
                                  (gen_of_speed(y.get("current_link_speed")), "/sys current_link_speed")),
            "not reported (%s; %s; /sys current_link_speed %s)" % (no_smi, no_lspci, y.get("current_link_speed")))
        put("width_card_max", _first((lnkcap.get("width"), "lspci LnkCap"),
                                     (_int(y.get("max_link_width")), "/sys max_link_width"),
                                     (s.get("width_max"), "nvidia-smi -q Link Width Max")),
            "not reported (%s; %s; /sys has no max_link_width)" % (no_smi, no_lspci))
        put("width_current", _first((s.get("width_current"), "nvidia-smi -q Link Width Current"),
                                    (lnksta.get("width"), "lspci LnkSta"),
                                    (_int(y.get("current_link_width")), "/sys current_link_width")),
            "not reported (%s; %s; /sys has no current_link_width)" % (no_smi, no_lspci))
        rec["gbps_current"] = link_gbps(rec["gen_current"], rec["width_current"])
        rec["gbps_card"] = link_gbps(rec["gen_card_max"], rec["width_card_max"])
        for key in ("gbps_current", "gbps_card"):
            if rec[key] is None:
                na[key] = "generation or width not reported"
        # BAR1 is the GPU's memory aperture: its largest prefetchable BAR (lspci region 1 when BAR0 is 32-bit,
        # resource 2 when BAR0 is 64-bit, as on the H200 of the lent machine).
        regions = [r["bytes"] for r in (d.get("regions") or {}).values() if r.get("bytes") and "prefetchable" in r["kind"]
                   and "non-prefetchable" not in r["kind"]]
        res = [b for b in (y.get("resource_bytes") or [])[:6] if b]
        put("bar1_mib", _first((s.get("bar1_mib"), "nvidia-smi -q BAR1 Total"),
                               (max(regions) // 2 ** 20 if regions else None, "lspci largest prefetchable region"),
                               (max(res) // 2 ** 20 if res else None, "/sys resource, largest BAR")),
            "not reported (%s; %s; /sys resource)" % (no_smi, no_lspci))
        put("memory_mib", (s.get("memory_mib"), "nvidia-smi -q FB Memory Total") if s.get("memory_mib") else (None, None),
            no_smi)
        put("numa_node", _first((_int(y.get("numa_node")), "/sys numa_node"), (d.get("numa_node"), "lspci NUMA node")),
            "not reported (/sys numa_node missing; %s)" % no_lspci)
        put("cpulist", (y.get("local_cpulist"), "/sys local_cpulist") if y.get("local_cpulist") else (None, None),
            "not in /sys")
        put("iommu_group", (y.get("iommu_group"), "/sys iommu_group") if y.get("iommu_group") else (None, None),
            "no IOMMU group: the IOMMU is off (or absent in this virtual machine)" if where.get("present")
            else na.get("upstream", "not in /sys"))
        put("iommu_domain", (y.get("iommu_group_type"), "/sys iommu_groups/N/type") if y.get("iommu_group_type")
            else (None, None), na.get("iommu_group") or "the group's type file is not readable")
        aspm_gpu = (d.get("lnkctl") or {}).get("aspm")
        aspm_port = (port_l.get("lnkctl") or {}).get("aspm")
        if aspm_gpu is None and y.get("link/l1_aspm") is not None:
            aspm_gpu = "L1 Enabled" if y["link/l1_aspm"] == "1" else "Disabled"
        if aspm_port is None and port.get("link/l1_aspm") is not None:
            aspm_port = "L1 Enabled" if port["link/l1_aspm"] == "1" else "Disabled"
        put("aspm_gpu_link", (aspm_gpu, "lspci LnkCtl or /sys link/l1_aspm") if aspm_gpu else (None, None),
            "not reported (%s; /sys has no link/l1_aspm: the kernel does not control ASPM here)" % no_lspci)
        put("aspm_port_link", (aspm_port, "lspci LnkCtl or /sys link/l1_aspm of the port above") if aspm_port
            else (None, None), "no port above the GPU" if not upstream else "not reported for the port above")
        for key in ("persistence_mode", "performance_state", "virtualization_mode", "ecc_mode",
                    "ecc_uncorrectable_volatile", "ecc_uncorrectable_aggregate", "retired_pages_single_bit",
                    "retired_pages_double_bit", "retired_pages_pending", "remapped_rows_correctable",
                    "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure", "replays",
                    "replay_rollovers"):
            put(key, (s.get(key), "nvidia-smi -q") if s.get(key) is not None else (None, None),
                no_smi if not s else "nvidia-smi -q reports N/A for this GPU")
        path = [bdf] + upstream
        aer = {}
        for kind in ("correctable", "fatal", "nonfatal"):
            totals = [aer_total(sys_devices.get(dev, {}).get("aer_dev_" + kind)) for dev in path]
            known = [t for t in totals if t is not None]
            aer[kind] = sum(known) if known else None
        put("aer_counts", (aer, "/sys aer_dev_* of the GPU and the bridges above") if any(v is not None for v in aer.values())
            else (None, None), "no AER counters in /sys (AER not enabled, or not in /sys)")
        if log is None:
            na["xids"] = na["link_events"] = "kernel log not readable: %s" % raw.get("kernel_log_error")
            rec["xids"] = rec["link_events"] = None
        else:
            prefix = bdf.rsplit(".", 1)[0]
            rec["xids"] = [e for e in log["xids"] if e["pci"].rsplit(".", 1)[0] == prefix]
            rec["link_events"] = [e for e in log["link_events"] if set(e["devices"]) & set(path)]
        gpus.append(rec)

    by_index = {g["index"]: g for g in gpus}
    links = {(lk["a"], lk["b"]): lk["type"] for lk in raw.get("topology_links", [])}
    pairs = []
    for a in sorted(by_index):
        for b in sorted(by_index):
            if b > a:
                pairs.append(_pair(by_index[a], by_index[b], links.get((a, b)), raw))
    return {"gpus": gpus, "pairs": pairs, "platform": _platform(raw, gpus)}


def _pair(ga: dict, gb: dict, link_type, raw: dict) -> dict:
    na = {}
    pair = {"a": ga["index"], "b": gb["index"], "topology": link_type, "na": na, "p2p": {}}
    if link_type is None:
        na["topology"] = "nvidia-smi topo -m did not list this pair"
    for mode in ("r", "w", "n", "a", "p"):
        status = (raw.get("p2p") or {}).get(mode, {}).get((ga["index"], gb["index"]))
        pair["p2p"][mode] = status
        if status is None:
            na["p2p_" + mode] = "nvidia-smi topo -p2p %s: %s" % (mode, (raw.get("p2p_errors") or {}).get(mode, "pair not listed"))
    if ga["upstream"] is None or gb["upstream"] is None:
        pair["bridges"] = pair["acs"] = None
        na["bridges"] = na["acs"] = "a GPU is not in /sys: its upstream path is unknown"
    else:
        ua, ub = ga["upstream"], gb["upstream"]
        common = 0
        while common < min(len(ua), len(ub)) and ua[common] == ub[common]:
            common += 1
        pair["common_bridge"] = ua[common - 1] if common else None
        pair["bridges"] = ua[common:][::-1] + ub[common:]
        pair["acs"] = []
        if not pair["bridges"]:
            na["acs"] = "no bridge between these GPUs (the same bus): nothing to redirect"
        for bdf in pair["bridges"]:
            dev = (raw.get("lspci") or {}).get(bdf)
            if dev is None or not dev.get("caps_readable", True):
                why = raw.get("lspci_error") or ("capabilities not readable (not root)" if dev else "not listed")
                pair["acs"].append({"bridge": bdf, "redirect": None, "reason": "lspci: %s" % why})
            elif dev.get("acs_ctl") is None:
                pair["acs"].append({"bridge": bdf, "redirect": [], "reason": "no ACS capability"})
            else:
                pair["acs"].append({"bridge": bdf, "redirect": acs_redirects(dev), "ctl": dev["acs_ctl"],
                                    "redirect_capable": [f for f, on in (dev.get("acs_cap") or {}).items()
                                                         if on and f in ("ReqRedir", "CmpltRedir", "EgressCtrl")]})
    na_ = (ga.get("numa_node"), gb.get("numa_node"))
    pair["same_numa_node"] = None if None in na_ else na_[0] == na_[1]
    if pair["same_numa_node"] is None:
        na["same_numa_node"] = "a GPU's NUMA node is not reported"
    return pair


def _platform(raw: dict, gpus: list[dict]) -> dict:
    sysfs = raw.get("sysfs") or {}
    cmdline_text = sysfs.get("cmdline")
    cmd = parse_cmdline(cmdline_text) if cmdline_text is not None else {}
    na = {}
    units = sysfs.get("iommu_units")
    domains = sorted({g["iommu_domain"] for g in gpus if g.get("iommu_domain")})
    if domains:
        mode = ("translated" if set(domains) & {"DMA", "DMA-FQ"}
                else "passthrough" if domains == ["identity"] else "/".join(domains))
    elif units:
        mode = "passthrough" if cmd.get("iommu") == "pt" else "unknown"
    elif units is not None:
        mode = "off"
    else:
        mode, na["iommu_mode"] = None, "/sys/class/iommu is not readable"
    policy = (sysfs.get("aspm_policy") or {}).get("policy")
    if policy is None:
        na["aspm_policy"] = "/sys/module/pcie_aspm/parameters/policy absent (ASPM support not built in, or pcie_aspm=off)"
    if cmdline_text is None:
        na["cmdline"] = "/proc/cmdline not readable"
    return {"iommu_mode": mode, "iommu_units": units, "iommu_domains": domains,
            "iommu_cmdline": {k: cmd[k] for k in ("iommu", "intel_iommu", "amd_iommu") if k in cmd},
            "aspm_policy": policy, "aspm_cmdline": cmd.get("pcie_aspm"), "port_pm_cmdline": cmd.get("pcie_port_pm"),
            "pci_cmdline": cmd.get("pci", []), "cmdline": cmdline_text, "numa_nodes": sysfs.get("numa_nodes"), "na": na}


def find(rec: dict) -> tuple[list[dict], dict]:
    """The findings of an assembled record, and for each catalogue name that could not be judged, why."""
    found, na = [], {}
    gpus, pairs, plat = rec["gpus"], rec["pairs"], rec["platform"]
    if not gpus:
        return [], {name: "nvidia-smi lists no GPU" for name in FINDINGS}

    def add(name, subject, evidence):
        found.append({"name": name, "subject": subject, "evidence": evidence, **{k: FINDINGS[name][k] for k in
                      ("severity", "consequence", "fix", "variable")}})

    def gpu_na(name, keys):
        if all(any(g.get(k) is None for k in keys) for g in gpus) and gpus:
            na[name] = "; ".join(sorted({g["na"].get(k, "") for g in gpus for k in keys if g["na"].get(k)}))[:300]

    for g in gpus:
        s = "GPU%d (%s)" % (g["index"], g["bus_id"])
        if g["width_current"] and g["width_card_max"] and g["width_current"] < g["width_card_max"]:
            add("pcie_link_width_degraded", s, "x%d of the card's x%d (%s GB/s of %s GB/s per direction at gen %s)"
                % (g["width_current"], g["width_card_max"], link_gbps(g["gen_current"], g["width_current"]),
                   link_gbps(g["gen_current"], g["width_card_max"]), g["gen_current"]))
        card, reach, cur = g["gen_card_max"], g["gen_max"], g["gen_current"]
        if card and reach and reach < card:
            add("pcie_link_gen_degraded", s, "the link can reach gen %d only (host side gen %s), the card gen %d"
                % (reach, g["gen_host_max"], card))
        elif cur and reach and cur < reach:
            if g.get("performance_state") in IDLE_STATES:
                g["gen_note"] = ("gen %d at %s: an idle GPU lowers its link speed, not judged" % (cur, g["performance_state"]))
            else:
                add("pcie_link_gen_degraded", s, "trained at gen %d of gen %d (performance state %s)"
                    % (cur, reach, g.get("performance_state") or "not reported"))
        if g["bar1_mib"] and g["memory_mib"] and g["bar1_mib"] < g["memory_mib"]:
            add("bar1_small", s, "BAR1 %d MiB for %d MiB of memory" % (g["bar1_mib"], g["memory_mib"]))
        if g["numa_node"] == -1 and (plat.get("numa_nodes") or 0) > 1:
            add("numa_node_unknown", s, "numa_node -1 on a host with %d NUMA nodes" % plat["numa_nodes"])
        if plat.get("aspm_cmdline") != "off":
            on = [where for where, v in (("GPU link", g["aspm_gpu_link"]), ("port above", g["aspm_port_link"]))
                  if v and v != "Disabled"]
            if on:
                add("aspm_enabled", s, "; ".join("%s: ASPM %s" % (w, g["aspm_gpu_link" if w == "GPU link" else "aspm_port_link"])
                                                 for w in on) + " (policy %s)" % plat.get("aspm_policy"))
        aer = g.get("aer_counts") or {}
        down = [e["text"] for e in g.get("link_events") or [] if e["kind"] in ("link_down", "uncorrected")]
        if down or aer.get("fatal") or aer.get("nonfatal"):
            add("pcie_link_down", s, "; ".join(down[:3])
                or "AER fatal %s, non-fatal %s since boot" % (aer.get("fatal"), aer.get("nonfatal")))
        corrected = [e["text"] for e in g.get("link_events") or [] if e["kind"] == "corrected"]
        if corrected or aer.get("correctable") or g.get("replay_rollovers"):
            add("pcie_corrected_errors", s, "AER correctable %s, kernel log %d line(s), replays %s (rollovers %s)"
                % (aer.get("correctable"), len(corrected), g.get("replays"), g.get("replay_rollovers")))
    gpu_na("pcie_link_width_degraded", ("width_current", "width_card_max"))
    gpu_na("pcie_link_gen_degraded", ("gen_current", "gen_max"))
    gpu_na("bar1_small", ("bar1_mib", "memory_mib"))
    gpu_na("numa_node_unknown", ("numa_node",))
    if plat.get("aspm_cmdline") != "off":
        gpu_na("aspm_enabled", ("aspm_gpu_link",))
    if all(g.get("aer_counts") is None and g.get("link_events") is None for g in gpus) and gpus:
        na["pcie_link_down"] = na["pcie_corrected_errors"] = "neither AER counters in /sys nor a readable kernel log"

    if plat.get("iommu_mode") == "translated":
        on = [("GPU%d" % g["index"], g["iommu_domain"]) for g in gpus if g.get("iommu_domain") in ("DMA", "DMA-FQ")]
        add("iommu_translation", "platform", "IOMMU domain %s for %s (cmdline %s)" % (
            "/".join(sorted({d for _, d in on})), ", ".join(n for n, _ in on),
            plat.get("iommu_cmdline") or "no iommu= parameter"))
    elif plat.get("iommu_mode") in (None, "unknown"):
        na["iommu_translation"] = plat["na"].get("iommu_mode") or "an IOMMU is on but the GPUs' domain type is not readable"

    if not pairs:
        for name in ("acs_redirect_enabled", "p2p_unsupported"):
            na[name] = "fewer than 2 GPUs: no pair" if len(gpus) < 2 else "no pair"
    bridges: dict = {}
    acs_known = False
    for p in pairs:
        label = "GPU%d-GPU%d" % (p["a"], p["b"])
        for acs in p.get("acs") or []:
            if acs["redirect"] is not None:
                acs_known = True
            if acs["redirect"]:
                bridges.setdefault(acs["bridge"], {"flags": acs["redirect"], "pairs": []})["pairs"].append(label)
        bad = {m: p["p2p"].get(m) for m in ("r", "w") if p["p2p"].get(m) not in (None, "OK")}
        if bad:
            add("p2p_unsupported", label, "topo -p2p %s (topology %s)" % (
                ", ".join("%s=%s" % kv for kv in sorted(bad.items())), p.get("topology")))
    for bdf, b in sorted(bridges.items()):
        add("acs_redirect_enabled", bdf, "ACSCtl %s on, between %s" % ("+ ".join(b["flags"]) + "+", ", ".join(b["pairs"])))
    if pairs and not acs_known and "acs_redirect_enabled" not in na:
        reasons = sorted({a.get("reason") or "" for p in pairs for a in p.get("acs") or []} |
                         {p["na"].get("acs", "") for p in pairs})
        na["acs_redirect_enabled"] = "; ".join(r for r in reasons if r) or "ACS state not readable"
    if pairs and all(p["p2p"].get("r") is None and p["p2p"].get("w") is None for p in pairs):
        na["p2p_unsupported"] = "; ".join(sorted({p["na"].get("p2p_r", "") for p in pairs}))
    return found, na


def p2p_suspect(findings: list[dict]) -> list[str]:
    """The names of the findings present that put peer-to-peer between the GPUs in doubt."""
    return sorted({f["name"] for f in findings if FINDINGS[f["name"]]["p2p"]})


def peer_to_peer(pairs: list[dict], findings: list[dict]) -> dict:
    """Whether the GPUs reach each other's memory directly, for what the server builds on it (the PCIe
    IPC all-reduce of SGLang 0.5.21+ writes straight into its peers' memory): {status, why}.

    ok: ``topo -p2p`` read and write OK for every pair and no finding puts P2P in doubt; not_ok: a pair
    is not OK; in_doubt: every pair OK but a finding that breaks or reroutes P2P is there (an IOMMU
    translating, ACS redirecting, ...); unknown: the matrix was not read; n/a: fewer than two GPUs.
    """
    if not pairs:
        return {"status": "n/a", "why": "fewer than 2 GPUs: no pair"}
    bad = ["GPU%d-GPU%d read %s write %s" % (p["a"], p["b"], p["p2p"].get("r"), p["p2p"].get("w"))
           for p in pairs if any(p["p2p"].get(m) not in (None, "OK") for m in ("r", "w"))]
    if bad:
        return {"status": "not_ok", "why": "nvidia-smi topo -p2p: %s" % "; ".join(bad)[:300]}
    unread = sorted({p["na"].get("p2p_" + m, "") for p in pairs for m in ("r", "w") if p["p2p"].get(m) is None})
    if unread:
        return {"status": "unknown", "why": "; ".join(u for u in unread if u)[:300] or "topo -p2p not read"}
    suspect = p2p_suspect(findings)
    if suspect:
        return {"status": "in_doubt", "why": "topo -p2p OK for every pair, but %s put(s) P2P in doubt" % ", ".join(suspect)}
    return {"status": "ok", "why": "topo -p2p read and write OK for all %d pairs, no finding puts P2P in doubt" % len(pairs)}


def checks(findings: list[dict], na: dict, ignore: list[str], fixes: dict) -> list[dict]:
    """One check per catalogue entry (phase pcie), in catalogue order."""
    out = []
    for name, spec in FINDINGS.items():
        these = [f for f in findings if f["name"] == name]
        asked = bool(spec["variable"] and fixes.get(spec["variable"]))
        if these:
            error = spec["severity"] == "error" and name not in ignore
            status = "fail" if error else "warn"
            msg = "%s: %s. Consequence: %s. Fix: %s%s" % (
                name, "; ".join("%s: %s" % (f["subject"], f["evidence"]) for f in these)[:700], spec["consequence"],
                spec["fix"], " (asked: %s is true)" % spec["variable"] if asked else "")
            if name in ignore:
                msg += " [ignored: gpu_preflight_pcie_ignore]"
            out.append({"phase": "pcie", "name": name, "status": status, "expected": "none",
                        "found": [f["subject"] for f in these], "message": msg})
        elif name in na:
            out.append({"phase": "pcie", "name": name, "status": "n/a", "expected": "none", "found": None,
                        "message": "%s not judged: %s" % (name, na[name])})
        else:
            out.append({"phase": "pcie", "name": name, "status": "pass", "expected": "none", "found": [],
                        "message": "%s: none" % name})
    return out


def summary_lines(rec: dict) -> list[str]:
    """One line per GPU, per pair and for the platform, for the play's output."""
    lines = []
    for g in rec["gpus"]:
        lines.append("GPU%d %s: gen %s of %s (card %s), x%s of x%s, BAR1 %s MiB, NUMA %s, IOMMU %s, ASPM %s, %s"
                     % (g["index"], g["bus_id"], g["gen_current"], g["gen_max"], g["gen_card_max"], g["width_current"],
                        g["width_card_max"], g["bar1_mib"], g["numa_node"], g["iommu_domain"] or "none",
                        g["aspm_gpu_link"] or "not reported", "bridges above: " + (" ".join(g["upstream"]) or "none")
                        if g["upstream"] is not None else "not in /sys"))
    for p in rec["pairs"]:
        lines.append("GPU%d-GPU%d: %s, P2P read %s write %s, bridges between: %s"
                     % (p["a"], p["b"], p["topology"], p["p2p"].get("r"), p["p2p"].get("w"),
                        " ".join(p["bridges"]) or "none" if p.get("bridges") is not None else "unknown"))
    plat = rec["platform"]
    lines.append("IOMMU %s, ASPM policy %s, kernel command line %s" % (plat["iommu_mode"], plat["aspm_policy"],
                                                                      plat["cmdline"]))
    return lines


def kernel_params(fixes: dict, pairs: list[dict]) -> list[str]:
    """The kernel parameters the fixes asked for; the ACS one names every bridge between GPUs able to redirect.

    The bridges come from the ACS capability (what a bridge can redirect), not its control
    (what it redirects now): once the parameter is in effect the list stays the same.
    """
    params = []
    if fixes.get("gpu_preflight_fix_iommu_passthrough"):
        params.append("iommu=pt")
    if fixes.get("gpu_preflight_fix_pcie_aspm_off"):
        params.append("pcie_aspm=off")
    if fixes.get("gpu_preflight_fix_pcie_port_pm_off"):
        params.append("pcie_port_pm=off")
    if fixes.get("gpu_preflight_fix_acs_redirect_off"):
        capable = sorted({a["bridge"] for p in pairs for a in p.get("acs") or [] if a.get("redirect_capable")})
        if capable:
            params.append("pci=disable_acs_redir=" + ";".join(capable))
    return params


def params_in_effect(params: list[str], cmdline: str | None) -> dict:
    """Which of the wanted kernel parameters the running kernel was booted with."""
    cmd = parse_cmdline(cmdline or "")
    missing = []
    for param in params:
        name, _, value = param.partition("=")
        have = value in cmd.get("pci", []) if name == "pci" else cmd.get(name) == value
        if not have:
            missing.append(param)
    return {"wanted": params, "missing": missing}
