#!/usr/bin/env python3
"""What a release installs, read from the SGLang release's own metadata; and whether it resolves.

Why: SGLang pins its kernel package, FlashInfer, torch and torchaudio in its own metadata
(Requires-Dist), and the kernel package was renamed (`sgl-kernel`, `sglang-kernel` from SGLang
0.5.10). Pins copied into this project went stale at the next release: SGLang 0.5.10 could not
be installed beside the `sgl-kernel` and FlashInfer 0.6.3 it used to pin. So the build tool
(files/sglang_build_tool/build.py, phase venv) reads the release's metadata and installs, in order:

1. the torch family from one CUDA build: torch at the release's pin with the build's local
   version (`+cu130` from PyTorch's index, none for PyPI's own build), and the torchaudio and
   torchvision the release asks for, from the same index in the same pip call;
2. the kernel package under the name and at the version the release names;
3. FlashInfer at the release's version, with the extras it asks for;
4. SGLang itself; then the extra packages; then the overrides (`--no-deps`, last: a
   requirement the set must replace, such as a newer cuDNN than torch 2.9.1+cu130 pins).

An inventory that sets a component's version (or its wheel URL, or builds it from source) wins
over the metadata. `resolve` runs pip's real resolver over exactly those requirements for a
target Python and platform, installing nothing: the project's resolution test, and a check an
operator can run on the controller before an upgrade (`python3 sglang_release.py resolve`).

Only the standard library: phase venv runs this on the host's system Python.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# The kernel package's names, newest first (sgl-kernel was renamed sglang-kernel in SGLang 0.5.10).
KERNEL_DISTS = ("sglang-kernel", "sgl-kernel")
FLASHINFER_DIST = "flashinfer-python"
# The packages built against torch that PyTorch publishes per CUDA build: one build for all of them.
TORCH_COMPANIONS = ("torchaudio", "torchvision")
# What the resolution report picks out: the torch family, the CUDA libraries torch is built
# against, and the components.
HIGHLIGHT = ("torch", *TORCH_COMPANIONS, *KERNEL_DISTS, FLASHINFER_DIST, "flashinfer-cubin", "sglang",
             "nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-nccl-cu13", "nvidia-nccl-cu12", "triton",
             "transformers", "cuda-python")

_REQ = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<extras>\[[^\]]*\])?\s*"
                  r"\(?(?P<spec>[^;()]*)\)?\s*(?:;\s*(?P<marker>.*))?$")


class ReleaseError(Exception):
    """The release's metadata does not say what the build needs; the message says what is missing."""


def normalize(name: str) -> str:
    """A distribution name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirement(line: str) -> dict:
    """One Requires-Dist value -> {name, extras, spec, marker} (names normalized)."""
    match = _REQ.match(line)
    if not match:
        raise ReleaseError(f"cannot read the requirement {line!r}")
    return {"name": normalize(match["name"]), "extras": (match["extras"] or "").replace(" ", ""),
            "spec": (match["spec"] or "").replace(" ", ""), "marker": (match["marker"] or "").strip()}


def requires_dist(metadata: str) -> list[dict]:
    """The unconditional requirements of a METADATA text (those of extras are left out)."""
    reqs = []
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            req = parse_requirement(line.split(":", 1)[1])
            if not re.search(r"\bextra\s*==", req["marker"]):
                reqs.append(req)
    return reqs


def wheel_metadata(wheel: Path) -> str:
    """The METADATA file of a wheel."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise ReleaseError(f"{wheel.name} has {len(names)} METADATA files, expected one")
        return zf.read(names[0]).decode("utf-8")


def exact(req: dict | None) -> str | None:
    """The version of an `==` pin (`==2.9.1`), else None."""
    if req and re.fullmatch(r"===?[^,<>=!~*]+", req["spec"]):
        return req["spec"].lstrip("=")
    return None


def public(version: str) -> str:
    return version.split("+", 1)[0]


def local(version: str) -> str:
    """The local version label with its '+' ('+cu130'), or ''."""
    return "+" + version.split("+", 1)[1] if "+" in version else ""


def derive(reqs: list[dict], sglang_version: str) -> dict:
    """What the release pins: torch, its companions, the kernel package, FlashInfer."""
    by_name = {r["name"]: r for r in reqs}
    torch = exact(by_name.get("torch"))
    if not torch:
        raise ReleaseError(f"sglang {sglang_version} does not pin torch exactly "
                           f"({by_name.get('torch', {}).get('spec') or 'no torch requirement'}): set sglang_build_torch_version")
    kernels = [name for name in KERNEL_DISTS if name in by_name]
    if len(kernels) > 1:
        raise ReleaseError(f"sglang {sglang_version} requires both {' and '.join(kernels)}")
    kernel = {"dist": kernels[0], "version": exact(by_name[kernels[0]])} if kernels else None
    fi = by_name.get(FLASHINFER_DIST)
    return {"sglang": sglang_version, "torch": torch,
            "companions": [{"dist": n, "version": exact(by_name[n])} for n in TORCH_COMPANIONS if n in by_name],
            "kernel": kernel,
            "flashinfer": {"dist": FLASHINFER_DIST, "extras": fi["extras"], "version": exact(fi)} if fi else None}


