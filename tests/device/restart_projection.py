"""The reference host's expected restart (issue 42's acceptance), from the phases and rates measured on the test bed.

A projection, not a measurement: Kimi-K2.5 INT4 with its EAGLE-3 draft on 8x RTX PRO 6000 Blackwell (PCIe Gen5
x16), tp 8, restarted with the same release (JIT caches kept), from figures measured on one H100 of the lent
test bed (a 34 GB random-bf16 17B Llama, one GPU, tp 1: docs/validation/restart-h200/). Every number it uses is
either MEASURED (read from the figures files given, with the machine and start it came from) or an ASSUMPTION
(below, each with its value and why); nothing else enters.

The phase model, as the role's reader splits a start (roles/sglang_server/files/sglang_start_phases.py):

  ready = before weights (SGLang's own start: imports, scheduler processes, tokenizer, model built)
        + weights (max of: every rank's copy of the checkpoint out of the page cache, over the host's memory;
                   each GPU's share over its link at the rate SGLang 0.5.17's loader reached; they overlap, as
                   measured: the warm load took the link's time, not the sum)
        + INT4 repack (not measured: bf16 needs none; left as R)
        + draft (its init as measured + its bytes like the target's)
        + KV cache + CUDA graphs (target scaled by layers, draft as measured) + tail (HTTP up, warm-up, first 200)

Usage: restart_projection.py --after AFTER_FIGURES --bandwidth FIGURES:LABEL [--json OUT] [--markdown OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TARGET_S = 120.0  # the target: <= 2 minutes warm

# key: (value, unit, why). Ranges are (low, high).
ASSUMPTIONS: dict[str, tuple[Any, str, str]] = {
    "gpus": (8, "GPUs", "the reference host (README.md): 8x RTX PRO 6000 Blackwell, tp 8"),
    "checkpoint_gb": (547.0, "GB", "Kimi-K2.5's weights (README.md, roles/sglang_model/README.md)"),
    "draft_gb": (3.0, "GB", "README.md's 'about 550 GB for the Kimi-K2.5 weights and their draft' less 547 GB"),
    "layers": (61, "layers", "Kimi-K2.5's text model (DeepSeek-V3 architecture: 61 decoder layers; public "
                             "config, not read here) against the test bed's 40"),
    "rank_reads": (("its share", "the whole checkpoint"), "", "what each rank pulls out of the page cache: SGLang "
                   "0.5.17's default loader (weight_utils.py, buffered_multi_thread_safetensors_weights_iterator) "
                   "opens every shard on every rank with safetensors' safe_open and get_tensor, then the tensors' "
                   "weight_loader narrows them to the rank's slice and copies that to the GPU. Whether get_tensor "
                   "copies the whole tensor (the image's safetensors 0.8.0, not read here) or hands out a mapped view "
                   "of which only the slice is touched decides it: from 8 x 68 GB to 8 x 547 GB of host memory "
                   "traffic; the test bed (tp 1) cannot tell them apart"),
    "host_copy_gb_per_s": ((100.0, None), "GB/s", "the host's aggregate page-cache-to-user copy rate over 8 ranks: "
                           "not measured; low: an assumed floor for a one-socket DDR5 host under 8 x 8 threads; "
                           "high: 8 x the one-process rate measured (None: filled from the bandwidth file), "
                           "were the host's memory to allow it"),
    "link_per_gpu_independent": (True, "", "each GPU on its own Gen5 x16 link to the CPU (no switch shared by two "
                                 "GPUs), so 8 concurrent loads each get the rate one load got here"),
    "tp8_start_extra_s": ((0.0, 5.0), "s", "8 scheduler processes importing at once, NCCL's init over 8 PCIe GPUs "
                          "and building a 61-layer MoE model instead of one process and a dense 40-layer one: "
                          "not measured; 0-5 s assumed"),
    "graphs_scale_with_layers": (True, "", "the target's capture time proportional to its layers (61/40), the "
                                 "draft's (1 layer) unchanged; an MoE layer with INT4 Marlin kernels and an "
                                 "all-reduce per layer on SM120 may cost more per layer than a dense bf16 layer "
                                 "on an H100: not measured"),
    "int4_repack_s": (None, "s", "compressed-tensors INT4 -> Marlin repack inside SGLang's weight phase: not "
                      "measured (the test bed's bf16 needs none); shown as R, with the room the target leaves it"),
    "nvme_gb_per_s": ({"PCIe Gen4 x4 NVMe": 7.0, "PCIe Gen5 x4 NVMe": 14.0}, "GB/s",
                      "the cold case only: vendors' sequential read figures of one drive; the reference host's "
                      "disk is not known here"),
}


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def start_of(figures: dict[str, Any], label: str) -> dict[str, Any]:
    for start in figures["starts"]:
        if start["start"] == label and start["ready_rc"] == 0:
            return start
    raise SystemExit(f"no ready start {label!r} in the figures: the projection needs warm, warm-bounded, warm-fresh")


def seg(start: dict[str, Any], a: str, b: str) -> float:
    return round(start["marks"][b] - start["marks"][a], 2)


def graphs(start: dict[str, Any]) -> dict[str, float]:
    return {g["name"]: g["elapsed_s"] for g in start["cuda_graphs"]}


def measured(after: dict[str, Any], after_name: str, bw_machine: dict[str, Any], bw_name: str,
             before: dict[str, Any] | None) -> dict[str, Any]:
    """The measured inputs, each with where it came from."""
    warm, bounded, fresh = start_of(after, "warm"), start_of(after, "warm-bounded"), start_of(after, "warm-fresh")
    size = next(m["checkpoint"]["bytes"] for m in after["machines"].values() if m.get("checkpoint")) / 1e9
    bw = bw_machine["bandwidth"]
    out: dict[str, Any] = {
        "gpu": warm["gpu"].split(",")[0],
        "checkpoint_gb": round(size, 2),
        "before_weights_s": {s["start"]: s["marks"]["weights_begin"] for s in (warm, bounded)},
        "weights_warm_gb_per_s": {s["start"]: round(size / next(w["elapsed_s"] for w in s["weights"]
                                                              if w["model"] == "target"), 2)
                                  for s in (warm, bounded)},
        "draft_s": {s["start"]: seg(s, "weights_end", "draft_weights_end") for s in (warm, bounded)},
        "kv_s": {s["start"]: seg(s, "draft_weights_end", "kv_cache_end") for s in (warm, bounded)},
        "graphs_bounded": graphs(bounded), "graphs_default": graphs(warm),
        "tail_s": {s["start"]: seg(s, "graphs_end", "ready") for s in (warm, bounded)},
        "ready_s": {s["start"]: s["ready_s_log"] for s in (warm, bounded, fresh)},
        "fresh_jit_extra_s": round(fresh["ready_s_log"] - warm["ready_s_log"], 1),
        "page_cache_gb_per_s": bw["warm_8_threads"]["gb_per_s"],
        "disk_cold_gb_per_s": bw["cold_8_threads"]["gb_per_s"],
        "h2d_pinned_gb_per_s": bw["h2d"]["pinned_h2d_gb_per_s"],
        "h2d_pageable_gb_per_s": bw["h2d"]["pageable_h2d_gb_per_s"],
        "sources": {"starts": f"{after_name}: warm, warm-bounded, warm-fresh ({warm['machine']})",
                    "bandwidth": f"{bw_name} ({bw_machine.get('gpu', '').split(',')[0]})"},
    }
    if before:  # the cold loader's efficiency and the cold start's extra imports (BEFORE, the same H100 session)
        cold = next(s for s in before["starts"] if s["start"] == "cold" and s["machine"] == "h100-b")
        bwarm = next(s for s in before["starts"] if s["start"] == "warm" and s["machine"] == "h100-b")
        eff = [round(size / next(w["elapsed_s"] for w in s["weights"] if w["model"] == "target")
                     / out["disk_cold_gb_per_s"], 2)
               for s in before["starts"] if s["machine"] == "h100-b" and s["page_cache_dropped"]]
        out["cold_loader_share_of_disk"] = eff
        out["cold_before_weights_extra_s"] = round(cold["marks"]["weights_begin"] - bwarm["marks"]["weights_begin"], 1)
        out["sources"]["cold"] = "BEFORE h100-b: cold-fresh, cold against warm"
    return out


def rng(low: float, high: float) -> list[float]:
    return [round(min(low, high), 1), round(max(low, high), 1)]


def project(m: dict[str, Any]) -> dict[str, Any]:
    a = {k: v[0] for k, v in ASSUMPTIONS.items()}
    gpus, size, per_gpu = a["gpus"], a["checkpoint_gb"], a["checkpoint_gb"] / a["gpus"]
    copy_low, copy_high = a["host_copy_gb_per_s"]
    copy_high = copy_high or gpus * m["page_cache_gb_per_s"]
    copied = [gpus * per_gpu, gpus * size]  # each rank its share .. each rank the whole checkpoint
    h2d = list(m["weights_warm_gb_per_s"].values())
    link_s = rng(per_gpu / max(h2d), per_gpu / min(h2d))
    copy_s = rng(copied[0] / copy_high, copied[1] / copy_low)
    weights = rng(max(link_s[0], copy_s[0]), max(link_s[1], copy_s[1]))
    scale = a["layers"] / 40
    rows: list[dict[str, Any]] = []

    def row(phase: str, low: float, high: float, how: str) -> None:
        rows.append({"phase": phase, "seconds": rng(low, high), "how": how})

    bw_s = list(m["before_weights_s"].values())
    extra = a["tp8_start_extra_s"]
    row("before weights (SGLang's own start)", min(bw_s) + extra[0], max(bw_s) + extra[1],
        f"measured {min(bw_s)}-{max(bw_s)} s launch -> first weight ({m['gpu']}, warm and warm-bounded) "
        f"+ {extra[0]:g}-{extra[1]:g} s assumed for 8 ranks")
    row("weights: page cache -> each rank's memory", *copy_s,
        f"{copied[0]:.0f} GB (each rank its share) at {copy_high:g} GB/s to {copied[1]:.0f} GB (each rank the "
        f"whole checkpoint) at {copy_low:g} GB/s aggregate ({copy_high:g}: 8 x the {m['page_cache_gb_per_s']} GB/s "
        f"one process read here; {copy_low:g}: assumed)")
    row("weights: each GPU's share over its link", *link_s,
        f"{per_gpu:.1f} GB a GPU at {min(h2d)}-{max(h2d)} GB/s (the loader's warm rate here: pageable copies; "
        f"the link's pinned {m['h2d_pinned_gb_per_s']} GB/s would take {per_gpu / m['h2d_pinned_gb_per_s']:.1f} s)")
    row("weights phase (the two overlap)", *weights, "the larger of the two rows above, as measured here")
    row("INT4 repack", 0, 0, "R: not measured")
    d = list(m["draft_s"].values())
    draft_bytes = a["draft_gb"] * gpus / copy_low
    row("draft init + weights", min(d), max(d) + draft_bytes,
        f"measured {min(d)}-{max(d)} s (config-only draft) + {a['draft_gb']:g} GB read by each rank "
        f"(<= {draft_bytes:.2f} s)")
    kv = list(m["kv_s"].values())
    row("KV cache", min(kv), max(kv), "measured (warm, warm-bounded)")
    gb = m["graphs_bounded"]
    target_b = (gb["target prefill"] + gb["target verify"]) * scale
    draft_b = sum(v for k, v in gb.items() if k.startswith("draft"))
    row("CUDA graphs, bounded sizes (16 requests, prefill to 2048 tokens)", target_b + draft_b, target_b + draft_b,
        f"measured target {gb['target prefill']} + {gb['target verify']} s x {a['layers']}/40 + draft {draft_b:.2f} s "
        f"(warm-bounded: the start that compiled its 40 new kernels: a repeat takes at most this)")
    tail = list(m["tail_s"].values())
    row("HTTP up, warm-up, first 200", min(tail), max(tail), "measured (warm, warm-bounded)")
    keys = ["before weights (SGLang's own start)", "weights phase (the two overlap)", "draft init + weights",
            "KV cache", "CUDA graphs, bounded sizes (16 requests, prefill to 2048 tokens)", "HTTP up, warm-up, first 200"]
    total = [round(sum(r["seconds"][i] for r in rows if r["phase"] in keys), 1) for i in (0, 1)]
    gd = m["graphs_default"]
    default_graphs = (gd["target prefill"] + gd["target verify"]) * scale + sum(
        v for k, v in gd.items() if k.startswith("draft"))
    extra_default = round(default_graphs - (target_b + draft_b), 1)
    out = {
        "warm_restart_s": total, "plus": "R (INT4 repack, not measured)",
        "target_s": TARGET_S, "room_for_repack_s": [round(TARGET_S - total[1], 1), round(TARGET_S - total[0], 1)],
        "with_default_graph_sizes_s": [round(t + extra_default, 1) for t in total],
        "new_release_fresh_jit_extra_s": m["fresh_jit_extra_s"],
        "phases": rows,
        "page_cache_needed_gb": size + a["draft_gb"],
    }
    out["verdict"] = (f"{total[0]}-{total[1]} s + R: within {TARGET_S:g} s if the INT4 repack takes at most "
                      f"{out['room_for_repack_s'][0]}-{out['room_for_repack_s'][1]} s and the host's page cache holds "
                      f"all {out['page_cache_needed_gb']:g} GB")
    if "cold_loader_share_of_disk" in m:
        eff = m["cold_loader_share_of_disk"]
        cold = {}
        for name, rate in a["nvme_gb_per_s"].items():
            disk = rng(size / (rate * max(eff)), size / (rate * min(eff)))
            w = rng(max(disk[0], weights[0]), max(disk[1], weights[1]))  # the copies overlap the reads, as warm
            extra = m["cold_before_weights_extra_s"]
            cold[name] = {"weights_s": w, "ready_s": [round(total[i] - weights[i] + w[i] + extra, 1) for i in (0, 1)]}
        out["cold"] = {"how": f"{size:g} GB read once from one drive (ranks in step share the page cache) at "
                              f"{min(eff):.0%}-{max(eff):.0%} of the drive's rate (the loader's share of the cold disk "
                              f"measured here, on a virtio disk of {m['disk_cold_gb_per_s']} GB/s: not measured on "
                              f"NVMe), or the warm weights phase where longer, + {m['cold_before_weights_extra_s']} s "
                              f"of imports from disk (measured here), the rest as warm; + R",
                       "drives": cold}
    return out


def markdown(m: dict[str, Any], p: dict[str, Any]) -> str:
    lines = [f"Measured inputs: {m['sources']['starts']}; bandwidths {m['sources']['bandwidth']}.", "",
             "| phase | seconds | how |", "| --- | --- | --- |"]
    for r in p["phases"]:
        s = r["seconds"]
        value = "R" if r["phase"] == "INT4 repack" else (f"{s[0]}" if s[0] == s[1] else f"{s[0]}-{s[1]}")
        lines.append(f"| {r['phase']} | {value} | {r['how']} |")
    t = p["warm_restart_s"]
    lines.append(f"| **warm restart, same release** | **{t[0]}-{t[1]} + R** | the weights phase once, not its "
                 "two rows |")
    lines += ["", f"- Against the target ({p['target_s']:g} s): {p['verdict']}.",
              f"- With SGLang's default graph sizes instead: {p['with_default_graph_sizes_s'][0]}-"
              f"{p['with_default_graph_sizes_s'][1]} s + R.",
              f"- A new release (JIT caches empty): + {p['new_release_fresh_jit_extra_s']} s measured here "
              "(Triton compiling in the prefill graphs' capture; SM120 not measured)."]
    if "cold" in p:
        lines.append(f"- Cold: {p['cold']['how']}.")
    for name, c in p.get("cold", {}).get("drives", {}).items():
        lines.append(f"- Cold (page cache without the model), one {name}: weights {c['weights_s'][0]}-"
                     f"{c['weights_s'][1]} s, ready {c['ready_s'][0]}-{c['ready_s'][1]} s + R.")
    lines += ["", "Assumptions:", ""]
    for key, (value, unit, why) in ASSUMPTIONS.items():
        lines.append(f"- `{key}` = {json.dumps(value)} {unit}: {why}")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--after", type=Path, required=True, help="figures.json with warm, warm-bounded, warm-fresh")
    ap.add_argument("--bandwidth", required=True, help="FIGURES:LABEL of a machine of the same GPU model")
    ap.add_argument("--before", type=Path, help="figures.json with the cold starts (the cold rows)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    path, _, label = args.bandwidth.rpartition(":")
    bw_machine = load(Path(path))["machines"][label]
    after = load(args.after)
    m = measured(after, str(args.after), bw_machine, args.bandwidth, load(args.before) if args.before else None)
    if bw_machine.get("gpu", "").split(",")[0] != m["gpu"]:
        raise SystemExit(f"the bandwidths are of {bw_machine.get('gpu')}, the starts of {m['gpu']}: not mixed")
    p = project(m)
    text = markdown(m, p)
    if args.json:
        args.json.write_text(json.dumps({"measured": m, "assumptions": {k: {"value": v, "unit": u, "why": w}
                                                                         for k, (v, u, w) in ASSUMPTIONS.items()},
                                         "projection": p}, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
