"""Where SGLang 0.5.17's answers differ in shape from 0.5.9's, as the SIMULATOR (TEST ONLY) plays them.

The simulator shapes its answers by the release it reports (the version of SGLANG_SIM_SGLANG_DIR's
package, else its flag table's, 0.5.9): from 0.5.17 on, 0.5.17's shapes, held to a real 0.5.17
server's recorded answers field by field (tests/roles/sglang_server/test_sim_contract.py); before,
0.5.9's shapes with the fields 0.5.17 added (no older release is recorded to hold them to).
"""

from __future__ import annotations

import re
from typing import Any

FIRST_0517 = (0, 5, 17)

# 0.5.9's fields that 0.5.17 no longer sends (0.5.17's names of the same figures are sent by both):
# meta_info's total_retractions (0.5.17: num_retractions), spec_accept_token_num and
# spec_draft_token_num (spec_num_correct_drafts, spec_num_proposed_drafts); /v1/loads' summary.
META_0509_ONLY = ("total_retractions", "spec_accept_token_num", "spec_draft_token_num")
LOADS_0509_ONLY = ("dp_rank_count", "aggregate")
LOAD_0509_ONLY = ("num_total_reqs",)


def plays_0517(version: str) -> bool:
    """Whether a release of this version answers in 0.5.17's shapes (an unreadable version: 0.5.9's)."""
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return bool(found) and tuple(int(n) for n in found.groups()) >= FIRST_0517


def compact_delta(**delta: Any) -> dict[str, Any]:
    """A chat stream's delta as 0.5.17's sse_utils.build_sse_content writes it (the role, content and
    reasoning chunks and the finish chunk): msgspec leaves out what is None, but reasoning_content."""
    return {"reasoning_content": delta.pop("reasoning_content", None),
            **{k: v for k, v in delta.items() if v is not None and k != "tool_calls"}}


def embedding_plan(args: dict[str, Any]) -> dict[str, Any]:
    """0.5.17's /model_info "embedding" of a generation model: the "none" family's contract
    (configs/embedding_model_spec.py) resolved with the server's settings (resolved_embedding_plan);
    the prefill CUDA graph off, as role sglang_server renders 0.5.17's command line."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, 8193, 512)]
    return {
        "family": "none", "task": "none", "execution": "none", "attention": "none", "pooling": "model_defined",
        "normalize": False, "postprocessor": "none", "tokenizer_special_tokens": "model_default",
        "supports_dimensions": False, "supports_token_embeddings": False, "supports_multimodal": False,
        "requires_embedding_flag": False, "auto_enable_embedding": False, "bcg_eligibility": "disabled",
        "safe_disable_kv_cache": False, "safe_disable_radix_cache": False, "safe_disable_chunked_prefill": False,
        "enabled": bool(args.get("is_embedding")), "matryoshka_dimensions": [],
        "bcg": {"prefill_backend": "disabled", "enabled": False, "capture_token_budget": 8192,
                "capture_batch_sizes": sizes},
        "cache": {"kv_cache_disabled": False, "radix_cache_disabled": bool(args.get("disable_radix_cache")),
                  "chunked_prefill_disabled": args.get("chunked_prefill_size") == -1},
    }
