"""The page-cache warm-up (roles/sglang_server/files/sglang_page_cache_warm.py): what it reads, when it reads
nothing and why, on real files of this machine's disk (residency by mincore, dropped with posix_fadvise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repo import ROOT, load

TOOL = ROOT / "roles" / "sglang_server" / "files" / "sglang_page_cache_warm.py"
warm = load("roles/sglang_server/files/sglang_page_cache_warm.py")
MIB = 1 << 20
MEMINFO = "MemTotal:       131072000 kB\nMemFree:         1000000 kB\nMemAvailable:   {} kB\n"


def model_dir(root: Path, shards: int = 3, mib: int = 4) -> Path:
    d = root / "model"
    d.mkdir()
    for i in range(shards):
        (d / f"model-{i + 1:05d}-of-{shards:05d}.safetensors").write_bytes(os.urandom(mib * MIB))
    (d / "config.json").write_text("{}")
    (d / "README.md").write_text("never read")
    return d


def drop(paths) -> bool:
    """The files' pages dropped (written back first); False where the filesystem keeps them (tmpfs)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return all(warm.resident_bytes(p) == 0 for p in paths if p.stat().st_size)


@pytest.fixture
def disk_dir():
    """A directory on a disk-backed filesystem (tmp_path may be a tmpfs, whose pages never leave)."""
    base = Path(os.environ.get("PAGE_CACHE_TEST_DIR", "/var/tmp"))
    d = base / f"page-cache-warm-{os.getpid()}"
    d.mkdir(parents=True, exist_ok=True)
    yield d
    for path in sorted(d.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    d.rmdir()


def test_the_files_a_loader_opens_largest_first_each_once(tmp_path):
    d = model_dir(tmp_path, shards=2, mib=1)
    (d / "same.safetensors").symlink_to(d / "model-00001-of-00002.safetensors")
    (d / "blob.part").write_bytes(b"x")
    files = warm.model_files([d, d])
    assert [p.name for p in files] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                       "config.json"]


def test_the_plan_reads_only_what_fits():
    gib = 1 << 30
    assert warm.plan(10 * gib, 10 * gib, 0, 0)[0] == "resident"
    status, why = warm.plan(100 * gib, 20 * gib, 90 * gib, 16 * gib)
    assert status == "skipped" and "85.90 GB to read do not fit: 90.0 GiB available (MemAvailable)" in why
    assert "leaves 74.0 GiB" in why
    assert warm.plan(100 * gib, 40 * gib, 90 * gib, 16 * gib) == ("read", "64.42 GB to read, 74.0 GiB of room")
    assert warm.mem_available(MEMINFO.format(2048)) == 2048 * 1024


def test_reads_what_is_missing_into_the_page_cache(disk_dir):
    d = model_dir(disk_dir)
    shards = sorted(d.glob("*.safetensors"))
    if not drop(shards):
        pytest.skip(f"{disk_dir} keeps its pages (tmpfs?): set PAGE_CACHE_TEST_DIR to a disk")
    result = warm.warm([d], reserve=0, threads=2, every=0.0)
    assert result["status"] == "read" and result["files"] == 4
    assert result["resident_before"] < 3 * MIB and result["resident_after"] == result["bytes"]
    assert result["read_bytes"] >= 12 * MIB and result["gb_per_s"] > 0
    again = warm.warm([d], reserve=0, threads=2, every=0.0)
    assert again["status"] == "resident" and again["read_bytes"] == 0


def test_reads_nothing_where_it_cannot_fit_and_says_why(disk_dir):
    d = model_dir(disk_dir)
    shards = sorted(d.glob("*.safetensors"))
    if not drop(shards):
        pytest.skip(f"{disk_dir} keeps its pages (tmpfs?)")
    result = warm.warm([d], reserve=1 << 30, threads=2, every=0.0, meminfo=MEMINFO.format(1024 * 1024 + 8 * 1024))
    assert result["status"] == "skipped" and "do not fit" in result["why"]
    assert result["read_bytes"] == 0 and all(warm.resident_bytes(p) == 0 for p in shards)


def test_the_command_line(tmp_path, disk_dir):
    d = model_dir(disk_dir, shards=1)
    out = tmp_path / "warm.json"
    done = subprocess.run([sys.executable, str(TOOL), str(d), "--dry-run", "--json", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(out.read_text())
    done = subprocess.run([sys.executable, str(TOOL), str(tmp_path / "none")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and json.loads(done.stdout)["status"] == "error"


def test_the_role_reads_the_target_and_the_draft_it_loads():
    rr = load("tests/roles/sglang_server/role_render.py")

    def argv(**settings):
        variables = {**rr.yaml_file(rr.SERVER / "defaults" / "main.yml"), **rr.yaml_file(rr.EXAMPLE), **settings,
                     **rr.yaml_file(rr.SERVER / "vars" / "main.yml"), **rr.TASK_FACTS}
        return rr.render(variables, "__sglang_server_page_cache_argv")["__sglang_server_page_cache_argv"]

    assert argv() == ["/opt/sglang/current/venv/bin/python", "-I", "/opt/sglang/bin/sglang_page_cache_warm.py",
                      "/var/lib/sglang/models/target", "/var/lib/sglang/models/draft", "--reserve-gib", "16",
                      "--progress-s", "30"]
    assert argv(sglang_server_speculative_algorithm="", sglang_server_page_cache_reserve_gib=64)[3:6] == [
        "/var/lib/sglang/models/target", "--reserve-gib", "64"]
