"""gpu_preflight's PCIe report: parsers, the /sys reader and the named findings, on recorded outputs.

fixtures/pcie-h200 was recorded on the lent H200 machine (a Firecracker VM: one GPU on the
root bus, no lspci, no IOMMU) by tests/device/gpu_preflight_pcie_proof.py. fixtures/pcie-rtxpro4
is the reference kind of host, 4 RTX PRO 6000 Server Edition on two sockets, two behind a
Broadcom PEX890xx switch and two on root ports, composed in the formats those tools print
(see its README.md); the broken hosts are that platform edited the way lspci, nvidia-smi and
/sys show each fault: an ACS-enabled bridge, a link trained at Gen3 x8, the IOMMU translating.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from repo import ROOT

FIXTURES = Path(__file__).parent / "fixtures"
H200, RTX = FIXTURES / "pcie-h200", FIXTURES / "pcie-rtxpro4"
ALL_FIXES = {"gpu_preflight_fix_iommu_passthrough": True, "gpu_preflight_fix_pcie_aspm_off": True,
             "gpu_preflight_fix_pcie_port_pm_off": True, "gpu_preflight_fix_acs_redirect_off": True}


def body(path: Path) -> str:
    """A recorded output without the '# $ command' line the capture script puts first."""
    return "".join(line for line in path.read_text().splitlines(keepends=True) if not line.startswith("# $ "))


def sysfs_tree(root: Path, fixture: Path, iommu: str | None = None, cmdline: str | None = None) -> Path:
    """A /sys and /proc tree rebuilt from the capture script's listings (sysfs-pci.txt, iommu.txt, ...)."""
    device = None
    for line in body(fixture / "sysfs-pci.txt").splitlines():
        m = re.match(r"== /sys/bus/pci/devices/(\S+) -> /sys/(devices/\S+)$", line)
        if m:
            bdf, real = m.groups()
            device = root / "sys" / real
            device.mkdir(parents=True, exist_ok=True)
            link = root / "sys/bus/pci/devices" / bdf
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(device)
            resource = []
            continue
        if device is None:
            continue
        if re.match(r"0x[0-9a-f]{16} ", line):
            resource.append(line)
            (device / "resource").write_text("\n".join(resource) + "\n")
        elif line.startswith("iommu_group: "):
            group = root / "sys/kernel/iommu_groups" / line.split(": ")[1]
            group.mkdir(parents=True, exist_ok=True)
            (device / "iommu_group").symlink_to(group)
        elif ": " in line:
            name, value = line.split(": ", 1)
            value = value.strip()
            if name.startswith("aer_dev_"):  # the listing joined the counter lines
                value = "\n".join(" ".join(p) for p in zip(*[iter(value.split())] * 2, strict=False))
            (device / name).parent.mkdir(parents=True, exist_ok=True)
            (device / name).write_text(value + "\n")
    (root / "sys/class/iommu").mkdir(parents=True, exist_ok=True)
    (root / "sys/kernel/iommu_groups").mkdir(parents=True, exist_ok=True)
    for line in (iommu if iommu is not None else body(fixture / "iommu.txt")).splitlines():
        if m := re.match(r"l\S+ .* (\w+) -> ", line):
            (root / "sys/class/iommu" / m.group(1)).mkdir()
        elif m := re.match(r"/sys/kernel/iommu_groups/(\d+): (\S+) ", line):
            (root / "sys/kernel/iommu_groups" / m.group(1)).mkdir(exist_ok=True)
            (root / "sys/kernel/iommu_groups" / m.group(1) / "type").write_text(m.group(2) + "\n")
    policy = root / "sys/module/pcie_aspm/parameters/policy"
    policy.parent.mkdir(parents=True)
    policy.write_text(body(fixture / "aspm.txt").splitlines()[0] + "\n")
    for node in re.findall(r"^node\d+$", body(fixture / "numa.txt"), re.M):
        (root / "sys/devices/system/node" / node).mkdir(parents=True)
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text((cmdline if cmdline is not None else body(fixture / "cmdline.txt").strip()) + "\n")
    return root


