"""Filters shared by the sglang_* roles (available to every role that declares sglang_common).

    {{ '10.0.0.5' | sglang_common_url(30000) }}           -> http://10.0.0.5:30000
    {{ 'fd00::5' | sglang_common_url(30000, 'https') }}   -> https://[fd00::5]:30000
    {{ proxy_env | sglang_common_pip_env(index_url=..., find_links=[...], ca_bundle=...) }}
        -> pip's options as its PIP_* environment variables, merged over the proxy variables
    {{ local_files | sglang_common_file_payloads }}
        -> [{name, content (base64)}] of the controller's files, for the module sglang_common_files
    {{ '/var/lib/sglang/models' | sglang_common_inside(['/var/lib/sglang', '/var/cache/sglang']) }}
        -> ['/var/lib/sglang']: the directories that contain the path, by their text
"""

from __future__ import annotations

import base64
import ipaddress
import os

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - unit tests import the module without Ansible too
    class AnsibleFilterError(Exception):
        pass


def sglang_common_url(address, port, scheme="http"):
    """scheme://address:port, with an IPv6 address in brackets."""
    address = str(address).strip()
    if not address:
        raise AnsibleFilterError("sglang_common_url: empty address")
    try:
        if ipaddress.ip_address(address.strip("[]")).version == 6:
            address = f"[{address.strip('[]')}]"
    except ValueError:
        pass
    try:
        port = int(port)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"sglang_common_url: port {port!r} is not a number") from None
    if not 1 <= port <= 65535:
        raise AnsibleFilterError(f"sglang_common_url: port {port} is not between 1 and 65535")
    return f"{scheme}://{address}:{port}"


def sglang_common_inside(path, parents):
    """The parents (directories) that contain path or are path, by their text (symlinks are the host's business)."""
    def norm(p):
        return "/" + "/".join(x for x in str(p).split("/") if x not in ("", "."))
    path = norm(path)
    return [p for p in parents or [] if path == norm(p) or path.startswith(norm(p).rstrip("/") + "/")]


def sglang_common_pip_env(proxy_env=None, index_url="", extra_index_urls=(), find_links=(), no_index=False,
                          trusted_hosts=(), ca_bundle=""):
    """pip's options as environment variables (PIP_*), over the proxy variables.

    As environment and not as pip arguments: Ansible's pip module reports every check-mode run
    with extra_args as a change, and the environment keeps index credentials out of argv.
    """
    env = dict(proxy_env or {})
    if index_url:
        env["PIP_INDEX_URL"] = index_url
    if extra_index_urls:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(extra_index_urls)
    if find_links:
        env["PIP_FIND_LINKS"] = " ".join(find_links)
    if no_index:
        env["PIP_NO_INDEX"] = "1"
    if trusted_hosts:
        env["PIP_TRUSTED_HOST"] = " ".join(trusted_hosts)
    if ca_bundle:
        env["PIP_CERT"] = ca_bundle
    return env


def sglang_common_file_payloads(local_files, mode=None):
    """The files of local_files (paths on the controller) as the module sglang_common_files takes them:
    [{name: basename, content: base64 of the bytes}], each with mode when given (else the module's)."""
    payloads = []
    for local in local_files or []:
        local = str(local)
        try:
            with open(local, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise AnsibleFilterError(f"sglang_common_file_payloads: cannot read {local}: {exc.strerror}") from None
        payload = {"name": os.path.basename(local), "content": base64.b64encode(data).decode("ascii")}
        if mode is not None:
            payload["mode"] = str(mode)
        payloads.append(payload)
    return payloads


class FilterModule:
    def filters(self):
        return {"sglang_common_url": sglang_common_url, "sglang_common_pip_env": sglang_common_pip_env,
                "sglang_common_file_payloads": sglang_common_file_payloads, "sglang_common_inside": sglang_common_inside}
