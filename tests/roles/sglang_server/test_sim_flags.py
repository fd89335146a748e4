"""The simulator takes exactly SGLang 0.5.9's launch flags, from a table that cannot drift."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import requests

import gen_sim_flags
from simtruth import FLAGS_TABLE, REFERENCE_LAUNCH, clean_env, sim_command


def test_checked_in_table_matches_sdist(sdist: Path, tmp_path: Path) -> None:
    """Regenerating from the pinned sdist reproduces files/sglang_sim/flags.json byte for byte."""
    out = tmp_path / "flags.json"
    assert gen_sim_flags.main(["--sdist", str(sdist), "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == FLAGS_TABLE.read_text(encoding="utf-8"), (
        "molecule/resources/roles/sglang_simulator/files/sglang_sim/flags.json is stale: "
        "run tests/harness/gen_sim_flags.py --sdist " + str(sdist))


def test_table_describes_flags_the_reference_launch_uses() -> None:
    table = json.loads(FLAGS_TABLE.read_text(encoding="utf-8"))
    by_option = {opt: flag for flag in table["flags"] for opt in flag["options"]}
    assert by_option["--speculative-algorithm"]["choices"] == ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
    assert by_option["--tp-size"]["dest"] == "tensor_parallel_size"
    assert table["cli_renames"]["tensor_parallel_size"] == "tp_size"
    assert by_option["--trust-remote-code"]["kind"] == "store_true"
    assert by_option["--port"] == {"default": 30000, "dest": "port", "kind": "store", "options": ["--port"], "type": "int"}
    # Choices defined in other modules of the sdist were resolved, not left out.
    assert "kimi_k2" in by_option["--tool-call-parser"]["choices"]
    assert "kimi" in by_option["--reasoning-parser"]["choices"]


def run_sim_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*sim_command(), *args], capture_output=True, text=True, timeout=30,
                          env=clean_env({}))


def test_unknown_flag_is_an_argparse_error() -> None:
    proc = run_sim_cli("--model-path", "m", "--speculative-algo-typo", "EAGLE3")
    assert proc.returncode == 2
    assert "unrecognized arguments: --speculative-algo-typo" in proc.stderr


def test_bad_choice_and_missing_model_path_are_rejected() -> None:
    bad_choice = run_sim_cli("--model-path", "m", "--speculative-algorithm", "EAGLE4")
    assert bad_choice.returncode == 2 and "invalid choice: 'EAGLE4'" in bad_choice.stderr
    missing = run_sim_cli("--tp-size", "8")
    assert missing.returncode == 2 and "--model-path" in missing.stderr


def test_config_file_is_refused_not_ignored() -> None:
    """SGLang merges --config YAML into the flags; the simulator cannot, so it says so."""
    proc = run_sim_cli("--model-path", "m", "--config", "server.yaml")
    assert proc.returncode == 2 and "--config YAML files are not simulated" in proc.stderr


def test_help_says_it_is_a_test_double() -> None:
    proc = run_sim_cli("--help")
    assert proc.returncode == 0
    assert "SIMULATOR" in proc.stdout and "test double" in proc.stdout
    assert "--speculative-num-draft-tokens" in proc.stdout


def test_reference_launch_line_is_accepted_and_reported(start_sim) -> None:
    sim = start_sim(REFERENCE_LAUNCH[2:], model=REFERENCE_LAUNCH[1])
    info = requests.get(sim.url + "/get_server_info", timeout=5).json()
    assert info["simulator"] is True and info["version"] == "0.5.9"
    assert info["tp_size"] == 8 and "tensor_parallel_size" not in info
    assert info["model_path"] == "moonshotai/Kimi-K2.5" and info["trust_remote_code"] is True
    assert (info["speculative_algorithm"], info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == ("EAGLE3", 3, 1, 4)
    assert info["speculative_draft_model_path"] == "lightseekorg/kimi-k2.5-eagle3"
    assert info["mem_fraction_static"] == 0.9
    assert info["max_running_requests"] == 48  # SGLang's cap for EAGLE when not set
    assert "Max running requests is reset to 48" in sim.stdout()
    assert sim.stdout().splitlines()[0].split("] ", 1)[1].startswith("SGLang SIMULATOR (test double")


def test_prefix_abbreviation_works_like_sglang(start_sim) -> None:
    """SGLang's parser allows argparse prefixes: `--tp 4` is `--tp-size 4` (the notes mention it)."""
    sim = start_sim(["--tp", "4", "--speculative-algorithm", "NEXTN"])
    info = requests.get(sim.url + "/get_server_info", timeout=5).json()
    assert info["tp_size"] == 4
    assert info["speculative_algorithm"] == "EAGLE"  # NEXTN is an alias SGLang rewrites
