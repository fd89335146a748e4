"""Phase aot: the FlashInfer modules the server will load, compiled into the release (files/flashinfer_aot.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from .archs import list_archs, nvcc_archs, unbuildable
from .plan import AOT_STAMP, BuildError, digest, log, mask, write_json


class AotSteps:
    """The aot phase and its check, for class Build (its spec, release, logfile)."""

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
        driver = Path(__file__).resolve().parent.parent / "flashinfer_aot.py"  # beside the package
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
