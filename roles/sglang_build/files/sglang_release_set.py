#!/usr/bin/env python3
"""Make a supported release set from an SGLang version: the pinned set, and what the roles need of it.

    python3 roles/sglang_build/files/sglang_release_set.py 0.5.24

run on the controller, from the repository (it needs PyPI, or the index given, and nothing else):

1. downloads that release's wheel for the target (Python 3.12, manylinux x86_64, glibc 2.39: Ubuntu
   24.04), reads its metadata and has pip's real resolver resolve exactly what the build's venv phase
   installs (sglang_release.py: install_steps), with every dependency, installing nothing. The
   resolution is pinned in time (`--uploaded-prior-to`, recorded: a rerun resolves the same set) by a
   pinned pip (26.3, run from its wheel). A torch family that the registry cannot serve (a CUDA index
   it cannot reach, or a CUDA library of torch's that does not resolve from it) is replaced by
   STAND-INS: empty wheels with the metadata of the registry's build of the same versions, less their
   CUDA libraries; the set file and the report say so, and which;
2. reads from the release's own source (sglang_release_source.py: the wheel read with zipfile and
   ast, never imported) its server flags and their deprecations, its HTTP endpoints, its parsers,
   its attention backend defaults, the environment variables this project renders, what its sampler
   takes from FlashInfer, and the architectures it serves;
3. compares all of it with the newest set before it (`--since` to choose): flags added, removed and
   deprecated, endpoints, parsers, architectures, attention defaults, environment, pins;
4. writes roles/sglang_build/files/release_sets/<version>.json, atomically, and prints the review
   report. Nothing is written when anything fails: a version that does not resolve fails naming
   pip's conflict; a release whose source this reader cannot read fails naming the file.

A set's install inputs (how SGLang is installed, torch's CUDA build and index, a kernel wheel the
registry lacks, overrides) are options here; a rerun for a version that has a set file takes them,
and its cutoff, from that file, so `sglang_release_set.py 0.5.23` reproduces the committed
0.5.23.json byte for byte (`--check` compares without writing). `--uploaded-prior-to now` resolves
against today's registry.

Downloads and resolutions are cached under ~/.cache/sglang-ansible/release-sets (SGLANG_ANSIBLE_CACHE;
`--no-cache` to resolve again): a resolution is keyed by every input, its cutoff included.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sglang_release as rel  # noqa: E402
import sglang_release_source as src  # noqa: E402

SETS_DIR = HERE / "release_sets"
PIP_VERSION = "26.3"  # the resolver every set is made with (recorded; --uploaded-prior-to needs 26.0 or newer)
DEFAULT_INDEX = "https://pypi.org/simple"
# The environment variables this project renders into the server's unit (roles/sglang_server) or documents.
DEFAULT_ENV = ["SGLANG_DISABLE_CUDNN_CHECK", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "SGLANG_ENABLE_SPEC_V2"]
TARGET = {"python": "3.12", "glibc": "2.39", "platform": "manylinux x86_64"}
INSTALL_KEYS = ("sglang_mode", "sglang_version", "torch_local_version", "torch_index_url", "torch_extra_index_urls",
                "sgl_kernel_version", "sgl_kernel_wheel_url", "pip_overrides")
# A torch stand-in leaves out the CUDA libraries of the registry's build (another CUDA build's, or ones it
# cannot serve); the set's own `standin_requires` names the ones known for its build.
CUDA_LIBRARY = re.compile(r"^(nvidia-|cuda-|nccl)", re.I)
CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible")) / "release-sets"


class SetError(Exception):
    """The set cannot be made; the message says why (pip's conflict, the unreadable file)."""


def version_key(version: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.+-]", version))


def known_sets(sets_dir: Path) -> dict[str, Path]:
    return {p.stem: p for p in sorted(sets_dir.glob("*.json"), key=lambda p: version_key(p.stem))}


def now_cutoff() -> str:
    return dt.datetime.now(dt.UTC).replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def reachable(url: str, timeout: float = 10) -> str | None:
    """None when `url` answers at all (any HTTP status), else why not."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return str(getattr(exc, "reason", exc))
    return None


class Pip:
    """The pinned pip, run from its wheel with none of this machine's pip configuration."""

    def __init__(self, cache: Path, index_url: str, version: str = PIP_VERSION):
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
        self.env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
        self.version = version
        wheel = cache / "pip" / f"pip-{version}-py3-none-any.whl"
        if not wheel.exists():
            with tempfile.TemporaryDirectory(prefix="sglang-set-pip-") as tmp:
                proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                       "--only-binary", ":all:", "--index-url", index_url, f"pip=={version}",
                                       "-d", tmp], capture_output=True, text=True, env=self.env, check=False)
                got = list(Path(tmp).glob("pip-*.whl"))
                if proc.returncode != 0 or len(got) != 1:
                    raise SetError(f"could not download pip=={version} (the resolver sets are made with):\n"
                                   + (proc.stdout + proc.stderr)[-1500:])
                wheel.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(got[0]), wheel.with_suffix(".part"))
                os.replace(wheel.with_suffix(".part"), wheel)
        self.cmd = [sys.executable, str(wheel / "pip")]

    def report(self, requirements: list[str], args: list[str]) -> dict:
        try:  # fast-deps: a candidate's metadata by HTTP range requests, not the whole wheel (torch is 0.9 GB)
            return rel.pip_report(self.cmd, requirements, [*args, "--use-feature=fast-deps"], self.env)
        except rel.ReleaseError as err:
            raise SetError(str(err)) from err


