"""containers.conf is merged, not overwritten: other settings of the machine stay."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "harness"))

from hostsetup import CONTAINERS_SETTINGS, merge_ini  # noqa: E402


def test_empty_file_gets_both_sections():
    out = merge_ini("", CONTAINERS_SETTINGS)
    assert '[containers]\ndefault_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]' in out
    assert '[engine]\nruntime = "runc"' in out


def test_existing_values_replaced_in_place_and_others_kept():
    text = '[containers]\nlog_driver = "k8s-file"\ndefault_ulimits = []\n\n[engine]\n# comment\nruntime = "crun"\nevents_logger = "file"\n'
    out = merge_ini(text, CONTAINERS_SETTINGS)
    assert 'log_driver = "k8s-file"' in out and 'events_logger = "file"' in out and "# comment" in out
    assert 'runtime = "crun"' not in out and out.count("runtime =") == 1
    assert out.count("default_ulimits =") == 1


def test_merge_is_idempotent():
    once = merge_ini('[network]\nx = 1\n', CONTAINERS_SETTINGS)
    assert merge_ini(once, CONTAINERS_SETTINGS) == once
