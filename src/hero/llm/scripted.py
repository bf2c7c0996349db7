"""A scripted, OpenAI-compatible chat completions server for demos, tests and benchmarks.

Give :class:`ScriptedModel` either a sequence of answers (served in order, one per request)
or a handler (a callable that receives each parsed request body and returns the answer).
An answer is a :class:`Reply` (one assistant message, text and/or tool calls), an
:class:`HttpError` (an error status with OpenAI's error JSON), :class:`Raw` (any status and
body, verbatim: another server's response shape, a proxy's HTML page, a provider's refusal
from :func:`refusal`), :class:`Drop` (close the connection without answering),
:class:`Trickle` (a Raw sent a few bytes at a time: a provider that stalls) or
:class:`Huge` (a completion of any size, streamed, never held whole). ``bytes_sent``
counts what the server wrote of the last two, so a test can tell how much of an answer
its client read.

    with ScriptedModel([call("bash", command="ls"), text("done")]) as m:
        client = openai.OpenAI(base_url=m.base_url, api_key="x", max_retries=0)
        ...

Standard library only; quiet; HTTP/1.1 keep-alive; every request is one ``json.loads`` in
and one ``json.dumps`` out, written with a single send.

Command line (foreground server, stops on SIGTERM or Ctrl-C)::

    python -m hero.llm.scripted --handler MODULE:FUNC [--port N] [--latency S] [--host H]

``FUNC`` must be a Handler itself (``def handler(body: dict) -> Reply | HttpError | Raw | Drop``),
not a factory. The server prints ``listening on <base_url>`` on stdout once it accepts
connections.
"""

from __future__ import annotations

import itertools
import json
import socket
import socketserver
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from hero.llm.refusals import REFUSALS

__all__ = [
    "Drop",
    "Handler",
    "HttpError",
    "Huge",
    "Raw",
    "RecordedRequest",
    "Reply",
    "ScriptedModel",
    "ToolCall",
    "call",
    "calls",
    "chat_problem",
    "refusal",
    "REFUSALS",
    "Trickle",
    "validating",
    "main",
    "text",
]


# --------------------------------------------------------------------------- script items


@dataclass(frozen=True)
class ToolCall:
    """One tool call in an assistant reply."""

    name: str
    # a dict is sent as json.dumps(dict); a str is sent raw (lets tests send malformed JSON)
    arguments: str | dict[str, Any]
    id: str | None = None  # auto "call_<n>" when None


@dataclass(frozen=True)
class Reply:
    """One assistant message."""

    content: str | None = None
    tool_calls: Sequence[ToolCall] = ()  # any sequence; stored as a tuple
    prompt_tokens: int | None = None  # None -> len(json of request messages) // 4
    completion_tokens: int | None = None  # None -> estimate from content and tool calls
    cost: float | None = None  # sent as usage.cost (a provider's reported cost); None: not sent
    finish_reason: str | None = None  # None -> "tool_calls" with tool calls, else "stop"
    cached_tokens: int | None = None  # sent as usage.prompt_tokens_details.cached_tokens
    reasoning: str | None = None  # sent as message.reasoning_content; None: not sent
    # merged into usage as given: another provider's fields, e.g. DeepSeek's
    # {"prompt_cache_hit_tokens": 800}
    usage_extra: Mapping[str, Any] = field(default_factory=dict)
    # False: the answer has no usage object at all, as some gateways and streaming servers
    # send it (the token and cost fields above are then not sent either)
    send_usage: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.tool_calls, tuple):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))


@dataclass(frozen=True)
class HttpError:
    """Answer with an error status (OpenAI error JSON) instead of a reply."""

    status: int
    message: str = "scripted error"
    headers: Mapping[str, str] = field(default_factory=dict)  # e.g. {"Retry-After": "1"}


@dataclass(frozen=True)
class Raw:
    """Answer with ``body`` as it is: bytes or text sent verbatim, anything else as its
    JSON. For replaying what a real endpoint sends (its own response shape, its error
    body, a proxy's HTML page) exactly, rather than in the scripted model's own shape."""

    body: object
    status: int = 200
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


@dataclass(frozen=True)
class Drop:
    """Close the connection without answering."""


