#!/usr/bin/env python3
"""Check the server's command line with the release's own SGLang before any restart.

Why: SGLang parses its command line only when the new process starts, after the old one was
stopped; a flag the release does not know, a value outside its choices or of the wrong type
(a renamed flag after an upgrade, a typo in ``sglang_server_extra_args``) ends the start at once,
and the host serves nothing until someone looks. Run with the release's own Python, this tool
imports that release's ``sglang.srt.server_args`` and, without a GPU and without loading the
model, runs:

1. the release's argument parser (``ServerArgs.add_cli_args`` on an ``argparse`` parser, as its
   ``prepare_server_args`` builds it) on exactly the arguments the unit passes, plus
   ``--api-key`` with a placeholder when the launcher adds the key (sglang_launch.py appends it
   inside the server's process; the key itself never reaches this tool);
2. the checks of ``ServerArgs.__post_init__`` / ``check_server_args`` that need neither a GPU nor
   the model, listed per release in ``GPU_FREE_CHECKS`` (read in each release's source: the
   others ask the GPU for its memory or architecture, or load the model's configuration), on the
   values the release's own ``from_cli_args`` builds; an ``AssertionError`` or ``ValueError``
   there is the release refusing the settings, any other exception means the check needs a value
   that a GPU step would have set first, and is reported as not evaluated;
3. the cuDNN rule of SGLang 0.5.9 (``check_torch_2_9_1_cudnn_compatibility``): a multimodal model
   (Kimi-K2.5 is one) on torch 2.9 with cuDNN older than 9.15 is refused by the release at start.
   Read from the release's package metadata (torch, nvidia-cudnn-cu13/-cu12) and the model's
   ``config.json`` architectures against the release's own list of multimodal architectures;
4. the warnings the release logs while it parses and checks them (``'--cuda-graph-max-bs' is deprecated
   ... Use '--cuda-graph-max-bs-decode'`` on 0.5.17), reported in its words: what the role could avoid.

Usage: python sglang_server_args_check.py --argv-json JSON [--api-key-set] [--model-dir DIR] [--json]
Exit status: 0 the release accepts the settings, 1 it refuses them, 2 the check could not run.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import logging
import os
import re
import sys
import time
from pathlib import Path

API_KEY_PLACEHOLDER = "placeholder-not-the-key"
# The checks of ServerArgs that need neither a GPU nor the model, per release, in the order
# __post_init__ runs them (read in each release's server_args.py; the role README lists them).
# Left out: those that ask the device (get_device*, is_cuda, is_sm*, memory capacity), load the
# model configuration (get_model_config, ModelConfig), fetch files (runai object storage) or, from
# 0.5.17 on, read the resolution pipeline that __post_init__ sets up (_resolved, post-process passes).
GPU_FREE_CHECKS = {
    "0.5.9": [
        "_handle_load_balance_method", "_handle_deprecated_args", "_handle_prefill_delayer_env_compat",
        "_handle_page_size", "_handle_grammar_backend", "_handle_data_parallelism",
        "_handle_context_parallelism", "_handle_moe_kernel_config", "_handle_a2a_moe",
        "_handle_eplb_and_dispatch", "_handle_expert_distribution_metrics", "_handle_elastic_ep",
        "_handle_pipeline_parallelism", "_handle_pd_disaggregation", "_handle_encoder_disaggregation",
        "_handle_tokenizer_batching", "_handle_environment_variables", "_handle_cache_compatibility",
        "_handle_debug_utils", "_handle_other_validations", "validate_buckets_rule",
    ],
    "0.5.10": [
        "_handle_load_balance_method", "_handle_ssl_validation", "_handle_deprecated_args",
        "_handle_prefill_delayer_env_compat", "_handle_page_size", "_handle_grammar_backend",
        "_handle_data_parallelism", "_handle_context_parallelism", "_handle_a2a_moe",
        "_handle_eplb_and_dispatch", "_handle_expert_distribution_metrics", "_handle_elastic_ep",
        "_handle_pipeline_parallelism", "_handle_pd_disaggregation", "_handle_tokenizer_batching",
        "_handle_environment_variables", "_handle_cache_compatibility", "_handle_debug_utils",
        "_handle_other_validations", "validate_buckets_rule",
    ],
    "0.5.17": [
        "_handle_return_hidden_states_mode", "_handle_multimodal", "_handle_ssl_validation",
        "_handle_asr_validation", "_handle_deprecated_args", "_handle_prefill_delayer_env_compat",
        "_handle_dwdp", "_handle_grammar_backend", "_handle_load_balance_method",
        "_handle_expert_distribution_metrics", "_handle_tokenizer_batching", "_handle_debug_utils",
        "validate_buckets_rule",
    ],
}
# check_server_args calls it for these two options (the same in every release above).
# Where the release's ConfigArgumentMerger is, newest first (srt/utils from 0.5.20 on, srt/ before).
CONFIG_PARSER_MODULES = ("sglang.srt.utils.server_args_config_parser", "sglang.srt.server_args_config_parser")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
BUCKET_OPTIONS = (("--prompt-tokens-buckets", "prompt_tokens_buckets"),
                  ("--generation-tokens-buckets", "generation_tokens_buckets"))
CUDNN_MIN = (9, 15)
CUDNN_DISTS = ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12")
CUDNN_FIX = (
    "install cuDNN 9.15 or newer into the release with sglang_build_pip_overrides (exact pins installed with "
    "--no-deps after the release set; the 0.5.9 set's default is [\"nvidia-cudnn-cu13==9.15.1.9\"]) and rebuild it")
CUDNN_ESCAPE = (
    "SGLANG_DISABLE_CUDNN_CHECK=1 in sglang_server_env only silences SGLang's own check: the vision "
    "encoder's nn.Conv3d stays extremely slow on this torch and cuDNN (the reason for the check), so it is no fix")


class Refused(Exception):
    """The release refuses the settings: step, the flags named, the release's message."""

    def __init__(self, step: str, message: str, options: frozenset = frozenset()):
        super().__init__(message)
        self.info = {"step": step, "flags": flags_in(message, options), "message": message}


