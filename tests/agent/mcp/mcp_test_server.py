"""A small MCP server for hero's tests, written with the SDK's server side.

Run as ``python mcp_test_server.py`` (stdio) or ``python mcp_test_server.py http PORT``
(streamable HTTP on 127.0.0.1). Its tools do what the tests need a server to do: answer,
read a file, try the network, show its environment, take memory, hang, exit mid-call,
answer 10 MB.
"""

from __future__ import annotations

import os
import socket
import sys
import time

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("hero-test")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


@server.tool()
def read_path(path: str) -> str:
    """Read a file, or say why it cannot."""
    try:
        with open(path, encoding="utf-8") as fh:
            return "read: " + fh.read()
    except OSError as exc:
        return f"cannot read: {type(exc).__name__}"


@server.tool()
def connect(port: int) -> str:
    """Try to connect to a port on the loopback."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return "connected"
    except OSError as exc:
        return f"cannot connect: {type(exc).__name__}"


@server.tool()
def getenv(name: str) -> str:
    """A variable of the server's environment."""
    return f"{name}={os.environ.get(name, '<unset>')}"


@server.tool()
def header(name: str, ctx: Context) -> str:
    """A header of the HTTP request that called the tool (streamable HTTP only)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return f"{name}: {headers.get(name, '<none>') if headers is not None else '<no http>'}"


@server.tool()
def hang() -> str:
    """Never answer (after leaving hang.started in the working directory, when it may)."""
    try:
        with open("hang.started", "w", encoding="utf-8") as fh:
            fh.write(str(os.getpid()))
    except OSError:
        pass
    time.sleep(3600)
    return "woke"


@server.tool()
def die() -> str:
    """Exit in the middle of the call."""
    os._exit(3)


@server.tool()
def alloc(megabytes: int) -> str:
    """Take that much memory."""
    try:
        held = b"x" * (megabytes << 20)
    except MemoryError:
        return "cannot allocate"
    return f"allocated {len(held) >> 20} MB"


@server.tool()
def big(megabytes: int = 10) -> str:
    """A very long answer."""
    return "x" * (megabytes * 1024 * 1024)


def note_start() -> None:
    """Append this process's id to the file ``MCP_STARTS`` names, when it is set (a test
    counts the server's starts and checks it is gone after)."""
    path = os.environ.get("MCP_STARTS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")


if __name__ == "__main__":
    note_start()
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
