"""How hero reaches an MCP server: a stdio transport of its own over a process it starts (the
server's argv, wrapped in bubblewrap when the story has a sandbox), and the SDK's
streamable-HTTP transport over an HTTP client held to the server's URL.

Both read at most ``max_bytes`` of one message: the SDK's own stdio transport reads a line
whole, however long, so a server answering 10 MB would take that much memory (and more
to parse it). Here a longer message ends the connection: the call waiting on it fails, and
``Wire.too_large`` says why. The process is started in a session of its own and its whole
group is killed when the connection ends (bubblewrap's ``--die-with-parent`` and its PID
namespace take everything the server started with it).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from hero.sandbox.limits import Confinement, Limits, confine

if TYPE_CHECKING:
    from anyio.abc import Process

#: Seconds a server has to exit once its stdin is closed, before its group is killed.
EXIT_GRACE_S = 1.0
#: Seconds to wait for a killed server to be reaped.
REAP_S = 5.0
#: What is kept of a server's stderr (its last bytes), for the note when it fails.
STDERR_TAIL = 4096
_CONNECT_TIMEOUT_S = 30.0


@dataclass
class Wire:
    """What a transport saw that the session does not say: its stderr's end, a message
    over the cap."""

    max_bytes: int
    too_large: bool = False
    stderr: bytearray = field(default_factory=bytearray)
    exit_code: int | None = None

    def said(self) -> str:
        """The end of what the server wrote to stderr, on one line."""
        text = bytes(self.stderr).decode("utf-8", errors="replace")
        return " ".join(text.split())[-500:]


Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


#: Makes the argv that starts a server: given bwrap's info and block fds when the sandbox's
#: limits are to be put on it (``hero.sandbox.bwrap.Sandbox.wrap_command``), else (None, None).
ArgvFor = Callable[[int | None, int | None], Sequence[str]]


@contextlib.asynccontextmanager
async def stdio_transport(
    argv_for: ArgvFor,
    *,
    cwd: Path,
    env: Mapping[str, str],
    wire: Wire,
    limits: Limits | None = None,
    cgroups: bool = True,
    start_timeout_s: float = 30.0,
) -> AsyncIterator[Streams]:
    """Start the server and speak newline-delimited JSON-RPC with it over its stdin and
    stdout, reading at most ``wire.max_bytes`` per message. With ``limits`` (a sandboxed
    server), they are put on its sandbox's init before the server starts, as on every
    sandboxed command. Raises OSError when it cannot be started."""
    process, confinement = await _spawn(argv_for, cwd, env, limits, cgroups, start_timeout_s)
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        assert process.stdout is not None
        buffer = bytearray()
        async with to_session:
            with contextlib.suppress(
                anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError
            ):
                async for chunk in process.stdout:
                    buffer += chunk
                    while (end := buffer.find(b"\n")) >= 0:
                        line = bytes(buffer[:end])
                        del buffer[: end + 1]
                        if len(line) > wire.max_bytes:
                            wire.too_large = True
                            return
                        if line.strip():
                            await to_session.send(_parse(line))
                    if len(buffer) > wire.max_bytes:
                        wire.too_large = True  # the session sees the connection end
                        return

    async def read_stderr() -> None:
        assert process.stderr is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in process.stderr:
                wire.stderr += chunk
                del wire.stderr[:-STDERR_TAIL]

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode("utf-8") + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the server is gone: no request waits for ever

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read_stdout)
            tasks.start_soon(read_stderr)
            tasks.start_soon(write_stdin)
            try:
                yield read_stream, write_stream
            finally:
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process, wire)
            for stream in (read_stream, write_stream, to_session, from_session):
                await stream.aclose()
            if confinement is not None:
                confinement.end()


async def _spawn(
    argv_for: ArgvFor,
    cwd: Path,
    env: Mapping[str, str],
    limits: Limits | None,
    cgroups: bool,
    start_timeout_s: float,
) -> tuple[Process, Confinement | None]:
    """The server's process, and the limits put on its sandbox (None without)."""
    options: dict[str, Any] = {
        "cwd": str(cwd),
        "env": dict(env),
        "stdin": subprocess.PIPE,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.PIPE,
        "start_new_session": True,
    }
    if limits is None:
        return await anyio.open_process(list(argv_for(None, None)), **options), None
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    process: Process | None = None
    try:
        try:
            argv = list(argv_for(info_w, block_r))
            process = await anyio.open_process(argv, pass_fds=(info_w, block_r), **options)
        finally:
            os.close(info_w)
            os.close(block_r)
        deadline = time.monotonic() + start_timeout_s
        pid = await anyio.to_thread.run_sync(_child_pid, info_r, deadline, abandon_on_cancel=True)
        if pid is None:
            raise OSError("its sandbox did not start")
        try:
            confinement = confine(limits, pid, cgroups=cgroups)
        except ProcessLookupError as exc:
            raise OSError("its sandbox ended as it started") from exc
        return process, confinement
    except BaseException:
        if process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        raise
    finally:
        os.close(info_r)
        os.close(block_w)  # the server starts (or, its sandbox gone, nothing does)


