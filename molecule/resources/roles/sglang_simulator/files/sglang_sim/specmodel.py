"""The SIMULATOR's (TEST ONLY) speculative-decoding MODEL: what EAGLE-3's settings are worth.

A model, not a measurement of SGLang: it makes the three settings trade off the way they do on a
GPU (deeper drafts are accepted less often, wider trees more often, every draft step and every
verified token costs time, large trees need memory), so that tuning them is meaningful. Pure
functions, standard library only; engine.py runs requests on it and tests compute the model's
optimum from it (``expected_tok_s``). The formulas are in the package docstring.

Active when SGLANG_SIM_ACCEPT_FIRST is set. Unset, the simulator keeps its fixed-accept-length
model (SGLANG_SIM_ACCEPT_LENGTH, no draft or verify cost), which the benchmark tests rely on.
"""

from __future__ import annotations

from dataclasses import dataclass


class SpecOutOfMemory(Exception):
    """The settings need more memory than SGLANG_SIM_SPEC_MEMORY_LIMIT allows: the start fails."""


@dataclass(frozen=True)
class SpecModel:
    """The model's parameters (SGLANG_SIM_ACCEPT_FIRST and the four below it)."""

    accept_first: float  # a1: acceptance of draft position 1 with topk 1
    accept_decay: float = 0.85  # d: each deeper position is accepted d times as often
    draft_step_cost: float = 0.08  # c_d: one draft step, as a fraction of a target decode step
    verify_token_cost: float = 0.03  # c_v: one verified draft token of one request, same unit
    memory_limit: float = 0.0  # M: largest topk x draft tokens that fits; 0: no limit

    def depth_and_width(self, steps: int, topk: int, draft_tokens: int) -> tuple[int, float]:
        """L = min(steps, draft_tokens - 1) positions deep, w = min(topk, (draft_tokens - 1) / L) wide."""
        depth = max(1, min(steps, draft_tokens - 1))
        width = max(1.0, min(float(topk), (draft_tokens - 1) / depth))
        return depth, width

    def position_acceptance(self, steps: int, topk: int, draft_tokens: int) -> list[float]:
        """q_i = 1 - (1 - a1 * d^(i-1))^w for i = 1..L: position i accepted, given 1..i-1 were."""
        depth, width = self.depth_and_width(steps, topk, draft_tokens)
        return [1.0 - (1.0 - self.accept_first * self.accept_decay ** (i - 1)) ** width for i in range(1, depth + 1)]

    def accept_length(self, steps: int, topk: int, draft_tokens: int) -> float:
        """E[k] = 1 + sum_{j=1..L} prod_{i<=j} q_i: tokens per verify step (the bonus token included)."""
        total, chain = 1.0, 1.0
        for q in self.position_acceptance(steps, topk, draft_tokens):
            chain *= q
            total += chain
        return total

    def step_factor(self, steps: int, draft_tokens: int, batch: int, batch_slowdown: float) -> float:
        """A verify step of `batch` requests, in target decode steps of one request:
        (1 + B (n - 1)) + c_d * steps + c_v * (draft_tokens - 1) * n."""
        return (1.0 + batch_slowdown * (batch - 1)) + self.draft_step_cost * steps \
            + self.verify_token_cost * (draft_tokens - 1) * batch

    def memory_units(self, topk: int, draft_tokens: int) -> int:
        return topk * draft_tokens

    def check_memory(self, topk: int, draft_tokens: int) -> None:
        if self.memory_limit and self.memory_units(topk, draft_tokens) > self.memory_limit:
            raise SpecOutOfMemory(
                f"speculative_eagle_topk {topk} x speculative_num_draft_tokens {draft_tokens} = "
                f"{self.memory_units(topk, draft_tokens)} > SGLANG_SIM_SPEC_MEMORY_LIMIT {self.memory_limit:g}")


def expected_tok_s(model: SpecModel, decode_tok_s: float, slowdown_factor: float, batch_slowdown: float,
                   steps: int, topk: int, draft_tokens: int, concurrency: int = 1) -> float | None:
    """Decode tok/s of the model (aggregate over `concurrency` requests decoding together), or None
    when the settings do not fit in memory. SGLang's rule is applied first: with topk 1 the draft
    tokens are steps + 1.

        tok_s = n * E[k] / (SLOWDOWN_FACTOR / DECODE_TOK_S * step_factor(n))
    """
    if topk == 1:
        draft_tokens = steps + 1
    try:
        model.check_memory(topk, draft_tokens)
    except SpecOutOfMemory:
        return None
    step = slowdown_factor / decode_tok_s * model.step_factor(steps, draft_tokens, concurrency, batch_slowdown)
    return concurrency * model.accept_length(steps, topk, draft_tokens) / step
