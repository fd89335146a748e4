"""requirements.yml names every collection the project uses, at the version the pinned ansible package bundles.

Sites with Galaxy install the collections from requirements.yml onto ansible-core; `make` takes them
from the ansible package of requirements.txt. Both must give the same: every collection a playbook,
role, template or ansible.cfg names (by FQCN) is in requirements.yml, at the bundled version, and the
Makefile compiles exactly those collections into the venv.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import ansible_collections
import yaml

from repo import ROOT

BUNDLED = Path(ansible_collections.__path__[0])
FQCN = re.compile(r"\b([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*")
SKIP = {".git", ".venv", ".test-logs", "bench-results", "node_modules"}


def pinned() -> dict[str, str]:
    doc = yaml.safe_load((ROOT / "requirements.yml").read_text())
    return {c["name"]: str(c["version"]) for c in doc["collections"]}


def used() -> dict[str, set[str]]:
    """Collections named by FQCN in the project's YAML, templates and ansible.cfg: {collection: {file, ...}}."""
    found: dict[str, set[str]] = {}
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP]
        for file in files:
            path = Path(top, file)
            if path.suffix not in {".yml", ".yaml", ".j2", ".cfg"}:
                continue
            for ns, name in FQCN.findall(path.read_text(errors="replace")):
                if (ns, name) != ("ansible", "builtin") and (BUNDLED / ns / name / "MANIFEST.json").exists():
                    found.setdefault(f"{ns}.{name}", set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_collection_used_is_pinned_at_the_bundled_version():
    pins, uses = pinned(), used()
    assert "community.general" in uses and "ansible.posix" in uses  # the scan finds what is there
    missing = {c: sorted(files)[:3] for c, files in uses.items() if c not in pins}
    assert not missing, f"collections used but not in requirements.yml: {missing}"
    for name, version in pins.items():
        ns, coll = name.split(".")
        manifest = json.loads((BUNDLED / ns / coll / "MANIFEST.json").read_text())
        assert manifest["collection_info"]["version"] == version, f"{name}: requirements.yml {version}, bundled " \
                                                                  f"{manifest['collection_info']['version']}"


def test_the_makefile_compiles_the_pinned_collections():
    line = next(x for x in (ROOT / "Makefile").read_text().splitlines() if x.startswith("COLLECTIONS :="))
    assert sorted(line.split(":=", 1)[1].split()) == sorted(n.replace(".", "/") for n in pinned())
