"""Issue 42's BEFORE measurement on the lent H200: where a restart's time goes, with real weights.

Real SGLang 0.5.17 served as role sglang_server renders it (tests/device/sglang_serve_proof.py's
machinery: the release laid out from carried parts, the unit and environment rendered by the role
with ansible -c local, the server started from them, readiness by the role's own probe), EAGLE-3
with CUDA graphs on (SGLang's defaults, triton attention), on a checkpoint of realistic size made on
the device:

1. checkpoint: a Llama-architecture target (hidden 6144, 40 layers, 48/8 heads, intermediate 16384,
   vocab 128256: 17.2B parameters, 34.4 GB of random bf16 weights; fewer layers where the disk has
   less room, never under 30 GB unless it cannot be helped, and said) written as safetensors shards
   of --shard-gb (model.safetensors.index.json beside them): each shard filled on the GPU
   (normal(0, 0.02), norms 1), copied to pinned memory and written by a second thread, then synced.
   Its EAGLE-3 draft is config-only (--speculative-draft-load-format dummy), as in the test bed, or with
   --real-draft random weights of its shape written the same way (its loader then takes the target's settings).
2. bandwidth: the checkpoint's disk read cold (page cache dropped: /proc/sys/vm/drop_caches, else
   posix_fadvise(DONTNEED) per file, the method recorded, residency checked with mincore), one
   thread and as many threads as SGLang's default loader (8), O_DIRECT, the page cache's own read
   speed (warm), and host-to-GPU copies (pinned and pageable, torch) in the same call.
3. starts: cold on a fresh machine (page cache dropped, every JIT cache empty), cold again (JIT
   caches kept), warm (weights in the page cache), warm with a tuned loader
   (--model-loader-extra-config '{"enable_multithread_load": true, "num_threads": 16}'), cold with
   the tuned loader. Each start: its phases read from the server's log by the role's reader
   (roles/sglang_server/files/sglang_start_phases.py, anchored at the launch), the proof's own
   readiness time, the checkpoint's page-cache residency before and after, and the JIT caches
   (the role's cache directory /var/cache/sglang: FlashInfer, Triton, torch inductor; the server's
   home /var/lib/sglang: DeepGEMM's ~/.deep_gemm, CUDA's ~/.nv) before and after: which files each
   start added.
   The AFTER plan (issue 42, items 3 and 4): warm-fresh, warm and warm-bounded (SETTINGS: the CUDA graphs sized
   for 16 requests at a time, the prefill graphs bounded at 2048 tokens) with the role's environment as it is
   now (every JIT cache under /var/cache/sglang), and --bench: after each ready start, BENCH_POINTS (decode at
   batch 1 and 16, a 4000-token prefill) by the role's bench tool; prewarmed: the page cache dropped, the role's
   warm-up tool (roles/sglang_server/files/sglang_page_cache_warm.py) run over the checkpoint, then the start.

Everything goes under WORK and into --pack after every step; tests/device/restart_curate.py (or
the README's commands) turn the packs into docs/validation/restart-h200/. --rehearse runs the flow
here with the role's simulator standing for SGLang, a tiny checkpoint written with numpy, the
checkpoint's own pages dropped with posix_fadvise only (never the whole host's page cache).

Usage:
  restart_proof.py resplit SRC OUT [--part-mib 48] [--add-wheel WHL]   the release entries of a sglang_serve_bundle.py
                                                         bundle (SRC/part*/) in fewer, larger parts
  restart_proof.py WORK --parts DIR... [--ansible DIR] --pack FILE --steps checkpoint bandwidth starts
  restart_proof.py write-checkpoint DIR --layers N ...   (run by the proof in its own process)
  restart_proof.py bandwidth DIR --out FILE              (likewise)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import ctypes.util
import importlib.util
import json
import mmap
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_serve_proof as sp

ROOT = sp.ROOT
sys.path.insert(0, str(ROOT / "tests" / "harness"))
PHASES_TOOL = ROOT / "roles/sglang_server/files/sglang_start_phases.py"
TARGET = sp.MODELS / "llama-17b-target"
DRAFT = sp.MODELS / "llama-17b-draft"
# A Llama-architecture shape between Llama-3.1-8B and -70B: 17.2B parameters at 40 layers.
SHAPE = {"hidden": 6144, "layers": 40, "heads": 48, "kv_heads": 8, "intermediate": 16384, "vocab": 128256,
         "draft_vocab": 128256, "max_position_embeddings": 131072}
REHEARSE_SHAPE = {"hidden": 256, "layers": 6, "heads": 4, "kv_heads": 2, "intermediate": 512, "vocab": 1024,
                  "draft_vocab": 1024, "max_position_embeddings": 4096}
DEFAULT_THREADS = 8  # SGLang 0.5.17's DefaultModelLoader.DEFAULT_NUM_THREADS (multithread load is its default)
TUNED = {"enable_multithread_load": True, "num_threads": 16}
CACHE_ROOTS = ["/var/cache/sglang", "/var/lib/sglang", "/root/.triton", "/root/.cache/flashinfer",
               "/root/.deep_gemm", "/root/.nv", "/tmp/torchinductor_root"]
# label, page cache dropped before it, tuned loader
PLAN = [("cold-fresh", True, False), ("cold", True, False), ("warm", False, False), ("warm-tuned", False, True),
        ("cold-tuned", True, True), ("warm-fresh", False, False), ("warm-bounded", False, False),
        ("prewarmed", True, False), ("warm-fst", False, False), ("cold-fst", True, False)]
# prewarmed: the page cache dropped, then the role's warm-up tool reads the checkpoint back before the start.
# warm-fst, cold-fst: the target read by SGLang's fastsafetensors loader (--load-format fastsafetensors, 0.5.17's
# LoadFormat.FASTSAFETENSORS): whole files copied to the GPU through pinned bounce buffers by fastsafetensors' own
# threads (GPUDirect Storage where the host has it, else pread), instead of the default loader's pageable copies
# tensor by tensor. The package is not in SGLang's release set: carried beside it (resplit --add-wheel). 0.5.17 hands
# --model-loader-extra-config to the draft's loader too, and the config-only draft's dummy loader refuses any: the
# loader's settings (LOADER_CONFIG) need a draft of real weights (--real-draft).
LOAD_FORMAT = {"warm-fst": "fastsafetensors", "cold-fst": "fastsafetensors"}
# With a draft of real weights (--real-draft; the draft's loader then takes the same extra config): GPUDirect Storage
# off, fastsafetensors' pread path through pinned bounce buffers. Its default (on) failed the start on the lent VM's
# virtio disk: cuFile error 5027 registering the first shard (docs/validation/restart-h200/fst).
LOADER_CONFIG = {"fastsafetensors": {"enable_gds": False}}
WARM_TOOL = ROOT / "roles/sglang_server/files/sglang_page_cache_warm.py"
# The role's settings of a start beyond the common ones (issue 42's AFTER): warm-bounded sizes the CUDA graphs to
# what a host serving 16 requests at a time needs (sglang_server_cuda_graph_max_bs auto follows the limit) with the
# prefill graphs bounded at 2048 tokens (SGLang's own bound for an MLA model such as Kimi-K2.5).
SETTINGS = {"warm-bounded": {"sglang_server_max_running_requests": 16,
                             "sglang_server_cuda_graph_max_tokens_prefill": 2048}}
# --bench: what each ready start serves, with the role's bench tool: (label, concurrency, runs, input tokens, output
# tokens). c1 is decode at batch 1, c16 decode at batch 16 (captured in both plans), long a 4000-token prefill (in
# a prefill graph at SGLang's default bound, 8192 tokens; beyond the bounded plan's 2048: no graph).
BENCH_POINTS = [("c1", 1, 5, 128, 256), ("c16", 16, 32, 128, 128), ("long", 1, 3, 4000, 8)]
GB = 1e9


# ---------------------------------------------------------------------- the checkpoint

def tensor_specs(d: dict[str, int]) -> list[tuple[str, list[int], str]]:
    """(name, shape, fill) of a LlamaForCausalLM checkpoint in Hugging Face's names and order."""
    hidden, heads, kv, inter, vocab = d["hidden"], d["heads"], d["kv_heads"], d["intermediate"], d["vocab"]
    head_dim = hidden // heads
    specs = [("model.embed_tokens.weight", [vocab, hidden], "rand")]
    for i in range(d["layers"]):
        p = f"model.layers.{i}"
        specs += [(f"{p}.self_attn.q_proj.weight", [heads * head_dim, hidden], "rand"),
                  (f"{p}.self_attn.k_proj.weight", [kv * head_dim, hidden], "rand"),
                  (f"{p}.self_attn.v_proj.weight", [kv * head_dim, hidden], "rand"),
                  (f"{p}.self_attn.o_proj.weight", [hidden, heads * head_dim], "rand"),
                  (f"{p}.mlp.gate_proj.weight", [inter, hidden], "rand"),
                  (f"{p}.mlp.up_proj.weight", [inter, hidden], "rand"),
                  (f"{p}.mlp.down_proj.weight", [hidden, inter], "rand"),
                  (f"{p}.input_layernorm.weight", [hidden], "ones"),
                  (f"{p}.post_attention_layernorm.weight", [hidden], "ones")]
    return specs + [("model.norm.weight", [hidden], "ones"), ("lm_head.weight", [vocab, hidden], "rand")]


