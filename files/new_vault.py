#!/usr/bin/env python3
"""Write an inventory's vault file with real values, encrypted with ansible-vault.

    python3 files/new_vault.py inventory/mysite

writes inventory/mysite/group_vars/all/vault.yml (mode 0600) holding

    vault_hf_token: the Hugging Face token, asked for without echo (sglang_model_hf_token)
    vault_sglang_api_key: a new random API key, 43 URL-safe characters (sglang_common_api_key:
                          clients send it)
    vault_sglang_router_control_plane_api_key: another one (sglang_router_control_plane_api_key: the
                          gateway's control plane, adding and removing workers; only Ansible sends it)

encrypted in this process with ansible-core's own vault code (the project's venv: `make venv`) under a
vault password asked for twice, or read from --vault-password-file. No secret is ever in argv, a log
or a plaintext file: the token comes from the prompt or the HF_TOKEN environment variable, and the
tool prints neither the token nor the keys. Read them back with
`ansible-vault view inventory/mysite/group_vars/all/vault.yml`.

The token is checked before anything is written: a placeholder ("hf_...", "<token>", "changeme") or a
value that is not a Hugging Face user access token (hf_ and at least 30 letters and digits) is refused.
No token at all is allowed with --no-hf-token only (public repositories; a gated one fails staging with
401). An existing vault file is kept unless --force.
"""

from __future__ import annotations

import argparse
import getpass
import os
import re
import secrets
import sys
import tempfile
from pathlib import Path

TOKEN = re.compile(r"hf_[A-Za-z0-9]{30,}")
PLACEHOLDER = re.compile(r"\.\.\.|[<>{}\s]|x{6,}|changeme|example", re.I)


class Refused(Exception):
    """A value the vault must not hold; the message says why, never the value."""


def check_token(token: str, allow_empty: bool) -> str:
    token = token.strip()
    if not token:
        if allow_empty:
            return ""
        raise Refused("no Hugging Face token given: enter one (https://huggingface.co/settings/tokens, read access), "
                      "or pass --no-hf-token to stage public repositories only")
    if PLACEHOLDER.search(token) or len(set(token.removeprefix("hf_"))) < 8:
        raise Refused("the Hugging Face token looks like a placeholder, not a real token")
    if not TOKEN.fullmatch(token):
        raise Refused("that is not a Hugging Face user access token (hf_ followed by at least 30 letters and digits)")
    return token


def vault_password(path: str | None) -> bytes:
    if path:
        password = Path(path).read_text().strip()
        if not password:
            raise Refused(f"the vault password file {path} is empty")
        return password.encode()
    first = getpass.getpass("New vault password: ")
    if not first:
        raise Refused("an empty vault password")
    if getpass.getpass("Confirm vault password: ") != first:
        raise Refused("the vault passwords differ")
    return first.encode()


def yaml_string(value: str) -> str:
    """A double-quoted YAML scalar (the token and the key hold letters, digits, '-' and '_' only)."""
    assert re.fullmatch(r"[A-Za-z0-9_-]*", value)
    return f'"{value}"'


def plaintext(token: str, api_key: str, control_plane_key: str) -> bytes:
    return (
        "---\n"
        "# Written by files/new_vault.py. Edit with: ansible-vault edit <this file>\n"
        "# The Hugging Face token (sglang_model_hf_token in group_vars/gpu_hosts/sglang_model.yml).\n"
        f"vault_hf_token: {yaml_string(token)}\n"
        "# The API key clients send (sglang_common_api_key).\n"
        f"vault_sglang_api_key: {yaml_string(api_key)}\n"
        "# The gateway's control-plane key (sglang_router_control_plane_api_key): adding and removing workers.\n"
        f"vault_sglang_router_control_plane_api_key: {yaml_string(control_plane_key)}\n"
    ).encode()


def encrypt(data: bytes, password: bytes) -> bytes:
    from ansible.parsing.vault import VaultLib, VaultSecret

    return VaultLib([("default", VaultSecret(password))]).encrypt(data)


def have_ansible() -> None:
    try:
        import ansible.parsing.vault  # noqa: F401
    except ImportError as missing:
        raise Refused("ansible-core is not importable here: run it with the project's venv "
                      "(make venv && . .venv/bin/activate)") from missing


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, mode 0600 from the start."""
    fd, tmp = tempfile.mkstemp(prefix=".vault.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inventory", type=Path, help="the inventory directory, e.g. inventory/mysite")
    parser.add_argument("--vault-password-file", help="read the vault password from this file instead of asking")
    parser.add_argument("--no-hf-token", action="store_true", help="write an empty token (public repositories only)")
    parser.add_argument("--force", action="store_true", help="replace an existing vault file")
    args = parser.parse_args(argv)

    target = args.inventory / "group_vars" / "all" / "vault.yml"
    try:
        have_ansible()
        if not args.inventory.is_dir():
            raise Refused(f"{args.inventory} is not a directory (cp -r inventory/example {args.inventory} first)")
        if target.exists() and not args.force:
            raise Refused(f"{target} exists: kept (--force replaces it; ansible-vault edit changes it)")
        if "HF_TOKEN" in os.environ:
            token = os.environ["HF_TOKEN"]
        elif args.no_hf_token:
            token = ""
        elif sys.stdin.isatty():
            token = getpass.getpass("Hugging Face token (hf_..., not shown; empty for none): ")
        else:
            raise Refused("no terminal to ask for the Hugging Face token: set HF_TOKEN in the environment, "
                          "or pass --no-hf-token")
        token = check_token(token, args.no_hf_token)
        password = vault_password(args.vault_password_file)
    except Refused as refused:
        print(f"new_vault: {refused}; nothing written", file=sys.stderr)
        return 2

    target.parent.mkdir(parents=True, exist_ok=True)
    write_private(target, encrypt(plaintext(token, secrets.token_urlsafe(32), secrets.token_urlsafe(32)), password))
    print(f"Wrote {target} (ansible-vault, mode 0600): vault_hf_token "
          f"({'set' if token else 'empty: public repositories only'}), vault_sglang_api_key and "
          "vault_sglang_router_control_plane_api_key (new, random).")
    print(f"See them with: ansible-vault view {target}")
    print("Run the playbooks with --ask-vault-pass (or --vault-password-file).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
