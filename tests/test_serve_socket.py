"""The status page's listening socket: a connection accepted on it has Nagle's algorithm
off, as asyncio (and so uvicorn) sets it on a socket that says it is TCP. With it on, every
answer's body, written after its headers, waited for the client's delayed ACK (40 ms a
request on a keep-alive connection, found by bench/serve.py)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from hero.web import ServeError
from hero.web.server import open_socket, parse_bind


@pytest.mark.parametrize("bind", ["127.0.0.1:0", "[::1]:0"])
def test_an_accepted_connection_has_nagle_off(bind: str) -> None:
    try:
        sock = open_socket(parse_bind(bind))
    except ServeError as exc:  # a host without IPv6 loopback
        if bind.startswith("["):
            pytest.skip(f"no IPv6 loopback here: {exc}")
        raise
    assert sock.proto == socket.IPPROTO_TCP

    async def accepted_nodelay() -> int:
        loop = asyncio.get_running_loop()
        seen: asyncio.Future[int] = loop.create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                conn = transport.get_extra_info("socket")
                seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        # What uvicorn does with the socket hero gives it (server.run(sockets=[sock])).
        server = await loop.create_server(Probe, sock=sock)
        try:
            host, port = sock.getsockname()[:2]
            _reader, writer = await asyncio.open_connection(host, port)
            try:
                return await asyncio.wait_for(seen, 60)
            finally:
                writer.close()
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(accepted_nodelay()) != 0
