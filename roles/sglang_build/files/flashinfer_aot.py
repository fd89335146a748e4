#!/usr/bin/env python3
"""Compile FlashInfer JIT modules ahead of time into a release's FlashInfer AOT directory.

Run by the release's own Python (it imports the release's flashinfer and torch); the
build tool (sglang_build.py, phase ``aot``) starts it with the environment of the build:
FLASHINFER_CUDA_ARCH_LIST, CUDA_HOME, MAX_JOBS, FLASHINFER_WORKSPACE_BASE (a scratch
directory of the build user) and PATH (the venv's ninja, the toolkit's nvcc).

How FlashInfer 0.6.3 finds a module (flashinfer/jit/core.py, env.py; 0.6.15.post1 and 0.7.2 the same:
their generators take the same arguments, and 0.7.2's get_aot_artifacts looks in the package's
data/aot/<uri>/<uri>.so before any other provider): every kernel family
is a JitSpec named by a URI that encodes its parameters (dtypes, head dims, backend...).
``JitSpec.build_and_load`` first looks for ``<FLASHINFER_AOT_DIR>/<uri>/<uri>.so`` and, when
it exists, loads it with no lock, no ninja and no write; only otherwise does it compile
into the writable JIT cache under FLASHINFER_WORKSPACE_BASE. FLASHINFER_AOT_DIR is the
installed package's ``data/aot`` (or the flashinfer-jit-cache package's directory, when
that is installed). So the modules are built here with FlashInfer's own generators and
its own ninja build (``build_jit_specs``: one ninja graph, MAX_JOBS parallel jobs), then
copied, each directory renamed into place whole, into that AOT directory, inside the
release: read-only for the server, which loads them instead of compiling.

Subcommands:
  build  --modules FILE --result FILE   compile the modules (canonical descriptors, JSON)
  load   --modules FILE --result FILE   in this (fresh) process, load every module without
                                        compiling (FLASHINFER_DISABLE_JIT=1), timed

Module descriptors are the build tool's canonical form (sglang_build_tool/plan.py, AOT_KINDS):
``{"kind": "mla", "backend": "fa2", "dtype": "bfloat16", ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path


def _dtype(name: str):
    import torch  # pylint: disable=import-outside-toplevel

    return getattr(torch, name)


def jit_spec(desc: dict):
    """The JitSpec FlashInfer's own Python API builds for this module (same generator, same arguments)."""
    import torch  # pylint: disable=import-outside-toplevel
    from flashinfer import jit  # pylint: disable=import-outside-toplevel

    kind = desc["kind"]
    simple = {
        "norm": "flashinfer.jit.norm:gen_norm_module",
        "rope": "flashinfer.jit.rope:gen_rope_module",
        "sampling": "flashinfer.jit.sampling:gen_sampling_module",
        "page": "flashinfer.jit.page:gen_page_module",
        "cascade": "flashinfer.jit.cascade:gen_cascade_module",
        "quantization": "flashinfer.jit.quantization:gen_quantization_module",
        "topk": "flashinfer.jit.topk:gen_topk_module",
        "trtllm_comm": "flashinfer.jit.comm:gen_trtllm_comm_module",
        "vllm_comm": "flashinfer.jit.comm:gen_vllm_comm_module",
    }
    if kind in simple:
        import importlib  # pylint: disable=import-outside-toplevel

        module, func = simple[kind].split(":")
        return getattr(importlib.import_module(module), func)()
    if kind == "activation":  # flashinfer.activation: silu_and_mul, gelu_and_mul, gelu_tanh_and_mul
        return jit.gen_act_and_mul_module(desc["act"])
    q, kv = _dtype(desc["dtype"]), _dtype(desc.get("dtype_kv") or desc["dtype"])
    if kind == "mla":  # flashinfer.mla.BatchMLAPagedAttentionWrapper.plan: o = q dtype, idx = int32 indptr
        return jit.gen_batch_mla_module(desc["backend"], q, kv, q, torch.int32, desc["head_dim_ckv"],
                                        desc["head_dim_kpe"], False)
    flags = (desc["pos_encoding_mode"], desc["sliding_window"], desc["logits_soft_cap"])
    if kind == "prefill":  # Batch{Ragged,Paged}Prefill wrappers (and tensor-core decode, fa2): one module
        return jit.gen_batch_prefill_module(desc["backend"], q, kv, q, torch.int32, desc["head_dim_qk"],
                                            desc["head_dim_vo"], *flags, desc["fp16_qk_reduction"])
    if kind == "decode":  # BatchDecodeWithPagedKVCacheWrapper without tensor cores
        return jit.gen_batch_decode_module(q, kv, q, torch.int32, desc["head_dim"], desc["head_dim"], *flags)
    if kind == "single_decode":  # flashinfer.single_decode_with_kv_cache
        return jit.gen_single_decode_module(q, kv, q, desc["head_dim"], desc["head_dim"], *flags)
    if kind == "single_prefill":  # flashinfer.single_prefill_with_kv_cache
        return jit.gen_single_prefill_module(desc["backend"], q, kv, q, desc["head_dim_qk"], desc["head_dim_vo"],
                                             *flags, desc["fp16_qk_reduction"])
    raise ValueError(f"unknown FlashInfer module kind {kind!r}")


