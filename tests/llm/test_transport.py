"""A provider cannot stall a call nor fill hero's memory (hero.llm.transport): the real
``openai`` client over real HTTP to the scripted model on loopback, which trickles its
answer byte by byte or sends one of any size.

Bounds on time are generous ("well under" what the provider would take, never tight): these
tests must pass on a loaded 2-core machine. The numbers are bench/provider.py's.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable

import pytest
from helpers import MESSAGES, make_client
from watch_support import wait_for

from hero.llm.client import AnswerTooLarge, LlmError, ModelOutage, ModelUnavailable
from hero.llm.scripted import Huge, Raw, ScriptedModel, Trickle
from hero.llm.transport import bound_http_client

Start = Callable[..., ScriptedModel]

ANSWER = {
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ]
}
#: A trickled answer would take 100 s to arrive: 400 bytes, 0.25 s apart.
SLOW_BODY = Raw(json.dumps(ANSWER) + " " * 400)
SLOW_S = len(SLOW_BODY.encoded()) * 0.25
#: Room for a loaded machine above the deadline; still far under SLOW_S.
SLACK_S = 20.0


@pytest.mark.parametrize("head", [False, True], ids=["body", "status-and-headers"])
def test_a_trickled_answer_ends_at_the_deadline_of_the_whole_call(
    scripted: Start, head: bool
) -> None:
    """llm_timeout_s was a limit on each read: one byte every 0.25 s never met it."""
    model = scripted([Trickle(SLOW_BODY, interval_s=0.25, head=head)])
    client = make_client(model.base_url, timeout_s=1.0, max_attempts=1)
    started = time.monotonic()
    with pytest.raises(ModelUnavailable) as caught:
        client.complete(MESSAGES)
    took = time.monotonic() - started
    assert took < 1.0 + SLACK_S < SLOW_S / 3, took
    assert "llm_timeout_s (1 s, the deadline of the whole request)" in str(caught.value)
    assert caught.value.reason.startswith("timed out")  # a timeout, as the breaker knows it
    assert model.bytes_sent < len(SLOW_BODY.encoded())  # it had not finished sending


def test_each_attempt_has_its_own_deadline(scripted: Start) -> None:
    model = scripted([Trickle(SLOW_BODY, interval_s=0.25)] * 2)
    client = make_client(model.base_url, timeout_s=1.0, max_attempts=2)
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="gave up after 2 attempts"):
        client.complete(MESSAGES)
    assert time.monotonic() - started < 2 * 1.0 + SLACK_S < SLOW_S / 2
    assert len(model.requests) == 2


def test_a_slow_answer_within_the_deadline_is_read(scripted: Start) -> None:
    body = Raw(json.dumps(ANSWER))
    model = scripted([Trickle(body, chunk_bytes=16, interval_s=0.01)])
    assert make_client(model.base_url, timeout_s=60.0).complete(MESSAGES).content == "ok"


def test_an_answer_over_the_cap_is_read_no_further(scripted: Start) -> None:
    """A 64 MB answer with a 1 MB cap: the call's error (its story's, not the provider's),
    not retried, and the server was cut off long before it had sent it all."""
    size = 64 << 20
    model = scripted([Huge(size), Huge(size)])
    client = make_client(model.base_url, max_response_mb=1, max_attempts=3)
    with pytest.raises(AnswerTooLarge, match=r"llm_max_response_mb \(1 MB\)") as caught:
        client.complete(MESSAGES)
    assert isinstance(caught.value, LlmError) and not isinstance(caught.value, ModelOutage)
    assert len(model.requests) == 1  # asking again asks for the same answer
    sent = model.bytes_sent
    # what the sockets' buffers held past the cap, at most; never the whole answer
    assert wait_for(lambda: model.bytes_sent == sent, 5.0, step=0.5)
    assert model.bytes_sent < size // 3, model.bytes_sent


def test_an_answer_within_the_cap_is_read_whole(scripted: Start) -> None:
    model = scripted([Huge(3 << 20)])
    answer = make_client(model.base_url, max_response_mb=4).complete(MESSAGES)
    assert len(answer.content) > 3_000_000


def test_a_compressed_answer_is_unpacked_and_capped_unpacked(scripted: Start) -> None:
    """A gzip of 64 MB is about 64 KB on the wire: the cap is on what it unpacks to."""
    gz = {"Content-Encoding": "gzip"}
    small = Raw(gzip.compress(json.dumps(ANSWER).encode()), headers=gz)
    padded = {**ANSWER, "pad": "x" * (64 << 20)}
    bomb = Raw(gzip.compress(json.dumps(padded).encode()), headers=gz)
    assert len(bomb.encoded()) < 1 << 20
    model = scripted([small, bomb])
    client = make_client(model.base_url, max_response_mb=1)
    assert client.complete(MESSAGES).content == "ok"
    with pytest.raises(AnswerTooLarge):
        client.complete(MESSAGES)


def test_an_encoding_hero_did_not_ask_for_is_not_unpacked(scripted: Start) -> None:
    model = scripted([Raw(b"\x00" * 64, headers={"Content-Encoding": "br"})])
    with pytest.raises(ModelUnavailable, match="Content-Encoding 'br'"):
        make_client(model.base_url, max_attempts=1).complete(MESSAGES)


def test_the_bounds_hold_on_a_shared_and_a_kept_alive_connection(scripted: Start) -> None:
    """The worker and the reviewer share one HTTP client (installed once); a connection
    kept alive from a quick answer serves a slow one under that call's own deadline."""
    model = scripted([Raw(ANSWER), Trickle(SLOW_BODY, interval_s=0.25)])
    client = make_client(model.base_url, timeout_s=1.0, max_attempts=1)
    transport = client.http_client._transport
    bound_http_client(client.http_client)  # again: nothing changes
    assert client.http_client._transport is transport
    assert client.complete(MESSAGES).content == "ok"
    started = time.monotonic()
    with pytest.raises(ModelUnavailable):
        client.complete(MESSAGES)
    assert time.monotonic() - started < 1.0 + SLACK_S < SLOW_S / 3
