"""Real endpoints' response shapes, replayed verbatim through the real client.

Each test sends, from the scripted model on loopback (``Raw``: the body byte for byte), a
response in the shape an endpoint users run documents or is known to send: OpenAI, Azure
OpenAI, OpenRouter, vLLM, Ollama, llama.cpp's server, LM Studio (and DeepSeek's and
Anthropic-style gateways' cache fields). What hero reads from it, what it appends to the
history and sends back, and what it says of an error body are checked. The table of these
endpoints and their settings is docs/endpoints.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from hero.agent.loop import run_agent
from hero.agent.tools import ToolContext
from hero.config.providers import Provider, RoleConfig
from hero.config.sections import LlmSettings, WorkerLimits
from hero.llm.client import (
    Completion,
    ContentFiltered,
    LlmClient,
    LlmError,
    ModelRefused,
    ModelUnavailable,
    assistant_message,
)
from hero.llm.scripted import Raw, ScriptedModel, call, text
from hero.llm.usage import estimate_message, estimate_request
from hero.runner import child_env
from hero.trace import Trace

Start = Callable[..., ScriptedModel]
MESSAGES = [{"role": "user", "content": "hello"}]
KEY = "sk-quirks-0123456789abcdef"


def client(model: ScriptedModel, *, send_reasoning: bool = False, attempts: int = 2) -> LlmClient:
    provider = Provider(
        name="endpoint",
        base_url=model.base_url,
        default_model="m",
        send_reasoning=send_reasoning,
    )
    return LlmClient(
        RoleConfig("worker", provider, "m", None, api_key=KEY, key_source="$QUIRKS_KEY"),
        LlmSettings(timeout_s=30, max_attempts=attempts, backoff_base_s=0.01, backoff_max_s=0.01),
    )


def chat(message: Mapping[str, Any], finish: str | None = "stop", **extra: Any) -> dict[str, Any]:
    """A chat.completion body around one message, as every endpoint wraps it."""
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1735689600,
        "model": "m",
        "choices": [{"index": 0, "message": dict(message), "finish_reason": finish}],
    }
    body.update(extra)
    return body


def ask(scripted: Start, body: object, **kw: Any) -> Completion:
    model = scripted([Raw(body)])
    return client(model, **kw).complete(MESSAGES)


# --------------------------------------------------------------------------- content


def test_openai_text_answer_with_refusal_and_details(scripted: Start) -> None:
    body = chat(
        {"role": "assistant", "content": "Hi.", "refusal": None, "annotations": []},
        usage={
            "prompt_tokens": 120,
            "completion_tokens": 8,
            "total_tokens": 128,
            "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
        system_fingerprint="fp_1",
        service_tier="default",
    )
    done = ask(scripted, body)
    assert (done.content, done.tool_calls, done.finish_reason) == ("Hi.", (), "stop")
    assert (done.tokens_in, done.tokens_out, done.tokens_cached) == (120, 8, 64)
    assert done.message == {"role": "assistant", "content": "Hi."}


def test_content_as_a_list_of_parts_keeps_only_the_text(scripted: Start) -> None:
    parts = [
        {"type": "text", "text": "Hello, "},
        {"type": "thinking", "thinking": "a thought that is not the answer"},
        {"type": "image_url", "image_url": {"url": "data:,"}},
        {"type": "output_text", "text": "world"},
        {"text": "!"},  # no type: a text part
        {"type": "refusal", "refusal": "no"},
        "a bare string is no part",
    ]
    done = ask(scripted, chat({"role": "assistant", "content": parts}))
    assert done.content == "Hello, world!"
    assert done.message["content"] == "Hello, world!"  # sent back as a string


def test_content_of_another_kind_is_an_unusable_answer_retried(scripted: Start) -> None:
    model = scripted(
        [Raw(chat({"role": "assistant", "content": 42})), Raw(chat({"content": "ok"}))]
    )
    assert client(model).complete(MESSAGES).content == "ok"
    assert len(model.requests) == 2


# --------------------------------------------------------------------------- tool calls


def test_llama_cpp_null_content_with_tool_calls_goes_back_as_an_empty_string(
    scripted: Start,
) -> None:
    """llama.cpp's server, vLLM and OpenAI send ``content: null`` beside tool calls; Ollama,
    LM Studio and llama.cpp refuse a null content sent back, so hero sends ``""``."""
    body = chat(
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "The user wants a listing.",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command":"ls"}'},
                    "id": "Xb2kq9",
                }
            ],
        },
        finish="tool_calls",
        timings={"prompt_n": 10, "predicted_n": 5},
    )
    done = ask(scripted, body)
    assert done.content == "" and done.reasoning == "The user wants a listing."
    assert done.message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "Xb2kq9",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command":"ls"}'},
            }
        ],
    }  # reasoning is not sent back unless the provider's send_reasoning is set


def test_tool_calls_without_id_or_type_and_with_arguments_as_an_object(scripted: Start) -> None:
    """Ollama and some gateways: arguments as a JSON object, an ``index``, no ``type``;
    some servers give no ``id``. Sent back: ids hero made, ``type: function``, text."""
    body = chat(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"index": 0, "function": {"name": "bash", "arguments": {"command": "ls"}}},
                {"index": 1, "id": "", "function": {"name": "read_file", "arguments": None}},
            ],
        },
        finish="stop",  # older Ollama said "stop" beside tool calls
    )
    done = ask(scripted, body)
    first, second = done.tool_calls
    assert first.name == "bash" and json.loads(first.arguments) == {"command": "ls"}
    assert second.name == "read_file" and second.arguments == ""
    assert first.id.startswith("call_") and second.id.startswith("call_")
    assert first.id != second.id
    wire = done.message["tool_calls"]
    assert [c["type"] for c in wire] == ["function", "function"]
    assert [c["id"] for c in wire] == [first.id, second.id]
    assert wire[0]["function"]["arguments"] == first.arguments
    assert wire[1]["function"]["arguments"] == "{}"  # none given: an empty object


def test_the_legacy_function_call_is_one_tool_call(scripted: Start) -> None:
    body = chat(
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "bash", "arguments": '{"command":"pwd"}'},
        },
        finish="function_call",
    )
    done = ask(scripted, body)
    (only,) = done.tool_calls
    assert (only.name, only.arguments) == ("bash", '{"command":"pwd"}')
    assert done.finish_reason == "function_call"
    assert done.message["tool_calls"][0]["id"] == only.id


def test_malformed_tool_calls_are_an_unusable_answer_retried(scripted: Start) -> None:
    bad = chat({"role": "assistant", "content": None, "tool_calls": [{"name": "bash"}]})
    model = scripted([Raw(bad), Raw(bad)])
    with pytest.raises(ModelUnavailable, match=r"malformed tool calls\); gave up after 2"):
        client(model).complete(MESSAGES)


# --------------------------------------------------------------------------- reasoning


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_in_either_field_is_read_and_sent_back_only_when_asked(
    scripted: Start, field: str
) -> None:
    """DeepSeek, vLLM and llama.cpp send ``reasoning_content``; OpenRouter, Ollama and
    newer vLLM ``reasoning`` (OpenRouter beside ``reasoning_details``)."""
    message = {
        "role": "assistant",
        "content": "42",
        field: "Six times seven.",
        "reasoning_details": [{"type": "reasoning.text", "text": "Six times seven."}],
    }
    assert ask(scripted, chat(message)).message == {"role": "assistant", "content": "42"}
    sent = ask(scripted, chat(message), send_reasoning=True)
    assert sent.reasoning == "Six times seven."
    assert sent.message["reasoning_content"] == "Six times seven."


def test_odd_reasoning_is_dropped(scripted: Start) -> None:
    done = ask(scripted, chat({"content": "x", "reasoning": {"effort": "high"}}))
    assert done.reasoning == "" and "reasoning_content" not in done.message


# --------------------------------------------------------------------------- usage and cost


def test_openrouter_reports_its_cost_and_cached_tokens(scripted: Start) -> None:
    body = chat(
        {"role": "assistant", "content": "ok"},
        provider="SomeUpstream",
        usage={
            "prompt_tokens": 1000,
            "completion_tokens": 50,
            "total_tokens": 1050,
            "cost": 0.00123,
            "is_byok": False,
            "prompt_tokens_details": {"cached_tokens": 800},
            "cost_details": {"upstream_inference_cost": None},
            "completion_tokens_details": {"reasoning_tokens": 10},
        },
    )
    done = ask(scripted, body)
    assert done.cost_usd == pytest.approx(0.00123)
    assert done.tokens_cached == 800 and done.usage.tokens_cached == 800


@pytest.mark.parametrize(
    ("usage", "cached"),
    [
        ({"prompt_tokens_details": {"cached_tokens": 7}}, 7),  # OpenAI, Azure, OpenRouter
        ({"prompt_cache_hit_tokens": 9, "prompt_cache_miss_tokens": 1}, 9),  # DeepSeek
        ({"cache_read_input_tokens": 11, "cache_creation_input_tokens": 3}, 11),  # gateways
        ({"prompt_tokens_details": None}, 0),  # vLLM without prefix caching stats
        ({"prompt_tokens_details": {"cached_tokens": None}}, 0),
        ({}, 0),  # Ollama, LM Studio: no cache field
    ],
)
def test_cached_tokens_in_each_shape(scripted: Start, usage: dict[str, Any], cached: int) -> None:
    body = chat({"content": "ok"}, usage={"prompt_tokens": 20, "completion_tokens": 2, **usage})
    assert ask(scripted, body).tokens_cached == cached


def test_no_usage_is_counted_by_hero_s_estimate_and_is_no_error(scripted: Start) -> None:
    """Some gateways and streaming servers send no usage (or null): the call is counted by
    hero's estimate of the request's and the answer's sizes, never as free."""
    done = ask(scripted, chat({"content": "ok"}, usage=None))
    estimate = estimate_request(MESSAGES) + estimate_message(done.message)
    assert done.tokens_in == estimate_request(MESSAGES) and done.tokens_out > 0
    assert done.tokens_estimated == done.tokens_in + done.tokens_out == estimate
    assert done.usage.estimated_calls == 1 and done.usage.estimated_tokens == estimate


