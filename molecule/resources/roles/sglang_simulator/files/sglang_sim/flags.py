"""SGLang's command line for the SIMULATOR (TEST ONLY): the flags of sglang.launch_server.

flags.json (next to this module) is generated from SGLang's own server_args.py by
tests/harness/gen_sim_flags.py; this module turns it back into an argparse parser equivalent to
``ServerArgs.add_cli_args`` (unknown flags are an argparse error, exit 2) and applies the part
of SGLang's argument post-processing the simulator models.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .settings import BANNER, SimConfigError

FLAGS_FILE = Path(__file__).resolve().with_name("flags.json")
SPEC_ALGORITHMS_WITH_DRAFT = ("EAGLE", "EAGLE3", "STANDALONE")

log = logging.getLogger("sglang_sim")


def _nullable_str(value: str) -> str | None:
    return None if not value or value == "None" else value


TYPE_FUNCS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "json": json.loads,
    "json_list": json.loads,
    "nullable_str": _nullable_str,
}


class _DeprecatedAction(argparse.Action):
    """SGLang's DeprecatedAction: takes no value, only warns."""

    def __init__(self, option_strings: list[str], dest: str, nargs: int = 0, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        log.warning("The command line argument '%s' is deprecated and will be removed in future versions.",
                    option_string)


class _LoRAPathAction(argparse.Action):
    """SGLang's LoRAPathAction: each value is a path or a JSON object with lora_name/lora_path."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        paths: list[Any] = []
        for value in values or []:
            value = value.strip()
            if value.startswith("{") and value.endswith("}"):
                obj = json.loads(value)
                if "lora_path" not in obj or "lora_name" not in obj:
                    parser.error(f"{value!r} looks like JSON but lacks 'lora_name' and 'lora_path'")
                paths.append(obj)
            else:
                paths.append(value)
        setattr(namespace, self.dest, paths)


def load_flag_table(path: Path = FLAGS_FILE) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SimConfigError(f"flag table {path} is missing; it ships inside the sglang_sim package") from None


def build_parser(table: dict[str, Any]) -> argparse.ArgumentParser:
    """An argparse parser equivalent to SGLang's `ServerArgs.add_cli_args` for the table's version."""
    parser = argparse.ArgumentParser(
        prog="python3 -m sglang_sim",
        description=(
            f"{BANNER}. Accepts the command-line flags of sglang.launch_server "
            f"{table['sglang_version']} and serves made-up answers in SGLang's HTTP API shapes. "
            "Simulation settings come from SGLANG_SIM_* environment variables (see the package docstring)."
        ),
    )
    actions = {"deprecated": _DeprecatedAction, "lora_paths": _LoRAPathAction, "store_true": "store_true"}
    for flag in table["flags"]:
        kwargs: dict[str, Any] = {"dest": flag["dest"]}
        if flag["kind"] != "store":
            kwargs["action"] = actions[flag["kind"]]
        if "type" in flag:
            kwargs["type"] = TYPE_FUNCS[flag["type"]]
        for key in ("nargs", "const", "choices", "required", "default"):
            if key in flag:
                kwargs[key] = flag[key]
        parser.add_argument(*flag["options"], **kwargs)
    return parser


def parse_server_args(table: dict[str, Any], argv: list[str] | None) -> dict[str, Any]:
    """Parse like prepare_server_args(); return the ServerArgs fields, as /get_server_info shows them."""
    namespace = vars(build_parser(table).parse_args(argv))
    if namespace.get("config"):  # prepare_server_args() merges the YAML before parsing
        raise SimConfigError("--config YAML files are not simulated; pass the options as flags")
    for cli_dest, field in table["cli_renames"].items():  # ServerArgs.from_cli_args
        namespace[field] = namespace[cli_dest]
    return {field: namespace[field] for field in table["server_args_fields"]}


def finalize_server_args(args: dict[str, Any]) -> list[str]:
    """Apply the subset of SGLang 0.5.9's argument post-processing the simulator models.

    Mutates `args` and returns the warnings SGLang would log, in its words.
    """
    warnings: list[str] = []
    if args.get("served_model_name") is None:
        args["served_model_name"] = args["model_path"]
    if args.get("tokenizer_path") is None:
        args["tokenizer_path"] = args["model_path"]
    algo = args.get("speculative_algorithm")
    if algo == "NEXTN":
        algo = args["speculative_algorithm"] = "EAGLE"
    if algo in SPEC_ALGORITHMS_WITH_DRAFT or algo == "NGRAM":
        if args.get("max_running_requests") is None:
            args["max_running_requests"] = 48
            warnings.append("Max running requests is reset to 48 for speculative decoding. You can override "
                            "this by explicitly setting --max-running-requests.")
    if algo in SPEC_ALGORITHMS_WITH_DRAFT:
        if args.get("speculative_num_steps") is None:
            args["speculative_num_steps"], args["speculative_eagle_topk"], args["speculative_num_draft_tokens"] = 3, 1, 4
        if args.get("speculative_eagle_topk") is None:
            args["speculative_eagle_topk"] = 1
        if args["speculative_eagle_topk"] == 1 and args.get("speculative_num_draft_tokens") != args["speculative_num_steps"] + 1:
            warnings.append("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                            "speculative_eagle_topk == 1")
            args["speculative_num_draft_tokens"] = args["speculative_num_steps"] + 1
    elif algo == "NGRAM" and args.get("speculative_num_draft_tokens") is None:
        args["speculative_num_draft_tokens"] = args["speculative_ngram_max_match_window_size"]
    return warnings