# ----- inputs -----
def default_install(version: str) -> dict:
    return {"sglang_mode": "wheel", "sglang_version": version, "torch_local_version": "", "torch_index_url": "",
            "torch_extra_index_urls": [], "sgl_kernel_version": "", "sgl_kernel_wheel_url": "", "pip_overrides": []}


def gather_inputs(args, existing: dict | None) -> tuple[dict, dict]:
    """The set's install section and the resolution's inputs: options, else the existing file's, else defaults."""
    install = dict(existing["install"]) if existing else default_install(args.version)
    inputs = dict(existing["inputs"]) if existing else {
        "target": TARGET, "index_url": DEFAULT_INDEX, "uploaded_prior_to": None, "pip": PIP_VERSION,
        "env": DEFAULT_ENV, "standin_requires": []}
    for key, value in (("sglang_mode", args.sglang_mode), ("torch_local_version", args.torch_local_version),
                       ("torch_index_url", args.torch_index_url), ("torch_extra_index_urls", args.torch_extra_index_url),
                       ("sgl_kernel_version", args.kernel_version), ("sgl_kernel_wheel_url", args.kernel_wheel_url),
                       ("pip_overrides", args.override)):
        if value is not None:
            install[key] = value
    install["sglang_version"] = args.version
    for key, value in (("index_url", args.index_url), ("env", args.env), ("standin_requires", args.standin_requires)):
        if value is not None:
            inputs[key] = value
    if args.uploaded_prior_to:
        inputs["uploaded_prior_to"] = now_cutoff() if args.uploaded_prior_to == "now" else args.uploaded_prior_to
    inputs["uploaded_prior_to"] = inputs.get("uploaded_prior_to") or now_cutoff()
    if install["sglang_mode"] not in ("wheel", "source"):
        raise SetError(f"--sglang-mode must be wheel or source, got {install['sglang_mode']!r}")
    return {k: install[k] for k in INSTALL_KEYS}, inputs


def spec_of(install: dict, inputs: dict) -> dict:
    """The build spec the role renders for this set (only what the resolution reads; the test compares the
    requirements it derives with the role's own rendering)."""
    def component(mode="wheel", version="", wheel_url="", index_url="", extra=()):
        return {"mode": mode, "version": version, "wheel_url": wheel_url, "index_url": index_url,
                "extra_index_urls": list(extra), "repo": "", "ref": "", "subdir": ".", "build_isolation": True,
                "build_requires": [], "env": {}, "needs_torch": False}
    return {"release_set": install["sglang_version"], "root": "/nonexistent", "python": sys.executable,
            "cuda": {"version": "13.0", "home": ""}, "arch": {"torch_cuda_arch_list": "", "flashinfer_cuda_arch_list": ""},
            "max_jobs": 1, "cmake_args": "",
            "pip": {"index_url": inputs["index_url"], "extra_index_urls": [], "find_links": [], "no_index": False,
                    "trusted_hosts": [], "cert": "", "no_deps": False, "compile": True, "extra_packages": [],
                    "overrides": list(install["pip_overrides"])},
            "patch": {"eagle3": False, "id": ""}, "required_model_files": [],
            "torch_local_version": install["torch_local_version"], "flashinfer_aot": {"enabled": False},
            "components": {
                "torch": component(index_url=install["torch_index_url"], extra=install["torch_extra_index_urls"]),
                "sgl_kernel": component(version=install["sgl_kernel_version"], wheel_url=install["sgl_kernel_wheel_url"]),
                "flashinfer": component(),
                "sglang": component(mode=install["sglang_mode"], version=install["sglang_version"])}}


