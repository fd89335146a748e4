"""What files/sglang_release_source.py reads from a release's own wheel (never imported), checked two ways:

- against the real thing: the flags of releases this machine can import (tests/harness/serverargs_release.py:
  0.5.9 and 0.5.17 with their import closure) are exactly the option strings, aliases, destinations and
  defaults their own `ServerArgs.add_cli_args` registers;
- against the facts issue 39 names, read from the committed set files (test_release_sets.py proves each
  file's `source` is what the reader reads from the release's wheel now): `--cuda-graph-max-bs` gone in
  0.5.23 (an ambiguous prefix there), SGLANG_ENABLE_SPEC_V2 read by 0.5.9 only, the PCIe IPC all-reduce's
  variable read by 0.5.23 only, /get_server_info deprecated for /server_info, /get_load removed, the MLA
  draft served from 0.5.17 on, the sampler's FlashInfer kernels from 0.5.17 on;

and on small TEST DOUBLE wheels for the rules themselves (a deprecation said in the help, an annotated
field, a source it cannot read).
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

import serverargs_release
import sources
from repo import ROOT, load

src = load("roles/sglang_build/files/sglang_release_source.py")
SETS_DIR = ROOT / "roles" / "sglang_build" / "files" / "release_sets"


def data(version: str) -> dict:
    return json.loads((SETS_DIR / f"{version}.json").read_text())


DUMP = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser()
ServerArgs.add_cli_args(p)
print(json.dumps({a.option_strings[0]: {"aliases": a.option_strings[1:], "dest": a.dest, "default": repr(a.default)}
                  for a in p._actions if a.option_strings and a.option_strings[0] != "-h"}))
"""


@pytest.mark.parametrize("version", [v for v in sources.SERVER_ARGS_CLOSURE if (SETS_DIR / f"{v}.json").exists()])
def test_the_flags_are_the_ones_the_release_registers(version):
    venv = serverargs_release.ensure(version)
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", DUMP], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    real, read = json.loads(proc.stdout), data(version)["source"]["flags"]
    assert sorted(read) == sorted(real)
    for flag, entry in read.items():
        assert entry.get("aliases", []) == real[flag]["aliases"] and entry["dest"] == real[flag]["dest"], flag
        if not isinstance(entry.get("default"), dict):  # {"expr": ...}: a default the reader does not evaluate
            assert repr(entry.get("default")) == real[flag]["default"], flag
    unread = [f for f, e in read.items() if isinstance(e.get("default"), dict)]
    assert len(unread) <= 5, unread  # 0.5.17: three argparse.SUPPRESS, one default_factory lambda


def test_the_cuda_graph_flags_of_issue_39():
    f17, f23 = data("0.5.17")["source"]["flags"], data("0.5.23")["source"]["flags"]
    assert f17["--cuda-graph-max-bs"]["deprecated"] == "Deprecated alias for --cuda-graph-max-bs-decode."
    assert "--cuda-graph-max-bs" not in f23 and {"--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"} <= set(f23)
    removed = {x["flag"]: x for x in data("0.5.23")["changes"]["flags"]["removed"]}
    assert removed["--cuda-graph-max-bs"]["now_prefix_of"] == ["--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"]
    assert "--cuda-graph-max-bs" in data("0.5.9")["source"]["flags"]
    for version in ("0.5.17", "0.5.23"):  # deprecated for --flashinfer-allreduce-fusion-backend
        assert "flashinfer-allreduce-fusion-backend" in data(version)["source"]["flags"][
            "--enable-flashinfer-allreduce-fusion"]["deprecated"]


