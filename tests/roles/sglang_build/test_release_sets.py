"""The supported release sets: what each installs, read from SGLang's own metadata, and pip's real
resolver resolving each with all its dependencies (files/sglang_release.py).

The specs are the ones the role renders (through Ansible itself) for `sglang_build_release_set`
0.5.9 and 0.5.17. The resolution asks PyPI (this machine's registry) for Python 3.12 on manylinux
x86_64 with glibc 2.39 (Ubuntu 24.04), installing nothing.

STAND-INS, where an index cannot be reached from here: PyTorch's own index (the 0.5.9 set's torch,
torchaudio and torchvision `+cu130` builds) and the GitHub release of the 0.5.9 set's sgl-kernel
`0.3.21+cu130` wheel. Each is a TEST DOUBLE: an empty wheel of the same name and version whose
metadata repeats that of PyPI's build of the same version (read from PyPI, below), except torch's
CUDA libraries: PyPI's torch 2.9.1 is a CUDA 12.8 build (nvidia-*-cu12), the cu130 build pins
`nvidia-cudnn-cu13==9.13.0.50` (uv's resolution error quoted in nvidia-cosmos/cosmos-predict2.5#147),
the only one of its CUDA 13 pins known here: the stand-in names that one. The 0.5.17 set needs no
stand-in: its torch 2.11.0 is PyPI's, a CUDA 13.0 build.

A resolution is kept for a week under ~/.cache/sglang-ansible/resolve (keyed by every requirement,
index, stand-in and pip version): PyPI serves no PEP 658 metadata here, so pip reads each candidate
wheel's metadata by range requests (about 3 minutes for the 211 distributions of 0.5.17). A
conflicting pin is never cached: its test resolves for real every time.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from test_tool import render_spec

import sglang_sources
from repo import ROOT, load

rel = load("roles/sglang_build/files/sglang_release.py")
sb = load("roles/sglang_build/files/sglang_build_tool")

CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible")) / "resolve"
WEEK = 7 * 24 * 3600
TARGET = {"python_version": "3.12", "glibc": "2.39"}

# TEST DOUBLE metadata (see the module docstring): name, version, tag, Requires-Dist.
TORCH_291_PURE = ["filelock", "typing-extensions>=4.10.0", 'setuptools; python_version >= "3.12"', "sympy>=1.13.3",
                  "networkx>=2.5.1", "jinja2", "fsspec>=0.8.5"]
STANDINS_059 = [
    ("torch", "2.9.1+cu130", "cp312-cp312-manylinux_2_28_x86_64",
     TORCH_291_PURE + ['nvidia-cudnn-cu13==9.13.0.50; platform_system == "Linux"',
                       'triton==3.5.1; platform_system == "Linux" and platform_machine == "x86_64"']),
    ("torchaudio", "2.9.1+cu130", "cp312-cp312-manylinux_2_28_x86_64", ["torch==2.9.1"]),
    ("torchvision", "0.24.1+cu130", "cp312-cp312-manylinux_2_28_x86_64",
     ["numpy", "torch==2.9.1", "pillow!=8.3.*,>=5.3.0"]),
    ("sgl_kernel", "0.3.21+cu130", "cp310-abi3-manylinux2014_x86_64", []),
]


def make_wheel(directory: Path, name: str, version: str, tag: str, requires: list[str]) -> Path:
    """An empty wheel whose metadata says `requires` (a TEST DOUBLE: nothing to import in it)."""
    path = directory / f"{name}-{version}-{tag}.whl"
    info = f"{name}-{version}.dist-info"
    meta = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
        name, version, "".join(f"Requires-Dist: {r}\n" for r in requires))
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{info}/METADATA", meta)
        zf.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: sglang-ansible tests\nRoot-Is-Purelib: false\n"
                                     f"Tag: {tag}\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    out = {}
    for name in ("0.5.9", "0.5.17"):
        out[name] = render_spec(tmp_path_factory.mktemp("render"), "-e", f"sglang_build_release_set={name}")
    return out


def metadata_of(version: str) -> list[dict]:
    """SGLang's own requirements: the sdist's PKG-INFO (0.5.9, 0.5.10), else the wheel's METADATA."""
    import tarfile

    if version in ("0.5.9", "0.5.10"):
        with tarfile.open(sglang_sources.sdist(version)) as tar:
            member = next(m for m in tar.getnames() if m.count("/") == 1 and m.endswith("/PKG-INFO"))
            return rel.requires_dist(tar.extractfile(member).read().decode())
    return rel.requires_dist(rel.wheel_metadata(sglang_sources.wheel(version)))