# ----- the release's wheel -----
def sglang_wheel(pip: Pip, version: str, inputs: dict, cache: Path, took: dict) -> Path:
    """The release's wheel for the target, downloaded once (a pure wheel where the release has one)."""
    py = inputs["target"]["python"].replace(".", "")
    # Per index: the same file name from another index need not be the same file.
    dest = cache / "wheels" / hashlib.sha256(inputs["index_url"].encode()).hexdigest()[:12]
    found = [p for p in sorted(dest.glob(f"sglang-{version}-*.whl"))
             if re.search(rf"-(cp{py}-cp{py}|py3-none)-(manylinux\w*x86_64|any)\.whl$", p.name)]
    if found:
        took["sglang_wheel"] = {"file": found[0].name, "bytes": found[0].stat().st_size, "cached": True}
        return found[0]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sglang-set-wheel-") as tmp:
        proc = subprocess.run([*pip.cmd, "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                               *rel.platform_args(inputs["target"]["python"], inputs["target"]["glibc"])[1:],
                               "--index-url", inputs["index_url"], "--uploaded-prior-to", inputs["uploaded_prior_to"],
                               f"sglang=={version}", "-d", tmp], capture_output=True, text=True, env=pip.env, check=False)
        got = list(Path(tmp).glob("sglang-*.whl"))
        if proc.returncode != 0 or len(got) != 1:
            lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
            raise SetError(f"sglang=={version} has no wheel for Python {inputs['target']['python']} on "
                           f"{inputs['target']['platform']} at {inputs['index_url']} uploaded before "
                           f"{inputs['uploaded_prior_to']}:\n" + "\n".join(lines[-8:]))
        dest.mkdir(parents=True, exist_ok=True)
        shutil.move(str(got[0]), dest / (got[0].name + ".part"))
        os.replace(dest / (got[0].name + ".part"), dest / got[0].name)
    path = dest / got[0].name
    took["sglang_wheel"] = {"file": path.name, "bytes": path.stat().st_size, "cached": False,
                            "seconds": round(time.monotonic() - started, 1)}
    return path


# ----- stand-ins -----
def make_wheel(directory: Path, name: str, version: str, tag: str, requires: list[str]) -> Path:
    """An empty wheel whose metadata says `requires` (a STAND-IN: nothing to import in it)."""
    path = directory / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    meta = "Metadata-Version: 2.1\nName: {}\nVersion: {}\nSummary: STAND-IN made by sglang_release_set.py\n{}".format(
        name, version, "".join(f"Requires-Dist: {r}\n" for r in requires))
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in ((f"{info}/METADATA", meta),
                             (f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: sglang_release_set.py\n"
                                               f"Root-Is-Purelib: false\nTag: {tag}\n"),
                             (f"{info}/RECORD", "")):
            zf.writestr(zipfile.ZipInfo(member, date_time=(2026, 1, 1, 0, 0, 0)), text)
    return path


def registry_metadata(pip: Pip, requirement: str, target: list[str], index: list[str]) -> dict:
    """The registry's metadata of one distribution (no dependencies resolved)."""
    return pip.report([requirement], ["--no-deps", *target, *index])["install"][0]["metadata"]


