#!/usr/bin/env python3
"""Check SGLang server settings against known facts before a server starts.

Why: a start of the target model takes eight to ten minutes, and some settings are known to crash
it late (``--enable-torch-symm-mem`` on SM120 before 0.5.14, flashinfer all-reduce fusion on SM120 from
0.5.14 on), to do nothing (that fusion on SM120 before 0.5.14), or to be impossible (more TP ranks than
GPUs, EAGLE3 without a draft model).
The facts live in a data file (``sglang_launch_facts.json`` beside this script), each with the
SGLang releases and GPU architectures it concerns and the source lines it was confirmed in, so a
new fact is a data change, not a code change.

Input: the structured server settings as JSON (the keys the server role renders: ``tp_size``,
``speculative_algorithm``, ``enable_torch_symm_mem``, ... plus ``extra_args``, a list of raw
command-line arguments, and ``env``, the server's environment). ``extra_args`` are folded in as
settings (``--enable-torch-symm-mem`` -> ``enable_torch_symm_mem: true``), so a flag passed that
way is checked too. Two settings are derived for facts about attention backends: ``model_attention``
("mla" for the model modules the facts file lists, from ``--model``) and ``attention_backends``, the
backends the server runs (those given, else the release's default for an MLA model on this GPU).

Severity: fail (the start would fail, or the project refuses it), warn (a setting SGLang ignores or a risk),
note (why the server role left a setting off, e.g. the PCIe IPC all-reduce where P2P is disabled). The host's
GPUs as gpu_preflight recorded them come in as the settings ``gpu_interconnect`` and ``gpu_p2p``.

Exit status: 0 no failure (warnings and notes are printed), 1 at least one failing fact, 2 bad input.
Standard library only: it runs on the GPU host with the system python3.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

DEFAULT_FACTS = Path(__file__).with_name("sglang_launch_facts.json")
VERSION_RE = re.compile(r"^v?(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?(?:\+.*)?$")
PRE_RANK = {"dev": 0, "a": 1, "b": 2, "rc": 3, None: 4}


class InputError(Exception):
    """The input cannot be checked (exit status 2)."""


def version_key(text: str) -> tuple:
    """A sortable key for a release string (PEP 440 subset: 0.5.13.post1, 0.5.10rc0)."""
    found = VERSION_RE.match(text.strip())
    if not found:
        raise InputError(f"not a release version: {text!r}")
    release, pre, pre_num, post, dev = found.groups()
    numbers = tuple(int(n) for n in release.split("."))
    numbers += (0,) * (4 - len(numbers))
    if dev is not None and pre is None and post is None:
        stage = (PRE_RANK["dev"], int(dev))
    else:
        stage = (PRE_RANK[pre], int(pre_num or 0))
    return numbers, stage, int(post or 0)


def in_range(version: str, bounds: dict) -> bool:
    key = version_key(version)
    low, high = bounds.get("from"), bounds.get("before")
    return (low is None or key >= version_key(low)) and (high is None or key < version_key(high))


def arch_major(arch: str) -> int:
    """'12.0' or 'sm_120' or '120' -> 12."""
    text = arch.strip().lower().removeprefix("sm_").removeprefix("sm")
    if "." in text:
        return int(text.split(".")[0])
    if text.isdigit():
        return int(text) // 10 if len(text) >= 2 else int(text)
    raise InputError(f"not a GPU architecture: {arch!r} (expected e.g. 12.0)")


def parse_extra_args(extra: list[str]) -> dict[str, Any]:
    """Raw command-line arguments as settings: ``--a-b 3`` -> a_b: 3, ``--flag`` -> flag: true."""
    settings: dict[str, Any] = {}
    index = 0
    while index < len(extra):
        item = str(extra[index])
        index += 1
        if not item.startswith("--"):
            continue
        name, _, value = item[2:].partition("=")
        key = name.replace("-", "_")
        if not _:
            if index < len(extra) and not str(extra[index]).startswith("--"):
                value = str(extra[index])
                index += 1
            else:
                settings[key] = True
                continue
        settings[key] = _scalar(value)
    return settings


def _scalar(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    lowered = value.strip().lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off", ""):
        return False
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def settings_from(args: dict, facts: dict) -> dict[str, Any]:
    """Merge defaults, structured settings, extra_args and env into one flat lookup table."""
    if not isinstance(args, dict):
        raise InputError("the server settings must be a JSON object")
    aliases = facts.get("aliases", {})
    merged: dict[str, Any] = dict(facts.get("defaults", {}))
    extra = args.get("extra_args") or []
    if not isinstance(extra, list):
        raise InputError("extra_args must be a list of strings")
    for source in ({k: v for k, v in args.items() if k not in ("extra_args", "env")}, parse_extra_args(extra)):
        for key, value in source.items():
            merged[aliases.get(key, key)] = _scalar(value)
    env = args.get("env") or {}
    if not isinstance(env, dict):
        raise InputError("env must be an object")
    for key, value in env.items():
        merged[f"env.{key}"] = _scalar(value)
    if isinstance(merged.get("speculative_algorithm"), str):
        merged["speculative_algorithm"] = merged["speculative_algorithm"].upper()
    return merged


BACKEND_SETTINGS = ("attention_backend", "decode_attention_backend", "prefill_attention_backend",
                    "speculative_draft_attention_backend")


def derive_attention(settings: dict[str, Any], facts: dict, version: str, major: int, model: str | None) -> None:
    """Add model_attention, attention_backend_main and attention_backends (see the facts file's "attention")."""
    table = facts.get("attention") or {}
    mla = model is not None and model in (table.get("mla_models") or {}).get("modules", [])
    settings["model_attention"] = None if model is None else ("mla" if mla else "other")
    main = settings.get("attention_backend")
    if not main and mla:
        for rule in table.get("mla_defaults", []):
            if (in_range(version, rule.get("sglang", {})) and (not rule.get("arch_major") or major in rule["arch_major"])
                    and (not rule.get("models") or model in rule["models"])):
                main = rule["backend"]
                break
    settings["attention_backend_main"] = main or None
    given = [settings.get(name) for name in BACKEND_SETTINGS[1:] if settings.get(name)]
    settings["attention_backends"] = sorted({b for b in [main, *given] if b})


def _value(spec: Any, settings: dict[str, Any], context: dict[str, Any]) -> Any:
    """A literal, {"ref": name, "add": n}, or {"product": [names]}."""
    if isinstance(spec, dict) and "ref" in spec:
        name = spec["ref"]
        base = context[name] if name in context else settings.get(name)
        if base is None:
            return None
        return base + spec.get("add", 0)
    if isinstance(spec, dict) and "product" in spec:
        result = 1
        for name in spec["product"]:
            part = settings.get(name)
            if part is None:
                return None
            result *= part
        return result
    if isinstance(spec, str) and spec in settings:
        return settings[spec]
    return spec


def holds(condition: dict, settings: dict[str, Any], context: dict[str, Any]) -> bool:
    """Whether one condition of a fact holds for these settings."""
    if "any" in condition:
        return any(holds(c, settings, context) for c in condition["any"])
    setting = condition["setting"]
    # A name is looked up: a setting the server does not get is None, never its own name as a literal.
    left = settings.get(setting) if isinstance(setting, str) else _value(setting, settings, context)
    if "truthy" in condition:
        return bool(left) == condition["truthy"]
    if "in" in condition:
        return left in condition["in"]
    if "not_in" in condition:
        return left not in condition["not_in"]
    if "any_in" in condition:
        return isinstance(left, list) and any(item in condition["any_in"] for item in left)
    if "divides" in condition:
        right = _value(condition["divides"], settings, context)
        if not isinstance(left, int) or not isinstance(right, int) or left <= 0:
            return False
        return (right % left == 0) == condition.get("expect", True)
    for op, test in (
        ("eq", lambda a, b: a == b),
        ("ne", lambda a, b: a != b),
        ("gt", lambda a, b: a > b),
        ("ge", lambda a, b: a >= b),
        ("lt", lambda a, b: a < b),
        ("le", lambda a, b: a <= b),
    ):
        if op in condition:
            right = _value(condition[op], settings, context)
            if left is None or right is None:
                return False
            try:
                return test(left, right)
            except TypeError:
                return False
    raise InputError(f"unknown condition in facts file: {condition}")


def _cite(source: dict) -> str:
    if source.get("file") == "policy":
        return f"project policy: {source.get('note', '')}"
    return f"{source['file']}:{source['lines']}" + (f" (sglang {source['version']})" if source.get("version") else "")


def check(facts: dict, version: str, arch: str, gpu_count: int, args: dict, model: str | None = None) -> dict:
    """Evaluate every fact; return the report (``ok`` false when a failing fact applies). ``model``: the
    SGLang model module (kimi_k25), for the facts that depend on the model's attention."""
    major = arch_major(arch)
    version_key(version)
    settings = settings_from(args, facts)
    derive_attention(settings, facts, version, major, model)
    context = {"gpu_count": gpu_count}
    failures, warnings, notes, skipped = [], [], [], []
    for fact in facts["facts"]:
        if not in_range(version, fact.get("sglang", {})):
            skipped.append(fact["id"])
            continue
        if fact.get("arch_major") and major not in fact["arch_major"]:
            skipped.append(fact["id"])
            continue
        if not all(holds(c, settings, context) for c in fact["when"]):
            continue
        entry = {
            "id": fact["id"],
            "severity": fact["severity"],
            "effect": fact["effect"],
            "fix": fact.get("fix", ""),
            "sources": [_cite(s) for s in fact.get("sources", [])],
        }
        {"fail": failures, "note": notes}.get(fact["severity"], warnings).append(entry)
    return {
        "ok": not failures,
        "sglang_version": version,
        "arch": arch,
        "gpu_count": gpu_count,
        "model": model,
        "attention_backends": settings["attention_backends"],
        "failures": failures,
        "warnings": warnings,
        "notes": notes,
        "facts_checked": len(facts["facts"]) - len(skipped),
        "facts_not_applicable": skipped,
    }


def render_text(report: dict) -> str:
    lines = []
    for entry in report["failures"] + report["warnings"] + report["notes"]:
        label = {"fail": "FAIL", "note": "NOTE"}.get(entry["severity"], "WARN")
        lines.append(f"{label} {entry['id']}: {entry['effect']}")
        if entry["fix"]:
            lines.append(f"     fix: {entry['fix']}")
        if entry["sources"]:
            lines.append(f"     source: {entry['sources'][0]}")
    verdict = "OK" if report["ok"] else "FAIL"
    lines.append(
        f"{verdict}: {len(report['failures'])} failure(s), {len(report['warnings'])} warning(s); "
        f"{report['facts_checked']} fact(s) apply to sglang {report['sglang_version']} on arch {report['arch']}"
    )
    return "\n".join(lines)


def load_json(source: str, what: str) -> Any:
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        return json.loads(text)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {what} from {source}: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sglang-version", required=True, help="the installed SGLang release, e.g. 0.5.9")
    parser.add_argument("--arch", required=True, help="GPU compute capability, e.g. 12.0")
    parser.add_argument("--gpu-count", required=True, type=int, help="GPUs on the host")
    parser.add_argument("--args-json", required=True, help="server settings as JSON: a file, or - for stdin")
    parser.add_argument("--model", default=None,
                        help="the SGLang model module served (e.g. kimi_k25): facts about its attention apply")
    parser.add_argument("--facts", default=str(DEFAULT_FACTS), help="facts file (default: beside this script)")
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    options = parser.parse_args(argv)

    def report() -> dict:
        if options.gpu_count < 1:
            raise InputError("--gpu-count must be at least 1")
        facts = load_json(options.facts, "facts")
        args = load_json(options.args_json, "server settings")
        return check(facts, options.sglang_version, options.arch, options.gpu_count, args, options.model)

    # The exit codes and the error report of the role's other checker, installed beside this script.
    from sglang_interface_check.cli import emit

    return emit(report, render_text, InputError, options.json)


if __name__ == "__main__":
    sys.exit(main())