def test_each_release_names_its_own_kernel_package_and_pins():
    """The rename the old constants missed: 0.5.10 requires sglang-kernel, not sgl-kernel."""
    d9, d10, d17 = (rel.derive(metadata_of(v), v) for v in ("0.5.9", "0.5.10", "0.5.17"))
    assert d9["kernel"] == {"dist": "sgl-kernel", "version": "0.3.21"}
    assert d10["kernel"] == {"dist": "sglang-kernel", "version": "0.4.1"}
    assert d17["kernel"] == {"dist": "sglang-kernel", "version": "0.4.5"}
    assert (d9["torch"], d10["torch"], d17["torch"]) == ("2.9.1", "2.9.1", "2.11.0")
    assert d9["flashinfer"] == {"dist": "flashinfer-python", "extras": "", "version": "0.6.3"}
    assert d17["flashinfer"] == {"dist": "flashinfer-python", "extras": "[cu13]", "version": "0.6.15.post1"}
    assert {c["dist"]: c["version"] for c in d9["companions"]} == {"torchaudio": "2.9.1", "torchvision": None}


def test_a_release_that_does_not_pin_torch_is_refused():
    reqs = [rel.parse_requirement(r) for r in ("torch>=2.9", "sglang-kernel==0.4.5")]
    with pytest.raises(rel.ReleaseError, match="does not pin torch exactly.*sglang_build_torch_version"):
        rel.derive(reqs, "9.9.9")


def steps_of(spec: dict, version: str) -> list[dict]:
    build = sb.Build(copy.deepcopy(spec), python_version="3.12")
    return rel.install_steps(build, rel.derive(metadata_of(version), version), f"sglang=={version}")


def test_the_0_5_9_set_installs_one_cuda_build_the_patchable_source_and_the_cudnn_override(specs):
    spec = specs["0.5.9"]
    assert spec["release_set"] == "0.5.9" and spec["components"]["sglang"]["mode"] == "source"
    steps = {s["name"]: s for s in steps_of(spec, "0.5.9")}
    assert list(steps) == ["torch", "sgl_kernel", "flashinfer", "sglang", "overrides"]
    torch = steps["torch"]
    # The whole torch family in one call, from PyTorch's cu130 index, all +cu130 (not PyPI's CUDA 12.8 builds).
    assert torch["requirements"] == ["torch==2.9.1+cu130", "torchaudio==2.9.1+cu130", "torchvision"]
    assert torch["args"][:2] == ["--index-url", "https://download.pytorch.org/whl/cu130"]
    assert steps["sgl_kernel"]["requirements"][0].endswith("sgl_kernel-0.3.21+cu130-cp310-abi3-manylinux2014_x86_64.whl")
    assert steps["flashinfer"]["requirements"] == ["flashinfer-python==0.6.3"]
    assert steps["overrides"]["requirements"] == ["nvidia-cudnn-cu13==9.15.1.9"]
    assert steps["overrides"]["args"][0] == "--no-deps" and steps["overrides"]["override"]


def test_the_0_5_17_set_takes_every_pin_from_the_release(specs):
    spec = specs["0.5.17"]
    c = spec["components"]
    assert (c["sglang"]["mode"], c["sglang"]["version"]) == ("wheel", "0.5.17")
    assert c["torch"]["version"] == c["sgl_kernel"]["version"] == c["flashinfer"]["version"] == ""
    assert spec["pip"]["overrides"] == [] and spec["torch_local_version"] == ""
    steps = {s["name"]: s for s in steps_of(spec, "0.5.17")}
    assert steps["torch"]["requirements"] == ["torch==2.11.0", "torchaudio==2.11.0", "torchvision"]
    assert steps["sgl_kernel"]["requirements"] == ["sglang-kernel==0.4.5"]
    assert steps["flashinfer"]["requirements"] == ["flashinfer-python[cu13]==0.6.15.post1"]
    assert "overrides" not in steps


