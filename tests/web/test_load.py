"""What bench/serve.py found with 50 clients on the board while 8 stories ran, kept fixed:
a connection accepted on the listening socket has Nagle's algorithm off (as asyncio, and so
uvicorn, sets it on a socket that says it is TCP; with it on, every answer's body, written
after its headers, waited 40 ms for the client's delayed ACK); the board's version is looked
up at most once a period, and a new version is rendered once however many ask for it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

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


# ----------------------------------------------------------------------------- the board's load


def _app(home: Path) -> Any:
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    from hero.web.app import create_app

    return create_app(home, token=None)


def _home(tmp_path: Path) -> Path:
    state = tmp_path / "home" / "runs" / "state"
    state.mkdir(parents=True)
    record = {"id": "r1", "status": "running", "title": "Live", "current_round": 1}
    (state / "r1.json").write_text(json.dumps(record))
    return tmp_path / "home"


def test_the_board_is_looked_up_at_most_once_a_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fifty clients polling while stories run ask for a board that changed on every turn:
    its version is looked up once per BOARD_RECHECK_S, not once a request."""
    pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")
    from starlette.testclient import TestClient

    from hero.web import app as webapp
    from hero.web import data

    home = _home(tmp_path)
    looked = []
    real = data.board_signature
    monkeypatch.setattr(data, "board_signature", lambda site: looked.append(1) or real(site))
    monkeypatch.setattr(webapp, "BOARD_RECHECK_S", 3600.0)
    c = TestClient(_app(home), base_url="http://127.0.0.1")
    etags = {c.get(path).headers["etag"].split("-")[-1] for path in ["/", "/api/stories"] * 10}
    assert len(looked) == 1 and len(etags) == 1
    monkeypatch.setattr(webapp, "BOARD_RECHECK_S", 0.0)  # looked up on every request
    state = home / "runs" / "state" / "r1.json"
    os.utime(state, ns=(time.time_ns(), state.stat().st_mtime_ns + 1_000_000))
    assert c.get("/").headers["etag"].split("-")[-1] not in etags
    assert len(looked) == 2


def test_a_new_board_is_rendered_once_for_all_who_ask_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")
    from starlette.testclient import TestClient

    from hero.web import data

    app = _app(_home(tmp_path))
    made = []
    real = data.board
    monkeypatch.setattr(data, "board", lambda site: made.append(1) or real(site))
    start = threading.Barrier(8)
    answers: list[int] = []

    def client() -> None:
        with TestClient(app, base_url="http://127.0.0.1") as c:
            start.wait(60)
            answers.append(c.get("/").status_code)

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert answers == [200] * 8 and len(made) == 1