def torch_standins(pip: Pip, derived: dict, local: str, why: str, inputs: dict, target: list[str], index: list[str],
                   directory: Path) -> list[dict]:
    """Stand-ins for the torch family: the registry's metadata of the same versions, less their CUDA libraries,
    plus the set's own known CUDA pins (standin_requires); version label `local` (`+standin` for the registry's own)."""
    label = local or "+standin"
    made = []
    meta = registry_metadata(pip, f"torch=={derived['torch']}", target, index)
    dropped = [r for r in meta.get("requires_dist") or [] if CUDA_LIBRARY.match(rel.parse_requirement(r)["name"])]
    requires = [r for r in meta.get("requires_dist") or [] if r not in dropped] + list(inputs.get("standin_requires") or [])
    tag = f"cp{target_py(target)}-cp{target_py(target)}-manylinux_2_28_x86_64"
    made.append({"dist": "torch", "version": derived["torch"] + label, "tag": tag, "requires": requires,
                 "left_out": dropped})
    make_wheel(directory, "torch", derived["torch"] + label, tag, requires)
    for comp in derived["companions"]:
        version = comp["version"]
        if not version:  # the release leaves it open: the version the registry pairs with this torch
            pick = pip.report([f"torch=={derived['torch']}{label}", comp["dist"]],
                              [*target, *index, "--find-links", str(directory)])
            version = next(i["metadata"]["version"] for i in pick["install"]
                           if rel.normalize(i["metadata"]["name"]) == comp["dist"])
        meta = registry_metadata(pip, f"{comp['dist']}=={rel.public(version)}", target, index)
        requires = [r for r in meta.get("requires_dist") or [] if not CUDA_LIBRARY.match(rel.parse_requirement(r)["name"])]
        made.append({"dist": comp["dist"], "version": rel.public(version) + label, "tag": tag, "requires": requires})
        make_wheel(directory, comp["dist"], rel.public(version) + label, tag, requires)
    for entry in made:
        entry["why"] = why
    return made


def target_py(target: list[str]) -> str:
    return target[target.index("--python-version") + 1].replace(".", "")


def kernel_standin(pip: Pip, url: str, why: str, target: list[str], index: list[str], directory: Path) -> dict:
    """A stand-in for a kernel wheel given by URL: the registry's build of the same public version's metadata."""
    name = url.rsplit("/", 1)[-1]
    match = re.match(r"(?P<dist>[A-Za-z0-9_]+)-(?P<version>[^-]+)-(?P<tag>.+)\.whl$", name)
    if not match:
        raise SetError(f"{url}: not a wheel file name")
    dist, version = match["dist"], match["version"]
    meta = registry_metadata(pip, f"{dist.replace('_', '-')}=={rel.public(version)}", target, index)
    requires = list(meta.get("requires_dist") or [])
    make_wheel(directory, dist, version, match["tag"], requires)
    return {"dist": rel.normalize(dist), "version": version, "tag": match["tag"], "requires": requires, "why": why,
            "path": str(directory / name)}


# ----- resolution -----
def resolve_set(pip: Pip, install: dict, inputs: dict, wheel: Path, cache: Path | None, took: dict) -> dict:
    """The set resolved with every dependency, stand-ins where the registry cannot serve torch's CUDA wheels."""
    spec = spec_of(install, inputs)
    derived = rel.derive(rel.requires_dist(rel.wheel_metadata(wheel)), install["sglang_version"])
    target = rel.platform_args(inputs["target"]["python"], inputs["target"]["glibc"])
    cutoff = ["--uploaded-prior-to", inputs["uploaded_prior_to"]]
    index = ["--index-url", inputs["index_url"]]
    unreachable = {}
    for url in [install["torch_index_url"], *install["torch_extra_index_urls"]]:
        if url and url.rstrip("/") != inputs["index_url"].rstrip("/"):
            why = reachable(url)
            if why:
                unreachable["torch"] = f"{url} was not reachable where the set was made"
                took.setdefault("unreachable", {})[url] = why
    if install["sgl_kernel_wheel_url"]:
        why = reachable(install["sgl_kernel_wheel_url"])
        if why:
            unreachable["kernel"] = f"{install['sgl_kernel_wheel_url']} was not reachable where the set was made"
            took.setdefault("unreachable", {})[install["sgl_kernel_wheel_url"]] = why
    material = {"install": install, "inputs": {k: v for k, v in inputs.items() if k != "env"}, "pip": pip.version,
                "standins": sorted(unreachable), "tool": 1}
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]
    cached = cache / "resolve" / f"{install['sglang_version']}-{key}.json" if cache else None
    if cached and cached.exists():
        result = json.loads(cached.read_text())
        took["resolution"] = {"cached": True, "file": str(cached)}
        return result
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sglang-set-standins-") as tmp:
        standins: list[dict] = []
        run_spec = copy.deepcopy(spec)
        extra = [*cutoff]

        def use_standins(new: list[dict]) -> None:
            standins.extend(new)
            if "--find-links" not in extra:
                extra.extend(["--find-links", tmp])

        if "torch" in unreachable:
            use_standins(torch_standins(pip, derived, install["torch_local_version"], unreachable["torch"], inputs,
                                        target, index, Path(tmp)))
            run_spec["components"]["torch"].update(index_url="", extra_index_urls=[])
        if "kernel" in unreachable:
            entry = kernel_standin(pip, install["sgl_kernel_wheel_url"], unreachable["kernel"], target, index, Path(tmp))
            use_standins([entry])
            run_spec["components"]["sgl_kernel"]["wheel_url"] = entry.pop("path")
        build = _plan(run_spec, inputs)
        extra.append("--use-feature=fast-deps")  # see Pip.report
        try:
            result = rel.resolve(build, inputs["target"]["python"], inputs["target"]["glibc"], pip.cmd, extra, pip.env)
        except rel.ReleaseError as err:
            if "torch" in unreachable:
                raise SetError(str(err)) from err
            # The registry may serve torch but not one of its CUDA libraries: torch's metadata without them.
            first = str(err)
            why = "the registry could not serve torch's CUDA libraries: " + " ".join(
                ln.strip() for ln in first.splitlines()[1:4])
            use_standins(torch_standins(pip, derived, install["torch_local_version"], why, inputs, target, index,
                                        Path(tmp)))
            try:
                result = rel.resolve(_plan(run_spec, inputs), inputs["target"]["python"], inputs["target"]["glibc"],
                                     pip.cmd, extra, pip.env)
            except rel.ReleaseError:
                raise SetError(first) from err
            if not install["torch_local_version"]:
                result["note"] = "torch family stood in with label +standin"
        result["standins"] = [{k: v for k, v in s.items() if k != "tag"} for s in standins]
        # The requirements as the role renders them: a stood-in kernel wheel by its URL, not its temporary path.
        result["requirements"] = [install["sgl_kernel_wheel_url"] if r.startswith(tmp) else r
                                  for r in result["requirements"]]
    if result["problems"]:
        raise SetError("the resolved set mixes CUDA builds: " + "; ".join(result["problems"]))
    took["resolution"] = {"cached": False, "seconds": round(time.monotonic() - started, 1)}
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.with_suffix(".part").write_text(json.dumps(result, indent=1))
        os.replace(cached.with_suffix(".part"), cached)
    return result


