"""gpu_preflight's defaults, argument specs and README describe the same variables with the same defaults."""

from __future__ import annotations

import re

import yaml

from repo import ROOT

ROLE = ROOT / "roles" / "gpu_preflight"


def test_defaults_specs_and_readme_agree():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    options = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    readme = set(re.findall(r"^\| `(gpu_preflight_\w+)` \|", (ROLE / "README.md").read_text(), re.M))
    assert set(defaults) == set(options) == readme
    for name, spec in options.items():
        assert spec["default"] == defaults[name], name
        assert spec.get("description"), name


def test_every_variable_the_tasks_use_is_a_role_variable():
    used = set()
    for path in [*(ROLE / "tasks").glob("*.yml"), ROLE / "vars" / "main.yml"]:  # the fixes' are read through vars
        used |= set(re.findall(r"\b(gpu_preflight_[a-z0-9_]+)", path.read_text()))
    # The role's modules, its program, its tags and the fact it sets are not variables.
    used -= {"gpu_preflight_facts", "gpu_preflight_report", "gpu_preflight_allreduce", "gpu_preflight_pcie",
             "gpu_preflight_inventory", "gpu_preflight_host", "gpu_preflight_nccl", "gpu_preflight_fixes",
             "gpu_preflight_pcie_findings", "gpu_preflight_pcie_parse"}
    defaults = set(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()))
    assert used - defaults == set()
    assert defaults - used == set(), "variables no task reads"
