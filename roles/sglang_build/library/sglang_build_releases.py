#!/usr/bin/python
"""This host's releases as the local fact ansible_local.sglang_build (role sglang_build, tasks/facts.yml)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_build_releases
short_description: Describe the releases under a root and record them as the local fact sglang_build
description:
  - The one interface between role sglang_build and its readers (role sglang_server, the patch, rollback
    and upgrade playbooks): what the releases root holds, read from the root alone (its current and previous
    links, each release's .complete marker and manifest.json, the venv's site-packages); nothing is imported
    or run.
  - Writes I(fact_file) (JSON) when its content differs, atomically (a temporary file beside it, flushed,
    renamed over the old one), mode 0644, owned by root. Supports check mode and diff mode.
  - The fact, schema 2 -- C(root); C(current) (null without a current link) with C(id), C(dir), C(python)
    (through the current link: <root>/current/venv/bin/python, what the server's unit runs), C(sglang_dir),
    C(version), C(patch_id), C(release_set); C(releases), each complete release by id with C(dir), C(python) (its
    own directory's), C(sglang_dir), C(version), C(patch_id), C(release_set).
  - C(sglang_dir) is the sglang package the release's check recorded in its manifest, else the one in the
    venv's site-packages (a release laid out by hand), else "" (no SGLang in it).
options:
  root:
    description: The releases root (<root>/releases/<id>/venv, <root>/current).
    type: path
    required: true
  fact_file:
    description: The local fact file to write.
    type: path
    default: /etc/ansible/facts.d/sglang_build.fact
author: sglang-ansible
"""

EXAMPLES = r"""
- name: Record the releases for other roles (ansible_local.sglang_build)
  sglang_build_releases:
    root: /opt/sglang
"""

RETURN = r"""
releases:
  description: The fact as written (see the description).
  returned: always
  type: dict
"""

import glob
import json
import os

from ansible.module_utils.sglang_common_local_fact import fact_module_main

SCHEMA = 2
COMPLETE = ".complete"  # files/sglang_build_tool/plan.py: a release counts once its check wrote it


def package_dir(release: str, manifest: dict) -> str:
    recorded = manifest.get("sglang_dir") or ""
    if recorded and os.path.isdir(recorded):
        return recorded
    found = sorted(glob.glob(os.path.join(release, "venv", "lib", "python3*", "site-packages", "sglang", "__init__.py")))
    return os.path.dirname(found[-1]) if found else ""


def release_entry(release: str) -> dict:
    try:
        with open(os.path.join(release, "manifest.json"), encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        manifest = {}
    inputs = manifest.get("inputs") or {}
    return {"dir": release, "python": os.path.join(release, "venv", "bin", "python"),
            "sglang_dir": package_dir(release, manifest),
            "version": (manifest.get("versions") or {}).get("sglang") or "",
            "patch_id": (inputs.get("patch") or {}).get("id") or "",
            "release_set": manifest.get("release_set") or ""}


def link_target(root: str, name: str) -> str | None:
    link = os.path.join(root, name)
    if os.path.islink(link) and os.path.isdir(link):
        return os.path.realpath(link)
    return None


def describe(root: str) -> dict:
    root = os.path.normpath(root)
    releases = os.path.realpath(os.path.join(root, "releases"))  # as a link's target reads (stat's lnk_source)
    names = sorted(os.listdir(releases)) if os.path.isdir(releases) else []
    listed = {name: release_entry(os.path.join(releases, name)) for name in names
              if os.path.isfile(os.path.join(releases, name, COMPLETE))}
    current = link_target(root, "current")
    current_entry = None
    if current is not None:
        name = os.path.basename(current)
        entry = listed.get(name) or release_entry(current)
        current_entry = dict(entry, id=name, python=os.path.join(root, "current", "venv", "bin", "python"))
    return {"schema": SCHEMA, "root": root, "current": current_entry, "releases": listed}


def main() -> None:
    fact_module_main("sglang_build", "root", describe, "releases")

if __name__ == "__main__":
    main()