def _plan(spec: dict, inputs: dict):
    from sglang_build_tool.plan import Plan  # the one place that knows the spec's fields

    return Plan(spec, python_version=inputs["target"]["python"])


# ----- the review -----
def _diff_keys(old: dict, new: dict) -> tuple[list, list]:
    return sorted(set(new) - set(old)), sorted(set(old) - set(new))


def effective(flag: dict):
    return flag.get("default") if flag.get("default") is not None else flag.get("fallback")


def changes(prev: dict | None, data: dict) -> dict | None:
    """What changed since the previous set: what an upgrade's review reads."""
    if prev is None:
        return None
    out: dict = {"since": prev["sglang"]}
    pf, nf = prev["source"]["flags"], data["source"]["flags"]
    # Compared by spelling (a flag's name or alias): a name that became another flag's alias still parses.
    old_spellings = {n for k, f in pf.items() for n in [k, *f.get("aliases", [])]}
    spellings = {n for k, f in nf.items() for n in [k, *f.get("aliases", [])]}
    out["flags"] = {
        "added": sorted(spellings - old_spellings),
        "removed": [dict({"flag": f}, **({"now_prefix_of": sorted(s for s in spellings if s.startswith(f))}
                                         if any(s.startswith(f) for s in spellings) else {}))
                    for f in sorted(old_spellings - spellings)],
        "deprecated": [{"flag": f, "note": nf[f]["deprecated"]} for f in sorted(nf)
                       if nf[f].get("deprecated") and (f not in pf or not pf[f].get("deprecated"))],
        # The effective default: a field's fallback where its default is None (0.5.18's Arg(fallback=...)).
        "default_changed": [{"flag": f, "from": effective(pf[f]), "to": effective(nf[f])} for f in sorted(nf)
                            if f in pf and effective(pf[f]) != effective(nf[f])],
        "choices_changed": [{"flag": f, "added": sorted(set(map(str, nf[f]["choices"])) - set(map(str, pf[f]["choices"]))),
                             "removed": sorted(set(map(str, pf[f]["choices"])) - set(map(str, nf[f]["choices"])))}
                            for f in sorted(nf) if f in pf and isinstance(nf[f].get("choices"), list)
                            and isinstance(pf[f].get("choices"), list)
                            and set(map(str, nf[f]["choices"])) != set(map(str, pf[f]["choices"]))]}
    pe, ne = prev["source"]["endpoints"], data["source"]["endpoints"]
    added, removed = _diff_keys(pe, ne)
    out["endpoints"] = {"added": added, "removed": removed,
                        "deprecated": [{"path": p, **ne[p]["deprecated"]} for p in sorted(ne)
                                       if ne[p].get("deprecated") and (p not in pe or not pe[p].get("deprecated"))],
                        "methods_changed": [{"path": p, "from": pe[p]["methods"], "to": ne[p]["methods"]}
                                            for p in sorted(ne) if p in pe and pe[p]["methods"] != ne[p]["methods"]]}
    out["parsers"] = {}
    for kind in ("tool_call", "reasoning"):
        old, new = set(prev["source"]["parsers"][kind]), set(data["source"]["parsers"][kind])
        out["parsers"][kind] = {"added": sorted(new - old), "removed": sorted(old - new)}
    if prev["source"]["parsers"].get("deprecated") != data["source"]["parsers"].get("deprecated"):
        out["parsers"]["deprecated"] = {"from": prev["source"]["parsers"].get("deprecated"),
                                        "to": data["source"]["parsers"].get("deprecated")}
    added, removed = _diff_keys(prev["source"]["architectures"], data["source"]["architectures"])
    out["architectures"] = {"added": added, "removed": removed}
    def norm(text):  # the same rule written another way (is_sm100_supported() / get_platform().is_sm100)
        text = re.sub(r"(?:get_platform\(\)|current_platform)\.", "", text or "")
        text = re.sub(r"\b(is_\w+?)(?:_supported)?\(\)", r"\1", text)
        return re.sub(r"\b(?:self|cfg|server_args)\.|resolved_view\((?:self|server_args)\)", "", text)

    att = []
    for arch in ("mla", "mha"):
        old = (prev["source"]["attention_defaults"].get(arch) or {}).get("per_compute_capability", {})
        new = (data["source"]["attention_defaults"].get(arch) or {}).get("per_compute_capability", {})
        att += [{"model": arch, "compute_capability": cc, "from": old.get(cc), "to": new.get(cc)}
                for cc in sorted(set(old) | set(new)) if norm(old.get(cc)) != norm(new.get(cc))]
    out["attention_defaults"] = att
    out["env"] = [{"name": n, "from": (prev["source"]["env"].get(n) or {}).get("status"), "to": e.get("status")}
                  for n, e in sorted(data["source"]["env"].items())
                  if (prev["source"]["env"].get(n) or {}).get("status") != e.get("status")]
    if prev["source"].get("flashinfer_sampling") != data["source"].get("flashinfer_sampling"):
        out["flashinfer_sampling"] = {"from": prev["source"].get("flashinfer_sampling"),
                                      "to": data["source"].get("flashinfer_sampling")}
    po, pn = prev["resolution"]["resolved"], data["resolution"]["resolved"]
    added, removed = _diff_keys(po, pn)
    out["pins"] = {
        "components": [{"name": n, "from": po.get(n), "to": pn.get(n)} for n in rel.HIGHLIGHT
                       if (n in po or n in pn) and po.get(n) != pn.get(n)],
        "added": [f"{n} {pn[n]}" for n in added], "removed": [f"{n} {po[n]}" for n in removed],
        "changed": [f"{n} {po[n]} -> {pn[n]}" for n in sorted(set(po) & set(pn)) if po[n] != pn[n]],
        "count": {"from": len(po), "to": len(pn)}}
    return out


