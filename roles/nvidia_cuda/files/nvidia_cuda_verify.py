#!/usr/bin/env python3
"""Compile (and, where a GPU exists, run) a small CUDA kernel for the expected arch.

Prints one JSON object. Leaves nothing behind: it works in a temporary directory.
The kernel writes a known pattern into device memory and the host checks every
element, so a launch that silently did nothing (wrong arch, no kernel image) fails.

Usage: nvidia_cuda_verify.py --nvcc PATH --arch sm_120a [--run]
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

KERNEL = r"""
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * i + 1;
}

static int check(cudaError_t err, const char *what) {
  if (err != cudaSuccess) {
    printf("{\"ok\": false, \"step\": \"%s\", \"error\": \"%s\"}\n", what, cudaGetErrorString(err));
    return 1;
  }
  return 0;
}

int main() {
  const int n = 1 << 20;
  int count = 0;
  if (check(cudaGetDeviceCount(&count), "cudaGetDeviceCount")) return 1;
  cudaDeviceProp prop;
  if (check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) return 1;
  int *dev = nullptr;
  if (check(cudaMalloc(&dev, n * sizeof(int)), "cudaMalloc")) return 1;
  if (check(cudaMemset(dev, 0xff, n * sizeof(int)), "cudaMemset")) return 1;
  fill<<<(n + 255) / 256, 256>>>(dev, n);
  if (check(cudaGetLastError(), "launch")) return 1;
  if (check(cudaDeviceSynchronize(), "synchronize")) return 1;
  int *host = new int[n];
  if (check(cudaMemcpy(host, dev, n * sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy")) return 1;
  long bad = 0;
  for (int i = 0; i < n; ++i) bad += host[i] != 2 * i + 1;
  printf("{\"ok\": %s, \"devices\": %d, \"device0\": \"%s\", \"compute_capability\": \"%d.%d\", "
         "\"elements\": %d, \"wrong_elements\": %ld}\n",
         bad == 0 ? "true" : "false", count, prop.name, prop.major, prop.minor, n, bad);
  delete[] host;
  cudaFree(dev);
  return bad == 0 ? 0 : 1;
}
"""


def cubin_sm(path: str) -> int:
    """The SM version a cubin's machine code is for, from its ELF header.

    CUDA ELF files have OS/ABI 0x41 ('A'); the target SM sits in e_flags, in bits
    8-15 from ELF ABI version 8 (CUDA 12.8+) and in bits 0-7 before. Reading it proves
    which arch the produced code targets without cuobjdump.
    """
    with open(path, "rb") as fh:
        head = fh.read(52)
    if head[:4] != b"\x7fELF" or head[7] != 0x41:
        raise ValueError("%s is not a CUDA ELF file" % path)
    (flags,) = struct.unpack_from("<I", head, 48)
    return (flags >> 8) & 0xFF if head[8] >= 8 else flags & 0xFF


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--arch", required=True, help="e.g. sm_120a or sm_90")
    ap.add_argument("--run", action="store_true", help="run the kernel (needs a GPU)")
    args = ap.parse_args()

    result = {"arch": args.arch, "nvcc": args.nvcc, "compiled": False, "run": "skipped"}
    with tempfile.TemporaryDirectory(prefix="nvidia-cuda-verify-") as tmp:
        src = os.path.join(tmp, "verify.cu")
        exe = os.path.join(tmp, "verify")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(KERNEL)
        cmd = [args.nvcc, "-arch=" + args.arch, "-o", exe, src]
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        result["compile_seconds"] = round(time.monotonic() - started, 1)
        result["compile_command"] = " ".join(["nvcc", "-arch=" + args.arch, "-o", "verify", "verify.cu"])
        if proc.returncode != 0:
            result["error"] = (proc.stdout + proc.stderr).strip()[-2000:]
            print(json.dumps(result))
            return 1
        result["compiled"] = True
        cubin = os.path.join(tmp, "verify.cubin")
        subprocess.run([args.nvcc, "-arch=" + args.arch, "-cubin", "-o", cubin, src],
                       capture_output=True, text=True, check=True)
        result["cubin_sm"] = cubin_sm(cubin)
        if args.run:
            proc = subprocess.run([exe], capture_output=True, text=True, check=False, timeout=120)
            try:
                result["kernel"] = json.loads(proc.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                result["kernel"] = {"ok": False, "error": (proc.stdout + proc.stderr).strip()[-2000:]}
            result["run"] = "passed" if proc.returncode == 0 and result["kernel"].get("ok") else "failed"
    print(json.dumps(result))
    return 0 if result["run"] in ("passed", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
