"""FlashInfer's all-reduce fusion asked of SM120 GPUs is refused in validation, before any host changes, naming
the variable (issue 39 item 4): role sglang_server's tasks_from validate, run by ansible-playbook on this machine
(local connection, no container), one inventory host per case. Where the GPUs are unknown (no
sglang_server_gpu_arch, no local fact) validation lets it pass: the pre-start launch check refuses it for the
release that will serve (tests/roles/sglang_eagle3_patch/test_launch_check.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from repo import ROOT

PLAY = """\
- name: Validate the server settings of each case
  hosts: all
  gather_facts: false
  tasks:
    - name: Read the case's local facts, as a play's fact gathering reads /etc/ansible/facts.d
      ansible.builtin.setup:
        gather_subset: ["!all", "!min", local]
        fact_path: "{{ case_fact_path }}"
      when: case_fact_path is defined

    - name: Validate (role sglang_server)
      ansible.builtin.include_role:
        name: sglang_server
        tasks_from: validate
"""
FUSION = {"sglang_server_enable_flashinfer_allreduce_fusion": True}
SM120 = {"sglang_server_gpu_arch": "12.0"}
# Local facts of the host (each case's own facts.d): what gpu_preflight and nvidia_cuda write.
GPU_PREFLIGHT_SM120 = {"gpu_preflight": {"server_env": {}, "topology": {"gpus": 8, "compute_capabilities": ["12.0"],
                                                                        "interconnect": "pcie", "p2p": "ok"}}}
NVIDIA_CUDA_SM120 = {"nvidia_cuda": {"gpus": [{"index": i, "compute_cap": "12.0"} for i in range(8)]}}
CASES = {  # host: (its variables, refused)
    "asked": ({**FUSION, **SM120}, True),
    "backend_in_extra_args": ({**SM120, "sglang_server_extra_args": ["--flashinfer-allreduce-fusion-backend", "auto"]}, True),
    "sm120_from_gpu_preflight": ({**FUSION, "local_facts": GPU_PREFLIGHT_SM120}, True),
    "sm120_from_nvidia_cuda": ({**FUSION, "local_facts": NVIDIA_CUDA_SM120}, True),
    "hopper": ({**FUSION, "sglang_server_gpu_arch": "9.0"}, False),
    "one_gpu": ({**FUSION, **SM120, "sglang_server_tp_size": 1, "sglang_server_gpu_count": 1}, False),
    "enforced_off": ({**FUSION, **SM120, "sglang_server_extra_args": ["--enforce-disable-flashinfer-allreduce-fusion"]},
                     False),
    "gpus_unknown": (FUSION, False),
    "not_asked": (SM120, False),
}


def test_fusion_on_sm120_fails_validation_naming_the_variable(tmp_path: Path) -> None:
    hosts = {}
    for name, (variables, _) in CASES.items():
        variables = dict(variables)
        if "local_facts" in variables:
            facts_d = tmp_path / name / "facts.d"
            facts_d.mkdir(parents=True)
            for fact, content in variables.pop("local_facts").items():
                (facts_d / f"{fact}.fact").write_text(json.dumps(content))
            variables["case_fact_path"] = str(facts_d)
        hosts[name] = {**variables, "ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    (tmp_path / "play.yml").write_text(PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
               ANSIBLE_NOCOLOR="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    out = done.stdout + done.stderr
    for name, (_, refused) in CASES.items():
        recap = re.search(rf"^{name}\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=(\d)", out, re.M)
        assert recap and recap.group(1) == ("1" if refused else "0"), (name, out[-3000:])
    messages = [json.loads(line.split("=> ", 1)[1])["msg"] for line in out.splitlines() if line.startswith("fatal: [")]
    assert len(messages) == 4
    assert any(m.startswith("sglang_server_enable_flashinfer_allreduce_fusion is true on GPUs of compute capability 12.0 "
                            "with sglang_server_tp_size 8") for m in messages), messages
    assert all("requires SM90 or SM10X" in m and "Set sglang_server_enable_flashinfer_allreduce_fusion false" in m
               for m in messages), messages
    assert any(m.startswith("sglang_server_extra_args ask for FlashInfer all-reduce fusion") for m in messages)
