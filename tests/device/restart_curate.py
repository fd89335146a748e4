"""Turn tests/device/restart_proof.py's packs into docs/validation/restart-h200/.

Writes, from the packs (each a .tar.gz of a WORK directory, named by --pack LABEL=FILE):
  figures.json              per machine: the GPU, the checkpoint, the bandwidths; per start: its machine,
                            whether the page cache was dropped, the loader, the proof's and the log's ready
                            time, the marks and segments the role's reader found, every weight load and
                            CUDA graph, the JIT caches' new files (per directory), the page cache's residency;
                            the AFTER plan's role settings, page-cache warm-up and bench points where a start had them
  starts/<label>-<start>.phases.json   the reader's whole output for the start
  starts/<label>-<start>.caches.json   the caches after the start and what it added
  starts/<label>-<start>.log.gz        the server's log
  machines/<label>-*                   bandwidth.json, the facts (GPU, disk, PCIe link, versions), the rendered
                                       unit and environment of the first start
Usage: python3 tests/device/restart_curate.py LABEL=PACK... --out DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tarfile
from pathlib import Path
from typing import Any


def members(pack: Path) -> dict[str, bytes]:
    with tarfile.open(pack) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()
                if m.isfile() and "/" in m.name}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("packs", nargs="+", help="LABEL=PACK (LABEL names the machine and call, e.g. h100-a)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    out = args.out
    for sub in ("starts", "machines"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"machines": {}, "starts": []}
    for item in args.packs:
        label, _, path = item.partition("=")
        files = members(Path(path))
        results = json.loads(files.get("results.json", b"{}"))
        machine = figures["machines"].setdefault(label, {})
        machine["gpu"] = results.get("gpu")
        for key in ("checkpoint", "bandwidth", "versions"):
            if key in results:
                machine[key] = results[key]
        for name in ("facts/gpu.csv", "facts/disk.txt", "facts/pcie.txt", "facts/os.txt", "facts/versions.log",
                     "facts/checkpoint.log", "bandwidth.json", "summary.txt"):
            if name in files:
                (out / "machines" / f"{label}-{Path(name).name}").write_bytes(files[name])
        renders = sorted(n for n in files if n.startswith("render/") and n.endswith((".service", ".env", ".json"))
                         and "vars-" not in n)
        for name in renders[:3]:
            (out / "machines" / f"{label}-{Path(name).name}").write_bytes(files[name])
        for start in results.get("starts", []):
            stem = f"{label}-{start['session']:02d}-{start['label']}"
            prefix = f"{start['session']:02d}-{start['label']}"
            if f"phases/{prefix}.json" in files:
                (out / "starts" / f"{stem}.phases.json").write_bytes(files[f"phases/{prefix}.json"])
            if f"caches/{prefix}.json" in files:
                (out / "starts" / f"{stem}.caches.json").write_bytes(files[f"caches/{prefix}.json"])
            log = files.get(f"server/{start['log']}")
            if log is not None:
                (out / "starts" / f"{stem}.log.gz").write_bytes(gzip.compress(log, mtime=0))
            new = {root: {k: d[k] for k in ("added", "added_bytes", "changed", "removed")} |
                   {"groups": sorted({g.split("/")[0] + ("/" + g.split("/")[1] if g.startswith(".cache") else "")
                                      for g in d["added_by_group"]})}
                   for root, d in start["new_during_start"].items()}
            figures["starts"].append({
                "machine": label, "gpu": results.get("gpu"), "start": start["label"], "session": start["session"],
                "page_cache_dropped": start["cold"], "drop": start["drop"], "tuned_loader": start["tuned_loader"],
                "resident_before_start_gb": start["resident_before_start_gb"],
                "resident_after_start_gb": start["resident_after_start_gb"],
                "ready_rc": start["ready"]["rc"], "ready_s_proof": start["ready_s_proof"],
                "ready_s_log": start["phases"]["ready_s"], "marks": start["phases"]["marks"],
                "segments": start["phases"]["phases"], "weights": start["phases"]["weights"],
                "cuda_graphs": start["phases"]["cuda_graphs"], "startup_timings": start["phases"]["startup_timings"],
                "jit_log_lines": start["phases"]["jit"], "errors": start["phases"]["errors"][:3],
                "jit_cache_files_added": new, "settings": start.get("settings", {}),
                "prewarm": start.get("prewarm"), "bench": start.get("bench")})
    (out / "figures.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(f"{len(figures['starts'])} starts from {len(args.packs)} packs into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