def test_the_environment_variables_this_project_renders():
    env = {v: data(v)["source"]["env"] for v in ("0.5.9", "0.5.17", "0.5.23")}
    assert [env[v]["SGLANG_ENABLE_SPEC_V2"]["status"] for v in env] == ["read", "removed", "absent"]
    notice = env["0.5.17"]["SGLANG_ENABLE_SPEC_V2"]["references"][0]
    assert (notice["file"], notice["kind"]) == ("srt/arg_groups/speculative_hook.py", "removal-notice")
    assert [env[v]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"]["status"] for v in env] == ["absent", "absent", "read"]
    read = [r for r in env["0.5.23"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"]["references"] if r["kind"] == "envs.get"]
    assert read[0]["file"] == "srt/distributed/device_communicators/pcie_ipc_ar.py"
    assert env["0.5.23"]["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"]["declared"]["as"] == "EnvBool(False)"


def test_the_endpoints_the_roles_read():
    for version in ("0.5.9", "0.5.17", "0.5.23"):
        ep = data(version)["source"]["endpoints"]
        assert ep["/get_server_info"]["deprecated"]["use"] == "/server_info" and "deprecated" not in ep["/server_info"]
        assert ep["/metrics"] == {"methods": ["GET"], "file": "srt/utils/common.py", "mounted_by": "add_prometheus_middleware"}
        assert ep["/generate"]["methods"] == ["POST", "PUT"] and "/health_generate" in ep and "/v1/loads" in ep
    assert data("0.5.17")["source"]["endpoints"]["/get_load"]["deprecated"]["use"] == "/v1/loads"
    assert "/get_load" not in data("0.5.23")["source"]["endpoints"]
    assert "/get_load" in data("0.5.23")["changes"]["endpoints"]["removed"]


def test_parsers_backends_sampler_and_architectures():
    for version in ("0.5.9", "0.5.17", "0.5.23"):
        s = data(version)["source"]
        assert "kimi_k2" in s["parsers"]["tool_call"] and "kimi_k2" in s["parsers"]["reasoning"]
        assert s["parsers"]["deprecated"] == {"tool_call": {"glm45": "glm", "qwen25": "qwen"}}
        # Kimi-K2.5 (MLA) with no --attention-backend: triton on SM120, fa3 on SM90, flashinfer on SM100
        # (DeepSeek's own override to trtllm_mla on SM100 is not read: the note says so).
        assert s["attention_defaults"]["mla"]["per_compute_capability"] == {"9.0": "fa3", "10.0": "flashinfer",
                                                                           "12.0": "triton"}
        assert "KimiK25ForConditionalGeneration" in s["architectures"]
    assert data("0.5.9")["source"]["flashinfer_sampling"] == []
    for version in ("0.5.17", "0.5.23"):
        assert data(version)["source"]["flashinfer_sampling"] == ["min_p_sampling_from_probs",
                                                                  "top_k_top_p_sampling_from_probs"]
        assert data(version)["source"]["architectures"]["Eagle3DeepseekV2ForCausalLM"] == "srt/models/kimi_k25_eagle3.py"
    assert "Eagle3DeepseekV2ForCausalLM" not in data("0.5.9")["source"]["architectures"]


# ----- the rules, on TEST DOUBLE wheels -----
SERVER_ARGS = '''
import dataclasses
from typing import Annotated as A, Optional, Literal

@dataclasses.dataclass
class ServerArgs:
    model_path: str = None
    tp_size: int = 1
    speculative_algorithm: A[Optional[str], "Speculative algorithm."] = None
    mode: A[Optional[Literal["a", "b"]], Arg(help="Mode.", aliases=["--the-mode"])] = None
    hidden: A[int, Arg(no_cli=True)] = 3
    enable_x: A[bool, "Enable x."] = False

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", type=str, default=ServerArgs.model_path)
        parser.add_argument("--tp-size", type=int, default=ServerArgs.tp_size)
        parser.add_argument("--old-flag", action="store_true", help="Deprecated. Use --mode instead.")
        parser.add_argument("--quiet-flag", action="store_true", help="The fallback to --x is deprecated.")
'''
HTTP = '''
from fastapi import FastAPI
app = FastAPI()

@app.get("/health")
async def health():
    return {}

@app.api_route("/generate", methods=["POST", "PUT"])
async def generate():
    return {}

@app.get("/get_info")
async def get_info():
    """Get the information (deprecated - use /info instead)."""
'''


def wheel(tmp_path: Path, files: dict) -> Path:
    path = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in files.items():
            zf.writestr(member, text)
    return path


def test_the_reader_rules_on_a_test_double(tmp_path):
    w = src.Wheel(wheel(tmp_path, {"sglang/srt/server_args.py": SERVER_ARGS,
                                   "sglang/srt/entrypoints/http_server.py": HTTP}))
    flags = src.server_flags(w)
    assert sorted(flags) == ["--enable-x", "--mode", "--model-path", "--old-flag", "--quiet-flag",
                             "--speculative-algorithm", "--tp-size"]  # --hidden: no_cli
    assert flags["--model-path"]["aliases"] == ["--model"] and flags["--tp-size"]["default"] == 1
    assert flags["--mode"] == {"aliases": ["--the-mode"], "dest": "mode", "type": "Optional[Literal['a', 'b']]",
                               "choices": ["a", "b"], "file": "srt/server_args.py"}
    assert flags["--enable-x"]["action"] == "store_true" and flags["--enable-x"]["default"] is False
    assert flags["--old-flag"]["deprecated"] == "Deprecated. Use --mode instead."
    assert "deprecated" not in flags["--quiet-flag"]  # says another thing is deprecated, not itself
    routes = src.endpoints(w)
    assert routes["/generate"]["methods"] == ["POST", "PUT"]
    assert routes["/get_info"]["deprecated"] == {"note": "Get the information (deprecated - use /info instead).",
                                                 "use": "/info"}


def test_a_source_the_reader_cannot_read_is_refused_naming_it(tmp_path):
    bare = src.Wheel(wheel(tmp_path, {"sglang/srt/server_args.py": "X = 1\n",
                                      "sglang/srt/entrypoints/http_server.py": HTTP}))
    with pytest.raises(src.SourceError, match=r"read 0 flags from srt/server_args.py .* none of them --model-path"):
        src.server_flags(bare)
    (tmp_path / "b").mkdir()
    routes = src.Wheel(wheel(tmp_path / "b", {"sglang/srt/entrypoints/http_server.py": "app = None\n"}))
    with pytest.raises(src.SourceError, match=r"found 0 routes in srt/entrypoints/http_server.py, not /generate"):
        src.endpoints(routes)
