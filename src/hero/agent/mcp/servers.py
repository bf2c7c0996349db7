"""A round's MCP servers: started together, their tools as :class:`ExternalTool`, stopped at
the round's end.

The SDK is asynchronous (anyio); hero's loop is synchronous. One event loop runs in a thread
of its own for the round (an anyio blocking portal); each server lives in a task there, and
a tool call is handed to it from the loop's thread and waited on with the server's
``call_timeout_s`` (and the round's cancel). What can go wrong is a tool error, never a
crash or a stuck round:

- a server that does not start, or lists no usable tool, in ``start_timeout_s``: the round
  goes on without its tools; ``problems`` says why (the trace and the events carry it);
- a call that takes longer than ``call_timeout_s``, a server that exits, one that answers
  more than the cap or garbage: the call is an error naming the server, and a server that
  failed so is stopped (its process group killed) and its tools say so for the rest of the
  round;
- bad arguments (not a JSON object): an error before anything is sent.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hero.agent.tools.context import ToolOutcome
from hero.agent.tools.external import MODEL_NAME_SEPARATOR, ExternalTool
from hero.config.mcp import McpServer
from hero.redact import Redactor

if TYPE_CHECKING:
    import anyio
    from anyio.from_thread import BlockingPortal
    from mcp import ClientSession

    from hero.sandbox.bwrap import Sandbox

#: Most bytes read of one message from a server (beyond, the call fails and the server is
#: stopped): well above what the model is shown (``max_result_chars``), far below 10 MB.
MIN_READ_BYTES = 1 << 20
#: What a tool's name may be, as the model's API takes it (``<server>__<tool>``, 64 at most).
_TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Tools taken from one server, at most; a description's length; a schema's JSON length.
MAX_TOOLS = 128
MAX_DESCRIPTION = 2000
MAX_SCHEMA_CHARS = 20_000
#: Seconds hero waits, beyond a server's own deadlines, before giving up on the loop.
_SLACK_S = 10.0
_POLL_S = 0.1


@dataclass
class _Live:
    """One server in the round's event loop."""

    server: McpServer
    wire: Any
    ready: concurrent.futures.Future[list[Any]] = field(default_factory=concurrent.futures.Future)
    done: concurrent.futures.Future[None] | None = None
    session: ClientSession | None = None
    stop: anyio.Event | None = None
    dead: str | None = None
    """Why the server is no longer there (its tools say so)."""


