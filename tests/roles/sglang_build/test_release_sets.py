"""The supported release sets: what each installs, read from SGLang's own metadata; the set files the
command files/sglang_release_set.py makes (one per release in files/release_sets/); and pip's real
resolver resolving each set with all its dependencies.

The specs are the ones the role renders (through Ansible itself) for each `sglang_build_release_set`.
The resolution asks PyPI (this machine's registry) for Python 3.12 on manylinux x86_64 with glibc 2.39
(Ubuntu 24.04), as it was at the set's recorded cutoff (pip 26.3's --uploaded-prior-to), installing
nothing: the command's own code, in-process (sglang_release_set.make).

STAND-INS, where an index cannot be reached from here: PyTorch's own index (the 0.5.9 set's torch,
torchaudio and torchvision `+cu130` builds) and the GitHub release of the 0.5.9 set's sgl-kernel
`0.3.21+cu130` wheel. The command replaces each by an empty wheel whose metadata is that of PyPI's
build of the same version less its CUDA libraries (PyPI's torch 2.9.1 is a CUDA 12.8 build), plus the
set's known CUDA 13 pin of torch 2.9.1+cu130 (`nvidia-cudnn-cu13==9.13.0.50`, uv's resolution error
quoted in nvidia-cosmos/cosmos-predict2.5#147), and says so in the set file. The 0.5.17 and 0.5.23 sets
need none: their torch (2.11.0, 2.14.1) is PyPI's, a CUDA 13.0 build.

Resolutions are cached by the command under ~/.cache/sglang-ansible/release-sets (keyed by every input,
the cutoff included: a cached one is what pip resolves for those inputs); its downloads too (the sglang
wheels, pip's). Without the cache the three sets take about 4 minutes here (pip reads each candidate's
metadata by range requests: about 100 MB each). A conflict is never cached: its test resolves every time.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from test_tool import render_spec

import sglang_sources
from repo import ROOT, load

rel = load("roles/sglang_build/files/sglang_release.py")
sb = load("roles/sglang_build/files/sglang_build_tool")
rset = load("roles/sglang_build/files/sglang_release_set.py")

SETS_DIR = ROOT / "roles" / "sglang_build" / "files" / "release_sets"
SETS = sorted((p.stem for p in SETS_DIR.glob("*.json")), key=rset.version_key)
COMMAND = ROOT / "roles" / "sglang_build" / "files" / "sglang_release_set.py"
TARGET = {"python_version": "3.12", "glibc": "2.39"}

@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    out = {}
    for name in SETS:
        out[name] = render_spec(tmp_path_factory.mktemp("render"), "-e", f"sglang_build_release_set={name}")
    return out


def committed(version: str) -> dict:
    return json.loads((SETS_DIR / f"{version}.json").read_text())


def index_drift(name: str, resolved: dict) -> str:
    """Why a resolution with the set's recorded cutoff no longer gives the set's pins, in one line per package.

    pip's --uploaded-prior-to makes a resolution repeatable on an index that never changes its past; a mirror
    that catches up later lists files uploaded before the cutoff that it did not list when the set was made
    (seen here 2026-12-06: ipython 9.19.1, uploaded 2026-11-23, absent when the 2026-12-04 sets were made)."""
    pinned = committed(name)["resolution"]["resolved"]
    lines = [f"  {d}: set {pinned.get(d)}, index now {resolved.get(d)}"
             for d in sorted(set(pinned) | set(resolved)) if pinned.get(d) != resolved.get(d)]
    cutoff = committed(name)["inputs"]["uploaded_prior_to"]
    return (f"{name}: the index resolves other versions than the committed set with its cutoff {cutoff}:\n"
            + "\n".join(lines) + "\nIf the index now lists files from before the cutoff that it lacked when the set "
            f"was made, refresh the set: sglang_release_set.py {name} --uploaded-prior-to {cutoff} --no-cache "
            "(and review the diff); otherwise the command changed.")


# How many distributions an index's catch-up may move before the difference is read as the command's own.
BACKFILL_MOST = 5


def index_backfill(name: str, resolved: dict) -> str | None:
    """The difference from the committed set, when the index's catch-up alone can explain it; else None.

    Explained: only distributions outside the set's core (its highlights: the torch family, the kernel, FlashInfer,
    SGLang, cuDNN, NCCL, Triton, transformers, cuda-python; and its overrides) move, at most BACKFILL_MOST of them,
    at least one to a newer version and none to an older one (a mirror that catches up adds files, it removes
    none), and any distribution that comes or goes comes with those (a newer version's own requirements). Then the
    exact reproduction is inconclusive, not failed: the core was checked, and the message names the refresh."""
    from packaging.version import Version

    committed_set = committed(name)["resolution"]
    pinned = committed_set["resolved"]
    core = set(committed_set["highlights"]) | set(committed_set["overrides"])
    changed = {d for d in set(pinned) & set(resolved) if pinned[d] != resolved[d]}
    moved = changed | (set(pinned) ^ set(resolved))
    if not changed or len(moved) > BACKFILL_MOST or moved & core:
        return None
    if any(Version(resolved[d]) <= Version(pinned[d]) for d in changed):
        return None
    return index_drift(name, resolved)


def test_an_index_catch_up_is_told_from_a_changed_set():
    """What index_backfill calls the index's catch-up (the reproduction then inconclusive), and what it does not."""
    pinned = committed("0.5.17")["resolution"]["resolved"]
    other = next(d for d in sorted(pinned) if d not in committed("0.5.17")["resolution"]["highlights"])
    newer = dict(pinned, **{other: pinned[other] + ".post99"})
    assert index_backfill("0.5.17", newer) is not None and other in index_backfill("0.5.17", newer)
    assert index_backfill("0.5.17", dict(newer, **{"brand-new-dependency": "1.0"})) is not None
    assert index_backfill("0.5.17", pinned) is None  # nothing moved: nothing to explain
    assert index_backfill("0.5.17", dict(pinned, torch="2.11.1")) is None  # the core moved
    older = dict(pinned, **{other: "0.0.1"})
    assert index_backfill("0.5.17", older) is None  # an index that catches up removes nothing
    outside = [d for d in sorted(pinned) if d not in committed("0.5.17")["resolution"]["highlights"]]
    many = dict(pinned, **{d: pinned[d] + ".post99" for d in outside[:BACKFILL_MOST + 1]})
    assert index_backfill("0.5.17", many) is None  # more than a catch-up moves


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


# ----- the set files and the command that makes them -----
def test_the_supported_sets_are_the_files_and_the_role_renders_each():
    """The role's choices are the set files (a set is supported by its file), 0.5.23 the newest."""
    options = yaml.safe_load((ROOT / "roles/sglang_build/meta/argument_specs.yml").read_text())
    choices = options["argument_specs"]["main"]["options"]["sglang_build_release_set"]["choices"]
    assert [str(c) for c in choices] == SETS == ["0.5.9", "0.5.17", "0.5.23"]
    for version in SETS:
        data = committed(version)
        assert data["sglang"] == data["install"]["sglang_version"] == version
        assert data["resolution"]["resolved"]["sglang"] == version


def test_the_role_installs_what_the_set_resolved(specs):
    """The venv phase's requirements for each rendered set are the ones the set file's resolution resolved."""
    for version in SETS:
        data, spec = committed(version), specs[version]
        steps = rel.install_steps(sb.Build(copy.deepcopy(spec), python_version="3.12"),
                                  data["resolution"]["derived"], f"sglang=={version}")
        assert [r for st in steps if not st.get("override") for r in st["requirements"]] == \
            data["resolution"]["requirements"], version
        assert spec["pip"]["overrides"] == data["install"]["pip_overrides"]
        assert spec["components"]["sglang"]["mode"] == data["install"]["sglang_mode"]
        assert spec["torch_local_version"] == data["install"]["torch_local_version"]


@pytest.fixture(scope="module")
def made() -> dict:
    """Each set as the command makes it now (in-process; resolutions cached by the command)."""
    out = {}
    for version in SETS:
        args = rset.parser().parse_args([version, "--sets-dir", str(SETS_DIR)])
        data, took = rset.make(args)
        out[version] = (data, took)
    return out


@pytest.mark.parametrize("name", ["0.5.9", "0.5.17", "0.5.23"])
def test_each_set_resolves_with_all_its_dependencies(name, made, capsys):
    data, took = made[name]
    result, install = data["resolution"], data["install"]
    got, derived = result["resolved"], result["derived"]
    with capsys.disabled():
        print(f"\n[release set {name}] {result['count']} distributions for Python 3.12, glibc 2.39: "
              + ", ".join(f"{k} {v}" for k, v in result["highlights"].items())
              + (f"; overrides: {result['overrides']}" if result["overrides"] else "")
              + "".join(f"; STAND-IN {st['dist']} {st['version']}" for st in result["standins"])
              + (" (resolution cached)" if took["resolution"].get("cached")
                 else f" (resolved in {took['resolution'].get('seconds')} s)"))
    local = install["torch_local_version"]
    assert got["torch"] == derived["torch"] + local
    assert all(rel.local(got[c]) == local for c in rel.TORCH_COMPANIONS)  # one CUDA build for the family
    kernel = derived["kernel"]
    assert rel.same_version(got[kernel["dist"]], kernel["version"])
    assert not ({"sgl-kernel", "sglang-kernel"} - {kernel["dist"]}) & set(got)  # never both kernel packages
    assert got["flashinfer-python"] == derived["flashinfer"]["version"]
    assert got["sglang"] == name
    cudnn = got["nvidia-cudnn-cu13"]  # a CUDA 13 cuDNN, as the driver 580 / CUDA 13.0 host needs
    assert "nvidia-cudnn-cu12" not in got
    if name == "0.5.9":
        # torch 2.9.1+cu130's own cuDNN is one SGLang 0.5.9 refuses for Kimi-K2.5; the override replaces it.
        assert tuple(map(int, cudnn.split(".")[:2])) < (9, 15)
        assert tuple(map(int, result["overrides"]["nvidia-cudnn-cu13"].split(".")[:2])) >= (9, 15)
        # PyTorch's index and GitHub are not reachable here: the torch family and the kernel wheel stand in.
        if "unreachable" in took:
            assert {s["dist"] for s in result["standins"]} == {"torch", "torchaudio", "torchvision", "sgl-kernel"}
    else:
        assert result["standins"] == []  # PyPI serves their torch, a CUDA 13.0 build, and all of its libraries
    # What pip resolves is what the committed file pins (the stand-ins too, where this machine needs them),
    # and what the release's source says is what the file says (test_release_source.py reads the files).
    assert data["source"] == committed(name)["source"]
    if name != "0.5.9" or "unreachable" in took:
        catch_up = index_backfill(name, result["resolved"])
        if catch_up:
            pytest.skip(f"inconclusive: the exact pins (the core above was checked): {catch_up}")
        assert result["resolved"] == committed(name)["resolution"]["resolved"], index_drift(name, result["resolved"])
        assert result == committed(name)["resolution"]


@pytest.mark.parametrize("name", ["0.5.17", "0.5.23"])
def test_the_command_reproduces_the_committed_set(name, made):
    """Everything in the file: the pins, what the release's source says, the review against the set before."""
    data, _ = made[name]
    catch_up = index_backfill(name, data["resolution"]["resolved"])
    if catch_up:
        pytest.skip(f"inconclusive: {catch_up}")
    assert rset.dump(data) == (SETS_DIR / f"{name}.json").read_text()


def run_command(*args: str, sets_dir: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    return subprocess.run([sys.executable, str(COMMAND), *args, "--sets-dir", str(sets_dir)], capture_output=True,
                          text=True, env=env, timeout=900, check=False)


@pytest.fixture
def own_cache(tmp_path) -> Path:
    """A cache of the test's own (its TEST DOUBLE index's wheels and resolutions stay out of the shared one),
    holding the pinned pip the command runs (downloaded into the shared cache once)."""
    shared = rset.Pip(rset.CACHE, rset.DEFAULT_INDEX).cmd[1].rsplit("/", 1)[0]
    cache = tmp_path / "cache"
    (cache / "pip").mkdir(parents=True)
    shutil.copy2(shared, cache / "pip")
    return cache


def listing(directory: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_the_command_line_rewrites_0_5_23_byte_for_byte(made, tmp_path):
    """The operator's command, run for 0.5.23 in a copy of the sets without it: the same file, and nothing else."""
    sets = tmp_path / "sets"
    shutil.copytree(SETS_DIR, sets)
    (sets / "0.5.23.json").unlink()  # made anew: its inputs are the defaults, with the committed cutoff
    proc = run_command("0.5.23", "--uploaded-prior-to", committed("0.5.23")["inputs"]["uploaded_prior_to"],
                       sets_dir=sets)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Changed since 0.5.17:" in proc.stdout and f"wrote {sets / '0.5.23.json'}" in proc.stdout
    assert sorted(listing(sets)) == sorted(listing(SETS_DIR))  # no leftovers
    catch_up = index_backfill("0.5.23", json.loads((sets / "0.5.23.json").read_text())["resolution"]["resolved"])
    if catch_up:
        pytest.skip(f"inconclusive: the bytes of the file: {catch_up}")
    assert listing(sets) == listing(SETS_DIR)  # the same bytes
    check = run_command("0.5.23", "--check", sets_dir=sets)
    assert check.returncode == 0 and "0.5.23.json: unchanged" in check.stdout, check.stderr[-2000:]


def test_a_version_pypi_does_not_have_fails_naming_it_and_writes_nothing(tmp_path):
    sets = tmp_path / "sets"
    shutil.copytree(SETS_DIR, sets)
    before = listing(sets)
    proc = run_command("0.5.999", sets_dir=sets)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "sglang==0.5.999 has no wheel for Python 3.12" in proc.stderr
    assert "No matching distribution found for sglang==0.5.999" in proc.stderr
    assert "Nothing was written." in proc.stderr and listing(sets) == before


def fake_index(root: Path, wheels: list[tuple[str, str, list[str]]], sglang_files: dict | None = None) -> str:
    """TEST DOUBLE: a local PEP 503 index holding empty wheels with the given requirements (and, for sglang,
    the given files), so that pip's real resolver meets a conflict, or a source this reader cannot read."""
    (root / "w").mkdir(parents=True)
    links: dict[str, list[str]] = {}
    for name, version, requires in wheels:
        whl = rset.make_wheel(root / "w", name, version, "py3-none-any", requires)
        if name == "sglang" and sglang_files:
            with zipfile.ZipFile(whl, "a") as zf:
                for member, text in sglang_files.items():
                    zf.writestr(member, text)
        links.setdefault(name, []).append(f'<a href="../../w/{whl.name}">{whl.name}</a>')
    for name, anchors in links.items():
        (root / "simple" / name).mkdir(parents=True)
        (root / "simple" / name / "index.html").write_text("\n".join(anchors))
    return (root / "simple").as_uri()


def test_a_conflict_fails_naming_it_and_writes_nothing(tmp_path, own_cache):
    index = fake_index(tmp_path / "index", [
        ("sglang", "0.5.999", ["torch==9.9.9", "flashinfer-python==1.0", "transformers==1.0"]),
        ("torch", "9.9.9", []), ("flashinfer-python", "1.0", ["tokenizers>=2"]),
        ("transformers", "1.0", ["tokenizers<2"]), ("tokenizers", "1.0", []), ("tokenizers", "2.0", [])])
    sets = tmp_path / "sets"
    shutil.copytree(SETS_DIR, sets)
    before = listing(sets)
    proc = run_command("0.5.999", "--index-url", index, "--cache-dir", str(own_cache), sets_dir=sets)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "The conflict is caused by:" in proc.stderr, proc.stderr[-3000:]
    assert "flashinfer-python 1.0 depends on tokenizers>=2" in proc.stderr
    assert "transformers 1.0 depends on tokenizers<2" in proc.stderr
    assert "Nothing was written." in proc.stderr and listing(sets) == before


def test_a_release_whose_source_cannot_be_read_fails_naming_the_file_and_writes_nothing(tmp_path, own_cache):
    index = fake_index(tmp_path / "index", [
        ("sglang", "0.5.999", ["torch==9.9.9", "flashinfer-python==1.0"]), ("torch", "9.9.9", []),
        ("flashinfer-python", "1.0", [])], sglang_files={"sglang/__init__.py": ""})
    sets = tmp_path / "sets"
    shutil.copytree(SETS_DIR, sets)
    before = listing(sets)
    proc = run_command("0.5.999", "--index-url", index, "--cache-dir", str(own_cache), sets_dir=sets)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "has no sglang/srt/server_args.py" in proc.stderr, proc.stderr[-3000:]
    assert "Nothing was written." in proc.stderr and listing(sets) == before


def test_a_conflicting_pin_fails_naming_the_conflict(specs, tmp_path):
    """The role's spec resolved by `sglang_release.py resolve --spec` (the check an operator runs before an
    upgrade), with an extra pin that conflicts. Never cached: pip's resolver is asked every time, and must refuse."""
    spec = copy.deepcopy(specs["0.5.17"])
    spec["pip"]["extra_packages"] = ["transformers==4.57.1"]  # 0.5.9's, beside 0.5.17
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    env["PIP_CONFIG_FILE"] = os.devnull  # PyPI's answer, not this machine's pip configuration
    proc = subprocess.run([sys.executable, str(ROOT / "roles/sglang_build/files/sglang_release.py"), "resolve",
                           "--spec", str(spec_file), "--python-version", TARGET["python_version"],
                           "--glibc", TARGET["glibc"], "--pip-arg=--use-feature=fast-deps"],
                          capture_output=True, text=True, env=env, timeout=1500, check=False)
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and result["failed"]
    assert "The user requested transformers==4.57.1" in result["msg"], result["msg"]
    assert "sglang 0.5.17 depends on transformers==5.12.1" in result["msg"], result["msg"]
