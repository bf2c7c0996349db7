"""Tests for hero.llm.LlmClient: the real openai SDK over real HTTP to hero's scripted model."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hero.config import LlmSettings, Provider, RoleConfig
from hero.errors import Interrupted
from hero.llm import Completion, LlmClient, LlmError
from hero.testing.scripted import Drop, HttpError, Reply, ScriptedModel, ToolCall, calls, text

MESSAGES = [
    {"role": "system", "content": "You are a test."},
    {"role": "user", "content": "hello"},
]
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


def make_client(
    base_url: str,
    *,
    role: str = "worker",
    model: str = "test-model",
    reasoning_effort: str | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    input_price: float | None = None,
    output_price: float | None = None,
    max_attempts: int = 3,
    backoff_base_s: float = 0.01,
    backoff_max_s: float = 0.05,
    timeout_s: float = 10.0,
    cancel: threading.Event | None = None,
    on_retry: Callable[[str], None] | None = None,
) -> LlmClient:
    provider = Provider(
        name="scripted",
        base_url=base_url,
        default_model="default-model",
        headers=dict(headers or {}),
        input_usd_per_mtok=input_price,
        output_usd_per_mtok=output_price,
    )
    role_config = RoleConfig(
        role=role,
        provider=provider,
        model=model,
        reasoning_effort=reasoning_effort,
        api_key=api_key,
    )
    settings = LlmSettings(
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        backoff_base_s=backoff_base_s,
        backoff_max_s=backoff_max_s,
    )
    return LlmClient(role_config, settings, cancel=cancel, on_retry=on_retry)


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


class _RawServer:
    """A tiny HTTP server answering chat/completions with raw JSON bodies, in order."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = list(bodies)
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                index = min(outer.hits, len(outer.bodies) - 1)
                outer.hits += 1
                payload = json.dumps(outer.bodies[index]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
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
def raw_server() -> Iterator[Callable[[list[dict[str, Any]]], _RawServer]]:
    servers: list[_RawServer] = []

    def start(bodies: list[dict[str, Any]]) -> _RawServer:
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
