"""The drain's readings (module sglang_router_drain, drain()): done only when every reading over
sglang_router_drain_settle seconds was zero, bounded by the timeout; a failure names what was in flight.

First on a fake clock with scripted readings, then against the SGLang simulator (TEST DOUBLE) playing a
release whose /v1/loads is asked live (0.5.9) and one that answers a published snapshot (0.5.23), with
requests that spend time in the tokenizer manager, where SGLang counts them nowhere."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from repo import load

drain = load("roles/sglang_router/library/sglang_router_drain.py")
Reading = drain.Reading


def zero() -> dict[str, int]:
    return dict.fromkeys(drain.KINDS, 0)


def of(**kinds: int) -> dict[str, int]:
    return dict(zero(), **kinds)


class Script:
    """A fake clock that sleep() advances, and readings taken in turn (the last one repeats)."""

    def __init__(self, readings: list[Reading], version: str = "0.5.23") -> None:
        self.now, self.readings, self.taken = 0.0, readings, []
        for r in readings:
            r.version = r.version or version

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def read(self) -> Reading:
        r = self.readings[min(len(self.taken), len(self.readings) - 1)]
        self.taken.append((self.now, r.counts))
        return Reading(r.counts, r.version, r.why, r.stopped, r.refused)

    def run(self, settle: float = 2, timeout: float = 60, interval: float = 1) -> dict:
        return drain.drain(self.read, settle, timeout, interval, clock=self.clock, sleep=self.sleep)


def test_a_zero_then_a_busy_reading_then_two_zeros_apart():
    """One zero is not enough; a busy reading starts the settle again; two zeros settle seconds apart end it."""
    script = Script([Reading(zero()), Reading(of(running=1)), Reading(zero()), Reading(zero()), Reading(zero())])
    result = script.run(settle=2, interval=1)
    assert result["drained"] and not result["stopped"]
    assert [t for t, _ in script.taken] == [0, 1, 2, 3, 4]  # not at 0 (one zero), not at 3 (zero for 1 s only)
    assert result["readings"] == 5 and result["zero_for"] == 2


def test_two_zero_readings_exactly_settle_apart_are_enough():
    script = Script([Reading(zero()), Reading(of(waiting=2)), Reading(zero()), Reading(zero())])
    result = script.run(settle=1, interval=1)
    assert result["drained"] and [t for t, _ in script.taken] == [0, 1, 2, 3]


def test_kv_cache_held_and_an_unreadable_answer_are_not_zero():
    """A request in its prefill (KV cache held, neither running nor waiting) and an answer without counts
    (HTTP 503, a timeout) each start the settle again."""
    script = Script([Reading(zero()), Reading(of(kv_tokens=8192)), Reading(zero()), Reading(None, why="HTTP 503"),
                     Reading(zero()), Reading(zero())])
    result = script.run(settle=1, interval=1)
    assert result["drained"] and len(script.taken) == 6


def test_a_timeout_with_three_in_flight_names_them_and_what_is_not_counted():
    script = Script([Reading(of(running=2, waiting=1, kv_tokens=1520))])
    result = script.run(settle=5, timeout=10, interval=1)
    assert not result["drained"] and result["waited"] == 10 and result["readings"] == 11
    msg = drain.message(result, "gpu2", "http://127.0.0.1:30000", 5, 10)
    assert "gpu2 left the router, but after sglang_router_drain_timeout (10 s) it still had 3 requests in flight " \
           "(2 running, 1 waiting), 1520 KV-cache tokens held" in msg
    assert "SGLang 0.5.23 answers the snapshot its scheduler last published" in msg
    assert "Not counted there: SGLang 0.5.23 counts no request its tokenizer manager still tokenizes" in msg
    assert "Nothing was restarted and no stream was cut; the host stays out of the router" in msg


def test_a_timeout_names_the_grammar_queue_and_a_lone_prefill():
    script = Script([Reading(of(grammar=1))], version="0.5.9")
    msg = drain.message(script.run(settle=1, timeout=3), "gpu1", "http://h:1", 1, 3)
    assert "1 request in flight (0 running, 0 waiting, 1 compiling their grammar)" in msg
    assert "SGLang 0.5.9 asks its scheduler at each reading" in msg
    script = Script([Reading(of(kv_tokens=64))])
    msg = drain.message(script.run(settle=1, timeout=3), "gpu1", "http://h:1", 1, 3)
    assert "0 requests in flight (0 running, 0 waiting), 64 KV-cache tokens held (a request in its prefill" in msg


def test_zero_at_the_timeout_but_not_for_the_settle_time_fails_saying_so():
    script = Script([Reading(of(running=1))] * 8 + [Reading(zero())])
    result = script.run(settle=5, timeout=10, interval=1)
    assert not result["drained"]
    msg = drain.message(result, "gpu1", "http://h:1", 5, 10)
    assert "its readings were zero for only 2.0 s of the 5 s sglang_router_drain_settle" in msg


def test_a_server_that_stops_answering_has_nothing_left_and_a_refusal_ends_at_once():
    script = Script([Reading(of(running=1)), Reading(stopped=True, why="connection refused")])
    result = script.run()
    assert result["drained"] and result["stopped"] and result["readings"] == 2
    assert "stopped answering" in drain.message(result, "gpu1", "http://h:1", 2, 60)
    script = Script([Reading(refused="HTTP 401 from http://h:1/v1/loads")])
    result = script.run()
    assert not result["drained"] and result["readings"] == 1
    assert "refused to say what it still serves (HTTP 401" in drain.message(result, "gpu1", "http://h:1", 2, 60)


def test_a_drained_summary_says_how_long_and_what_covers_the_uncounted():
    script = Script([Reading(zero())])
    result = script.run(settle=3)
    msg = drain.message(result, "gpu1", "http://h:1", 3, 60)
    assert result["drained"] and msg.startswith("gpu1 drained in 3.0 s: 4 readings of http://h:1/v1/loads, zero for the last 3 s")
    assert "the settle time covers them" in msg


# --------------------------------------------------------------------------- against the simulator


def playing(tmp_path, release: str) -> str:
    package = tmp_path / f"sglang-{release}" / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "_version.py").write_text(f'__version__ = "{release}"\n')
    return str(package)


def generate(url: str, tokens: int, done: dict) -> None:
    req = urllib.request.Request(url + "/generate", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"text": "x", "sampling_params": {"max_new_tokens": tokens}}).encode())
    with urllib.request.urlopen(req, timeout=60) as resp:
        done["tokens"] = json.loads(resp.read())["meta_info"]["completion_tokens"]
    done["at"] = time.monotonic()


@pytest.mark.timing
@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_a_request_still_tokenizing_reads_zero_and_the_settle_time_waits_for_it(start_sim, tmp_path, release):
    """A request that spends 1.5 s in the tokenizer manager reads as zero at first (SGLang counts it nowhere):
    one zero reading would have ended the drain; two readings 3 s apart, all zero, wait until it finished."""
    sim = start_sim(env={"SGLANG_SIM_SGLANG_DIR": playing(tmp_path, release), "SGLANG_SIM_TOKENIZE_MS": "1500",
                         "SGLANG_SIM_TTFT_MS": "300", "SGLANG_SIM_DECODE_TOK_S": "50", "SGLANG_SIM_NOISE_PCT": "0"})
    done: dict = {}
    worker = threading.Thread(target=generate, args=(sim.url, 60, done))  # 1.5 + 0.3 + ~1.2 s
    worker.start()
    time.sleep(0.2)
    seen: list = []

    def read():
        reading = drain.read_loads(sim.url, "")
        seen.append((time.monotonic(), reading.counts))
        return reading

    result = drain.drain(read, settle=3, timeout=30, interval=0.25)
    ended = time.monotonic()
    worker.join()
    assert result["drained"] and not result["stopped"] and result["last"].version == release
    assert drain.is_zero(seen[0][1]), "the request was counted while it was still being tokenized"
    assert any(c and c["kv_tokens"] > 0 for _, c in seen), "the request never showed"
    assert done["tokens"] == 60 and done["at"] <= ended - 3 + 0.5, "the drain ended before the request finished"
