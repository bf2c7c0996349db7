"""`hero serve`: the board, a story's page, a plan's DAG, the JSON API and the raw files, over
a home where a real story ran (two rounds, the scripted model over loopback HTTP, real
git), and what keeps it safe: read-only, the token, the Host header, the headers, every
text escaped, no secret shown, paths that lead nowhere, request logs without tokens. Then
`hero serve` and `hero watch --serve` as real processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from export_support import CHECK_SUB

from hero.cli import main
from hero.llm.scripted import ScriptedModel

pytest.importorskip("starlette", reason="the serve extra is not installed")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")

from serve_support import (
    COMMENT_MARK,
    DIFF_MARK,
    SECRET,
    SUMMARY_MARK,
    Page,
    serve_model,
    story_file,
    url_from,
    wait_line,
)
from starlette.testclient import TestClient

from hero.web import app as webapp
from hero.web.app import CSP, create_app
from hero.web.server import check_bind, parse_bind

HOSTILE_TITLE = '<script>alert(1)</script> & "quotes"'
TOKEN = "serve-token-for-tests-1234567890"
LOG_MARK = '<script>alert("log")</script>'
PLAN_TITLE = '<script>alert("plan")</script>'


# ----------------------------------------------------------------------------- the home


def _plan(home: Path) -> None:
    """inbox/pl/: a plan of three stories, b and c after a; c's title hostile."""
    folder = home / "inbox" / "pl"
    folder.mkdir(parents=True)
    stories = [("a", "First", []), ("b", "Second", ["a"]), ("c", PLAN_TITLE, ["a", "b"])]
    manifest = {
        "name": "pl",
        "source": "/nowhere/plan.md",
        "source_sha256": "0" * 64,
        "created_at": "2026-01-01T00:00:00Z",
        "stories": [{"id": i, "title": t, "depends_on": d} for i, t, d in stories],
    }
    (folder / "_manifest.yaml").write_text(json.dumps(manifest))
    for story_id, title, deps in stories:
        (folder / f"{story_id}.md").write_text(
            f"---\nid: {story_id}\ntitle: {json.dumps(title)}\ndepends_on: {json.dumps(deps)}\n"
            "---\n\n## Goal\nx\n\n## Acceptance Criteria\n- [ ] y\n"
        )


def _hostile_record(home: Path) -> None:
    """runs/state/h1.json as a hostile hand would write it: a head that is a git option."""
    record = {
        "id": "h1",
        "status": "gave_up",
        "title": "<svg onload=alert(9)>",
        "base_sha": "--output=/tmp/hero-serve-pwned",
        "rounds": [
            {
                "round": 1,
                "head_sha": "--output=/tmp/hero-serve-pwned",
                "review": {"verdict": "<b>X</b>", "comments": [{"comment": "<i>c</i>"}]},
                "verify": {"passed": False, "commands": [{"command": "<u>cmd</u>"}, "junk"]},
            }
        ],
    }
    (home / "runs" / "state" / "h1.json").write_text(json.dumps(record))
    (home / "runs" / "state" / "bad.json").write_text("{not json")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, target_repo_template: Path) -> Iterator[Path]:
    """A home where s1 (a hostile title) passed in two rounds, with a plan not yet run, a
    hostile run record and an unreadable one."""
    base = tmp_path_factory.mktemp("serve")
    repo = base / "repo"
    shutil.copytree(target_repo_template, repo, symlinks=True)
    model = ScriptedModel(serve_model).start()
    where = base / "home"
    (where / "config" / "providers").mkdir(parents=True)
    (where / "inbox").mkdir()
    (where / "config" / "providers" / "scripted.yaml").write_text(
        f"name: scripted\nbase_url: {model.base_url}\ndefault_model: scripted-test\n"
    )
    (where / "config" / "roles.yaml").write_text(
        f"target_repo: {str(repo)!r}\nsandbox: none\nllm_backoff_base_s: 0.01\n"
        "llm_backoff_max_s: 0.05\nworker:\n  provider: scripted\nreviewer:\n  provider: scripted\n"
    )
    (where / "config.local.yaml").write_text(f"keys:\n  scripted: {SECRET}\n")
    old = signal.getsignal(signal.SIGTERM)
    try:
        story = story_file(where, "s1", HOSTILE_TITLE, [f"echo '{LOG_MARK}'", CHECK_SUB])
        assert main(["run", str(story), "--home", str(where)]) == 0
    finally:
        signal.signal(signal.SIGTERM, old)
        model.stop()
    _plan(where)
    _hostile_record(where)
    yield where


