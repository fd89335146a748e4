"""Bad sglang_server input fails before any change on a real (container) host, naming the variable.

The cases run as one run of the real playbook, one inventory host per case (tests/harness/bad_inputs.py).
"""

from __future__ import annotations

import pytest

import bad_inputs
from repo import ROOT

PLAYBOOK = ROOT / "playbooks" / "server.yml"

CASES = [
    ("tp-zero", {"sglang_server_tp_size": 0}, "sglang_server_tp_size"),
    ("tp-not-dividing-gpus", {"sglang_server_tp_size": 3}, "sglang_server_tp_size"),
    ("tp-wrong-type", {"sglang_server_tp_size": "eight"}, "sglang_server_tp_size"),
    ("unknown-algorithm", {"sglang_server_speculative_algorithm": "EAGLE4"}, "sglang_server_speculative_algorithm"),
    ("port-out-of-range", {"sglang_server_port": 70000}, "sglang_server_port"),
    ("public-bind-without-key", {"sglang_server_host": "0.0.0.0"}, "sglang_common_api_key is empty"),
    ("api-key-under-its-old-name", {"sglang_server_api_key": "old-key-3"},
     "sglang_server_api_key is no longer read: set sglang_common_api_key instead"),
    ("eagle3-without-draft", {"sglang_server_staged_draft_model": "", "sglang_server_speculative_draft_model_path": ""},
     "sglang_server_speculative_draft_model_path"),
    ("draft-model-hub-id", {"sglang_server_speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3"},
     "sglang_server_speculative_draft_model_path"),
    ("models-root-inside-server-home", {"sglang_common_models_root": "/var/lib/sglang/models"},
     "/var/lib/sglang/models is inside /var/lib/sglang or /var/cache/sglang, which the server may write"),
    ("cuda-graph-max-bs-a-word", {"sglang_server_cuda_graph_max_bs": "all"}, "sglang_server_cuda_graph_max_bs must be auto"),
    ("prefill-graphs-zero-tokens", {"sglang_server_cuda_graph_max_tokens_prefill": 0},
     "sglang_server_cuda_graph_max_tokens_prefill and"),
    ("mem-fraction-above-one", {"sglang_server_mem_fraction_static": 1.5}, "sglang_server_mem_fraction_static"),
    ("api-key-in-extra-args", {"sglang_server_extra_args": ["--api-key", "leak"]}, "sglang_server_extra_args"),
    ("readiness-step-above-timeout", {"sglang_server_readiness_timeout": 60, "sglang_server_readiness_step": 120},
     "sglang_server_readiness_timeout"),
    ("launch-module-not-a-module", {"sglang_server_launch_module": "sglang.launch_server; true"},
     "sglang_server_launch_module (sglang.launch_server; true) must be a dotted Python module name"),
    ("launch-env-carries-a-secret", {"sglang_server_launch_env": {"HF_TOKEN": "hf_leak"}},
     "the names of sglang_server_launch_env (HF_TOKEN)"),
]


@pytest.fixture(scope="module")
def batch(testhost, tmp_path_factory):
    return bad_inputs.run(testhost, PLAYBOOK, {c[0]: c[1] for c in CASES}, tmp_path_factory.mktemp("inventory"))


@pytest.mark.parametrize("case,expect", [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_fails_before_any_change(batch, case, expect):
    assert batch.returncode != 0, batch.out[-3000:]
    assert expect in batch.failure(case), batch.out[-4000:]
    assert batch.recap[bad_inputs.alias(case)]["changed"] == 0, batch.out[-3000:]
    assert batch.unchanged, "the host changed"


def test_a_refused_secret_is_never_printed(batch):
    assert "leak" not in batch.out, "a refused secret was printed"
