"""Every JIT and compile cache the server's libraries keep lives under sglang_server_cache_dir (issue 42, item 3).

The environment file is rendered by the role's own template and tables (role_render: Ansible's Templar); the
cache variables are read from the pinned releases' own code (their PyPI wheels): a release that reads a new
cache directory from the environment fails here until the role sets it.
"""

from __future__ import annotations

import re
import zipfile

import pytest
import role_render as rr
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

import sglang_sources

CACHE_DIR = "/var/cache/sglang"
# A cache-directory variable, read by name ("NAME" in os.environ.get/getenv/setdefault or a dict of them) or
# declared in SGLang's registry of the variables its code reads (srt/environ.py: NAME = EnvStr(...)).
CACHE_NAME = r"[A-Z][A-Z0-9_]*(?:CACHE_DIR|CACHE_PATH|CACHE_ROOT|CACHE_HOME|WORKSPACE_BASE|EXTENSIONS_DIR)"
READ = re.compile(rf"[\"']({CACHE_NAME})[\"']|^\s+({CACHE_NAME})\s*=\s*Env", re.M)
# Code that does not serve a language model (tests, benchmarks, the diffusion server).
NOT_SERVING = ("sglang/test/", "sglang/benchmark/", "sglang/multimodal_gen/")
# Names SGLang derives from another one it reads (set here, they would be overridden or are under it).
DERIVED = {"DG_JIT_CACHE_DIR": "SGLANG_DG_CACHE_DIR",  # compile_utils.py sets it from SGLANG_DG_CACHE_DIR
           "SGLANG_CUTE_AOT_CACHE_DIR": "SGLANG_CACHE_DIR"}  # 0.5.23: a subdirectory of SGLANG_CACHE_DIR


def env_file(**settings) -> dict[str, str]:
    """The environment file as the role renders it (templates/sglang-server.env.j2), as name -> value."""
    variables = {**rr.yaml_file(rr.SERVER / "defaults" / "main.yml"), **rr.yaml_file(rr.EXAMPLE), **settings,
                 **rr.yaml_file(rr.SERVER / "vars" / "main.yml"), **rr.TASK_FACTS,
                 "__sglang_server_release_features": {}, "ansible_facts": {"ansible_local": {}},
                 "ansible_managed": "managed", "sglang_common_api_key": "", "sglang_server_hf_token": ""}
    templar = Templar(loader=DataLoader(), variables=rr.trust(variables))
    text = templar.template(trust_as_template((rr.SERVER / "templates" / "sglang-server.env.j2").read_text()))
    return {key: value.strip('"') for key, value in
            (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))}


def cache_names_read(version: str) -> set[str]:
    with zipfile.ZipFile(sglang_sources.wheel(version, "3.11")) as whl:
        names = set()
        for member in whl.namelist():
            if member.endswith(".py") and member.startswith("sglang/") and not member.startswith(NOT_SERVING):
                for found in READ.finditer(whl.read(member).decode("utf-8", "replace")):
                    names.add(found.group(1) or found.group(2))
    return names


def test_every_cache_is_under_the_cache_dir():
    env = env_file()
    caches = {k: v for k, v in env.items() if re.fullmatch(CACHE_NAME, k)}
    assert {"TVM_FFI_CACHE_DIR", "SGLANG_CACHE_DIR", "SGLANG_JIT_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "CUDA_CACHE_PATH",
            "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
            "FLASHINFER_WORKSPACE_BASE", "TORCH_EXTENSIONS_DIR", "TILELANG_CACHE_DIR", "XDG_CACHE_HOME"} <= set(caches)
    assert env["TVM_FFI_CACHE_DIR"] == f"{CACHE_DIR}/tvm-ffi" and env["XDG_CACHE_HOME"] == CACHE_DIR
    assert all(v == CACHE_DIR or v.startswith(CACHE_DIR + "/") for v in caches.values()), caches
    # No two caches share a directory (but SGLang 0.5.23's JIT, inside SGLang's own, as its default has it).
    assert len(set(caches.values())) == len(caches)
    assert env_file(sglang_server_cache_dir="/srv/cache")["TVM_FFI_CACHE_DIR"] == "/srv/cache/tvm-ffi"


def test_a_value_given_in_the_servers_environment_comes_later_and_wins():
    text = list(env_file(sglang_server_env={"TVM_FFI_CACHE_DIR": "/elsewhere"}).items())
    assert ("TVM_FFI_CACHE_DIR", "/elsewhere") in text  # the dict keeps the last value, as systemd does


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_every_cache_the_release_reads_is_set(version):
    read = cache_names_read(version)
    rendered = set(env_file())
    assert {"TRITON_CACHE_DIR", "SGLANG_CACHE_DIR", "SGLANG_DG_CACHE_DIR"} <= read  # the reader finds them
    assert not (read - set(DERIVED)) - rendered, sorted((read - set(DERIVED)) - rendered)
    assert all(DERIVED[name] in rendered for name in read & set(DERIVED))


def test_the_releases_defaults_that_the_role_replaces():
    """What each release would use unset: under the home (kept, but outside the cache dir) or /tmp (emptied at
    every start by the unit's PrivateTmp)."""
    with zipfile.ZipFile(sglang_sources.wheel("0.5.17", "3.11")) as whl:
        jit = whl.read("sglang/kernels/jit/utils/compile.py").decode()
        cute = whl.read("sglang/kernels/ops/attention/flash_attn/cute/cache_utils.py").decode()
    assert 'os.environ.get("TVM_FFI_CACHE_DIR", "~/.cache/tvm-ffi")' in jit
    assert "tempfile.gettempdir()" in cute and '"FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"' in cute
    with zipfile.ZipFile(sglang_sources.wheel("0.5.23", "3.11")) as whl:
        cache = whl.read("sglang/kernels/jit/utils/compile/cache.py").decode()
    assert 'envs.SGLANG_JIT_CACHE_DIR.get() or "~/.cache/sglang/jit"' in cache