def raw_of(pcie_parse, fixture: Path, tmp_path: Path, lspci=None, smi=None, p2p_r=None, dmesg=None, iommu=None,
           cmdline=None, sysfs_edit=None) -> dict:
    """What library/gpu_preflight_pcie.py gathers, from a fixture (each source optionally edited)."""
    smi_text = smi if smi is not None else body(fixture / "nvidia-smi-q.txt")
    smi_gpus = {bdf: pcie_parse.smi_gpu(f) for bdf, f in pcie_parse.parse_smi_q(smi_text).items()}
    gpus = [{"index": i, "bus_id": bdf} for i, bdf in enumerate(smi_gpus)]
    lspci_text = lspci if lspci is not None else body(fixture / "lspci-vvv.txt")
    found = "not found" not in lspci_text
    tree = sysfs_tree(tmp_path / "root", fixture, iommu, cmdline)
    if sysfs_edit:
        sysfs_edit(tree)
    p2p = {}
    if (fixture / "topo-p2p-r.txt").exists() and len(gpus) > 1:
        p2p = {"r": pcie_parse.parse_p2p_matrix(p2p_r if p2p_r is not None else body(fixture / "topo-p2p-r.txt")),
               "w": pcie_parse.parse_p2p_matrix(body(fixture / "topo-p2p-w.txt"))}
    return {"gpus": gpus, "smi": smi_gpus, "smi_error": None,
            "lspci": pcie_parse.parse_lspci(lspci_text) if found else None,
            "lspci_error": None if found else "lspci not installed (package pciutils)",
            "sysfs": pcie_parse.read_sysfs(str(tree), [g["bus_id"] for g in gpus]),
            "p2p": p2p, "p2p_errors": {} if p2p else {m: "1 GPU: no pair" for m in "rwnap"},
            "kernel_log": pcie_parse.parse_kernel_log(dmesg if dmesg is not None else body(fixture / "dmesg.txt")),
            "topology_links": [{"a": a, "b": b, "type": "PXB" if (a, b) == (0, 1) else "SYS" if a < 2 <= b else "NODE"}
                               for a in range(len(gpus)) for b in range(a + 1, len(gpus))]}


def judge(pcie, raw, ignore=(), fixes=None):
    rec = pcie.assemble(raw)
    found, na = pcie.find(rec)
    return rec, found, na, {c["name"]: c for c in pcie.checks(found, na, list(ignore), fixes or {})}


def names(found):
    return sorted({f["name"] for f in found})


# ---------------------------------------------------------------- the recorded H200 machine

def test_h200_sysfs_reader_reads_what_it_read_on_the_machine(pcie_parse, tmp_path):
    tree = sysfs_tree(tmp_path / "root", H200)
    read = pcie_parse.read_sysfs(str(tree), ["0000:00:06.0"])
    recorded = json.loads((H200 / "sysfs.json").read_text())  # read_sysfs's own output there
    for view in (read, recorded):  # the listing kept 3 resource lines of 7
        view["devices"]["0000:00:06.0"]["resource_bytes"] = view["devices"]["0000:00:06.0"]["resource_bytes"][:3]
    assert read == recorded
    assert read["gpus"]["0000:00:06.0"] == {"present": True, "upstream": [], "host_bridge": "pci0000:00"}


def test_h200_every_field_is_filled_or_has_its_reason(pcie, pcie_parse, tmp_path):
    rec, found, na, checks = judge(pcie, raw_of(pcie_parse, H200, tmp_path))
    assert found == []
    gpu = rec["gpus"][0]
    assert (gpu["gen_current"], gpu["gen_max"], gpu["gen_card_max"], gpu["width_current"], gpu["width_card_max"]) == \
        (5, 5, 5, 16, 16)
    assert gpu["bar1_mib"] == 262144 and gpu["memory_mib"] == 143771 and gpu["numa_node"] == -1
    assert gpu["upstream"] == [] and gpu["upstream_note"].startswith("on the root bus")
    assert gpu["persistence_mode"] == "Enabled" and gpu["ecc_mode"] == "Enabled" and gpu["replays"] == 0
    assert gpu["xids"] == [] and gpu["link_events"] == []
    for key, value in gpu.items():
        if value is None:
            assert gpu["na"].get(key), key
    assert gpu["na"]["iommu_group"].startswith("no IOMMU group")
    assert gpu["na"]["aspm_gpu_link"].startswith("not reported (lspci: lspci not installed")
    assert gpu["na"]["retired_pages_pending"] == "nvidia-smi -q reports N/A for this GPU"
    assert rec["platform"]["iommu_mode"] == "off" and rec["platform"]["aspm_policy"] == "default"
    assert {n: c["status"] for n, c in checks.items()} == {
        "pcie_link_width_degraded": "pass", "pcie_link_gen_degraded": "pass", "bar1_small": "pass",
        "acs_redirect_enabled": "n/a", "iommu_translation": "pass", "aspm_enabled": "n/a", "pcie_link_down": "pass",
        "pcie_corrected_errors": "pass", "p2p_unsupported": "n/a", "numa_node_unknown": "pass"}
    assert checks["acs_redirect_enabled"]["message"] == "acs_redirect_enabled not judged: fewer than 2 GPUs: no pair"