def _child_pid(info_fd: int, deadline: float) -> int | None:
    """The pid of the sandbox's init, as bwrap writes it to its info fd (None when it
    says nothing by ``deadline``)."""
    data = b""
    poller = select.poll()
    poller.register(info_fd, select.POLLIN)
    while len(data) < 65536:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(int(left * 1000) + 1):
            return None
        chunk = os.read(info_fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line))
    except ValueError as exc:
        return exc


async def _stop(process: Process, wire: Wire) -> None:
    """Close the server's stdin, give it a moment to exit, then kill its process group."""
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    with anyio.move_on_after(EXIT_GRACE_S):
        while process.returncode is None:
            await anyio.sleep(0.02)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # its own session: the group is its
    with anyio.move_on_after(REAP_S):
        while process.returncode is None:
            await anyio.sleep(0.02)
    wire.exit_code = process.returncode
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError):
                await stream.aclose()
    # asyncio's transport of the process, closed now, in its loop (not at collection, when
    # the round's loop is gone); nothing public holds it
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()


# -- streamable HTTP ----------------------------------------------------------------------


class _Capped(httpx2.AsyncBaseTransport):
    """The HTTP client's transport: requests to the server's own origin only, and at most
    ``wire.max_bytes`` of each response body."""

    def __init__(self, url: str, wire: Wire) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.origin = httpx2.URL(url)
        self.wire = wire

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url, origin = request.url, self.origin
        if (url.scheme, url.host, url.port) != (origin.scheme, origin.host, origin.port):
            raise httpx2.ConnectError(f"refused: {url.host} is not the server's own address")
        response = await self.inner.handle_async_request(request)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_CappedStream(response.stream, self.wire),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, wire: Wire) -> None:
        self.inner = inner
        self.wire = wire

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self.inner:
            read += len(chunk)
            if read > self.wire.max_bytes:
                self.wire.too_large = True
                raise httpx2.ReadError(f"the answer is larger than {self.wire.max_bytes} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextlib.asynccontextmanager
async def http_transport(
    url: str, *, headers: Mapping[str, str], read_timeout_s: float, wire: Wire
) -> AsyncIterator[Any]:
    """The SDK's streamable-HTTP transport, over a client held to ``url``'s origin and the
    cap on what is read."""
    timeout = httpx2.Timeout(_CONNECT_TIMEOUT_S, read=read_timeout_s)
    client = httpx2.AsyncClient(
        headers=dict(headers), timeout=timeout, transport=_Capped(url, wire), trust_env=False
    )
    async with (
        client,
        streamable_http_client(
            url, http_client=client, max_sse_event_size=wire.max_bytes
        ) as streams,
    ):
        yield streams
