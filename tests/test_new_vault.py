"""files/new_vault.py, the quick start's vault step: a usable vault, encrypted, and no secret shown.

In-process (its main() with HF_TOKEN in the environment and a vault password file), decrypted with
ansible-core's vault code and read as the example inventory reads it.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml
from ansible.parsing.vault import VaultLib, VaultSecret

from repo import ROOT, load

new_vault = load(ROOT / "files" / "new_vault.py", "new_vault")
TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    inventory = tmp_path / "mysite"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "pw").write_text("correct horse\n")
    return inventory


def run(site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, token: str | None,
        *args: str) -> tuple[int, str]:
    if token is None:
        monkeypatch.delenv("HF_TOKEN", raising=False)
    else:
        monkeypatch.setenv("HF_TOKEN", token)
    rc = new_vault.main([str(site), "--vault-password-file", str(site.parent / "pw"), *args])
    out = capsys.readouterr()
    return rc, out.out + out.err


def read_vault(site: Path) -> dict:
    data = (site / "group_vars" / "all" / "vault.yml").read_bytes()
    assert data.startswith(b"$ANSIBLE_VAULT;1.1;AES256\n")
    return yaml.safe_load(VaultLib([("default", VaultSecret(b"correct horse"))]).decrypt(data))


def test_writes_a_usable_encrypted_vault(site: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    rc, output = run(site, monkeypatch, capsys, TOKEN)
    assert rc == 0, output
    path = site / "group_vars" / "all" / "vault.yml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    values = read_vault(site)
    assert values["vault_hf_token"] == TOKEN
    key = values["vault_sglang_api_key"]
    assert len(key) >= 40 and key.replace("-", "").replace("_", "").isalnum()
    control = values["vault_sglang_router_control_plane_api_key"]  # the gateway's control plane: a key of its own
    assert len(control) >= 40 and control != key
    assert TOKEN not in output and key not in output and control not in output
    assert not any(s.encode() in path.read_bytes() for s in (TOKEN, key, control))
    # The names the example inventory reads.
    inventory = ROOT / "inventory" / "example" / "group_vars"
    for name in ("vault_hf_token", "vault_sglang_api_key", "vault_sglang_router_control_plane_api_key"):
        assert name in "".join(p.read_text() for p in inventory.rglob("*.yml")), name
    # A second run keeps it; --force writes a new key.
    rc, output = run(site, monkeypatch, capsys, TOKEN)
    assert rc == 2 and "exists" in output and read_vault(site)["vault_sglang_api_key"] == key
    rc, _ = run(site, monkeypatch, capsys, TOKEN, "--force")
    assert rc == 0 and read_vault(site)["vault_sglang_api_key"] != key


@pytest.mark.parametrize("token", ["", "hf_...", "<your token>", "hf_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                                   "changeme", "hf_abc", "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7"])
def test_refuses_a_missing_or_placeholder_token(site: Path, monkeypatch: pytest.MonkeyPatch, capsys, token: str) -> None:
    rc, output = run(site, monkeypatch, capsys, token)
    assert rc == 2 and "nothing written" in output
    assert not (site / "group_vars" / "all" / "vault.yml").exists()
    if len(token) > 8:
        assert token not in output


def test_no_token_only_when_asked(site: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    rc, output = run(site, monkeypatch, capsys, None)
    assert rc == 2 and "HF_TOKEN" in output
    rc, output = run(site, monkeypatch, capsys, None, "--no-hf-token")
    assert rc == 0, output
    assert read_vault(site)["vault_hf_token"] == ""