def test_an_inventory_pin_wins_over_the_release_and_tests_install_only_the_components(specs):
    spec = copy.deepcopy(specs["0.5.17"])
    spec["components"]["torch"]["version"] = "2.13.0+cpu"  # what the test hosts install
    spec["components"]["flashinfer"]["version"] = "0.6.14"
    spec["pip"]["no_deps"] = True
    steps = {s["name"]: s for s in steps_of(spec, "0.5.17")}
    assert steps["torch"]["requirements"] == ["torch==2.13.0+cpu"]  # companions are dependencies: none
    assert steps["flashinfer"]["requirements"] == ["flashinfer-python[cu13]==0.6.14"]
    assert all(s["args"][0] == "--no-deps" for s in steps.values())
    want = rel.expected_versions(sb.Build(spec, python_version="3.12"), rel.derive(metadata_of("0.5.17"), "0.5.17"))
    assert want == {"torch": "2.13.0+cpu", "sglang-kernel": "0.4.5", "flashinfer-python": "0.6.14", "sglang": "0.5.17"}


def test_the_check_tells_one_cuda_build_from_a_mix():
    assert rel.family_problems({"torch": "2.9.1+cu130", "torchaudio": "2.9.1+cu130", "torchvision": "0.24.1+cu130"}) == []
    assert rel.family_problems({"torch": "2.11.0", "torchaudio": "2.11.0", "torchvision": "0.26.0"}) == []
    mixed = rel.family_problems({"torch": "2.9.1+cu130", "torchaudio": "2.9.1", "torchvision": "0.24.1+cu130"})
    assert mixed == ["torchaudio 2.9.1 is not from torch's build +cu130 (2.9.1+cu130)"]
    assert rel.same_version("0.3.21+cu130", "0.3.21") and not rel.same_version("0.3.21", "0.3.21+cu130")


def test_the_release_id_follows_the_set(specs):
    ids = {name: sb.Build(copy.deepcopy(spec), python_version="3.12").release_id for name, spec in specs.items()}
    assert ids["0.5.9"].startswith("sglang-0.5.9-") and ids["0.5.17"].startswith("sglang-0.5.17-")
    for path, value in [(("pip", "overrides"), ["nvidia-cudnn-cu13==9.16.0.29"]), (("torch_local_version",), "+cu129")]:
        spec = copy.deepcopy(specs["0.5.9"])
        node = spec
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert sb.Build(spec, python_version="3.12").release_id != ids["0.5.9"], path


# ----- pip's real resolver -----
def resolvable(spec: dict, standins: Path | None) -> tuple[dict, list[str]]:
    """The spec as it is resolved here: unreachable sources replaced by the stand-ins."""
    spec = copy.deepcopy(spec)
    extra = ["--use-feature=fast-deps"]
    if standins is not None:
        spec["components"]["torch"].update(index_url="", extra_index_urls=[])
        spec["components"]["sgl_kernel"]["wheel_url"] = str(next(standins.glob("sgl_kernel-*.whl")))
        extra.append(f"--find-links={standins}")
    return spec, extra