@pytest.mark.parametrize(
    ("usage", "estimated"),
    [
        ({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}, "both"),  # zeros
        ({"completion_tokens": 7}, "in"),  # no prompt count: that side alone
        ({"prompt_tokens": 120}, "out"),  # no completion count
        ({"prompt_tokens": 120, "completion_tokens": 0}, "none"),  # counted: 0 is a count
    ],
)
def test_a_usage_missing_a_count_has_that_count_estimated(
    scripted: Start, usage: dict[str, Any], estimated: str
) -> None:
    done = ask(scripted, chat({"content": "ok"}, usage=usage))
    prompt, answer = estimate_request(MESSAGES), estimate_message(done.message)
    expect_in = prompt if estimated in ("in", "both") else usage["prompt_tokens"]
    expect_out = answer if estimated in ("out", "both") else usage["completion_tokens"]
    assert (done.tokens_in, done.tokens_out) == (expect_in, expect_out)
    guessed = {"in": prompt, "out": answer, "both": prompt + answer, "none": 0}[estimated]
    assert done.tokens_estimated == guessed


# --------------------------------------------------------------------------- finish_reason


@pytest.mark.parametrize("finish", ["stop", "tool_calls", "function_call", None, "eos", "end_turn"])
def test_finish_reasons_that_end_an_answer_are_taken_as_they_come(
    scripted: Start, finish: str | None
) -> None:
    done = ask(scripted, chat({"content": "done"}, finish=finish))
    assert done.content == "done" and done.finish_reason == (finish or "")


