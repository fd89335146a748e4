#!/usr/bin/python
"""Documentation of the sglang_model_wait action (action_plugins/sglang_model_wait.py runs on the controller)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_model_wait
short_description: Wait for a background staging job of role sglang_model, one progress line per poll
description:
  - Polls a job started with C(async) and C(poll: 0) (the role's files/sglang_model_stage.py) with
    M(ansible.builtin.async_status), reads its JSON progress file with M(ansible.builtin.slurp) and prints
    one line per poll on the controller (bytes done and total, rate, ETA, files done).
  - Returns the tool's JSON result; fails with the tool's message when the job failed.
  - Runs on the controller (an action plugin); this file only documents it.
options:
  jid:
    description: The ansible_job_id of the async task.
    type: str
    required: true
  progress:
    description: Path of the job's progress file on the host.
    type: str
  label:
    description: What the lines are about (the model's name).
    type: str
  delay:
    description: Seconds between polls (one line each).
    type: int
    default: 30
  timeout:
    description: Seconds the job may run (its async limit).
    type: int
    default: 86400
author: sglang-ansible
"""

EXAMPLES = r"""
- name: Wait for the download
  sglang_model_wait:
    jid: "{{ job.ansible_job_id }}"
    progress: /run/sglang-model/target.progress.json
    label: target
"""

RETURN = r"""
status:
  description: staged, verified or reopened (corrupted files removed for a re-fetch).
  type: str
  returned: success
fetched_bytes:
  description: Bytes fetched by this run.
  type: int
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={"jid": {"type": "str", "required": True}, "progress": {"type": "str"},
                                          "label": {"type": "str"}, "delay": {"type": "int", "default": 30},
                                          "timeout": {"type": "int", "default": 86400}})
    module.fail_json(msg="sglang_model_wait runs on the controller (action plugin); this module only documents it")


if __name__ == "__main__":
    main()