def render(data: dict, took: dict | None = None) -> str:
    """The review report, in words."""
    r, s = data["resolution"], data["source"]
    lines = [f"sglang {data['sglang']}: {r['count']} distributions for Python {data['inputs']['target']['python']}, "
             f"glibc {data['inputs']['target']['glibc']} ({data['inputs']['index_url']} as uploaded before "
             f"{data['inputs']['uploaded_prior_to']}, pip {data['inputs']['pip']}): "
             + ", ".join(f"{k} {v}" for k, v in r["highlights"].items())
             + (f"; overrides {r['overrides']}" if r["overrides"] else "")]
    for st in r.get("standins") or []:
        lines.append(f"  STAND-IN {st['dist']} {st['version']}: {st['why']}"
                     + (f"; left out: {', '.join(st['left_out'])}" if st.get("left_out") else ""))
    dep = [f for f, v in s["flags"].items() if v.get("deprecated")]
    dep_ep = [p for p, v in s["endpoints"].items() if v.get("deprecated")]
    lines.append(f"server: {len(s['flags'])} flags ({len(dep)} deprecated), {len(s['endpoints'])} endpoints "
                 f"({len(dep_ep)} deprecated: {', '.join(dep_ep)}), {len(s['parsers']['tool_call'])} tool-call and "
                 f"{len(s['parsers']['reasoning'])} reasoning parsers, {len(s['architectures'])} architectures")
    for arch in ("mla", "mha"):
        per = (s["attention_defaults"].get(arch) or {}).get("per_compute_capability")
        if per:
            lines.append(f"attention default ({arch.upper()}): " + "; ".join(f"{cc}: {v}" for cc, v in per.items()))
    lines.append("environment: " + "; ".join(f"{n} {e['status']}" + (
        f" ({', '.join(sorted({x['file'] for x in e.get('references', [])}))})" if e.get("references") else "")
        for n, e in s["env"].items()))
    lines.append("FlashInfer sampling kernels used by the sampler: " + (", ".join(s["flashinfer_sampling"]) or "none"))
    ch = data.get("changes")
    if ch:
        lines.append(f"Changed since {ch['since']}:")
        f = ch["flags"]
        lines.append(f"  flags added ({len(f['added'])}): {' '.join(f['added'])}")
        # argparse takes an unambiguous prefix of a flag as that flag, and refuses an ambiguous one.
        lines.append(f"  flags removed ({len(f['removed'])}): " + " ".join(
            x["flag"] + (f" (now an ambiguous prefix of {', '.join(x['now_prefix_of'])}: refused)"
                         if len(x.get("now_prefix_of", [])) > 1 else
                         f" (now an abbreviation of {x['now_prefix_of'][0]}: argparse takes it as that flag)"
                         if x.get("now_prefix_of") else "") for x in f["removed"]))
        for x in f["deprecated"]:
            lines.append(f"  flag newly deprecated: {x['flag']}: {x['note'][:160]}")
        lines.append(f"  defaults changed ({len(f['default_changed'])}): " + "; ".join(
            f"{x['flag']} {json.dumps(x['from'])} -> {json.dumps(x['to'])}" for x in f["default_changed"]))
        for x in f["choices_changed"]:
            lines.append(f"  choices of {x['flag']}: +{x['added']} -{x['removed']}")
        e = ch["endpoints"]
        lines.append(f"  endpoints added: {' '.join(e['added']) or '-'}; removed: {' '.join(e['removed']) or '-'}")
        for x in e["deprecated"]:
            lines.append(f"  endpoint newly deprecated: {x['path']}" + (f" (use {x['use']})" if x.get("use") else ""))
        for kind, d in ch["parsers"].items():
            if kind != "deprecated":
                lines.append(f"  {kind} parsers added: {' '.join(d['added']) or '-'}; removed: {' '.join(d['removed']) or '-'}")
        if "deprecated" in ch["parsers"]:
            lines.append(f"  deprecated parsers: {ch['parsers']['deprecated']['from']} -> {ch['parsers']['deprecated']['to']}")
        lines.append(f"  architectures added: {' '.join(ch['architectures']['added']) or '-'}; removed: "
                     f"{' '.join(ch['architectures']['removed']) or '-'}")
        for x in ch["attention_defaults"]:
            lines.append(f"  attention default {x['model'].upper()} on {x['compute_capability']}: {x['from']} -> {x['to']}")
        for x in ch["env"]:
            lines.append(f"  environment {x['name']}: {x['from']} -> {x['to']}")
        if "flashinfer_sampling" in ch:
            lines.append(f"  FlashInfer sampling: {ch['flashinfer_sampling']['from']} -> {ch['flashinfer_sampling']['to']}")
        p = ch["pins"]
        lines.append("  pins: " + ", ".join(f"{x['name']} {x['from']} -> {x['to']}" for x in p["components"]))
        lines.append(f"  distributions {p['count']['from']} -> {p['count']['to']}: {len(p['added'])} added, "
                     f"{len(p['removed'])} removed, {len(p['changed'])} changed version")
    if took:
        lines.append("took: " + json.dumps(took))
    return "\n".join(lines)


