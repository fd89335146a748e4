#!/usr/bin/env python3
"""A release imported whole: torch, sgl_kernel (and its library for the host's compute capability),
flashinfer and deep_gemm, in the release's own venv. Run by the release's Python:

    /opt/sglang/releases/<id>/venv/bin/python sglang_import_check.py --compute-capability 12.0

(the build tool's check phase runs it before a release is marked complete; on any host, a GPU one
too, the same command says whether a release can be imported there). One JSON object on stdout;
exit 0 passed, 1 failed, 3 inconclusive.

What each module gets:

torch       imported; with a GPU visible: CUDA initialised, one operation on one device of each
            compute capability, and every device's capability among the archs torch was built for
            (`--no-cuda`: none of it, for a release that may be serving on those GPUs).
sgl_kernel  imported (its __init__ loads its compiled ops); the library its load_utils.py chooses
            for each of the host's compute capabilities (sm90/ on 9.0, sm100/ on the others, in the
            kernel packages of SGLang 0.5.9 to 0.5.23; read from the installed load_utils.py) must
            exist and carry machine code for that capability (read from its fatbin headers); with a
            GPU visible, the library it loaded must be that one.
flashinfer  imported.
deep_gemm   imported (it loads its compiled _C.so); not required by every release (0.5.9 does not
            require sgl-deep-gemm: then `not required`).

Each import runs in a child process (one for all, torch imported once; a module that kills its
process is named, and the next ones get a new child), with the caches of the imported packages in a
temporary directory and no bytecode written: the release is not changed. What cannot be evaluated on
this host is `inconclusive`, never `passed`, with the exact reason: no GPU or driver visible (a
library that needs libcuda.so.1), a release installed without its dependencies (the test hosts' TEST
DOUBLES: --no-deps, `--installed-without-deps`), a kernel library left out of a TEST ONLY wheel.
Anything else that does not import is `failed`, with the end of its traceback.

Only the standard library (and, when it sits beside this file as on the hosts' tools directory, the
build tool's fatbin reader sglang_build_tool/archs.py).
"""

from __future__ import annotations

import argparse
import ast
import glob
import importlib.metadata as md
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

MODULES = ["torch", "flashinfer", "sgl_kernel", "deep_gemm"]
# Installed by the build into every release (sglang_build_tool: torch, the kernel package, FlashInfer).
COMPONENTS = ("torch", "flashinfer", "sgl_kernel")
# The distributions that provide them (the kernel package was renamed in SGLang 0.5.10).
DISTRIBUTIONS = {"torch": ["torch"], "flashinfer": ["flashinfer-python"], "sgl_kernel": ["sglang-kernel", "sgl-kernel"],
                 "deep_gemm": ["sgl-deep-gemm"]}
CHILD_TIMEOUT = 600
RESULT = "@@import-check@@ "

# Run by the child: import each module named in argv, one JSON line per module ("start" first, so that a
# module that kills the process is known).
CHILD = r"""
import importlib, json, os, sys, time, traceback
R = "@@import-check@@ "
for name in sys.argv[1:]:
    print(R + json.dumps({"start": name}), flush=True)
    out, t0 = {"module": name}, time.monotonic()
    try:
        mod = importlib.import_module(name)
        out.update(ok=True, file=getattr(mod, "__file__", None))
        if name == "torch":
            out["torch_cuda"] = mod.version.cuda
            out["cuda_available"] = bool(mod.cuda.is_available())
            if out["cuda_available"]:
                out["arch_list"] = mod.cuda.get_arch_list()
                devs, tried = [], set()
                for i in range(mod.cuda.device_count()):
                    cap = "%d.%d" % mod.cuda.get_device_capability(i)
                    dev = {"index": i, "name": mod.cuda.get_device_name(i), "capability": cap}
                    if cap not in tried:  # one operation per kind of GPU: a context on one device each
                        tried.add(cap)
                        dev["op"] = float((mod.ones(8, device=f"cuda:{i}") * 2).sum().item())
                    devs.append(dev)
                out["devices"] = devs
        elif name == "sgl_kernel":
            ops = getattr(mod, "common_ops", None) or sys.modules.get("common_ops")
            out["library"] = getattr(ops, "__file__", None)
        elif name == "deep_gemm":
            out["library"] = os.path.join(os.path.dirname(mod.__file__), "_C.so")
        out["version"] = getattr(mod, "__version__", None)
    except BaseException as err:  # reported, never hidden
        out.update(ok=False, error=f"{type(err).__name__}: {err}"[:2000], traceback=traceback.format_exc()[-3000:])
        if isinstance(err, ModuleNotFoundError):
            out["missing_module"] = err.name
    out["seconds"] = round(time.monotonic() - t0, 2)
    print(R + json.dumps(out, default=str), flush=True)
"""

