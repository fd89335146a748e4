"""A release built: the components' repositories mirrored, wheels built, the release venv installed.

class Build is the Plan with its phases (fetch, wheels, venv here; aot and check in aot.py and check.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from .aot import AotSteps
from .check import CheckSteps
from .plan import COMPLETE, BuildError, Plan, log, mask, write_json


class Build(AotSteps, CheckSteps, Plan):
    """One build spec and its phases: one method phase_<name> per subcommand."""

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
