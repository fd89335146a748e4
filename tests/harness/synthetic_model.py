"""Synthetic model repositories for the Hub TEST DOUBLE (tests/harness/hub_double.py), with known hashes.

A repository looks like a Kimi-K2.x checkpoint to a loader that reads only its metadata: config.json
with auto_map to custom code (configuration_*.py, modeling_*.py, tokenization_*.py), tokenizer files
(tokenizer_config.json, a tiktoken.model), chat_template.jinja, generation_config.json, several
safetensors shards with valid headers and model.safetensors.index.json mapping every tensor to its
shard; plus files a staging role should leave out (README.md, docs/, figures/, .gitattributes).
Tensor data is pseudo-random (seeded: the same recipe gives the same bytes, so the same hashes).

    make_repo(root, "test-org/kimi-mini", shards=4, shard_mb=8) -> Revision(sha, files{path: meta})

``python3 tests/harness/synthetic_model.py fixtures`` prepares what the test hosts mount read-only
at /srv/hub-fixtures (cached under ~/.cache/sglang-ansible/sglang-model, keyed by a hash of the
recipe) and prints its path: a Hub root with the test repositories (molecule/sglang_model's
kimi-mini pair, and the kimi-tiny pair every other test host stages before its server starts), a
wheelhouse with the role's pinned huggingface_hub and its dependencies for the test hosts' Python,
and a copy of hub_double.py, which molecule/resources/prepare.yml serves on each GPU host's
loopback (TEST ONLY). ``molecule`` is the same command under its first name.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import struct
import sys
import tempfile
from pathlib import Path

from hub_double import file_meta  # the Hub's own hashes (a script's directory is on sys.path)
from steps import guarded, run

CACHE = Path(os.environ.get("SGLANG_ANSIBLE_CACHE", Path.home() / ".cache" / "sglang-ansible"))
ROOT = Path(__file__).resolve().parents[2]
MB = 1 << 20


@dataclasses.dataclass
class Revision:
    repo_id: str
    sha: str
    files: dict  # path -> {size, blob_id, lfs}
    directory: Path

    def planned(self, paths) -> list[dict]:
        """Plan entries (the role's format) for some paths."""
        out = []
        for p in paths:
            m = self.files[p]
            out.append({"path": p, "size": m["size"], "blob_id": m["blob_id"],
                        "sha256": m["lfs"]["sha256"] if m["lfs"] else None})
        return out

    @property
    def weights(self) -> list[str]:
        return sorted(p for p in self.files if p.endswith(".safetensors"))


def _text_files(name: str, shards: int, hidden: int) -> dict[str, bytes]:
    arch = "KimiK25ForConditionalGeneration"
    config = {
        "architectures": [arch], "model_type": "kimi_k25",
        "auto_map": {"AutoConfig": "configuration_kimi.KimiConfig",
                     "AutoModel": "modeling_kimi.KimiModel",
                     "AutoModelForCausalLM": "modeling_kimi.KimiForCausalLM"},
        "hidden_size": hidden, "num_hidden_layers": shards, "vocab_size": 163840,
        "torch_dtype": "bfloat16", "test_double": f"synthetic model {name} (not a real checkpoint)",
    }
    tok = {"tokenizer_class": "TikTokenTokenizer",
           "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
           "bos_token": "[BOS]", "eos_token": "[EOS]", "model_max_length": 262144}
    code = '"""TEST DOUBLE: custom code of a synthetic model (%s); never imported by the tests."""\n'
    return {
        "config.json": json.dumps(config, indent=2).encode(),
        "generation_config.json": json.dumps({"max_length": 262144, "eos_token_id": 163586}).encode(),
        "tokenizer_config.json": json.dumps(tok, indent=2).encode(),
        "chat_template.jinja": b"{% for m in messages %}<|im_{{ m.role }}|>{{ m.content }}<|im_end|>{% endfor %}\n",
        "configuration_kimi.py": (code % "config").encode() + b"class KimiConfig:\n    model_type = 'kimi_k25'\n",
        "modeling_kimi.py": (code % "model").encode() + b"class KimiModel:\n    pass\n\n\nclass KimiForCausalLM:\n    pass\n",
        "tokenization_kimi.py": (code % "tokenizer").encode() + b"class TikTokenTokenizer:\n    pass\n",
        "README.md": f"# {name}\n\nTEST DOUBLE: a synthetic model for staging tests.\n".encode(),
        "docs/deploy_guidance.md": b"# Not needed to serve\n",
        ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.model filter=lfs diff=lfs merge=lfs -text\n",
    }


def _safetensors(path: Path, shard: int, size: int, seed: int, hidden: int) -> list[str]:
    """A valid safetensors file of about `size` bytes; returns its tensor names."""
    names = [f"model.layers.{shard}.mlp.experts.weight", f"model.layers.{shard}.self_attn.o_proj.weight"]
    per = max(hidden * 2, (size // 2) // (hidden * 2) * (hidden * 2))
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for n in names:
        header[n] = {"dtype": "BF16", "shape": [per // (hidden * 2), hidden], "data_offsets": [off, off + per]}
        off += per
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    rnd = random.Random(seed * 1000 + shard)
    block = rnd.randbytes(MB)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        left, i = off, 0
        while left > 0:
            chunk = struct.pack("<QQ", seed, i) + block[16:]
            f.write(chunk[:left])
            left -= min(left, len(chunk))
            i += 1
    return names


def make_repo(root: Path, repo_id: str, *, shards: int = 4, shard_mb: float = 8, seed: int = 1, hidden: int = 64,
              extra: dict[str, bytes] | None = None, gated=False, authorized_tokens=(), branch: str = "main",
              keep_refs: bool = True) -> Revision:
    """Write a revision of a synthetic repository under root/<repo_id>/ and point `branch` at it."""
    repo_dir = Path(root) / repo_id
    repo_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=repo_dir.parent, prefix=".new-"))
    files = _text_files(repo_id, shards, hidden)
    files.update(extra or {})
    # A tokenizer model (LFS by its extension), small.
    files["tiktoken.model"] = b"".join(b"%s %d\n" % (hashlib.sha1(b"%d" % i).hexdigest().encode(), i)
                                       for i in range(2000 + seed))
    for rel, data in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    weight_map, total = {}, 0
    for i in range(1, shards + 1):
        name = f"model-{i:05d}-of-{shards:05d}.safetensors"
        for t in _safetensors(work / name, i, int(shard_mb * MB), seed, hidden):
            weight_map[t] = name
        total += (work / name).stat().st_size
    (work / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    meta = {}
    for p in sorted(work.rglob("*")):
        if p.is_file():
            rel = p.relative_to(work).as_posix()
            meta[rel] = file_meta(p, rel)
    sha = hashlib.sha1(json.dumps([repo_id, seed, sorted((k, v["blob_id"]) for k, v in meta.items())]).encode()
                       ).hexdigest()
    revs = repo_dir / "revisions"
    revs.mkdir(parents=True, exist_ok=True)
    if (revs / sha).exists():
        shutil.rmtree(work)
    else:
        os.rename(work, revs / sha)
    (revs / f"{sha}.meta.json").write_text(json.dumps({"files": meta}, indent=1))
    hub_json = repo_dir / "hub.json"
    config = json.loads(hub_json.read_text()) if hub_json.exists() and keep_refs else {}
    config.setdefault("refs", {})[branch] = sha
    config.update(gated=gated, authorized_tokens=list(authorized_tokens), created="2026-01-01T00:00:00.000Z",
                  label="TEST DOUBLE repository (tests/harness/synthetic_model.py)")
    hub_json.write_text(json.dumps(config, indent=1))
    return Revision(repo_id, sha, meta, revs / sha)


def load_revision(root: Path, repo_id: str, rev: str = "main") -> Revision:
    repo_dir = Path(root) / repo_id
    refs = json.loads((repo_dir / "hub.json").read_text())["refs"]
    sha = refs.get(rev, rev)
    meta = json.loads((repo_dir / "revisions" / f"{sha}.meta.json").read_text())["files"]
    return Revision(repo_id, sha, meta, repo_dir / "revisions" / sha)


# --------------------------------------------------------------------------- molecule fixtures

MOLECULE_REPOS = {
    # name: (repo_id, shards, shard_mb, seed)
    "target": ("test-org/kimi-mini", 6, 40, 11),
    "draft": ("test-org/kimi-mini-eagle3", 1, 12, 12),
    # What the server scenarios and the demo stage (inventory/demo): small, so staging costs seconds.
    "tiny-target": ("test-org/kimi-tiny", 2, 2, 21),
    "tiny-draft": ("test-org/kimi-tiny-eagle3", 1, 1, 22),
}


def hub_version() -> str:
    text = (ROOT / "roles" / "sglang_model" / "defaults" / "main.yml").read_text()
    return re.search(r'^sglang_model_hub_version: "([^"]+)"', text, re.M).group(1)


def molecule_fixtures() -> Path:
    double = Path(__file__).with_name("hub_double.py")
    recipe = json.dumps({"repos": MOLECULE_REPOS, "hub": hub_version(), "layout": 2,
                         "generator": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
                         "double": hashlib.sha256(double.read_bytes()).hexdigest()}, sort_keys=True)
    key = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    base = CACHE / "sglang-model" / key
    if (base / ".complete").exists():
        return base
    shutil.rmtree(base, ignore_errors=True)
    (base / "hub").mkdir(parents=True)
    for _name, (repo_id, shards, mb, seed) in MOLECULE_REPOS.items():
        make_repo(base / "hub", repo_id, shards=shards, shard_mb=mb, seed=seed)
    wheels = base / "wheels"
    wheels.mkdir()
    run(f"downloading huggingface_hub=={hub_version()} and its dependencies",
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(wheels),
         "--only-binary", ":all:", f"huggingface_hub=={hub_version()}"])
    shutil.copy2(double, base / "hub_double.py")
    for path in [base, *base.rglob("*")]:  # readable by any user inside the test hosts
        path.chmod(0o755 if path.is_dir() else 0o644)
    (base / "recipe.json").write_text(recipe)
    (base / ".complete").write_text("")
    return base


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    mo = sub.add_parser("fixtures", aliases=["molecule"],
                        help="prepare (cached) and print the fixtures the test hosts mount at /srv/hub-fixtures")
    mo.add_argument("--link", help="also point this symlink at them (what the scenario mounts)")
    mk = sub.add_parser("make", help="write one synthetic repository")
    mk.add_argument("--root", required=True)
    mk.add_argument("--repo-id", required=True)
    mk.add_argument("--shards", type=int, default=4)
    mk.add_argument("--shard-mb", type=float, default=8)
    mk.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.cmd in ("fixtures", "molecule"):
        base = molecule_fixtures()
        if args.link:
            link = Path(args.link)
            link.parent.mkdir(parents=True, exist_ok=True)
            tmp = link.with_name(link.name + ".new")
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(base)
            os.replace(tmp, link)
        print(base)
    else:
        rev = make_repo(Path(args.root), args.repo_id, shards=args.shards, shard_mb=args.shard_mb, seed=args.seed)
        print(json.dumps({"repo_id": rev.repo_id, "sha": rev.sha, "files": len(rev.files)}))
    return 0


if __name__ == "__main__":
    sys.exit(guarded("synthetic_model", main))
