#!/usr/bin/env python3
"""Does a release answer right? A greedy correctness probe of an SGLang server and its verdict.

Why: the speed gate passes a release that answers wrong (a kernel that emits garbage on a new
arch, a broken draft/verify path, a parser that no longer recognises Kimi's tool-call format),
and may even find it faster. Greedy decoding makes answers comparable: the same release gives the
same tokens (up to numerical ties), and EAGLE-3 is lossless, so the speculative server must give
the target model's own tokens. So:

``probe``   flushes the server's prefix cache (SGLang's /flush_cache: a cached prefix is prefilled
            another way, which moves greedy ties), then sends each prompt of a fixed set
            (files/sglang_correctness_prompts.json, written for this project: arithmetic, short
            reasoning and code with answers a regular expression checks, tool calls with a JSON schema)
            to /v1/chat/completions, temperature 0, a fixed
            max_tokens, tools where the prompt has them, and records per prompt: the reply
            (content, reasoning_content, tool calls), whether the answer is right, whether the
            tool call parses and matches its schema, whether the thinking stayed out of content.
``verdict`` compares a candidate's probe with the reference (the release served before, on this
            host) and the noise floor (two probes of the reference release):
            - agreement: the share of prompts with exactly the reference's reply, at least
              ``--min-agreement`` times the floor's own share (greedy that disagrees with itself
              on this host lowers what can be asked), and each reply's first divergence (in
              whitespace-separated tokens) reported;
            - right answers: at most ``--max-answers-lost`` fewer than the reference's, widened by
              the floor's own difference between its two probes;
            - tool calls: no fewer valid than the reference's; thinking in content: no more.
            It passes when every figure holds; a missing reference passes on no figure but says
            so ("no reference").
``lossless`` EAGLE-3's lossless check: a probe of the same release started without speculation
            against the speculative server's probe, the floor a second speculative probe: agreement
            at least ``--min-agreement`` times the floor's, no right answer (beyond
            ``--max-answers-lost``) or valid tool call more without speculation than with it.
            Lossless holds only up to numerical ties: the verify pass scores several tokens at once,
            in other kernels than one-token decoding. Measured on the real H200 (SGLang 0.5.17,
            docs/validation/lossless-h200): two probes of one start, and two starts, agreed on 11 of
            11 prompts, a start without speculation with the speculative one on 4 of 11 (a
            random-weight model: near-ties everywhere); SafeAILab/EAGLE#212 reports 50 of 80 for
            EAGLE-3 on Llama-3.1-8B. So the same-settings floor does not bound this comparison and
            the default asks 0.25 of it: a broken draft/verify path (the draft's tokens accepted
            unverified) diverges on nearly every reply and loses the checkable answers.

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

SCHEMA = "sglang-correctness/1"
THINK = re.compile(r"</?think>")
TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict,
         "null": type(None)}


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
        return {"valid": False, "problem": "no tool call (was it returned as text? --tool-call-parser)"}
    call = calls[0]
    fn = call.get("function") or {}
    if fn.get("name") != prompt["tool"]:
        return {"valid": False, "problem": f"called {fn.get('name')!r}, expected {prompt['tool']!r}"}
    try:
        args = fn.get("arguments")
        args = json.loads(args) if isinstance(args, str) else args
    except ValueError as exc:
        return {"valid": False, "problem": f"arguments are not JSON: {exc}"}
    schema = next(t["function"].get("parameters") or {} for t in prompt["tools"] if t["function"]["name"] == prompt["tool"])
    problems = schema_problems(args, schema)
    return {"valid": not problems, "problem": "; ".join(problems) or None}


def judge(prompt: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    """The checks of one reply to one prompt."""
    content = message.get("content") or ""
    result: dict[str, Any] = {"thinking_in_content": bool(THINK.search(content))}
    if "answer" in prompt:
        result["answer_ok"] = bool(re.search(prompt["answer"], THINK.sub(" ", content.split("</think>")[-1])))
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


def probe(server: Server, prompts: dict[str, Any], model: str, label: str) -> dict[str, Any]:
    started = time.monotonic()
    flushed = server.flush_cache()
    results = []
    for prompt in prompts["prompts"]:
        body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt["text"]}],
                                "temperature": 0.0, "max_tokens": prompts["max_tokens"]}
        if prompt.get("tools"):
            body["tools"] = prompt["tools"]
        reply = server.post("/v1/chat/completions", body)
        choice = reply["choices"][0]
        message = {k: choice["message"].get(k) for k in ("content", "reasoning_content", "tool_calls")}
        results.append({"id": prompt["id"], "kind": prompt["kind"], "message": message,
                        "finish_reason": choice.get("finish_reason"),
                        "completion_tokens": (reply.get("usage") or {}).get("completion_tokens"),
                        **judge(prompt, message)})
    return {"schema": SCHEMA, "label": label, "cache_flushed": flushed, "results": results,
            "seconds": round(time.monotonic() - started, 2), "summary": summary(results)}


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    answers = [r["answer_ok"] for r in results if "answer_ok" in r]
    tools = [r["tool"]["valid"] for r in results if "tool" in r]
    return {"prompts": len(results), "accuracy": round(sum(answers) / len(answers), 4) if answers else None,
            "answers_right": sum(answers), "answers": len(answers), "tool_calls_valid": sum(tools),
            "tool_prompts": len(tools), "thinking_in_content": sum(r["thinking_in_content"] for r in results)}


# ----- comparing probes -----
def reply_words(result: dict[str, Any]) -> list[str]:
    """A reply as one sequence of whitespace-separated tokens: thinking, content, tool calls."""
    msg = result["message"]
    calls = " ".join(f"{(c.get('function') or {}).get('name')} {(c.get('function') or {}).get('arguments')}"
                     for c in msg.get("tool_calls") or [])
    return " ".join(x for x in (msg.get("reasoning_content"), msg.get("content"), calls) if x).split()


def first_divergence(a: list[str], b: list[str]) -> int | None:
    """The index of the first token where two replies differ (None when they are the same)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def agreement(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """How two probes of the same prompts agree: exact-match share, each prompt's first divergence (in
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


def verdict(candidate: dict[str, Any], reference: dict[str, Any] | None, floor: dict[str, Any] | None,
            min_agreement: float, max_answers_lost: int) -> dict[str, Any]:
    cand = candidate["summary"]
    out: dict[str, Any] = {"candidate": candidate["label"], "summary": cand, "figures": [], "verdict": "pass"}
    if reference is None:
        out.update(verdict="no reference", reason="no earlier probe of a release on this host to compare with")
        return out
    ref = reference["summary"]
    noise = agreement(reference, floor) if floor else None
    noise_acc = abs(floor["summary"]["answers_right"] - ref["answers_right"]) if floor else 0
    agree = agreement(candidate, reference)
    need = round(min_agreement * (noise["share"] if noise and noise["share"] is not None else 1.0), 4)
    figures = [
        {"figure": "agreement with the reference", "value": agree["share"], "threshold": f">= {need}",
         "ok": agree["share"] is not None and agree["share"] >= need,
         "floor": noise["share"] if noise else None, "detail": agree["divergences"]},
        {"figure": "right answers", "value": cand["answers_right"], "reference": ref["answers_right"],
         "threshold": f">= {ref['answers_right']} - {max_answers_lost} - {noise_acc} (floor)",
         "ok": cand["answers_right"] >= ref["answers_right"] - max_answers_lost - noise_acc},
        {"figure": "valid tool calls", "value": cand["tool_calls_valid"], "reference": ref["tool_calls_valid"],
         "threshold": f">= {ref['tool_calls_valid']}", "ok": cand["tool_calls_valid"] >= ref["tool_calls_valid"]},
        {"figure": "replies with the thinking in content", "value": cand["thinking_in_content"],
         "reference": ref["thinking_in_content"], "threshold": f"<= {ref['thinking_in_content']}",
         "ok": cand["thinking_in_content"] <= ref["thinking_in_content"]},
    ]
    out["figures"] = figures
    out["floor"] = {"agreement": noise, "answers_right_difference": noise_acc} if floor else None
    failed = [f["figure"] for f in figures if not f["ok"]]
    if failed:
        out.update(verdict="fail", reason="; ".join(failed))
    return out


def lossless(speculative: dict[str, Any], plain: dict[str, Any], floor: dict[str, Any] | None,
             min_agreement: float, max_answers_lost: int) -> dict[str, Any]:
    """EAGLE-3's lossless check: the same release probed without speculation (the target model alone)
    must give the speculative server's greedy replies, as often as two speculative probes agree with
    each other (the floor: a second probe of the speculative server, its cache flushed), and no more
    right answers or valid tool calls than it (a broken draft/verify path loses them)."""
    out: dict[str, Any] = {"candidate": speculative["label"], "plain": plain["label"], "summary": speculative["summary"],
                           "verdict": "pass", "check": "lossless"}
    noise = agreement(speculative, floor) if floor else None
    noise_acc = abs(floor["summary"]["answers_right"] - speculative["summary"]["answers_right"]) if floor else 0
    agree = agreement(plain, speculative)
    need = round(min_agreement * (noise["share"] if noise and noise["share"] is not None else 1.0), 4)
    spec, base = speculative["summary"], plain["summary"]
    out["figures"] = [
        {"figure": "agreement without speculation", "value": agree["share"], "threshold": f">= {need}",
         "ok": agree["share"] is not None and agree["share"] >= need, "floor": noise["share"] if noise else None,
         "shared_prefix": agree["shared_prefix"], "detail": agree["divergences"]},
        {"figure": "right answers with speculation", "value": spec["answers_right"], "reference": base["answers_right"],
         "threshold": f">= {base['answers_right']} - {max_answers_lost} - {noise_acc} (floor)",
         "ok": spec["answers_right"] >= base["answers_right"] - max_answers_lost - noise_acc},
        {"figure": "valid tool calls with speculation", "value": spec["tool_calls_valid"],
         "reference": base["tool_calls_valid"], "threshold": f">= {base['tool_calls_valid']}",
         "ok": spec["tool_calls_valid"] >= base["tool_calls_valid"]},
    ]
    out["floor"] = {"agreement": noise, "answers_right_difference": noise_acc} if floor else None
    failed = [f["figure"] for f in out["figures"] if not f["ok"]]
    if failed:
        out.update(verdict="fail", reason="; ".join(failed))
    return out


def report(v: dict[str, Any]) -> str:
    title = (f"Lossless check of {v['candidate']} (without speculation: {v['plain']})" if v.get("check") == "lossless"
             else f"Correctness of {v['candidate']}")
    lines = [f"{title}: {v['verdict']}" + (f" ({v['reason']})" if v.get("reason") else "")]
    for f in v["figures"]:
        extra = f", floor {f['floor']}" if f.get("floor") is not None else ""
        ref = f", reference {f['reference']}" if "reference" in f else ""
        lines.append(f"- {f['figure']}: {f['value']}{ref} (needs {f['threshold']}{extra}): {'ok' if f['ok'] else 'FAILED'}")
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
    p.add_argument("--out", required=True)
    v = sub.add_parser("verdict", help="compare a probe with the reference and the noise floor")
    v.add_argument("--candidate", required=True)
    v.add_argument("--reference", help="the probe of the release served before (absent: no reference)")
    v.add_argument("--floor", help="a second probe of the reference release (the noise floor)")
    v.add_argument("--min-agreement", type=float, default=0.5)
    v.add_argument("--max-answers-lost", type=int, default=1)
    v.add_argument("--out")
    lo = sub.add_parser("lossless", help="EAGLE-3's lossless check: a probe without speculation against the speculative one")
    lo.add_argument("--speculative", required=True, help="a probe of the speculative server")
    lo.add_argument("--floor", help="a second probe of the speculative server (the noise floor)")
    lo.add_argument("--plain", required=True, help="a probe of the same release without speculation")
    lo.add_argument("--min-agreement", type=float, default=0.25)
    lo.add_argument("--max-answers-lost", type=int, default=0)
    lo.add_argument("--out")
    j = sub.add_parser("judge", help="verdict of a session's probe against the host's history (writes the verdict there)")
    j.add_argument("--history", required=True, help="the host's directory of probes")
    j.add_argument("--session", required=True)
    j.add_argument("--release", required=True)
    j.add_argument("--min-agreement", type=float, default=0.5)
    j.add_argument("--max-answers-lost", type=int, default=1)
    args = ap.parse_args(argv)
    if args.command == "judge":
        history = Path(args.history)
        args.candidate = str(history / f"{args.session}-{args.release}-probe1.json")
        reference, floor = history_reference(history, args.release)
        args.reference, args.floor = str(reference) if reference else None, str(floor) if floor else None
        args.out = str(history / f"{args.session}-{args.release}-verdict.json")
    if args.command == "probe":
        prompts = json.loads(Path(args.prompts).read_text())
        try:
            server = Server(args.url, args.api_key or os.environ.get("SGLANG_API_KEY"), args.timeout)
            result = probe(server, prompts, args.model, args.label)
        except (ProbeError, ValueError) as exc:
            print(json.dumps({"failed": True, "msg": str(exc)}))
            return 1
        write(args.out, result)
        print(json.dumps({"label": args.label, **result["summary"], "seconds": result["seconds"]}))
        return 0
    if not 0 < args.min_agreement <= 1 or args.max_answers_lost < 0:
        raise SystemExit("--min-agreement must be in (0, 1] and --max-answers-lost at least 0")
    if args.command == "lossless":
        speculative, plain = load(args.speculative), load(args.plain)
        if speculative is None or plain is None:
            raise SystemExit(f"--speculative {args.speculative} / --plain {args.plain}: no such probe")
        result = lossless(speculative, plain, load(args.floor), args.min_agreement, args.max_answers_lost)
        result.update(report=report(result), speculative_file=args.speculative, plain_file=args.plain,
                      floor_file=args.floor)
    else:
        candidate = load(args.candidate)
        if candidate is None:
            raise SystemExit(f"--candidate {args.candidate}: no such probe")
        result = verdict(candidate, load(args.reference), load(args.floor),
                         args.min_agreement, args.max_answers_lost)
        result.update(report=report(result), reference_file=args.reference if result["verdict"] != "no reference" else None,
                      floor_file=args.floor)
    if args.out:
        write(args.out, result)
    print(json.dumps(result))
    return 0 if result["verdict"] != "fail" else 2


if __name__ == "__main__":
    sys.exit(main())