def draft_tensor_specs(d: dict[str, int]) -> list[tuple[str, list[int], str]]:
    """(name, shape, fill) of an EAGLE-3 draft for the target of `d` (LlamaForCausalLMEagle3, one decoder layer), in
    the names EAGLE-3 checkpoints use (SGLang 0.5.17's llama_eagle3.py load_weights: midlayer -> layers.0, q/k/v and
    gate/up stacked): the layer's attention reads the token's embedding and the target's hidden state side by side
    (2 x hidden in), fc folds three of the target's layers' hidden states (3 x hidden) into one. draft_vocab equal to
    the vocabulary: no d2t/t2d maps."""
    hidden, heads, kv, inter = d["hidden"], d["heads"], d["kv_heads"], d["intermediate"]
    head_dim = hidden // heads
    return [("embed_tokens.weight", [d["vocab"], hidden], "rand"),
            ("midlayer.self_attn.q_proj.weight", [heads * head_dim, 2 * hidden], "rand"),
            ("midlayer.self_attn.k_proj.weight", [kv * head_dim, 2 * hidden], "rand"),
            ("midlayer.self_attn.v_proj.weight", [kv * head_dim, 2 * hidden], "rand"),
            ("midlayer.self_attn.o_proj.weight", [hidden, heads * head_dim], "rand"),
            ("midlayer.mlp.gate_proj.weight", [inter, hidden], "rand"),
            ("midlayer.mlp.up_proj.weight", [inter, hidden], "rand"),
            ("midlayer.mlp.down_proj.weight", [hidden, inter], "rand"),
            ("midlayer.input_layernorm.weight", [hidden], "ones"),
            ("midlayer.hidden_norm.weight", [hidden], "ones"),
            ("midlayer.post_attention_layernorm.weight", [hidden], "ones"),
            ("fc.weight", [hidden, 3 * hidden], "rand"),
            ("norm.weight", [hidden], "ones"),
            ("lm_head.weight", [d["draft_vocab"], hidden], "rand")]


def numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def checkpoint_bytes(d: dict[str, int]) -> int:
    return sum(2 * numel(shape) for _, shape, _ in tensor_specs(d))


def shard_plan(specs: list[tuple[str, list[int], str]], shard_bytes: int) -> list[list[tuple[str, list[int], str]]]:
    shards: list[list] = [[]]
    size = 0
    for spec in specs:
        n = 2 * numel(spec[1])
        if shards[-1] and size + n > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += n
    return shards


def header_of(shard: list[tuple[str, list[int], str]]) -> bytes:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, shape, _ in shard:
        n = 2 * numel(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    return len(blob).to_bytes(8, "little") + blob


def write_checkpoint(directory: Path, dims: dict[str, int], shard_gb: float, seed: int = 1,
                     draft: bool = False) -> dict[str, Any]:
    """The target's (or with draft, its EAGLE-3 draft's) weights as safetensors shards and their index (config and
    tokenizer are written beforehand by tests/harness/synthetic_model.py)."""
    specs = draft_tensor_specs(dims) if draft else tensor_specs(dims)
    shards = shard_plan(specs, int(shard_gb * GB))
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    sizes = [sum(2 * numel(s[1]) for s in shard) for shard in shards]
    started = time.monotonic()
    try:
        import torch
        use_torch = torch.cuda.is_available()
    except ImportError:
        use_torch = False
    pool = concurrent.futures.ThreadPoolExecutor(2)
    pending: list[concurrent.futures.Future | None] = [None, None]

    def write(path: Path, head: bytes, data: memoryview) -> None:
        with open(path, "wb") as f:
            f.write(head)
            f.write(data)

    if use_torch:
        torch.manual_seed(seed)
        gpu = torch.empty(max(sizes), dtype=torch.uint8, device="cuda")
        pinned = [torch.empty(max(sizes), dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        for i, shard in enumerate(shards):
            off = 0
            for _, shape, fill in shard:
                n = 2 * numel(shape)
                view = gpu[off:off + n].view(torch.bfloat16)
                view.fill_(1.0) if fill == "ones" else view.normal_(0.0, 0.02)
                off += n
            if pending[i % 2] is not None:
                pending[i % 2].result()
            pinned[i % 2][:off].copy_(gpu[:off])
            data = memoryview(pinned[i % 2].numpy())[:off]
            pending[i % 2] = pool.submit(write, directory / names[i], header_of(shard), data)
    else:  # --rehearse: numpy, small
        import numpy as np
        rng = np.random.default_rng(seed)
        for i, shard in enumerate(shards):
            parts = []
            for _, shape, fill in shard:
                if fill == "ones":
                    parts.append(np.full(numel(shape), 0x3F80, dtype=np.uint16))
                else:
                    values = (rng.standard_normal(numel(shape), dtype=np.float32) * 0.02).view(np.uint32)
                    parts.append((values >> 16).astype(np.uint16))
            data = memoryview(np.concatenate(parts).view(np.uint8))
            if pending[i % 2] is not None:
                pending[i % 2].result()
            pending[i % 2] = pool.submit(write, directory / names[i], header_of(shard), data)
    for job in pending:
        if job is not None:
            job.result()
    pool.shutdown()
    written = time.monotonic()
    os.sync()
    synced = time.monotonic()
    index = {"metadata": {"total_size": sum(sizes)},
             "weight_map": {name: names[i] for i, shard in enumerate(shards) for name, _, _ in shard}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
    total = sum(sizes)
    return {"bytes": total, "gb": round(total / GB, 2), "shards": len(shards), "shard_gb": shard_gb,
            "parameters": total // 2, "filled_on": "cuda" if use_torch else "cpu (numpy)",
            "write_s": round(written - started, 1), "sync_s": round(synced - written, 1),
            "write_gb_per_s": round(total / GB / (synced - started), 2), "dims": dims}


def shard_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("model-*-of-*.safetensors"))


# ---------------------------------------------------------------------- page cache and disk

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]


def resident_bytes(paths: list[Path]) -> tuple[int, int]:
    """(bytes of the files in the page cache, their size), by mincore over a read-only mapping."""
    page = mmap.PAGESIZE
    resident = total = 0
    for path in paths:
        size = path.stat().st_size
        total += size
        if size == 0:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                continue
            pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) == 0:
                resident += sum(1 for b in bytes(vec) if b & 1) * page
            _libc.munmap(addr, size)
        finally:
            os.close(fd)
    return min(resident, total), total


def drop_cache(paths: list[Path], whole_host: bool) -> dict[str, Any]:
    """The checkpoint out of the page cache: the whole host's (drop_caches) where allowed and asked,
    then posix_fadvise(DONTNEED) on each file; the residency before and after."""
    before = resident_bytes(paths)[0]
    os.sync()
    method = []
    if whole_host:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            method.append("drop_caches=3")
        except OSError as exc:
            method.append(f"drop_caches refused ({exc.strerror})")
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    method.append("posix_fadvise(DONTNEED) per file")
    after, total = resident_bytes(paths)
    return {"method": " + ".join(method), "resident_before_gb": round(before / GB, 2),
            "resident_after_gb": round(after / GB, 3), "total_gb": round(total / GB, 2)}


def read_file(path: Path, direct: bool = False, block: int = 16 << 20) -> int:
    if direct:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT needs
        done = 0
        try:
            while True:
                n = os.readv(fd, [buf])
                done += n
                if n < block:
                    return done
        finally:
            os.close(fd)
            buf.close()
    buf = bytearray(block)
    done = 0
    with open(path, "rb", buffering=0) as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while True:
            n = f.readinto(buf)
            if not n:
                return done
            done += n


def timed_read(paths: list[Path], threads: int, direct: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(lambda p: read_file(p, direct), paths))
    seconds = time.monotonic() - started
    return {"files": len(paths), "threads": threads, "o_direct": direct, "gb": round(total / GB, 2),
            "seconds": round(seconds, 2), "gb_per_s": round(total / GB / seconds, 2)}


def bandwidth(directory: Path, whole_host: bool, out_file: Path) -> dict[str, Any]:
    """Each measurement in turn, the JSON rewritten after each (a call cut short keeps what was measured)."""
    paths = shard_files(directory)
    out: dict[str, Any] = {"shards": len(paths), "shard_gb": round(paths[0].stat().st_size / GB, 2) if paths else 0}
    steps = [
        ("drop", lambda: drop_cache(paths, whole_host)),
        ("cold_1_thread", lambda: timed_read(paths[:2], 1)),
        ("drop_2", lambda: drop_cache(paths, whole_host)),
        ("cold_8_threads", lambda: timed_read(paths, DEFAULT_THREADS)),  # as SGLang 0.5.17's default loader
        ("warm_resident_gb", lambda: round(resident_bytes(paths)[0] / GB, 2)),
        ("warm_8_threads", lambda: timed_read(paths, DEFAULT_THREADS)),  # page cache to user memory
        ("o_direct_4_threads", lambda: timed_read(paths[:4], min(4, len(paths)), direct=True)),
        ("h2d", host_to_gpu),
        ("meminfo", lambda: {k: v.strip() for k, v in (line.split(":", 1) for line in
                                                       Path("/proc/meminfo").read_text().splitlines())
                             if k in ("MemTotal", "MemAvailable", "Cached", "Dirty")}),
    ]
    for name, step in steps:
        try:
            out[name] = step()
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        out_file.write_text(json.dumps(out, indent=1) + "\n")
    return out


def host_to_gpu(size: int = 1 << 30, reps: int = 8) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"skipped": "no torch here"}
    if not torch.cuda.is_available():
        return {"skipped": "no GPU"}
    gpu = torch.empty(size, dtype=torch.uint8, device="cuda")
    out: dict[str, Any] = {"bytes": size, "reps": reps, "device": torch.cuda.get_device_name(0)}
    for label, host in (("pinned", torch.empty(size, dtype=torch.uint8, pin_memory=True)),
                        ("pageable", torch.empty(size, dtype=torch.uint8))):
        host.fill_(1)
        for direction in ("h2d", "d2h"):
            src, dst = (host, gpu) if direction == "h2d" else (gpu, host)
            dst.copy_(src)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(reps):
                dst.copy_(src, non_blocking=label == "pinned")
            torch.cuda.synchronize()
            out[f"{label}_{direction}_gb_per_s"] = round(size * reps / GB / (time.perf_counter() - start), 2)
    return out


