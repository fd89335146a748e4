"""The simulator's (TEST ONLY) slowdown per release: <release>/sim-slowdown-factor, found from the
package SGLANG_SIM_SGLANG_DIR names through the release's venv, multiplies SGLANG_SIM_SLOWDOWN_FACTOR.
What the canary tests of molecule/multihost make a slower release with."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from repo import load

settings = load("molecule/resources/roles/sglang_simulator/files/sglang_sim/settings.py")
sglang_dir = load("molecule/resources/roles/sglang_simulator/files/sglang_sim/sglang_dir.py")


def make_release(root: Path, name: str, factor: str | None = None) -> Path:
    """A release laid out as sglang_build makes one: <release>/venv (pyvenv.cfg) with sglang in site-packages."""
    release = root / "releases" / name
    package = release / "venv" / "lib" / "python3.11" / "site-packages" / "sglang"
    (package / "srt").mkdir(parents=True)
    (release / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    if factor is not None:
        (release / "sim-slowdown-factor").write_text(factor + "\n")
    return release


def package_through_current(root: Path, release: Path) -> Path:
    """The package as the unit reaches it: through <root>/current (relinked, like sglang_build)."""
    current = root / "current"
    if current.is_symlink():
        current.unlink()
    current.symlink_to(release)
    return current / "venv" / "lib" / "python3.11" / "site-packages" / "sglang"


def test_the_release_file_multiplies_the_slowdown_factor(tmp_path: Path) -> None:
    slow = make_release(tmp_path, "r2-slow", "1.25")
    env = {"SGLANG_SIM_SGLANG_DIR": str(package_through_current(tmp_path, slow)), "SGLANG_SIM_SLOWDOWN_FACTOR": "2"}
    got = settings.SimSettings.from_env(env)
    assert got.release_slowdown_factor == 1.25
    assert got.slowdown_factor == pytest.approx(2.5)
    assert got.as_json()["release_slowdown_factor"] == 1.25


def test_it_follows_current_to_the_release_it_points_at(tmp_path: Path) -> None:
    fast, slow = make_release(tmp_path, "r1", None), make_release(tmp_path, "r2-slow", "1.25")
    package = package_through_current(tmp_path, slow)
    env = {"SGLANG_SIM_SGLANG_DIR": str(package)}
    assert sglang_dir.release_of(package) == slow.resolve()
    assert settings.SimSettings.from_env(env).slowdown_factor == pytest.approx(1.25)
    package_through_current(tmp_path, fast)  # current switched back: the same path, the other release
    again = settings.SimSettings.from_env(env)
    assert sglang_dir.release_of(package) == fast.resolve()
    assert again.slowdown_factor == 1.0 and again.release_slowdown_factor is None


def test_without_the_file_or_outside_a_venv_nothing_changes(tmp_path: Path) -> None:
    release = make_release(tmp_path, "r1")
    package = release / "venv" / "lib" / "python3.11" / "site-packages" / "sglang"
    assert settings.SimSettings.from_env({"SGLANG_SIM_SGLANG_DIR": str(package)}).slowdown_factor == 1.0
    loose = tmp_path / "loose" / "sglang"  # an unpacked sdist: no venv above it, so no release
    (loose / "srt").mkdir(parents=True)
    (tmp_path / "loose" / "sim-slowdown-factor").write_text("3")
    assert sglang_dir.release_of(loose) is None
    assert settings.SimSettings.from_env({"SGLANG_SIM_SGLANG_DIR": str(loose)}).slowdown_factor == 1.0
    assert settings.SimSettings.from_env({}).release_slowdown_factor is None


@pytest.mark.parametrize("content", ["fast", "0", "-1", "nan", "inf", ""])
def test_a_bad_release_file_is_a_configuration_error(tmp_path: Path, content: str) -> None:
    release = make_release(tmp_path, "r-bad", content)
    package = release / "venv" / "lib" / "python3.11" / "site-packages" / "sglang"
    with pytest.raises(settings.SimConfigError, match=re.escape(str(release / "sim-slowdown-factor"))):
        settings.SimSettings.from_env({"SGLANG_SIM_SGLANG_DIR": str(package)})


def test_a_running_simulator_reports_the_release_factor(start_sim, tmp_path: Path) -> None:
    """Started as the unit starts it: the logged settings carry the release's factor (exit 2 on a bad one)."""
    slow = make_release(tmp_path / "opt", "r2-slow", "1.25")
    package = package_through_current(tmp_path / "opt", slow)
    sim = start_sim(env={"SGLANG_SIM_SGLANG_DIR": str(package)})
    logged = json.loads(re.search(r"settings (\{.*\})$", sim.stdout(), re.MULTILINE).group(1))
    assert logged["release_slowdown_factor"] == 1.25 and logged["slowdown_factor"] == 1.25
    (slow / "sim-slowdown-factor").write_text("slow")
    bad = start_sim(env={"SGLANG_SIM_SGLANG_DIR": str(package)}, wait=None)
    assert bad.wait_exit() == 2
    assert "sim-slowdown-factor holds 'slow', not a number" in bad.stderr()


def test_auto_finds_the_package_of_the_running_python_through_current(tmp_path: Path, monkeypatch) -> None:
    """SGLANG_SIM_SGLANG_DIR=auto (what the test inventory sets): the sglang package the simulator's own
    Python finds, as the unit runs it from <root>/current/venv; so the release current points at counts."""
    import importlib
    import sys

    slow = make_release(tmp_path, "r2-slow", "1.25")
    site = package_through_current(tmp_path, slow).parent
    (site / "sglang" / "__init__.py").write_text("")
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    monkeypatch.delitem(sys.modules, "sglang", raising=False)
    importlib.invalidate_caches()
    found = settings.SimSettings.from_env({"SGLANG_SIM_SGLANG_DIR": "auto", "SGLANG_SIM_SLOWDOWN_FACTOR": "2"})
    assert found.sglang_dir == site / "sglang"
    assert found.release_slowdown_factor == 1.25 and found.slowdown_factor == 2.5
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(site)])
    importlib.invalidate_caches()
    assert settings.SimSettings.from_env({"SGLANG_SIM_SGLANG_DIR": "auto"}).sglang_dir is None