CUDA_LIBRARY = re.compile(r"(lib(?:cuda|cudart|cublas\w*|cudnn\w*|nvrtc\w*|nvJitLink|cusparse\w*|cufft\w*|curand|"
                          r"cusolver\w*|nccl|nvshmem\w*|nvToolsExt|cupti)\.so[.\d]*)")
NO_DRIVER = re.compile(r"libcuda\.so|no NVIDIA driver|NVIDIA driver on your system|CUDA driver initialization failed|"
                       r"no CUDA-capable device|cudaGetDeviceCount|CUDA_ERROR_NO_DEVICE|CUDA_ERROR_NOT_INITIALIZED", re.I)


def gpu_visible() -> dict:
    """Whether this host shows an NVIDIA GPU and its driver (device nodes, the driver's procfs)."""
    nodes = sorted(glob.glob("/dev/nvidia[0-9]*"))
    procfs = sorted(glob.glob("/proc/driver/nvidia/gpus/*"))
    if nodes or procfs:
        return {"visible": True, "devices": nodes or procfs}
    return {"visible": False, "why": "no NVIDIA GPU visible on this host (no /dev/nvidia[0-9]*, no /proc/driver/nvidia/gpus)"}


def capability_number(cc: str) -> int:
    major, minor = cc.split(".")
    return int(major) * 10 + int(minor)


def holds_code_for(archs: list[str], ptx: list[str], cc: str) -> tuple[bool, str]:
    """Whether compiled code runs on compute capability cc: SASS of the same major at or below its minor
    (sm_XYa only on exactly XY), else PTX at or below it (compiled by the driver at load)."""
    major, minor = (int(x) for x in cc.split("."))
    runs = []
    for arch in archs:
        m = re.fullmatch(r"sm_(\d+?)(\d)([af]?)", arch)
        if not m:
            continue
        a_major, a_minor, kind = int(m[1]), int(m[2]), m[3]
        if a_major == major and (a_minor == minor if kind == "a" else a_minor <= minor):
            runs.append((a_minor == minor, kind == "a", a_minor, arch))
    if runs:
        return True, max(runs)[3]  # the closest: this exact arch, its arch-specific code first
    below = [p for p in ptx if int(re.sub(r"\D", "", p) or 0) <= major * 10 + minor]
    if below:
        return True, f"{max(below, key=lambda p: int(re.sub(r'[^0-9]', '', p)))} (PTX only: compiled by the driver at load)"
    return False, ""


def load_utils_rule(package_dir: Path) -> dict | None:
    """sgl_kernel/load_utils.py's choice of library directory: {capability number: subdir, None: default}."""
    path = package_dir / "load_utils.py"
    if not path.exists():
        return None
    rule: dict = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8", errors="replace"))):
        if not isinstance(node, ast.If):
            continue
        branch: ast.stmt | None = node
        while isinstance(branch, ast.If):
            test = ast.unparse(branch.test)
            sub = next((s.value.value for s in branch.body if isinstance(s, ast.Assign)
                        and any(getattr(t, "id", "") == "ops_subdir" for t in s.targets)
                        and isinstance(s.value, ast.Constant)), None)
            if sub:
                m = re.fullmatch(r"compute_capability\s*==\s*(\d+)", test)
                if m:
                    rule[int(m[1])] = sub
                elif re.fullmatch(r"compute_capability is not None", test):
                    rule[None] = sub
            branch = branch.orelse[0] if len(branch.orelse) == 1 and isinstance(branch.orelse[0], ast.If) else None
    return rule or None