# ---------------------------------------------------------------------- JIT caches

def snapshot(roots: list[str] = CACHE_ROOTS) -> dict[str, dict[str, int]]:
    """Every file under the cache roots (the server's model cache huggingface/ left out): path -> size."""
    out: dict[str, dict[str, int]] = {}
    for root in roots:
        files: dict[str, int] = {}
        for base, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not (base == "/var/lib/sglang" and d == "huggingface")]
            for name in names:
                path = os.path.join(base, name)
                try:
                    files[os.path.relpath(path, root)] = os.lstat(path).st_size
                except OSError:
                    pass
        out[root] = files
    return out


def cache_summary(snap: dict[str, dict[str, int]]) -> dict[str, dict[str, Any]]:
    """Per root and its first two path levels: files and bytes."""
    out: dict[str, dict[str, Any]] = {}
    for root, files in snap.items():
        groups: dict[str, list[int]] = {}
        for rel, size in files.items():
            key = "/".join(rel.split("/")[:2]) if "/" in rel else "."
            g = groups.setdefault(key, [0, 0])
            g[0] += 1
            g[1] += size
        out[root] = {"files": len(files), "bytes": sum(files.values()),
                     "groups": {k: {"files": v[0], "bytes": v[1]} for k, v in sorted(groups.items())}}
    return out