# ----- the command -----
def make(args) -> tuple[dict, dict]:
    sets = known_sets(args.sets_dir)
    existing = json.loads(sets[args.version].read_text()) if args.version in sets else None
    if existing is not None and not {"install", "inputs"} <= set(existing):
        raise SetError(f"{sets[args.version]} is not a release set file (no install and inputs): remove it")
    install, inputs = gather_inputs(args, existing)
    cache = None if args.no_cache else args.cache_dir
    took: dict = {}
    started = time.monotonic()
    pip = Pip(args.cache_dir, inputs["index_url"], inputs.get("pip") or PIP_VERSION)
    wheel = sglang_wheel(pip, args.version, inputs, args.cache_dir, took)
    try:
        resolution = resolve_set(pip, install, inputs, wheel, cache, took)
        read_started = time.monotonic()
        source = src.read_release(wheel, list(inputs["env"]))
        took["source_seconds"] = round(time.monotonic() - read_started, 1)
    except (rel.ReleaseError, src.SourceError) as err:
        raise SetError(str(err)) from err
    since = args.since or next((v for v in reversed(list(sets)) if version_key(v) < version_key(args.version)), None)
    if since and since not in sets:
        raise SetError(f"--since {since}: no set file {args.sets_dir / (since + '.json')}")
    data = {"sglang": args.version,
            "note": f"Made by roles/sglang_build/files/sglang_release_set.py {args.version}: do not edit by hand "
                    "(roles/sglang_build/README.md, Release sets).",
            "install": install, "inputs": inputs,
            "resolution": {k: resolution[k] for k in ("count", "derived", "requirements", "overrides", "standins",
                                                      "highlights", "resolved")},
            "source": source}
    data["changes"] = changes(json.loads(sets[since].read_text()) if since else None, data)
    took["seconds"] = round(time.monotonic() - started, 1)
    return data, took