def run_resolve(spec: dict, extra: list[str], tmp_path: Path) -> tuple[int, dict]:
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    env["PIP_CONFIG_FILE"] = os.devnull  # PyPI's answer, not this machine's pip configuration
    proc = subprocess.run([sys.executable, str(ROOT / "roles/sglang_build/files/sglang_release.py"), "resolve",
                           "--spec", str(spec_file), "--python-version", TARGET["python_version"],
                           "--glibc", TARGET["glibc"], *(f"--pip-arg={a}" for a in extra)],
                          capture_output=True, text=True, env=env, timeout=1500)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def cached_resolve(spec: dict, extra: list[str], standins: Path | None, tmp_path: Path) -> dict:
    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True).stdout.split()[1]
    material = {"spec": {k: spec[k] for k in ("components", "pip", "torch_local_version")}, "extra": extra[:1],
                "target": TARGET, "pip": pip, "standins": STANDINS_059 if standins else None}
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]
    cached = CACHE / f"{spec['release_set']}-{key}.json"
    if cached.exists() and time.time() - cached.stat().st_mtime < WEEK:
        result = json.loads(cached.read_text())
        # Still what the tool would resolve: the requirements it derives today from the same metadata.
        sglang = spec["components"]["sglang"]
        steps = rel.install_steps(sb.Build(copy.deepcopy(spec), python_version="3.12"), result["derived"],
                                  sglang.get("wheel_url") or f"sglang=={sglang['version']}")
        if [r for s in steps if not s.get("override") for r in s["requirements"]] == result["requirements"]:
            return result
    rc, result = run_resolve(spec, extra, tmp_path)
    assert rc == 0, result.get("msg") or result.get("problems")
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(".part")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, cached)
    return result


@pytest.fixture(scope="module")
def standins(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("standins")
    for name, version, tag, requires in STANDINS_059:
        make_wheel(directory, name, version, tag, requires)
    return directory


@pytest.mark.parametrize("name", ["0.5.9", "0.5.17"])
def test_each_set_resolves_with_all_its_dependencies(name, specs, standins, tmp_path, capsys):
    spec, extra = resolvable(specs[name], standins if name == "0.5.9" else None)
    result = cached_resolve(spec, extra, standins if name == "0.5.9" else None, tmp_path)
    got, derived = result["resolved"], result["derived"]
    with capsys.disabled():
        print(f"\n[release set {name}] {result['count']} distributions for Python {result['python']}, glibc "
              f"{result['glibc']}: " + ", ".join(f"{k} {v}" for k, v in result["highlights"].items())
              + (f"; overrides: {result['overrides']}" if result["overrides"] else "")
              + ("; STAND-INS for PyTorch's cu130 index and the sgl-kernel cu130 wheel" if name == "0.5.9" else ""))
    assert result["problems"] == []
    local = spec["torch_local_version"]
    assert got["torch"] == derived["torch"] + local
    assert all(rel.local(got[c]) == local for c in rel.TORCH_COMPANIONS)  # one CUDA build for the family
    kernel = derived["kernel"]
    assert rel.same_version(got[kernel["dist"]], kernel["version"])
    assert not ({"sgl-kernel", "sglang-kernel"} - {kernel["dist"]}) & set(got)  # never both kernel packages
    assert got["flashinfer-python"] == derived["flashinfer"]["version"]
    assert got["sglang"] == spec["components"]["sglang"]["version"]
    cudnn = got["nvidia-cudnn-cu13"]  # a CUDA 13 cuDNN, as the driver 580 / CUDA 13.0 host needs
    assert "nvidia-cudnn-cu12" not in got
    if name == "0.5.9":
        # torch 2.9.1+cu130's own cuDNN is one SGLang 0.5.9 refuses for Kimi-K2.5; the override replaces it.
        assert tuple(map(int, cudnn.split(".")[:2])) < (9, 15)
        assert tuple(map(int, result["overrides"]["nvidia-cudnn-cu13"].split(".")[:2])) >= (9, 15)


def test_a_conflicting_pin_fails_naming_the_conflict(specs, tmp_path):
    """Never cached: pip's resolver is asked every time, and must refuse."""
    spec, extra = resolvable(specs["0.5.17"], None)
    spec["pip"]["extra_packages"] = ["transformers==4.57.1"]  # 0.5.9's, beside 0.5.17
    rc, result = run_resolve(spec, extra, tmp_path)
    assert rc == 1 and result["failed"]
    assert "The user requested transformers==4.57.1" in result["msg"], result["msg"]
    assert "sglang 0.5.17 depends on transformers==5.12.1" in result["msg"], result["msg"]