def expected_archs(spec) -> list[str]:
    """The archs FlashInfer compiles this module for: its own -gencode flags where it names them
    (fa3 and other Hopper-only modules: sm_90a; the trtllm all-reduce: majors 9 and 10), else
    every arch of FLASHINFER_CUDA_ARCH_LIST."""
    from flashinfer.jit.core import current_compilation_context  # pylint: disable=import-outside-toplevel

    own = [f for f in (spec.extra_cuda_cflags or []) if f.startswith("-gencode=")]
    flags = own or [f for f in current_compilation_context.get_nvcc_flags_list() if f.startswith("-gencode=")]
    return sorted({m.group(1) for f in flags for m in [re.search(r"code=(sm_\w+)", f)] if m})


def ninja_times(jit_dir: Path, names: list[str]) -> dict:
    """Per module, from ninja's own log: the wall time from its first job's start to its last
    job's end, and the summed seconds of its jobs (the parallel build interleaves modules)."""
    log = jit_dir / ".ninja_log"
    spans: dict[str, list[tuple[int, int]]] = {}
    if log.exists():
        for line in log.read_text(errors="replace").splitlines():
            cols = line.split("\t")
            if line.startswith("#") or len(cols) < 4:
                continue
            rel = os.path.relpath(cols[3], jit_dir) if os.path.isabs(cols[3]) else cols[3]
            spans.setdefault(rel.split(os.sep)[0], []).append((int(cols[0]), int(cols[1])))
    out = {}
    for name in names:
        jobs = spans.get(name, [])
        out[name] = {"jobs": len(jobs),
                     "wall_seconds": round((max(e for _, e in jobs) - min(s for s, _ in jobs)) / 1000, 1) if jobs else 0.0,
                     "job_seconds": round(sum(e - s for s, e in jobs) / 1000, 1)}
    return out


def build(modules: list[dict]) -> dict:
    from flashinfer.jit import build_jit_specs  # pylint: disable=import-outside-toplevel
    from flashinfer.jit import env as jit_env  # pylint: disable=import-outside-toplevel
    from flashinfer.version import __version__  # pylint: disable=import-outside-toplevel

    aot_dir = Path(jit_env.FLASHINFER_AOT_DIR)
    aot_dir.mkdir(parents=True, exist_ok=True)
    for leftover in aot_dir.glob(".*.tmp-*"):  # a copy a killed run left half done
        shutil.rmtree(leftover, ignore_errors=True)
    started = time.monotonic()
    specs = [jit_spec(desc) for desc in modules]
    todo = [s for s in specs if not s.aot_path.exists()]
    print(f"flashinfer {__version__}: {len(specs)} modules, {len(specs) - len(todo)} already in {aot_dir}, "
          f"compiling {len(todo)} for FLASHINFER_CUDA_ARCH_LIST={os.environ.get('FLASHINFER_CUDA_ARCH_LIST')!r} "
          f"with MAX_JOBS={os.environ.get('MAX_JOBS')}", flush=True)
    if todo:
        build_jit_specs(todo, verbose=True, skip_prebuilt=False)
    compiled = time.monotonic() - started
    times = ninja_times(Path(jit_env.FLASHINFER_JIT_DIR), [s.name for s in todo])
    for spec in todo:  # each module's directory appears whole, or not at all
        tmp = aot_dir / f".{spec.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        shutil.copy2(spec.jit_library_path, tmp / f"{spec.name}.so")
        os.replace(tmp, aot_dir / spec.name)
    result = []
    for desc, spec in zip(modules, specs, strict=True):
        result.append({"name": spec.name, "descriptor": desc, "expected_archs": expected_archs(spec),
                       "so": str(spec.aot_path), "compiled_now": spec in todo, **times.get(spec.name, {})})
    return {"flashinfer": __version__, "aot_dir": str(aot_dir), "arch_list": os.environ.get("FLASHINFER_CUDA_ARCH_LIST"),
            "seconds": round(compiled, 1), "modules": result}


def load(modules: list[dict]) -> dict:
    """Load every module as FlashInfer's API does (build_and_load), with JIT disabled: a module
    not found precompiled raises instead of compiling."""
    os.environ["FLASHINFER_DISABLE_JIT"] = "1"
    started = time.monotonic()
    out = []
    for desc in modules:
        t0 = time.monotonic()
        spec = jit_spec(desc)
        entry = {"name": spec.name, "aot": spec.is_aot}
        try:
            spec.build_and_load()
            entry["loaded"] = True
        except Exception as err:  # reported, not hidden
            entry.update(loaded=False, error=f"{type(err).__name__}: {err}"[:500])
        entry["seconds"] = round(time.monotonic() - t0, 3)
        out.append(entry)
    return {"seconds": round(time.monotonic() - started, 3), "modules": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["build", "load"])
    ap.add_argument("--modules", required=True, help="JSON file: a list of canonical module descriptors")
    ap.add_argument("--result", required=True, help="JSON file the result is written to")
    args = ap.parse_args(argv)
    modules = json.loads(Path(args.modules).read_text())
    result = build(modules) if args.command == "build" else load(modules)
    Path(args.result).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if args.command == "build" or all(m["loaded"] for m in result["modules"]) else 1


if __name__ == "__main__":
    sys.exit(main())