def test_an_answer_withheld_by_a_content_filter_ends_the_story_not_the_provider(
    scripted: Start,
) -> None:
    """Azure OpenAI: ``finish_reason: content_filter`` and the filter's results. Asking
    again sends what was refused again: the story's own error, at once, its spend counted."""
    body = chat(
        {"role": "assistant", "content": None},
        finish="content_filter",
        usage={"prompt_tokens": 30, "completion_tokens": 0},
        prompt_filter_results=[{"prompt_index": 0, "content_filter_results": {}}],
    )
    model = scripted([Raw(body), Raw(body)])
    llm = client(model)
    with pytest.raises(ContentFiltered, match="content filter withheld the answer") as caught:
        llm.complete(MESSAGES)
    assert isinstance(caught.value, LlmError) and not isinstance(caught.value, ModelRefused)
    assert len(model.requests) == 1 and llm.usage.tokens_in == 30


def test_tool_calls_beside_a_content_filter_are_run(scripted: Start) -> None:
    body = chat(
        {
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "ls", "arguments": "{}"}}],
        },
        finish="content_filter",
    )
    assert ask(scripted, body).tool_calls[0].name == "ls"


def start_messages() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a worker."},
        {"role": "user", "content": "Do the task."},
    ]


def test_a_tool_call_cut_off_by_the_output_limit_goes_back_as_an_object(
    scripted: Start, tmp_path: Path
) -> None:
    """``finish_reason: length`` in the middle of a call's arguments: the call fails as
    not JSON (the model is told), and the history sent next holds ``{}`` for its
    arguments, which vLLM and llama.cpp's server can parse to render their template."""
    cut = chat(
        {
            "content": None,
            "tool_calls": [
                {
                    "id": "cut1",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": '{"path": "a.txt", "cont'},
                }
            ],
        },
        finish="length",
    )
    model = scripted([Raw(cut), text("Done.")])
    root = tmp_path / "wt"
    root.mkdir()
    ctx = ToolContext(root=root, env=child_env(), bash_timeout_s=30)
    messages = start_messages()
    llm = client(model)
    with Trace(tmp_path / "t.jsonl") as trace:
        result = run_agent(llm, messages, ctx, WorkerLimits(), trace)
    assert result.stop_reason == "done"
    sent = model.requests[1].body["messages"]
    assistant, tool = sent[2], sent[3]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"
    assert assistant["content"] == ""
    assert tool["tool_call_id"] == "cut1" and "not valid JSON" in tool["content"]


