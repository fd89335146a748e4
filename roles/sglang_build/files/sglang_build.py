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

Phases (one subcommand each, so the role can tag and time them): plan, fetch,
wheels, venv, check, prune. Every phase prints one JSON object on stdout; progress
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
        ident = comp["version"] if comp["mode"] == "wheel" else comp["ref"]
        return f"{name}-{comp['mode']}-{label(ident)}-{digest(material)[:12]}"

    def make_release_id(self) -> str:
        material = {"components": self.keys, "python": self.python_version, "cuda": self.spec["cuda"]["version"],
                    "arch": self.spec["arch"], "patch": self.spec["patch"], "no_deps": self.spec["pip"]["no_deps"]}
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
        return comp.get("wheel_url") or f"{DISTRIBUTIONS[name]}=={comp['version']}"

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
                "log": str(self.logfile), "python_version": self.python_version}

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

    def phase_venv(self) -> dict:
        """Create the release venv and install the four components, in order, each pinned after install."""
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
        pins = self.release / "constraints.txt"
        pins.write_text("")
        installed = {}
        for name in COMPONENTS:
            args = self.torch_install_args() if name == "torch" else (
                (["--no-deps"] if self.spec["pip"]["no_deps"] else []) + self.index_args(name))
            log(f"installing {name} ({self.spec['components'][name]['mode']}) into {self.release_id}", self.logfile)
            compile_ = [] if self.spec["pip"].get("compile", True) else ["--no-compile"]
            self.run([py, "-m", "pip", "install", "--quiet", *compile_, "--constraint", str(pins), *args,
                      self.requirement(name)],
                     what=f"install {name}")
            version = subprocess.run([py, "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))",
                                      DISTRIBUTIONS[name]], capture_output=True, text=True, check=True).stdout.strip()
            installed[name] = version
            with pins.open("a", encoding="utf-8") as fh:  # later installs may not replace it
                fh.write(f"{DISTRIBUTIONS[name]}=={version}\n")
        write_json(self.release / "venv.json", {"installed": installed, "started": started,
                                                "seconds": round(time.time() - started, 1)})
        return {"changed": True, "installed": installed, "release_dir": str(self.release)}

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
        py = str(self.venv / "bin" / "python")
        out = subprocess.run([py, "-c", CHECK_SCRIPT, json.dumps(DISTRIBUTIONS)], capture_output=True, text=True,
                             check=False)
        if out.returncode != 0:
            raise BuildError(f"the release's Python could not inspect it:\n{out.stderr[-2000:]}")
        found = json.loads(out.stdout)
        problems = []
        for name in COMPONENTS:
            want, have = self.spec["components"][name]["version"], found["versions"][name]
            if have is None or canonical(have) != canonical(want):
                problems.append(f"{DISTRIBUTIONS[name]}: requested {want}, installed {have}")
        missing = [f for f in self.spec["required_model_files"] if f not in found["model_files"]]
        if not found["sglang_dir"] or not found["model_files"]:
            problems.append("sglang's package or its srt/models directory was not found")
        elif missing:
            problems.append(f"sglang/srt/models lacks {', '.join(missing)}")
        arch = self.arch_check(found["flashinfer_include"])
        if arch["status"] == "failed":
            problems.append(f"the FlashInfer unit did not compile to the target arch: {json.dumps(arch)[:2000]}")
        result = {"release_id": self.release_id, "versions": found["versions"], "sglang_dir": found["sglang_dir"],
                  "model_files": len(found["model_files"]), "arch_check": arch, "problems": problems}
        if problems:
            raise BuildError("post-build checks failed: " + "; ".join(problems))
        if self.complete:
            return dict(result, changed=False)
        write_json(self.release / "manifest.json", self.manifest(found, arch))
        (self.release / f".{COMPLETE}.tmp").write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z\n"))
        os.replace(self.release / f".{COMPLETE}.tmp", self.release / COMPLETE)
        log(f"release {self.release_id} complete", self.logfile)
        return dict(result, changed=True)

    def manifest(self, found: dict, arch: dict) -> dict:
        venv = json.loads((self.release / "venv.json").read_text())
        components = {}
        for name in COMPONENTS:
            comp = self.spec["components"][name]
            entry = {"mode": comp["mode"], "requested": comp["version"], "installed": found["versions"][name],
                     "key": self.keys[name]}
            if comp["mode"] == "source":
                entry["build"] = json.loads((self.wheel_dir(name) / "build.json").read_text())
            else:
                entry["requirement"] = mask(self.requirement(name))
                entry["index"] = [mask(a) for a in self.index_args(name)]
            components[name] = entry
        inputs = json.loads(mask(json.dumps(self.spec)))
        return {"release_id": self.release_id, "inputs": inputs, "components": components,
                "arch": {"torch_cuda_arch_list": self.spec["arch"]["torch_cuda_arch_list"],
                         "flashinfer_cuda_arch_list": self.spec["arch"]["flashinfer_cuda_arch_list"],
                         "cuda": self.spec["cuda"], "check": arch},
                "python": found["python"], "sglang_dir": found["sglang_dir"],
                "model_files": len(found["model_files"]),
                "times": {"venv_started": venv["started"], "venv_seconds": venv["seconds"],
                          "completed": time.time()}}


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
    ap.add_argument("phase", choices=["plan", "fetch", "wheels", "venv", "check", "prune"])
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

    build = Build(load_spec(args.spec))
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
            recovered = build.recover() if args.phase in ("fetch", "wheels", "venv") else []
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
