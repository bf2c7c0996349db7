"""Tests for hero.llm.scripted: the scripted OpenAI-compatible server, driven by the real SDK."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from hero.llm.scripted import (
    Drop,
    HttpError,
    Raw,
    RecordedRequest,
    Reply,
    ScriptedModel,
    ToolCall,
    call,
    calls,
    text,
)

MESSAGES = [
    {"role": "system", "content": "You are a test."},
    {"role": "user", "content": "hello"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


def client(m: ScriptedModel) -> openai.OpenAI:
    return openai.OpenAI(base_url=m.base_url, api_key="x", max_retries=0, timeout=30)


def ask(m: ScriptedModel, **kwargs):
    kwargs.setdefault("model", "test-model")
    kwargs.setdefault("messages", MESSAGES)
    return client(m).chat.completions.create(**kwargs)


# --------------------------------------------------------------------------- helpers


def test_helpers_build_replies() -> None:
    assert text("hi") == Reply(content="hi")
    r = call("bash", command="ls", timeout_s=5)
    assert r.content is None
    assert r.tool_calls == (ToolCall("bash", {"command": "ls", "timeout_s": 5}),)
    # a tool argument may itself be called "name"
    assert call("greet", name="bob").tool_calls[0].arguments == {"name": "bob"}
    r = calls(ToolCall("a", "{}"), ToolCall("b", {"x": 1}, id="id-b"))
    assert [tc.name for tc in r.tool_calls] == ["a", "b"]
    assert Reply(tool_calls=[ToolCall("a", "{}")]).tool_calls == (ToolCall("a", "{}"),)


def test_sequence_rejects_unknown_items() -> None:
    with pytest.raises(TypeError, match="script item 1"):
        ScriptedModel([text("ok"), "not a reply"])  # type: ignore[list-item]


# --------------------------------------------------------------------------- replies


def test_plain_text_reply_with_usage() -> None:
    with ScriptedModel([text("hello there")]) as m:
        resp = ask(m)
    choice = resp.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "hello there"
    assert not choice.message.tool_calls
    assert choice.finish_reason == "stop"
    assert resp.object == "chat.completion"
    assert resp.model == "test-model"
    assert resp.id
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == len(json.dumps(MESSAGES)) // 4
    assert resp.usage.completion_tokens >= 1
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_explicit_token_counts() -> None:
    with ScriptedModel([Reply(content="x", prompt_tokens=1234, completion_tokens=56)]) as m:
        usage = ask(m).usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (1234, 56, 1290)


def test_cached_tokens_reasoning_and_extra_usage() -> None:
    script = [
        Reply(content="x", prompt_tokens=100, cached_tokens=80, reasoning="hmm"),
        Reply(content="y", usage_extra={"prompt_cache_hit_tokens": 7}),
        text("z"),
    ]
    with ScriptedModel(script) as m:
        first, second, third = ask(m), ask(m), ask(m)
    assert first.usage is not None and first.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 80
    assert first.choices[0].message.model_extra == {"reasoning_content": "hmm"}
    assert second.usage is not None and second.usage.model_extra is not None
    assert second.usage.model_extra["prompt_cache_hit_tokens"] == 7
    assert third.usage is not None and third.usage.prompt_tokens_details is None
    assert not third.choices[0].message.model_extra


def test_tool_call_with_dict_arguments() -> None:
    with ScriptedModel([call("bash", command="echo hi")]) as m:
        resp = ask(m, tools=TOOLS)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    (tc,) = choice.message.tool_calls
    assert tc.type == "function"
    assert tc.function.name == "bash"
    assert json.loads(tc.function.arguments) == {"command": "echo hi"}
    assert tc.id.startswith("call_")


def test_tool_call_with_raw_malformed_arguments() -> None:
    raw = '{"command": "ls", oops'
    with ScriptedModel([calls(ToolCall("bash", raw, id="abc"))]) as m:
        resp = ask(m, tools=TOOLS)
    (tc,) = resp.choices[0].message.tool_calls
    assert tc.function.arguments == raw
    assert tc.id == "abc"


def test_multiple_tool_calls_in_one_reply_get_distinct_ids() -> None:
    reply = calls(
        ToolCall("read_file", {"path": "a.txt"}),
        ToolCall("read_file", {"path": "b.txt"}),
        ToolCall("bash", {"command": "pwd"}),
    )
    with ScriptedModel([reply, call("bash", command="true")]) as m:
        first = ask(m, tools=TOOLS)
        second = ask(m, tools=TOOLS)
    tcs = first.choices[0].message.tool_calls
    assert [tc.function.name for tc in tcs] == ["read_file", "read_file", "bash"]
    assert [json.loads(tc.function.arguments) for tc in tcs] == [
        {"path": "a.txt"},
        {"path": "b.txt"},
        {"command": "pwd"},
    ]
    ids = [tc.id for tc in tcs] + [second.choices[0].message.tool_calls[0].id]
    assert len(set(ids)) == 4


def test_text_and_tool_calls_together() -> None:
    with ScriptedModel([calls(ToolCall("bash", {"command": "ls"}), content="let me look")]) as m:
        msg = ask(m, tools=TOOLS).choices[0].message
    assert msg.content == "let me look"
    assert msg.tool_calls[0].function.name == "bash"


# --------------------------------------------------------------------------- sequence bookkeeping


def test_sequence_order_remaining_and_recorded_requests() -> None:
    with ScriptedModel([text("one"), text("two")]) as m:
        assert m.remaining == 2
        assert (
            ask(m, messages=[{"role": "user", "content": "first"}]).choices[0].message.content
            == "one"
        )
        assert m.remaining == 1
        assert (
            ask(m, messages=[{"role": "user", "content": "second"}]).choices[0].message.content
            == "two"
        )
        assert m.remaining == 0
    assert [r.body["messages"][0]["content"] for r in m.requests] == ["first", "second"]
    rec = m.requests[0]
    assert isinstance(rec, RecordedRequest)
    assert rec.path == "/v1/chat/completions"
    assert rec.body["model"] == "test-model"
    assert rec.headers["authorization"] == "Bearer x"
    assert rec.received_at <= m.requests[1].received_at <= time.monotonic()


def test_exhausted_script_is_a_500() -> None:
    with ScriptedModel([text("only")]) as m:
        ask(m)
        with pytest.raises(openai.InternalServerError) as info:
            ask(m)
    assert info.value.status_code == 500
    assert "script exhausted after 1 replies" in str(info.value)
    assert len(m.requests) == 2  # the failed request is recorded too


def test_empty_script_is_exhausted_immediately() -> None:
    with ScriptedModel([]) as m:
        assert m.remaining == 0
        with pytest.raises(openai.InternalServerError, match="script exhausted after 0 replies"):
            ask(m)


def test_remaining_is_undefined_for_a_handler() -> None:
    m = ScriptedModel(lambda body: text("x"))
    with pytest.raises(TypeError):
        _ = m.remaining


# --------------------------------------------------------------------------- errors


def test_rate_limit_error_with_retry_after() -> None:
    with ScriptedModel(
        [HttpError(429, "slow down", headers={"Retry-After": "1"}), text("ok")]
    ) as m:
        with pytest.raises(openai.RateLimitError) as info:
            ask(m)
        assert info.value.response.headers["retry-after"] == "1"
        assert "slow down" in str(info.value)
        assert isinstance(info.value.body, dict)
        assert info.value.body["type"] == "rate_limit_error"
        # the connection and the server are still fine afterwards
        assert ask(m).choices[0].message.content == "ok"


def test_http_500_is_internal_server_error() -> None:
    with ScriptedModel([HttpError(500, "boom")]) as m:
        with pytest.raises(openai.InternalServerError, match="boom"):
            ask(m)


def test_other_http_errors_map_to_sdk_exceptions() -> None:
    script = [HttpError(400, "bad"), HttpError(401), HttpError(404), HttpError(503)]
    with ScriptedModel(script) as m:
        with pytest.raises(openai.BadRequestError):
            ask(m)
        with pytest.raises(openai.AuthenticationError):
            ask(m)
        with pytest.raises(openai.NotFoundError):
            ask(m)
        with pytest.raises(openai.InternalServerError):
            ask(m)


def test_drop_is_a_connection_error_and_server_keeps_serving() -> None:
    with ScriptedModel([Drop(), text("after drop")]) as m:
        with pytest.raises(openai.APIConnectionError):
            ask(m)
        assert ask(m).choices[0].message.content == "after drop"
    assert len(m.requests) == 2


# --------------------------------------------------------------------------- handlers


def test_handler_sees_request_body() -> None:
    seen: list[dict] = []

    def handler(body: dict) -> Reply:
        seen.append(body)
        last = body["messages"][-1]["content"]
        tool_names = [t["function"]["name"] for t in body.get("tools", [])]
        return text(f"echo {last} tools={','.join(tool_names)}")

    with ScriptedModel(handler) as m:
        resp = ask(m, tools=TOOLS, temperature=0.5)
    assert resp.choices[0].message.content == "echo hello tools=bash"
    (body,) = seen
    assert body["messages"] == MESSAGES
    assert body["tools"] == TOOLS
    assert body["temperature"] == 0.5
    assert m.requests[0].body == body


def test_handler_can_answer_errors_and_drops() -> None:
    def handler(body: dict):
        kind = body["messages"][-1]["content"]
        if kind == "limit":
            return HttpError(429, headers={"Retry-After": "7"})
        if kind == "drop":
            return Drop()
        return call("bash", command=kind)

    with ScriptedModel(handler) as m:
        with pytest.raises(openai.RateLimitError) as info:
            ask(m, messages=[{"role": "user", "content": "limit"}])
        assert info.value.response.headers["retry-after"] == "7"
        with pytest.raises(openai.APIConnectionError):
            ask(m, messages=[{"role": "user", "content": "drop"}])
        msg = ask(m, messages=[{"role": "user", "content": "pwd"}]).choices[0].message
        assert json.loads(msg.tool_calls[0].function.arguments) == {"command": "pwd"}


def test_handler_exception_is_a_500_with_traceback() -> None:
    def handler(body: dict) -> Reply:
        raise ValueError("handler went wrong")

    with ScriptedModel(handler) as m:
        with pytest.raises(openai.InternalServerError) as info:
            ask(m)
    assert "handler went wrong" in str(info.value)
    assert "Traceback" in str(info.value)
    assert "ValueError" in str(info.value)


def test_handler_returning_garbage_is_a_500() -> None:
    with ScriptedModel(lambda body: "just a string") as m:  # type: ignore[arg-type, return-value]
        with pytest.raises(openai.InternalServerError, match="handler returned str"):
            ask(m)


def test_handler_serves_parallel_requests() -> None:
    def handler(body: dict) -> Reply:
        return text("re: " + body["messages"][-1]["content"])

    with ScriptedModel(handler, latency_s=0.05) as m:
        c = client(m)

        def one(i: int) -> str:
            resp = c.chat.completions.create(
                model="m", messages=[{"role": "user", "content": str(i)}]
            )
            return resp.choices[0].message.content or ""

        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(one, range(24)))
    assert answers == [f"re: {i}" for i in range(24)]
    assert sorted(r.body["messages"][0]["content"] for r in m.requests) == sorted(
        str(i) for i in range(24)
    )


def test_sequence_under_parallel_requests_serves_each_reply_once() -> None:
    n = 20
    with ScriptedModel([text(str(i)) for i in range(n)]) as m:
        c = client(m)

        def one(_: int) -> str:
            resp = c.chat.completions.create(model="m", messages=MESSAGES)
            return resp.choices[0].message.content or ""

        with ThreadPoolExecutor(max_workers=6) as pool:
            answers = list(pool.map(one, range(n)))
        assert m.remaining == 0
    assert sorted(answers, key=int) == [str(i) for i in range(n)]


# --------------------------------------------------------------------------- latency, HTTP


def test_latency_delays_the_answer() -> None:
    with ScriptedModel([text("slow")], latency_s=0.3) as m:
        start = time.monotonic()
        assert ask(m).choices[0].message.content == "slow"
        assert time.monotonic() - start >= 0.3


def test_models_endpoint() -> None:
    with ScriptedModel([]) as m:
        ids = [model.id for model in client(m).models.list()]
    assert ids == ["scripted"]


def _http(method: str, url: str, body: bytes | None = None) -> tuple[int, dict, dict]:
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def test_unknown_paths_are_404_json() -> None:
    with ScriptedModel([text("unused")]) as m:
        status, headers, payload = _http("GET", m.base_url + "/nope")
        assert status == 404
        assert headers["Content-Type"] == "application/json"
        assert set(payload["error"]) >= {"message", "type", "code"}
        status, _, payload = _http("POST", m.base_url + "/completions", b"{}")
        assert status == 404
        assert "unknown path" in payload["error"]["message"]
        assert m.remaining == 1  # not consumed by a wrong path
    assert m.requests == []


def test_bad_request_bodies_are_400() -> None:
    with ScriptedModel([text("unused")]) as m:
        url = m.base_url + "/chat/completions"
        status, _, payload = _http("POST", url, b"{not json")
        assert status == 400
        assert "not valid JSON" in payload["error"]["message"]
        status, _, _ = _http("POST", url, b"[1, 2]")
        assert status == 400
        assert m.remaining == 1


def test_keep_alive_and_content_length_on_one_connection() -> None:
    import http.client

    with ScriptedModel(lambda body: text(body["messages"][0]["content"])) as m:
        conn = http.client.HTTPConnection("127.0.0.1", m.port, timeout=10)
        try:
            for i in range(5):
                body = json.dumps({"model": "m", "messages": [{"role": "user", "content": str(i)}]})
                conn.request(
                    "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"}
                )
                resp = conn.getresponse()
                raw = resp.read()
                assert resp.status == 200
                assert resp.getheader("Content-Length") == str(len(raw))
                assert resp.getheader("Connection") is None
                assert json.loads(raw)["choices"][0]["message"]["content"] == str(i)
        finally:
            conn.close()


def test_server_is_quiet(capfd: pytest.CaptureFixture[str]) -> None:
    with ScriptedModel([text("a"), HttpError(500), Drop()]) as m:
        ask(m)
        with pytest.raises(openai.InternalServerError):
            ask(m)
        with pytest.raises(openai.APIConnectionError):
            ask(m)
        _http("GET", m.base_url + "/missing")
    out, err = capfd.readouterr()
    assert out == ""
    assert err == ""


# --------------------------------------------------------------------------- lifecycle


def _port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_start_stop_lifecycle() -> None:
    m = ScriptedModel([text("x")])
    with pytest.raises(RuntimeError):
        _ = m.base_url
    assert m.start() is m
    assert m.start() is m  # second start is a no-op
    port = m.port
    assert m.base_url == f"http://127.0.0.1:{port}/v1"
    assert _port_accepts(port)
    m.stop()
    m.stop()  # idempotent
    assert not _port_accepts(port)
    with pytest.raises(RuntimeError):
        m.start()


def test_stop_without_start_is_fine() -> None:
    ScriptedModel([]).stop()


def _request_threads(exclude: frozenset[threading.Thread] = frozenset()) -> int:
    return sum(
        "process_request_thread" in t.name and t not in exclude for t in threading.enumerate()
    )


def _wait_for_request_threads(
    count: int, exclude: frozenset[threading.Thread] = frozenset()
) -> int:
    deadline = time.monotonic() + 10
    while _request_threads(exclude) != count and time.monotonic() < deadline:
        time.sleep(0.01)
    return _request_threads(exclude)


def test_stop_closes_keep_alive_connections() -> None:
    # Count only this test's connection threads: another test's server may still hold one.
    others = frozenset(t for t in threading.enumerate() if "process_request_thread" in t.name)
    with ScriptedModel([text("a"), text("b")]) as m:
        c = client(m)
        c.chat.completions.create(model="m", messages=MESSAGES)  # leaves a pooled connection
        assert _request_threads(others) == 1  # one thread per open connection
    assert _wait_for_request_threads(0, others) == 0  # stop() closed the idle connection
    with pytest.raises(openai.APIConnectionError):
        c.chat.completions.create(model="m", messages=MESSAGES)


def test_explicit_port_and_reuse_after_stop() -> None:
    with ScriptedModel([text("first")]) as m:
        port = m.port
        ask(m)
    with ScriptedModel([text("second")], port=port) as m2:
        assert m2.port == port
        assert ask(m2).choices[0].message.content == "second"


# --------------------------------------------------------------------------- command line


HANDLER_MODULE = textwrap.dedent(
    """
    from hero.llm.scripted import HttpError, call, text

    def handler(body):
        last = body["messages"][-1]["content"]
        if last == "tool":
            return call("bash", command="echo from-subprocess")
        if last == "limit":
            return HttpError(429, headers={"Retry-After": "2"})
        return text("subprocess says: " + last)
    """
)


def _read_line_with_timeout(proc: subprocess.Popen[str], timeout: float) -> str:
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    if not result:
        proc.kill()
        pytest.fail(f"no 'listening on' line within {timeout}s")
    return result[0]


def test_command_line_server(tmp_path: Path) -> None:
    (tmp_path / "scripted_cli_helper.py").write_text(HANDLER_MODULE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hero.llm.scripted",
            "--handler",
            "scripted_cli_helper:handler",
            "--latency",
            "0",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = _read_line_with_timeout(proc, 30)
        assert line.startswith("listening on http://127.0.0.1:"), line
        base_url = line.split("listening on ", 1)[1].strip()
        assert base_url.endswith("/v1")
        c = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=30)
        resp = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert resp.choices[0].message.content == "subprocess says: hi"
        resp = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "tool"}])
        args = json.loads(resp.choices[0].message.tool_calls[0].function.arguments)
        assert args == {"command": "echo from-subprocess"}
        with pytest.raises(openai.RateLimitError) as info:
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "limit"}])
        assert info.value.response.headers["retry-after"] == "2"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert err == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_command_line_bad_handler(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hero.llm.scripted", "--handler", "no_such_module_xyz:handler"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "cannot load handler" in proc.stderr


def test_raw_answers_send_the_body_status_and_headers_verbatim() -> None:
    page = b"<html><body>\xe2\x9c\x93 502 Bad Gateway</body></html>"
    script = [
        Raw({"choices": [], "error": {"message": "upstream"}}),  # JSON of anything
        Raw(page, status=502, content_type="text/html", headers={"X-Proxy": "edge-1"}),
        Raw('{"half": '),  # text sent as it is, even no JSON
    ]
    with ScriptedModel(script) as m:
        bodies = []
        for _ in script:
            request = urllib.request.Request(
                m.base_url + "/chat/completions",
                data=json.dumps({"model": "m", "messages": MESSAGES}).encode(),
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    bodies.append((response.status, response.headers, response.read()))
            except urllib.error.HTTPError as exc:
                bodies.append((exc.code, exc.headers, exc.read()))
    assert bodies[0][0] == 200 and json.loads(bodies[0][2]) == script[0].body
    status, headers, body = bodies[1]
    assert (status, body) == (502, page)
    assert headers["Content-Type"] == "text/html" and headers["X-Proxy"] == "edge-1"
    assert bodies[2][2] == b'{"half": '
    assert len(m.requests) == 3