def install_steps(build, derived: dict, sglang_requirement: str) -> list[dict]:
    """The pip installs of phase venv, in order: {name, requirements, args, pins (dists to pin after)}.

    `build` is a sglang_build_tool Plan or Build (its spec, requirement() and index_args()); `sglang_requirement`
    the sglang wheel (a path, URL or `sglang==X`) whose metadata `derived` was read from.
    """
    spec, comps = build.spec, build.spec["components"]
    no_deps = ["--no-deps"] if spec["pip"]["no_deps"] else []
    steps = []
    torch = comps["torch"]
    torch_version = torch["version"] or derived["torch"] + spec.get("torch_local_version", "")
    torch_req = build.requirement("torch") if torch["mode"] == "source" or torch.get("wheel_url") \
        else f"torch=={torch_version}"
    family = [torch_req]
    if not no_deps:  # companions are dependencies: a --no-deps test install never gets them
        for comp in derived["companions"]:
            family.append(f"{comp['dist']}=={comp['version']}{local(torch_version)}" if comp["version"]
                          else comp["dist"])
    steps.append({"name": "torch", "requirements": family, "args": no_deps + build.index_args("torch"),
                  "pins": ["torch"] + [c["dist"] for c in derived["companions"]]})
    kernel, meta_kernel = comps["sgl_kernel"], derived["kernel"]
    dist = meta_kernel["dist"] if meta_kernel else None
    req = None
    if kernel["mode"] == "source" or kernel.get("wheel_url"):
        req = build.requirement("sgl_kernel")
    elif kernel["version"] or meta_kernel:
        dist = dist or KERNEL_DISTS[-1]  # a version set for a release that names no kernel: the old name
        version = kernel["version"] or meta_kernel["version"]
        req = f"{dist}=={version}" if version else dist
    if req:
        steps.append({"name": "sgl_kernel", "requirements": [req], "args": no_deps + build.index_args("sgl_kernel"),
                      "pins": [dist] if dist else []})
    fi, fi_meta = comps["flashinfer"], derived["flashinfer"] or {"extras": "", "version": None}
    if fi["mode"] == "source" or fi.get("wheel_url"):
        req = build.requirement("flashinfer")
    else:
        version = fi["version"] or fi_meta["version"]
        req = f"{FLASHINFER_DIST}{fi_meta['extras']}" + (f"=={version}" if version else "")
    steps.append({"name": "flashinfer", "requirements": [req], "args": no_deps + build.index_args("flashinfer"),
                  "pins": [FLASHINFER_DIST]})
    steps.append({"name": "sglang", "requirements": [sglang_requirement], "args": no_deps + build.index_args("sglang"),
                  "pins": ["sglang"]})
    if spec["pip"].get("extra_packages"):
        steps.append({"name": "extra packages", "requirements": list(spec["pip"]["extra_packages"]),
                      "args": no_deps + build.index_args(), "pins": []})
    if spec["pip"].get("overrides"):
        steps.append({"name": "overrides", "requirements": list(spec["pip"]["overrides"]),
                      "args": ["--no-deps"] + build.index_args(), "pins": [], "override": True})
    return steps


def expected_versions(build, derived: dict) -> dict:
    """Distribution -> the version the check must find installed (public part when the pin has no label)."""
    comps, want = build.spec["components"], {}
    torch_version = comps["torch"]["version"] or derived["torch"] + build.spec.get("torch_local_version", "")
    want["torch"] = torch_version
    kernel, meta = comps["sgl_kernel"], derived["kernel"] or {}
    version = kernel["version"] or meta.get("version")
    dist = meta.get("dist") or (KERNEL_DISTS[-1] if kernel["version"] else None)
    if dist and version:
        want[dist] = version
    fi = comps["flashinfer"]["version"] or (derived["flashinfer"] or {}).get("version")
    if fi:
        want[FLASHINFER_DIST] = fi
    want["sglang"] = comps["sglang"]["version"]
    for req in build.spec["pip"].get("overrides") or []:
        pinned = exact(parse_requirement(req))
        if pinned:
            want[parse_requirement(req)["name"]] = pinned
    return want


def same_version(installed: str | None, wanted: str) -> bool:
    """pip's `==` closely enough: a wanted version without a local label matches any label."""
    if installed is None:
        return False
    def canon(v):
        return v.strip().lower().lstrip("v")
    return canon(installed) == canon(wanted) or ("+" not in wanted and canon(public(installed)) == canon(wanted))


def family_problems(installed: dict) -> list[str]:
    """Torch-family packages built for another CUDA build than torch (their local labels differ)."""
    torch = installed.get("torch")
    if not torch:
        return []
    return [f"{name} {installed[name]} is not from torch's build {local(torch) or '(PyPI default)'} ({torch})"
            for name in TORCH_COMPANIONS if installed.get(name) and local(installed[name]) != local(torch)]


