"""Tests for hero.llm.client.LlmClient: the real openai SDK over real HTTP to hero's scripted model."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from helpers import MESSAGES, make_client

from hero.config.sections import LlmSettings
from hero.errors import Interrupted
from hero.llm.client import Completion, LlmError
from hero.llm.scripted import Drop, HttpError, Reply, ScriptedModel, ToolCall, calls, text
from hero.llm.usage import estimate_message, estimate_request

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run a command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]

Start = Callable[..., ScriptedModel]


# ------------------------------------------------------------------------- parsing replies


def test_text_reply_becomes_a_completion(scripted: Start) -> None:
    model = scripted([Reply(content="hi there", prompt_tokens=11, completion_tokens=7)])
    client = make_client(model.base_url)

    result = client.complete(MESSAGES)

    assert isinstance(result, Completion)
    assert result.content == "hi there"
    assert result.tool_calls == ()
    assert result.message == {"role": "assistant", "content": "hi there"}
    assert result.finish_reason == "stop"
    assert (result.tokens_in, result.tokens_out) == (11, 7)
    assert result.http_s > 0
    body = model.requests[0].body
    assert body["model"] == "test-model"
    assert body["messages"] == MESSAGES
    assert "tools" not in body


def test_tool_calls_are_parsed_with_ids_names_and_arguments(scripted: Start) -> None:
    model = scripted(
        [
            calls(
                ToolCall("bash", {"command": "ls -la"}, id="call_a"),
                ToolCall("read_file", '{"path": "x.py", "offset": 3}', id="call_b"),
            ),
            text("done"),
        ]
    )
    client = make_client(model.base_url)

    result = client.complete(MESSAGES, TOOLS)

    assert result.finish_reason == "tool_calls"
    assert result.content == ""
    assert [(c.id, c.name) for c in result.tool_calls] == [
        ("call_a", "bash"),
        ("call_b", "read_file"),
    ]
    assert json.loads(result.tool_calls[0].arguments) == {"command": "ls -la"}
    assert result.tool_calls[1].arguments == '{"path": "x.py", "offset": 3}'
    assert result.message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "bash", "arguments": result.tool_calls[0].arguments},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "x.py", "offset": 3}'},
            },
        ],
    }
    assert model.requests[0].body["tools"] == TOOLS

    # The message dict is fit for the history: the SDK sends it back as is.
    history = [
        *MESSAGES,
        result.message,
        {"role": "tool", "tool_call_id": "call_a", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "call_b", "content": "1\tx"},
    ]
    assert client.complete(history, TOOLS).content == "done"
    assert model.requests[1].body["messages"][2] == result.message


def test_usage_accumulates_tokens_calls_and_cost(scripted: Start) -> None:
    model = scripted(
        [
            Reply(content="one", prompt_tokens=1000, completion_tokens=500),
            Reply(content="two", prompt_tokens=3000, completion_tokens=250),
        ]
    )
    client = make_client(model.base_url, input_price=2.0, output_price=10.0)

    client.complete(MESSAGES)
    client.complete(MESSAGES)

    usage = client.usage
    assert (usage.tokens_in, usage.tokens_out, usage.llm_calls) == (4000, 750, 2)
    assert usage.cost_usd == pytest.approx(4000 * 2.0 / 1e6 + 750 * 10.0 / 1e6)


def test_cost_is_zero_without_pricing(scripted: Start) -> None:
    model = scripted([Reply(content="x", prompt_tokens=100, completion_tokens=100)])
    client = make_client(model.base_url)
    client.complete(MESSAGES)
    assert client.usage.cost_usd == 0.0
    assert client.usage.llm_calls == 1


# ------------------------------------------------------------------------- request shape


def test_reasoning_effort_sent_only_when_set(scripted: Start) -> None:
    model = scripted([text("a"), text("b")])
    make_client(model.base_url, reasoning_effort="high").complete(MESSAGES)
    make_client(model.base_url, reasoning_effort=None).complete(MESSAGES)

    assert model.requests[0].body["reasoning_effort"] == "high"
    assert "reasoning_effort" not in model.requests[1].body


def test_provider_headers_and_bearer_key_are_sent(scripted: Start) -> None:
    model = scripted([text("a")])
    client = make_client(model.base_url, api_key="sk-test-123", headers={"X-Team": "hero-tests"})
    client.complete(MESSAGES)

    headers = model.requests[0].headers
    assert headers["authorization"] == "Bearer sk-test-123"
    assert headers["x-team"] == "hero-tests"


def test_keyless_role_does_not_send_a_real_key(scripted: Start) -> None:
    model = scripted([text("a")])
    make_client(model.base_url, api_key=None).complete(MESSAGES)
    assert "sk-" not in model.requests[0].headers.get("authorization", "")


# ------------------------------------------------------------------------- retries


@pytest.mark.slow
def test_429_retry_after_is_honoured(scripted: Start) -> None:
    model = scripted([HttpError(429, "slow down", headers={"Retry-After": "1"}), text("ok")])
    notes: list[str] = []
    # Retry-After is honoured even above the backoff ceiling.
    client = make_client(model.base_url, backoff_max_s=0.05, on_retry=notes.append)

    result = client.complete(MESSAGES)

    assert result.content == "ok"
    assert len(model.requests) == 2
    assert model.requests[1].received_at - model.requests[0].received_at >= 0.9
    assert client.usage.retries == 1
    assert client.usage.llm_calls == 1
    assert len(notes) == 1 and "429" in notes[0]


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "100000"},
        {"retry-after-ms": "100000000"},
        {"Retry-After": "Wed, 21 Oct 2099 07:28:00 GMT"},
    ],
    ids=["seconds", "ms", "date"],
)
def test_retry_after_is_honoured_only_up_to_the_ceiling(
    scripted: Start, headers: dict[str, str]
) -> None:
    model = scripted([HttpError(429, "come back tomorrow", headers=headers), text("ok")])
    notes: list[str] = []
    client = make_client(model.base_url, retry_after_max_s=0.2, on_retry=notes.append)

    started = time.monotonic()
    assert client.complete(MESSAGES).content == "ok"
    waited = model.requests[1].received_at - model.requests[0].received_at

    # Waited the ceiling, not the day the header asked for (and not the 0.05 s backoff).
    assert waited >= 0.2
    assert time.monotonic() - started < 30
    assert notes == ["HTTP 429; retry 1 in 0.2 s"]


def test_retry_after_ceiling_defaults_to_120_s() -> None:
    assert LlmSettings().retry_after_max_s == 120.0


@pytest.mark.parametrize("header", ["soon", "Wed, 99 Foo 2015 07:28:00 GMT"])
def test_unreadable_retry_after_falls_back_to_backoff(scripted: Start, header: str) -> None:
    model = scripted([HttpError(503, "busy", headers={"Retry-After": header}), text("ok")])
    notes: list[str] = []
    client = make_client(model.base_url, backoff_max_s=0.05, on_retry=notes.append)

    assert client.complete(MESSAGES).content == "ok"
    assert len(model.requests) == 2
    assert client.usage.retries == 1
    waited = float(notes[0].rsplit(" in ", 1)[1].removesuffix(" s"))
    assert waited <= 0.1  # the backoff's own delay, not a guess from the header


def test_500_then_success(scripted: Start) -> None:
    model = scripted([HttpError(500, "boom"), text("recovered")])
    client = make_client(model.base_url)

    assert client.complete(MESSAGES).content == "recovered"
    assert len(model.requests) == 2
    assert client.usage.retries == 1


def test_dropped_connection_then_success(scripted: Start) -> None:
    model = scripted([Drop(), text("back")])
    notes: list[str] = []
    client = make_client(model.base_url, on_retry=notes.append)

    assert client.complete(MESSAGES).content == "back"
    assert len(model.requests) == 2
    assert "connection" in notes[0]


def test_timeout_is_retried(scripted: Start) -> None:
    slow = threading.Event()

    def handler(body: dict) -> Reply:
        if not slow.is_set():
            slow.set()
            threading.Event().wait(1.5)  # longer than the client's timeout
            return text("too late")
        return text("in time")

    model = scripted(handler)
    notes: list[str] = []
    client = make_client(model.base_url, timeout_s=0.3, on_retry=notes.append)

    assert client.complete(MESSAGES).content == "in time"
    assert "timed out" in notes[0]


def test_retries_exhausted_raise_llm_error_naming_role_model_url_attempts(
    scripted: Start,
) -> None:
    model = scripted([HttpError(503, "overloaded")] * 3)
    client = make_client(model.base_url, role="reviewer", model="judge-1", max_attempts=3)

    with pytest.raises(LlmError) as info:
        client.complete(MESSAGES)

    message = str(info.value)
    assert "reviewer" in message
    assert "judge-1" in message
    assert model.base_url in message
    assert "3 attempts" in message
    assert "503" in message
    assert len(model.requests) == 3
    assert client.usage.llm_calls == 0


@pytest.mark.parametrize("status", [400, 401, 404])
def test_client_errors_fail_at_once_without_retries(scripted: Start, status: int) -> None:
    model = scripted([HttpError(status, f"nope {status}"), text("never")])
    notes: list[str] = []
    client = make_client(model.base_url, max_attempts=5, on_retry=notes.append)

    with pytest.raises(LlmError) as info:
        client.complete(MESSAGES)

    assert len(model.requests) == 1
    assert model.remaining == 1
    assert notes == []
    message = str(info.value)
    assert str(status) in message
    assert f"nope {status}" in message
    assert "test-model" in message
    assert model.base_url in message


def test_cancel_during_backoff_raises_interrupted(scripted: Start) -> None:
    cancel = threading.Event()
    timers: list[threading.Timer] = []

    def handler(body: dict) -> HttpError:
        timer = threading.Timer(0.2, cancel.set)  # set while the client waits to retry
        timers.append(timer)
        timer.start()
        return HttpError(500, "down")

    model = scripted(handler)
    client = make_client(
        model.base_url, backoff_base_s=5.0, backoff_max_s=5.0, max_attempts=5, cancel=cancel
    )

    with pytest.raises(Interrupted):
        client.complete(MESSAGES)
    assert len(model.requests) == 1
    for timer in timers:
        timer.cancel()


# ------------------------------------------------------------------------- no choices


@dataclass(frozen=True)
class Raw:
    """A 200 answer sent byte for byte, whatever it holds."""

    body: bytes
    content_type: str = "application/json"


class _RawServer:
    """A tiny HTTP server answering chat/completions with 200s holding the given bodies (a
    JSON value, or Raw bytes), in order: what ScriptedModel, which always answers well-formed
    JSON, cannot send."""

    def __init__(self, bodies: list[Any]) -> None:
        self.bodies = list(bodies)
        self.hits = 0
        self.times: list[float] = []  # time.monotonic() of each request
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.times.append(time.monotonic())
                index = min(outer.hits, len(outer.bodies) - 1)
                outer.hits += 1
                answer = outer.bodies[index]
                raw = answer if isinstance(answer, Raw) else Raw(json.dumps(answer).encode())
                payload = raw.body
                self.send_response(200)
                self.send_header("Content-Type", raw.content_type)
                self.send_header("Content-Length", str(len(payload)))
                # No keep-alive: no connection thread outlives the test that made it.
                self.send_header("Connection", "close")
                self.close_connection = True
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _completion_body(choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-raw",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": choices,
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


GOOD_CHOICE = {
    "index": 0,
    "message": {"role": "assistant", "content": "fine"},
    "finish_reason": "stop",
}


@pytest.fixture
def raw_server() -> Iterator[Callable[[list[Any]], _RawServer]]:
    servers: list[_RawServer] = []

    def start(bodies: list[Any]) -> _RawServer:
        server = _RawServer(bodies)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def test_answer_without_choices_is_retried(raw_server: Callable[..., _RawServer]) -> None:
    server = raw_server([_completion_body([]), _completion_body([GOOD_CHOICE])])
    notes: list[str] = []
    client = make_client(server.base_url, on_retry=notes.append)

    assert client.complete(MESSAGES).content == "fine"
    assert server.hits == 2
    assert "no choices" in notes[0]
    assert client.usage.llm_calls == 1


def test_answers_without_choices_exhaust_retries(raw_server: Callable[..., _RawServer]) -> None:
    server = raw_server([_completion_body([])])
    client = make_client(server.base_url, max_attempts=2)

    with pytest.raises(LlmError, match="2 attempts"):
        client.complete(MESSAGES)
    assert server.hits == 2


# ------------------------------------------------------------------------- unusable 200s

SECRET_KEY = "sk-hero-test-0123456789abcdef"
PROXY_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n<body>"
    "<h1>Bad Gateway</h1><pre>upstream sent an invalid response\n"
    f"Authorization: Bearer {SECRET_KEY}\n</pre></body></html>\n"
).encode()
NOT_JSON = {
    "html": Raw(PROXY_PAGE, "text/html; charset=utf-8"),
    "html-as-json": Raw(PROXY_PAGE),
    "truncated": Raw(json.dumps(_completion_body([GOOD_CHOICE])).encode()[:40]),
    "empty": Raw(b""),
    "latin-1": Raw(b"\xff\xfe not utf-8", "text/plain"),
}


@pytest.mark.parametrize("body", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_200_whose_body_is_not_json_is_retried(
    raw_server: Callable[..., _RawServer], body: Raw
) -> None:
    server = raw_server([body, _completion_body([GOOD_CHOICE])])
    notes: list[str] = []
    client = make_client(server.base_url, api_key=SECRET_KEY, on_retry=notes.append)

    assert client.complete(MESSAGES).content == "fine"
    assert server.hits == 2
    assert client.usage.retries == 1
    assert client.usage.llm_calls == 1
    assert len(notes) == 1
    assert "HTTP 200 but the body was not JSON" in notes[0]
    assert f"{len(body.body)} bytes" in notes[0]
    assert SECRET_KEY not in notes[0]


def test_200s_not_json_exhaust_retries_naming_role_model_url_and_a_safe_excerpt(
    raw_server: Callable[..., _RawServer],
) -> None:
    server = raw_server([Raw(PROXY_PAGE, "text/html")])
    notes: list[str] = []
    client = make_client(
        server.base_url,
        role="reviewer",
        model="judge-1",
        api_key=SECRET_KEY,
        max_attempts=3,
        backoff_base_s=0.05,
        backoff_max_s=0.05,
        on_retry=notes.append,
    )

    with pytest.raises(LlmError) as info:
        client.complete(MESSAGES)

    message = str(info.value)
    assert server.hits == 3
    assert "reviewer" in message
    assert "judge-1" in message
    assert server.base_url in message
    assert "3 attempts" in message
    assert "the body was not JSON" in message
    assert "'<!DOCTYPE html> <html><head><title>502 Bad Gateway" in message  # one line
    assert SECRET_KEY not in message
    assert "sk-hero" not in message and "0123456789" not in message
    assert len(message) < len(server.base_url) + 400
    # Retried with the backoff (jittered between half the ceiling and the ceiling), as a 5xx is.
    assert len(notes) == 2 and all("not JSON" in note for note in notes)
    gaps = [b - a for a, b in itertools.pairwise(server.times)]
    assert len(gaps) == 2 and min(gaps) >= 0.025
    assert client.usage.llm_calls == 0


def test_excerpt_masks_tokens_echoed_by_a_proxy(raw_server: Callable[..., _RawServer]) -> None:
    page = (
        b"<p>Authorization: Bearer abc.def-ghi</p><p>x-api-key: k-12345</p> token=t0p "
        b"<i>hero-local-key-42</i> <i>team-header-value</i>"
    )
    server = raw_server([Raw(page, "text/html")])
    client = make_client(
        server.base_url,
        api_key="hero-local-key-42",
        headers={"X-Custom-Auth": "team-header-value"},
        max_attempts=1,
    )

    with pytest.raises(LlmError) as info:
        client.complete(MESSAGES)

    message = str(info.value)
    assert "not JSON" in message
    for secret in ("abc.def-ghi", "k-12345", "t0p", "hero-local-key-42", "team-header-value"):
        assert secret not in message
    assert "Authorization: Bearer ***" in message


MALFORMED = {
    "no-choices-key": {"id": "x", "object": "chat.completion"},
    "json-array": [GOOD_CHOICE],
    "json-string": "fine",
    "choice-not-object": _completion_body(["fine"]),
    "message-string": _completion_body([{"index": 0, "message": "fine"}]),
    "message-missing": _completion_body([{"index": 0, "finish_reason": "stop"}]),
    "message-null": _completion_body([{"index": 0, "message": None}]),
    "content-number": _completion_body([{"message": {"role": "assistant", "content": 5}}]),
    "content-object": _completion_body([{"message": {"content": {"text": "fine"}}}]),
    "tool-calls-object": _completion_body(
        [{"message": {"content": None, "tool_calls": {"function": {"name": "bash"}}}}]
    ),
    "tool-call-string": _completion_body([{"message": {"content": None, "tool_calls": ["x"]}}]),
    "tool-call-no-function": _completion_body(
        [{"message": {"content": None, "tool_calls": [{"id": "c1", "function": "bash"}]}}]
    ),
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_200_with_a_malformed_completion_is_retried(
    raw_server: Callable[..., _RawServer], body: Any
) -> None:
    server = raw_server([body, _completion_body([GOOD_CHOICE])])
    notes: list[str] = []
    client = make_client(server.base_url, on_retry=notes.append)

    assert client.complete(MESSAGES).content == "fine"
    assert server.hits == 2
    assert len(notes) == 1 and "unusable answer" in notes[0]
    assert client.usage.llm_calls == 1


def test_malformed_completions_exhaust_retries_naming_what_was_wrong(
    raw_server: Callable[..., _RawServer],
) -> None:
    server = raw_server([_completion_body([{"index": 0, "message": "fine"}])])
    client = make_client(server.base_url, role="planner", model="plan-1", max_attempts=2)

    with pytest.raises(LlmError) as info:
        client.complete(MESSAGES)

    message = str(info.value)
    assert server.hits == 2
    assert "planner" in message and "plan-1" in message and server.base_url in message
    assert "malformed message (a string)" in message
    assert "2 attempts" in message


def test_odd_usage_is_estimated_and_never_retried(raw_server: Callable[..., _RawServer]) -> None:
    body = {**_completion_body([GOOD_CHOICE]), "usage": "n/a"}
    server = raw_server(
        [body, {**body, "usage": {"prompt_tokens": "many", "completion_tokens": 4}}]
    )
    client = make_client(server.base_url)
    prompt = estimate_request(MESSAGES)
    answer = estimate_message(GOOD_CHOICE["message"])  # type: ignore[arg-type]

    first = client.complete(MESSAGES)
    second = client.complete(MESSAGES)

    assert first.content == second.content == "fine"
    assert server.hits == 2 and client.usage.retries == 0
    # no usage at all: both sides estimated; a prompt count that is no number: that side
    # estimated, the completion count the endpoint gave kept
    assert (first.tokens_in, first.tokens_out, first.tokens_estimated) == (
        prompt,
        answer,
        prompt + answer,
    )
    assert (second.tokens_in, second.tokens_out, second.tokens_estimated) == (prompt, 4, prompt)
    assert (client.usage.estimated_calls, client.usage.estimated_tokens) == (2, 2 * prompt + answer)


def test_reasoning_field_is_read_when_there_is_no_reasoning_content(
    raw_server: Callable[..., _RawServer],
) -> None:
    message = {"role": "assistant", "content": "fine", "reasoning": "THOUGHTS"}
    odd = {"role": "assistant", "content": "fine", "reasoning": {"effort": "high"}}
    server = raw_server(
        [
            _completion_body([{**GOOD_CHOICE, "message": message}]),
            _completion_body([{**GOOD_CHOICE, "message": odd}]),
        ]
    )
    client = make_client(server.base_url)

    first = client.complete(MESSAGES)
    second = client.complete(MESSAGES)

    assert first.reasoning == "THOUGHTS"
    assert first.message == {"role": "assistant", "content": "fine"}  # not sent back
    assert second.reasoning == ""  # not a string: dropped, never an error
    assert client.usage.retries == 0
