#!/usr/bin/python
"""Install a flat directory of files on the host in one module call (role sglang_common, tasks_from: package)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_common_files
short_description: Install a flat directory of files in one call; only what differs is written
description:
  - Makes I(dest) hold exactly the given files (with I(exclusive), the default, regular files it does not
    list are removed): a file whose content, mode or owner differs is written again, atomically (a
    temporary file in I(dest), flushed, renamed over the old one), and nothing else is touched.
  - One module call for the whole directory, fresh or current (with M(ansible.builtin.copy) each file
    costs a stat and a copy module call and a transfer).
  - Supports check mode (reports what it would write and remove) and diff mode (before and after of each
    text file written, and of each file removed).
options:
  dest:
    description: The directory (created with I(dir_mode), I(owner), I(group) when missing).
    type: path
    required: true
  files:
    description: The files, each C(name) (a file name, no directory), C(content) (base64) and optionally
      C(mode) (else I(mode)).
    type: list
    elements: dict
    required: true
  mode:
    description: Mode of every file that gives none.
    type: str
    default: "0644"
  dir_mode:
    description: Mode of I(dest).
    type: str
    default: "0755"
  owner:
    description: Owner of I(dest) and every file.
    type: str
    default: root
  group:
    description: Group of I(dest) and every file.
    type: str
    default: root
  exclusive:
    description: Remove the regular files (hidden ones too) in I(dest) that I(files) does not name.
    type: bool
    default: true
author: sglang-ansible
"""

EXAMPLES = r"""
- name: Install a package of the role's files
  sglang_common_files:
    dest: /opt/sglang/bin/sglang_interface_check
    files: "{{ package_files | sglang_common_file_payloads }}"
"""

RETURN = r"""
written:
  description: Names of the files written (missing, or content, mode or owner different).
  type: list
  elements: str
  returned: always
removed:
  description: Names of the files removed (not in I(files); I(exclusive) only).
  type: list
  elements: str
  returned: always
"""

import base64
import binascii
import grp
import os
import pwd
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule

DIFF_LIMIT = 64 * 1024  # larger or binary files: no before/after in diff mode


def _text(data: bytes | None) -> str | None:
    if data is None or len(data) > DIFF_LIMIT:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _current(path: str) -> tuple[bytes, os.stat_result] | None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(info.st_mode):
        return b"", info  # a link or a special file in the way: replaced
    with open(path, "rb") as fh:
        return fh.read(), info


def _write(dest: str, name: str, data: bytes, mode: int, uid: int, gid: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=dest, prefix=f".{name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchown(fh.fileno(), uid, gid)
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(dest, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def main():
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "dict", "required": True},
            "mode": {"type": "str", "default": "0644"},
            "dir_mode": {"type": "str", "default": "0755"},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
            "exclusive": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    dest = p["dest"]
    try:
        dir_mode, default_mode = int(p["dir_mode"], 8), int(p["mode"], 8)
    except ValueError:
        module.fail_json(msg=f"mode {p['mode']!r} and dir_mode {p['dir_mode']!r} must be octal strings such as '0644'")
    try:
        uid, gid = pwd.getpwnam(p["owner"]).pw_uid, grp.getgrnam(p["group"]).gr_gid
    except KeyError as exc:
        module.fail_json(msg=f"unknown owner or group on this host: {exc}")

    wanted: dict[str, bytes] = {}
    modes: dict[str, int] = {}
    for i, item in enumerate(p["files"]):
        name, content = item.get("name"), item.get("content")
        try:
            modes[str(name)] = int(str(item["mode"]), 8) if item.get("mode") else default_mode
        except ValueError:
            module.fail_json(msg=f"files[{i}].mode {item.get('mode')!r} must be an octal string such as '0644'")
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            module.fail_json(msg=f"files[{i}].name must be a file name without a directory, got {name!r}")
        if name in wanted:
            module.fail_json(msg=f"files[{i}].name {name!r} is listed twice")
        try:
            wanted[name] = base64.b64decode(content or "", validate=True)
        except (binascii.Error, TypeError, ValueError):
            module.fail_json(msg=f"files[{i}].content ({name}) is not base64")

    diffs, written, removed = [], [], []
    dir_info = os.lstat(dest) if os.path.lexists(dest) else None
    if dir_info is not None and not stat.S_ISDIR(dir_info.st_mode):
        module.fail_json(msg=f"{dest} exists and is not a directory")
    dir_changed = dir_info is None or (stat.S_IMODE(dir_info.st_mode), dir_info.st_uid, dir_info.st_gid) != (dir_mode, uid, gid)

    for name, data in wanted.items():
        try:
            current = None if dir_info is None else _current(os.path.join(dest, name))
        except IsADirectoryError:
            module.fail_json(msg=f"{os.path.join(dest, name)} is a directory; nothing was changed")
        if current is not None:
            old, info = current
            if (stat.S_ISREG(info.st_mode) and old == data
                    and (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (modes[name], uid, gid)):
                continue
        written.append(name)
        before = _text(current[0]) if current is not None else ""
        after = _text(data)
        diffs.append({"before_header": os.path.join(dest, name), "after_header": os.path.join(dest, name),
                      "before": before if before is not None else "(binary or large)\n",
                      "after": after if after is not None else "(binary or large)\n"})
    if p["exclusive"] and dir_info is not None:
        for entry in sorted(os.listdir(dest)):
            path = os.path.join(dest, entry)
            if entry not in wanted and os.path.isfile(path) and not os.path.islink(path):
                removed.append(entry)
                with open(path, "rb") as fh:
                    before = _text(fh.read(DIFF_LIMIT + 1))
                diffs.append({"before_header": path, "after_header": f"{path} (removed)",
                              "before": before if before is not None else "(binary or large)\n", "after": ""})

    changed = bool(written or removed or dir_changed)
    if changed and not module.check_mode:
        done: list[str] = []
        try:
            if dir_info is None:
                os.makedirs(dest, mode=dir_mode)
            if dir_changed:
                os.chown(dest, uid, gid)
                os.chmod(dest, dir_mode)
            for name in written:
                _write(dest, name, wanted[name], modes[name], uid, gid)
                done.append(name)
            for name in removed:
                os.unlink(os.path.join(dest, name))
        except OSError as exc:
            module.fail_json(msg=f"installing into {dest} failed after writing {done or 'nothing'}: {exc}")
    result = {"changed": changed, "written": written, "removed": removed}
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