@dataclass(frozen=True)
class Trickle:
    """Send ``answer`` ``chunk_bytes`` at a time, ``interval_s`` apart: the body only, or
    with ``head`` the status line and headers too. A provider that stalls a call without
    ever letting a read time out."""

    answer: Raw
    chunk_bytes: int = 1
    interval_s: float = 0.5
    head: bool = False


@dataclass(frozen=True)
class Huge:
    """A 200 chat completion of ``size_bytes`` in all (its text padded to fit), streamed
    ``chunk_bytes`` at a time and never held whole: a provider that answers without end."""

    size_bytes: int
    chunk_bytes: int = 1 << 20


Answer = Reply | HttpError | Raw | Drop | Trickle | Huge
_ANSWER_TYPES = (Reply, HttpError, Raw, Drop, Trickle, Huge)
Handler = Callable[[dict[str, Any]], Answer]


def refusal(name: str) -> Raw:
    """The refusal ``name`` of :data:`REFUSALS` as an answer."""
    status, body = REFUSALS[name]
    return Raw(body, status=status)


def text(content: str) -> Reply:
    """A plain text assistant reply."""
    return Reply(content=content)


def call(name: str, /, **arguments: Any) -> Reply:
    """A reply with one tool call; keyword arguments become the JSON arguments."""
    return Reply(tool_calls=(ToolCall(name, dict(arguments)),))


def calls(*tool_calls: ToolCall, content: str | None = None) -> Reply:
    """A reply with several tool calls (and optional text content)."""
    return Reply(content=content, tool_calls=tuple(tool_calls))


@dataclass(frozen=True)
class RecordedRequest:
    """One POST to chat/completions as the server received it."""

    body: dict[str, Any]  # the parsed JSON request (model, messages, tools, ...)
    headers: dict[str, str]  # header names lower-cased
    received_at: float  # time.monotonic()
    path: str


# --------------------------------------------------------------------------- validation