def client(home: Path, **kwargs: Any) -> TestClient:
    from hero.config.loader import load_config

    config = load_config(home, roles=())
    kwargs.setdefault("token", None)
    app = create_app(
        home, repo=config.target_repo, secrets_known=config.secrets, max_parallel=2, **kwargs
    )
    return TestClient(app, base_url="http://127.0.0.1:8765", follow_redirects=False)


def assert_inert(html: str) -> Page:
    """No script but the shipped one, no event handler attribute, no tag a hostile text
    could have made: every hostile text is text."""
    page = Page(html)
    scripts = [a for t, a in page.tags if t == "script"]
    assert scripts == [{"src": "/static/live.js", "defer": None}], scripts
    for tag, attrs in page.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert tag not in ("img", "iframe", "object", "embed", "b", "i", "u"), (tag, attrs)
    return page


# ----------------------------------------------------------------------------- pages


@pytest.mark.slow
def test_the_board_shows_the_story_its_queue_and_the_daemon(home: Path) -> None:
    r = client(home).get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = assert_inert(r.text)
    assert HOSTILE_TITLE in page.all_text  # shown as the text it is
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text
    assert SECRET not in r.text
    rows = [a for t, a in page.tags if t == "tr" and a.get("data-key")]
    assert [a["data-key"] for a in rows] == ["h1", "s1", "bad"] or {"s1", "h1", "bad"} <= {
        a["data-key"] for a in rows
    }
    assert "not running" in page.all_text  # no daemon
    assert "unreadable" in page.all_text
    assert "plan pl" not in page.all_text  # no story of the plan has run: it is in the queue
    assert ("a", {"class": "plan-link", "href": "/plans/pl"}) in page.tags
    queue = page.all_text.split("Queue", 1)[1]
    assert "pl/a" in queue and "pl/b" in queue
    assert "waits for a" in queue  # why b waits


def test_the_story_page_shows_each_round(home: Path) -> None:
    r = client(home).get("/stories/s1")
    assert r.status_code == 200
    page = assert_inert(r.text)
    body = page.all_text
    assert SECRET not in r.text
    assert HOSTILE_TITLE in body
    assert "Round 1" in body and "Round 2" in body
    assert "CHANGES_REQUESTED" in body and "APPROVED" in body
    assert COMMENT_MARK in body  # the reviewer's comment, as text
    assert SUMMARY_MARK in body  # the worker's summary, as text
    assert LOG_MARK in body  # the checks' log tail
    assert DIFF_MARK in body  # the round's diff
    assert "from calc import sub" in body  # the failed check of round 1
    ids = [a.get("id") for t, a in page.tags if t == "details"]
    assert "tools-1" in ids and "diff-2" in ids  # tool calls and diffs collapsed
    links = [a["href"] for t, a in page.tags if t == "a" and a.get("href")]
    assert "/raw/stories/s1/round-1.jsonl" in links and "/raw/stories/s1/verify-r2.log" in links
    tools = body.split("Round 2", 1)[0]
    assert "write_file" in tools and "bash" in tools


def test_the_memory_is_shown_with_the_trust_of_every_fact(home: Path) -> None:
    from hero.config.loader import load_config
    from hero.memory import Source, Trust, new_fact, store_for

    store = store_for(load_config(home, roles=()))
    # s1's check failed in round 1 and passed in round 2: hero learned a command fact
    (learned,) = [f for f in store.facts() if f.source.story == "s1"]
    assert learned.trust is Trust.MODEL
    mine = new_fact("convention", "Commit messages say why", Source(), redactor=store.redactor)
    store.add([mine])

    board = client(home).get("/")
    page = assert_inert(board.text)
    memory = page.all_text.split("Memory", 1)[1]
    assert learned.id in memory and mine.id in memory
    rows = {a["data-id"]: a["class"] for t, a in page.tags if t == "tr" and a.get("data-id")}
    assert rows[learned.id] == "fact trust-model" and rows[mine.id] == "fact trust-user"
    assert "no: no evidence yet" in memory  # the machine-written fact is not told

    story = client(home).get("/stories/s1")
    taught = assert_inert(story.text).all_text.split("What this story taught the memory", 1)[1]
    assert learned.id in taught and "model" in taught and mine.id not in taught

    api = client(home).get("/api/stories").json()["memory"]["facts"]
    by_id = {f["id"]: f for f in api}
    assert by_id[learned.id]["trust"] == "model" and not by_id[learned.id]["recalled"]
    assert by_id[mine.id]["trust"] == "user" and by_id[mine.id]["recalled"]
    one = client(home).get("/api/stories/s1").json()["memory"]["facts"]
    assert [f["id"] for f in one] == [learned.id]