def test_h200_bar1_from_sys_when_nvidia_smi_is_silent(pcie, pcie_parse, tmp_path):
    # BAR0 is 64-bit there: the 256 GiB aperture is resource 2, not 1 (the largest BAR counts).
    raw = raw_of(pcie_parse, H200, tmp_path)
    raw["smi"], raw["smi_error"] = {}, "rc=9: NVIDIA-SMI has failed"
    gpu = pcie.assemble(raw)["gpus"][0]
    assert gpu["bar1_mib"] == 262144 and gpu["from"]["bar1_mib"] == "/sys resource, largest BAR"
    assert (gpu["gen_current"], gpu["width_current"]) == (5, 16)  # /sys current_link_speed and width
    assert gpu["na"]["memory_mib"] == "nvidia-smi -q: rc=9: NVIDIA-SMI has failed"


# ---------------------------------------------------------------- RTX PRO 6000 platform, clean and broken

def test_clean_platform_produces_no_finding(pcie, pcie_parse, tmp_path):
    rec, found, na, checks = judge(pcie, raw_of(pcie_parse, RTX, tmp_path))
    assert found == [] and na == {}
    assert {c["status"] for c in checks.values()} == {"pass"}
    g0, g2 = rec["gpus"][0], rec["gpus"][2]
    assert g0["upstream"] == ["0000:00:01.1", "0000:01:00.0", "0000:02:00.0"] and g0["bar1_mib"] == 98304
    assert g2["numa_node"] == 1 and g2["iommu_domain"] == "identity" and g2["gen_host_max"] == 5
    pair01 = rec["pairs"][0]
    assert pair01["bridges"] == ["0000:02:00.0", "0000:02:01.0"] and pair01["common_bridge"] == "0000:01:00.0"
    assert [a["redirect"] for a in pair01["acs"]] == [[], []]
    pair02 = rec["pairs"][1]
    assert pair02["bridges"] == ["0000:02:00.0", "0000:01:00.0", "0000:00:01.1", "0000:80:01.1"]
    assert pair02["p2p"]["r"] == "OK" and pair02["same_numa_node"] is False
    assert rec["platform"]["iommu_mode"] == "passthrough" and rec["platform"]["aspm_cmdline"] == "off"
    assert pcie.p2p_suspect(found) == []


def test_acs_enabled_bridge_is_named_with_the_pairs_behind_it_and_its_fix(pcie, pcie_parse, tmp_path):
    text = body(RTX / "lspci-vvv.txt")
    block = text.index("0000:02:01.0 PCI bridge")
    acs = text.index("ACSCtl:", block)
    text = text[:acs] + text[acs:].replace("ReqRedir- CmpltRedir-", "ReqRedir+ CmpltRedir+", 1)
    rec, found, na, checks = judge(pcie, raw_of(pcie_parse, RTX, tmp_path, lspci=text))
    assert names(found) == ["acs_redirect_enabled"]
    (finding,) = found
    assert finding["subject"] == "0000:02:01.0"
    assert finding["evidence"] == "ACSCtl ReqRedir+ CmpltRedir+ on, between GPU0-GPU1, GPU1-GPU2, GPU1-GPU3"
    assert finding["variable"] == "gpu_preflight_fix_acs_redirect_off"
    assert checks["acs_redirect_enabled"]["status"] == "fail"
    assert "pci=disable_acs_redir=<bridges>" in checks["acs_redirect_enabled"]["message"]
    assert pcie.p2p_suspect(found) == ["acs_redirect_enabled"]
    # The fix names every bridge between GPUs that can redirect (ACSCap), so it stays the same once in effect.
    params = pcie.kernel_params({"gpu_preflight_fix_acs_redirect_off": True}, rec["pairs"])
    assert params == ["pci=disable_acs_redir=0000:00:01.1;0000:02:00.0;0000:02:01.0;0000:80:01.1;0000:80:03.1"]
    booted = "ro quiet pci=realloc=off,disable_acs_redir=0000:00:01.1;0000:02:00.0;0000:02:01.0;0000:80:01.1;0000:80:03.1"
    assert pcie.params_in_effect(params, booted)["missing"] == []
    assert pcie.params_in_effect(params, "ro quiet")["missing"] == params