class CannotRun(Exception):
    """The check itself cannot run (exit status 2)."""


class _ParseError(Exception):
    pass


class _RaisingParser(argparse.ArgumentParser):
    """argparse.ArgumentParser that raises where the server's would print usage and exit 2."""

    def error(self, message):
        raise _ParseError(message)


def version_tuple(text: str) -> tuple:
    return tuple(int(n) for n in re.findall(r"\d+", text.split("+")[0])[:3])


def release_key(version: str) -> str:
    """The GPU_FREE_CHECKS entry of a release: its X.Y.Z (0.5.10.post1 reads 0.5.10's)."""
    return ".".join(str(n) for n in version_tuple(version))


def flags_in(message: str, options: frozenset = frozenset()) -> list[str]:
    """The options a message is about. argparse's name them ('argument --tp-size/--tensor-parallel-size:
    ...', 'unrecognized arguments: --foo 1'); the release's checks name them as --flag, flag-name or
    field_name, found among the parser's options."""
    found = re.match(r"argument (\S+?):", message)
    if found:
        return found.group(1).split("/")
    found = re.match(r"unrecognized arguments: (.*)", message)
    if found:
        return [w for w in found.group(1).split() if w.startswith("-")] or found.group(1).split()
    named = []
    for word in re.findall(r"-*[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*", message):
        flag = "--" + word.lstrip("-").replace("_", "-")
        # A bare word counts when it is an option of two words or more ("port" alone is too common).
        if flag not in named and (word.startswith("--") or (flag in options and "-" in flag[2:])):
            named.append(flag)
    return named


def parse(server_args, argv: list[str]) -> tuple[argparse.Namespace, frozenset]:
    """The release's own parser on argv, and its option strings; Refused naming the flag and the
    release's message."""
    parser = _RaisingParser()
    server_args.ServerArgs.add_cli_args(parser)
    if "--config" in argv:  # as prepare_server_args does, with the release's own config parser
        argv = config_merger(parser).merge_config_with_args(argv)
    try:
        return parser.parse_args(argv), frozenset(parser._option_string_actions)
    except _ParseError as exc:
        raise Refused("parse", str(exc)) from None


def config_merger(parser: argparse.ArgumentParser):
    """The release's ConfigArgumentMerger (--config YAML), from the module its prepare_server_args imports:
    sglang.srt.server_args_config_parser in 0.5.9 and 0.5.17, sglang.srt.utils.server_args_config_parser in
    0.5.20 and 0.5.23 (0.5.18 and 0.5.19 not read)."""
    import importlib
    for module in CONFIG_PARSER_MODULES:
        try:
            return importlib.import_module(module).ConfigArgumentMerger(parser)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the module is there but an import of its own failed: the release's error
                raise
    raise CannotRun(f"the release has none of {', '.join(CONFIG_PARSER_MODULES)} (--config cannot be merged)")


