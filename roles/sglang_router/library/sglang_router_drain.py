#!/usr/bin/python
"""Ansible module: wait until an SGLang server has drained (its /v1/loads reads zero twice, settle seconds apart)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_drain
short_description: Wait until an SGLang server that left the routers has no request in flight
description:
  - Reads the server's C(GET /v1/loads) every I(interval) seconds. A reading counts, summed over the
    data-parallel ranks (C(loads[])), the requests the scheduler runs (C(num_running_reqs)), queues
    (C(num_waiting_reqs)) and holds for grammar compilation (C(queues.grammar)), and the KV-cache
    tokens in use (C(num_used_tokens)): a request in chunked prefill, or whose prefill batch has
    just run, is counted neither running nor waiting by SGLang, but holds KV cache.
  - The server has drained when every reading over at least I(settle) seconds was zero (two zero
    readings that far apart, none but zero between them); it fails after I(timeout) seconds
    otherwise, saying how many requests of which kind were still in flight.
  - SGLang 0.5.9 answers C(/v1/loads) live from the scheduler; 0.5.17 and 0.5.23 answer the last
    snapshot the scheduler published (after each prefill batch, every 15th decode batch, and when
    idle). No release counts the requests its tokenizer manager still tokenizes or still streams
    out; the settle time is what covers them, and the failure message says so.
  - A server that does not answer at all (connection refused) serves nothing: drained.
  - Reading only; runs on the GPU host (the server's loopback URL).
options:
  url:
    description: Base URL of the SGLang server, e.g. C(http://127.0.0.1:30000).
    type: str
    required: true
  api_key:
    description: The server's API key (sent as a bearer token); empty for none.
    type: str
    default: ""
    no_log: true
  timeout:
    description: Seconds to wait for the drain in all.
    type: int
    required: true
  settle:
    description: Seconds the readings must stay zero (at least 1, below I(timeout)).
    type: int
    required: true
  interval:
    description: Seconds between readings.
    type: float
    default: 1.0
  host:
    description: The host's name, for the messages.
    type: str
    default: the server
author: sglang-ansible
"""

EXAMPLES = r"""
- name: Wait until the server has drained
  sglang_router_drain:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_common_api_key }}"
    timeout: 600
    settle: 5
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
drained:
  description: Whether the readings stayed zero for I(settle) seconds (or the server stopped answering).
  type: bool
  returned: always
stopped:
  description: The server stopped answering (connection refused) during the drain.
  type: bool
  returned: always
waited:
  description: Seconds from the first reading to the last.
  type: float
  returned: always
readings:
  description: How many readings were taken.
  type: int
  returned: always
last:
  description: >-
    The last reading's counts (running, waiting, grammar, kv_tokens), or null when it said nothing
    countable (its reason in I(msg)).
  type: dict
  returned: always
version:
  description: The SGLang version the server reported in its last answer, or null.
  type: str
  returned: always
msg:
  description: What happened, in words (the failure message when I(drained) is false).
  type: str
  returned: always
"""

import json
import re
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule

KINDS = ("running", "waiting", "grammar", "kv_tokens")
REQUEST_KINDS = ("running", "waiting", "grammar")
# The first release whose /v1/loads answers the scheduler's published snapshot instead of asking the
# scheduler (managers/load_snapshot.py). Of the releases the project pins, 0.5.17 and 0.5.23 do, 0.5.9 does not.
FIRST_SNAPSHOT = (0, 5, 17)


def count(reply):
    """The reading's counts per kind, summed over loads[]; None when the reply has nothing to count.

    running, waiting: num_running_reqs, num_waiting_reqs (every release); grammar: queues.grammar,
    requests waiting for their grammar to compile, in neither of those (0 where the queues section
    is absent); kv_tokens: num_used_tokens, the KV cache held by requests (0 where absent). An empty
    loads[] is no reading (0.5.17's snapshot reader returns none before it has attached).
    """
    if not isinstance(reply, dict):
        return None
    ranks = reply.get("loads")
    if not isinstance(ranks, list) or not ranks:
        return None
    total = dict.fromkeys(KINDS, 0)
    try:
        for rank in ranks:
            total["running"] += int(rank["num_running_reqs"])
            total["waiting"] += int(rank["num_waiting_reqs"])
            total["grammar"] += int((rank.get("queues") or {}).get("grammar") or 0)
            total["kv_tokens"] += int(rank.get("num_used_tokens") or 0)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return total


def requests_in(counts):
    return sum(counts[k] for k in REQUEST_KINDS)


def is_zero(counts):
    return counts is not None and all(counts[k] == 0 for k in KINDS)


def version_tuple(version):
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", str(version or ""))
    return tuple(int(n) for n in found.groups()) if found else None


def how_published(version):
    """How the release answers /v1/loads, in words."""
    numbers = version_tuple(version)
    if numbers is None:
        return "an unknown release (no version in its /v1/loads answer)"
    if numbers >= FIRST_SNAPSHOT:
        return (f"SGLang {version} answers the snapshot its scheduler last published (after each prefill batch, "
                "every 15th decode batch, when idle)")
    return f"SGLang {version} asks its scheduler at each reading"


def not_counted(version):
    """What the release does not expose, in words (the same for every pinned release)."""
    name = f"SGLang {version}" if version else "The server"
    return (f"{name} counts no request its tokenizer manager still tokenizes (Kimi-K2.5's image preprocessing) "
            "or still streams out after the scheduler finished it: no endpoint or metric exposes them")


