"""The roles' local-fact modules (sglang_build_releases, sglang_model_staged, sglang_server_releases,
sglang_router_fact) in tests: imported, or run as Ansible runs a module (an arguments file), with sglang_common's
module_utils where Ansible puts it (ansible.module_utils.sglang_common_local_fact: a role's module_utils are on
that path once the role is loaded, and these roles declare sglang_common)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from repo import ROOT, load

UTILS = ROOT / "roles/sglang_common/module_utils/sglang_common_local_fact.py"
# Run by the child: the module_utils registered under Ansible's name, then the module as its own __main__.
CHILD = ("import importlib.util, runpy, sys\n"
         "spec = importlib.util.spec_from_file_location('ansible.module_utils.sglang_common_local_fact', sys.argv[1])\n"
         "mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)\n"
         "module = sys.argv[2]; sys.argv = [module, sys.argv[3]]\n"
         "runpy.run_path(module, run_name='__main__')\n")


def load_fact_module(path: Path | str, name: str) -> ModuleType:
    sys.modules["ansible.module_utils.sglang_common_local_fact"] = load(UTILS, "sglang_common_local_fact")
    return load(path, name)


def run_fact_module(path: Path | str, params: dict, workdir: Path, check_mode: bool = False,
                    diff: bool = False) -> dict:
    args = workdir / "module-args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(params, _ansible_check_mode=check_mode, _ansible_diff=diff)}))
    done = subprocess.run([sys.executable, "-c", CHILD, str(UTILS), str(Path(ROOT, path)), str(args)],
                          capture_output=True, text=True)
    out = json.loads(done.stdout)
    assert done.returncode == 0 and not out.get("failed"), (out, done.stderr[-2000:])
    return out
