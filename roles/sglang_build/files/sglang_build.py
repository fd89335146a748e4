#!/usr/bin/env python3
"""Build SGLang, sgl-kernel, FlashInfer and torch into versioned releases.

Why a tool and not a chain of tasks: a build of this stack for SM120 takes long,
and every step must be safe to kill and to repeat. The rules it keeps:

* A release is /ROOT/releases/<release-id>/ (a venv inside). Its id is a digest of
  every input (component modes, versions, refs, URLs, CUDA version, arch lists,
  Python, patch set), so the same inputs never rebuild and changed inputs build a
  new release beside the old one.
* A source-built wheel goes to /ROOT/wheelhouse/<key>/, keyed by that component's
  own inputs only: changing one component rebuilds only that component.
* Nothing is marked done before it is: wheels are built in a temporary directory
  and renamed into the wheelhouse; a release counts only once `check` has written
  its manifest and then its `.complete` marker. A run killed midway leaves
  temporary directories and an incomplete release, which the next run (under the
  same lock) removes before it starts again.
* Secrets never reach argv: the spec (with index URLs) comes in the environment
  (SGLANG_BUILD_SPEC) or a file; URLs' credentials are masked in logs and manifests.

* The FlashInfer modules the server will load are compiled into the release (phase
  aot, files/flashinfer_aot.py run by the release's Python) for the target arch list,
  into FlashInfer's own AOT directory, where the server's FlashInfer finds them before it
  would compile; the check phase reads each module's machine code archs back.

Phases (one subcommand each, so the role can tag and time them): plan, fetch,
wheels, venv, aot, check, prune. Every phase prints one JSON object on stdout; progress
lines go to stderr and to /ROOT/logs/<release-id>.log.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import pwd
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Install order: each later component is installed against the ones before it.
COMPONENTS = ["torch", "sgl_kernel", "flashinfer", "sglang"]
DISTRIBUTIONS = {"torch": "torch", "sgl_kernel": "sgl-kernel", "flashinfer": "flashinfer-python",
                 "sglang": "sglang"}
COMPLETE = ".complete"
SPEC_ENV = "SGLANG_BUILD_SPEC"

# A real FlashInfer unit: the SiLU-and-mul kernel of flashinfer/activation.cuh, as
# FlashInfer's own JIT instantiates it (csrc/activation.cu), compiled from the headers
# the installed flashinfer package ships for its JIT.
FLASHINFER_UNIT = r"""
#include <cuda_fp16.h>
#include <flashinfer/activation.cuh>
__device__ __forceinline__ float silu(const float& val) { return val / (1.0f + __expf(-val)); }
template __global__ void flashinfer::activation::act_and_mul_kernel<half, silu>(half*, const half*, const int);
"""

# Run by the release's own Python: what is installed, and can sglang's model files be found.
CHECK_SCRIPT = r"""
import importlib.metadata as md, importlib.util, json, os, sys
dists = json.loads(sys.argv[1])
out = {"python": sys.version.split()[0], "versions": {}}
for name, dist in dists.items():
    try:
        out["versions"][name] = md.version(dist)
    except md.PackageNotFoundError:
        out["versions"][name] = None
spec = importlib.util.find_spec("sglang")
pkg = os.path.dirname(spec.origin) if spec and spec.origin else None
models = os.path.join(pkg, "srt", "models") if pkg else None
out["sglang_dir"] = pkg
out["model_files"] = sorted(f for f in os.listdir(models) if f.endswith(".py") and f != "__init__.py") \
    if models and os.path.isdir(models) else []