def describe(counts):
    """'3 requests in flight (2 running, 1 waiting), 1520 KV-cache tokens held' and the like."""
    parts = [f"{counts['running']} running", f"{counts['waiting']} waiting"]
    if counts["grammar"]:
        parts.append(f"{counts['grammar']} compiling their grammar")
    text = f"{requests_in(counts)} request{'s' if requests_in(counts) != 1 else ''} in flight ({', '.join(parts)})"
    if counts["kv_tokens"]:
        text += (f", {counts['kv_tokens']} KV-cache tokens held (a request in its prefill, which SGLang counts "
                 "neither running nor waiting)" if requests_in(counts) == 0 else
                 f", {counts['kv_tokens']} KV-cache tokens held")
    return text


class Settle:
    """Two zero readings at least `settle` seconds apart, with none but zero between them."""

    def __init__(self, settle):
        self.settle = settle
        self.since = None

    def observe(self, now, counts):
        """Take one reading (taken at monotonic time `now`); True once the drain is done."""
        if not is_zero(counts):
            self.since = None
            return False
        if self.since is None:
            self.since = now
        return now - self.since >= self.settle

    def zero_for(self, now):
        return 0.0 if self.since is None else now - self.since


class Reading:
    """One answer of /v1/loads: counts (or None, with why), the version, whether the server is gone."""

    def __init__(self, counts=None, version=None, why="", stopped=False, refused=""):
        self.counts, self.version, self.why, self.stopped, self.refused = counts, version, why, stopped, refused


def read_loads(url, api_key, timeout=10.0):
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    req = urllib.request.Request(url.rstrip("/") + "/v1/loads", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403, 404):  # waiting cannot change these: a wrong key, a release without /v1/loads
            return Reading(refused=f"HTTP {exc.code} from {url}/v1/loads")
        return Reading(why=f"HTTP {exc.code}")
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return Reading(stopped=True, why="connection refused")
        return Reading(why=str(exc.reason))
    except (OSError, ValueError) as exc:  # a timeout, a reset, a body that is no JSON
        return Reading(why=str(exc) or type(exc).__name__)
    counts = count(body)
    version = body.get("version") if isinstance(body, dict) else None
    return Reading(counts, version, "" if counts is not None else "no loads[] with request counts in the answer")


def drain(read, settle, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    """Read until the readings settle at zero, the server stops answering, or `timeout` passes.

    `read()` returns a Reading. Returns a dict: drained, stopped, refused, waited, readings, last
    (the last Reading), zero_for (seconds of zero readings at the end).
    """
    state = Settle(settle)
    start = clock()
    deadline = start + timeout
    taken, version = 0, None
    while True:
        now = clock()
        reading = read()
        taken += 1
        version = reading.version or version
        reading.version = version
        done = {"waited": round(now - start, 1), "readings": taken, "last": reading, "refused": reading.refused,
                "stopped": reading.stopped}
        if reading.refused:
            return dict(done, drained=False, zero_for=0.0)
        if reading.stopped or state.observe(now, reading.counts):
            return dict(done, drained=True, zero_for=state.zero_for(now))
        if now >= deadline:
            return dict(done, drained=False, zero_for=state.zero_for(now))
        sleep(max(0.0, min(interval, deadline - now)))


def message(result, host, url, settle, timeout):
    """The summary of a drain, or its failure message naming what was still in flight and what is not counted."""
    last = result["last"]
    version = last.version
    if result["refused"]:
        return (f"{host} left the router, but its server refused to say what it still serves ({result['refused']}): "
                "a server that expects another API key than sglang_common_api_key, or a release without /v1/loads. "
                "Nothing was restarted; the host stays out of the router.")
    if result["drained"]:
        if result["stopped"]:
            return f"{host}'s server stopped answering ({url}) after {result['waited']} s: nothing left to drain."
        return (f"{host} drained in {result['waited']} s: {result['readings']} readings of {url}/v1/loads, "
                f"zero for the last {result['zero_for']:.0f} s (sglang_router_drain_settle: {settle} s); "
                f"{how_published(version)}. {not_counted(version)}: the settle time covers them.")
    if last.counts is None:
        state = f"its last reading said nothing countable ({last.why})"
    elif is_zero(last.counts):
        state = (f"its readings were zero for only {result['zero_for']:.1f} s of the {settle} s "
                 "sglang_router_drain_settle at the end (requests came and went)")
    else:
        state = f"it still had {describe(last.counts)}"
    return (f"{host} left the router, but after sglang_router_drain_timeout ({timeout} s) {state}, "
            f"read from {url}/v1/loads ({how_published(version)}). Not counted there: {not_counted(version)}. "
            "Nothing was restarted and no stream was cut; the host stays out of the router: run again once its "
            "requests have finished, or raise sglang_router_drain_timeout.")


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "int", "required": True},
            "settle": {"type": "int", "required": True},
            "interval": {"type": "float", "default": 1.0},
            "host": {"type": "str", "default": "the server"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not 1 <= p["settle"] < p["timeout"] or p["interval"] <= 0:
        module.fail_json(msg=f"settle ({p['settle']}) must be at least 1 and below timeout ({p['timeout']}), "
                             f"interval ({p['interval']}) above 0")
    result = drain(lambda: read_loads(p["url"], p["api_key"]), p["settle"], p["timeout"], p["interval"])
    last = result["last"]
    module.exit_json(changed=False, drained=result["drained"], stopped=result["stopped"], waited=result["waited"],
                     readings=result["readings"], last=last.counts, version=last.version,
                     msg=message(result, p["host"], p["url"].rstrip("/"), p["settle"], p["timeout"]))


if __name__ == "__main__":
    main()
