#!/usr/bin/env python3
"""What the release that will serve takes and reads, asked of its own sources before the server's
settings are rendered.

Why: SGLang renames and retires flags and environment variables between releases, and the server's
command line must be the one the release it starts takes. ``--cuda-graph-max-bs`` is a deprecated
alias of ``--cuda-graph-max-bs-decode`` in 0.5.17 (a warning at every start) and matches two flags in
0.5.23, whose parser refuses it as ambiguous (``--cuda-graph-max-bs-decode``/``-prefill``);
``SGLANG_ENABLE_SPEC_V2`` is read in 0.5.9 and by no code from 0.5.17 on (0.5.17 only warns that it
was removed); ``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE`` exists from 0.5.21 on. This tool reads the files of
the release's sglang package (no import: importing ``sglang.srt.server_args`` costs seconds of torch,
the ServerArgs check does that once the command line is rendered, and proves the result):

- ``options``: the ServerArgs field each of the role's options is rendered as (``cuda_graph_max_bs``:
  ``cuda_graph_max_bs_decode`` where the release declares that field, in ``srt/server_args.py`` or
  its ``srt/arg_groups/fields/`` modules, else ``cuda_graph_max_bs``; ``cuda_graph_max_bs_prefill``, the
  prefill graphs' largest token count: itself where declared, else ``piecewise_cuda_graph_max_tokens``, the
  bound of the opt-in piecewise graphs that came before it);
- ``env``: for each environment variable the role renders, whether the release reads it: declared
  in ``srt/environ.py``, SGLang's registry of the variables its code reads (``envs.NAME.get()``);
- ``pcie_ipc_allreduce``: the release carries the PCIe IPC all-reduce
  (``srt/distributed/device_communicators/pcie_ipc_ar.py``) and reads its switch;
- ``version``: the release's version (``sglang/_version.py`` or ``version.py``, else the installed metadata).

Usage: python sglang_release_features.py SGLANG_DIR   (prints JSON; exit 2 when SGLANG_DIR is no sglang package)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# The environment variables the role renders, by name (sglang_server's defaults and its PCIe fast path).
RENDERED_ENV = ("SGLANG_ENABLE_SPEC_V2", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE")
ENV_DECLARED = re.compile(r"^\s+(SGLANG_[A-Z0-9_]+)\s*=\s*Env[A-Za-z]*\(", re.M)
VERSION = re.compile(r"^__version__\s*=\s*(?:version\s*=\s*)?[\"']([^\"']+)", re.M)
PCIE_IPC_MODULE = "srt/distributed/device_communicators/pcie_ipc_ar.py"


def read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def declares_field(sglang_dir: Path, name: str) -> bool:
    """Whether ServerArgs declares ``name`` as a field (``name: type`` at the start of a line), in
    srt/server_args.py (0.5.17) or the field modules the later releases split it into (0.5.23)."""
    sources = [sglang_dir / "srt" / "server_args.py", *sorted((sglang_dir / "srt" / "arg_groups" / "fields").glob("*.py"))]
    pattern = re.compile(rf"^\s+{re.escape(name)}\s*:", re.M)
    return any(pattern.search(read(path)) for path in sources)


def release_version(sglang_dir: Path) -> str:
    """The version file the build generates (_version.py), else version.py (as sglang_eagle3_patch's launch
    facts read it), else the installed metadata."""
    for name in ("_version.py", "version.py"):
        found = VERSION.search(read(sglang_dir / name))
        if found:
            return found.group(1)
    from importlib import metadata
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return "unknown"


def features(sglang_dir: Path) -> dict:
    declared = set(ENV_DECLARED.findall(read(sglang_dir / "srt" / "environ.py")))
    env = {name: name in declared for name in RENDERED_ENV}
    return {
        "version": release_version(sglang_dir),
        "options": {"cuda_graph_max_bs": "cuda_graph_max_bs_decode"
                    if declares_field(sglang_dir, "cuda_graph_max_bs_decode") else "cuda_graph_max_bs",
                    "cuda_graph_max_bs_prefill": "cuda_graph_max_bs_prefill"
                    if declares_field(sglang_dir, "cuda_graph_max_bs_prefill") else "piecewise_cuda_graph_max_tokens"},
        "env": env,
        "pcie_ipc_allreduce": (sglang_dir / PCIE_IPC_MODULE).is_file() and env["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"],
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    sglang_dir = Path(args[0]) if len(args) == 1 else None
    if sglang_dir is None or not (sglang_dir / "srt").is_dir():
        print(json.dumps({"error": f"not an sglang package directory: {args}"}))
        return 2
    print(json.dumps(features(sglang_dir), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