def test_link_trained_at_gen3_x8_on_a_gen5_x16_card(pcie, pcie_parse, tmp_path):
    text = body(RTX / "lspci-vvv.txt")
    gpu1 = text.index("0000:04:00.0 3D controller")
    sta = text.index("LnkSta:", gpu1)
    text = text[:sta] + text[sta:].replace("Speed 32GT/s, Width x16",
                                           "Speed 8GT/s (downgraded), Width x8 (downgraded)", 1)
    smi = body(RTX / "nvidia-smi-q.txt")
    at = smi.index("GPU 00000000:04:00.0")
    part = smi[at:].replace("Current                                : 5", "Current                                : 3", 1)
    part = part.replace("Current                                : 16x", "Current                                : 8x", 1)
    smi = smi[:at] + part
    rec, found, na, checks = judge(pcie, raw_of(pcie_parse, RTX, tmp_path, lspci=text, smi=smi))
    assert names(found) == ["pcie_link_gen_degraded", "pcie_link_width_degraded"]
    by = {f["name"]: f for f in found}
    assert by["pcie_link_width_degraded"]["subject"] == "GPU1 (0000:04:00.0)"
    assert by["pcie_link_width_degraded"]["evidence"] == "x8 of the card's x16 (7.9 GB/s of 15.8 GB/s per direction at gen 3)"
    assert by["pcie_link_gen_degraded"]["evidence"] == "trained at gen 3 of gen 5 (performance state P0)"
    assert rec["gpus"][1]["gbps_current"] == 7.9 and rec["gpus"][1]["gbps_card"] == 63.0
    assert checks["pcie_link_width_degraded"]["status"] == checks["pcie_link_gen_degraded"]["status"] == "fail"
    assert "reseat the card" in checks["pcie_link_width_degraded"]["message"]
    # Without nvidia-smi, lspci's LnkCap and LnkSta tell the same.
    raw = raw_of(pcie_parse, RTX, tmp_path / "lspci-only", lspci=text)
    raw["smi"] = {}
    assert names(pcie.find(pcie.assemble(raw))[0]) == ["pcie_link_gen_degraded", "pcie_link_width_degraded"]


def test_a_slot_that_caps_the_generation_is_named(pcie, pcie_parse, tmp_path):
    smi = body(RTX / "nvidia-smi-q.txt")
    at = smi.index("GPU 00000000:82:00.0")
    part = smi[at:].replace("Host Max                               : 5", "Host Max                               : 4", 1)
    part = re.sub(r"(PCIe Generation\n\s+Max\s+: )5", r"\g<1>4", part, count=1)
    part = part.replace("Current                                : 5", "Current                                : 4", 1)
    found = pcie.find(pcie.assemble(raw_of(pcie_parse, RTX, tmp_path, smi=smi[:at] + part)))[0]
    assert [(f["name"], f["subject"], f["evidence"]) for f in found] == [
        ("pcie_link_gen_degraded", "GPU3 (0000:82:00.0)", "the link can reach gen 4 only (host side gen 4), the card gen 5")]


def test_an_idle_gpu_at_gen1_is_not_a_finding(pcie, pcie_parse, tmp_path):
    smi = body(RTX / "nvidia-smi-q.txt").replace("Performance State                                  : P0",
                                                  "Performance State                                  : P8")
    smi = re.sub(r"(PCIe Generation\n\s+Max\s+: 5\n\s+Current\s+: )5", r"\g<1>1", smi)
    rec, found, na, _ = judge(pcie, raw_of(pcie_parse, RTX, tmp_path, smi=smi))
    assert found == []
    assert rec["gpus"][0]["gen_note"] == "gen 1 at P8: an idle GPU lowers its link speed, not judged"


