#!/usr/bin/python
"""Ensure several directories, each with its owner, group and mode, in one module call (role sglang_common)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_common_dirs
short_description: Ensure a list of directories with their owner, group and mode in one call
description:
  - Each directory of I(directories), in the order given, is created when missing and gets its owner,
    group and mode when they differ; nothing else is touched. A missing parent that is not listed is
    created as C(mkdir -p) would (root's, the process umask).
  - One module call for the whole list (with M(ansible.builtin.file) in a loop, each directory is a
    module call of its own).
  - A path that exists and is not a directory, or an owner or group the host does not know, fails before
    anything changes.
  - Supports check mode and diff mode (each directory's state, owner, group and mode before and after).
options:
  directories:
    description: The directories, each C(path) (absolute) and optionally C(owner), C(group), C(mode)
      (else I(owner), I(group), I(mode)).
    type: list
    elements: dict
    required: true
  owner:
    description: Owner of every directory that gives none.
    type: str
    default: root
  group:
    description: Group of every directory that gives none.
    type: str
    default: root
  mode:
    description: Mode (octal) of every directory that gives none.
    type: str
    default: "0755"
author: sglang-ansible
"""

EXAMPLES = r"""
- name: Create the server's directories
  sglang_common_dirs:
    owner: sglang
    group: sglang
    mode: "0750"
    directories:
      - path: /var/lib/sglang
      - path: /var/lib/sglang/cache
      - path: /etc/sglang
        owner: root
"""

RETURN = r"""
created:
  description: Paths created.
  type: list
  elements: str
  returned: always
changed_paths:
  description: Paths created or whose owner, group or mode changed.
  type: list
  elements: str
  returned: always
"""

import grp
import os
import pwd

from ansible.module_utils.basic import AnsibleModule


def _known(lookup, name: str) -> bool:
    """A user or group name (or a numeric id) that the host knows."""
    if name.isdigit():
        return True
    try:
        lookup(name)
    except KeyError:
        return False
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "dict", "required": True},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
            "mode": {"type": "str", "default": "0755"},
        },
        supports_check_mode=True,
    )
    p = module.params
    wanted = []
    for i, entry in enumerate(p["directories"]):
        path = entry.get("path")
        if not isinstance(path, str) or not os.path.isabs(path):
            module.fail_json(msg=f"directories[{i}].path must be an absolute path, got {path!r}; nothing was changed")
        mode = str(entry.get("mode") or p["mode"])
        try:
            int(mode, 8)
        except ValueError:
            module.fail_json(msg=f"directories[{i}] ({path}): mode {mode!r} is not octal; nothing was changed")
        wanted.append({"path": os.path.normpath(path), "owner": str(entry.get("owner") or p["owner"]),
                       "group": str(entry.get("group") or p["group"]), "mode": mode})
    for entry in wanted:
        if os.path.lexists(entry["path"]) and not os.path.isdir(entry["path"]):
            module.fail_json(msg=f"{entry['path']} exists and is not a directory; nothing was changed")
        if not _known(pwd.getpwnam, entry["owner"]) or not _known(grp.getgrnam, entry["group"]):
            module.fail_json(msg=f"{entry['path']}: owner {entry['owner']!r} or group {entry['group']!r} does not "
                                 "exist on this host; nothing was changed")

    created, changed_paths, diffs = [], [], []
    for entry in wanted:
        path, diff = entry["path"], {"before": {"path": entry["path"]}, "after": {"path": entry["path"]}}
        changed = False
        if not os.path.isdir(path):
            diff["before"]["state"], diff["after"]["state"] = "absent", "directory"
            created.append(path)
            changed = True
            if module.check_mode:
                changed_paths.append(path)
                diffs.append(diff)
                continue
            os.makedirs(path)
        file_args = {"path": path, "owner": entry["owner"], "group": entry["group"], "mode": entry["mode"],
                     "attributes": None, "secontext": [None, None, None]}
        changed = module.set_fs_attributes_if_different(file_args, changed, diff=diff)
        if changed:
            changed_paths.append(path)
            diffs.append(diff)
    module.exit_json(changed=bool(changed_paths), created=created, changed_paths=changed_paths, diff=diffs)


if __name__ == "__main__":
    main()