#: The keys a chat message of each role may have in a request (OpenAI's chat format).
MESSAGE_KEYS: Mapping[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls", "refusal"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}


def chat_problem(body: Mapping[str, Any]) -> str | None:
    """Why ``body`` is not a chat request an OpenAI-compatible endpoint takes, or None.

    Strict where endpoints differ: only the keys of :data:`MESSAGE_KEYS` in a message,
    text contents, each assistant message's tool calls answered by exactly one ``tool``
    message each, right after it and before anything else, and no tool message elsewhere;
    ``tools`` (if any) function schemas with a name."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: expected a non-empty list"
    open_calls: set[str] | None = None  # the calls of the assistant message being answered
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            return f"{where}: expected an object"
        role = m.get("role")
        if not isinstance(role, str) or role not in MESSAGE_KEYS:
            return f"{where}: unknown role {role!r}"
        unknown = sorted(set(m) - MESSAGE_KEYS[role])
        if unknown:
            return f"{where}: unknown keys for a {role} message: {', '.join(unknown)}"
        content = m.get("content")
        if not isinstance(content, str) and not (role == "assistant" and content is None):
            return f"{where}: expected text content"
        if role == "tool":
            call_id = m.get("tool_call_id")
            if open_calls is None or call_id not in open_calls:
                return f"{where}: a tool result for no pending call ({call_id!r})"
            open_calls.discard(call_id)
            continue
        if open_calls:
            return f"{where}: tool calls without a result: {', '.join(sorted(open_calls))}"
        open_calls = None
        if role == "assistant" and "tool_calls" in m:
            problem = _calls_problem(m["tool_calls"], where)
            if problem:
                return problem
            open_calls = {c["id"] for c in m["tool_calls"]}
        elif role == "assistant" and content is None:
            return f"{where}: an assistant message with neither content nor tool calls"
    if open_calls:
        return f"tool calls without a result at the end: {', '.join(sorted(open_calls))}"
    return _tools_problem(body.get("tools"))


def _calls_problem(tool_calls: object, where: str) -> str | None:
    if not isinstance(tool_calls, list) or not tool_calls:
        return f"{where}.tool_calls: expected a non-empty list"
    ids: set[str] = set()
    for j, c in enumerate(tool_calls):
        at = f"{where}.tool_calls[{j}]"
        if not isinstance(c, dict) or set(c) != {"id", "type", "function"}:
            return f"{at}: expected exactly id, type and function"
        fn = c["function"]
        if not isinstance(c["id"], str) or not c["id"] or c["type"] != "function":
            return f"{at}: expected a string id and type 'function'"
        if not isinstance(fn, dict) or set(fn) != {"name", "arguments"}:
            return f"{at}.function: expected exactly name and arguments"
        if not isinstance(fn["name"], str) or not isinstance(fn["arguments"], str):
            return f"{at}.function: expected a string name and string arguments"
        if c["id"] in ids:
            return f"{at}: the id {c['id']!r} twice"
        ids.add(c["id"])
    return None


def _tools_problem(tools: object) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "tools: expected a list"
    for k, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
            return f"tools[{k}]: expected a function tool"
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            return f"tools[{k}].function: expected a name"
        if not isinstance(fn.get("parameters", {}), dict):
            return f"tools[{k}].function.parameters: expected an object"
    return None


def validating(answer: Answer) -> Handler:
    """A handler that answers a valid chat request (see :func:`chat_problem`) with
    ``answer`` and any other with a 400 saying what is wrong, as a strict endpoint would."""

    def handler(body: dict[str, Any]) -> Answer:
        problem = chat_problem(body)
        return answer if problem is None else HttpError(400, f"invalid chat request: {problem}")

    return handler


# --------------------------------------------------------------------------- wire helpers

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("not_found_error", "not_found"),
    409: ("conflict_error", None),
    422: ("invalid_request_error", None),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}

_CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
_MODELS_PATHS = frozenset({"/v1/models", "/models"})
_MODEL_ID = "scripted"


def _error_body(status: int, message: str) -> dict[str, Any]:
    err_type, code = _ERROR_TYPES.get(status, ("server_error" if status >= 500 else "error", None))
    return {"error": {"message": message, "type": err_type, "code": code, "param": None}}


def _estimate_completion_tokens(reply: Reply, wire_calls: list[dict[str, Any]]) -> int:
    n = len(reply.content or "")
    for tc in wire_calls:
        fn = tc["function"]
        n += len(fn["name"]) + len(fn["arguments"])
    return max(1, n // 4)


# --------------------------------------------------------------------------- HTTP plumbing


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], model: ScriptedModel) -> None:
        self.model = model
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, _RequestHandler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that can be slow.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return  # client went away mid-request: not worth a traceback
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """Shut down idle keep-alive connections so their threads end and clients see EOF."""
        with self._conns_lock:
            conns = list(self._conns)
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Server6(_Server):
    address_family = socket.AF_INET6


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: no request logging

    # ---- responses

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        lines = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
        ]
        if headers:
            lines.extend(f"{k}: {v}" for k, v in headers.items())
        if self.close_connection:
            lines.append("Connection: close")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    def _head(self, status: int, length: int, content_type: str = "application/json") -> bytes:
        lines = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
            f"Content-Type: {content_type}",
            f"Content-Length: {length}",
            "Connection: close",
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send_trickle(self, answer: Trickle) -> None:
        """``answer`` a few bytes at a time; the connection is closed after it (or once the
        client has gone)."""
        self.close_connection = True
        raw = answer.answer
        body = raw.encoded()
        head = self._head(raw.status, len(body), raw.content_type)
        if not answer.head:
            self._write_counted(head)
            head = b""
        data = head + body
        step = max(1, answer.chunk_bytes)
        for i in range(0, len(data), step):
            if i:
                time.sleep(answer.interval_s)
            if not self._write_counted(data[i : i + step]):
                return

    def _send_huge(self, answer: Huge) -> None:
        """A completion of ``answer.size_bytes``, written in chunks made as they go."""
        self.close_connection = True
        prefix = (
            b'{"id": "chatcmpl-huge", "object": "chat.completion", "model": "scripted", '
            b'"choices": [{"index": 0, "finish_reason": "stop", "message": '
            b'{"role": "assistant", "content": "'
        )
        suffix = b'"}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}'
        pad = max(0, answer.size_bytes - len(prefix) - len(suffix))
        if not self._write_counted(self._head(200, len(prefix) + pad + len(suffix)) + prefix):
            return
        step = max(1, answer.chunk_bytes)
        chunk = b"x" * step
        while pad > 0:
            n = min(step, pad)
            if not self._write_counted(chunk[:n]):
                return
            pad -= n
        self._write_counted(suffix)

    def _write_counted(self, data: bytes) -> bool:
        """Write ``data``, counted in ``bytes_sent``; False once the client has gone."""
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            return False
        model = self.server.model
        with model._lock:
            model.bytes_sent += len(data)
        return True

    def _send_error(
        self, status: int, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self._send_json(status, _error_body(status, message), headers)

    def _path(self) -> str:
        path = self.path.split("?", 1)[0]
        if len(path) > 1 and path.endswith("/"):
            path = path[:-1]
        return path

    def _read_body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is None:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                self.close_connection = True
                self._send_error(411, "chunked request bodies are not supported")
                return None
            return b""
        try:
            n = int(length)
        except ValueError:
            self.close_connection = True
            self._send_error(400, f"invalid Content-Length: {length!r}")
            return None
        return self.rfile.read(n) if n > 0 else b""

    # ---- methods

    def do_GET(self) -> None:
        path = self._path()
        if path in _MODELS_PATHS:
            self._send_json(200, {"object": "list", "data": [_model_card()]})
        elif path.rsplit("/", 1)[-1] == _MODEL_ID and path.rsplit("/", 1)[0] in _MODELS_PATHS:
            self._send_json(200, _model_card())
        else:
            self._send_error(404, f"unknown path: GET {self.path}")

    def do_POST(self) -> None:
        raw = self._read_body()
        if raw is None:
            return
        path = self._path()
        if path not in _CHAT_PATHS:
            self._send_error(404, f"unknown path: POST {self.path}")
            return
        try:
            body = json.loads(raw)
        except ValueError as exc:
            self._send_error(400, f"request body is not valid JSON: {exc}")
            return
        if not isinstance(body, dict):
            self._send_error(400, "request body must be a JSON object")
            return
        if body.get("stream"):
            self._send_error(400, "scripted model: streaming is not supported (stream=true)")
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        model = self.server.model
        answer, error = model._answer(RecordedRequest(body, headers, time.monotonic(), path))
        if model.latency_s > 0:
            time.sleep(model.latency_s)
        if error is not None:
            self._send_error(500, error)
        elif isinstance(answer, Reply):
            try:
                payload = model._completion(body, answer)
            except Exception:  # noqa: BLE001 - a bad script item becomes a 500 the test sees
                self._send_error(500, "scripted model: bad reply:\n" + traceback.format_exc())
            else:
                self._send_json(200, payload)
        elif isinstance(answer, HttpError):
            self._send_error(answer.status, answer.message, answer.headers)
        elif isinstance(answer, Raw):
            self._send(answer.status, answer.encoded(), answer.content_type, answer.headers)
        elif isinstance(answer, Trickle):
            self._send_trickle(answer)
        elif isinstance(answer, Huge):
            self._send_huge(answer)
        else:  # Drop: no answer; the server closes the socket after this method returns.
            self.close_connection = True

    def do_PUT(self) -> None:
        self._read_body()
        self._send_error(405, f"method not allowed: PUT {self.path}")

    def do_DELETE(self) -> None:
        self._read_body()
        self._send_error(405, f"method not allowed: DELETE {self.path}")


def _model_card() -> dict[str, Any]:
    return {"id": _MODEL_ID, "object": "model", "created": 0, "owned_by": "hero"}


# --------------------------------------------------------------------------- the model


class ScriptedModel:
    """An OpenAI-compatible chat completions server answering from a script.

    ``script`` is either a sequence of answers served in order (a request after the last
    gets a 500 "script exhausted" error) or a Handler called with each request body
    (possibly from several threads at once).
    """

    def __init__(
        self,
        script: Handler | Sequence[Answer],
        *,
        latency_s: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._handler: Handler | None
        self._script: tuple[Answer, ...]
        if callable(script):
            self._handler = script
            self._script = ()
        else:
            items = tuple(script)
            for i, item in enumerate(items):
                if not isinstance(item, _ANSWER_TYPES):
                    raise TypeError(
                        f"script item {i} is {type(item).__name__}; "
                        "expected Reply, HttpError, Raw, Drop, Trickle or Huge"
                    )
            self._handler = None
            self._script = items
        self.latency_s = float(latency_s)
        self.host = host
        self.port = port
        self.requests: list[RecordedRequest] = []
        self.bytes_sent = 0  # of Trickle and Huge answers, head and body, as written
        self._lock = threading.Lock()
        self._served = 0
        self._call_ids = itertools.count(1)
        self._completion_ids = itertools.count(1)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    # ---- lifecycle

    def start(self) -> ScriptedModel:
        """Bind and serve on a daemon thread; returns self. A second call is a no-op."""
        if self._stopped:
            raise RuntimeError("ScriptedModel cannot be restarted after stop()")
        if self._server is not None:
            return self
        server_cls = _Server6 if ":" in self.host else _Server
        server = server_cls((self.host, self.port), self)
        self.port = server.server_port
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"hero-scripted-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close open connections and the listening socket. Idempotent."""
        self._stopped = True
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- info

    @property
    def base_url(self) -> str:
        """``http://<host>:<port>/v1`` (available once started)."""
        if self._server is None and not self._stopped:
            raise RuntimeError("ScriptedModel is not started; call start() or use `with`")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def remaining(self) -> int:
        """For a sequence script: answers not yet served."""
        if self._handler is not None:
            raise TypeError("remaining is only defined for a sequence script, not a handler")
        with self._lock:
            return len(self._script) - self._served

    # ---- serving (called from request threads)

    def _answer(self, request: RecordedRequest) -> tuple[Answer | None, str | None]:
        """Record the request and pick its answer; returns (answer, 500-error message)."""
        handler = self._handler
        if handler is None:
            with self._lock:
                self.requests.append(request)
                index = self._served
                if index >= len(self._script):
                    return None, (
                        f"scripted model: script exhausted after {len(self._script)} replies"
                    )
                self._served = index + 1
            return self._script[index], None
        with self._lock:
            self.requests.append(request)
        try:
            answer: object = handler(request.body)  # test code: check what it gave back
        except Exception:  # noqa: BLE001 - the test sees a 500 with the traceback
            return None, "scripted model: handler raised:\n" + traceback.format_exc()
        if not isinstance(answer, _ANSWER_TYPES):
            return None, (
                f"scripted model: handler returned {type(answer).__name__}; "
                "expected Reply, HttpError, Raw, Drop, Trickle or Huge"
            )
        return answer, None

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        wire_calls = []
        for tc in reply.tool_calls:
            args = tc.arguments if isinstance(tc.arguments, str) else json.dumps(tc.arguments)
            wire_calls.append(
                {
                    "id": tc.id if tc.id is not None else f"call_{next(self._call_ids)}",
                    "type": "function",
                    "function": {"name": tc.name, "arguments": args},
                }
            )
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if wire_calls:
            message["tool_calls"] = wire_calls
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        prompt_tokens = reply.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = len(json.dumps(body.get("messages", []))) // 4
        completion_tokens = reply.completion_tokens
        if completion_tokens is None:
            completion_tokens = _estimate_completion_tokens(reply, wire_calls)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if reply.cost is not None:
            usage["cost"] = reply.cost
        if reply.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        usage.update(reply.usage_extra)
        completion: dict[str, Any] = {
            "id": f"chatcmpl-scripted-{next(self._completion_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or _MODEL_ID,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.finish_reason
                    or ("tool_calls" if wire_calls else "stop"),
                    "logprobs": None,
                }
            ],
        }
        if reply.send_usage:
            completion["usage"] = usage
        return completion


# --------------------------------------------------------------------------- command line


def _load_handler(spec: str) -> Handler:
    import importlib

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--handler must look like MODULE:FUNC, got {spec!r}")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{spec} is not callable")
    return cast(Handler, obj)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a scripted model server in the foreground until SIGTERM/SIGINT."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(
        prog="python -m hero.llm.scripted",
        description="Serve a scripted OpenAI-compatible chat completions API.",
    )
    parser.add_argument(
        "--handler",
        required=True,
        help="MODULE:FUNC, where FUNC(body: dict) returns a Reply, HttpError, Raw or Drop",
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before answering")
    args = parser.parse_args(argv)

    try:
        handler = _load_handler(args.handler)
    except (ImportError, AttributeError, ValueError) as exc:
        parser.error(f"cannot load handler {args.handler!r}: {exc}")

    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with ScriptedModel(handler, latency_s=args.latency, host=args.host, port=args.port) as m:
        print(f"listening on {m.base_url}", flush=True)
        while not stop.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    # Run via the imported module, so the handler's `from hero.llm.scripted import Reply` and the
    # server's isinstance checks see the same classes (not a second copy living in __main__).
    from hero.llm.scripted import main as _main

    raise SystemExit(_main())
