"""Phase check: the installed release verified, its manifest written, then its .complete marker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from .archs import read_cubin_arch
from .plan import COMPLETE, COMPONENTS, DISTRIBUTIONS, BuildError, aot_label, log, mask, write_json

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


class CheckSteps:
    """The check phase, for class Build (its spec, release, keys and the aot check)."""

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
        imports = self.import_check(py)
        if imports["status"] == "failed":
            problems.append(f"the release does not import whole: {imports['summary']}")
        aot = self.aot_check()
        if aot["status"] == "failed":
            problems += [f"FlashInfer module {p}" for p in aot.get("problems", [])] or \
                [f"FlashInfer modules: {aot['reason']}"]
        result = {"release_id": self.release_id, "versions": found["versions"], "sglang_dir": found["sglang_dir"],
                  "model_files": len(found["model_files"]), "arch_check": arch, "flashinfer_aot": aot,
                  "imports": imports, "problems": problems}
        if problems:
            raise BuildError("post-build checks failed: " + "; ".join(problems))
        if self.complete:
            return dict(result, changed=False)
        write_json(self.release / "manifest.json", dict(self.manifest(found, arch, aot), imports=imports))
        (self.release / f".{COMPLETE}.tmp").write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z\n"))
        os.replace(self.release / f".{COMPLETE}.tmp", self.release / COMPLETE)
        log(f"release {self.release_id} complete", self.logfile)
        return dict(result, changed=True)

    def import_check(self, py: str) -> dict:
        """torch, sgl_kernel (its library for the host's compute capabilities), flashinfer and deep_gemm imported
        by the release's own Python (sglang_import_check.py beside the package: what it evaluates, what it cannot).
        A failure keeps the release from being marked complete; `inconclusive` is recorded with its reasons.
        A complete release (re-verified) is imported without touching the GPUs: it may be serving on them."""
        script = Path(__file__).resolve().parent.parent / "sglang_import_check.py"
        cmd = [py, str(script)]
        for cc in self.spec.get("compute_capabilities") or []:
            cmd += ["--compute-capability", str(cc)]
        if self.spec["pip"]["no_deps"]:
            cmd.append("--installed-without-deps")
        if self.complete:  # re-verified: it may be the release serving on these GPUs
            cmd.append("--no-cuda")
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self.base_env(), check=False)
        try:
            result = json.loads(proc.stdout)
        except ValueError:
            return {"status": "failed", "summary": f"the import check did not run (exit {proc.returncode}): "
                                                   f"{(proc.stdout + proc.stderr)[-1500:]}", "imports": {}}
        result["seconds"] = round(time.monotonic() - started, 1)
        log(f"import check: {result['status']}: {result['summary']}", self.logfile)
        return result

    def pip_check(self, py: str) -> dict:
        """`pip check` of the release: a broken requirement fails it, except those of an override (expected).

        Skipped for a --no-deps install (sglang_build_pip_no_deps), where every dependency is missing by design.
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