def test_iommu_in_translation_mode(pcie, pcie_parse, tmp_path):
    iommu = body(RTX / "iommu.txt").replace(": identity ", ": DMA-FQ ")
    cmdline = "BOOT_IMAGE=/vmlinuz-6.8.0-87-generic root=UUID=4f0c6b1e ro amd_iommu=on pcie_aspm=off"
    rec, found, na, checks = judge(pcie, raw_of(pcie_parse, RTX, tmp_path, iommu=iommu, cmdline=cmdline))
    assert names(found) == ["iommu_translation"]
    assert found[0]["evidence"] == "IOMMU domain DMA-FQ for GPU0, GPU1, GPU2, GPU3 (cmdline {'amd_iommu': 'on'})"
    assert rec["platform"]["iommu_mode"] == "translated" and rec["platform"]["iommu_units"] == ["ivhd0", "ivhd1"]
    assert checks["iommu_translation"]["status"] == "fail"
    assert "iommu=pt (gpu_preflight_fix_iommu_passthrough)" in checks["iommu_translation"]["message"]
    assert pcie.p2p_suspect(found) == ["iommu_translation"]
    assert pcie.params_in_effect(pcie.kernel_params(ALL_FIXES, rec["pairs"]), cmdline)["missing"][:3] == [
        "iommu=pt", "pcie_port_pm=off", "pci=disable_acs_redir=0000:00:01.1;0000:02:00.0;0000:02:01.0;0000:80:01.1;0000:80:03.1"]
    asked = pcie.checks(found, na, [], {"gpu_preflight_fix_iommu_passthrough": True})
    assert "(asked: gpu_preflight_fix_iommu_passthrough is true)" in asked[4]["message"]


def test_small_bar1_aspm_link_down_and_corrected_errors(pcie, pcie_parse, tmp_path):
    smi = body(RTX / "nvidia-smi-q.txt").replace(": 98304 MiB", ": 256 MiB", 1)
    text = body(RTX / "lspci-vvv.txt")
    gpu2 = text.index("0000:81:00.0 3D controller")
    text = text[:gpu2] + text[gpu2:].replace("LnkCtl:	ASPM Disabled", "LnkCtl:	ASPM L1 Enabled", 1)
    dmesg = body(RTX / "dmesg.txt") + (
        "[ 8123.551903] pcieport 0000:80:03.1: pciehp: Slot(3): Link Down\n"
        "[ 8123.552410] pcieport 0000:00:01.1: AER: Corrected error received: 0000:02:00.0\n")

    def aer(tree):
        (tree / "sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/aer_dev_correctable").write_text(
            "RxErr 12\nBadTLP 0\nTOTAL_ERR_COR 12\n")
    rec, found, na, checks = judge(pcie, raw_of(pcie_parse, RTX, tmp_path, smi=smi, lspci=text, dmesg=dmesg,
                                                cmdline="ro quiet", sysfs_edit=aer))
    assert [(f["name"], f["subject"]) for f in found] == [
        ("bar1_small", "GPU0 (0000:03:00.0)"), ("pcie_corrected_errors", "GPU0 (0000:03:00.0)"),
        ("aspm_enabled", "GPU2 (0000:81:00.0)"), ("pcie_link_down", "GPU3 (0000:82:00.0)")]
    assert {n: checks[n]["status"] for n in ("bar1_small", "pcie_corrected_errors", "aspm_enabled", "pcie_link_down")} == \
        {"bar1_small": "fail", "pcie_corrected_errors": "warn", "aspm_enabled": "warn", "pcie_link_down": "fail"}
    assert rec["gpus"][0]["aer_counts"] == {"correctable": 12, "fatal": 0, "nonfatal": 0}
    assert found[3]["evidence"].endswith("pcieport 0000:80:03.1: pciehp: Slot(3): Link Down")
    ignored = pcie.checks(found, na, ["bar1_small"], {})
    assert ignored[2]["status"] == "warn" and ignored[2]["message"].endswith("[ignored: gpu_preflight_pcie_ignore]")


def test_peer_reads_not_supported_between_a_pair(pcie, pcie_parse, tmp_path):
    p2p = body(RTX / "topo-p2p-r.txt").replace(" GPU1\tOK\tX\tOK\tOK", " GPU1\tOK\tX\tCNS\tOK")
    found = pcie.find(pcie.assemble(raw_of(pcie_parse, RTX, tmp_path, p2p_r=p2p)))[0]
    assert [(f["name"], f["subject"], f["evidence"]) for f in found] == [
        ("p2p_unsupported", "GPU1-GPU2", "topo -p2p r=CNS (topology SYS)")]


