"""Filters of role sglang_server: the server's command line and its settings, from one table.

``__sglang_server_options`` (vars/main.yml) maps SGLang's option names (its ServerArgs fields)
to values. Both views are derived from it, so a flag is described once:

    {{ options | sglang_server_argv(extra_args) }}
        -> ["--model-path", "m", "--tp-size", "8", ..., "--trust-remote-code", ...] + extra_args
           (null, "" and false are left out; true is a bare flag; the option name with "-" for "_")

    {{ options | sglang_server_settings(extra_args, env) }}
        -> {"model_path": "m", "tp_size": 8, ..., "extra_args": [...], "env": {...}}
           (what the launch-config check of sglang_eagle3_patch reads; null and "" left out)
"""

from __future__ import annotations

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - unit tests import the module without Ansible too
    class AnsibleFilterError(Exception):
        pass


def _unset(value):
    return value is None or (isinstance(value, str) and value.strip() == "")


def sglang_server_argv(options, extra_args=()):
    argv = []
    for name, value in dict(options).items():
        if _unset(value) or value is False:
            continue
        flag = "--" + str(name).replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, dict)):
            raise AnsibleFilterError(f"sglang_server_argv: option {name} has a {type(value).__name__} value")
        else:
            argv += [flag, str(value)]
    return argv + [str(arg) for arg in (extra_args or [])]


def sglang_server_settings(options, extra_args=(), env=None):
    settings = {name: value for name, value in dict(options).items() if not _unset(value)}
    settings["extra_args"] = [str(arg) for arg in (extra_args or [])]
    settings["env"] = dict(env or {})
    return settings


class FilterModule:
    def filters(self):
        return {"sglang_server_argv": sglang_server_argv, "sglang_server_settings": sglang_server_settings}
