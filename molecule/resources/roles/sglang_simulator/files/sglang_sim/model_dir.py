"""What the SIMULATOR (TEST ONLY) reads from a local model directory, as SGLang would.

SGLang 0.5.9 given a local ``--model-path`` (or ``--speculative-draft-model-path``) reads the
directory's ``config.json`` first (no config: it fails at once) and, while loading weights, the
safetensors files that ``model.safetensors.index.json`` maps the tensors to: a shard listed there
and missing fails the load. The simulator does the same checks on the files (it reads headers and
the index, never tensor data) so that a partially staged model fails its start here as it would
on a GPU host. A path that is not a directory is left alone (a Hub id: the role refuses those).
"""

from __future__ import annotations

import json
from pathlib import Path

INDEX = "model.safetensors.index.json"


class ModelDirError(Exception):
    """The model directory cannot be served (the message is what the server log shows)."""


def read_config(path: str) -> dict | None:
    """config.json of a local model directory (None for a non-directory path); fails like SGLang."""
    directory = Path(path)
    if not directory.is_dir():
        return None
    config = directory / "config.json"
    if not config.is_file():
        raise ModelDirError(f"OSError: {directory} does not appear to have a file named config.json. "
                            "Checkout 'https://huggingface.co/None/tree/None' for available files.")
    try:
        return json.loads(config.read_text())
    except ValueError as exc:
        raise ModelDirError(f"OSError: It looks like the config file at '{config}' is not a valid JSON file ({exc})") from exc


def missing_weights(path: str) -> list[str]:
    """The weight files the directory's index names and the directory lacks (sorted)."""
    directory = Path(path)
    index = directory / INDEX
    if not directory.is_dir():
        return []
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except ValueError as exc:
            raise ModelDirError(f"ValueError: {index} is not valid JSON ({exc})") from exc
    else:
        shards = {p.name for p in directory.glob("*.safetensors")}
        if not shards:
            return ["*.safetensors (no weights at all)"]
    return sorted(s for s in shards if not (directory / s).is_file())


def is_kimi_k25(config: dict | None) -> bool:
    return bool(config) and "KimiK25ForConditionalGeneration" in (config.get("architectures") or [])
