#!/usr/bin/python
"""Ansible module: add delegation methods to an SGLang model wrapper class, version aware."""

from __future__ import annotations

import ast
import os
import tempfile
import textwrap

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: sglang_eagle3_patch
short_description: Add delegation methods to an SGLang model wrapper class
description:
  - Inserts methods (rendered by the caller, normally from C(templates/sglang_eagle3_delegation.py.j2))
    at the end of a class in an SGLang model file, between marker comments, just before the
    C(EntryClass) line.
  - Only methods the class does not define yet are added; when none is missing the file stays
    byte-identical, so an SGLang release that already ships them is left alone.
  - A block written by an earlier run is recognised by its markers and recomputed, so a second run
    changes nothing and a changed template replaces the block.
  - The new text must parse and the methods must land inside the class, otherwise nothing is
    written. The file is replaced atomically (temporary file in the same directory, then rename)
    with the original mode and owner; if the written file does not compile, the original is put back.
options:
  path:
    description: The sglang package directory (the one holding C(srt/)).
    type: path
    required: true
  file:
    description: The model file, relative to I(path).
    type: str
    default: srt/models/kimi_k25.py
  class_name:
    description: The wrapper class to extend.
    type: str
    required: true
  inner_attr:
    description: The attribute holding the wrapped model; the class must assign C(self.<inner_attr>).
    type: str
    required: true
  block:
    description: Python source of the methods (class-body indentation or none), nothing but C(def)s.
    type: str
    required: true
  marker:
    description: Text of the C(# BEGIN)/C(# END) marker comments around the inserted block.
    type: str
    default: sglang_eagle3_patch
author: sglang-ansible
"""

EXAMPLES = r"""
- name: Add the EAGLE-3 delegation to Kimi-K2.5
  sglang_eagle3_patch:
    path: /opt/sglang/current/venv/lib/python3.12/site-packages/sglang
    class_name: KimiK25ForConditionalGeneration
    inner_attr: language_model
    block: "{{ lookup('ansible.builtin.template', 'sglang_eagle3_delegation.py.j2') }}"
"""

RETURN = r"""
file:
  description: Absolute path of the model file.
  returned: always
  type: str
added:
  description: Methods this run inserted (or would insert in check mode).
  returned: always
  type: list
  elements: str
managed:
  description: Methods the managed block holds after the run.
  returned: always
  type: list
  elements: str
present:
  description: Methods of the block the class already defines itself (left alone).
  returned: always
  type: list
  elements: str
"""


class PatchError(Exception):
    """The file cannot be patched; it is left untouched."""


def _markers(marker: str) -> tuple[str, str]:
    return f"# BEGIN {marker}", f"# END {marker}"


def _is_marker(line: str, marker: str) -> bool:
    stripped = line.strip()
    return stripped == marker or stripped.startswith(marker + ":")


def strip_block(text: str, marker: str) -> str:
    """The file text without a block an earlier run inserted."""
    begin, end = _markers(marker)
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if _is_marker(line, begin)]
    ends = [i for i, line in enumerate(lines) if _is_marker(line, end)]
    if not starts and not ends:
        return text
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise PatchError(f"the '{begin}' / '{end}' markers are damaged (found {len(starts)} and {len(ends)}); "
                         "restore the file from the release")
    first = starts[0]
    if first > 0 and not lines[first - 1].strip():
        first -= 1  # the blank line the insertion put before the block
    return "".join(lines[:first] + lines[ends[0] + 1 :])


def _entry_class_line(tree: ast.Module) -> int | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
            return node.lineno
    return None


def _class_members(node: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            names.add(stmt.target.id)
    return names


def _sets_inner(node: ast.ClassDef, inner_attr: str) -> bool:
    for sub in ast.walk(node):
        targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(sub, ast.AnnAssign) else []
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr == inner_attr
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                return True
    # A property of that name also gives access to the inner model.
    return inner_attr in _class_members(node)


def split_methods(block: str) -> list[tuple[str, str]]:
    """(name, dedented source) of each method in the rendered block."""
    source = textwrap.dedent(block).strip("\n") + "\n"
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise PatchError(f"the rendered methods do not parse (line {exc.lineno}: {exc.msg}); "
                         "check the template and the method signatures") from exc
    lines = source.splitlines(keepends=True)
    methods = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise PatchError("the rendered block may only hold method definitions, "
                             f"found {type(node).__name__} at line {node.lineno}")
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        methods.append((node.name, "".join(lines[start - 1 : node.end_lineno])))
    if not methods:
        raise PatchError("the rendered block holds no method")
    return methods


def compute(text: str, class_name: str, inner_attr: str, block: str, marker: str) -> tuple[str, list[str], list[str]]:
    """The desired file text, the methods in the managed block and those the class has itself."""
    base = strip_block(text, marker)
    try:
        tree = ast.parse(base)
    except SyntaxError as exc:
        raise PatchError(f"the model file does not parse (line {exc.lineno}: {exc.msg}); not touching it") from exc
    entry_line = _entry_class_line(tree)
    if entry_line is None:
        raise PatchError("no 'EntryClass = ...' line in the model file: nothing to anchor the methods before")
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if cls is None:
        raise PatchError(f"class {class_name} is not defined at the top level of the model file")
    if cls.end_lineno is None or cls.end_lineno >= entry_line:
        raise PatchError(f"class {class_name} does not end before the EntryClass line")
    if not _sets_inner(cls, inner_attr):
        raise PatchError(f"class {class_name} never sets self.{inner_attr}: the delegation would have nothing to forward to")
    members = _class_members(cls)
    methods = split_methods(block)
    wanted = [(name, src) for name, src in methods if name not in members]
    present = [name for name, _ in methods if name in members]
    if not wanted:
        return base, [], present
    indent = " " * cls.body[0].col_offset
    begin, end = _markers(marker)
    body = "\n".join(textwrap.indent(src, indent) for _, src in wanted)
    inserted = f"\n{indent}{begin}: methods the release lacks, added by Ansible (role sglang_eagle3_patch)\n{body}{indent}{end}\n"
    lines = base.splitlines(keepends=True)
    if not lines[cls.end_lineno - 1].endswith("\n"):
        lines[cls.end_lineno - 1] += "\n"
    desired = "".join(lines[: cls.end_lineno]) + inserted + "".join(lines[cls.end_lineno :])
    check_result(desired, class_name, [name for name, _ in wanted])
    return desired, [name for name, _ in wanted], present


def check_result(text: str, class_name: str, added: list[str]) -> None:
    """The new text compiles and the class now defines every added method."""
    try:
        tree = ast.parse(text)
        compile(tree, "<patched>", "exec")
    except SyntaxError as exc:
        raise PatchError(f"the patched file would not compile (line {exc.lineno}: {exc.msg}); nothing written") from exc
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    missing = [name for name in added if cls is None or name not in _class_members(cls)]
    if missing:
        raise PatchError(f"after insertion {class_name} still lacks {', '.join(missing)}; nothing written")


def _defined_in(text: str, class_name: str) -> set[str]:
    """Members of the class in the file as it is now (managed block included)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    return _class_members(cls) if cls is not None else set()


def _atomic_write(path: str, data: bytes, like: os.stat_result) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, like.st_mode & 0o7777)
        if os.geteuid() == 0:
            os.chown(tmp, like.st_uid, like.st_gid)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def replace_file(path: str, new: bytes, original: bytes) -> None:
    """Atomically replace the file; put the original back if what landed does not compile."""
    like = os.stat(path)
    _atomic_write(path, new, like)
    try:
        with open(path, "rb") as handle:
            compile(handle.read(), path, "exec")
    except (SyntaxError, ValueError, OSError) as exc:
        _atomic_write(path, original, like)
        raise PatchError(f"the written file did not compile ({exc}); the original was restored") from exc


