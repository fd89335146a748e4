"""The whole analysis: the rules applied to one sglang tree, model and algorithm, as a report."""

from __future__ import annotations

import gc
import time
from pathlib import Path

from .algorithms import Algorithms
from .evaluator import Evaluator, flag_names
from .model import ClassResolver, delegation_gap, entry_classes
from .rules import CallSite, SpeculativeReach, collect_call_sites, model_method_names
from .tree import CheckError, Tree


def check(sglang_dir: Path, model: str, algorithm: str, only_class: str | None = None) -> dict:
    """Run the whole analysis; return the report as a dict (``ok`` tells the verdict).

    The cyclic garbage collector is off meanwhile: the parsed modules are kept to the end and hold
    no garbage worth collecting, and its scans of their millions of nodes were a third of the time
    (SGLang 0.5.23, measured beside a busy job: 1.40 -> 0.95 CPU-s).
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _check(sglang_dir, model, algorithm, only_class)
    finally:
        if collecting:
            gc.enable()


def _check(sglang_dir: Path, model: str, algorithm: str, only_class: str | None) -> dict:
    started = time.monotonic()
    tree = Tree(sglang_dir)
    model_path, class_names = entry_classes(tree, model)
    if only_class is not None:
        if only_class not in class_names:
            raise CheckError(f"{tree.rel(model_path)}: EntryClass does not name {only_class} ({', '.join(class_names)})")
        class_names = [only_class]
    algorithms = Algorithms(tree)
    canonical = algorithms.canonical(algorithm)
    if canonical == "NONE":
        raise CheckError("algorithm NONE: there is no speculative interface to check")
    files = tree.runtime_files()
    evaluator = Evaluator(tree, algorithms, canonical, files)
    workers = algorithms.create_worker_classes(evaluator)
    spec_dir = tree.srt / "speculative"
    notes: list[str] = []
    reach: set[tuple[Path, str]] | None = None
    if workers is None:
        notes.append("SpeculativeAlgorithm.create_worker not found: every module in srt/speculative counts")
    else:
        reach = SpeculativeReach(tree, evaluator, (algorithms.path, algorithms.cls.name)).compute(workers)
    interface = model_method_names(tree)

    required: dict[str, list[CallSite]] = {}
    for site in collect_call_sites(tree, files, interface):
        in_spec = spec_dir in site.file.parents
        role = site.role
        if role == "neutral":
            role = "draft" if in_spec or "draft" in site.cls.lower() else "target"
        if role != "target" or site.optional:
            continue
        if in_spec and reach is not None and not {(site.file, site.top), (site.file, "*")} & reach:
            continue
        value, spec = evaluator.evaluate(site.guards, flags=False, path=site.file)
        if value is False:
            continue
        if not in_spec and not spec and not any(evaluator.may_mention_algorithm(n) for n in flag_names(site.guards)):
            continue
        value, spec = evaluator.evaluate(site.guards, path=site.file)
        if value is False or (not in_spec and not spec):
            continue
        required.setdefault(site.method, []).append(site)

    resolver = ClassResolver(tree)
    classes = []
    ok = True
    for name in class_names:
        info = resolver.resolve(model_path, name)
        if info is None:
            raise CheckError(f"{tree.rel(model_path)}: EntryClass names {name}, "
                             "which is neither defined nor imported from sglang")
        missing = {}
        provided = {}
        for method in sorted(required):
            provider = info.provider(method)
            gap = delegation_gap(info, method) if provider is not None else None
            if provider is None or gap:
                missing[method] = {
                    "reason": gap or f"{name} does not define {method} (nor do its sglang bases)",
                    "call_sites": [s.as_dict() for s in required[method]],
                }
            else:
                provided[method] = f"{provider.name} ({provider.rel})"
        ok = ok and not missing
        classes.append(
            {
                "class": name,
                "external_bases": info.external_bases,
                "provided": provided,
                "missing": missing,
            }
        )
    return {
        "ok": ok,
        "sglang_dir": str(tree.root),
        "sglang_version": tree.version(),
        "model": model,
        "model_file": tree.rel(model_path),
        "algorithm": canonical,
        "algorithm_requested": algorithm,
        "worker_classes": [f"{tree.rel(p)}:{n}" for p, n in workers or []],
        "required": {m: [s.as_dict() for s in sites] for m, sites in sorted(required.items())},
        "classes": classes,
        "notes": notes,
        "elapsed_s": round(time.monotonic() - started, 3),
    }
