#!/usr/bin/env python3
"""Does a release answer right? A greedy correctness probe of an SGLang server and its verdict.

Why: the speed gate passes a release that answers wrong (a kernel that emits garbage on a new
arch, a broken draft/verify path, a parser that no longer recognises Kimi's tool-call format),
and may even find it faster. Greedy decoding makes answers comparable: the same release gives the
same tokens (up to numerical ties), and EAGLE-3 is lossless, so the speculative server must give
the target model's own tokens. But only up to ties: a kernel that rounds differently flips a
near-tie, and from there on the whole reply differs, so exact replies cannot tell a correct kernel
change from a broken one (measured on the H200: speculative and plain starts of one release gave
identical replies to 4 of 11 prompts). Hence teacher forcing: the candidate server scores the
reference's own greedy tokens (SGLang's native /generate with input_ids = prompt + the reference's
output ids, return_logprob, logprob_start_len at the first output token, top_logprobs_num 2), so
each token is judged on the reference's prefix and one flip costs one token, not the rest.

``probe``   flushes the server's prefix cache (SGLang's /flush_cache: a cached prefix is prefilled
            another way, which moves greedy ties), then sends each prompt of a fixed set
            (files/sglang_correctness_prompts.json, written for this project: arithmetic, short
            reasoning and code with answers a regular expression checks, tool calls with a JSON schema)
            to /v1/chat/completions, temperature 0, a fixed max_tokens, the thinking turned off
            (chat_template_kwargs {"thinking": false}: Kimi-K2.5 thinks by default and 96 tokens of
            thinking leave no answer to check), tools where the prompt has them, asking for the
            token ids (return_prompt_token_ids, return_token_ids: SGLang >= 0.5.17 sends them, older
            releases ignore the fields), and records per prompt: the reply (content,
            reasoning_content, tool calls), its prompt and output token ids, whether the answer is
            right, whether the tool call parses and matches its schema, whether the thinking stayed
            out of content. With ``--force PROBE`` it then scores that probe's tokens on this server
            (teacher forcing) and keeps SGLang's raw answer (meta_info.input_token_logprobs and
            input_top_logprobs: [logprob, token_id, text] triples) beside each reply.
``verdict`` compares a candidate's probe with the reference (the release served before, on this
            host) and the noise floor (the reference release's second probe, which scored the
            reference's first probe's tokens on the same server):
            - agreement: every reply that differs from the reference's must part from it at a
              near-tie: at the first token where the two greedy streams differ, the candidate's
              log-probability of the reference's token is within ``--tie-nats`` of its own top
              choice (unexplained partings at most the floor's plus ``--max-unexplained``); the
              same tokens with another text (a parser, the detokenizer) is unexplained. Without
              token ids (SGLang < 0.5.17) the old rule: exact replies at least ``--min-agreement``
              times the floor's share;
            - teacher forcing: the share of the reference's tokens that are the candidate's top
              choice, at least the floor's less ``--max-top1-loss``, and the share the candidate
              is confidently against (top choice more than ``--tie-nats`` above the reference's
              token) at most ``--max-confident-share``;
            - right answers: at most ``--max-answers-lost`` fewer than the reference's, widened by
              the floor's own difference between its two probes;
            - tool calls: no fewer valid than the reference's; thinking in content: no more.
            A figure with nothing to compare (no right answer, no valid tool call on either side)
            is "inconclusive", never a pass by 0 >= 0; the verdict is "fail" when a figure fails,
            else "inconclusive" when one evaluated nothing, else "pass". A missing reference
            passes on no figure but says so ("no reference").
``lossless`` EAGLE-3's lossless check: the same release started without speculation (the target
            model alone) scores the speculative server's greedy tokens, and its own greedy replies
            are compared as above; the floor is a second speculative probe that scored the first's
            tokens on the speculative server. Right answers (beyond ``--max-answers-lost``) and
            valid tool calls no fewer with speculation than without.

The thresholds of the token figures were set from the H200 test bed (docs/validation/testbed-h200:
real weights, SGLang 0.5.17 and 0.5.16): the README of role sglang_bench says which measurement
decides each. ``score_forced`` reads SGLang's
raw /generate answer, so the same code scores recordings and live servers.

Standard library only (it runs on a GPU host's bare python3). The API key (--api-key, or
SGLANG_API_KEY) goes in a Bearer header and nowhere else.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SCHEMA = "sglang-correctness/2"
THINK = re.compile(r"</?think>")
TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict,
         "null": type(None)}
TOP_LOGPROBS = 2  # the candidate's top choice and its runner-up at each forced token
# The thresholds' defaults, the role's (its defaults/main.yml says what each comes from: the H200 test bed,
# docs/validation/testbed-h200).
TIE_NATS = 1.5
MAX_TOP1_LOSS = 0.05
MAX_CONFIDENT_SHARE = 0.01
MAX_UNEXPLAINED = 0  # a rule, not a measurement: every parting must be at a near-tie
NO_IDS = "the server sent no token ids (SGLang < 0.5.17 has no return_token_ids on /v1/chat/completions)"


class ProbeError(Exception):
    """The server could not be asked; the message says why."""


# ----- checks of one reply -----
def schema_problems(value: Any, schema: dict[str, Any], where: str = "arguments") -> list[str]:
    """What in `value` breaks a (simple) JSON schema: type, enum, required keys, properties, items."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if kinds and not any(isinstance(value, TYPES[k]) and not (k in ("integer", "number") and isinstance(value, bool))
                         for k in kinds if k in TYPES):
        return [f"{where} is {type(value).__name__}, not {'/'.join(kinds)}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where} {value!r} is not one of {schema['enum']}"]
    problems = []
    if isinstance(value, dict):
        problems += [f"{where} lacks {k!r}" for k in schema.get("required", []) if k not in value]
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                problems += schema_problems(value[key], sub, f"{where}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += schema_problems(item, schema["items"], f"{where}[{i}]")
    return problems


def tool_check(prompt: dict[str, Any], calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A tool prompt's call: present, the expected function, arguments that parse and fit its schema."""
    if not calls:
        return {"valid": False, "made": False, "problem": "no tool call (was it returned as text? --tool-call-parser)"}
    call = calls[0]
    fn = call.get("function") or {}
    if fn.get("name") != prompt["tool"]:
        return {"valid": False, "made": True, "problem": f"called {fn.get('name')!r}, expected {prompt['tool']!r}"}
    try:
        args = fn.get("arguments")
        args = json.loads(args) if isinstance(args, str) else args
    except ValueError as exc:
        return {"valid": False, "made": True, "problem": f"arguments are not JSON: {exc}"}
    schema = next(t["function"].get("parameters") or {} for t in prompt["tools"] if t["function"]["name"] == prompt["tool"])
    problems = schema_problems(args, schema)
    return {"valid": not problems, "made": True, "problem": "; ".join(problems) or None}


def judge(prompt: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    """The checks of one reply to one prompt."""
    content = message.get("content") or ""
    result: dict[str, Any] = {"thinking_in_content": bool(THINK.search(content))}
    if "answer" in prompt:
        answer = THINK.sub(" ", content.split("</think>")[-1])
        result["answer_ok"] = bool(re.search(prompt["answer"], answer))
        result["answered"] = bool(answer.strip())  # an answer to check at all (not a reply cut off while thinking)
    if "tool" in prompt:
        result.update(tool=tool_check(prompt, message.get("tool_calls")))
    return result


# ----- the probe -----
class Server:
    def __init__(self, url: str, api_key: str | None, timeout: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--url must look like http://HOST:PORT, got {url!r}")
        self.parts, self.api_key, self.timeout = parts, api_key, timeout

    def flush_cache(self) -> bool:
        """SGLang's /flush_cache: every probe starts from a cold prefix cache (measured on the H200: a second
        probe served from the radix cache diverged on 5 of 11 prompts, a probe after a restart on none)."""
        try:
            self.post("/flush_cache", {}, raw=True)
            return True
        except ProbeError:
            return False  # requests were running, or the server has no such route: said in the result

    def post(self, path: str, body: dict[str, Any], raw: bool = False) -> Any:
        cls = http.client.HTTPSConnection if self.parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.parts.hostname, self.parts.port or (443 if self.parts.scheme == "https" else 80),
                   timeout=self.timeout)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            conn.request("POST", self.parts.path.rstrip("/") + path, body=json.dumps(body), headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise ProbeError(f"POST {path}: HTTP {resp.status}: {data[:300]!r}")
            return data if raw else json.loads(data)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise ProbeError(f"POST {path}: {type(exc).__name__}: {exc}") from exc
        finally:
            conn.close()


def ids_of(value: Any) -> list[int] | None:
    """A list of token ids as the server sent it, else None."""
    if isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return value
    return None


def chat_request(prompt: dict[str, Any], prompts: dict[str, Any], model: str,
                 template_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt["text"]}],
                            "temperature": 0.0, "max_tokens": prompts["max_tokens"],
                            "return_prompt_token_ids": True, "return_token_ids": True}
    if template_kwargs:
        body["chat_template_kwargs"] = template_kwargs
    if prompt.get("tools"):
        body["tools"] = prompt["tools"]
    return body


def forced_request(prompt_ids: list[int], output_ids: list[int]) -> dict[str, Any]:
    """SGLang's native /generate scoring `output_ids` after `prompt_ids` (teacher forcing).

    The scheduler reports input logprobs from logprob_start_len on, the first of them None (it has no
    position before it) and each next one the log-probability of that input token given all before it
    (scheduler_output_processor_mixin / logprob_result_processor: [None] + logprobs[:-1]; 0.5.9 to 0.5.23),
    so starting one token before the output scores every output token. One new token: the normal
    generation path (max_new_tokens 0 is SGLang's prefill-only scoring path)."""
    return {"input_ids": prompt_ids + output_ids, "return_logprob": True,
            "logprob_start_len": max(0, len(prompt_ids) - 1), "top_logprobs_num": TOP_LOGPROBS,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}


def force(server: Server, reference: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Score each reply of `reference` (a probe with token ids) on this server: its raw answer per prompt id."""
    forced: dict[str, dict[str, Any]] = {}
    for ref in reference.get("results", []):
        prompt_ids, output_ids = ids_of(ref.get("prompt_token_ids")), ids_of(ref.get("output_token_ids"))
        if not prompt_ids or not output_ids:
            forced[ref["id"]] = {"of": reference.get("label"), "error": NO_IDS}
            continue
        entry: dict[str, Any] = {"of": reference.get("label"), "prompt_tokens": len(prompt_ids),
                                 "tokens": len(output_ids)}
        try:
            reply = server.post("/generate", forced_request(prompt_ids, output_ids))
            meta = reply.get("meta_info") or {}
            entry["reply"] = {"meta_info": {k: meta[k] for k in ("input_token_logprobs", "input_top_logprobs",
                                                                 "prompt_tokens") if k in meta}}
        except ProbeError as exc:
            entry["error"] = str(exc)
        forced[ref["id"]] = entry
    return forced


def probe(server: Server, prompts: dict[str, Any], model: str, label: str,
          template_kwargs: dict[str, Any] | None = None, reference: dict[str, Any] | None = None) -> dict[str, Any]:
    started = time.monotonic()
    flushed = server.flush_cache()
    results = []
    for prompt in prompts["prompts"]:
        reply = server.post("/v1/chat/completions", chat_request(prompt, prompts, model, template_kwargs))
        choice = reply["choices"][0]
        message = {k: choice["message"].get(k) for k in ("content", "reasoning_content", "tool_calls")}
        results.append({"id": prompt["id"], "kind": prompt["kind"], "message": message,
                        "finish_reason": choice.get("finish_reason"),
                        "completion_tokens": (reply.get("usage") or {}).get("completion_tokens"),
                        "prompt_token_ids": ids_of(choice.get("prompt_token_ids")),
                        "output_token_ids": ids_of(choice.get("token_ids")),
                        **judge(prompt, message)})
    out: dict[str, Any] = {"schema": SCHEMA, "label": label, "cache_flushed": flushed,
                           "chat_template_kwargs": template_kwargs or None, "results": results}
    if reference is not None:
        forced = force(server, reference)
        for r in results:
            if r["id"] in forced:
                r["forced"] = forced[r["id"]]
        out["forced_of"] = reference.get("label")
    out.update(seconds=round(time.monotonic() - started, 2), summary=summary(results))
    return out


def answered(result: dict[str, Any]) -> bool:
    """Whether a reply had an answer to check (content outside the thinking; a probe file of the first
    schema did not record it)."""
    if "answered" in result:
        return bool(result["answered"])
    content = (result.get("message") or {}).get("content") or ""
    return bool(THINK.sub(" ", content.split("</think>")[-1]).strip())


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    answers = [r["answer_ok"] for r in results if "answer_ok" in r]
    tools = [r["tool"] for r in results if "tool" in r]
    return {"prompts": len(results), "accuracy": round(sum(answers) / len(answers), 4) if answers else None,
            "answers_right": sum(answers), "answers": len(answers),
            "answers_evaluated": sum(answered(r) for r in results if "answer_ok" in r),
            "tool_calls_valid": sum(t["valid"] for t in tools), "tool_prompts": len(tools),
            "tool_calls_made": sum(bool(t.get("made", t["valid"])) for t in tools),
            "thinking_in_content": sum(r["thinking_in_content"] for r in results),
            "token_ids": sum(bool(ids_of(r.get("prompt_token_ids")) and ids_of(r.get("output_token_ids")))
                             for r in results)}


# ----- teacher forcing: scoring given tokens -----
def score_forced(reply: dict[str, Any], count: int | None = None, tie_nats: float = TIE_NATS) -> dict[str, Any]:
    """Score the tokens a teacher-forcing request gave, from SGLang's raw /generate answer (the whole reply,
    or its meta_info): meta_info.input_token_logprobs is [logprob, token_id, text] per input token from
    logprob_start_len on (the first logprob None), input_top_logprobs the server's top choices at the same
    positions (None where it has none). `count`: score the last `count` tokens (the forced output), else
    every token with a logprob. Per token: top1 (the given token is the server's top choice; a tie counts)
    and gap (the top choice's logprob less the given token's, >= 0: how much the server prefers its own)."""
    meta = reply.get("meta_info", reply) if isinstance(reply, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("input_token_logprobs"), list):
        raise ValueError("no meta_info.input_token_logprobs (was the request sent with return_logprob?)")
    tokens, tops = meta["input_token_logprobs"], meta.get("input_top_logprobs")
    if not isinstance(tops, list) or len(tops) != len(tokens):
        raise ValueError("input_top_logprobs missing or not one per input token (top_logprobs_num > 0?)")
    first = 0 if count is None else len(tokens) - count
    if first < 0:
        raise ValueError(f"{count} tokens to score, the reply holds {len(tokens)}")
    rows, unscored = [], 0
    for pos in range(first, len(tokens)):
        logprob, token_id = tokens[pos][0], tokens[pos][1]
        top = [t for t in tops[pos] or [] if t and t[0] is not None]
        if logprob is None or not top:
            unscored += 1
            continue
        best = max(top, key=lambda t: t[0])
        gap = max(0.0, float(best[0]) - float(logprob))
        rows.append({"pos": pos - first, "id": token_id, "top1": best[1] == token_id or gap == 0.0,
                     "gap": round(gap, 6), "argmax": best[1]})
    scored = len(rows)
    confident = [r for r in rows if not r["top1"] and r["gap"] > tie_nats]
    return {"tokens": scored, "unscored": unscored, "ids": [r["id"] for r in rows],
            "top1": sum(r["top1"] for r in rows), "top1_share": round(sum(r["top1"] for r in rows) / scored, 6)
            if scored else None, "confident": len(confident),
            "mean_gap": round(sum(r["gap"] for r in rows) / scored, 6) if scored else None,
            "max_gap": max((r["gap"] for r in rows), default=None), "rows": rows}


def recorded_probe(label: str, greedy: dict[str, dict[str, Any]], forced: dict[str, dict[str, Any]] | None = None,
                   prompts: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A probe made of raw SGLang /generate answers (recordings, or a test bed's requests): greedy[id] the
    greedy answer to a prompt ({"text", "output_ids", "meta_info"}), forced[id] this server's teacher-forcing
    answer of another recording's tokens for that prompt. With prompts[id] (an entry of the prompt set)
    the text is judged as the probe judges a chat reply; without, only the token figures say anything."""
    results = []
    for pid, reply in greedy.items():
        message = {"content": reply.get("text"), "reasoning_content": None, "tool_calls": None}
        row: dict[str, Any] = {"id": pid, "kind": (prompts or {}).get(pid, {}).get("kind", "recorded"),
                               "message": message, "prompt_token_ids": None,
                               "output_token_ids": ids_of(reply.get("output_ids")),
                               **(judge(prompts[pid], message) if prompts and pid in prompts
                                  else {"thinking_in_content": False})}
        if forced and pid in forced:
            row["forced"] = {"of": "recording", "reply": forced[pid]}
        results.append(row)
    return {"schema": SCHEMA, "label": label, "results": results, "summary": summary(results)}


# ----- comparing probes -----
def reply_words(result: dict[str, Any]) -> list[str]:
    """A reply as one sequence of whitespace-separated tokens: thinking, content, tool calls."""
    msg = result["message"]
    calls = " ".join(f"{(c.get('function') or {}).get('name')} {(c.get('function') or {}).get('arguments')}"
                     for c in msg.get("tool_calls") or [])
    return " ".join(x for x in (msg.get("reasoning_content"), msg.get("content"), calls) if x).split()


def first_divergence(a: list[Any], b: list[Any]) -> int | None:
    """The index of the first item where two sequences differ (None when they are the same)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def agreement(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """How two probes of the same prompts agree in text: exact-match share, each prompt's first divergence (in
    whitespace-separated tokens, and in characters: a random-weight model's replies have no spaces), and
    the mean share of each reply the two hold in common from its start (1.0 when all are identical)."""
    other = {r["id"]: r for r in b["results"]}
    rows = []
    for r in a["results"]:
        if r["id"] in other:
            wa, wb = reply_words(r), reply_words(other[r["id"]])
            ca, cb = " ".join(wa), " ".join(wb)
            char = first_divergence(list(ca), list(cb))
            rows.append({"id": r["id"], "first_divergence": first_divergence(wa, wb), "tokens": max(len(wa), len(wb)),
                         "first_divergence_char": char, "chars": max(len(ca), len(cb)),
                         "shared_prefix": 1.0 if char is None else round(char / max(len(ca), len(cb), 1), 4)})
    same = sum(row["first_divergence"] is None for row in rows)
    return {"compared": len(rows), "identical": same, "share": round(same / len(rows), 4) if rows else None,
            "shared_prefix": round(sum(row["shared_prefix"] for row in rows) / len(rows), 4) if rows else None,
            "divergences": [row for row in rows if row["first_divergence"] is not None]}


def forced_score(result: dict[str, Any], tokens: list[int], tie_nats: float) -> tuple[dict[str, Any] | None, str | None]:
    """`result`'s teacher-forcing score of `tokens` (another probe's output ids), or why there is none."""
    forced = result.get("forced")
    if not forced:
        return None, "not scored on this server (the probe ran without --force)"
    if forced.get("error") or "reply" not in forced:
        return None, forced.get("error") or "no reply"
    try:
        score = score_forced(forced["reply"], len(tokens), tie_nats)
    except ValueError as exc:
        return None, f"unreadable: {exc}"
    if not score["tokens"]:
        return None, "no token scored"
    if any(tokens[row["pos"]] != row["id"] for row in score["rows"]):
        return None, "scored other tokens than the reference's (was it forced on another probe?)"
    return score, None


def token_comparison(a: dict[str, Any], b: dict[str, Any], tie_nats: float) -> dict[str, Any]:
    """Probe `b` against probe `a`, whose tokens `b`'s server scored (b's --force a): per prompt, how b's
    greedy reply parts from a's (identical; a near-tie: b's top choice within tie_nats of a's token there;
    unexplained: b is sure of another token, or the same tokens came back as another text) and, pooled over
    every token, the teacher-forcing figures (top-1 share, confident disagreements)."""
    other = {r["id"]: r for r in b["results"]}
    rows, pooled, missing = [], [], []
    for ra in a["results"]:
        rb = other.get(ra["id"])
        if rb is None:
            continue
        text_same = reply_words(ra) == reply_words(rb)
        ids_a, ids_b = ids_of(ra.get("output_token_ids")), ids_of(rb.get("output_token_ids"))
        score, why = forced_score(rb, ids_a, tie_nats) if ids_a else (None, NO_IDS)
        row: dict[str, Any] = {"id": ra["id"], "text_identical": text_same}
        if score is None:
            missing.append(f"{ra['id']}: {why}")
            row.update(parting="unscored", why=why, explained=text_same)
        else:
            pooled.extend(score["rows"])
            row.update(top1_share=score["top1_share"], confident=score["confident"], max_gap=score["max_gap"])
            at = first_divergence(ids_a, ids_b) if ids_b is not None else None
            if ids_b is None:
                row.update(parting="identical" if text_same else "no token ids here", explained=text_same)
            elif at is None:
                row.update(parting="identical" if text_same else "the same tokens, another text", explained=text_same)
            else:
                gap = next((s["gap"] for s in score["rows"] if s["pos"] == at), None)
                tie = gap is not None and gap <= tie_nats
                row.update(parting="near-tie" if tie else "unexplained", token=at, gap=gap, explained=tie or text_same)
        rows.append(row)
    scored = len(pooled)
    top1 = sum(s["top1"] for s in pooled)
    confident = sum(not s["top1"] and s["gap"] > tie_nats for s in pooled)
    return {"compared": len(rows), "rows": rows, "unexplained": [r for r in rows if not r["explained"]],
            "explained_share": round(sum(r["explained"] for r in rows) / len(rows), 4) if rows else None,
            "tokens": scored, "top1_share": round(top1 / scored, 6) if scored else None,
            "confident": confident, "confident_share": round(confident / scored, 6) if scored else None,
            "mean_gap": round(sum(s["gap"] for s in pooled) / scored, 6) if scored else None,
            "max_gap": max((s["gap"] for s in pooled), default=None), "missing": missing}


def thresholds(**kw: Any) -> dict[str, Any]:
    base = {"tie_nats": TIE_NATS, "max_top1_loss": MAX_TOP1_LOSS, "max_confident_share": MAX_CONFIDENT_SHARE,
            "max_unexplained": MAX_UNEXPLAINED}
    base.update({k: v for k, v in kw.items() if v is not None})
    return base


def tokens_usable(cmp: dict[str, Any]) -> bool:
    return bool(cmp["tokens"]) and not cmp["missing"]


def compare_figures(reference: dict[str, Any], candidate: dict[str, Any], floor: dict[str, Any] | None,
                    min_agreement: float, limits: dict[str, Any], names: dict[str, str]) -> tuple[list[dict], dict]:
    """The agreement and teacher-forcing figures of `candidate` (whose server scored `reference`'s tokens)
    against `reference`, the floor (`floor`: a second probe of the reference's server that scored the
    reference's tokens) setting what numerics alone cost."""
    tie = float(limits["tie_nats"])
    cmp = token_comparison(reference, candidate, tie)
    noise = token_comparison(reference, floor, tie) if floor else None
    text = agreement(candidate, reference)
    text_floor = agreement(reference, floor) if floor else None
    figures: list[dict[str, Any]] = []
    if tokens_usable(cmp):
        floor_unexplained = len(noise["unexplained"]) if noise and tokens_usable(noise) else 0
        allowed = floor_unexplained + int(limits["max_unexplained"])
        figures.append({
            "figure": names["agreement"], "value": cmp["explained_share"],
            "threshold": f"unexplained partings <= {allowed}: a gap above {tie} nats where the replies part, "
                         "or the same tokens in another text",
            "unexplained": len(cmp["unexplained"]), "ok": len(cmp["unexplained"]) <= allowed,
            "floor": noise["explained_share"] if noise and tokens_usable(noise) else None,
            "identical": text["share"], "detail": [r for r in cmp["rows"] if r["parting"] != "identical"]})
        healthy = bool(noise and tokens_usable(noise)
                       and noise["confident_share"] <= float(limits["max_confident_share"]))
        base = noise["top1_share"] if healthy else 1.0
        need = round(base - float(limits["max_top1_loss"]), 6)
        figures.append({
            "figure": names["top1"], "value": cmp["top1_share"], "threshold": f">= {need}",
            "ok": cmp["top1_share"] >= need, "floor": noise["top1_share"] if noise and tokens_usable(noise) else None,
            "floor_used": healthy, "tokens": cmp["tokens"], "mean_gap": cmp["mean_gap"], "max_gap": cmp["max_gap"]})
        figures.append({
            "figure": names["confident"], "value": cmp["confident_share"],
            "threshold": f"<= {limits['max_confident_share']} (a gap above {tie} nats)",
            "ok": cmp["confident_share"] <= float(limits["max_confident_share"]), "count": cmp["confident"],
            "floor": noise["confident_share"] if noise and tokens_usable(noise) else None})
    else:
        need = round(min_agreement * (text_floor["share"] if text_floor and text_floor["share"] is not None else 1.0), 4)
        figures.append({"figure": names["agreement"], "value": text["share"],
                        "threshold": f">= {need} (identical replies; no teacher forcing: "
                                     f"{(cmp['missing'] or ['nothing scored'])[0]})",
                        "ok": text["share"] is not None and text["share"] >= need,
                        "floor": text_floor["share"] if text_floor else None, "shared_prefix": text["shared_prefix"],
                        "detail": text["divergences"]})
    return figures, {"tokens": cmp, "floor_tokens": noise, "text": text, "text_floor": text_floor}


def answer_figures(cand: dict[str, Any], ref: dict[str, Any], noise_acc: int, max_answers_lost: int,
                   names: dict[str, str]) -> list[dict[str, Any]]:
    """Right answers and valid tool calls of `cand` against `ref`; inconclusive (ok None) where neither side
    has one to lose: a probe that checked no answer passes no figure by 0 >= 0."""
    answers_ok: bool | None = cand["answers_right"] >= ref["answers_right"] - max_answers_lost - noise_acc
    if ref["answers_right"] == 0 and cand["answers_right"] == 0:
        answers_ok = None
    tools_ok: bool | None = cand["tool_calls_valid"] >= ref["tool_calls_valid"]
    if ref["tool_calls_valid"] == 0 and cand["tool_calls_valid"] == 0:
        tools_ok = None
    return [
        {"figure": names["answers"], "value": cand["answers_right"], "reference": ref["answers_right"],
         "threshold": f">= {ref['answers_right']} - {max_answers_lost} - {noise_acc} (floor)", "ok": answers_ok,
         **({"inconclusive": f"no right answer on either side ({ref['answers_evaluated']} and "
                             f"{cand['answers_evaluated']} of {cand['answers']} replies had an answer to check): "
                             "nothing to lose"} if answers_ok is None else {})},
        {"figure": names["tools"], "value": cand["tool_calls_valid"], "reference": ref["tool_calls_valid"],
         "threshold": f">= {ref['tool_calls_valid']}", "ok": tools_ok,
         **({"inconclusive": f"no valid tool call on either side ({ref['tool_calls_made']} and "
                             f"{cand['tool_calls_made']} of {cand['tool_prompts']} tool prompts made one)"}
            if tools_ok is None else {})},
    ]


def settle(out: dict[str, Any]) -> dict[str, Any]:
    failed = [f["figure"] for f in out["figures"] if f["ok"] is False]
    empty = [f["figure"] for f in out["figures"] if f["ok"] is None]
    if failed:
        out.update(verdict="fail", reason="; ".join(failed))
    elif empty:
        out.update(verdict="inconclusive", reason="evaluated nothing: " + "; ".join(empty))
    return out


VERDICT_NAMES = {"agreement": "agreement with the reference", "top1": "top-1 agreement under teacher forcing",
                 "confident": "confident disagreements under teacher forcing", "answers": "right answers",
                 "tools": "valid tool calls"}
LOSSLESS_NAMES = {"agreement": "agreement without speculation",
                  "top1": "top-1 agreement of the target with the speculative tokens",
                  "confident": "confident disagreements of the target with the speculative tokens",
                  "answers": "right answers with speculation", "tools": "valid tool calls with speculation"}


def verdict(candidate: dict[str, Any], reference: dict[str, Any] | None, floor: dict[str, Any] | None,
            min_agreement: float, max_answers_lost: int, **limits: Any) -> dict[str, Any]:
    cand = summary(candidate["results"])  # from the replies: a probe file of the first schema lacks some counts
    out: dict[str, Any] = {"candidate": candidate["label"], "summary": cand, "figures": [], "verdict": "pass"}
    if reference is None:
        out.update(verdict="no reference", reason="no earlier probe of a release on this host to compare with")
        return out
    limits = thresholds(**limits)
    ref = summary(reference["results"])
    noise_acc = abs(summary(floor["results"])["answers_right"] - ref["answers_right"]) if floor else 0
    figures, detail = compare_figures(reference, candidate, floor, min_agreement, limits, VERDICT_NAMES)
    figures += answer_figures(cand, ref, noise_acc, max_answers_lost, VERDICT_NAMES)
    figures.append({"figure": "replies with the thinking in content", "value": cand["thinking_in_content"],
                    "reference": ref["thinking_in_content"], "threshold": f"<= {ref['thinking_in_content']}",
                    "ok": cand["thinking_in_content"] <= ref["thinking_in_content"]})
    out.update(figures=figures, thresholds=limits,
               floor={"agreement": detail["text_floor"], "answers_right_difference": noise_acc,
                      "tokens": strip_rows(detail["floor_tokens"])} if floor else None,
               tokens=strip_rows(detail["tokens"]))
    return settle(out)


def lossless(speculative: dict[str, Any], plain: dict[str, Any], floor: dict[str, Any] | None,
             min_agreement: float, max_answers_lost: int, **limits: Any) -> dict[str, Any]:
    """EAGLE-3's lossless check: the same release without speculation (the target model alone) scores the
    speculative server's greedy tokens (plain's --force speculative), its own replies part from them only at
    near-ties, as often as the floor (a second speculative probe that scored the first's tokens); and no more
    right answers or valid tool calls than with speculation (a broken draft/verify path loses them)."""
    limits = thresholds(**limits)
    spec, base = summary(speculative["results"]), summary(plain["results"])
    out: dict[str, Any] = {"candidate": speculative["label"], "plain": plain["label"], "summary": spec,
                           "verdict": "pass", "check": "lossless", "thresholds": limits}
    noise_acc = abs(summary(floor["results"])["answers_right"] - spec["answers_right"]) if floor else 0
    figures, detail = compare_figures(speculative, plain, floor, min_agreement, limits, LOSSLESS_NAMES)
    figures += answer_figures(spec, base, noise_acc, max_answers_lost, LOSSLESS_NAMES)
    out.update(figures=figures, tokens=strip_rows(detail["tokens"]),
               floor={"agreement": detail["text_floor"], "answers_right_difference": noise_acc,
                      "tokens": strip_rows(detail["floor_tokens"])} if floor else None)
    return settle(out)


def strip_rows(cmp: dict[str, Any] | None) -> dict[str, Any] | None:
    """A token comparison without its per-prompt rows (they are in the figures' detail)."""
    return {k: v for k, v in cmp.items() if k not in ("rows", "unexplained")} if cmp else None


def report(v: dict[str, Any]) -> str:
    title = (f"Lossless check of {v['candidate']} (without speculation: {v['plain']})" if v.get("check") == "lossless"
             else f"Correctness of {v['candidate']}")
    lines = [f"{title}: {v['verdict']}" + (f" ({v['reason']})" if v.get("reason") else "")]
    for f in v["figures"]:
        extra = f", floor {f['floor']}" if f.get("floor") is not None else ""
        ref = f", reference {f['reference']}" if "reference" in f else ""
        state = {True: "ok", False: "FAILED", None: "inconclusive"}[f["ok"]]
        why = f": {f['inconclusive']}" if f.get("inconclusive") else ""
        lines.append(f"- {f['figure']}: {f['value']}{ref} (needs {f['threshold']}{extra}): {state}{why}")
        for row in f.get("detail") or []:
            if row.get("parting") in ("unexplained", "the same tokens, another text"):
                at = f" at token {row['token']} (gap {row['gap']} nats)" if row.get("token") is not None else ""
                lines.append(f"  - {row['id']}: {row['parting']}{at}")
    return "\n".join(lines)


PROBE = re.compile(r"^(?P<session>[^-]+)-(?P<release>.+)-probe(?P<n>[12])\.json$")


def history_reference(history: Path, release: str) -> tuple[Path | None, Path | None]:
    """The reference in a host's history of probes: the newest session of another release whose own
    verdict did not fail (a release rolled back for its answers is no reference), and its second probe
    (the floor). Files: <session>-<release>-probe1.json, -probe2.json, -verdict.json."""
    sessions = sorted({(m["session"], m["release"]) for f in history.glob("*-probe1.json")
                       if (m := PROBE.match(f.name)) and m["release"] != release}, reverse=True)
    for session, other in sessions:
        judged = load(str(history / f"{session}-{other}-verdict.json"))
        if judged and judged.get("verdict") == "fail":
            continue
        floor = history / f"{session}-{other}-probe2.json"
        return history / f"{session}-{other}-probe1.json", floor if floor.is_file() else None
    return None, None


def load(path: str | None) -> dict[str, Any] | None:
    if not path or not Path(path).is_file():
        return None
    return json.loads(Path(path).read_text())


def write(path: str, data: dict[str, Any]) -> None:
    tmp = Path(f"{path}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def add_limits(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tie-nats", type=float, default=TIE_NATS,
                   help="the largest log-probability gap (nats) a near-tie flip may have")
    p.add_argument("--max-top1-loss", type=float, default=MAX_TOP1_LOSS,
                   help="top-1 agreement under teacher forcing at least the floor's less this")
    p.add_argument("--max-confident-share", type=float, default=MAX_CONFIDENT_SHARE,
                   help="share of forced tokens the server may be confidently against")
    p.add_argument("--max-unexplained", type=int, default=MAX_UNEXPLAINED,
                   help="replies parting other than at a near-tie, beyond the floor's own")


def limits_of(args: argparse.Namespace) -> dict[str, Any]:
    return {"tie_nats": args.tie_nats, "max_top1_loss": args.max_top1_loss,
            "max_confident_share": args.max_confident_share, "max_unexplained": args.max_unexplained}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("probe", help="ask the server the prompts, greedily; write the results")
    p.add_argument("--url", required=True)
    p.add_argument("--prompts", default=str(Path(__file__).with_name("sglang_correctness_prompts.json")))
    p.add_argument("--model", default="default")
    p.add_argument("--label", default="probe")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--api-key", default=None)
    p.add_argument("--chat-template-kwargs", default=None,
                   help="JSON object sent as chat_template_kwargs (default: the prompt set's, thinking off)")
    p.add_argument("--force", help="a probe whose tokens this server scores (teacher forcing); absent: none")
    p.add_argument("--out", required=True)
    v = sub.add_parser("verdict", help="compare a probe with the reference and the noise floor")
    v.add_argument("--candidate", required=True)
    v.add_argument("--reference", help="the probe of the release served before (absent: no reference)")
    v.add_argument("--floor", help="a second probe of the reference release (the noise floor)")
    v.add_argument("--min-agreement", type=float, default=0.25)
    v.add_argument("--max-answers-lost", type=int, default=1)
    add_limits(v)
    v.add_argument("--out")
    lo = sub.add_parser("lossless", help="EAGLE-3's lossless check: a probe without speculation against the speculative one")
    lo.add_argument("--speculative", required=True, help="a probe of the speculative server")
    lo.add_argument("--floor", help="a second probe of the speculative server (the noise floor)")
    lo.add_argument("--plain", required=True, help="a probe of the same release without speculation")
    lo.add_argument("--min-agreement", type=float, default=0.25)
    lo.add_argument("--max-answers-lost", type=int, default=0)
    add_limits(lo)
    lo.add_argument("--out")
    j = sub.add_parser("judge", help="verdict of a session's probe against the host's history (writes the verdict there)")
    j.add_argument("--history", required=True, help="the host's directory of probes")
    j.add_argument("--session", required=True)
    j.add_argument("--release", required=True)
    j.add_argument("--min-agreement", type=float, default=0.25)
    j.add_argument("--max-answers-lost", type=int, default=1)
    add_limits(j)
    sc = sub.add_parser("score", help="score raw /generate teacher-forcing answers (a recording: one answer, or a list)")
    sc.add_argument("reply", help="a JSON file: SGLang's /generate answer, or a list of them")
    sc.add_argument("--count", type=int, help="score the last COUNT input tokens of each (the forced output)")
    sc.add_argument("--tie-nats", type=float, default=TIE_NATS)
    r = sub.add_parser("reference", help="print the reference a release would be judged against (JSON)")
    r.add_argument("--history", required=True)
    r.add_argument("--release", required=True)
    args = ap.parse_args(argv)
    if args.command == "score":
        data = json.loads(Path(args.reply).read_text())
        try:
            scores = [score_forced(d, args.count, args.tie_nats) for d in (data if isinstance(data, list) else [data])]
        except ValueError as exc:
            raise SystemExit(f"{args.reply}: {exc}") from exc
        tokens = sum(x["tokens"] for x in scores)
        print(json.dumps({"replies": len(scores), "tokens": tokens,
                          "top1_share": round(sum(x["top1"] for x in scores) / tokens, 6) if tokens else None,
                          "confident": sum(x["confident"] for x in scores),
                          "max_gap": max((x["max_gap"] for x in scores if x["max_gap"] is not None), default=None),
                          "per_reply": [{k: v for k, v in x.items() if k not in ("rows", "ids")} for x in scores]}))
        return 0
    if args.command == "reference":
        ref, floor = history_reference(Path(args.history), args.release)
        print(json.dumps({"reference": str(ref) if ref else None, "floor": str(floor) if floor else None}))
        return 0
    if args.command == "judge":
        history = Path(args.history)
        args.candidate = str(history / f"{args.session}-{args.release}-probe1.json")
        reference, floor = history_reference(history, args.release)
        args.reference, args.floor = str(reference) if reference else None, str(floor) if floor else None
        args.out = str(history / f"{args.session}-{args.release}-verdict.json")
    if args.command == "probe":
        prompts = json.loads(Path(args.prompts).read_text())
        try:
            kwargs = (json.loads(args.chat_template_kwargs) if args.chat_template_kwargs is not None
                      else prompts.get("chat_template_kwargs"))
            if kwargs is not None and not isinstance(kwargs, dict):
                raise ValueError(f"--chat-template-kwargs must be a JSON object, got {args.chat_template_kwargs!r}")
            reference = load(args.force) if args.force else None
            if args.force and reference is None:
                raise ValueError(f"--force {args.force}: no such probe")
            server = Server(args.url, args.api_key or os.environ.get("SGLANG_API_KEY"), args.timeout)
            result = probe(server, prompts, args.model, args.label, kwargs, reference)
        except (ProbeError, ValueError) as exc:
            print(json.dumps({"failed": True, "msg": str(exc)}))
            return 1
        write(args.out, result)
        print(json.dumps({"label": args.label, **result["summary"], "seconds": result["seconds"]}))
        return 0
    if not 0 < args.min_agreement <= 1 or args.max_answers_lost < 0:
        raise SystemExit("--min-agreement must be in (0, 1] and --max-answers-lost at least 0")
    if (args.tie_nats < 0 or not 0 <= args.max_top1_loss <= 1 or not 0 <= args.max_confident_share <= 1
            or args.max_unexplained < 0):
        raise SystemExit("--tie-nats and --max-unexplained must be at least 0, --max-top1-loss and "
                         "--max-confident-share in [0, 1]")
    if args.command == "lossless":
        speculative, plain = load(args.speculative), load(args.plain)
        if speculative is None or plain is None:
            raise SystemExit(f"--speculative {args.speculative} / --plain {args.plain}: no such probe")
        result = lossless(speculative, plain, load(args.floor), args.min_agreement, args.max_answers_lost,
                          **limits_of(args))
        result.update(report=report(result), speculative_file=args.speculative, plain_file=args.plain,
                      floor_file=args.floor)
    else:
        candidate = load(args.candidate)
        if candidate is None:
            raise SystemExit(f"--candidate {args.candidate}: no such probe")
        result = verdict(candidate, load(args.reference), load(args.floor),
                         args.min_agreement, args.max_answers_lost, **limits_of(args))
        result.update(report=report(result), reference_file=args.reference if result["verdict"] != "no reference" else None,
                      floor_file=args.floor)
    if args.out:
        write(args.out, result)
    print(json.dumps(result))
    return 0 if result["verdict"] != "fail" else 2


if __name__ == "__main__":
    sys.exit(main())