class WarningsKept(logging.Handler):
    """The warnings the release logs while it parses and checks the settings (a deprecated flag, a value it
    replaces): SGLang's own words, ANSI colours removed, each once."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        text = ANSI.sub("", record.getMessage()).strip()
        if text and text not in self.messages:
            self.messages.append(text)


def unchecked(server_args, namespace: argparse.Namespace):
    """ServerArgs built by the release's own from_cli_args, without its __post_init__ (the steps
    that need the GPU and the model); the GPU-free checks then run one by one."""

    class Unchecked(server_args.ServerArgs):
        def __post_init__(self):
            pass

    return Unchecked.from_cli_args(namespace)


def run_checks(args_obj, names: list[str], options: frozenset) -> tuple[list[str], list[dict]]:
    """Run the release's GPU-free checks in order; Refused at the first that refuses."""
    ran, not_evaluated = [], []
    for name in names:
        method = getattr(args_obj, name, None)
        if method is None:
            not_evaluated.append({"check": name, "why": "not in this release"})
            continue
        calls = ([(f"{name}({flag})", (flag, getattr(args_obj, attr, None))) for flag, attr in BUCKET_OPTIONS]
                 if name == "validate_buckets_rule" else [(name, ())])
        for label, call_args in calls:
            try:
                method(*call_args)
            except (AssertionError, ValueError) as exc:
                raise Refused(label, str(exc) or type(exc).__name__, options) from None
            except Exception as exc:  # reported, see not_evaluated
                not_evaluated.append({"check": label, "why": f"{type(exc).__name__}: {exc}"})
            else:
                ran.append(label)
    return ran, not_evaluated


