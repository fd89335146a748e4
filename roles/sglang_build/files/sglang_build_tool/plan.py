#!/usr/bin/env python3
"""What a build spec makes: the release's id, the wheelhouse keys, the FlashInfer modules, the plan.

Only Python's standard library and no import of the package's other modules: the role also runs
this file alone (``plan.py``, the spec in SGLANG_BUILD_SPEC), as a script sent with the task
(ansible.builtin.script), before anything is installed and in check mode. The rest of the package
builds on it (class Build extends Plan with the phases).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

# Install order: each later component is installed against the ones before it.
COMPONENTS = ["torch", "sgl_kernel", "flashinfer", "sglang"]


DISTRIBUTIONS = {"torch": "torch", "sgl_kernel": "sgl-kernel", "flashinfer": "flashinfer-python",
                 "sglang": "sglang"}


COMPLETE = ".complete"


SPEC_ENV = "SGLANG_BUILD_SPEC"


class BuildError(Exception):
    """A step failed; the message says which and shows the end of its output."""


# Each kind is one of FlashInfer's JIT module generators (0.6.3, 0.6.15.post1 and 0.7.2 take the same
# arguments), called with the arguments its Python API passes (flashinfer_aot.jit_spec). Parameters and
# their defaults; None: derived.
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


def aot_module_problems(mods) -> list[str]:
    """Every problem of a sglang_build_flashinfer_aot_modules list, each naming its item (validation
    runs this on the controller before any host changes; the plan runs canonical_module itself)."""
    if not isinstance(mods, list):
        return [f"{AOT_VARIABLE} must be a list of module descriptors, got {mods!r}"]
    problems = []
    for i, desc in enumerate(mods):
        try:
            canonical_module(desc, f"{AOT_VARIABLE}[{i}]")
        except ValueError as err:
            problems.append(str(err))
    return problems


def arch_major(arch: str) -> int:
    return int(arch.split(".")[0])


def derive_aot_modules(aot: dict, arch_list: str) -> list[dict]:
    """The FlashInfer JIT modules SGLang loads for a DeepSeek-V3-architecture model (Kimi-K2.5)
    with these server settings, on these archs (see the role's README).

    In 0.5.9 the norms, RoPE, activation and sampling kernels on CUDA are sgl-kernel's own,
    compiled into its wheel; FlashInfer's JIT is reached through the attention backend and the
    all-reduce fusion only. From 0.5.17 the sampler takes its top-k/top-p/min-p kernels from
    flashinfer.sampling (`sampling`: the set's source says so). The automatic attention backend for
    this model is triton on SM120, fa3 on SM90 and trtllm_mla on SM100: no FlashInfer attention
    module is compiled for it. An MLA draft (Eagle3DeepseekV2ForCausalLM, 0.5.17 on) runs on the
    target's FlashInfer MLA backend with its own config's dims: Kimi-K2.x's layout, the target's modules.
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
            if aot.get("draft_attention", "mha") == "mla":
                # FlashInferMLA(MultiStepDraft)AttnBackend with the draft's kv_lora_rank, rope, nope and v dims:
                # the MLA draft of Kimi-K2.x keeps the target's layout, so its modules are the target's (above).
                for backend in backends:
                    mods.append({"kind": "mla", "backend": backend, "head_dim_ckv": MLA_CKV, "head_dim_kpe": MLA_KPE})
                    mods.append({"kind": "prefill", "backend": backend, "head_dim_qk": MLA_QK, "head_dim_vo": MLA_VO})
            else:
                # The draft (a Llama layer, MHA) on FlashInfer's MHA backend: paged and ragged prefill,
                # decode (tensor-core decode is the prefill module), merge_state for extend.
                head = int(aot["draft_head_dim"])
                for backend in backends:
                    mods.append({"kind": "prefill", "backend": backend, "head_dim_qk": head})
                mods += [{"kind": "decode", "head_dim": head}, {"kind": "cascade"}]
    if aot.get("sampling"):
        mods.append({"kind": "sampling"})  # flashinfer.sampling: top_k_top_p / min_p sampling from probs
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


def load_spec(path: str | None) -> dict:
    if path:
        return json.loads(Path(path).read_text())
    if SPEC_ENV not in os.environ:
        raise SystemExit(f"no spec: pass --spec FILE or set {SPEC_ENV}")
    return json.loads(os.environ[SPEC_ENV])


class Plan:
    """One build spec (see the role's tasks/plan.yml for its fields): its identities, paths and commands."""

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The plan of a build spec: what a build would do (reads, changes nothing)")
    ap.add_argument("--spec", help=f"spec JSON file (default: the {SPEC_ENV} environment variable)")
    ap.add_argument("--check-aot-modules", action="store_true",
                    help=f"only check the {AOT_VARIABLE} list given as JSON on stdin (every problem, exit 1 on any)")
    args = ap.parse_args(argv)
    if args.check_aot_modules:
        problems = aot_module_problems(json.load(sys.stdin))
        print(json.dumps({"failed": bool(problems), "msg": "; ".join(problems)}))
        return 1 if problems else 0
    try:
        plan = Plan(load_spec(args.spec)).plan()
    except ValueError as err:  # a module descriptor or derived setting the tool cannot use
        print(json.dumps({"failed": True, "msg": str(err)}))
        return 1
    print(json.dumps(plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