def fatbin_reader():
    here = Path(__file__).resolve().parent
    if (here / "sglang_build_tool" / "archs.py").exists():
        spec = importlib.util.spec_from_file_location("sglang_build_tool_archs", here / "sglang_build_tool" / "archs.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.fatbin_archs
    return None


def kernel_library_checks(package_dir: Path, ccs: list[str], loaded: str | None, gpu: dict) -> list[dict]:
    """For each capability: the library load_utils chooses exists and carries code for it (and was loaded)."""
    checks = []
    rule = load_utils_rule(package_dir)
    stripped = package_dir / "TEST-ONLY-STRIPPED.txt"
    left_out = stripped.read_text() if stripped.exists() else ""
    read = fatbin_reader()
    for cc in ccs:
        sub = (rule.get(capability_number(cc), rule.get(None)) if rule else None)
        where = package_dir / sub if sub else package_dir
        candidates = sorted(p for p in where.glob("common_ops.*") if ".so" in p.name)
        check = {"check": f"library for {cc}", "chosen_by": "load_utils.py" if rule else "package root (no rule read)",
                 "expected": str(where.relative_to(package_dir.parent)) + "/common_ops.*"}
        if not candidates:
            listed = [ln for ln in left_out.splitlines() if f"{sub + '/' if sub else ''}common_ops" in ln]
            if listed:
                check.update(status="inconclusive", reason=f"{listed[0]} was left out of this TEST ONLY wheel "
                                                            "(TEST-ONLY-STRIPPED.txt): nothing to read")
            else:
                check.update(status="failed", reason=f"no {check['expected']} in the installed package")
            checks.append(check)
            continue
        library = candidates[0]
        check["library"] = str(library.relative_to(package_dir.parent))
        if read is None:
            check.update(status="inconclusive", reason="the fatbin reader (sglang_build_tool/archs.py) is not beside "
                                                       "this script: the library's archs were not read")
        else:
            found = read(library)
            ok, which = holds_code_for(found["archs"], found.get("ptx", []), cc)
            check.update(archs=found["archs"], status="passed" if ok else "failed",
                         **({"runs_as": which} if ok else {"reason": f"{library.name} holds no code for {cc} "
                                                                     f"(it has {' '.join(found['archs']) or 'none'})"}))
        if loaded and gpu["visible"] and check["status"] == "passed" and Path(loaded).resolve() != library.resolve():
            check.update(status="failed", reason=f"sgl_kernel loaded {loaded}, not {library} for {cc}")
        checks.append(check)
    return checks


def required_by_sglang() -> set[str]:
    try:
        reqs = md.requires("sglang") or []
    except md.PackageNotFoundError:
        return set()
    names = set()
    for req in reqs:
        if re.search(r"\bextra\s*==", req):
            continue
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
        if m:
            names.add(re.sub(r"[-_.]+", "-", m[1]).lower())
    return names


def installed_version(module: str) -> tuple[str | None, str | None]:
    for dist in DISTRIBUTIONS[module]:
        try:
            return dist, md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None, None


def run_children(modules: list[str], env: dict) -> dict:
    """Import the modules in children; a child that dies is named, the rest go on in a new one."""
    results: dict = {}
    todo = list(modules)
    while todo:
        proc = subprocess.run([sys.executable, "-c", CHILD, *todo], capture_output=True, text=True, env=env,
                              timeout=CHILD_TIMEOUT * len(todo), check=False)
        started = None
        for line in proc.stdout.splitlines():
            if not line.startswith(RESULT):
                continue
            item = json.loads(line[len(RESULT):])
            if "start" in item:
                started = item["start"]
            else:
                results[item["module"]] = item
                started = None
        done = [m for m in todo if m in results]
        if started:  # the process died importing this module
            results[started] = {"module": started, "ok": False,
                                "error": f"the importing process died (exit {proc.returncode})",
                                "traceback": (proc.stdout + proc.stderr)[-3000:]}
            done.append(started)
        elif len(done) < len(todo):
            missing = [m for m in todo if m not in results]
            for m in missing:
                results[m] = {"module": m, "ok": False, "error": f"no result (exit {proc.returncode})",
                              "traceback": (proc.stdout + proc.stderr)[-3000:]}
            done += missing
        todo = [m for m in todo if m not in done]
    return results


def short_error(item: dict) -> str:
    text = " ".join(ln.strip() for ln in (item.get("error") or "did not import").splitlines() if ln.strip())
    return text[:300] + ("..." if len(text) > 300 else "")


def classify(module: str, item: dict, gpu: dict, no_deps: bool) -> tuple[str, str]:
    """(status, reason) of an import that did not succeed."""
    error = item.get("error", "") + "\n" + item.get("traceback", "")
    missing = item.get("missing_module")
    spec = importlib.util.find_spec(module)
    stripped = Path(spec.origin).parent / "TEST-ONLY-STRIPPED.txt" if spec and spec.origin else None
    if stripped and stripped.exists():  # tests/harness/sources.py: a real wheel with its libraries left out
        left_out = [ln.strip() for ln in stripped.read_text().splitlines()[1:] if ln.strip()]
        named = [f for f in left_out if Path(f).name.split(".")[0] in error]
        if named:
            return "inconclusive", (f"its library {named[0]} was left out of this TEST ONLY wheel "
                                    f"(TEST-ONLY-STRIPPED.txt): {short_error(item)}")
    if missing and missing.split(".")[0] != module:
        if no_deps:
            return "inconclusive", (f"needs {missing}, which is not installed: the release was installed without its "
                                    "dependencies (sglang_build_pip_no_deps, the test hosts' TEST DOUBLE install)")
        return "failed", f"needs {missing}, which is not installed: {short_error(item)}"
    lib = CUDA_LIBRARY.search(error)
    if lib and "cannot open shared object" in error:
        if lib[1].startswith("libcuda.so") and not gpu["visible"]:
            return "inconclusive", f"needs the NVIDIA driver's {lib[1]}: {gpu['why']}"
        if no_deps:
            return "inconclusive", (f"needs {lib[1]}, a CUDA library from a dependency that is not installed: the "
                                    "release was installed without its dependencies (sglang_build_pip_no_deps)")
        return "failed", f"cannot load {lib[1]}: {short_error(item)}"
    if NO_DRIVER.search(error) and not gpu["visible"]:
        return "inconclusive", f"needs a GPU and its driver: {gpu['why']} ({short_error(item)})"
    return "failed", short_error(item)


def check(ccs: list[str] | None, no_deps: bool, modules: list[str] = MODULES, no_cuda: bool = False) -> dict:
    """The check; ccs None: the compute capabilities of the GPUs torch sees, else 12.0 (the reference host's).
    no_cuda: the imports see no GPU (CUDA_VISIBLE_DEVICES empty), for a release that may be serving."""
    gpu = gpu_visible()
    if no_cuda and gpu["visible"]:
        gpu = {"visible": False, "why": "CUDA not used (--no-cuda: a complete release is re-verified without "
                                        "touching the GPUs it may be serving on)"}
    required = required_by_sglang()
    out: dict = {"python": sys.version.split()[0], "executable": sys.executable, "gpu": gpu,
                 "compute_capabilities": ccs, "installed_without_deps": no_deps, "imports": {}}
    to_import = []
    for module in modules:
        dist, version = installed_version(module)
        if importlib.util.find_spec(module) is None:
            needed = [d for d in DISTRIBUTIONS[module] if d in required]
            entry = {"distribution": dist or DISTRIBUTIONS[module][0], "version": version}
            if module in COMPONENTS:  # installed by the build itself, with or without dependencies
                entry.update(status="failed", reason=f"{module} is not installed ({' or '.join(DISTRIBUTIONS[module])}): "
                                                     "the build installs it into every release")
            elif not needed and required:
                entry.update(status="not required",
                             reason=f"sglang {installed_version_of('sglang')} does not require {DISTRIBUTIONS[module][0]}")
            elif no_deps:
                entry.update(status="inconclusive", reason=f"{DISTRIBUTIONS[module][0]} is not installed: the release "
                                                           "was installed without its dependencies (sglang_build_pip_no_deps)")
            else:
                entry.update(status="failed", reason=f"{module} is not installed ({' or '.join(DISTRIBUTIONS[module])})")
            out["imports"][module] = entry
        else:
            out["imports"][module] = {"distribution": dist, "version": version}
            to_import.append(module)
    with tempfile.TemporaryDirectory(prefix="sglang-import-check-") as scratch:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", FLASHINFER_WORKSPACE_BASE=scratch,
                   TRITON_CACHE_DIR=f"{scratch}/triton", TORCHINDUCTOR_CACHE_DIR=f"{scratch}/inductor",
                   XDG_CACHE_HOME=f"{scratch}/cache", CUDA_CACHE_PATH=f"{scratch}/nv", HOME=scratch)
        if no_cuda:
            env["CUDA_VISIBLE_DEVICES"] = ""
        results = run_children(to_import, env) if to_import else {}
    devices = (results.get("torch") or {}).get("devices") or []
    if not ccs:
        ccs = sorted({d["capability"] for d in devices}, key=capability_number) or ["12.0"]
        out["compute_capabilities"] = ccs
        out["compute_capabilities_from"] = "the visible GPUs (torch)" if devices else "the reference host's default"
    for module in to_import:
        item, entry = results[module], out["imports"][module]
        entry["seconds"] = item.get("seconds")
        if item.get("ok"):
            entry["status"] = "passed"
            entry["file"] = item.get("file")
        else:
            entry["status"], entry["reason"] = classify(module, item, gpu, no_deps)
            entry["error"] = item.get("error")
        if module == "torch" and item.get("ok"):
            entry["torch_cuda"] = item.get("torch_cuda")
            if gpu["visible"]:
                if not item.get("cuda_available"):
                    entry.update(status="failed", reason=f"torch {entry['version']} (CUDA {item.get('torch_cuda')}) sees "
                                                         "no GPU on a host that shows one: is the driver older than "
                                                         "torch's CUDA needs?")
                else:
                    entry["devices"] = item.get("devices")
                    for dev in item.get("devices") or []:
                        ok, which = holds_code_for([a for a in item.get("arch_list", []) if a.startswith("sm_")],
                                                   [a for a in item.get("arch_list", []) if a.startswith("compute_")],
                                                   dev["capability"])
                        dev["torch_runs_as"] = which
                        if not ok:
                            entry.update(status="failed", reason=f"torch was built for {item.get('arch_list')}, "
                                                                 f"not for {dev['name']} ({dev['capability']})")
            else:
                entry["cuda"] = {"status": "inconclusive", "reason": f"CUDA not initialised: {gpu['why']}"}
        if module == "sgl_kernel":
            spec = importlib.util.find_spec("sgl_kernel")
            package = Path(spec.origin).parent if spec and spec.origin else None
            entry["library_checks"] = kernel_library_checks(package, ccs, item.get("library"), gpu) if package else []
            entry["loaded"] = item.get("library")
    out["status"] = overall(out)
    out["summary"] = "; ".join(f"{m} {e['status']}" + (f" ({e['reason']})" if e.get("reason") else "")
                               for m, e in out["imports"].items())
    return out


