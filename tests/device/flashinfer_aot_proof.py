"""Prove sglang_build's FlashInfer AOT step on a real GPU: compile, check archs, run, load with no compile.

Used on the lent GPU machine (no network, no systemd; CUDA 13.0, torch in python3): makes a
release-like venv (python3's torch through a .pth file, FlashInfer 0.6.3 and its two extra
wheels installed offline from --wheels), then runs the build tool exactly as the role runs
it (`sglang_build.py aot` with the spec, twice: the second must change nothing), reads every
module's machine code archs back (the check phase's reader: `cuobjdump --list-elf`, and the
fatbin-header reader beside it), shows that a module missing its arch fails the check naming
the module and that an arch nvcc cannot build fails before any compile, and then in fresh
processes of the release's Python:

* after:  every module's first call with FLASHINFER_DISABLE_JIT=1 and an empty JIT workspace
          (a module that is not precompiled raises instead of compiling), against a torch
          reference; twice, in two processes;
* before: the same first calls with the AOT directory hidden, so FlashInfer's JIT compiles
          each module as a server's first start would (for the same arch list), as far as the
          time budget (--deadline) allows.

Usage: python3 tests/device/flashinfer_aot_proof.py OUT --wheels DIR [--arch "9.0a 12.0a"]
       [--deadline SECONDS] [--jobs N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "roles" / "sglang_build" / "files"
TOOL = FILES / "sglang_build.py"

# The set a Kimi-K2.5 server on SM120 loads with --attention-backend flashinfer and EAGLE-3
# (derive_aot_modules: MLA decode/verify, MLA ragged prefill, the draft's prefill and decode,
# merge_state), plus the four modules the issue named (norm, rope, sampling, activation), which
# SGLang 0.5.9 takes from sgl-kernel instead. fa2: FlashInfer's choice on SM120; on this H200 the
# wrappers are asked for fa2 explicitly (its "auto" would pick fa3 on sm_90a).
MODULES = [
    {"kind": "mla", "backend": "fa2", "head_dim_ckv": 512, "head_dim_kpe": 64},
    {"kind": "prefill", "backend": "fa2", "head_dim_qk": 192, "head_dim_vo": 128},
    {"kind": "prefill", "backend": "fa2", "head_dim_qk": 128},
    {"kind": "decode", "head_dim": 128},
    {"kind": "cascade"},
    {"kind": "norm"},
    {"kind": "rope"},
    {"kind": "sampling"},
    {"kind": "activation", "act": "silu"},
]
# The order of the "before" (JIT) measurements, most telling first.
BEFORE_ORDER = ["norm", "activation", "mla", "cascade", "decode", "rope", "sampling", "prefill_draft", "prefill_mla"]


def spec_for(root: Path, arch: str, jobs: int, modules: list[dict]) -> dict:
    """A build spec as the role renders it (vars/main.yml), for this machine."""
    comp = {"mode": "wheel", "wheel_url": "", "index_url": "", "extra_index_urls": [], "repo": "", "ref": "",
            "subdir": ".", "build_isolation": True, "build_requires": [], "env": {}, "needs_torch": False}
    return {
        "root": str(root), "python": sys.executable,
        "cuda": {"version": "13.0", "home": os.path.realpath("/usr/local/cuda")},
        "arch": {"torch_cuda_arch_list": "9.0 12.0", "flashinfer_cuda_arch_list": arch},
        "max_jobs": jobs, "cmake_args": "",
        "pip": {"index_url": "", "extra_index_urls": [], "find_links": [], "no_index": True, "trusted_hosts": [],
                "cert": "", "no_deps": True, "compile": False, "extra_packages": []},
        "patch": {"eagle3": False, "id": ""}, "required_model_files": [],
        "components": {"torch": dict(comp, version="2.11.0"), "sgl_kernel": dict(comp, version="0.3.21"),
                       "flashinfer": dict(comp, version="0.6.3"), "sglang": dict(comp, version="0.5.9")},
        "flashinfer_aot": {"enabled": True, "modules": modules, "attention_backend": "flashinfer",
                           "allreduce_fusion": False, "speculative_algorithm": "EAGLE3", "draft_head_dim": 128,
                           "arch_list_from": "sglang_build_flashinfer_cuda_arch_list",
                           # a trial where the toolkit has no lib64/stubs/libcuda.so: -L to a stand-in
                           **({"env": {"FLASHINFER_EXTRA_LDFLAGS": os.environ["FLASHINFER_EXTRA_LDFLAGS"]}}
                              if os.environ.get("FLASHINFER_EXTRA_LDFLAGS") else {})},
    }


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    except FileNotFoundError as err:
        return subprocess.CompletedProcess(cmd, 127, "", str(err))


def make_venv(build, wheels: Path, out: Path) -> None:
    """The release venv: python3's torch (through a .pth file: this machine has no network) and FlashInfer."""
    py = build.venv / "bin" / "python"
    if (build.release / "venv.json").exists():
        return
    shutil.rmtree(build.release, ignore_errors=True)
    build.release.mkdir(parents=True)
    sh([sys.executable, "-m", "venv", "--without-pip", str(build.venv)]).check_returncode()
    torch_site = sh([sys.executable, "-c", "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"])
    site = sh([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(site, "device_torch.pth").write_text(torch_site.stdout.strip() + "\n")
    proc = sh([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--ignore-installed", "--no-compile",
               "--quiet", "--target", site, *map(str, sorted(wheels.glob("*.whl")))])
    (out / "pip-install.log").write_text(proc.stdout + proc.stderr)
    proc.check_returncode()
    (build.release / "venv.json").write_text(json.dumps({"installed": {}, "started": time.time(), "seconds": 0}))


def tool(phase: str, spec: Path, log: Path) -> tuple[dict, float]:
    started = time.monotonic()
    proc = sh([sys.executable, str(TOOL), phase, "--spec", str(spec)])
    wall = time.monotonic() - started
    log.write_text(f"$ sglang_build.py {phase} --spec {spec.name}\n# rc={proc.returncode} wall={wall:.1f}s\n"
                   f"{proc.stdout}\n--- stderr\n{proc.stderr}")
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1]), wall
    except (ValueError, IndexError):
        return {"failed": True, "rc": proc.returncode, "stderr": proc.stderr[-2000:]}, wall


