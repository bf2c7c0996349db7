"""What bench/serve.py found with 50 clients on the board while 8 stories ran, kept fixed:
a connection accepted on the listening socket has Nagle's algorithm off (as asyncio, and so
uvicorn, sets it on a socket that says it is TCP; with it on, every answer's body, written
after its headers, waited 40 ms for the client's delayed ACK); a new version of the board or
of an API answer is made once however many ask for it, and a change is seen by the next
request."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
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


def _plan(home: Path) -> None:
    folder = home / "inbox" / "pl"
    folder.mkdir(parents=True)
    manifest = {
        "name": "pl",
        "source": "/nowhere/plan.md",
        "source_sha256": "0" * 64,
        "created_at": "2026-01-01T00:00:00Z",
        "stories": [{"id": "a", "title": "First", "depends_on": []}],
    }
    (folder / "_manifest.yaml").write_text(json.dumps(manifest))
    (folder / "a.md").write_text(
        "---\nid: a\ntitle: First\n---\n\n## Goal\nx\n\n## Acceptance Criteria\n- [ ] y\n"
    )


def _replace(path: Path, record: dict[str, Any], *, same_stamp_as: os.stat_result) -> None:
    """Write ``record`` to ``path`` as hero writes a record (a new file renamed over the
    old), at the old one's size and mtime: only the inode tells the versions apart."""
    text = json.dumps(record)
    text += " " * (same_stamp_as.st_size - len(text.encode()))
    assert len(text.encode()) == same_stamp_as.st_size
    new = path.with_name(path.name + ".tmp")
    new.write_text(text)
    os.utime(new, ns=(same_stamp_as.st_atime_ns, same_stamp_as.st_mtime_ns))
    os.replace(new, path)


@pytest.mark.parametrize(
    ("url", "record_path"),
    [
        ("/api/stories", "runs/state/r1.json"),
        ("/api/stories/r1", "runs/state/r1.json"),
        ("/api/plans/pl", "runs/state/plans/pl/a.json"),
    ],
)
def test_the_api_answers_from_its_cache_and_sees_every_change_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, record_path: str
) -> None:
    """Made once per version, answered 304 to who holds it, and never stale: a record
    replaced (even at the same size and mtime) changes the very next answer and its ETag."""
    pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")
    from starlette.testclient import TestClient

    from hero.web import data

    home = _home(tmp_path)
    _plan(home)
    record = home / record_path
    record.parent.mkdir(parents=True, exist_ok=True)
    story_id = record.stem
    running = {"id": story_id, "status": "running", "title": "Live", "current_round": 1}
    if "/plans/" in record_path:
        running["plan"] = "pl"
    record.write_text(json.dumps(running) + " " * 40)
    made: list[str] = []
    for name in ("board", "story", "plan"):
        real = getattr(data, name)
        monkeypatch.setattr(
            data, name, lambda *a, _real=real, _name=name, **k: made.append(_name) or _real(*a, **k)
        )
    c = TestClient(_app(home), base_url="http://127.0.0.1")

    def status_in(answer: Any) -> str:
        body = answer.json()
        rows = {r["id"]: r for r in body.get("stories", [])}
        return str(rows[story_id]["status"] if story_id in rows else body["status"])

    first = c.get(url)
    etag = first.headers["etag"]
    assert first.status_code == 200 and status_in(first) == "running"
    for _ in range(5):
        again = c.get(url)
        assert again.headers["etag"] == etag and again.content == first.content
        assert c.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert len(made) == 1  # six 200s and five 304s: made once

    _replace(record, {**running, "status": "passed"}, same_stamp_as=record.stat())
    changed = c.get(url, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and status_in(changed) == "passed"
    assert changed.headers["etag"] != etag and len(made) == 2


def test_an_unknown_story_or_plan_is_404_without_an_etag(tmp_path: Path) -> None:
    pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")
    from starlette.testclient import TestClient

    c = TestClient(_app(_home(tmp_path)), base_url="http://127.0.0.1")
    for url in ("/api/stories/nope", "/api/plans/nope"):
        for _ in range(2):
            answer = c.get(url)
            assert answer.status_code == 404 and "etag" not in answer.headers, url


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