# ----- resolution: pip's real resolver, installing nothing -----
def platform_args(python_version: str, glibc: str) -> list[str]:
    """pip's target flags for CPython `python_version` on manylinux x86_64 with glibc `glibc`.

    pip matches --platform tags exactly, so every manylinux tag the target accepts is named
    (NCCL 2.28.9 ships only manylinux_2_18, cuDNN manylinux_2_27).
    """
    major, minor = (int(x) for x in glibc.split("."))
    if major != 2:
        raise ReleaseError(f"glibc {glibc}: only 2.x is known")
    tags = [f"manylinux_2_{n}_x86_64" for n in range(minor, 4, -1)]
    tags += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    abi = "cp" + python_version.replace(".", "")
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
            "--abi", abi, "--abi", "abi3", "--abi", "none"]
    for tag in tags:
        args += ["--platform", tag]
    return args


def pip_report(pip: list[str], requirements: list[str], args: list[str], env: dict) -> dict:
    """`pip install --dry-run --ignore-installed --report` into a throwaway target: the resolved set."""
    with tempfile.TemporaryDirectory(prefix="sglang-resolve-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [*pip, "install", "--dry-run", "--ignore-installed", "--progress-bar", "off", "--report", str(report),
               "--target", str(Path(tmp) / "target"), *args, *requirements]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:  # pip's own explanation: from its first error or "The conflict is caused by"
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
            start = next((i for i, ln in enumerate(lines) if ln.startswith(("ERROR", "The conflict"))), len(lines) - 25)
            raise ReleaseError("pip could not resolve " + " ".join(requirements) + ":\n"
                               + "\n".join(lines[max(start, 0):][:40]))
        return json.loads(report.read_text())


def merge_args(*arg_lists: list[str]) -> list[str]:
    """pip option lists merged, each option once (flags alone, the others with their value)."""
    single = {"--no-deps", "--no-index"}
    merged: list[str] = []
    seen = set()
    for args in arg_lists:
        i = 0
        while i < len(args):
            item = (args[i],) if args[i] in single or "=" in args[i] else (args[i], args[i + 1])
            i += len(item)
            if item not in seen:
                seen.add(item)
                merged += item
    return merged


def resolve(build, python_version: str, glibc: str, pip: list[str], extra_args: list[str], env: dict) -> dict:
    """Resolve the release set of `build` for the target, with all dependencies, as the venv phase would."""
    target = platform_args(python_version, glibc)
    sglang = build.spec["components"]["sglang"]
    # The same version's published metadata stands for a source build's (a tag of that version).
    sglang_req = sglang.get("wheel_url") or f"sglang=={sglang['version']}"
    first = pip_report(pip, [sglang_req], ["--no-deps", *target, *build.index_args("sglang"), *extra_args], env)
    meta = first["install"][0]["metadata"]
    reqs = [parse_requirement(r) for r in meta.get("requires_dist") or []]
    derived = derive([r for r in reqs if not re.search(r"\bextra\s*==", r["marker"])], meta["version"])
    steps = install_steps(build, derived, sglang_req)
    together = [s for s in steps if not s.get("override")]
    requirements = [r for s in together for r in s["requirements"]]
    if any("--no-deps" in s["args"] for s in together):
        raise ReleaseError("a resolution needs the dependencies: this spec installs with --no-deps (sglang_build_pip_no_deps)")
    index = merge_args(*(s["args"] for s in together))  # pip resolves once: every step's indexes at once
    report = pip_report(pip, requirements, [*target, *index, *extra_args], env)
    resolved = {normalize(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
    overrides = {}
    for step in (s for s in steps if s.get("override")):
        for item in pip_report(pip, step["requirements"], ["--no-deps", *target, *index, *extra_args], env)["install"]:
            overrides[normalize(item["metadata"]["name"])] = item["metadata"]["version"]
    problems = family_problems(resolved)
    return {"sglang": meta["version"], "python": python_version, "glibc": glibc, "derived": derived,
            "requirements": requirements, "overrides": overrides, "count": len(resolved),
            "highlights": {n: resolved[n] for n in HIGHLIGHT if n in resolved},
            "resolved": dict(sorted(resolved.items())), "problems": problems}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Resolve a release set with pip's real resolver (installs nothing).")
    ap.add_argument("command", choices=["resolve"])
    ap.add_argument("--spec", help="the build spec JSON (default: the SGLANG_BUILD_SPEC environment variable)")
    ap.add_argument("--python-version", default="3.12", help="target Python (Ubuntu 24.04: 3.12)")
    ap.add_argument("--glibc", default="2.39", help="target glibc (Ubuntu 24.04: 2.39)")
    ap.add_argument("--pip-arg", action="append", default=[],
                    help="an extra pip argument, e.g. --pip-arg=--find-links=DIR (repeatable)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sglang_build_tool.plan import Plan, load_spec  # the one place that knows the spec's fields

    build = Plan(load_spec(args.spec), python_version=args.python_version)
    try:
        result = resolve(build, args.python_version, args.glibc, [sys.executable, "-m", "pip"], args.pip_arg,
                         dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    except ReleaseError as err:
        print(json.dumps({"failed": True, "msg": str(err)}))
        return 1
    print(json.dumps(result, indent=1))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