# ----------------------------------------------------------------- worker (the release's Python)
def tests():
    """Each test: (label, its module's kind, a function that makes inputs, calls FlashInfer's
    public API and returns (out, ref) as float tensors)."""
    import flashinfer
    import torch
    import torch.nn.functional as F

    dev, bf16 = "cuda", torch.bfloat16
    ws = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device=dev)

    def r(*shape, dtype=bf16):
        return torch.randn(*shape, device=dev, dtype=torch.float32).to(dtype)

    def attn(q, k, v, scale, mask=None):  # q (n, h, d), k/v (m, h, d) in float32
        s = torch.einsum("nhd,mhd->hnm", q, k) * scale
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return torch.einsum("hnm,mhd->nhd", torch.softmax(s, -1), v)

    def causal(n, m):  # FlashInfer aligns a causal mask at the bottom right
        return torch.arange(m, device=dev)[None, :] <= (torch.arange(n, device=dev)[:, None] + m - n)

    def t_norm():
        x, w = r(64, 7168), r(7168)
        out = flashinfer.norm.rmsnorm(x, w, 1e-6)
        xf = x.float()
        return out.float(), xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()

    def t_activation():
        x = r(64, 2 * 2048)
        return flashinfer.activation.silu_and_mul(x).float(), F.silu(x[:, :2048].float()) * x[:, 2048:].float()

    def t_rope():
        nnz, heads, d = 64, 8, 128
        q, k = r(nnz, heads * d), r(nnz, 2 * d)
        pos = torch.randint(0, 4096, (nnz,), device=dev)
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
        ang = torch.arange(4096, device=dev, dtype=torch.float32)[:, None] * inv[None, :]
        cache = torch.cat([ang.cos(), ang.sin()], -1)
        qo, ko = flashinfer.rope.apply_rope_with_cos_sin_cache(pos, q.clone(), k.clone(), d, cache, is_neox=True)

        def ref(x):
            x = x.float().view(nnz, -1, d)
            cos, sin = cache[pos, : d // 2][:, None, :], cache[pos, d // 2:][:, None, :]
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).view(nnz, -1)

        return torch.cat([qo.float(), ko.float()], 1), torch.cat([ref(q), ref(k)], 1)

    def t_sampling():
        logits = torch.randn(16, 32000, device=dev)
        probs = flashinfer.sampling.softmax(logits)
        kept = flashinfer.sampling.top_k_renorm_probs(probs, 50)
        ref_p = torch.softmax(logits, -1)
        thr = torch.topk(ref_p, 50, -1).values[:, -1:]
        ref_k = torch.where(ref_p >= thr, ref_p, 0)
        return torch.cat([probs, kept], 1) * 1000, torch.cat([ref_p, ref_k / ref_k.sum(-1, keepdim=True)], 1) * 1000

    def t_cascade():
        va, vb = r(64, 8, 128), r(64, 8, 128)
        sa, sb = torch.randn(64, 8, device=dev) * 4, torch.randn(64, 8, device=dev) * 4
        v, s = flashinfer.cascade.merge_state(va, sa, vb, sb)
        m = torch.maximum(sa, sb)
        wa, wb = torch.exp2(sa - m), torch.exp2(sb - m)  # FlashInfer's LSE is base 2
        ref = (va.float() * wa[..., None] + vb.float() * wb[..., None]) / (wa + wb)[..., None]
        return torch.cat([v.float().flatten(), s.flatten()]), torch.cat([ref.flatten(), (torch.log2(wa + wb) + m).flatten()])

    def t_mla():  # decode on the compressed KV, as FlashInferMLAAttnBackend (page size 1, 16 heads per rank)
        lens, heads = [37, 100, 513, 1024], 16
        total = sum(lens)
        ckv, kpe = r(total, 1, 512), r(total, 1, 64)
        qn, qp = r(len(lens), heads, 512), r(len(lens), heads, 64)
        kv_indptr = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=dev)
        qo_indptr = torch.arange(len(lens) + 1, dtype=torch.int32, device=dev)
        scale = 1 / math.sqrt(192)
        w = flashinfer.mla.BatchMLAPagedAttentionWrapper(ws, backend="fa2")
        w.plan(qo_indptr, kv_indptr, torch.arange(total, dtype=torch.int32, device=dev),
               torch.tensor(lens, dtype=torch.int32, device=dev), heads, 512, 64, 1, False, scale, bf16, bf16)
        out = w.run(qn, qp, ckv, kpe).float()
        refs = []
        for i, n in enumerate(lens):
            s0 = int(kv_indptr[i])
            c, p = ckv[s0:s0 + n, 0].float(), kpe[s0:s0 + n, 0].float()
            logits = (qn[i].float() @ c.T + qp[i].float() @ p.T) * scale
            refs.append(torch.softmax(logits, -1) @ c)
        return out, torch.stack(refs)

    def t_prefill_mla():  # MLA prefill as MHA on the ragged KV: head_dim_qk 192, head_dim_vo 128, causal
        lens, heads = [100, 257], 16
        nnz = sum(lens)
        q, k, v = r(nnz, heads, 192), r(nnz, heads, 192), r(nnz, heads, 128)
        indptr = torch.tensor([0, lens[0], nnz], dtype=torch.int32, device=dev)
        w = flashinfer.prefill.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="fa2")
        w.plan(indptr, indptr, heads, heads, 192, 128, causal=True, q_data_type=bf16, kv_data_type=bf16)
        out = w.run(q, k, v).float()
        ref = torch.cat([attn(q[a:b].float(), k[a:b].float(), v[a:b].float(), 1 / math.sqrt(192), causal(b - a, b - a))
                         for a, b in ((0, lens[0]), (lens[0], nnz))])
        return out, ref

    def paged(qo, kv, qh, kh):
        total = sum(kv)
        kc, vc = r(total, 1, kh, 128), r(total, 1, kh, 128)
        q = r(sum(qo), qh, 128)
        kv_indptr = torch.tensor([0, *itertools.accumulate(kv)], dtype=torch.int32, device=dev)
        qo_indptr = torch.tensor([0, *itertools.accumulate(qo)], dtype=torch.int32, device=dev)
        idx = torch.arange(total, dtype=torch.int32, device=dev)
        last = torch.ones(len(kv), dtype=torch.int32, device=dev)

        def ref(is_causal):
            outs = []
            for i in range(len(kv)):
                a, b, n = int(kv_indptr[i]), int(kv_indptr[i + 1]), qo[i]
                kk = kc[a:b, 0].float().repeat_interleave(qh // kh, 1)
                vv = vc[a:b, 0].float().repeat_interleave(qh // kh, 1)
                qq = q[int(qo_indptr[i]):int(qo_indptr[i + 1])].float()
                outs.append(attn(qq, kk, vv, 1 / math.sqrt(128), causal(n, b - a) if is_causal else None))
            return torch.cat(outs)

        return q, (kc, vc), qo_indptr, kv_indptr, idx, last, ref

    def t_prefill_draft():  # the EAGLE-3 draft's extend: paged KV, GQA 8/2, causal
        q, cache, qo_indptr, kv_indptr, idx, last, ref = paged([5, 17], [40, 90], 8, 2)
        w = flashinfer.prefill.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa2")
        w.plan(qo_indptr, kv_indptr, idx, last, 8, 2, 128, 1, causal=True, q_data_type=bf16, kv_data_type=bf16)
        return w.run(q, cache).float(), ref(True)

    def t_decode():  # the draft's decode without tensor cores
        q, cache, _qo, kv_indptr, idx, last, ref = paged([1, 1, 1], [33, 300, 7], 8, 2)
        w = flashinfer.decode.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=False)
        w.plan(kv_indptr, idx, last, 8, 2, 128, 1, q_data_type=bf16, kv_data_type=bf16)
        return w.run(q, cache).float(), ref(False)

    return {"mla": t_mla, "prefill_mla": t_prefill_mla, "prefill_draft": t_prefill_draft, "decode": t_decode,
            "cascade": t_cascade, "norm": t_norm, "rope": t_rope, "sampling": t_sampling, "activation": t_activation}


def worker(mode: str, result: Path, until: float, estimates: dict) -> int:
    import torch

    started = time.monotonic()
    if mode == "before":  # hide the AOT directory: FlashInfer's JIT compiles each module on first use
        from flashinfer.jit import env as jit_env
        jit_env.FLASHINFER_AOT_DIR = Path(os.environ["FLASHINFER_WORKSPACE_BASE"]) / "no-aot"
    import flashinfer  # noqa: F401 (the whole package imported, as the server does: import_seconds)
    from flashinfer.jit.core import jit_spec_registry

    table = tests()
    order = BEFORE_ORDER if mode == "before" else list(table)
    out = {"mode": mode, "import_seconds": round(time.monotonic() - started, 2), "tests": {},
           "flashinfer_jit_disabled": os.environ.get("FLASHINFER_DISABLE_JIT") == "1",
           "arch_list": os.environ.get("FLASHINFER_CUDA_ARCH_LIST"), "gpu": torch.cuda.get_device_name()}
    for name in order:
        need = estimates.get(name, 60) * 1.5 + 15
        if mode == "before" and time.time() + need > until:
            out["tests"][name] = {"skipped": f"time budget (needs about {need:.0f} s)"}
            continue
        before = set(jit_spec_registry.get_all_specs())
        entry: dict = {}
        try:
            torch.cuda.synchronize()
            t0 = time.monotonic()
            got, ref = table[name]()
            torch.cuda.synchronize()
            entry["first_call_seconds"] = round(time.monotonic() - t0, 3)
            t1 = time.monotonic()
            table[name]()
            torch.cuda.synchronize()
            entry["second_call_seconds"] = round(time.monotonic() - t1, 4)
            err = (got - ref).abs()
            entry.update(max_abs_err=float(err.max()), rel_err=float((got - ref).norm() / ref.norm()),
                         finite=bool(torch.isfinite(got).all()))
            entry["ok"] = entry["finite"] and entry["rel_err"] < 2e-2
        except Exception as exc:  # reported
            entry.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:800])
        specs = jit_spec_registry.get_all_specs()
        entry["modules"] = {n: {"aot": specs[n].is_aot} for n in sorted(set(specs) - before)}
        out["tests"][name] = entry
        result.write_text(json.dumps(out, indent=2) + "\n")
    jit_dir = Path(os.environ["FLASHINFER_WORKSPACE_BASE"])
    out["compiled_in_workspace"] = sorted(p.name for p in jit_dir.rglob("*.so"))
    out["seconds"] = round(time.monotonic() - started, 2)
    result.write_text(json.dumps(out, indent=2) + "\n")
    return 0