fi = importlib.util.find_spec("flashinfer")
out["flashinfer_include"] = os.path.join(os.path.dirname(fi.origin), "data", "include") if fi and fi.origin else None
print(json.dumps(out))
"""


class BuildError(Exception):
    """A step failed; the message says which and shows the end of its output."""


# ----- FlashInfer modules compiled into a release (phase aot; files/flashinfer_aot.py) -----
# Each kind is one of FlashInfer 0.6.3's JIT module generators, called with the arguments its
# Python API passes (flashinfer_aot.jit_spec). Parameters and their defaults; None: derived.
AOT_FLAGS = {"pos_encoding_mode": 0, "sliding_window": False, "logits_soft_cap": False}
AOT_KINDS: dict[str, dict] = {
    **{k: {} for k in ("norm", "rope", "sampling", "page", "cascade", "quantization", "topk", "trtllm_comm",
                       "vllm_comm")},
    "activation": {"act": "silu"},
    "mla": {"backend": "fa2", "dtype": "bfloat16", "dtype_kv": None, "head_dim_ckv": 512, "head_dim_kpe": 64},
    "prefill": {"backend": "fa2", "dtype": "bfloat16", "dtype_kv": None, "head_dim_qk": 128, "head_dim_vo": None,
                **AOT_FLAGS, "fp16_qk_reduction": False},
    "decode": {"dtype": "bfloat16", "dtype_kv": None, "head_dim": 128, **AOT_FLAGS},
    "single_decode": {"dtype": "bfloat16", "dtype_kv": None, "head_dim": 128, **AOT_FLAGS},
    "single_prefill": {"backend": "fa2", "dtype": "bfloat16", "dtype_kv": None, "head_dim_qk": 128,
                       "head_dim_vo": None, **AOT_FLAGS, "fp16_qk_reduction": False},
}
AOT_CHOICES = {"backend": {"fa2", "fa3"}, "dtype": {"float16", "bfloat16"},
               "dtype_kv": {"float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"},
               "act": {"silu", "gelu", "gelu_tanh"}, "pos_encoding_mode": {0, 1, 2}}
AOT_VARIABLE = "sglang_build_flashinfer_aot_modules"
AOT_STAMP = "flashinfer_aot.json"
# DeepSeek-V3's attention geometry, which Kimi-K2.5 keeps: MLA decode on the compressed KV
# (kv_lora_rank 512, rope 64), MLA prefill as MHA with head_dim_qk 128 + 64 and head_dim_vo 128.
MLA_CKV, MLA_KPE, MLA_QK, MLA_VO = 512, 64, 192, 128


def canonical_module(desc, where: str) -> dict:
    """One module descriptor with every parameter filled in; ValueError names where it came from."""
    if not isinstance(desc, dict) or desc.get("kind") not in AOT_KINDS:
        raise ValueError(f"{where}: kind must be one of {', '.join(sorted(AOT_KINDS))}, got {desc!r}")
    params = AOT_KINDS[desc["kind"]]
    unknown = sorted(set(desc) - set(params) - {"kind"})
    if unknown:
        raise ValueError(f"{where}: {desc['kind']} takes {', '.join(sorted(params)) or 'no parameters'}, "
                         f"not {', '.join(unknown)}")
    out = {"kind": desc["kind"]}
    for key, default in params.items():
        value = desc.get(key, default)
        if value is None and key.startswith("dtype"):
            value = out["dtype"]
        elif value is None and key == "head_dim_vo":
            value = out["head_dim_qk"]
        if key in AOT_CHOICES and value not in AOT_CHOICES[key]:
            raise ValueError(f"{where}: {key} must be one of {', '.join(map(str, sorted(AOT_CHOICES[key])))}, "
                             f"got {value!r}")
        if key.startswith("head_dim") and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise ValueError(f"{where}: {key} must be a positive integer, got {value!r}")
        if key in ("sliding_window", "logits_soft_cap", "fp16_qk_reduction") and not isinstance(value, bool):
            raise ValueError(f"{where}: {key} must be true or false, got {value!r}")
        out[key] = value
    return out


def arch_major(arch: str) -> int:
    return int(arch.split(".")[0])


def derive_aot_modules(aot: dict, arch_list: str) -> list[dict]:
    """The FlashInfer JIT modules SGLang 0.5.9 loads for a DeepSeek-V3-architecture model
    (Kimi-K2.5) with these server settings, on these archs (see the role's README).

    In 0.5.9 the norms, RoPE, activation and sampling kernels on CUDA are sgl-kernel's own,
    compiled into its wheel; FlashInfer's JIT is reached through the attention backend and the
    all-reduce fusion only. The automatic attention backend for this model is triton on SM120,
    fa3 on SM90 and trtllm_mla on SM100: no FlashInfer module is compiled for it.
    """
    archs = arch_list.split()
    if aot.get("modules"):
        return dedupe([canonical_module(d, f"{AOT_VARIABLE}[{i}]") for i, d in enumerate(aot["modules"])])
    mods: list[dict] = []
    if aot.get("attention_backend") == "flashinfer":
        # FlashInfer's backend "auto" (the wrappers SGLang creates): fa3 on sm_90a, else fa2.
        backends = sorted({"fa3" if a == "9.0a" else "fa2" for a in archs})
        for backend in backends:
            mods.append({"kind": "mla", "backend": backend, "head_dim_ckv": MLA_CKV, "head_dim_kpe": MLA_KPE})
            mods.append({"kind": "prefill", "backend": backend, "head_dim_qk": MLA_QK, "head_dim_vo": MLA_VO})
        if str(aot.get("speculative_algorithm", "")).upper() in ("EAGLE", "EAGLE3"):
            # The draft (a Llama layer, MHA) on FlashInfer's MHA backend: paged and ragged prefill,
            # decode (tensor-core decode is the prefill module), merge_state for extend.
            head = int(aot["draft_head_dim"])
            for backend in backends:
                mods.append({"kind": "prefill", "backend": backend, "head_dim_qk": head})
            mods += [{"kind": "decode", "head_dim": head}, {"kind": "cascade"}]
    if aot.get("allreduce_fusion") and any(arch_major(a) in (9, 10) for a in archs):
        mods.append({"kind": "trtllm_comm"})  # SGLang 0.5.9 fuses only on SM90 and SM100
    return dedupe([canonical_module(d, "derived module") for d in mods])


def dedupe(mods: list[dict]) -> list[dict]:
    seen, out = set(), []
    for mod in mods:
        key = json.dumps(mod, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(mod)
    return out


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


def log(msg: str, logfile: Path | None = None) -> None:
    line = time.strftime("%Y-%m-%dT%H:%M:%S ") + msg
    print(line, file=sys.stderr, flush=True)
    if logfile is not None:
        with logfile.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def mask(text: str) -> str:
    """Hide credentials in URLs (https://user:token@host -> https://***@host)."""
    return re.sub(r"(\b[a-z][a-z0-9+.-]*://)[^/@\s]+@", r"\1***@", text)


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def label(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)[:40]


def write_json(path: Path, data) -> None:
    """Atomic: a reader sees the old file or the complete new one, never a torn one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def python_tag(python: str) -> str:
    out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


class Build:
    """One build spec (see the role's tasks/plan.yml for its fields) and its paths."""

    def __init__(self, spec: dict, python_version: str | None = None):
        self.spec = spec
        self.root = Path(spec["root"])
        self.python_version = python_version or python_tag(spec["python"])
        self.keys = {name: self.component_key(name) for name in COMPONENTS}
        self.aot = spec.get("flashinfer_aot") or {}
        self.aot_modules = (derive_aot_modules(self.aot, spec["arch"]["flashinfer_cuda_arch_list"])
                            if self.aot.get("enabled") else [])
        self.release_id = self.make_release_id()
        self.release = self.root / "releases" / self.release_id
        self.venv = self.release / "venv"
        self.logfile = self.root / "logs" / f"{self.release_id}.log"

    # ----- identities -----
    def component_key(self, name: str) -> str:
        """Wheelhouse key: a digest of what determines this component's wheel, nothing else.

        Index URLs are left out on purpose: the same version from a mirror is the same
        wheel, and moving a site offline must not rebuild anything.
        """
        comp = self.spec["components"][name]
        material = {"name": name, "mode": comp["mode"], "version": comp["version"]}
        if comp["mode"] == "wheel":
            material["wheel_url"] = comp.get("wheel_url", "")
        else:
            material.update({k: comp.get(k) for k in ("repo", "ref", "subdir", "build_isolation",
                                                       "build_requires", "env")})
            material.update(python=self.python_version, cuda=self.spec["cuda"]["version"],
                            arch=self.spec["arch"], cmake_args=self.spec["cmake_args"])
            if comp.get("needs_torch"):  # a torch extension is built against torch's ABI
                material["torch"] = self.component_key("torch")
        ident = (comp["version"] or "pinned-by-sglang") if comp["mode"] == "wheel" else comp["ref"]
        return f"{name}-{comp['mode']}-{label(ident)}-{digest(material)[:12]}"

    def make_release_id(self) -> str:
        material = {"components": self.keys, "python": self.python_version, "cuda": self.spec["cuda"]["version"],
                    "arch": self.spec["arch"], "patch": self.spec["patch"], "no_deps": self.spec["pip"]["no_deps"]}
        # Added only when set, so that releases built without them keep their ids.
        if self.aot_modules:
            material["flashinfer_aot"] = self.aot_modules
        if self.spec["pip"].get("extra_packages"):
            material["extra_packages"] = self.spec["pip"]["extra_packages"]
        if self.spec["pip"].get("overrides"):
            material["overrides"] = self.spec["pip"]["overrides"]
        if self.spec.get("torch_local_version"):
            material["torch_local_version"] = self.spec["torch_local_version"]
        sglang = self.spec["components"]["sglang"]
        return f"sglang-{label(sglang['version'])}-{digest(material)[:12]}"

    @property
    def complete(self) -> bool:
        return (self.release / COMPLETE).is_file()

    def wheel_dir(self, name: str) -> Path:
        return self.root / "wheelhouse" / self.keys[name]

    def sources(self) -> list[str]:
        return [n for n in COMPONENTS if self.spec["components"][n]["mode"] == "source"]

    def to_build(self) -> list[str]:
        return [n for n in self.sources() if not self.wheel_dir(n).is_dir()]

    # ----- environment and commands -----
    def base_env(self) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k in ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR") or k.lower().endswith("_proxy")}
        env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", GIT_TERMINAL_PROMPT="0")
        cert = self.spec["pip"].get("cert")
        if cert:
            env.update(PIP_CERT=cert, GIT_SSL_CAINFO=cert, SSL_CERT_FILE=cert, REQUESTS_CA_BUNDLE=cert)
        return env

    def build_env(self, name: str) -> dict:
        """The variables a source build of this component sees (besides base_env)."""
        cuda_home = self.spec["cuda"]["home"]
        env = {"TORCH_CUDA_ARCH_LIST": self.spec["arch"]["torch_cuda_arch_list"],
               "FLASHINFER_CUDA_ARCH_LIST": self.spec["arch"]["flashinfer_cuda_arch_list"],
               "MAX_JOBS": str(self.spec["max_jobs"]), "CMAKE_ARGS": self.spec["cmake_args"],
               "CUDA_HOME": cuda_home, "CUDA_PATH": cuda_home,
               "PATH": f"{cuda_home}/bin:" + os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")}
        env.update({k: str(v) for k, v in self.spec["components"][name].get("env", {}).items()})
        return env

    def index_args(self, name: str | None = None) -> list[str]:
        pip = self.spec["pip"]
        comp = self.spec["components"][name] if name else {}
        args = []
        index = comp.get("index_url") or pip.get("index_url")
        if pip.get("no_index"):
            args.append("--no-index")
        elif index:
            args += ["--index-url", index]
        for url in (comp.get("extra_index_urls") or []) + (pip.get("extra_index_urls") or []):
            if not pip.get("no_index"):
                args += ["--extra-index-url", url]
        for link in pip.get("find_links") or []:
            args += ["--find-links", link]
        for host in pip.get("trusted_hosts") or []:
            args += ["--trusted-host", host]
        return args

    def requirement(self, name: str) -> str:
        comp = self.spec["components"][name]
        if comp["mode"] == "source":
            wheels = sorted(self.wheel_dir(name).glob("*.whl"))
            if len(wheels) != 1:
                raise BuildError(f"{name}: expected one wheel in {self.wheel_dir(name)}, found {len(wheels)}")
            return str(wheels[0])
        if comp.get("wheel_url"):
            return comp["wheel_url"]
        dist = "<the kernel package sglang names>" if name == "sgl_kernel" else DISTRIBUTIONS[name]
        return f"{dist}=={comp['version'] or '<the version sglang pins>'}"

    def wheel_command(self, name: str, builder_python: str, tree: Path, out: Path) -> list[str]:
        comp = self.spec["components"][name]
        cmd = [builder_python, "-m", "pip", "wheel", "--no-deps", "-w", str(out)]
        if not comp.get("build_isolation", True):
            cmd.append("--no-build-isolation")
        return cmd + self.index_args(name) + [str(tree / comp.get("subdir", "."))]

    def run(self, cmd: list[str], env: dict | None = None, cwd: Path | None = None, what: str = "") -> str:
        log(f"$ {mask(' '.join(cmd))}", self.logfile)
        started = time.monotonic()
        proc = subprocess.run(cmd, env=env or self.base_env(), cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)
        with self.logfile.open("a", encoding="utf-8") as fh:
            fh.write(mask(proc.stdout))
        if proc.returncode != 0:
            raise BuildError(f"{what or cmd[0]} failed (exit {proc.returncode}) after "
                             f"{time.monotonic() - started:.0f} s:\n{mask(proc.stdout)[-3000:]}")
        return proc.stdout

    # ----- phases -----
    def plan(self) -> dict:
        """What a build would do; reads the host, changes nothing."""
        components = {}
        for name in COMPONENTS:
            comp = self.spec["components"][name]
            entry = {"mode": comp["mode"], "version": comp["version"], "key": self.keys[name]}
            if comp["mode"] == "source":
                tree = self.root / "work" / name
                builder = (self.root / "home" / f"builder-py{self.python_version}"
                           if comp.get("build_isolation", True) else self.root / "work" / f"venv-{name}")
                entry.update(cached=self.wheel_dir(name).is_dir(), wheel_dir=str(self.wheel_dir(name)),
                             command=[mask(a) for a in self.wheel_command(
                                 name, str(builder / "bin" / "python"), tree,
                                 self.root / "wheelhouse" / f".{self.keys[name]}.tmp-PID")],
                             env=self.build_env(name), ref=comp["ref"], repo=mask(comp["repo"]))
            else:
                entry["requirement"] = mask(self.requirement(name))
            components[name] = entry
        site = self.venv / "lib" / f"python{self.python_version}" / "site-packages"
        return {"release_id": self.release_id, "release_dir": str(self.release), "complete": self.complete,
                "python": str(self.venv / "bin" / "python"), "site_packages": str(site),
                "sglang_dir": str(site / "sglang"), "to_build": self.to_build(), "components": components,
                "log": str(self.logfile), "python_version": self.python_version,
                "flashinfer_aot": {"arch_list": self.spec["arch"]["flashinfer_cuda_arch_list"],
                                   "arch_list_from": self.aot.get("arch_list_from", ""),
                                   "modules": [aot_label(m) for m in self.aot_modules]}}

    def recover(self) -> list[str]:
        """Remove what a killed run left: work trees, temporary wheel dirs, incomplete releases."""
        removed = []
        candidates = [*(self.root / "work").glob("*"), *(self.root / "wheelhouse").glob(".*.tmp-*"),
                      *(p for p in (self.root / "releases").glob("*") if p.is_dir() and not (p / COMPLETE).exists()
                        and not (p == self.release and (p / "venv.json").exists()))]
        for path in candidates:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else path.unlink()
            removed.append(str(path))
        for path in removed:
            log(f"recovered: removed leftover {path}", self.logfile)
        return removed

    def mirror(self, name: str) -> Path:
        """Mirror the component's repository under ROOT/src; fetch only when the ref is not there yet."""
        comp = self.spec["components"][name]
        mirror = self.root / "src" / f"{name}.git"
        env = self.base_env()
        if not mirror.is_dir():
            tmp = mirror.with_name(f".{mirror.name}.tmp-{os.getpid()}")
            log(f"{name}: cloning {mask(comp['repo'])}", self.logfile)
            self.run(["git", "clone", "--quiet", "--mirror", comp["repo"], str(tmp)], env, what=f"{name}: git clone")
            os.replace(tmp, mirror)
        ref = comp["ref"]
        known = subprocess.run(["git", "-C", str(mirror), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                               capture_output=True, text=True, env=env, check=False)
        if known.returncode != 0:
            log(f"{name}: fetching {ref}", self.logfile)
            self.run(["git", "-C", str(mirror), "fetch", "--quiet", "--prune", "--tags", "origin"], env,
                     what=f"{name}: git fetch")
            if subprocess.run(["git", "-C", str(mirror), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                              capture_output=True, env=env, check=False).returncode != 0:
                raise BuildError(f"{name}: {mask(comp['repo'])} has no ref {ref}")
        return mirror

    def checkout(self, name: str) -> tuple[Path, str]:
        """A fresh tree of the component's ref, from its mirror."""
        mirror, ref, env = self.mirror(name), self.spec["components"][name]["ref"], self.base_env()
        tree = self.root / "work" / name
        shutil.rmtree(tree, ignore_errors=True)
        named = any(subprocess.run(["git", "-C", str(mirror), "show-ref", "--verify", "--quiet", f"refs/{kind}/{ref}"],
                                   env=env, check=False).returncode == 0 for kind in ("tags", "heads"))
        # Only this ref's history and the tags in it (a file:// clone, not a local copy of
        # every ref): sglang's setuptools-scm reads "the newest v*.*.* tag" of the tree.
        if named:
            self.run(["git", "clone", "--quiet", "--single-branch", "--branch", ref, mirror.as_uri(), str(tree)], env,
                     what=f"{name}: checkout {ref}")
        else:
            self.run(["git", "clone", "--quiet", "--no-checkout", str(mirror), str(tree)], env, what=f"{name}: clone")
            self.run(["git", "-C", str(tree), "checkout", "--quiet", ref], env, what=f"{name}: checkout {ref}")
        if (tree / ".gitmodules").exists():  # upstream FlashInfer and sgl-kernel vendor CUTLASS and others
            self.run(["git", "-C", str(tree), "submodule", "update", "--init", "--recursive", "--quiet"], env,
                     what=f"{name}: submodules")
        commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True,
                                env=env, check=True).stdout.strip()
        return tree, commit

    def build_wheel(self, name: str) -> dict:
        comp = self.spec["components"][name]
        started = time.time()
        tree, commit = self.checkout(name)
        log(f"{name}: building a wheel from {comp['ref']} ({commit[:12]}) for {self.spec['arch']}", self.logfile)
        if comp.get("build_isolation", True):  # pip makes the build's environment; any pip will do
            builder = self.root / "home" / f"builder-py{self.python_version}"
            if not (builder / "bin" / "python").exists():
                self.run([self.spec["python"], "-m", "venv", str(builder)], what="builder venv")
        else:
            builder = self.root / "work" / f"venv-{name}"
            self.run([self.spec["python"], "-m", "venv", str(builder)], what=f"{name}: build venv")
        py = str(builder / "bin" / "python")
        if not comp.get("build_isolation", True):
            if comp.get("needs_torch"):
                torch = self.spec["components"]["torch"]
                if torch["mode"] == "wheel" and not (torch["version"] or torch.get("wheel_url")):
                    raise BuildError(f"{name} is built against torch: set sglang_build_torch_version (the release's "
                                     "torch pin with its local version, such as 2.9.1+cu130)")
                self.run([py, "-m", "pip", "install", "--quiet", *self.torch_install_args(), self.requirement("torch")],
                         what=f"{name}: torch for the build")
            if comp.get("build_requires"):
                self.run([py, "-m", "pip", "install", "--quiet", *self.index_args(name), *comp["build_requires"]],
                         what=f"{name}: build requirements")
        out = self.root / "wheelhouse" / f".{self.keys[name]}.tmp-{os.getpid()}"
        out.mkdir(parents=True)
        env = dict(self.base_env(), **self.build_env(name))
        self.run(self.wheel_command(name, py, tree, out), env, cwd=tree, what=f"{name}: pip wheel")
        wheels = sorted(p.name for p in out.glob("*.whl"))
        if len(wheels) != 1:
            raise BuildError(f"{name}: the build produced {wheels or 'no wheel'}, expected one wheel")
        record = {"component": name, "key": self.keys[name], "wheel": wheels[0], "repo": mask(comp["repo"]),
                  "ref": comp["ref"], "commit": commit, "env": self.build_env(name),
                  "command": [mask(a) for a in self.wheel_command(name, "python", Path("<tree>"), Path("<out>"))],
                  "started": started, "seconds": round(time.time() - started, 1)}
        write_json(out / "build.json", record)
        os.replace(out, self.wheel_dir(name))  # the wheel counts only once it is whole
        shutil.rmtree(tree, ignore_errors=True)
        if not comp.get("build_isolation", True):
            shutil.rmtree(builder, ignore_errors=True)
        log(f"{name}: built {wheels[0]} in {record['seconds']} s", self.logfile)
        return record

    def torch_install_args(self) -> list[str]:
        return (["--no-deps"] if self.spec["pip"]["no_deps"] else []) + self.index_args("torch")

    def phase_fetch(self) -> dict:
        """Mirror the repositories of the components still to build (a prefetch before going offline)."""
        fetched = []
        for name in self.to_build():
            self.mirror(name)
            fetched.append(name)
        return {"changed": bool(fetched), "fetched": fetched}

    def phase_wheels(self) -> dict:
        built = {name: self.build_wheel(name)["seconds"] for name in self.to_build()}
        return {"changed": bool(built), "built": built,
                "reused": [n for n in self.sources() if n not in built]}

    def sglang_wheel(self, py: str) -> Path:
        """The sglang wheel this release installs: the source build's, else downloaded (no dependencies)."""
        if self.spec["components"]["sglang"]["mode"] == "source":
            return Path(self.requirement("sglang"))
        dest = self.release / "sglang-wheel"
        self.run([py, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", "sglang", "--dest", str(dest),
                  *self.index_args("sglang"), self.requirement("sglang")], what="download sglang")
        wheels = sorted(dest.glob("*.whl"))
        if len(wheels) != 1:
            raise BuildError(f"downloading sglang gave {[p.name for p in wheels] or 'no wheel'}, expected one wheel")
        return wheels[0]

    def phase_venv(self) -> dict:
        """Create the release venv; install the torch family, the kernel package, FlashInfer, SGLang, the extra
        packages and the overrides, in order, each pinned after install (files/sglang_release.py: what and why)."""
        import sglang_release as rel  # beside this tool in ROOT/tools (tasks/install.yml)

        if (self.release / "venv.json").exists():
            return {"changed": False, "release_dir": str(self.release)}
        missing = self.to_build()
        if missing:
            raise BuildError(f"wheels not built yet: {', '.join(missing)} (run the wheels phase)")
        started = time.time()
        shutil.rmtree(self.release, ignore_errors=True)
        self.release.mkdir(parents=True)
        self.run([self.spec["python"], "-m", "venv", str(self.venv)], what="release venv")
        py = str(self.venv / "bin" / "python")
        sglang_wheel = self.sglang_wheel(py)
        try:
            derived = rel.derive(rel.requires_dist(rel.wheel_metadata(sglang_wheel)),
                                 self.spec["components"]["sglang"]["version"])
            steps = rel.install_steps(self, derived, str(sglang_wheel))
        except rel.ReleaseError as err:
            raise BuildError(str(err)) from err
        log(f"{sglang_wheel.name} pins: torch {derived['torch']}, "
            f"{(derived['kernel'] or {}).get('dist', 'no kernel package')} {(derived['kernel'] or {}).get('version')}, "
            f"FlashInfer {(derived['flashinfer'] or {}).get('version')}", self.logfile)
        pins = self.release / "constraints.txt"
        pins.write_text("")
        compile_ = [] if self.spec["pip"].get("compile", True) else ["--no-compile"]
        installed = {}
        for step in steps:
            log(f"installing {step['name']}: {' '.join(mask(r) for r in step['requirements'])}", self.logfile)
            # Overrides replace what the set pinned: they are the one step the pins do not hold.
            constraint = [] if step.get("override") else ["--constraint", str(pins)]
            self.run([py, "-m", "pip", "install", "--quiet", *compile_, *constraint, *step["args"],
                      *step["requirements"]], what=f"install {step['name']}")
            for dist in step["pins"]:
                version = self.installed_version(py, dist)
                if version is None:
                    continue  # a companion the installs did not bring (a --no-deps test install)
                installed[dist] = version
                with pins.open("a", encoding="utf-8") as fh:  # later installs may not replace it
                    fh.write(f"{dist}=={version}\n")
        write_json(self.release / "venv.json", {
            "installed": installed, "derived": derived, "expected": rel.expected_versions(self, derived),
            "steps": [{"name": s["name"], "requirements": [mask(r) for r in s["requirements"]]} for s in steps],
            "started": started, "seconds": round(time.time() - started, 1)})
        return {"changed": True, "installed": installed, "release_dir": str(self.release)}

    @staticmethod
    def installed_version(py: str, dist: str) -> str | None:
        out = subprocess.run([py, "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))", dist],
                             capture_output=True, text=True, check=False)
        return out.stdout.strip() if out.returncode == 0 else None

    # ----- FlashInfer modules compiled into the release -----
    def aot_env(self, work: Path) -> dict:
        """What the AOT driver sees: the build's arch list and jobs, the toolkit, the venv's ninja,
        and a scratch FlashInfer workspace of the build user (its JIT cache and generated sources)."""
        cuda_home = self.spec["cuda"]["home"]
        env = dict(self.base_env(), FLASHINFER_CUDA_ARCH_LIST=self.spec["arch"]["flashinfer_cuda_arch_list"],
                   MAX_JOBS=str(self.spec["max_jobs"]), CUDA_HOME=cuda_home, CUDA_PATH=cuda_home,
                   FLASHINFER_WORKSPACE_BASE=str(work), PYTHONUNBUFFERED="1",
                   PATH=f"{self.venv / 'bin'}:{cuda_home}/bin:" + os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"))
        env.update({k: str(v) for k, v in (self.aot.get("env") or {}).items()})
        return env

    def aot_inputs(self) -> dict:
        return {"modules": self.aot_modules, "arch_list": self.spec["arch"]["flashinfer_cuda_arch_list"],
                "cuda": self.spec["cuda"]["version"], "flashinfer": self.keys["flashinfer"]}

    def aot_arch_problem(self, nvcc: Path) -> str | None:
        """A target arch this nvcc cannot build, said with the variable it came from (checked before any compile)."""
        arch_list = self.spec["arch"]["flashinfer_cuda_arch_list"]
        known = nvcc_archs(nvcc)
        bad = unbuildable(arch_list, known)
        if not bad:
            return None
        where = self.aot.get("arch_list_from") or "sglang_build_flashinfer_cuda_arch_list"
        return (f"{where}: {' '.join(bad)} cannot be built by {nvcc} (it builds "
                f"{', '.join(sorted(known, key=lambda a: int(a.split('_')[1]))) or 'nothing it would list'}; "
                f"'a' needs 9.0 or newer, 'f' 10.0 or newer)")

    def phase_aot(self) -> dict:
        """Compile the FlashInfer modules the server will load into the release's FlashInfer AOT
        directory (files/flashinfer_aot.py, run by the release's Python), for the target arch list."""
        if not (self.release / "venv.json").exists():
            raise BuildError(f"{self.release} has no installed venv (run the venv phase)")
        stamp_path = self.release / AOT_STAMP
        inputs = self.aot_inputs()
        nvcc = Path(self.spec["cuda"]["home"]) / "bin" / "nvcc"
        skipped = None
        if not self.aot_modules:
            skipped = ("FlashInfer's AOT step is off (sglang_build_flashinfer_aot)" if not self.aot.get("enabled") else
                       "no FlashInfer module to compile for these server settings (see sglang_build_flashinfer_aot_modules)")
        elif not nvcc.exists():
            skipped = f"no nvcc at {nvcc}: the server's FlashInfer compiles at its first start instead"
        if skipped:
            stamp = {"status": "skipped", "reason": skipped, "inputs": digest(inputs), "modules": []}
            if stamp_path.exists() and json.loads(stamp_path.read_text()) == stamp:
                return dict(stamp, changed=False)
            write_json(stamp_path, stamp)
            log(f"FlashInfer AOT: skipped: {skipped}", self.logfile)
            return dict(stamp, changed=True)
        problem = self.aot_arch_problem(nvcc)
        if problem:
            raise BuildError(problem)
        if stamp_path.exists():
            stamp = json.loads(stamp_path.read_text())
            if stamp.get("status") == "compiled" and stamp.get("inputs") == digest(inputs) and \
                    all(Path(m["so"]).is_file() for m in stamp["modules"]):
                return {"changed": False, "status": "compiled", "modules": [m["name"] for m in stamp["modules"]]}
        work = self.root / "work" / "flashinfer-aot"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        (work / "modules.json").write_text(json.dumps(self.aot_modules, indent=2) + "\n")
        driver = Path(__file__).resolve().with_name("flashinfer_aot.py")
        log(f"FlashInfer AOT: {len(self.aot_modules)} modules for {inputs['arch_list']} with MAX_JOBS="
            f"{self.spec['max_jobs']} (tail -f {self.logfile})", self.logfile)
        self.stream([str(self.venv / "bin" / "python"), str(driver), "build", "--modules", str(work / "modules.json"),
                     "--result", str(work / "result.json")], self.aot_env(work), what="FlashInfer AOT compile")
        result = json.loads((work / "result.json").read_text())
        release = str(self.release.resolve())
        outside = [m["so"] for m in result["modules"] if not str(Path(m["so"]).resolve()).startswith(release + "/")]
        if outside:
            raise BuildError(f"FlashInfer's AOT directory is outside the release ({outside[0]}): "
                             "is flashinfer-jit-cache installed from elsewhere?")
        stamp = {"status": "compiled", "inputs": digest(inputs), "arch_list": inputs["arch_list"],
                 "flashinfer": result["flashinfer"], "aot_dir": result["aot_dir"], "seconds": result["seconds"],
                 "max_jobs": self.spec["max_jobs"], "modules": result["modules"]}
        write_json(stamp_path, stamp)
        shutil.rmtree(work, ignore_errors=True)
        for mod in result["modules"]:
            log(f"FlashInfer AOT: {mod['name']}: {mod.get('wall_seconds', 0)} s wall, {mod.get('jobs', 0)} jobs, "
                f"for {' '.join(mod['expected_archs'])}", self.logfile)
        log(f"FlashInfer AOT: {len(result['modules'])} modules in {result['seconds']} s", self.logfile)
        return {"changed": True, "status": "compiled", "seconds": result["seconds"],
                "modules": {m["name"]: m.get("wall_seconds", 0) for m in result["modules"]}}

    def stream(self, cmd: list[str], env: dict, what: str) -> None:
        """Run a long command with its output going to the log as it comes (tail -f shows ninja's [n/N])."""
        log(f"$ {mask(' '.join(cmd))}", self.logfile)
        started = time.monotonic()
        tail: list[str] = []
        with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace") as proc, self.logfile.open("a", encoding="utf-8") as fh:
            for line in proc.stdout:
                fh.write(mask(line))
                fh.flush()
                tail = (tail + [line])[-60:]
        if proc.returncode != 0:
            raise BuildError(f"{what} failed (exit {proc.returncode}) after {time.monotonic() - started:.0f} s:\n"
                             f"{mask(''.join(tail))[-3000:]}")

    def aot_check(self) -> dict:
        """Each compiled module's machine code archs, against the archs FlashInfer compiles it for."""
        stamp_path = self.release / AOT_STAMP
        if not self.aot_modules and not stamp_path.exists():
            return {"status": "skipped", "reason": "no FlashInfer module to compile", "modules": []}
        if not stamp_path.exists():
            return {"status": "failed", "reason": f"{stamp_path} is missing (run the aot phase)", "modules": []}
        stamp = json.loads(stamp_path.read_text())
        if stamp["status"] == "skipped":
            return {"status": "skipped", "reason": stamp["reason"], "modules": []}
        if stamp.get("inputs") != digest(self.aot_inputs()):
            return {"status": "failed", "reason": "the compiled modules are not the requested ones", "modules": []}
        cuobjdump = Path(self.spec["cuda"]["home"]) / "bin" / "cuobjdump"
        modules, problems = [], []
        for mod in stamp["modules"]:
            entry = {"name": mod["name"], "expected": mod["expected_archs"]}
            if not Path(mod["so"]).is_file():
                entry.update(archs=[], missing=mod["expected_archs"], read_by="")
                problems.append(f"{mod['name']}: {mod['so']} is missing")
            else:
                found = list_archs(Path(mod["so"]), cuobjdump)
                missing = sorted(set(mod["expected_archs"]) - set(found["archs"]))
                entry.update(archs=found["archs"], missing=missing, read_by=found["read_by"])
                if missing or not mod["expected_archs"]:
                    problems.append(f"{mod['name']}: no {' '.join(missing or ['code'])} code "
                                    f"(it has {' '.join(found['archs']) or 'none'})")
            modules.append(entry)
        return {"status": "failed" if problems else "passed", "problems": problems, "modules": modules,
                "arch_list": stamp["arch_list"], "aot_dir": stamp["aot_dir"], "compile_seconds": stamp["seconds"]}

    def arch_check(self, include: str | None) -> dict:
        """Compile a real FlashInfer unit for each target arch and read the produced code's arch."""
        nvcc = Path(self.spec["cuda"]["home"]) / "bin" / "nvcc"
        if not nvcc.exists():
            return {"status": "skipped", "reason": f"no nvcc at {nvcc}"}
        if not include or not Path(include, "flashinfer", "activation.cuh").exists():
            return {"status": "skipped", "reason": "the installed flashinfer package has no headers"}
        results = []
        with tempfile.TemporaryDirectory(prefix="sglang-build-arch-") as tmp:
            src = Path(tmp) / "flashinfer_activation.cu"
            src.write_text(FLASHINFER_UNIT)
            for arch in self.spec["arch"]["flashinfer_cuda_arch_list"].split():
                sm = arch.replace(".", "")
                cubin = Path(tmp) / f"activation_sm_{sm}.cubin"
                cmd = [str(nvcc), "-std=c++17", "-cubin", f"-gencode=arch=compute_{sm},code=sm_{sm}",
                       "-I", include, "-o", str(cubin), str(src)]
                started = time.monotonic()
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                entry = {"arch": arch, "target": f"sm_{sm}", "unit": "flashinfer/activation.cuh act_and_mul_kernel",
                         "compile_seconds": round(time.monotonic() - started, 1), "compiled": proc.returncode == 0}
                if proc.returncode != 0:
                    entry["error"] = (proc.stdout + proc.stderr)[-2000:]
                else:
                    entry.update(read_cubin_arch(cubin, Path(self.spec["cuda"]["home"]) / "bin" / "cuobjdump"))
                    entry["ok"] = entry.get("sm") == int(re.sub(r"\D", "", sm))
                results.append(entry)
        ok = all(r.get("ok") for r in results)
        return {"status": "passed" if ok else "failed", "nvcc": str(nvcc), "units": results}

    def phase_check(self) -> dict:
        """Verify the installed release; write its manifest, then mark it complete."""
        if not (self.release / "venv.json").exists():
            raise BuildError(f"{self.release} has no installed venv (run the venv phase)")
        import sglang_release as rel  # beside this tool in ROOT/tools (tasks/install.yml)

        py = str(self.venv / "bin" / "python")
        venv = json.loads((self.release / "venv.json").read_text())
        # What the venv phase derived from sglang's metadata (a release of an older tool: the spec's versions).
        expected = venv.get("expected") or {DISTRIBUTIONS[n]: self.spec["components"][n]["version"] for n in COMPONENTS}
        looked_up = {d: d for d in [*expected, *rel.TORCH_COMPANIONS]}
        out = subprocess.run([py, "-c", CHECK_SCRIPT, json.dumps(looked_up)], capture_output=True, text=True,
                             check=False)
        if out.returncode != 0:
            raise BuildError(f"the release's Python could not inspect it:\n{out.stderr[-2000:]}")
        found = json.loads(out.stdout)
        problems = [f"{dist}: requested {want}, installed {found['versions'][dist]}"
                    for dist, want in expected.items() if not rel.same_version(found["versions"][dist], want)]
        problems += rel.family_problems(found["versions"])
        found["pip_check"] = self.pip_check(py)
        problems += [f"pip check: {line}" for line in found["pip_check"]["unexpected"]]
        missing = [f for f in self.spec["required_model_files"] if f not in found["model_files"]]
        if not found["sglang_dir"] or not found["model_files"]:
            problems.append("sglang's package or its srt/models directory was not found")
        elif missing:
            problems.append(f"sglang/srt/models lacks {', '.join(missing)}")
        arch = self.arch_check(found["flashinfer_include"])
        if arch["status"] == "failed":
            problems.append(f"the FlashInfer unit did not compile to the target arch: {json.dumps(arch)[:2000]}")
        aot = self.aot_check()
        if aot["status"] == "failed":
            problems += [f"FlashInfer module {p}" for p in aot.get("problems", [])] or \
                [f"FlashInfer modules: {aot['reason']}"]
        result = {"release_id": self.release_id, "versions": found["versions"], "sglang_dir": found["sglang_dir"],
                  "model_files": len(found["model_files"]), "arch_check": arch, "flashinfer_aot": aot,
                  "problems": problems}
        if problems:
            raise BuildError("post-build checks failed: " + "; ".join(problems))
        if self.complete:
            return dict(result, changed=False)
        write_json(self.release / "manifest.json", self.manifest(found, arch, aot))
        (self.release / f".{COMPLETE}.tmp").write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z\n"))
        os.replace(self.release / f".{COMPLETE}.tmp", self.release / COMPLETE)
        log(f"release {self.release_id} complete", self.logfile)
        return dict(result, changed=True)

    def pip_check(self, py: str) -> dict:
        """`pip check` of the release: a broken requirement fails it, except those of an override (expected).

        Skipped for a --no-deps install (TEST ONLY), where every dependency is missing by design.
        """
        if self.spec["pip"]["no_deps"]:
            return {"skipped": "installed without dependencies (sglang_build_pip_no_deps)", "unexpected": []}
        import sglang_release as rel

        proc = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True, env=self.base_env(),
                              check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip() and not ln.startswith("No broken requirements")]
        overridden = {rel.parse_requirement(r)["name"] for r in self.spec["pip"].get("overrides") or []}
        expected = [ln for ln in lines if any(rel.normalize(w) in overridden for w in re.findall(r"[A-Za-z0-9._-]+", ln))]
        return {"expected": expected, "unexpected": [ln for ln in lines if ln not in expected]}

    def manifest(self, found: dict, arch: dict, aot: dict) -> dict:
        venv = json.loads((self.release / "venv.json").read_text())
        kernel = (venv.get("derived", {}).get("kernel") or {}).get("dist", DISTRIBUTIONS["sgl_kernel"])
        dists = dict(DISTRIBUTIONS, sgl_kernel=kernel)
        components = {}
        for name in COMPONENTS:
            comp = self.spec["components"][name]
            entry = {"mode": comp["mode"], "distribution": dists[name],
                     "requested": comp["version"] or f"{venv.get('expected', {}).get(dists[name])} (sglang's pin)",
                     "installed": found["versions"].get(dists[name]), "key": self.keys[name]}
            if comp["mode"] == "source":
                entry["build"] = json.loads((self.wheel_dir(name) / "build.json").read_text())
            else:
                entry["index"] = [mask(a) for a in self.index_args(name)]
            components[name] = entry
        inputs = json.loads(mask(json.dumps(self.spec)))
        return {"release_id": self.release_id, "release_set": self.spec.get("release_set", ""), "inputs": inputs,
                "components": components, "versions": found["versions"], "pins_from_sglang": venv.get("derived"),
                "install_steps": venv.get("steps"), "overrides": self.spec["pip"].get("overrides") or [],
                "pip_check": found["pip_check"],
                "arch": {"torch_cuda_arch_list": self.spec["arch"]["torch_cuda_arch_list"],
                         "flashinfer_cuda_arch_list": self.spec["arch"]["flashinfer_cuda_arch_list"],
                         "cuda": self.spec["cuda"], "check": arch},
                "flashinfer_aot": dict(aot, modules_requested=[aot_label(m) for m in self.aot_modules]),
                "python": found["python"], "sglang_dir": found["sglang_dir"],
                "model_files": len(found["model_files"]),
                "times": {"venv_started": venv["started"], "venv_seconds": venv["seconds"],
                          "completed": time.time()}}


def aot_label(mod: dict) -> str:
    """A module descriptor in one short line: `prefill fa2 bfloat16 192/128`."""
    words = [mod["kind"], mod.get("act", ""), mod.get("backend", ""), mod.get("dtype", "")]
    if mod.get("dtype_kv", mod.get("dtype")) != mod.get("dtype"):
        words.append(f"kv {mod['dtype_kv']}")
    dims = [mod[k] for k in ("head_dim_ckv", "head_dim_kpe", "head_dim_qk", "head_dim_vo", "head_dim") if k in mod]
    words.append("/".join(map(str, dims)))
    words += [k for k in ("sliding_window", "logits_soft_cap", "fp16_qk_reduction") if mod.get(k)]
    if mod.get("pos_encoding_mode"):
        words.append(f"posenc {mod['pos_encoding_mode']}")
    return " ".join(w for w in words if w)


def canonical(version: str) -> str:
    """Version text as pip compares it closely enough here: case, a leading v, '-'/'_' vs '.'."""
    return version.strip().lower().lstrip("v").replace("-", ".").replace("_", ".")


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
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from nvidia_cuda_verify import cubin_sm  # pylint: disable=import-outside-toplevel
    sm = cubin_sm(str(cubin))
    return {"sm": sm, "reported": f"sm_{sm}", "read_by": "ELF header (no cuobjdump)"}


def prune(root: Path, keep: int, dry_run: bool) -> dict:
    """Keep the newest `keep` complete releases and always current and previous; drop the rest.

    Newest is by completion time (the .complete marker). Wheelhouse entries that no
    kept release uses go too, except those newer than the oldest kept release (a
    build in progress may be about to use them).
    """
    releases = root / "releases"
    protected = {str((root / link).resolve()) for link in ("current", "previous") if (root / link).is_symlink()}
    complete = sorted((p for p in releases.glob("*") if (p / COMPLETE).is_file()),
                      key=lambda p: (p / COMPLETE).stat().st_mtime, reverse=True)
    kept = [p for p in complete if str(p.resolve()) in protected]
    for path in complete:
        if len(kept) >= keep:
            break
        if path not in kept:
            kept.append(path)
    drop = [p for p in complete if p not in kept]
    used = set()
    for path in kept:
        manifest = path / "manifest.json"
        if manifest.exists():
            used.update(c["key"] for c in json.loads(manifest.read_text())["components"].values())
    oldest = min(((p / COMPLETE).stat().st_mtime for p in kept), default=time.time())
    drop_wheels = [w for w in (root / "wheelhouse").glob("*") if w.is_dir() and not w.name.startswith(".")
                   and w.name not in used and w.stat().st_mtime < oldest]
    if not dry_run:
        for path in drop + drop_wheels:
            shutil.rmtree(path)
            (root / "logs" / f"{path.name}.log").unlink(missing_ok=True)
    return {"changed": bool(drop or drop_wheels), "kept": [p.name for p in kept], "removed": [p.name for p in drop],
            "removed_wheels": [w.name for w in drop_wheels], "dry_run": dry_run}


def drop_privileges(user: str | None) -> None:
    """Build as the dedicated user: files it writes are its own, never root's."""
    if not user or os.geteuid() != 0:
        return
    pw = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)
    os.environ.update(HOME=pw.pw_dir, USER=user, LOGNAME=user)
    os.umask(0o022)


def load_spec(path: str | None) -> dict:
    if path:
        return json.loads(Path(path).read_text())
    if SPEC_ENV not in os.environ:
        raise SystemExit(f"no spec: pass --spec FILE or set {SPEC_ENV}")
    return json.loads(os.environ[SPEC_ENV])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", choices=["plan", "fetch", "wheels", "venv", "aot", "check", "prune"])
    ap.add_argument("--spec", help=f"spec JSON file (default: the {SPEC_ENV} environment variable)")
    ap.add_argument("--run-as", help="drop root privileges to this user first")
    ap.add_argument("--root", help="prune: the releases root")
    ap.add_argument("--keep", type=int, default=3, help="prune: releases to keep (at least 2)")
    ap.add_argument("--dry-run", action="store_true", help="prune: say what would go, remove nothing")
    args = ap.parse_args(argv)
    drop_privileges(args.run_as)

    if args.phase == "prune":
        if args.keep < 2:
            raise SystemExit("--keep must be at least 2 (the current and the previous release)")
        root = Path(args.root)
        with lock(root, args.dry_run):
            print(json.dumps(prune(root, args.keep, args.dry_run)))
        return 0

    try:
        build = Build(load_spec(args.spec))
    except ValueError as err:  # a module descriptor or derived setting the tool cannot use
        print(json.dumps({"failed": True, "msg": str(err)}))
        return 1
    if args.phase == "plan":
        print(json.dumps(build.plan()))
        return 0
    for sub in ("releases", "wheelhouse", "src", "work", "logs"):
        (build.root / sub).mkdir(parents=True, exist_ok=True)
    with lock(build.root):
        if build.complete and args.phase != "check":
            print(json.dumps({"changed": False, "release_id": build.release_id, "complete": True}))
            return 0
        try:
            recovered = build.recover() if args.phase in ("fetch", "wheels", "venv", "aot") else []
            log(f"phase {args.phase} of {build.release_id}", build.logfile)
            result = getattr(build, f"phase_{args.phase}")()
        except BuildError as err:
            log(f"FAILED: {err}", build.logfile)
            print(json.dumps({"failed": True, "msg": str(err), "release_id": build.release_id,
                              "log": str(build.logfile)}))
            return 1
        if recovered:
            result.update(changed=True, recovered=recovered)
        print(json.dumps(dict(result, release_id=build.release_id, log=str(build.logfile))))
    return 0


class lock:  # noqa: N801 - used as `with lock(root):`
    """An exclusive flock on ROOT/.build.lock: one build or prune at a time per host."""

    def __init__(self, root: Path, shared: bool = False):
        self.path, self.shared, self.fh = root / "wheelhouse" / ".build.lock", shared, None

    def __enter__(self):
        if self.shared and not self.path.exists():
            return self
        self.fh = self.path.open("a")
        fcntl.flock(self.fh, fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.fh:
            self.fh.close()


if __name__ == "__main__":
    sys.exit(main())