def test_a_hostile_run_record_is_text_and_never_a_git_option(home: Path) -> None:
    r = client(home).get("/stories/h1")
    assert r.status_code == 200
    page = assert_inert(r.text)
    assert "<svg onload=alert(9)>" in page.all_text and "<b>X</b>" in page.all_text
    assert "no commits to compare" in page.all_text
    assert not Path("/tmp/hero-serve-pwned").exists()
    unreadable = client(home).get("/stories/bad")
    assert unreadable.status_code == 200 and "unreadable" in Page(unreadable.text).all_text


def test_the_plan_page_draws_its_dag(home: Path) -> None:
    r = client(home).get("/plans/pl")
    assert r.status_code == 200
    page = assert_inert(r.text)
    assert PLAN_TITLE in page.all_text
    assert (
        "&lt;script&gt;alert(&#34;plan&#34;)" in r.text
        or "&lt;script&gt;alert(&quot;plan&quot;)" in r.text
    )
    svg = r.text.split("<svg", 1)[1].split("</svg>", 1)[0]
    nodes = re.findall(
        r'<a href="/stories/pl/(\w)" class="node ([\w -]+)">.*?<rect x="([\d.]+)" y="([\d.]+)"',
        svg,
        re.S,
    )
    y = {n: float(ny) for n, _cls, _x, ny in nodes}
    assert set(y) == {"a", "b", "c"}
    assert y["a"] < y["b"] < y["c"]  # longest-path layers: c below b below a
    assert all("status-not-started" in cls for _n, cls, _x, _y in nodes)
    assert svg.count('class="edge"') == 3


# ----------------------------------------------------------------------------- the API


def test_the_api_serves_the_same_data(home: Path) -> None:
    c = client(home)
    board = c.get("/api/stories").json()
    rows = {row["key"]: row for row in board["stories"]}
    assert rows["s1"]["status"] == "passed" and rows["s1"]["title"] == HOSTILE_TITLE
    assert rows["bad"]["status"] == "unreadable"
    assert board["daemon"]["running"] is False and board["daemon"]["slots"]["max_parallel"] == 2
    assert [q["key"] for q in board["queue"]][:1] == ["pl/a"]
    story = c.get("/api/stories/s1").json()
    assert [r["review"]["verdict"] for r in story["rounds"]] == ["CHANGES_REQUESTED", "APPROVED"]
    assert [r["verify"]["passed"] for r in story["rounds"]] == [False, True]
    assert story["rounds"][1]["diff"]["text"].count(DIFF_MARK) >= 1
    assert SECRET not in json.dumps(story)
    plan = c.get("/api/plans/pl").json()
    assert plan["layers"] == [["a"], ["b"], ["c"]]
    assert [s["status"] for s in plan["stories"]] == ["not started"] * 3
    health = c.get("/api/health").json()
    assert health["queue"] == 3 and health["daemon"]["running"] is False
    for missing in ("/api/stories/nope", "/api/plans/nope", "/api/stories/pl/nope"):
        r = c.get(missing)
        assert r.status_code == 404 and "error" in r.json()


def test_metrics_are_served_from_the_same_home(home: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    c = client(home)
    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }
    assert samples[("hero_stories", (("status", "passed"),))] == 1
    assert samples[("hero_queue_length", ())] == 3
    assert SECRET not in r.text and HOSTILE_TITLE not in r.text
    assert c.post("/metrics").status_code == 405  # read-only, as every route