def installed_version_of(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "?"


def states(entry: dict) -> list[str]:
    found = [entry["status"]]
    found += [c["status"] for c in entry.get("library_checks", [])]
    if entry.get("cuda"):
        found.append(entry["cuda"]["status"])
    return found


def overall(out: dict) -> str:
    found = [s for e in out["imports"].values() for s in states(e)]
    if "failed" in found:
        return "failed"
    if "inconclusive" in found:
        return "inconclusive"
    return "passed"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compute-capability", action="append", default=[],
                    help="a compute capability of the host's GPUs, e.g. 12.0 (repeatable; default: the visible GPUs', "
                         "read by torch, else 12.0)")
    ap.add_argument("--installed-without-deps", action="store_true",
                    help="the release was installed with --no-deps (its dependencies are missing by design)")
    ap.add_argument("--no-cuda", action="store_true",
                    help="import with no GPU visible (CUDA_VISIBLE_DEVICES empty): for a release that may be serving")
    args = ap.parse_args(argv)
    ccs = args.compute_capability
    bad = [c for c in ccs if not re.fullmatch(r"\d+\.\d", c)]
    if bad:
        raise SystemExit(f"--compute-capability must be major.minor such as 12.0, got {bad}")
    result = check(ccs or None, args.installed_without_deps, no_cuda=args.no_cuda)
    print(json.dumps(result, indent=1))
    return {"passed": 0, "failed": 1}.get(result["status"], 3)


if __name__ == "__main__":
    sys.exit(main())