def cache_diff(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for root in after:
        old, new = before.get(root, {}), after[root]
        added = sorted(set(new) - set(old))
        changed = sorted(k for k in set(new) & set(old) if new[k] != old[k])
        if not added and not changed and not set(old) - set(new):
            continue
        groups: dict[str, int] = {}
        for rel in added:
            key = "/".join(rel.split("/")[:2])
            groups[key] = groups.get(key, 0) + 1
        out[root] = {"added": len(added), "added_bytes": sum(new[k] for k in added), "changed": len(changed),
                     "removed": len(set(old) - set(new)), "added_by_group": groups, "added_names": added[:60],
                     "changed_names": changed[:20]}
    return out


# ---------------------------------------------------------------------- the proof

def load_reader():
    spec = importlib.util.spec_from_file_location("sglang_start_phases", PHASES_TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RestartProof(sp.Proof):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.extra_args = list(args.extra_arg)  # SGLang's defaults: CUDA graphs on, prefill graphs too
        self.reader = load_reader()
        self.target = Path(args.target) if args.target else TARGET
        # --rehearse: the simulator loads a draft's weight files (it knows no --speculative-draft-load-format
        # dummy): the tiny draft sglang_serve_proof.py's setup writes.
        self.draft = Path(args.draft) if args.draft else (sp.MODELS / "llama-tiny-draft" if args.rehearse else DRAFT)
        self.launched: float | None = None
        for sub in ("phases", "caches"):
            (self.work / sub).mkdir(parents=True, exist_ok=True)

    # --- layout

    def setup(self) -> None:
        self.args.install_only = "starts" not in self.args.steps  # the release whole only for the starts
        super().setup()

    # --- 1. checkpoint

    def checkpoint(self) -> None:
        if (self.target / "model.safetensors.index.json").exists():
            info = json.loads((self.target / "checkpoint.json").read_text())
            self.say(f"checkpoint: made by an earlier call: {json.dumps(info)[:400]}")
            self.results["checkpoint"] = info
            return
        dims = dict(REHEARSE_SHAPE if self.args.rehearse else SHAPE)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.target.parent).free
        reserve = int(self.args.reserve_gb * GB)
        while dims["layers"] > 1 and checkpoint_bytes(dims) > free - reserve:
            dims["layers"] -= 1
        size = checkpoint_bytes(dims)
        self.say(f"checkpoint: {free / GB:.1f} GB free on {self.target.parent}; {dims['layers']} layers, "
                 f"{size / GB:.2f} GB ({'>=' if size >= 30 * GB else 'UNDER'} 30 GB)")
        import synthetic_model as sm  # tests/harness: config.json, generation_config.json, the tokenizer
        sm.write_model_dir(self.target, target_config(dims), dims["vocab"])
        sm.make_eagle3_draft_for(self.target, DRAFT)
        rc, out, wall = self.run("checkpoint", [sys.executable, str(Path(__file__).resolve()), "write-checkpoint",
                                                str(self.target), "--dims", json.dumps(dims),
                                                "--shard-gb", str(self.args.shard_gb)], 900,
                                 log=self.work / "facts" / "checkpoint.log")
        try:
            info = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise SystemExit(f"the checkpoint was not written (rc={rc}): {out[-1500:]}") from None
        info["disk_free_gb_before"] = round(free / GB, 1)
        info["disk_free_gb_after"] = round(shutil.disk_usage(self.target.parent).free / GB, 1)
        (self.target / "checkpoint.json").write_text(json.dumps(info, indent=1) + "\n")
        self.results["checkpoint"] = info
        self.say(f"checkpoint: rc={rc} {wall:.1f}s {json.dumps(info)[:600]}")
        if self.args.real_draft:  # the draft's random weights beside its config (else config-only: dummy)
            rc, out, wall = self.run("draft", [sys.executable, str(Path(__file__).resolve()), "write-checkpoint",
                                               str(DRAFT), "--dims", json.dumps(dims), "--draft",
                                               "--shard-gb", str(self.args.shard_gb)], 600,
                                     log=self.work / "facts" / "draft-checkpoint.log")
            try:
                info["draft"] = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                raise SystemExit(f"the draft's weights were not written (rc={rc}): {out[-1500:]}") from None
            (self.target / "checkpoint.json").write_text(json.dumps(info, indent=1) + "\n")
            self.say(f"draft checkpoint: rc={rc} {wall:.1f}s {json.dumps(info['draft'])[:400]}")

    # --- 2. bandwidth

    def bandwidth(self) -> None:
        facts = self.work / "facts"
        for name, cmd in {"disk.txt": ["sh", "-c", f"df -h {self.target}; findmnt -T {self.target}; lsblk -o "
                                       "NAME,SIZE,ROTA,TYPE,MOUNTPOINT,MODEL; cat /sys/block/*/queue/rotational "
                                       "2>/dev/null | head; mount | grep -E ' / |/opt' | head"],
                          "pcie.txt": ["sh", "-c", "nvidia-smi --query-gpu=name,pcie.link.gen.current,"
                                       "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max "
                                       "--format=csv; nvidia-smi topo -m"]}.items():
            if shutil.which(cmd[0]):
                self.run("facts", cmd, 60, log=facts / name)
        out_file = self.work / "bandwidth.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "bandwidth", str(self.target), "--out", str(out_file)]
        if self.args.rehearse:
            cmd.append("--files-only")
        rc, out, wall = self.run("bandwidth", cmd, 600, log=facts / "bandwidth.log")
        data = json.loads(out_file.read_text()) if out_file.exists() else {"error": out[-1500:]}
        self.results["bandwidth"] = data
        self.say(f"bandwidth: rc={rc} {wall:.1f}s {json.dumps(data)[:1500]}")

    # --- 3. starts

    def role_vars(self, overrides: dict[str, Any]) -> dict[str, Any]:
        base = super().role_vars({})
        base.update({"sglang_server_mem_fraction_static": 0.85, "sglang_server_model_path": str(self.target),
                     "sglang_server_speculative_draft_model_path": str(self.draft),
                     "sglang_server_served_model_name": "restart/llama-17b-shape",
                     # Timestamps with milliseconds (SGLang's own switch): the phases to 1 ms, not 1 s.
                     "sglang_server_env": {"SGLANG_LOG_MS": "1"},
                     "sglang_server_extra_args": [*self.extra_args, *([] if self.draft_has_weights() else
                                                                      ["--speculative-draft-load-format", "dummy"])]})
        base.pop("sglang_server_cuda_graph_max_bs", None)  # the role's default (auto: SGLang's own without a limit)
        if overrides.get("__tuned"):
            base["sglang_server_extra_args"] += ["--model-loader-extra-config", json.dumps(TUNED)]
        if overrides.get("__load_format"):
            base["sglang_server_extra_args"] += ["--load-format", overrides["__load_format"]]
            if self.draft_has_weights() and LOADER_CONFIG.get(overrides["__load_format"]):
                base["sglang_server_extra_args"] += ["--model-loader-extra-config",
                                                     json.dumps(LOADER_CONFIG[overrides["__load_format"]])]
        base.update({k: v for k, v in overrides.items() if not k.startswith("__")})
        return base

    def draft_has_weights(self) -> bool:
        """A draft checkpoint written by --real-draft (its loader then takes the target's extra config too)."""
        return not self.args.rehearse and bool(shard_files(self.draft))

    def start(self, label: str, argv: list[str], env_vars: dict[str, str]) -> None:
        self.stop()
        self.launched = time.time()  # the phases' origin: just before the process exists
        super().start(label, argv, env_vars)

    def starts(self) -> None:
        paths = shard_files(self.target)
        if not paths:
            raise SystemExit(f"no checkpoint in {self.target}: run the checkpoint step first")
        self.results.setdefault("starts", [])
        plan = [next(p for p in PLAN if p[0] == label) for label in self.args.plan]  # in the order given
        previous = snapshot()
        (self.work / "caches" / "00-before-any-start.json").write_text(
            json.dumps(cache_summary(previous), indent=1) + "\n")
        for label, cold, tuned in plan:
            if self.left() < 150:
                self.say(f"no time left for {label}")
                break
            self.stop()
            drop = drop_cache(paths, whole_host=not self.args.rehearse) if cold else None
            warmed = self.prewarm(label) if label == "prewarmed" else None
            before = snapshot()
            resident = resident_bytes(paths)[0]
            timeout = min(self.args.start_timeout * (2 if label.endswith("fresh") else 1), self.left() - 60)
            session = self.serve(label, {"__tuned": tuned, "__load_format": LOAD_FORMAT.get(label),
                                         **SETTINGS.get(label, {})}, timeout=timeout)
            after = snapshot()
            phases = self.reader.read(self.current_log.read_text(errors="replace").splitlines(),
                                      started=self.launched)
            record = {"label": label, "session": self.session, "cold": cold, "tuned_loader": TUNED if tuned else None,
                      "load_format": LOAD_FORMAT.get(label), "settings": SETTINGS.get(label, {}), "prewarm": warmed,
                      "drop": drop, "resident_before_start_gb": round(resident / GB, 2),
                      "resident_after_start_gb": round(resident_bytes(paths)[0] / GB, 2),
                      "ready": session["ready"], "ready_s_proof": session["ready"]["waited_s"],
                      "launched_epoch": self.launched, "log": self.current_log.name,
                      "new_since_previous_start": cache_diff(previous, after),
                      "new_during_start": cache_diff(before, after)}
            (self.work / "phases" / f"{self.session:02d}-{label}.json").write_text(json.dumps(phases, indent=1) + "\n")
            (self.work / "caches" / f"{self.session:02d}-{label}.json").write_text(json.dumps(
                {"summary_after": cache_summary(after), "new_during_start": record["new_during_start"]}, indent=1) + "\n")
            record["phases"] = {k: phases[k] for k in ("marks", "phases", "weights", "cuda_graphs", "startup_timings",
                                                      "loader_bars", "ready_s", "ready_from", "errors")}
            record["phases"]["jit"] = {k: phases["jit"][k] for k in ("count", "by_source", "seconds_printed")}
            self.results["starts"].append(record)
            previous = after
            weights = "; ".join(f"{w['model']} {w['elapsed_s']} s {w['mem_usage_gib']} GiB ({w['gb_per_s']} GB/s)"
                                for w in phases["weights"])
            graphs = ", ".join(f"{g['name']} {g['elapsed_s']}" for g in phases["cuda_graphs"])
            added = {root: d["added"] for root, d in record["new_during_start"].items()}
            self.say(f"start {label}: ready rc={session['ready']['rc']} proof {session['ready']['waited_s']} s, log "
                     f"{phases['ready_s']} s from launch; marks {json.dumps(phases['marks'])}; weights {weights}; "
                     f"graphs {graphs}; page cache {record['resident_before_start_gb']} -> "
                     f"{record['resident_after_start_gb']} GB; drop {drop and drop['method']}; new cache files {added}")
            if session["ready"]["rc"] == 0 and self.args.bench and self.left() > 120:
                record["bench"] = self.bench_points(label)
            self.pack()
            if session["ready"]["rc"] != 0:
                break
        self.stop()

    def prewarm(self, label: str) -> dict[str, Any] | None:
        """The role's page-cache warm-up over the checkpoint, as a planned restart would run it."""
        out = self.work / "facts" / f"prewarm-{label}.json"
        # Both models the server loads, as the role passes them (the draft too where it has weights: the
        # 2026-12-07 H100 run warmed the target alone and its draft's load read the disk, 1.98 s).
        models = [str(self.target), *([str(self.draft)] if self.draft_has_weights() else [])]
        rc, text, wall = self.run("prewarm", [sys.executable, str(WARM_TOOL), *models, "--reserve-gib", "16",
                                              "--progress-s", "5", "--json", str(out)], 600,
                                  log=self.work / "facts" / f"prewarm-{label}.log")
        data = json.loads(out.read_text()) if out.exists() else None
        self.say(f"prewarm {label}: rc={rc} {wall:.1f}s {json.dumps(data)[:600]}")
        return data

    def bench_points(self, label: str) -> dict[str, Any]:
        """BENCH_POINTS against the server as it is now, by the role's bench tool (native API, greedy)."""
        out: dict[str, Any] = {}
        folder = self.work / "bench"
        folder.mkdir(exist_ok=True)
        for name, concurrency, runs, input_len, max_tokens in BENCH_POINTS:
            result = folder / f"{self.session:02d}-{label}-{name}.json"
            cmd = [sys.executable, str(sp.BENCH), "--url", sp.URL, "--api", "native", "--runs", str(runs),
                   "--warmup", "1", "--concurrency", str(concurrency), "--max-tokens", str(max_tokens),
                   "--input-len", str(input_len), "--timeout", "120", "--label", f"{label}-{name}",
                   "--json", str(result)]
            rc, text, wall = self.run("bench", cmd, 240, log=folder / f"{self.session:02d}-{label}-{name}.txt")
            data = json.loads(result.read_text()) if result.exists() else {}
            keep = {k: data.get(k) for k in ("mean_tok_s", "mean_decode_tok_s", "mean_ttft_ms", "mean_tpot_ms",
                                              "aggregate_tok_s", "accept_length")}
            out[name] = {"rc": rc, "wall_s": round(wall, 1), "concurrency": concurrency, "runs": runs,
                         "input_len": input_len, "max_tokens": max_tokens, **keep}
            self.say(f"bench {label} {name}: rc={rc} {wall:.1f}s {json.dumps(keep)}")
        return out


def target_config(d: dict[str, int]) -> dict[str, Any]:
    hidden, vocab = d["hidden"], d["vocab"]
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": d["layers"],
            "hidden_size": hidden, "intermediate_size": d["intermediate"], "num_attention_heads": d["heads"],
            "num_key_value_heads": d["kv_heads"], "head_dim": hidden // d["heads"], "vocab_size": vocab,
            "max_position_embeddings": d["max_position_embeddings"], "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": vocab - 2,
            "eos_token_id": vocab - 1, "attention_bias": False, "mlp_bias": False,
            "test_double": "random bf16 weights written on the device (tests/device/restart_proof.py): a real "
                           "checkpoint of a Llama shape, not a trained model"}


