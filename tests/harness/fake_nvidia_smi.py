#!/usr/bin/python3
"""TEST DOUBLE of nvidia-smi, shipped only by the project's local test mirror.

There is no GPU on the test hosts. This program answers the nvidia-smi queries the
roles make, from a fixture: the GPUs declared in /etc/nvidia-test-double/gpus.json
when that file exists (a test writes it to simulate another machine), otherwise the
reference host baked in when the mirror was built. The driver version it reports is
the version of the package that installed it, so a driver upgrade is visible.

Supported: the banner (no arguments), ``-L``, ``--version``,
``--query-gpu=FIELDS --format=csv[,noheader][,nounits]`` and ``topo -m``.
"""

import json
import os
import sys

# Replaced when the mirror builds the package.
DRIVER_VERSION = "@DRIVER_VERSION@"
CUDA_VERSION = "@CUDA_VERSION@"
DEFAULT_GPUS = json.loads('@DEFAULT_GPUS@')
FIXTURE = os.environ.get("NVIDIA_TEST_DOUBLE_FIXTURE", "/etc/nvidia-test-double/gpus.json")


def gpus():
    try:
        with open(FIXTURE, encoding="utf-8") as fh:
            return json.load(fh)["gpus"]
    except FileNotFoundError:
        return DEFAULT_GPUS


def field(gpu, index, name, nounits):
    mib = gpu["memory_mib"]
    values = {
        "index": str(index),
        "name": gpu["name"],
        "uuid": gpu.get("uuid", "GPU-00000000-0000-0000-0000-%012d" % index),
        "compute_cap": gpu["compute_cap"],
        "memory.total": str(mib) if nounits else "%d MiB" % mib,
        "memory.used": "0" if nounits else "0 MiB",
        "driver_version": DRIVER_VERSION,
        "persistence_mode": gpu.get("persistence_mode", "Enabled"),
        "pci.bus_id": gpu.get("pci_bus_id", "00000000:%02X:00.0" % (0x18 + index)),
        "ecc.mode.current": gpu.get("ecc_mode", "Enabled"),
        "retired_pages.pending": "No",
        "serial": gpu.get("serial", "TESTDOUBLE%04d" % index),
    }
    if name not in values:
        sys.stderr.write('Field "%s" is not a valid field to query.\n' % name)
        sys.exit(2)
    return values[name]


def query(argv):
    fields, fmt = None, ""
    for arg in argv:
        if arg.startswith("--query-gpu="):
            fields = arg.split("=", 1)[1].split(",")
        elif arg.startswith("--format="):
            fmt = arg.split("=", 1)[1]
    opts = fmt.split(",")
    if "csv" not in opts:
        sys.stderr.write("--format=csv is required with --query-gpu\n")
        sys.exit(2)
    nounits = "nounits" in opts
    if "noheader" not in opts:
        print(", ".join(fields))
    for i, gpu in enumerate(gpus()):
        print(", ".join(field(gpu, i, f.strip(), nounits) for f in fields))


def banner():
    print("+-----------------------------------------------------------------------------------------+")
    print("| NVIDIA-SMI %-12s TEST DOUBLE   Driver Version: %-12s CUDA Version: %-8s|"
          % (DRIVER_VERSION, DRIVER_VERSION, CUDA_VERSION))
    print("+-----------------------------------------------------------------------------------------+")
    for i, gpu in enumerate(gpus()):
        print("|  %d  %-40s  %6d MiB   cc %s (simulated, no device)  |"
              % (i, gpu["name"], gpu["memory_mib"], gpu["compute_cap"]))
    print("+-----------------------------------------------------------------------------------------+")


def topo(count):
    names = ["GPU%d" % i for i in range(count)]
    print("\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity")
    for i in range(count):
        row = ["X" if i == j else "NODE" for j in range(count)]
        print("GPU%d\t" % i + "\t".join(row) + "\t0-63\t0")
    print("\nLegend:\n  X    = Self\n  NODE = Connection traversing PCIe as well as the interconnect "
          "between PCIe Host Bridges within a NUMA node")


def main(argv):
    if not argv:
        banner()
    elif argv[0] == "-L":
        for i, gpu in enumerate(gpus()):
            print("GPU %d: %s (UUID: %s)" % (i, gpu["name"],
                                              gpu.get("uuid", "GPU-00000000-0000-0000-0000-%012d" % i)))
    elif argv[0] == "--version":
        print("NVSMI version    : %s (TEST DOUBLE)\nDRIVER version   : %s\nCUDA Version     : %s"
              % (DRIVER_VERSION, DRIVER_VERSION, CUDA_VERSION))
    elif argv[0] == "topo" and "-m" in argv:
        topo(len(gpus()))
    elif any(a.startswith("--query-gpu=") for a in argv):
        query(argv)
    else:
        sys.stderr.write("nvidia-smi TEST DOUBLE: unsupported arguments: %s\n" % " ".join(argv))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
