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
import itertools
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


# --------------------------------------------------------------------------- a pair real SGLang loads

# The smallest shapes that take SGLang's EAGLE-3 path as a real model does: a LlamaForCausalLM
# target of 8 layers (SGLang captures the hidden states of layers [2, L // 2, L - 3] for the draft:
# three distinct layers from 8 on; with 6 two coincide and the draft's fc gets 2 of its 3 inputs)
# and a one-layer LlamaForCausalLMEagle3 draft of the same hidden size.
LLAMA_SHAPE = {"hidden": 256, "layers": 8, "heads": 4, "kv_heads": 2, "intermediate": 512, "vocab": 1024}
BF16_ONE = b"\x80\x3f"  # 1.0 in bfloat16, little-endian


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte is a printable character (tokenizers' ByteLevel)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def llama_tokenizer(vocab: int) -> dict[str, bytes]:
    """A byte-level BPE tokenizer of `vocab` ids (256 bytes, bigram merges, <s> and </s> last).

    Any text encodes (every byte is a token) and decodes back exactly, so /generate, the OpenAI
    endpoints and the chat template work as with a real tokenizer."""
    alphabet = _bytes_to_unicode()
    tokens = [alphabet[b] for b in sorted(alphabet, key=lambda b: (b not in range(33, 127), alphabet[b]))]
    letters = "ĠetaoinshrdlucmfwypvbgkjqxzETAOINSHRDLUCMFWYPVBGKJQXZ0123456789"
    # Bigram merges, then (bigram, letter) merges for vocabularies past 256 + 62 * 62 ids (an 8B
    # shape's 128256): each merge's parts exist before it, as BPE needs.
    pairs = itertools.product(letters, letters)
    triples = ((a + b, c) for a, b, c in itertools.product(letters, letters, letters))
    merges = list(itertools.islice(itertools.chain(pairs, triples), vocab - 2 - len(tokens)))
    if len(tokens) + len(merges) + 2 != vocab:
        raise ValueError(f"a tokenizer of {vocab} ids is beyond this recipe")
    ids = {t: i for i, t in enumerate(tokens + [a + b for a, b in merges])}
    specials = [{"id": len(ids) + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True} for i, c in enumerate(("<s>", "</s>"))]
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": specials, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": {"type": "ByteLevel", **byte_level},
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": ids, "merges": [f"{a} {b}" for a, b in merges]},
    }
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
              "model_max_length": 4096, "clean_up_tokenization_spaces": False}
    template = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
                "{% if add_generation_prompt %}<s>assistant: {% endif %}")
    return {"tokenizer.json": json.dumps(tokenizer, ensure_ascii=False).encode(),
            "tokenizer_config.json": json.dumps(config, indent=2).encode(),
            "chat_template.jinja": template.encode()}


def _bf16_random(rnd: random.Random, count: int) -> bytes:
    """`count` bfloat16 values of magnitude 2^-7..2^-5 with random signs and mantissas (seeded)."""
    out = bytearray(2 * count)
    out[0::2] = rnd.randbytes(count)  # low byte: the exponent's last bit and the mantissa
    out[1::2] = rnd.randbytes(count).translate(bytes(0x3C if i % 2 else 0xBC for i in range(256)))
    return bytes(out)