def test_whether_the_gpus_reach_each_other_directly(pcie, pcie_parse, tmp_path):
    """peer_to_peer, what the local fact tells the server (its PCIe IPC all-reduce writes into its peers'
    memory): ok on the clean platform, in doubt with an ACS-redirecting bridge, not ok with a pair that is
    not, unknown without the matrix, n/a with one GPU."""
    def status(raw):
        rec = pcie.assemble(raw)
        return pcie.peer_to_peer(rec["pairs"], pcie.find(rec)[0])

    clean = status(raw_of(pcie_parse, RTX, tmp_path / "clean"))
    assert clean == {"status": "ok", "why": "topo -p2p read and write OK for all 6 pairs, no finding puts P2P in doubt"}
    text = body(RTX / "lspci-vvv.txt")
    acs = text.index("ACSCtl:", text.index("0000:02:01.0 PCI bridge"))
    redirect = text[:acs] + text[acs:].replace("ReqRedir- CmpltRedir-", "ReqRedir+ CmpltRedir+", 1)
    doubt = status(raw_of(pcie_parse, RTX, tmp_path / "acs", lspci=redirect))
    assert doubt["status"] == "in_doubt" and "acs_redirect_enabled" in doubt["why"], doubt
    cns = body(RTX / "topo-p2p-r.txt").replace(" GPU1\tOK\tX\tOK\tOK", " GPU1\tOK\tX\tCNS\tOK")
    assert status(raw_of(pcie_parse, RTX, tmp_path / "cns", p2p_r=cns)) == {
        "status": "not_ok", "why": "nvidia-smi topo -p2p: GPU1-GPU2 read CNS write OK"}
    unread = raw_of(pcie_parse, RTX, tmp_path / "unread")
    unread["p2p"], unread["p2p_errors"] = {}, {m: "rc=2: Unknown option" for m in "rwnap"}
    assert status(unread) == {"status": "unknown", "why": "nvidia-smi topo -p2p r: rc=2: Unknown option; "
                                                          "nvidia-smi topo -p2p w: rc=2: Unknown option"}
    assert status(raw_of(pcie_parse, H200, tmp_path / "one"))["status"] == "n/a"


def test_lspci_without_root_and_topo_p2p_as_recorded_on_two_h200(pcie_parse):
    denied = pcie_parse.parse_lspci("0000:02:01.0 PCI bridge [0604]: Broadcom / LSI PEX890xx PCIe Gen 5 Switch "
                                    "[1000:c030] (rev b0)\n\tCapabilities: <access denied>\n")
    assert denied["0000:02:01.0"]["caps_readable"] is False and denied["0000:02:01.0"]["ids"] == "1000:c030"
    assert pcie_parse.parse_p2p_matrix(body(FIXTURES / "h200x2" / "topo-p2p-r.txt")) == {(0, 1): "OK"}
    assert pcie_parse.norm_bdf("00000000:18:00.0") == "0000:18:00.0" and pcie_parse.gen_of_speed("16.0 GT/s PCIe") == 4
    log = pcie_parse.parse_kernel_log("[  98.1] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, "
                                      "GPU has fallen off the bus.\n")
    assert log["xids"] == [{"pci": "0000:18:00.0", "xid": 79,
                            "text": "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."}]


def test_no_gpu_listed_judges_nothing(pcie, pcie_parse, tmp_path):
    raw = raw_of(pcie_parse, H200, tmp_path)
    raw["gpus"] = []
    found, na = pcie.find(pcie.assemble(raw))
    assert found == [] and set(na) == set(pcie.FINDINGS) and set(na.values()) == {"nvidia-smi lists no GPU"}


def test_the_role_knows_every_finding_by_name(pcie):
    role_vars = yaml.safe_load((ROOT / "roles/gpu_preflight/vars/main.yml").read_text())
    assert role_vars["__gpu_preflight_pcie_findings"] == list(pcie.FINDINGS)
    for spec in pcie.FINDINGS.values():
        assert spec["severity"] in ("error", "warning") and spec["consequence"] and spec["fix"]
        assert spec["variable"] is None or spec["variable"] in role_vars["__gpu_preflight_fixes"]


@pytest.mark.parametrize("fixture", [H200, RTX], ids=["h200", "rtxpro4"])
def test_summary_lines_name_every_gpu(pcie, pcie_parse, tmp_path, fixture):
    rec = pcie.assemble(raw_of(pcie_parse, fixture, tmp_path))
    lines = pcie.summary_lines(rec)
    assert len(lines) == len(rec["gpus"]) + len(rec["pairs"]) + 1
    assert lines[0].startswith("GPU0 ") and "gen 5 of 5 (card 5), x16 of x16" in lines[0]
