#!/usr/bin/python
"""Ansible module: what NVIDIA driver, GPUs and CUDA toolkit a host has now.

Read-only (supports check mode, never reports a change). The role decides from these
facts whether anything must be installed, so a host whose stack already matches is
left alone, whether it came from apt, a runfile or an image.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_cuda_facts
short_description: Detect the NVIDIA driver, GPUs and CUDA toolkit of a host
description:
  - Driver version from C(nvidia-smi), else C(/proc/driver/nvidia/version), else C(modinfo nvidia).
  - GPUs (index, name, uuid, compute capability, memory, persistence mode, PCI bus id) from C(nvidia-smi).
  - Toolkit release from C(nvcc --version) under I(cuda_home).
  - NVIDIA and CUDA packages known to dpkg, with version and selection (hold) state.
options:
  cuda_home:
    description: CUDA toolkit directory whose C(bin/nvcc) is checked.
    type: path
    required: true
  nvidia_smi:
    description: nvidia-smi program to ask.
    type: str
    default: nvidia-smi
author: sglang-ansible
"""

RETURN = r"""
nvidia_cuda_facts:
  description: driver, gpus, gpu_count, toolkit, packages, device_nodes.
  returned: always
  type: dict
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule

GPU_FIELDS = ["index", "name", "uuid", "compute_cap", "memory.total", "persistence_mode", "pci.bus_id"]
PACKAGE_PATTERNS = ["nvidia-*", "libnvidia-*", "cuda-*", "libcuda*"]


def parse_gpu_csv(text: str) -> list[dict]:
    """Parse ``nvidia-smi --query-gpu=GPU_FIELDS --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != len(GPU_FIELDS):
            raise ValueError("unexpected nvidia-smi line (%d fields, want %d): %r"
                             % (len(cols), len(GPU_FIELDS), line))
        row = dict(zip(GPU_FIELDS, cols, strict=True))
        gpus.append({
            "index": int(row["index"]),
            "name": row["name"],
            "uuid": row["uuid"],
            "compute_cap": row["compute_cap"],
            "memory_mib": int(float(row["memory.total"])) if row["memory.total"] not in ("[N/A]", "") else None,
            "persistence_mode": row["persistence_mode"],
            "pci_bus_id": row["pci.bus_id"],
        })
    return gpus


def parse_cuda_version_banner(text: str) -> str | None:
    """The highest CUDA version the driver supports, from nvidia-smi's banner."""
    m = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", text)
    return m.group(1) if m else None


def parse_proc_version(text: str) -> str | None:
    """``/proc/driver/nvidia/version``: 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05 ...'."""
    m = re.search(r"NVRM version:.*?\s([0-9]{3}\.[0-9]+(?:\.[0-9]+)?)\s", text)
    return m.group(1) if m else None


def parse_nvcc_version(text: str) -> dict | None:
    """``nvcc --version``: '... release 13.0, V13.0.88'."""
    m = re.search(r"release ([0-9]+\.[0-9]+), V([0-9.]+)", text)
    if not m:
        return None
    return {"version": m.group(1), "release": m.group(2)}


def parse_dpkg_query(text: str) -> dict:
    """``dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Status}\\n'``."""
    packages = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 4:
            continue
        name, version, _abbrev, status = parts
        want, _flag, state = (status.split(" ") + ["", "", ""])[:3]
        if state in ("not-installed", "config-files"):
            continue
        packages[name] = {"version": version, "held": want == "hold", "state": state}
    return packages


def driver_branch(version: str | None) -> str | None:
    return version.split(".", 1)[0] if version else None


def detect(module: AnsibleModule) -> dict:
    cuda_home = module.params["cuda_home"]
    smi = module.get_bin_path(module.params["nvidia_smi"]) if "/" not in module.params["nvidia_smi"] \
        else module.params["nvidia_smi"]
    facts = {
        "driver": {"installed": False, "version": None, "branch": None, "cuda_version": None, "source": None},
        "gpus": [], "gpu_count": 0, "nvidia_smi": smi, "nvidia_smi_error": None,
        "toolkit": {"installed": False, "version": None, "release": None, "nvcc": None, "cuda_home": cuda_home},
        "packages": {},
        "device_nodes": sorted(glob.glob("/dev/nvidia[0-9]*")),
    }
    drv = facts["driver"]

    if smi and os.access(smi, os.X_OK):
        rc, out, err = module.run_command([smi, "--query-gpu=" + ",".join(GPU_FIELDS),
                                           "--format=csv,noheader,nounits"])
        if rc == 0:
            try:
                facts["gpus"] = parse_gpu_csv(out)
            except ValueError as exc:
                module.fail_json(msg=str(exc))
            facts["gpu_count"] = len(facts["gpus"])
            rc2, banner, _ = module.run_command([smi])
            drv["cuda_version"] = parse_cuda_version_banner(banner) if rc2 == 0 else None
            rc3, ver, _ = module.run_command([smi, "--query-gpu=driver_version", "--format=csv,noheader"])
            if rc3 == 0 and ver.strip():
                drv.update(installed=True, version=ver.splitlines()[0].strip(), source="nvidia-smi")
        else:
            # e.g. 'NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver'
            facts["nvidia_smi_error"] = (out + err).strip()[:500]

    if not drv["installed"] and os.path.exists("/proc/driver/nvidia/version"):
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            version = parse_proc_version(fh.read())
        if version:
            drv.update(installed=True, version=version, source="/proc/driver/nvidia/version")

    if not drv["installed"]:
        modinfo = module.get_bin_path("modinfo")
        if modinfo:
            rc, out, _ = module.run_command([modinfo, "-F", "version", "nvidia"])
            if rc == 0 and re.match(r"^[0-9]{3}\.", out.strip()):
                drv.update(installed=True, version=out.strip(), source="modinfo")
    drv["branch"] = driver_branch(drv["version"])

    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    if os.access(nvcc, os.X_OK):
        rc, out, _ = module.run_command([nvcc, "--version"])
        parsed = parse_nvcc_version(out) if rc == 0 else None
        if parsed:
            facts["toolkit"].update(installed=True, nvcc=nvcc, **parsed)

    dpkg_query = module.get_bin_path("dpkg-query")
    if dpkg_query:
        rc, out, _ = module.run_command(
            [dpkg_query, "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\t${Status}\n",
             *PACKAGE_PATTERNS])
        facts["packages"] = parse_dpkg_query(out)  # rc 1 just means some pattern matched nothing
    return facts


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "cuda_home": {"type": "path", "required": True},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    module.exit_json(changed=False, nvidia_cuda_facts=detect(module))


if __name__ == "__main__":
    main()
