"""The CUDA archs of compiled code: what nvcc builds, what a module or a cubin carries."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path


def nvcc_archs(nvcc: Path) -> set[str]:
    """The virtual archs this nvcc compiles for (compute_75 ... compute_121 for CUDA 13.0)."""
    proc = subprocess.run([str(nvcc), "--list-gpu-arch"], capture_output=True, text=True, check=False)
    return set(re.findall(r"compute_\d+", proc.stdout))


def unbuildable(arch_list: str, known: set[str]) -> list[str]:
    """Archs of a FLASHINFER_CUDA_ARCH_LIST that nvcc cannot build: an unknown compute capability,
    'a' (arch-specific) below 9.0, 'f' (family) below 10.0."""
    bad = []
    for arch in arch_list.split():
        match = re.fullmatch(r"(\d+)\.(\d+)([af]?)", arch)
        if not match or f"compute_{match[1]}{match[2]}" not in known or \
                (match[3] == "a" and int(match[1]) < 9) or (match[3] == "f" and int(match[1]) < 10):
            bad.append(arch)
    return bad


FATBIN_MAGIC = 0xBA55ED50


FATBIN_ARCH_SPECIFIC = 0x100000  # entry flag of sm_XXa code (read off nvcc 13.0's output)


def fatbin_archs(path: Path) -> dict:
    """The code a shared object carries, read from the headers of its embedded fatbins (no
    cuobjdump needed, compressed entries too): machine code as sm_XX[a], PTX as compute_XX."""
    data = path.read_bytes()
    sass, ptx = set(), set()
    pos = data.find(FATBIN_MAGIC.to_bytes(4, "little"))
    while pos >= 0:
        _magic, _version, header, size = struct.unpack_from("<IHHQ", data, pos)
        entry, end = pos + header, pos + header + size
        while entry + 48 <= end:
            kind, _unused, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            (flags,) = struct.unpack_from("<Q", data, entry + 40)
            if kind == 2:
                sass.add(f"sm_{arch}" + ("a" if flags & FATBIN_ARCH_SPECIFIC else ""))
            elif kind == 1:
                ptx.add(f"compute_{arch}")
            if entry_header == 0:
                break
            entry += entry_header + payload
        pos = data.find(FATBIN_MAGIC.to_bytes(4, "little"), max(end, pos + 4))
    return {"archs": sorted(sass), "ptx": sorted(ptx), "read_by": "fatbin headers (no cuobjdump)"}


def list_archs(path: Path, cuobjdump: Path | None) -> dict:
    """The machine code archs of a module: `cuobjdump --list-elf` where it exists, else the fatbin headers."""
    tool = cuobjdump if cuobjdump and cuobjdump.exists() else shutil.which("cuobjdump")
    if tool:
        proc = subprocess.run([str(tool), "--list-elf", str(path)], capture_output=True, text=True, check=False)
        found = sorted(set(re.findall(r"\.(sm_\d+[af]?)\.cubin", proc.stdout)))
        if proc.returncode == 0 and found:
            return {"archs": found, "read_by": "cuobjdump --list-elf"}
    return fatbin_archs(path)


def read_cubin_arch(cubin: Path, cuobjdump: Path) -> dict:
    """The arch of compiled code: cuobjdump where it exists, else the cubin's ELF header.

    cuobjdump for CUDA 13 is not on PyPI, so the ELF reader of the nvidia_cuda role
    (nvidia_cuda_verify.cubin_sm, shipped next to this tool) is the fallback.
    """
    tool = cuobjdump if cuobjdump.exists() else shutil.which("cuobjdump")
    if tool:
        proc = subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True, check=False)
        match = re.search(r"arch = sm_(\d+)(\w*)", proc.stdout)
        if match:
            return {"sm": int(match.group(1)), "reported": f"sm_{match.group(1)}{match.group(2)}",
                    "read_by": "cuobjdump"}
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tools directory, beside the package
    from nvidia_cuda_verify import cubin_sm  # pylint: disable=import-outside-toplevel
    sm = cubin_sm(str(cubin))
    return {"sm": sm, "reported": f"sm_{sm}", "read_by": "ELF header (no cuobjdump)"}
