#!/usr/bin/python
"""This host's staged models as the local fact ansible_local.sglang_model (role sglang_model, tasks/facts.yml)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_model_staged
short_description: Describe the staged models under the models root and record them as the local fact sglang_model
description:
  - The one interface between role sglang_model and its readers (role sglang_server runs from the revision each
    model's current link points at): what the models root holds, read from the root alone (each model's
    current link and the manifest beside the revision it points at); nothing is hashed (the checks do that).
  - Writes I(fact_file) (JSON) when its content differs, atomically (a temporary file beside it, flushed,
    renamed over the old one), mode 0644, owned by root. Supports check mode and diff mode.
  - The fact, schema 2 -- C(root); C(models), each model with a current link to a revision directory, by its
    name, with C(path) (the revision directory), C(revision), C(current) (the link), C(manifest) (the file
    beside the revision) and C(repo_id) (from that manifest, "" without one).
options:
  root:
    description: The models root (<root>/<name>/<revision>/, <root>/<name>/<revision>.manifest.json, <root>/<name>/current).
    type: path
    required: true
  fact_file:
    description: The local fact file to write.
    type: path
    default: /etc/ansible/facts.d/sglang_model.fact
author: sglang-ansible
"""

EXAMPLES = r"""
- name: Record the staged models for other roles (ansible_local.sglang_model)
  sglang_model_staged:
    root: /srv/models
"""

RETURN = r"""
staged:
  description: The fact as written (see the description).
  returned: always
  type: dict
"""

import json
import os

from ansible.module_utils.sglang_common_local_fact import fact_module_main

SCHEMA = 2


def model_entry(root: str, name: str) -> dict | None:
    link = os.path.join(root, name, "current")
    if not os.path.islink(link) or not os.path.isdir(link):
        return None
    path = os.path.realpath(link)
    manifest = path + ".manifest.json"
    try:
        with open(manifest, encoding="utf-8") as handle:
            repo_id = json.load(handle).get("repo_id") or ""
    except (OSError, ValueError):
        repo_id = ""
    return {"path": path, "revision": os.path.basename(path), "current": link, "manifest": manifest, "repo_id": repo_id}


def describe(root: str) -> dict:
    root = os.path.normpath(root)
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    models = {}
    for name in names:
        entry = model_entry(root, name)
        if entry is not None:
            models[name] = entry
    return {"schema": SCHEMA, "root": root, "models": models}


def main() -> None:
    fact_module_main("sglang_model", "root", describe, "staged")

if __name__ == "__main__":
    main()
