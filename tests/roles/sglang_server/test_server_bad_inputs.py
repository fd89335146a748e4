"""Bad sglang_server input fails before any change on a real (container) host, naming the variable."""

from __future__ import annotations

import json

import pytest

from repo import ROOT
from testhost import SNAPSHOT

PLAYBOOK = ROOT / "playbooks" / "server.yml"

CASES = [
    ("tp-zero", {"sglang_server_tp_size": 0}, "sglang_server_tp_size"),
    ("tp-not-dividing-gpus", {"sglang_server_tp_size": 3}, "sglang_server_tp_size"),
    ("tp-wrong-type", {"sglang_server_tp_size": "eight"}, "sglang_server_tp_size"),
    ("unknown-algorithm", {"sglang_server_speculative_algorithm": "EAGLE4"}, "sglang_server_speculative_algorithm"),
    ("port-out-of-range", {"sglang_server_port": 70000}, "sglang_server_port"),
    ("public-bind-without-key", {"sglang_server_host": "0.0.0.0"}, "sglang_server_api_key is empty"),
    ("eagle3-without-draft", {"sglang_server_staged_draft_model": "", "sglang_server_speculative_draft_model_path": ""},
     "sglang_server_speculative_draft_model_path"),
    ("draft-model-hub-id", {"sglang_server_speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3"},
     "sglang_server_speculative_draft_model_path"),
    ("mem-fraction-above-one", {"sglang_server_mem_fraction_static": 1.5}, "sglang_server_mem_fraction_static"),
    ("api-key-in-extra-args", {"sglang_server_extra_args": ["--api-key", "leak"]}, "sglang_server_extra_args"),
    ("readiness-step-above-timeout", {"sglang_server_readiness_timeout": 60, "sglang_server_readiness_step": 120},
     "sglang_server_readiness_timeout"),
]


@pytest.mark.parametrize("extra,expect", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_fails_before_any_change(testhost, run_playbook, extra, expect):
    host = testhost
    before = host.sh(SNAPSHOT).stdout
    proc = run_playbook(host, PLAYBOOK, "-e", json.dumps(extra))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert expect in out, out[-3000:]
    assert "changed=0" in out, out[-3000:]
    assert host.sh(SNAPSHOT).stdout == before, "the host changed"
    if "leak" in json.dumps(extra):
        assert "leak" not in out, "a refused secret was printed"