# ---------------------------------------------------------------------- bundle parts

def wheel_entries(wheels: list[Path], staging: Path) -> list[tuple[Path, dict]]:
    """Release entries of wheels carried beside the release set (a loader SGLang imports only when asked, such as
    fastsafetensors): each installed alone (--no-deps) and packed as sglang_serve_bundle.py packs a distribution."""
    spec = importlib.util.spec_from_file_location("sglang_serve_bundle", Path(__file__).with_name("sglang_serve_bundle.py"))
    bundle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bundle)
    out = []
    for wheel in wheels:
        site = staging / f"site-{wheel.name}"
        shutil.rmtree(site, ignore_errors=True)
        bundle.pip("install", "--no-deps", "--no-index", "--no-compile", *bundle.TARGET, "--target", str(site), str(wheel))
        for name, version, files in bundle.distributions(site):
            archive = staging / f"release--{name}-{version}.tar.xz"
            size, sha = bundle.pack(site, files, archive)
            out.append((archive, {"distribution": name, "version": version, "archive": archive.name, "bytes": size,
                                  "sha256": sha, "dest": "release", "carried_beside_the_set": True}))
    return out


def resplit(src: Path, out: Path, part_mib: float, add_wheels: list[Path] = ()) -> int:
    """The release entries of sglang_serve_bundle.py's parts (other releases' and files left out) in parts of
    at most part_mib, first fit by decreasing size, each with its MANIFEST.json; ansible/ copied. add_wheels:
    distributions carried beside the release set, as release entries too."""
    entries = []
    for manifest in sorted(src.glob("part*/MANIFEST.json")):
        for entry in json.loads(manifest.read_text()):
            if entry.get("dest", "release") == "release":
                entries.append((manifest.parent / entry["archive"], entry))
    if add_wheels:
        staging = out.parent / f".{out.name}-wheels"
        staging.mkdir(parents=True, exist_ok=True)
        entries += wheel_entries(list(add_wheels), staging)
    limit = int(part_mib * (1 << 20))
    parts: list[list] = []
    for item in sorted(entries, key=lambda e: -e[1]["bytes"]):
        for part in parts:
            if sum(e[1]["bytes"] for e in part) + item[1]["bytes"] <= limit:
                part.append(item)
                break
        else:
            parts.append([item])
    shutil.rmtree(out, ignore_errors=True)
    for number, part in enumerate(parts, 1):
        folder = out / f"part{number}"
        folder.mkdir(parents=True)
        for path, _ in part:
            shutil.copy(path, folder / path.name)
        (folder / "MANIFEST.json").write_text(json.dumps([e for _, e in part], indent=1) + "\n")
        print(f"part{number}: {len(part)} entries, {sum(e['bytes'] for _, e in part) / (1 << 20):.1f} MiB")
    if (src / "ansible").is_dir():
        shutil.copytree(src / "ansible", out / "ansible")
    return 0


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["resplit"]:
        ap = argparse.ArgumentParser(prog="restart_proof.py resplit")
        ap.add_argument("src", type=Path)
        ap.add_argument("out", type=Path)
        ap.add_argument("--part-mib", type=float, default=48.0)
        ap.add_argument("--add-wheel", type=Path, action="append", default=[],
                        help="a wheel carried beside the release set (e.g. fastsafetensors for warm-fst, cold-fst)")
        a = ap.parse_args(argv[1:])
        return resplit(a.src, a.out, a.part_mib, a.add_wheel)
    if argv[:1] == ["write-checkpoint"]:
        ap = argparse.ArgumentParser(prog="restart_proof.py write-checkpoint")
        ap.add_argument("dir", type=Path)
        ap.add_argument("--dims", required=True)
        ap.add_argument("--shard-gb", type=float, default=2.0)
        ap.add_argument("--draft", action="store_true", help="the EAGLE-3 draft's weights for the target of --dims")
        a = ap.parse_args(argv[1:])
        print(json.dumps(write_checkpoint(a.dir, json.loads(a.dims), a.shard_gb, seed=2 if a.draft else 1,
                                          draft=a.draft)))
        return 0
    if argv[:1] == ["bandwidth"]:
        ap = argparse.ArgumentParser(prog="restart_proof.py bandwidth")
        ap.add_argument("dir", type=Path)
        ap.add_argument("--out", type=Path, required=True)
        ap.add_argument("--files-only", action="store_true", help="fadvise only, never the host's whole cache")
        a = ap.parse_args(argv[1:])
        print(json.dumps(bandwidth(a.dir, not a.files_only, a.out)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--parts", nargs="*", default=[])
    ap.add_argument("--ansible")
    ap.add_argument("--pack", type=Path)
    ap.add_argument("--deadline-s", type=float, default=560)
    ap.add_argument("--steps", nargs="*", default=["checkpoint", "bandwidth", "starts"],
                    choices=["checkpoint", "bandwidth", "starts"])
    ap.add_argument("--plan", nargs="*", default=[p[0] for p in PLAN[:5]], choices=[p[0] for p in PLAN],
                    help="the starts, in this order (warm-fresh: weights in the page cache, JIT caches empty)")
    ap.add_argument("--shard-gb", type=float, default=2.0, help="safetensors shard size (Hugging Face's default is 5)")
    ap.add_argument("--reserve-gb", type=float, default=6.0, help="disk left free beside the checkpoint")
    ap.add_argument("--start-timeout", type=float, default=300)
    ap.add_argument("--target", help="the checkpoint's directory (default under /opt/sglang-proof-models)")
    ap.add_argument("--draft")
    ap.add_argument("--extra-arg", action="append", default=[])
    ap.add_argument("--rehearse", action="store_true")
    ap.add_argument("--real-draft", action="store_true",
                    help="checkpoint step: also write the EAGLE-3 draft's random weights (else config-only, dummy)")
    ap.add_argument("--bench", action="store_true", help="after each ready start, the BENCH_POINTS")
    args = ap.parse_args(argv)
    args.candidates, args.correctness, args.random_draft, args.install_only = 0, False, False, False
    proof = RestartProof(args)
    try:
        proof.setup()
        proof.pack()
        if "checkpoint" in args.steps:
            proof.checkpoint()
            proof.pack()
        if "bandwidth" in args.steps:
            proof.bandwidth()
            proof.pack()
        if "starts" in args.steps:
            proof.starts()
    finally:
        proof.stop()
        proof.say(f"done in {time.monotonic() - proof.started:.1f}s")
        proof.pack()
    return 0


if __name__ == "__main__":
    sys.exit(main())