def write_safetensors(path: Path, tensors: list[tuple[str, str, list[int], bytes]]) -> None:
    """A safetensors file of (name, dtype, shape, data) tensors, in the given order."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for *_, data in tensors:
            f.write(data)


def make_llama_pair(root: Path, *, seed: int = 1, agree: bool = True, **shape: int) -> tuple[Path, Path]:
    """Write a loadable random-weight Llama target and its EAGLE-3 draft under root/; return their dirs.

    Real checkpoints for real SGLang (bf16, HF names; the draft's as SGLang's llama_eagle3.py loads
    them: midlayer.*, fc, norm, lm_head, d2t, t2d). agree=True zeroes both models' final norm: every
    logit is 0, so greedy decoding picks token 0 in the target and the draft alike (both take the
    first of equal maxima) and every draft token is accepted: the accept length the server reports
    must then be num_steps + 1 at topk 1. With agree=False the draft guesses at random (about 1).
    """
    dims = {**LLAMA_SHAPE, **shape}
    hidden, heads, kv, inter, vocab = dims["hidden"], dims["heads"], dims["kv_heads"], dims["intermediate"], dims["vocab"]
    head_dim = hidden // heads
    rnd = random.Random(seed)
    ones = BF16_ONE * hidden
    final_norm = b"\x00\x00" * hidden if agree else ones

    def rand(*shape_: int) -> bytes:
        count = 1
        for n in shape_:
            count *= n
        return _bf16_random(rnd, count)

    def dense(name: str, rows: int, cols: int) -> tuple[str, str, list[int], bytes]:
        return (name, "BF16", [rows, cols], rand(rows, cols))

    def attention_mlp(prefix: str, width_in: int) -> list[tuple[str, str, list[int], bytes]]:
        return [dense(f"{prefix}.self_attn.q_proj.weight", heads * head_dim, width_in),
                dense(f"{prefix}.self_attn.k_proj.weight", kv * head_dim, width_in),
                dense(f"{prefix}.self_attn.v_proj.weight", kv * head_dim, width_in),
                dense(f"{prefix}.self_attn.o_proj.weight", hidden, heads * head_dim),
                dense(f"{prefix}.mlp.gate_proj.weight", inter, hidden),
                dense(f"{prefix}.mlp.up_proj.weight", inter, hidden),
                dense(f"{prefix}.mlp.down_proj.weight", hidden, inter),
                (f"{prefix}.input_layernorm.weight", "BF16", [hidden], ones),
                (f"{prefix}.post_attention_layernorm.weight", "BF16", [hidden], ones)]

    common = {"model_type": "llama", "hidden_size": hidden, "intermediate_size": inter,
              "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim, "vocab_size": vocab,
              "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": vocab - 2,
              "eos_token_id": vocab - 1, "attention_bias": False, "mlp_bias": False}
    label = {"test_double": "synthetic model with random weights (tests/harness/synthetic_model.py), not a real checkpoint"}
    target_tensors = [dense("model.embed_tokens.weight", vocab, hidden)]
    for i in range(dims["layers"]):
        target_tensors += attention_mlp(f"model.layers.{i}", hidden)
    target_tensors += [("model.norm.weight", "BF16", [hidden], final_norm), dense("lm_head.weight", vocab, hidden)]
    draft_tensors = attention_mlp("midlayer", 2 * hidden) + [
        ("midlayer.hidden_norm.weight", "BF16", [hidden], ones),
        dense("fc.weight", hidden, 3 * hidden),
        ("norm.weight", "BF16", [hidden], final_norm),
        dense("lm_head.weight", vocab, hidden),
        ("d2t", "I64", [vocab], bytes(8 * vocab)),  # draft id + d2t = target id: the identity map
        ("t2d", "BOOL", [vocab], b"\x01" * vocab)]
    configs = {
        "target": {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": dims["layers"], **common, **label},
        "draft": {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "draft_vocab_size": vocab,
                  **common, **label},
    }
    target = write_model_dir(Path(root) / "llama-tiny-target", configs["target"], vocab, target_tensors)
    return target, write_model_dir(Path(root) / "llama-tiny-draft", configs["draft"], vocab, draft_tensors)


def write_model_dir(directory: Path, config: dict, vocab: int, tensors: list | None = None) -> Path:
    """A model directory: config.json, generation_config.json, the tokenizer of `vocab` ids and, when
    given, the weights as model.safetensors."""
    directory.mkdir(parents=True, exist_ok=True)
    if tensors is not None:
        write_safetensors(directory / "model.safetensors", tensors)
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (directory / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": vocab - 2, "eos_token_id": vocab - 1}) + "\n")
    for rel, data in llama_tokenizer(vocab).items():
        (directory / rel).write_bytes(data)
    return directory


# Full-size shapes served from their config alone (SGLang's --load-format dummy: random weights, no
# checkpoint): timing on a real GPU as the real model's, nothing big to carry. The EAGLE-3 draft is
# one LlamaForCausalLMEagle3 layer of the target's widths with a 32000-token draft vocabulary, as the
# published Llama-3.1-8B EAGLE-3 drafts have.
LLAMA_8B_SHAPE = {"hidden": 4096, "layers": 32, "heads": 32, "kv_heads": 8, "intermediate": 14336,
                  "vocab": 128256, "draft_vocab": 32000, "max_position_embeddings": 131072}


def make_llama_shape(root: Path, name: str = "llama-8b", **shape: int) -> tuple[Path, Path]:
    """Config-only target and EAGLE-3 draft directories of a Llama shape (tokenizer included); no weights."""
    dims = {**LLAMA_8B_SHAPE, **shape}
    hidden, vocab = dims["hidden"], dims["vocab"]
    common = {"model_type": "llama", "hidden_size": hidden, "intermediate_size": dims["intermediate"],
              "num_attention_heads": dims["heads"], "num_key_value_heads": dims["kv_heads"],
              "head_dim": hidden // dims["heads"], "vocab_size": vocab,
              "max_position_embeddings": dims["max_position_embeddings"], "rms_norm_eps": 1e-5,
              "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "bos_token_id": vocab - 2, "eos_token_id": vocab - 1, "attention_bias": False, "mlp_bias": False,
              "test_double": "a model shape with no weights (tests/harness/synthetic_model.py): serve it with "
                             "--load-format dummy (random weights)"}
    configs = {"target": {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": dims["layers"], **common},
               "draft": {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
                         "draft_vocab_size": dims["draft_vocab"], **common}}
    return (write_model_dir(Path(root) / f"{name}-target", configs["target"], vocab),
            write_model_dir(Path(root) / f"{name}-draft", configs["draft"], vocab))


def make_eagle3_draft_for(target: Path, dest: Path) -> Path:
    """A config-only LlamaForCausalLMEagle3 draft of a real Llama-family target's widths (its whole
    vocabulary, its tokenizer files): random weights through --speculative-draft-load-format dummy."""
    config = json.loads((target / "config.json").read_text())
    keep = ("model_type", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "hidden_act",
            "bos_token_id", "eos_token_id", "attention_bias", "mlp_bias")
    draft = {k: config[k] for k in keep if k in config}
    draft.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
    draft.update(architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1, tie_word_embeddings=False,
                 draft_vocab_size=config["vocab_size"], torch_dtype="bfloat16",
                 test_double=f"an EAGLE-3 draft shape with no weights for {target.name} (random through "
                             "--speculative-draft-load-format dummy): it guesses, accept length about 1")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps(draft, indent=2) + "\n")
    for path in target.iterdir():
        if path.name.startswith(("tokenizer", "special_tokens", "chat_template", "generation_config")):
            shutil.copy(path, dest / path.name)
    return dest


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
    ll = sub.add_parser("llama-pair", help="write a loadable random-weight Llama target and EAGLE-3 draft (real SGLang)")
    ll.add_argument("--root", required=True)
    ll.add_argument("--seed", type=int, default=1)
    ll.add_argument("--random-draft", action="store_true", help="a draft that guesses (accept length about 1)")
    sh = sub.add_parser("llama-shape", help="write config-only Llama-3.1-8B-shaped target and EAGLE-3 draft "
                                           "directories (served with --load-format dummy)")
    sh.add_argument("--root", required=True)
    dr = sub.add_parser("eagle3-draft-for", help="write a config-only EAGLE-3 draft for a real Llama-family target")
    dr.add_argument("--target", required=True)
    dr.add_argument("--dest", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "llama-shape":
        target, draft = make_llama_shape(Path(args.root))
        print(json.dumps({"target": str(target), "draft": str(draft)}))
        return 0
    if args.cmd == "eagle3-draft-for":
        print(json.dumps({"draft": str(make_eagle3_draft_for(Path(args.target), Path(args.dest)))}))
        return 0
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
    elif args.cmd == "llama-pair":
        target, draft = make_llama_pair(Path(args.root), seed=args.seed, agree=not args.random_draft)
        print(json.dumps({"target": str(target), "draft": str(draft)}))
    else:
        rev = make_repo(Path(args.root), args.repo_id, shards=args.shards, shard_mb=args.shard_mb, seed=args.seed)
        print(json.dumps({"repo_id": rev.repo_id, "sha": rev.sha, "files": len(rev.files)}))
    return 0


if __name__ == "__main__":
    sys.exit(guarded("synthetic_model", main))
