"""What a molecule scenario's test hosts need, prepared by the scenario itself.

molecule/resources/create.yml (every scenario's create step) calls this script, so that
`molecule test -s <scenario>` typed from the venv works without `make`: it finds in the cache
(~/.cache/sglang-ansible), or builds, the test-host image and the read-only trees the platforms
mount, and points links in the scenario's ephemeral directory at those trees:
DEST/nvidia-mirror, DEST/hub-fixtures and DEST/sglang-sources. The platforms in molecule.yml mount
the links; .config/molecule/config.yml gives them to Ansible and the verifiers as NVIDIA_MIRROR_DIR,
MODEL_FIXTURES_DIR and SGLANG_SOURCES_DIR. The mirror and the fixtures are always linked (the demo
inventory's group_vars read both); the sources, the costly tree, only when a platform mounts them.

Prints {"image": <the test-host image reference>} on stdout; the harness's logs go to stderr.

Usage: python3 tests/harness/scenario_harness.py DEST [TREE ...]   # TREE: a link a platform mounts
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import hostsetup
import mirror
import sources
import synthetic_model
from steps import StepFailed, guarded

TREES = {"nvidia-mirror": mirror.ensure, "hub-fixtures": synthetic_model.molecule_fixtures,
         "sglang-sources": sources.ensure}
ALWAYS = ("nvidia-mirror", "hub-fixtures")


def image() -> str:
    """The current recipe's test-host image, built (with podman's setup) where it is missing."""
    ref = hostsetup.image_ref()
    if not hostsetup.image_exists(ref) and hostsetup.main([]) != 0:
        raise StepFailed(f"test-host image {ref}: tests/harness/hostsetup.py failed (see above)")
    return ref


def link(dest: Path, name: str, target: Path) -> None:
    """dest/name -> target, replaced atomically (a run of the same scenario may read the old one)."""
    path = dest / name
    tmp = path.with_name(f".{name}.new")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, path)


def prepare(dest: Path, trees: list[str]) -> dict:
    unknown = sorted(set(trees) - set(TREES))
    if unknown:
        raise StepFailed(f"unknown harness tree(s) {unknown}: known {sorted(TREES)}")
    dest.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stdout(sys.stderr):  # hostsetup logs on stdout; stdout is the answer
        ref = image()
        for name in sorted(set(ALWAYS) | set(trees)):
            link(dest, name, TREES[name]())
    return {"image": ref}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    print(json.dumps(prepare(Path(args[0]), args[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(guarded("scenario-harness", main))