def dump(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("version", help="the SGLang version, e.g. 0.5.24")
    ap.add_argument("--since", help="the set to compare with (default: the newest set before this version)")
    ap.add_argument("--sets-dir", type=Path, default=SETS_DIR, help="where the set files are (default: the role's)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when the file would change")
    ap.add_argument("--json", action="store_true", help="print the set (JSON) instead of the report")
    ap.add_argument("--uploaded-prior-to", help="resolve as the index was then (ISO 8601, or 'now'); "
                                                "default: the set file's, else now")
    ap.add_argument("--index-url", help=f"the package index (default: the set file's, else {DEFAULT_INDEX})")
    ap.add_argument("--sglang-mode", choices=["wheel", "source"], help="how the role installs SGLang (default: wheel)")
    ap.add_argument("--torch-local-version", help="the local version of torch's CUDA build, e.g. +cu130 (default: none)")
    ap.add_argument("--torch-index-url", help="the index of torch's CUDA build (default: the package index)")
    ap.add_argument("--torch-extra-index-url", action="append", help="an extra index for the torch family (repeatable)")
    ap.add_argument("--kernel-version", help="the kernel package's version, when not SGLang's pin")
    ap.add_argument("--kernel-wheel-url", help="a kernel wheel the index lacks")
    ap.add_argument("--override", action="append", help="an exact pin installed last with --no-deps (repeatable)")
    ap.add_argument("--standin-requires", action="append",
                    help="a CUDA library pin of torch's build, for its stand-in where its index is unreachable")
    ap.add_argument("--env", action="append", help="an environment variable to look up in the source (repeatable; "
                                                   f"default: {', '.join(DEFAULT_ENV)})")
    ap.add_argument("--cache-dir", type=Path, default=CACHE)
    ap.add_argument("--no-cache", action="store_true", help="resolve again, whatever the cache holds")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not re.fullmatch(r"\d+(\.\d+)+(\.post\d+|rc\d+)?", args.version):
        print(f"FAILED: {args.version!r} is not an SGLang version (such as 0.5.24)", file=sys.stderr)
        return 2
    path = args.sets_dir / f"{args.version}.json"
    try:
        data, took = make(args)
    except SetError as err:
        print(f"FAILED: sglang {args.version}: {err}\nNothing was written.", file=sys.stderr)
        return 1
    text = dump(data)
    print(dump(data) if args.json else render(data, took))
    if args.check:
        same = path.exists() and path.read_text(encoding="utf-8") == text
        print(f"{path}: {'unchanged' if same else 'WOULD CHANGE' if path.exists() else 'MISSING'}")
        return 0 if same else 1
    write_atomically(path, text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