def run(module: AnsibleModule) -> dict:
    params = module.params
    root = params["path"]
    if not os.path.isdir(os.path.join(root, "srt")):
        raise PatchError(f"{root} is not an sglang package directory (no srt/ inside)")
    path = os.path.join(root, params["file"])
    if not os.path.isfile(path):
        raise PatchError(f"model file {path} not found")
    with open(path, "rb") as handle:
        original = handle.read()
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchError(f"{path} is not UTF-8 text") from exc
    desired, managed, present = compute(text, params["class_name"], params["inner_attr"], params["block"], params["marker"])
    new = desired.encode("utf-8")
    already = _defined_in(text, params["class_name"])
    added = [name for name in managed if name not in already]
    result = {"changed": new != original, "file": path, "added": added, "managed": managed, "present": present}
    if result["changed"] and module._diff:
        result["diff"] = {
            "before_header": path,
            "after_header": path,
            "before": text,
            "after": desired,
        }
    if result["changed"]:
        if added:
            result["msg"] = f"added {', '.join(added)}"
        elif managed:
            result["msg"] = f"rewrote the managed block ({', '.join(managed)})"
        else:
            result["msg"] = "removed the managed block: the class defines every method itself now"
        if not module.check_mode:
            replace_file(path, new, original)
    elif managed:
        result["msg"] = f"up to date: the managed block provides {', '.join(managed)}"
    else:
        result["msg"] = f"nothing to add: the class defines {', '.join(present)} itself"
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "file": {"type": "str", "default": "srt/models/kimi_k25.py"},
            "class_name": {"type": "str", "required": True},
            "inner_attr": {"type": "str", "required": True},
            "block": {"type": "str", "required": True},
            "marker": {"type": "str", "default": "sglang_eagle3_patch"},
        },
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module))
    except PatchError as exc:
        module.fail_json(msg=str(exc), file=os.path.join(module.params["path"], module.params["file"]))


if __name__ == "__main__":
    main()
