"""Turn the test bed's packs (tests/device/testbed.py on the H200) into docs/validation/testbed-h200/.

Writes, from one or more packs (each a .tar.gz of a WORK directory):
  figures.json        every session: release, settings, ready time, the start's phases from its log,
                      bench means and coefficients of variation; the noise within and across starts; for
                      the SmolLM2 sessions the greedy agreement of every pair and, for every pair scored
                      under teacher forcing, the top-1 agreement and the gaps where the argmax differs
  tokens/*.json.gz    the token-level recordings, compact: each prompt's ids, each session's greedy ids
                      with their output logprobs, and SGLang's raw input_token_logprobs/input_top_logprobs
                      of every teacher-forced reference (the request's input ids are prompt + reference)
  server/, bench/, correctness/, facts/: the servers' logs, the bench results, the probes, versions and
                      the import check, the rendered unit and environment
Usage: python3 tests/device/testbed_curate.py PACK... --out DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
import statistics
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from testbed import log_phases


def members(pack: Path) -> dict[str, bytes]:
    with tarfile.open(pack) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()
                if m.isfile() and "/" in m.name}


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def forced_stats(replies: dict[str, Any], reference: dict[str, list[int]]) -> dict[str, Any]:
    """Top-1 agreement and the gaps (candidate's top-1 logprob less its logprob of the reference token)."""
    scored = agree = 0
    gaps: list[float] = []
    for pid, item in replies.items():
        meta = (item.get("reply") or {}).get("meta_info") or {}
        tokens, tops = meta.get("input_token_logprobs") or [], meta.get("input_top_logprobs") or []
        for k, token in enumerate(reference.get(pid, [])):
            if k >= len(tops) or not tops[k] or tokens[k][0] is None:
                continue  # SGLang gives no logprob for the first position it scores
            if tokens[k][1] != token:
                raise SystemExit(f"{pid}: position {k} scored token {tokens[k][1]}, the reference has {token}")
            scored += 1
            if tops[k][0][1] == token:
                agree += 1
            else:
                gaps.append(round(tops[k][0][0] - tokens[k][0], 4))
    gaps.sort()
    share = agree / scored if scored else None
    return {"scored": scored, "top1": agree, "top1_share": round(share, 4) if share is not None else None,
            "top1_share_se": round(math.sqrt(share * (1 - share) / scored), 4) if scored else None,
            "disagreements": len(gaps), "gap_max": max(gaps, default=0.0),
            "gap_median": statistics.median(gaps) if gaps else 0.0,
            "gaps_above": {str(t): sum(g > t for g in gaps) for t in (0.25, 0.5, 1.0)}, "gaps": gaps}


def compact_tokens(data: dict[str, Any]) -> dict[str, Any]:
    """A session's recording without what the rest repeats (request ids, the replies' other timings)."""
    keep = ("input_token_logprobs", "input_top_logprobs", "output_token_logprobs", "output_top_logprobs",
            "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens")
    greedy = {pid: {"meta_info": {k: v for k, v in (g.get("reply") or {}).get("meta_info", {}).items() if k in keep},
                    "text": (g.get("reply") or {}).get("text"), "error": g.get("error")}
              for pid, g in data["greedy"].items()}
    forced = {ref: {pid: {"logprob_start_len": item.get("request", {}).get("logprob_start_len"),
                          "top_logprobs_num": item.get("request", {}).get("top_logprobs_num"),
                          "meta_info": {k: v for k, v in (item.get("reply") or {}).get("meta_info", {}).items()
                                        if k in keep}, "error": item.get("error")}
                    for pid, item in replies.items()} for ref, replies in data["teacher_forced"].items()}
    return {"label": data["label"], "release": data.get("release"), "prompt_ids": data["prompt_ids"],
            "greedy": greedy, "teacher_forced": forced,
            "about": "SGLang /generate replies (meta_info trimmed to the logprob fields); a teacher-forced "
                     "request's input_ids were prompt_ids + the reference session's greedy ids, "
                     "logprob_start_len = len(prompt_ids)"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("packs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    out = args.out
    for sub in ("tokens", "server", "bench", "correctness", "facts"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"sessions": [], "pairs": {}, "forced": {}}
    greedy: dict[str, dict[str, list[int]]] = {}
    for pack in args.packs:
        files = members(pack)
        results = json.loads(files["results.json"])
        tag = pack.name.split(".")[0]
        for name, data in files.items():
            sub, _, base = name.partition("/")
            if sub in ("server", "bench", "correctness") and "/" not in base:
                (out / sub / f"{tag}-{base}").write_bytes(data)
            elif name.startswith("facts/") and name.split("/")[1].startswith(("imports", "versions", "gpu", "os", "convert")):
                (out / "facts" / f"{tag}-{name.split('/')[1]}").write_bytes(data)
            elif name.startswith("render/") and name.endswith((".service", ".env", ".json")) and "vars-" not in name:
                (out / "facts" / f"{tag}-{name.split('/')[1]}").write_bytes(data)
            elif name == "summary.txt":
                (out / f"summary-{tag}.txt").write_bytes(data)
        for session in results["sessions"]:
            log = files.get(f"server/{session['log']}", b"").decode(errors="replace")
            benches = session.get("bench") or []
            figures["sessions"].append({
                "pack": tag, "session": session["session"], "label": session["label"],
                "release": session.get("release", "0.5.17"),
                "settings": {k: v for k, v in session["settings"].items()},
                "ready_rc": session["ready"]["rc"], "ready_s": session["ready"]["waited_s"],
                "phases": {k: v for k, v in log_phases(log).items() if k != "marks"},
                "bench": [{"mean_tok_s": round(b["mean"], 2), "cv": round(b["cv"], 5), "runs": len(b["tok_s"]),
                           "accept_length": b["accept_length"]} for b in benches]})
        for name, data in files.items():
            if name.startswith("tokens/") and name.endswith(".json") and name[7:9].isdigit():
                rec = json.loads(data)
                greedy[rec["label"]] = {pid: [t[1] for t in (g.get("reply") or {}).get("meta_info", {})
                                              .get("output_token_logprobs") or []] for pid, g in rec["greedy"].items()}
                for ref, replies in rec["teacher_forced"].items():
                    figures["forced"].setdefault(rec["label"], {})[ref] = replies
                compact = json.dumps(compact_tokens(rec), separators=(",", ":")).encode()
                (out / "tokens" / f"{rec['label']}.json.gz").write_bytes(gzip.compress(compact, 9, mtime=0))
            elif name == "tokens/hf-transformers.json":
                rec = json.loads(data)
                greedy["hf-transformers"] = {p["id"]: p["output_ids"] for p in rec["prompts"]}
                (out / "tokens" / "hf-transformers.json.gz").write_bytes(gzip.compress(data, 9, mtime=0))
            elif name == "tokens/prompts.json":
                (out / "tokens" / "prompts.json").write_bytes(data)
    labels = list(greedy)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            common = [p for p in greedy[a] if p in greedy[b]]
            divs = [first_divergence(greedy[a][p], greedy[b][p]) for p in common]
            figures["pairs"][f"{a} | {b}"] = {"prompts": len(common), "identical": sum(d is None for d in divs),
                                              "first_divergence": sorted(d for d in divs if d is not None)}
    forced = {}
    for cand, refs in figures.pop("forced").items():
        for ref, replies in refs.items():
            forced[f"{cand} scores {ref}"] = forced_stats(replies, greedy[ref])
    figures["forced"] = forced
    shape = [s for s in figures["sessions"] if s["label"].startswith("8b-eagle3") and s["bench"]]
    if len(shape) > 1:
        means = [s["bench"][0]["mean_tok_s"] for s in shape]
        figures["noise_8b_eagle3"] = {"starts": len(means), "means": means,
                                      "cv_across_starts": round(statistics.stdev(means) / statistics.fmean(means), 5),
                                      "cv_within": [s["bench"][0]["cv"] for s in shape]}
    (out / "figures.json").write_text(json.dumps(figures, indent=1) + "\n")
    for f in (out / "server").glob("*.log"):  # the logs, whole, compressed past the first of each kind
        if not f.name.endswith(("-server-1-8b-eagle3.log", "-server-1-smol-plain.log")):
            f.with_suffix(".log.gz").write_bytes(gzip.compress(f.read_bytes(), 9, mtime=0))
            f.unlink()
    shutil.rmtree(out / "bench" / "__pycache__", ignore_errors=True)
    print(json.dumps({"sessions": len(figures["sessions"]), "pairs": len(figures["pairs"]),
                      "forced": {k: (v["top1_share"], v["gap_max"]) for k, v in forced.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