# --------------------------------------------------------------------------- what goes back


def test_the_history_sent_back_holds_the_one_form_of_an_assistant_message(
    scripted: Start, tmp_path: Path
) -> None:
    """The assistant message as the next request carries it (recorded by the server): a
    string content, ``""`` beside tool calls, every call with its id and type, arguments
    as JSON text; no ``null``, no missing key, nothing else."""
    model = scripted([call("ls", path="."), text("Done.")])
    root = tmp_path / "wt"
    root.mkdir()
    ctx = ToolContext(root=root, env=child_env(), bash_timeout_s=30)
    with Trace(tmp_path / "t.jsonl") as trace:
        run_agent(client(model), start_messages(), ctx, WorkerLimits(), trace)
    assistant = model.requests[1].body["messages"][2]
    assert set(assistant) == {"role", "content", "tool_calls"}
    assert assistant["content"] == ""
    (wire,) = assistant["tool_calls"]
    assert set(wire) == {"id", "type", "function"} and wire["type"] == "function"
    assert isinstance(wire["id"], str) and wire["id"]
    assert json.loads(wire["function"]["arguments"]) == {"path": "."}


@pytest.mark.parametrize(
    ("arguments", "sent"),
    [
        ('{"a": 1}', '{"a": 1}'),  # as the model wrote it, byte for byte
        ("", "{}"),
        ("[1, 2]", "{}"),  # JSON, but no object
        ('{"a": ', "{}"),  # cut off
        ("null", "{}"),
    ],
)
def test_arguments_go_back_as_a_json_object(arguments: str, sent: str) -> None:
    from hero.llm.client import ToolCallRequest

    message = assistant_message("", [ToolCallRequest("c1", "bash", arguments)])
    assert message["tool_calls"][0]["function"]["arguments"] == sent


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        # OpenAI, Azure OpenAI, llama.cpp's server, Ollama's /v1
        (
            401,
            {
                "error": {
                    "message": "Incorrect API key provided.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            },
            "HTTP 401 with the key from $QUIRKS_KEY: Incorrect API key provided.",
        ),
        (
            404,
            {
                "error": {
                    "code": "DeploymentNotFound",
                    "message": "The API deployment for this resource does not exist.",
                }
            },
            "HTTP 404: The API deployment for this resource does not exist.",
        ),
        # Ollama's native shape and LM Studio: the error as a string
        (
            404,
            {"error": 'model "qwen3:8b" not found, try pulling it first'},
            'HTTP 404: model "qwen3:8b" not found, try pulling it first',
        ),
        # vLLM: the error object at the top
        (
            404,
            {
                "object": "error",
                "message": "The model `m` does not exist.",
                "type": "NotFoundError",
                "param": None,
                "code": 404,
            },
            "HTTP 404: The model `m` does not exist.",
        ),
        # OpenRouter: a code and metadata beside the message
        (
            402,
            {
                "error": {
                    "code": 402,
                    "message": "Insufficient credits.",
                    "metadata": {"provider_name": None},
                }
            },
            "HTTP 402: Insufficient credits.",
        ),
        # FastAPI-style servers
        (404, {"detail": "Not Found"}, "HTTP 404: Not Found"),
    ],
)
def test_error_bodies_in_each_shape_say_the_servers_words(
    scripted: Start, status: int, body: dict[str, Any], said: str
) -> None:
    model = scripted([Raw(body, status=status)])
    with pytest.raises(ModelRefused) as caught:
        client(model).complete(MESSAGES)
    assert said in str(caught.value), str(caught.value)
    assert KEY not in str(caught.value)
    assert len(model.requests) == 1  # refused: never asked again