def run_worker(py: Path, mode: str, out: Path, name: str, until: float, estimates: dict, env_extra: dict) -> dict:
    ws = Path(f"/tmp/flashinfer-aot-proof-ws-{name}")
    shutil.rmtree(ws, ignore_errors=True)
    ws.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
    env.update(FLASHINFER_WORKSPACE_BASE=str(ws), PYTHONUNBUFFERED="1", **env_extra)
    result = out / f"{name}.json"
    started = time.monotonic()
    proc = sh([str(py), str(Path(__file__).resolve()), "--worker", mode, "--result", str(result), "--until", str(until),
               "--estimates", json.dumps(estimates)], env=env, cwd="/tmp")
    (out / f"{name}.log").write_text(f"# rc={proc.returncode} wall={time.monotonic() - started:.1f}s\n"
                                     f"{proc.stdout}\n--- stderr\n{proc.stderr[-20000:]}")
    return json.loads(result.read_text()) if result.exists() else {"error": proc.stderr[-2000:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--wheels", type=Path)
    ap.add_argument("--arch", default="9.0a 12.0a")
    ap.add_argument("--deadline", type=float, default=560, help="seconds from start the whole run may take")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--root", type=Path, default=Path("/tmp/flashinfer-aot-proof"))
    ap.add_argument("--worker", choices=["after", "before"])
    ap.add_argument("--result", type=Path)
    ap.add_argument("--until", type=float, default=0)
    ap.add_argument("--estimates", default="{}")
    ap.add_argument("--only", default="", help="comma-separated module kinds to keep (a quick trial)")
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.result, args.until, json.loads(args.estimates))

    t_start = time.time()
    until = t_start + args.deadline
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    sys.path[:0] = [str(FILES), str(ROOT / "roles" / "nvidia_cuda" / "files")]
    import sglang_build as sb

    env_txt = []
    for cmd in (["nvidia-smi", "-L"], ["nvcc", "--version"], ["cuobjdump", "--version"], ["nproc"],
                [sys.executable, "-c",
                 "import sys, torch; print(sys.version); print('torch', torch.__version__, torch.version.cuda)"]):
        proc = sh(cmd)
        env_txt.append(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    (out / "env.txt").write_text("\n".join(env_txt))

    modules = [m for m in MODULES if not args.only or m["kind"] in args.only.split(",")]
    spec = spec_for(args.root, args.arch, args.jobs, modules)
    spec_path = out / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2) + "\n")
    build = sb.Build(spec, python_version="%d.%d" % sys.version_info[:2])
    for sub in ("releases", "wheelhouse", "src", "work", "logs"):
        (args.root / sub).mkdir(parents=True, exist_ok=True)
    make_venv(build, args.wheels, out)
    py = build.venv / "bin" / "python"
    summary: dict = {"release": build.release_id, "arch_list": args.arch, "jobs": args.jobs,
                     "modules_requested": [sb.aot_label(m) for m in build.aot_modules]}

    # The tool as the role runs it: compile, then a rerun that must change nothing.
    run1, wall1 = tool("aot", spec_path, out / "aot-run1.log")
    run2, wall2 = tool("aot", spec_path, out / "aot-run2.log")
    summary["aot_run1"] = {"wall_seconds": round(wall1, 1), **{k: run1.get(k) for k in ("changed", "status", "seconds", "msg")}}
    summary["aot_run2"] = {"wall_seconds": round(wall2, 1), "changed": run2.get("changed"), "status": run2.get("status")}
    shutil.copy(build.logfile, out / "build.log") if build.logfile.exists() else None
    stamp = json.loads((build.release / sb.AOT_STAMP).read_text())
    (out / "flashinfer_aot.json").write_text(json.dumps(stamp, indent=2) + "\n")

    # The check phase's arch reading, and the fatbin-header reader beside cuobjdump.
    check = build.aot_check()
    listing = []
    for mod in stamp["modules"]:
        proc = sh(["cuobjdump", "--list-elf", mod["so"]])
        listing.append(f"$ cuobjdump --list-elf {mod['name']}.so\n{proc.stdout}{proc.stderr}")
        for entry in check["modules"]:
            if entry["name"] == mod["name"]:
                entry["fatbin_reader"] = sb.fatbin_archs(Path(mod["so"]))["archs"]
    (out / "cuobjdump-list-elf.txt").write_text("\n".join(listing))
    summary["check"] = check

    # A module without its target arch fails the check, named; an arch nvcc cannot build fails first.
    victim = stamp["modules"][-1]
    saved = Path(victim["so"]).with_suffix(".so.saved")
    shutil.copy2(victim["so"], saved)
    tmp = Path("/tmp/flashinfer-aot-proof-k")
    tmp.mkdir(exist_ok=True)
    (tmp / "k.cu").write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n")
    sh(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90a,code=sm_90a", "-o", victim["so"],
        str(tmp / "k.cu")]).check_returncode()
    summary["check_with_a_module_missing_sm_120a"] = {k: build.aot_check()[k] for k in ("status", "problems")}
    os.replace(saved, victim["so"])
    # (its own root: the aot phase removes other incomplete releases it finds, as after a kill)
    bad = spec_for(args.root.with_name(args.root.name + "-bad-arch"), "7.0 12.0a", args.jobs, modules)
    (out / "spec-bad-arch.json").write_text(json.dumps(bad, indent=2) + "\n")
    bad_build = sb.Build(bad, python_version="%d.%d" % sys.version_info[:2])
    bad_build.release.mkdir(parents=True, exist_ok=True)
    (bad_build.release / "venv.json").write_text("{}")  # the arch is checked before the venv is used
    result, wall = tool("aot", out / "spec-bad-arch.json", out / "aot-bad-arch.log")
    summary["aot_with_arch_7.0"] = {"wall_seconds": round(wall, 1), "failed": result.get("failed"), "msg": result.get("msg"),
                                    "compiled_anything": (bad_build.root / "work" / "flashinfer-aot").exists()}
    shutil.rmtree(bad_build.root, ignore_errors=True)

    # Fresh processes of the release's Python.
    estimates = {}
    kinds = {"prefill_mla": ("prefill", 192), "prefill_draft": ("prefill", 128)}
    for mod in stamp["modules"]:
        kind = mod["descriptor"]["kind"]
        name = next((n for n, (k, d) in kinds.items() if k == kind and mod["descriptor"].get("head_dim_qk") == d), kind)
        estimates[name] = mod.get("wall_seconds", 60)
    summary["after_1"] = run_worker(py, "after", out, "after-1", until, estimates, {"FLASHINFER_DISABLE_JIT": "1"})
    summary["after_2"] = run_worker(py, "after", out, "after-2", until, estimates, {"FLASHINFER_DISABLE_JIT": "1"})
    summary["before"] = run_worker(py, "before", out, "before", until, estimates,
                                   {"FLASHINFER_CUDA_ARCH_LIST": args.arch, "MAX_JOBS": str(args.jobs)})
    summary["wall_seconds"] = round(time.time() - t_start, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    lines = [f"release {build.release_id}  arch {args.arch}  jobs {args.jobs}",
             f"aot run1: {summary['aot_run1']}", f"aot run2: {summary['aot_run2']}",
             f"check: {check['status']} {check.get('problems')}",
             f"missing arch: {summary['check_with_a_module_missing_sm_120a']}",
             f"arch 7.0: {summary['aot_with_arch_7.0']}", "",
             f"{'module':<58} {'compile s':>9} {'archs (cuobjdump)':<18} {'before s':>9} {'after s':>8} "
             f"{'after2 s':>8} {'rel err':>9}"]
    for mod, entry in zip(stamp["modules"], check["modules"], strict=True):
        kind = mod["descriptor"]["kind"]
        name = next((n for n, (k, d) in kinds.items() if k == kind and mod["descriptor"].get("head_dim_qk") == d), kind)
        b = summary["before"].get("tests", {}).get(name, {})
        a1 = summary["after_1"].get("tests", {}).get(name, {})
        a2 = summary["after_2"].get("tests", {}).get(name, {})
        lines.append(f"{sb.aot_label(mod['descriptor']):<58} {mod.get('wall_seconds', 0):>9} {' '.join(entry['archs']):<18} "
                     f"{b.get('first_call_seconds', '-'):>9} {a1.get('first_call_seconds', '-'):>8} "
                     f"{a2.get('first_call_seconds', '-'):>8} {a1.get('rel_err', float('nan')):>9.2e}")
    after_1 = summary["after_1"]
    all_ok = bool(after_1.get("tests")) and all(t.get("ok") for t in after_1["tests"].values())
    lines.append(f"after-1 compiled in workspace: {after_1.get('compiled_in_workspace')}; all ok: {all_ok}")
    lines.append(f"wall {summary['wall_seconds']} s")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
