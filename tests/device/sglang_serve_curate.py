"""Turn sglang_serve_proof.py's packed results into the validation folder and the contract test's fixtures.

    python3 tests/device/sglang_serve_curate.py PROOF.tar.gz [NOISE-RUN.tar.gz] --sglang-wheel sglang-0.5.17-*.whl

docs/validation/sglang_serve-h200/ gets the proof's summary, results, facts, the role's render (its
log, the unit, the environment file), the server logs, every bench result, the tuning's report and
state, the noise and the /metrics check; a second proof run (one that only restarts for the noise)
adds its summary, results, bench results and noise with a "-noise" suffix. The README there is
written by hand. tests/roles/sglang_server/fixtures/sglang-<version>/ gets the recordings (raw HTTP
answers and index.json), the bad-flag and bad-value outputs and launch.json: the server's argv as
the role rendered it for the session that served, and the ServerArgs fields of that release (read
from the wheel's sglang/srt/server_args.py with ast), which the contract test needs to tell release
differences from drift.
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def server_args_fields(wheel: Path) -> tuple[str, list[str]]:
    with zipfile.ZipFile(wheel) as zf:
        source = zf.read("sglang/srt/server_args.py").decode()
        info = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA")).split("/")[0]
        version = info[len("sglang-"):-len(".dist-info")]
    cls = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    return version, [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def unpack(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "proof"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("proof", type=Path)
    ap.add_argument("noise", type=Path, nargs="?")
    ap.add_argument("--sglang-wheel", type=Path, required=True)
    ap.add_argument("--docs", type=Path, default=ROOT / "docs/validation/sglang_serve-h200")
    args = ap.parse_args()
    version, fields = server_args_fields(args.sglang_wheel)
    fixtures = ROOT / f"tests/roles/sglang_server/fixtures/sglang-{version}"
    with tempfile.TemporaryDirectory() as tmp:
        proof = unpack(args.proof, Path(tmp) / "a")
        docs = args.docs
        docs.mkdir(parents=True, exist_ok=True)
        copies = {"summary.txt": "summary.txt", "results.json": "results.json", "noise.json": "noise.json",
                  "recordings/metrics-check.json": "metrics-check.json", "tune/report.md": "tune-report.md",
                  "tune/state.json": "tune-state.json", "tune/winner.yml": "tune-winner.yml",
                  "tune/tune.png": "tune.png"}
        for name in ("gpu.csv", "nvidia-smi.txt", "os.txt", "python.txt", "versions.log", "models.log"):
            copies[f"facts/{name}"] = name
        for path in sorted((proof / "render").glob("ansible-*.log")) + sorted((proof / "render").glob("argv-*.json")):
            copies[f"render/{path.name}"] = f"render-{path.name}"
        for suffix in ("service", "env"):
            copies[f"render/sglang-server-start.{suffix}"] = f"sglang-server.{suffix}"
        for path in sorted((proof / "server").glob("*.log")):
            copies[f"server/{path.name}"] = path.name
        for path in sorted((proof / "bench").glob("*.json")):
            copies[f"bench/{path.name}"] = f"bench-{path.name}"
        for src, dest in copies.items():
            if (proof / src).exists():
                shutil.copy(proof / src, docs / dest)
        if args.noise:
            noise = unpack(args.noise, Path(tmp) / "b")
            for src, dest in {"summary.txt": "summary-noise.txt", "results.json": "results-noise.json",
                              "noise.json": "noise-noise.json"}.items():
                shutil.copy(noise / src, docs / dest)
            for path in sorted((noise / "bench").glob("*.json")):
                shutil.copy(path, docs / f"bench-noise-{path.name}")
            for path in sorted((noise / "server").glob("*.log")):
                shutil.copy(path, docs / f"noise-{path.name}")
        shutil.rmtree(fixtures, ignore_errors=True)
        fixtures.mkdir(parents=True)
        for path in (proof / "recordings").glob("*"):
            if path.suffix in (".http", ".json") and path.name != "metrics-check.json":
                shutil.copy(path, fixtures / path.name)
        for name in ("bad-flag.txt", "bad-value.txt"):
            shutil.copy(proof / "errors" / name, fixtures / name)
        results = json.loads((proof / "results.json").read_text())
        served = next(s for s in results["sessions"] if s["ready"]["rc"] == 0)
        (fixtures / "launch.json").write_text(json.dumps({
            "sglang_version": version, "session": served["session"], "label": served["label"],
            "argv": served["argv"], "server_args_fields": fields}, indent=1) + "\n")
    print(f"{docs}\n{fixtures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