def test_a_proxys_html_page_is_quoted_short_with_keys_masked(scripted: Start) -> None:
    page = (
        "<html><head><title>403 Forbidden</title></head><body>Blocked request with "
        f"Authorization: Bearer {KEY} from your network</body></html>"
    )
    model = scripted([Raw(page, status=403, content_type="text/html")])
    with pytest.raises(ModelRefused) as caught:
        client(model).complete(MESSAGES)
    message = str(caught.value)
    assert "HTTP 403" in message and "body starting '<html>" in message
    assert KEY not in message


def test_a_proxys_502_page_is_retried_then_an_outage(scripted: Start) -> None:
    page = "<html><body><h1>502 Bad Gateway</h1></body></html>"
    model = scripted([Raw(page, status=502, content_type="text/html")] * 2)
    with pytest.raises(ModelUnavailable, match="HTTP 502; gave up after 2 attempts"):
        client(model).complete(MESSAGES)


@pytest.mark.parametrize(
    "body",
    [
        # vLLM
        {
            "object": "error",
            "type": "BadRequestError",
            "code": 400,
            "message": "This model's maximum context length is 32768 tokens. However, you "
            "requested 40000 tokens.",
        },
        # llama.cpp's server
        {
            "error": {
                "code": 400,
                "type": "exceed_context_size_error",
                "message": "the request exceeds the available context size, try increasing it",
            }
        },
        # Azure OpenAI's content filter on the prompt
        {
            "error": {
                "code": "content_filter",
                "status": 400,
                "message": "The response was "
                "filtered due to the prompt triggering Azure OpenAI's content management "
                "policy.",
            }
        },
    ],
)
def test_a_400_about_this_storys_conversation_is_the_storys_error(
    scripted: Start, body: dict[str, Any]
) -> None:
    model = scripted([Raw(body, status=400)])
    with pytest.raises(LlmError) as caught:
        client(model).complete(MESSAGES)
    assert not isinstance(caught.value, ModelRefused), caught.value  # the provider runs on
    assert "HTTP 400: " in str(caught.value)


def test_a_200_carrying_an_error_and_no_choices_says_it(scripted: Start) -> None:
    """OpenRouter: an upstream's failure under a 200, ``error`` instead of ``choices``."""
    body = {"error": {"code": 502, "message": "Upstream error from SomeProvider"}}
    model = scripted([Raw(body), Raw(body)])
    with pytest.raises(ModelUnavailable, match="no choices: Upstream error from SomeProvider"):
        client(model).complete(MESSAGES)


def test_an_answer_nested_past_the_parsers_depth_is_an_unusable_answer_retried(
    scripted: Start,
) -> None:
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000  # arguments sent as an object
    call_ = '{"id": "c", "function": {"name": "bash", "arguments": ' + deep + "}}"
    message = '{"role": "assistant", "content": null, "tool_calls": [' + call_ + "]}"
    body = '{"choices": [{"message": ' + message + "}]}"
    with pytest.raises(RecursionError):
        json.loads(body)  # valid JSON, past the parser's depth
    model = scripted([Raw(body), Raw(chat({"content": "ok"}))])
    assert client(model).complete(MESSAGES).content == "ok"
    assert len(model.requests) == 2


def test_a_resumed_round_sends_back_the_same_form(scripted: Start, tmp_path: Path) -> None:
    """The history rebuilt from the trace after a restart is the one sent before it, byte
    for byte: a cut-off call's ``{}``, an id hero made, the empty content."""
    from hero.agent.replay import replay_round, round_start_fields

    answer = chat(
        {
            "content": None,
            "tool_calls": [
                {"function": {"name": "ls", "arguments": {"path": "."}}},  # no id, an object
                {"id": "c2", "function": {"name": "read_file", "arguments": '{"path": "a'}},
            ],
        },
        finish="length",
    )
    model = scripted([Raw(answer), text("Done.")])
    root = tmp_path / "wt"
    root.mkdir()
    ctx = ToolContext(root=root, env=child_env(), bash_timeout_s=30)
    path = tmp_path / "t.jsonl"
    with Trace(path) as trace:
        trace.round_start(1, story="s", run=1, branch="b", **round_start_fields("0" * 40, 1.0))
        run_agent(client(model), start_messages(), ctx, WorkerLimits(), trace)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")  # as if killed before the round's end
    replayed = replay_round(path, base_sha="0" * 40, started_at=1.0)
    assert replayed is not None
    sent = model.requests[1].body["messages"]
    assert replayed.messages[: len(sent)] == sent
    assert json.dumps(replayed.messages[2]) == json.dumps(sent[2])  # key order too
