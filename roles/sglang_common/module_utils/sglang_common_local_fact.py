"""A role's local fact (/etc/ansible/facts.d/<role>.fact) written as the roles' fact modules write it (role
sglang_common, for sglang_build's sglang_build_releases, sglang_model's sglang_model_staged,
sglang_server's sglang_server_releases and sglang_router's sglang_router_fact): JSON, sorted,
written only when its content differs, atomically (a temporary file beside it, flushed, renamed over the old
one), mode 0644, owned by root when written as root; check mode reports without writing, diff mode shows
before and after."""

from __future__ import annotations

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def write_atomically(path: str, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".fact.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        if os.geteuid() == 0:
            os.chown(tmp, 0, 0)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def record_local_fact(module, fact: dict, path: str, key: str) -> dict:
    """Write `fact` to `path` unless it holds it already; the module's result, the fact under `key`."""
    text = json.dumps(fact, indent=2, sort_keys=True) + "\n"
    try:
        with open(path, encoding="utf-8") as handle:
            before = handle.read()
    except OSError:
        before = ""
    changed = before != text
    if changed and not module.check_mode:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        write_atomically(path, text)
    result = {"changed": changed, key: fact}
    if module._diff and changed:
        result["diff"] = {"before": before, "after": text, "before_header": path, "after_header": path}
    return result


def fact_module_main(role: str, source: str, describe, key: str, extra: dict | None = None) -> None:
    """A role's fact module: describe the directory given as option `source` (a path, required) and record it in
    the option fact_file (default /etc/ansible/facts.d/<role>.fact); the result holds the fact under `key`.
    `extra`: more options (name -> argument spec), handed to describe as keyword arguments. A ValueError of
    describe (an option's value it cannot record) fails the module with its message."""
    spec = {source: {"type": "path", "required": True},
            "fact_file": {"type": "path", "default": f"/etc/ansible/facts.d/{role}.fact"}, **(extra or {})}
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    try:
        fact = describe(module.params[source], **{name: module.params[name] for name in extra or {}})
    except ValueError as exc:
        module.fail_json(msg=f"{role}'s local fact: {exc}")
    module.exit_json(**record_local_fact(module, fact, module.params["fact_file"], key))