def dist_version(name: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def torch_cudnn_dist(torch_requires: list[str], installed: dict) -> str | None:
    """The cuDNN wheel the release's torch loads: the one its metadata requires, else the one installed
    (the older of two: the safe side)."""
    for req in torch_requires:
        name = re.match(r"\s*([A-Za-z0-9_.-]+)", req).group(1).lower().replace("_", "-")
        if name in installed and installed[name] is not None:
            return name
    present = [d for d in CUDNN_DISTS if installed.get(d)]
    return min(present, key=lambda d: version_tuple(installed[d])) if present else None


def multimodal_architectures(sglang_dir: Path) -> list[str] | None:
    """The release's own list of multimodal architectures (``multimodal_model_archs`` in
    srt/configs/model_config.py, which its ``is_multimodal_model`` tests membership in), read
    without importing that module (it imports most of torch's compiler stack)."""
    path = sglang_dir / "srt" / "configs" / "model_config.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return None
    assigned = {node.targets[0].id: node.value for node in tree.body
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}

    def strings(node) -> list[str]:
        """The strings of a list literal, following *NAME to another module-level literal (0.5.17 has
        *MIMO_V2_MULTIMODAL_ARCHS); anything else (a call, an attribute) is left out."""
        found = []
        for item in getattr(node, "elts", []):
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                found.append(item.value)
            elif isinstance(item, ast.Starred) and isinstance(item.value, ast.Name) and item.value.id in assigned:
                found += strings(assigned[item.value.id])
        return found

    listed = assigned.get("multimodal_model_archs")
    return strings(listed) if isinstance(listed, (ast.List, ast.Tuple)) else None


def cudnn_rule(torch_version: str | None, cudnn: tuple[str, str] | None, architectures: list[str] | None,
               multimodal_archs: list[str] | None, escape_set: bool) -> dict:
    """SGLang 0.5.9's check_torch_2_9_1_cudnn_compatibility, decided before the start.

    Returns {"verdict": "pass"|"refuse"|"warn", "reason": ...}; "warn" where a fact is unknown.
    """
    if not torch_version or version_tuple(torch_version)[:2] != (2, 9):
        return {"verdict": "pass", "reason": f"torch {torch_version or 'unknown'} is not 2.9"}
    if "+cpu" in torch_version:
        return {"verdict": "pass", "reason": f"torch {torch_version} has no cuDNN"}
    if architectures is None or multimodal_archs is None:
        return {"verdict": "warn", "reason": (
            "cannot tell whether the model is multimodal (its config.json architectures or the release's "
            f"list of multimodal architectures are unreadable); on torch {torch_version} SGLang refuses a "
            f"multimodal model with cuDNN older than {CUDNN_MIN[0]}.{CUDNN_MIN[1]}")}
    hits = [a for a in architectures if a in multimodal_archs]
    if not hits:
        return {"verdict": "pass", "reason": f"{', '.join(architectures) or 'the model'} is not multimodal"}
    if cudnn is None:
        return {"verdict": "warn", "reason": (
            f"{hits[0]} is multimodal on torch {torch_version}, and no cuDNN wheel ({', '.join(CUDNN_DISTS)}) "
            f"is installed in the release: SGLang refuses it at start if the cuDNN torch loads is older than "
            f"{CUDNN_MIN[0]}.{CUDNN_MIN[1]}")}
    dist, version = cudnn
    if version_tuple(version)[:2] >= CUDNN_MIN:
        return {"verdict": "pass", "reason": f"{dist} {version} is {CUDNN_MIN[0]}.{CUDNN_MIN[1]} or newer"}
    problem = (f"{hits[0]} is multimodal, and the release has torch {torch_version} with {dist} {version} "
               f"(older than {CUDNN_MIN[0]}.{CUDNN_MIN[1]}): SGLang refuses to start it "
               "(ServerArgs.check_torch_2_9_1_cudnn_compatibility)")
    if escape_set:
        return {"verdict": "warn", "reason": f"{problem}, but SGLANG_DISABLE_CUDNN_CHECK is set: {CUDNN_ESCAPE}"}
    return {"verdict": "refuse", "reason": f"{problem}. Fix: {CUDNN_FIX}. ({CUDNN_ESCAPE}.)"}


def read_architectures(model_dir: str | None) -> list[str] | None:
    if not model_dir:
        return None
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    archs = config.get("architectures")
    return [str(a) for a in archs] if isinstance(archs, list) else None


def check(argv: list[str], api_key_set: bool, model_dir: str | None) -> dict:
    started = time.monotonic()
    try:
        import sglang
        from sglang.srt import server_args
        from sglang.version import __version__ as version
    except Exception as exc:  # any import failure means the release cannot start either
        raise CannotRun(f"this Python cannot import the release's sglang.srt.server_args "
                        f"({type(exc).__name__}: {exc})") from None
    report = {"sglang_version": version, "import_seconds": round(time.monotonic() - started, 2), "parsed": len(argv)}
    kept = WarningsKept()
    logging.getLogger().addHandler(kept)
    try:
        check_release(server_args, version, argv + (["--api-key", API_KEY_PLACEHOLDER] if api_key_set else []),
                      Path(sglang.__file__).parent, model_dir, report)
    except Refused as exc:
        report["refused"] = exc.info
    finally:
        logging.getLogger().removeHandler(kept)
    report["warnings"] = kept.messages
    report["seconds"] = round(time.monotonic() - started, 2)
    return report


def check_release(server_args, version: str, argv: list[str], sglang_dir: Path, model_dir: str | None,
                  report: dict) -> None:
    namespace, options = parse(server_args, argv)
    names = GPU_FREE_CHECKS.get(release_key(version))
    if names is None:
        report["checks"] = []
        report["not_evaluated"] = [{"check": "*", "why": f"no GPU-free checks are listed for SGLang {version} "
                                    "(GPU_FREE_CHECKS): its command line was parsed, nothing more"}]
    else:
        report["checks"], report["not_evaluated"] = run_checks(unchecked(server_args, namespace), names, options)

    installed = {d: dist_version(d) for d in CUDNN_DISTS}
    torch_version = dist_version("torch")
    from importlib import metadata
    try:
        torch_requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        torch_requires = []
    dist = torch_cudnn_dist(torch_requires, installed)
    escape = os.environ.get("SGLANG_DISABLE_CUDNN_CHECK", "").strip().lower() in ("1", "true", "yes", "y", "on")
    cudnn = cudnn_rule(torch_version, (dist, installed[dist]) if dist else None, read_architectures(model_dir),
                       multimodal_architectures(sglang_dir), escape)
    report["cudnn"] = {"torch": torch_version, "cudnn": {d: v for d, v in installed.items() if v}, **cudnn}
    if cudnn["verdict"] == "refuse":
        raise Refused("cudnn", cudnn["reason"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--argv-json", required=True, help="the server's arguments, a JSON list of strings")
    ap.add_argument("--api-key-set", action="store_true", help="the launcher adds --api-key (a placeholder here)")
    ap.add_argument("--model-dir", default="", help="the served model's directory (its config.json)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    try:
        server_argv = json.loads(args.argv_json)
        if not isinstance(server_argv, list) or not all(isinstance(a, str) for a in server_argv):
            raise ValueError("not a list of strings")
    except ValueError as exc:
        report, status = {"error": f"--argv-json: {exc}"}, 2
    else:
        try:
            # SGLang's import and its checks may print; stdout carries the report alone.
            with contextlib.redirect_stdout(sys.stderr):
                report = check(server_argv, args.api_key_set, args.model_dir or None)
            status = 1 if "refused" in report else 0
        except CannotRun as exc:
            report, status = {"error": str(exc)}, 2
    if args.json:
        print(json.dumps(report, sort_keys=True))
    elif "refused" in report:
        refusal = report["refused"]
        print(f"refused ({refusal['step']}; {', '.join(refusal['flags']) or 'no flag'}): {refusal['message']}")
    elif "error" in report:
        print(f"cannot check: {report['error']}")
    else:
        print(f"SGLang {report['sglang_version']} accepts the {report['parsed']} arguments; "
              f"checks run: {', '.join(report['checks']) or 'none'}; cuDNN: {report['cudnn']['reason']}")
    return status


if __name__ == "__main__":
    sys.exit(main())