def test_an_unchanged_page_is_a_304(home: Path) -> None:
    c = client(home)
    for url in ("/", "/stories/s1", "/api/stories", "/api/stories/s1", "/plans/pl"):
        first = c.get(url)
        etag = first.headers["etag"]
        again = c.get(url, headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b"", url
    state = home / "runs" / "state" / "s1.json"
    etag = c.get("/stories/s1").headers["etag"]
    os.utime(state, ns=(time.time_ns(), state.stat().st_mtime_ns + 1_000_000))
    assert c.get("/stories/s1", headers={"If-None-Match": etag}).status_code == 200


# ----------------------------------------------------------------------------- safety


def test_every_answer_has_the_security_headers(home: Path) -> None:
    c = client(home)
    for r in (
        c.get("/"),
        c.get("/nope"),
        c.post("/"),
        c.get("/static/hero.css"),
        c.get("/api/stories/nope"),
        c.get("/raw/stories/s1/round-1.jsonl"),
    ):
        assert r.headers["content-security-policy"] == CSP
        assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_it_is_read_only(home: Path, method: str) -> None:
    for url in ("/", "/api/stories", "/api/stories/s1", "/nope"):
        r = client(home).request(method, url)
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    assert client(home).head("/").status_code == 200


def test_the_token_is_needed_on_every_request(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[int] = []
    real = webapp.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(1)
        return real(a, b)

    monkeypatch.setattr(webapp.hmac, "compare_digest", counting)
    c = client(home, token=TOKEN, loopback=False)
    for url in (
        "/",
        "/api/stories",
        "/stories/s1",
        "/raw/stories/s1/round-1.jsonl",
        "/static/hero.css",
    ):
        assert c.get(url).status_code == 401, url
        assert c.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get(url, headers={"Authorization": f"Bearer {TOKEN}x"}).status_code == 401
        assert c.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert compared  # every check goes through hmac.compare_digest
    assert c.get("/", headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200
    assert c.get("/?token=nope").status_code == 401
    r = c.get(f"/stories/s1?token={TOKEN}&x=1")
    assert r.status_code == 303 and r.headers["location"] == "/stories/s1?x=1"
    cookie = r.cookies.get("hero_session")
    assert cookie and TOKEN not in cookie and "httponly" in r.headers["set-cookie"].lower()
    assert "samesite=strict" in r.headers["set-cookie"].lower()
    guard = webapp.Guard(c.app, token=TOKEN, loopback=False, log=None)
    scope = {
        "method": "GET",
        "headers": [],
        "path": "//evil.example/",
        "query_string": f"token={TOKEN}".encode(),
    }
    elsewhere = guard._refusal(scope)
    assert elsewhere is not None and elsewhere.status_code == 303
    assert elsewhere.headers["location"] == "/evil.example/"  # this server's, not another's
    fresh = client(home, token=TOKEN, loopback=False)
    fresh.cookies.set("hero_session", cookie + "0")
    assert fresh.get("/").status_code == 401
    fresh.cookies.set("hero_session", cookie)
    assert fresh.get("/").status_code == 200
    page = fresh.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert TOKEN not in page


def test_a_websocket_is_refused(home: Path) -> None:
    from starlette.websockets import WebSocketDisconnect

    with pytest.raises(WebSocketDisconnect), client(home).websocket_connect("/"):
        pass


def test_a_loopback_server_answers_loopback_hosts_only(home: Path) -> None:
    c = client(home)
    assert c.get("/", headers={"Host": "evil.example:8765"}).status_code == 403
    assert c.get("/", headers={"Host": "127.0.0.1.evil.example"}).status_code == 403
    for host in ("localhost:8765", "127.0.0.1", "[::1]:8765"):
        assert c.get("/", headers={"Host": host}).status_code == 200, host


def test_paths_that_lead_nowhere_are_404(home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "round-1.jsonl").write_text('{"event": "secret outside"}\n')
    (home / "runs" / "evil").symlink_to(outside)
    (home / "runs" / "s1" / "round-7.jsonl").symlink_to("/etc/passwd")
    os.mkfifo(home / "runs" / "s1" / "verify-r8.log")
    try:
        c = client(home)
        for url in (
            "/stories/..%2F..%2Fetc%2Fpasswd",
            "/stories/%2e%2e/%2e%2e/etc/passwd",
            "/stories/" + "a" * 5000,
            "/stories/pl/a/b",
            "/plans/..%2Fdone",
            "/plans/" + "p" * 5000,
            "/raw/stories/evil/round-1.jsonl",
            "/raw/stories/s1/round-7.jsonl",
            "/raw/stories/s1/verify-r8.log",
            "/raw/stories/s1/round-99.jsonl",
            "/raw/stories/s1/round-999999999999999999999.jsonl",
            "/raw/stories/..%2Fs1/round-1.jsonl",
            "/raw/stories/s1%2F..%2F..%2Fstate/round-1.jsonl",
            "/static/../../config.local.yaml",
        ):
            r = c.get(url)
            assert r.status_code == 404, url
            assert "Traceback" not in r.text and "root:" not in r.text
        trace = c.get("/raw/stories/s1/round-1.jsonl")
        assert trace.status_code == 200
        assert trace.headers["content-type"].startswith("application/x-ndjson")
        assert all(json.loads(line)["event"] for line in trace.text.splitlines())
        assert SECRET not in trace.text
        log = c.get("/raw/stories/s1/verify-r1.log")
        assert log.status_code == 200 and log.headers["content-type"].startswith("text/plain")
        assert LOG_MARK in log.text
        assert c.get("/stories/s1").status_code == 200  # the odd files do not break the page
    finally:
        (home / "runs" / "evil").unlink()
        (home / "runs" / "s1" / "round-7.jsonl").unlink()
        (home / "runs" / "s1" / "verify-r8.log").unlink()


def test_request_logs_hold_no_token(home: Path) -> None:
    logged: list[dict[str, Any]] = []
    c = client(home, token=TOKEN, loopback=False, log=lambda event, **f: logged.append(f))
    c.get(f"/?token={TOKEN}")
    c.cookies.clear()
    c.get("/api/stories", headers={"Authorization": f"Bearer {TOKEN}"})
    c.get("/", headers={"Authorization": "Bearer wrong-token"})
    assert [(e["method"], e["path"], e["status"]) for e in logged] == [
        ("GET", "/", 303),
        ("GET", "/api/stories", 200),
        ("GET", "/", 401),
    ]
    assert TOKEN not in repr(logged) and "wrong-token" not in repr(logged)


def test_a_bind_beyond_loopback_needs_a_token() -> None:
    from hero.web import ServeError

    assert parse_bind("127.0.0.1:0").port == 0 and parse_bind("[::1]:80").host == "::1"
    for bad in ("nohost", "1.2.3.4:99999", ":80", "host:port"):
        with pytest.raises(ServeError, match="--bind"):
            parse_bind(bad)
    check_bind(parse_bind("127.0.0.1:8765"), None)
    check_bind(parse_bind("localhost:8765"), None)
    with pytest.raises(ServeError, match="serve_token"):
        check_bind(parse_bind("0.0.0.0:8765"), None)
    check_bind(parse_bind("0.0.0.0:8765"), TOKEN)


def test_hero_serve_refuses_a_public_bind_without_a_token(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HERO_SERVE_TOKEN", raising=False)
    assert main(["serve", "--home", str(home), "--bind", "0.0.0.0:0"]) == 2
    err = capsys.readouterr().err
    assert "serve_token" in err and "config.local.yaml" in err
    monkeypatch.setenv("HERO_SERVE_TOKEN", "short")
    assert main(["serve", "--home", str(home), "--bind", "0.0.0.0:0"]) == 2
    assert "at least 24 characters" in capsys.readouterr().err


def test_without_the_extra_it_says_what_to_install(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def find(name: str, *args: Any) -> Any:
        return None if name == "uvicorn" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find)
    assert main(["serve", "--home", str(home)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install 'hero[serve]'" in err and "uvicorn" in err


# ----------------------------------------------------------------------------- processes


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.status, r.read()


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_hero_serve_runs_and_stops_on_a_signal(home: Path, stop: signal.Signals) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hero",
            "serve",
            "--home",
            str(home),
            "--bind",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines: list[str] = []
    try:
        url = url_from(proc, lines)
        status, body = _get(url + "/")
        assert status == 200 and b"s1" in body and SECRET.encode() not in body
        status, body = _get(url + "/api/stories/s1?token=ignored")
        assert status == 200 and json.loads(body)["status"] == "passed"
        proc.send_signal(stop)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    rest = proc.stderr.read()
    logged = [json.loads(line) for line in [*lines, *rest.splitlines()] if line.startswith("{")]
    requests = [e for e in logged if e.get("event") == "http request"]
    assert [e["path"] for e in requests] == ["/", "/api/stories/s1"]
    assert "ignored" not in "".join(lines) + rest and "Traceback" not in rest


@pytest.mark.slow
def test_hero_watch_serves_the_page_beside_it(
    tmp_path: Path, make_home: Any, scripted: Any
) -> None:
    where = make_home(scripted([]), sandbox="none")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hero",
            "watch",
            "--home",
            str(where),
            "--serve",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines: list[str] = []
    try:
        url = url_from(proc, lines)
        # the daemon takes its lock and its signals after the server started listening
        wait_line(proc, lines, r'"event": "watching"')
        health = json.loads(_get(url + "/api/health")[1])
        assert health["daemon"]["running"] is True and health["daemon"]["pid"] == proc.pid
        assert health["daemon"]["slots"]["running"] == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    git(tmp_path / "repo", "status")  # the repository is untouched and fine


def test_a_running_round_is_shown_from_its_trace(tmp_path: Path) -> None:
    """A round in progress has no record yet: its page shows it from the trace, live; a
    run folder that is a symlink out of runs/ is not read."""
    home = tmp_path / "home"
    state = home / "runs" / "state"
    state.mkdir(parents=True)
    record = {
        "id": "r1",
        "status": "running",
        "title": "Live one",
        "current_round": 1,
        "started_at": time.time() - 5,
    }
    (state / "r1.json").write_text(json.dumps(record))
    trace = home / "runs" / "r1" / "round-1.jsonl"
    trace.parent.mkdir(parents=True)
    events = [
        {"event": "round_start", "round": 1},
        {
            "event": "assistant",
            "turn": 1,
            "content": "",
            "tool_calls": [
                {"id": "c1", "name": "read_file", "arguments": '{"path": "<x>.py"}'},
                {"id": "c2", "name": "bash", "arguments": '{"command": "sleep 100"}'},
            ],
        },
        {
            "event": "tool_result",
            "turn": 1,
            "id": "c1",
            "name": "read_file",
            "is_error": True,
            "content": "no such file <x>.py",
        },
    ]
    trace.write_text("".join(json.dumps(e) + "\n" for e in events) + '{"event": "torn')
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "round-1.jsonl").write_text(json.dumps(events[1]) + "\n")
    (outside / "verify-r1.log").write_text("outside log\n")
    (state / "r2.json").write_text(json.dumps({**record, "id": "r2"}))
    (home / "runs" / "r2").symlink_to(outside)
    c = TestClient(create_app(home, token=None), base_url="http://127.0.0.1")
    r = c.get("/stories/r1")
    page = assert_inert(r.text)
    assert "in progress" in page.all_text and 'data-live="1"' in r.text
    assert "<x>.py" in page.all_text and "no such file <x>.py" in page.all_text
    story = c.get("/api/stories/r1").json()
    [only] = story["rounds"]
    assert only["in_progress"] is True
    assert [(t["name"], t["done"], t["is_error"]) for t in only["tools"]] == [
        ("read_file", True, True),
        ("bash", False, False),
    ]
    assert only["diff"]["note"] == "no commit recorded yet"
    linked = c.get("/api/stories/r2").json()
    assert all(not r["tools"] and not r["log_tail"] for r in linked["rounds"])
    assert c.get("/raw/stories/r2/round-1.jsonl").status_code == 404
    board = c.get("/api/stories").json()
    assert {row["key"]: row.get("stale") for row in board["stories"]} == {"r1": True, "r2": True}


def test_the_templates_and_assets_ship_in_the_package() -> None:
    from importlib.resources import files

    web = files("hero.web")
    for name in ("base.html", "board.html", "story.html", "plan.html", "error.html"):
        assert (web / "templates" / name).is_file()
    for name in ("hero.css", "live.js"):
        assert (web / "static" / name).is_file()
    script = (web / "static" / "live.js").read_text()
    assert "http" not in script.replace("HTTP ", "")  # no other origin
    for name in ("base.html", "board.html", "story.html", "plan.html"):
        html = (web / "templates" / name).read_text()
        assert "<script>" not in html and " on" + "click" not in html and "style=" not in html


def test_the_dag_escapes_what_it_draws() -> None:
    from hero.web.dag import render_svg, status_class

    svg = render_svg(
        "p",
        [["a"], ["b"]],
        ["c"],
        {"a": [], "b": ["a", "zz"], "c": ["c", "b"]},
        {"a": "</svg><script>alert(1)</script>", "b": "x" * 500, "c": "&amp;"},
        {"a": 'passed"><script>', "b": "running"},
    )
    page = Page(svg)
    assert [t for t, _a in page.tags if t == "script"] == []
    assert "</svg><script>alert(1)</script>" in page.all_text  # as text, in its <title>
    assert svg.count("</svg>") == 1 and "&amp;amp;" in svg
    classes = [a["class"] for t, a in page.tags if t == "a"]
    assert classes == ["node status-passed---script-", "node status-running", "node status-unknown"]
    assert status_class("GAVE_UP") == "status-gave_up"
    assert svg.count('class="edge"') == 2  # b <- a, c <- b; the unknown and the self-loop not