class McpServers:
    """The MCP servers of one round (see the module docstring). ``start`` them, hand
    ``tools`` to the agent loop, ``close`` at the round's end (also on an error or a kill:
    the processes go with the loop)."""

    def __init__(
        self,
        servers: Sequence[McpServer],
        *,
        cwd: Path,
        env: Mapping[str, str],
        sandbox: Sandbox | None,
        max_result_chars: int = 20_000,
        cancel: threading.Event | None = None,
        secrets: Sequence[str] = (),
    ) -> None:
        self.servers = tuple(servers)
        self.cwd = Path(cwd)
        self.env = dict(env)
        self.sandbox = sandbox
        self.max_read_bytes = max(MIN_READ_BYTES, 8 * max_result_chars)
        self.cancel = cancel
        self.redactor = Redactor(secrets)
        """What a server says of its tools goes into every request: no secret in it."""
        self.tools: list[ExternalTool] = []
        self.problems: dict[str, str] = {}
        """Why a server's tools are not there (a server that did not start), by name."""
        self.listed: dict[str, list[str]] = {}
        """The tools each server that started offers (their names as the server gives them)."""
        self._live: dict[str, _Live] = {}
        self._portal: BlockingPortal | None = None
        self._portal_cm: Any = None
        self._lock = threading.Lock()

    def __enter__(self) -> McpServers:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- start and stop ------------------------------------------------------------------

    def start(self) -> McpServers:
        """Start every server at once, each within its ``start_timeout_s``; those that
        started give ``tools``, the others a line in ``problems``."""
        if not self.servers:
            return self
        from anyio.from_thread import start_blocking_portal

        from hero.agent.mcp.transport import Wire

        self._portal_cm = start_blocking_portal()
        portal = self._portal = self._portal_cm.__enter__()
        for server in self.servers:
            live = _Live(server, Wire(self.max_read_bytes))
            self._live[server.name] = live
            live.done = portal.start_task_soon(self._serve, live)
        for server in self.servers:
            live = self._live[server.name]
            try:
                found = live.ready.result(timeout=server.start_timeout_s + _SLACK_S)
            except concurrent.futures.TimeoutError:
                self.problems[server.name] = f"did not start in {server.start_timeout_s:g} s"
                self._stop(live, self.problems[server.name])
                continue
            except Exception as exc:  # noqa: BLE001 - the server's failure, said once
                self.problems[server.name] = _why(exc, live)
                continue
            self.listed[server.name] = [str(t.name) for t in found]
            self.tools += self._external(live, found)
        return self

    def report(self) -> list[dict[str, Any]]:
        """Each server as the trace records it: its transport, its tools (the names the
        model sees) or why it has none."""
        found = []
        for server in self.servers:
            entry: dict[str, Any] = {"name": server.name, "transport": server.transport}
            if server.name in self.problems:
                entry["problem"] = self.problems[server.name]
            else:
                entry["tools"] = [t.name for t in self.tools if t.server == server.name]
            found.append(entry)
        return found

    def close(self) -> None:
        """Stop every server (its process group killed) and the event loop."""
        with self._lock:
            portal, self._portal = self._portal, None
        if portal is None:
            return
        for live in self._live.values():
            self._stop(live, live.dead or "the round ended", portal)
        for live in self._live.values():
            if live.done is not None:
                with contextlib.suppress(Exception):
                    concurrent.futures.wait([live.done], timeout=_SLACK_S)
        with contextlib.suppress(Exception):
            portal.call(portal.stop, True)  # what is left (a server stuck in its end) cancelled
        with contextlib.suppress(Exception):
            self._portal_cm.__exit__(None, None, None)

    async def _serve(self, live: _Live) -> None:
        """The server's life in the loop: connect, initialize, list its tools, then wait
        until it is stopped; every exit of the connection stops the process."""
        import anyio
        from mcp import ClientSession

        server = live.server
        live.stop = anyio.Event()
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + server.start_timeout_s) as start:
                async with self._transport(live) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        tools = await _list_tools(session)
                        live.session = session
                        start.deadline = math.inf
                        live.ready.set_result(tools)
                        await live.stop.wait()
            if not live.ready.done():
                live.ready.set_exception(
                    TimeoutError(f"did not start in {server.start_timeout_s:g} s")
                )
        except Exception as exc:  # noqa: BLE001 - said through ready, or on the next call
            if not live.ready.done():
                live.ready.set_exception(exc)
            live.dead = live.dead or _why(exc, live)
        finally:
            live.session = None
            if not live.ready.done():
                live.ready.set_exception(RuntimeError("stopped"))

    def _transport(self, live: _Live) -> contextlib.AbstractAsyncContextManager[Any]:
        from hero.agent.mcp.transport import http_transport, stdio_transport

        server = live.server
        if server.url:
            return http_transport(
                server.url,
                headers=dict(server.headers),
                read_timeout_s=server.call_timeout_s + _SLACK_S,
                wire=live.wire,
            )
        box = self.sandbox
        return stdio_transport(
            lambda info_fd, block_fd: self.argv(server, info_fd, block_fd),
            cwd=self.cwd,
            env={**self.env, **dict(server.env)},
            wire=live.wire,
            limits=None if box is None else box.limits,
            cgroups=True if box is None else box.cgroups,
            start_timeout_s=server.start_timeout_s,
        )

    def argv(
        self, server: McpServer, info_fd: int | None = None, block_fd: int | None = None
    ) -> list[str]:
        """What starts a stdio server: its command in the story's sandbox (with the network
        only when ``network`` is set; ``info_fd`` and ``block_fd`` for its limits), or as it
        is when the story has none."""
        if self.sandbox is None:
            return list(server.command)
        box = self.sandbox.with_network(server.network)
        return box.wrap_command(server.command, self.cwd, info_fd=info_fd, block_fd=block_fd)

    def _stop(self, live: _Live, why: str, portal: BlockingPortal | None = None) -> None:
        """Mark the server gone (``why``) and end its connection and process."""
        live.dead = live.dead or why
        portal = portal or self._portal
        if portal is None or live.stop is None:
            return
        with contextlib.suppress(Exception):
            portal.call(live.stop.set)

    # -- its tools -----------------------------------------------------------------------

    def _external(self, live: _Live, found: list[Any]) -> list[ExternalTool]:
        server = live.server
        tools: dict[str, ExternalTool] = {}
        for tool in found[:MAX_TOOLS]:
            name = str(tool.name)
            full = f"{server.name}{MODEL_NAME_SEPARATOR}{name}"
            if not _TOOL_NAME_RE.match(full) or MODEL_NAME_SEPARATOR in name or full in tools:
                continue  # a name the model's API refuses, one that reads two ways, a repeat
            schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
            try:
                shown = json.dumps(schema)
            except (TypeError, ValueError, RecursionError):
                shown = ""
            if schema.get("type") != "object" or not shown or len(shown) > MAX_SCHEMA_CHARS:
                schema = {"type": "object"}
            elif self.redactor.holds(shown):
                schema = self.redactor.redact_value(schema)
            description = self.redactor.redact(str(tool.description or "")[:MAX_DESCRIPTION])
            tools[full] = ExternalTool(
                server=server.name,
                tool=name,
                description=description,
                parameters=schema,
                call=self._caller(live, name),
            )
        return list(tools.values())

    def _caller(self, live: _Live, tool: str) -> Callable[[str | None], ToolOutcome]:
        def call(raw: str | None) -> ToolOutcome:
            return self.call(live, tool, raw)

        return call

    def call(self, live: _Live, tool: str, raw: str | None) -> ToolOutcome:
        """Run ``tool`` of the server with the model's raw JSON arguments; never raises."""
        started = time.monotonic()
        name = f"{live.server.name}{MODEL_NAME_SEPARATOR}{tool}"
        try:
            arguments = json.loads(raw) if raw and raw.strip() else {}
        except (ValueError, RecursionError) as exc:
            return ToolOutcome(f"{name}: the arguments are not JSON ({exc})", is_error=True)
        if not isinstance(arguments, dict):
            return ToolOutcome(f"{name}: the arguments must be a JSON object", is_error=True)
        portal = self._portal
        if live.dead is not None or live.session is None or portal is None:
            why = live.dead or "it is not running"
            return ToolOutcome(f"{name}: the MCP server {live.server.name} is gone: {why}", True)
        timeout = live.server.call_timeout_s
        future = portal.start_task_soon(self._call, live, tool, arguments)
        deadline = started + timeout + _SLACK_S
        result: tuple[str, bool] | BaseException
        # waited on, not future.result(timeout): the call's own TimeoutError is that one
        while not concurrent.futures.wait([future], timeout=_POLL_S).done:
            if self.cancel is not None and self.cancel.is_set():
                future.cancel()
                return ToolOutcome(f"{name}: cancelled", is_error=True)
            if time.monotonic() >= deadline:
                future.cancel()
                break
        if not future.done() or future.cancelled():
            result = TimeoutError()
        else:
            result = future.exception() or future.result()
        if isinstance(result, BaseException):
            why = _why(result, live, timeout)
            self._stop(live, f"{why} (stopped for the rest of the round)")
            return ToolOutcome(
                f"{name}: {why}; the MCP server {live.server.name} was stopped, its tools do "
                "not work for the rest of this round",
                is_error=True,
                command_s=time.monotonic() - started,
            )
        text, is_error = result
        return ToolOutcome(text, is_error, command_s=time.monotonic() - started)

    async def _call(self, live: _Live, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        import anyio

        session = live.session
        if session is None:
            raise RuntimeError(live.dead or "it is not running")
        with anyio.fail_after(live.server.call_timeout_s):
            result = await session.call_tool(tool, arguments)
        return result_text(result), bool(result.is_error)


async def _list_tools(session: ClientSession) -> list[Any]:
    """Every tool the server lists (pages followed, up to MAX_TOOLS)."""
    from mcp_types import PaginatedRequestParams

    found: list[Any] = []
    cursor: str | None = None
    for _page in range(16):
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        listed = await session.list_tools(params=params)
        found += listed.tools
        cursor = listed.next_cursor
        if not cursor or len(found) >= MAX_TOOLS:
            break
    return found


def result_text(result: Any) -> str:
    """A tool's result as text for the model: text content joined, other content named
    and summarised; the structured content when there is nothing else."""
    parts: list[str] = []
    for block in result.content or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(
                f"[{kind} content, {block.mime_type}, {len(block.data)} base64 characters: "
                "not shown]"
            )
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.uri}]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            if isinstance(text, str):
                parts.append(f"[resource {resource.uri}]\n{text}")
            else:
                parts.append(f"[resource {resource.uri}: binary, not shown]")
        else:
            parts.append(f"[{kind or 'unknown'} content: not shown]")
    if not parts and result.structured_content is not None:
        with contextlib.suppress(TypeError, ValueError):
            parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts) if parts else "(no content)"


def _why(exc: BaseException, live: _Live, timeout: float | None = None) -> str:
    """What went wrong with a server, in words the model and a person can act on."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]  # anyio's task groups wrap what failed in them
    wire = live.wire
    if wire.too_large:
        return f"its answer was larger than {wire.max_bytes} bytes"
    if isinstance(exc, TimeoutError) and timeout is not None:
        return f"no answer in {timeout:g} s (call_timeout_s)"
    if live.dead and live.dead != "the round ended":
        return live.dead
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        text = f"could not be started: {exc.strerror}"
    said = wire.said()
    if wire.exit_code is not None:
        text += f" (it exited with code {wire.exit_code})"
    return f"{text}; it said: {said}" if said else text
