"""Start the SGLang SIMULATOR (TEST ONLY): ``python3 -m sglang_sim [SGLang launch flags]``.

Parses SGLang's flags and the SGLANG_SIM_* settings (exit 2 on either's error), logs the banner
and ``server_args=ServerArgs(...)`` as SGLang does, then serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
from typing import Any

from .api import serve
from .engine import chain_acceptance
from .flags import finalize_server_args, load_flag_table, parse_server_args
from .model_dir import ModelDirError, read_config
from .settings import BANNER, SimConfigError, SimSettings
from .sglang_dir import read_sglang_version

log = logging.getLogger("sglang_sim")


def format_server_args(args: dict[str, Any]) -> str:
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S",
                        stream=sys.stdout)
    try:
        table = load_flag_table()
        args = parse_server_args(table, argv)
        settings = SimSettings.from_env(dict(os.environ))
        warnings = finalize_server_args(args)
        if args.get("speculative_algorithm") and settings.accept_first is None:
            chain_acceptance(settings.accept_length, int(args["speculative_num_draft_tokens"]))
        version = read_sglang_version(settings.sglang_dir, table["sglang_version"])
        log.info("%s; flags of sglang %s; reporting version %s; settings %s", BANNER, table["sglang_version"],
                 version, json.dumps(settings.as_json()))
        log.info(format_server_args(args))
        for warning in warnings:
            log.warning(warning)
        for flag in ("model_path", "speculative_draft_model_path"):
            if args.get(flag):
                read_config(args[flag])  # a local directory without a readable config.json fails at once
        # The flag table and parser live for the whole run: keep them out of the collector's
        # full passes, which would otherwise pause the step clock for milliseconds.
        gc.freeze()
        return asyncio.run(serve(settings, args, version))
    except SimConfigError as exc:
        print(f"[sglang_sim] configuration error: {exc}", file=sys.stderr)
        return 2
    except ModelDirError as exc:
        print(f"[sglang_sim] simulated SGLang start-up failure (this is the simulator, not SGLang): {exc}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
