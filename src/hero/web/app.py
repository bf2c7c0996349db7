"""The Starlette application of ``hero serve``: the pages, the JSON API, the raw files.

Safe by default (docs/serve.md, "Security"):

- read-only: every method but GET and HEAD is answered 405, before any route;
- with a token (``serve_token``), every request carries it: ``Authorization: Bearer
  <token>``, or the session cookie a ``?token=<token>`` link sets (then redirected to the
  same address without it, so the token leaves the address bar and the history). Both are
  compared in constant time (:func:`hmac.compare_digest` over their SHA-256);
- without a token (a loopback bind), the ``Host`` header must name a loopback host: a
  page of another site that resolves its name to 127.0.0.1 (DNS rebinding) reads nothing;
- every response has a Content-Security-Policy that allows no inline script and no
  other origin, ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``;
- the templates escape everything (Jinja2 autoescape), the data is redacted
  (:class:`hero.redact.Redactor` over every secret of the configuration);
- a request is logged as its method, path (never its query string) and status, never a
  header.

Pages and API share one source (:mod:`hero.web.data`); each answer has an ETag made from the
size, mtime and inode of the files it reads, looked up on every request, so a page polled
while nothing changes costs a few ``stat`` calls and a 304, and a change is seen by the next
request. The board and the API's answers are kept by ETag: made once per version however
many clients ask for it. The routes are plain functions: Starlette runs them in its
thread pool, so no file read blocks the event loop.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from hero import __version__
from hero.redact import Redactor
from hero.views.status import format_cost, format_duration, format_tokens, queue_note
from hero.web import bench, dag, data, overview
from hero.web.data import Site

HERE = Path(__file__).resolve().parent
CSP = (
    "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-cache"),
)
COOKIE = "hero_session"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
READ_METHODS = frozenset({"GET", "HEAD"})
#: Answers kept by ETag (:meth:`_Pages._once`).
MADE_KEPT = 32
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Log = Callable[..., Any]


def create_app(
    home: Path,
    *,
    token: str | None,
    repo: Path | None = None,
    secrets_known: tuple[str, ...] = (),
    max_parallel: int = 1,
    loopback: bool = True,
    log: Log | None = None,
) -> Starlette:
    """The application over ``home``. ``token``: the one every request must carry (None:
    none, for a loopback bind only); ``repo``: the target repository the rounds' diffs
    are read in (None: not read); ``secrets_known``: every secret to take out of what is
    shown (the configuration's ``secrets``, the token added); ``loopback``: the server
    listens on loopback only (the Host header is then checked); ``log``: called as
    ``log(event, **fields)`` for each request."""
    site = Site(
        Path(home),
        repo,
        Redactor((*secrets_known, *((token,) if token else ()))),
        max_parallel=max_parallel,
    )
    pages = _Pages(site, salt=secrets.token_hex(4))
    routes = [
        Route("/", pages.board),
        Route("/stories/{key:path}", pages.story),
        Route("/plans/{name}", pages.plan),
        Route("/api/stories", pages.api_stories),
        Route("/api/stories/{key:path}", pages.api_story),
        Route("/api/plans/{name}", pages.api_plan),
        Route("/api/health", pages.api_health),
        # `hero bench run`'s output folders and their reports (hero.web.bench)
        Route("/bench", pages.bench_list),
        Route("/bench/{name}", pages.bench_folder),
        Route("/api/bench", pages.api_bench_list),
        Route("/api/bench/{name}", pages.api_bench_folder),
        Route("/raw/stories/{key:path}/round-{n:int}.jsonl", pages.raw_trace),
        Route("/raw/stories/{key:path}/verify-r{n:int}.log", pages.raw_log),
        # /metrics: the Prometheus exposition (hero.web.metrics)
        Route("/metrics", pages.metrics),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(Guard, token=token, loopback=loopback, log=log)
    return app


# ----------------------------------------------------------------------------- the guard


def session_value(token: str) -> str:
    """The session cookie's value for ``token``: derived from it, not the token itself."""
    return hmac.new(token.encode(), b"hero serve session", hashlib.sha256).hexdigest()


def same_secret(given: str, expected: str) -> bool:
    """Whether two secrets are equal, in constant time (their SHA-256 compared, so that
    neither the content nor the length of ``expected`` shows in the time taken)."""
    return hmac.compare_digest(
        hashlib.sha256(given.encode("utf-8", "replace")).digest(),
        hashlib.sha256(expected.encode("utf-8", "replace")).digest(),
    )


class Guard:
    """The ASGI middleware in front of every route: read-only, the token, the Host header,
    the security headers, the request log."""

    def __init__(self, app: ASGIApp, *, token: str | None, loopback: bool, log: Log | None) -> None:
        self.app = app
        self.token = token or None
        self.session = session_value(token) if token else ""
        self.loopback = loopback
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # no route takes one: refused before any
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status_seen = [0]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_seen[0] = int(message["status"])
                names = {name.lower() for name, _ in message.get("headers", [])}
                headers = list(message.get("headers", []))
                headers += [(n, v) for n, v in SECURITY_HEADERS if n not in names]
                message["headers"] = headers
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send_with_headers)
            else:
                await self.app(scope, receive, send_with_headers)
        finally:
            if self.log is not None:
                # the path only: a query string may hold the token, a header always may
                self.log(
                    "http request",
                    method=str(scope.get("method")),
                    path=_printable(str(scope.get("path"))[:300]),
                    status=status_seen[0],
                    ms=round((time.monotonic() - started) * 1000, 1),
                )

    def _refusal(self, scope: Scope) -> Response | None:
        method = str(scope.get("method"))
        if method not in READ_METHODS:
            return _error(405, "read-only: only GET and HEAD", {"Allow": "GET, HEAD"})
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.token is None:
            if self.loopback and _host_name(headers.get("host", "")) not in LOOPBACK_HOSTS:
                return _error(403, "unexpected Host header (this server answers on loopback)")
            return None
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer " and same_secret(auth[7:].strip(), self.token):
            return None
        cookie = _cookie(headers.get("cookie", ""), COOKIE)
        if cookie and same_secret(cookie, self.session):
            return None
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = next((v for k, v in query if k == "token"), None)
        if given is not None and same_secret(given, self.token):
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            # back to this server's own path: "//host" would send the browser elsewhere
            where = "/" + quote(str(scope.get("path") or "/")).lstrip("/")
            where += f"?{rest}" if rest else ""
            response = Response(status_code=303, headers={"Location": where})
            response.set_cookie(COOKIE, self.session, httponly=True, samesite="strict", path="/")
            return response
        return _error(401, "a token is required", {"WWW-Authenticate": 'Bearer realm="hero"'})


def _printable(text: str) -> str:
    """``text`` on one line: a path with a line break must not forge a log line."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _host_name(host: str) -> str:
    """The name in a Host header, its port left off (``[::1]:8765`` -> ``[::1]``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _cookie(header: str, name: str) -> str:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


# ----------------------------------------------------------------------------- the pages


class _Pages:
    """The routes, over one :class:`Site`. Every method is a plain (sync) function: the
    thread pool runs it."""

    def __init__(self, site: Site, *, salt: str) -> None:
        from hero.web.metrics import Metrics

        self.site = site
        self.salt = salt
        # one reader of the home's files for /metrics, for the server's life: each scrape
        # reads only what changed since the last (hero.web.metrics)
        self._metrics = Metrics(site.home)
        env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=True,  # every template, whatever its name: all text is escaped
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters.update(
            duration=format_duration,
            tokens=format_tokens,
            cost=format_cost,
            when=_when,
            status_class=dag.status_class,
            story_url=_story_url,
            queue_note=queue_note,
            diff_view=overview.diff_view,
            round_chart=lambda rounds: Markup(overview.round_chart(rounds)),
        )
        env.globals.update(version=__version__)
        self.env = env
        self._lock = threading.Lock()
        self._made: dict[str, tuple[int, bytes, str]] = {}  # by ETag, oldest first
        # One render at a time: the clients that ask for a version being made wait for it
        # instead of each making it again (they all ask at once when it changes).
        self._making = threading.Lock()

    # -- helpers

    def _etag(self, kind: str, sig: str) -> str:
        return f'"{kind}-{self.salt}-{sig}"'

    def _fresh(self, request: Request, etag: str) -> Response | None:
        """304 when the client holds this version already."""
        given = request.headers.get("if-none-match", "")
        if etag in [g.strip() for g in given.split(",")]:
            return Response(status_code=304, headers={"ETag": etag})
        return None

    def _html(self, template: str, etag: str | None, status: int = 200, **context: Any) -> Response:
        body = self.env.get_template(template).render(etag=etag, **context)
        headers = {"ETag": etag} if etag else None
        return Response(body, status_code=status, media_type="text/html", headers=headers)

    def _once(self, etag: str, make: Callable[[], Response]) -> Response:
        """The answer of version ``etag``, made once however many clients ask for it: a
        board polled by fifty browsers while stories run is rendered once per change."""
        with self._lock:
            kept = self._made.get(etag)
        if kept is None:
            with self._making:
                with self._lock:
                    kept = self._made.get(etag)
                if kept is None:
                    made = make()
                    if made.status_code != 200:  # a refusal: neither kept nor tagged
                        return made
                    kept = (made.status_code, bytes(made.body), made.media_type or "")
                    with self._lock:
                        self._made[etag] = kept
                        while len(self._made) > MADE_KEPT:
                            self._made.pop(next(iter(self._made)))
        status, body, media_type = kept
        return Response(body, status_code=status, media_type=media_type, headers={"ETag": etag})

    def _not_found(self, request: Request, what: str) -> Response:
        if request.url.path.startswith("/api/"):
            return _error(404, what)
        return self._html("error.html", None, status=404, message=what)

    # -- the board

    def board(self, request: Request) -> Response:
        query = dict(request.query_params)  # the filters (hero.web.overview)
        hour = str(int(time.time() // 3600))  # the charts and "today" move on each hour
        sig = data.board_signature(self.site) + data.signature(repr(sorted(query.items())), hour)
        etag = self._etag("board", sig)

        def make() -> Response:
            found = overview.view(data.board(self.site), self.site.home, query)
            return self._html("board.html", etag, board=self.site.clean(found))

        return self._fresh(request, etag) or self._once(etag, make)

    def api_stories(self, request: Request) -> Response:
        query = dict(request.query_params)  # the board's filters (hero.web.overview)
        chosen = sorted(overview.filters(query).items())
        sig = data.board_signature(self.site) + data.signature(repr(chosen))
        etag = self._etag("api-board", sig)
        return self._fresh(request, etag) or self._once(
            etag, lambda: _json(overview.narrow(data.board(self.site), query), etag)
        )

    def api_health(self, request: Request) -> Response:
        report = data.board(self.site)
        health = {
            "daemon": report["daemon"],
            "breakers": report["breakers"],
            "queue": len(report["queue"]),
            "running": report["running"],
            "counts": report["counts"],
        }
        return _json(health, None)

    # -- a story

    def story(self, request: Request) -> Response:
        ref = data.ref_of(request.path_params["key"])
        if ref is None:
            return self._not_found(request, "no such story")
        etag = self._etag("story", data.story_signature(self.site, ref))
        fresh = self._fresh(request, etag)
        if fresh is not None:
            return fresh
        found = data.story(self.site, ref)
        if found is None:
            return self._not_found(request, f"no story {ref.key} has run")
        return self._html("story.html", etag, story=found)

    def api_story(self, request: Request) -> Response:
        ref = data.ref_of(request.path_params["key"])
        if ref is None:
            return _error(404, "no such story")
        etag = self._etag("api-story", data.story_signature(self.site, ref))

        def make() -> Response:
            found = data.story(self.site, ref)
            return (
                _error(404, f"no story {ref.key} has run") if found is None else _json(found, etag)
            )

        return self._fresh(request, etag) or self._once(etag, make)

    # -- a plan

    def plan(self, request: Request) -> Response:
        name = str(request.path_params["name"])
        found = data.plan(self.site, name) if len(name) <= 100 else None
        if found is None:
            return self._not_found(request, "no such plan")
        etag = self._etag("plan", data.plan_signature(self.site, name))
        fresh = self._fresh(request, etag)
        if fresh is not None:
            return fresh
        stories = found["stories"]
        svg = dag.render_svg(
            found["name"],
            found["layers"],
            found["in_cycle"],
            {s["id"]: s["depends_on"] for s in stories},
            {s["id"]: s["title"] for s in stories},
            {s["id"]: s["status"] for s in stories},
        )
        return self._html("plan.html", etag, plan=found, svg=Markup(svg))

    def api_plan(self, request: Request) -> Response:
        name = str(request.path_params["name"])
        if len(name) > 100:
            return _error(404, "no such plan")
        etag = self._etag("api-plan", data.plan_signature(self.site, name))

        def make() -> Response:
            found = data.plan(self.site, name)
            return _error(404, "no such plan") if found is None else _json(found, etag)

        return self._fresh(request, etag) or self._once(etag, make)

    # -- bench folders (hero.web.bench)

    def bench_list(self, request: Request) -> Response:
        etag = self._etag("bench", bench.listing_signature(self.site))
        return self._fresh(request, etag) or self._html(
            "bench.html", etag, listing=bench.listing(self.site)
        )

    def api_bench_list(self, request: Request) -> Response:
        etag = self._etag("api-bench", bench.listing_signature(self.site))
        return self._fresh(request, etag) or _json(bench.listing(self.site), etag)

    def bench_folder(self, request: Request) -> Response:
        folder = bench.find(self.site, str(request.path_params["name"]))
        if folder is None:
            return self._not_found(request, "no such bench folder")
        etag = self._etag("bench-folder", bench.folder_signature(self.site, folder))
        fresh = self._fresh(request, etag)
        if fresh is not None:
            return fresh
        shown = bench.page(self.site, bench.show(self.site, folder))
        return self._html(
            "bench_folder.html",
            etag,
            shown=shown,
            rate_svg=Markup(shown.get("rate_svg", "")),
            cost_svg=Markup(shown.get("cost_svg", "")),
        )

    def api_bench_folder(self, request: Request) -> Response:
        folder = bench.find(self.site, str(request.path_params["name"]))
        if folder is None:
            return _error(404, "no such bench folder")
        etag = self._etag("api-bench-folder", bench.folder_signature(self.site, folder))
        fresh = self._fresh(request, etag)
        if fresh is not None:
            return fresh
        found = bench.api(self.site, bench.show(self.site, folder))
        if "error" in found:  # the folder or a file in it cannot be read: no version to keep
            return _json(found, None, status=422)
        return _json(found, etag)

    # -- raw files

    def raw_trace(self, request: Request) -> Response:
        return self._raw(request, "round-{n}.jsonl", "application/x-ndjson")

    def raw_log(self, request: Request) -> Response:
        return self._raw(request, "verify-r{n}.log", "text/plain; charset=utf-8")

    def _raw(self, request: Request, pattern: str, media_type: str) -> Response:
        ref = data.ref_of(str(request.path_params["key"]))
        n = int(request.path_params["n"])
        if ref is None or n > 99_999:
            return _error(404, "no such file")
        path = data.raw_file(self.site, ref, pattern.format(n=n))
        if path is None:
            return _error(404, "no such file")
        body, more = data.read_head(self.site, path, data.RAW_MAX_BYTES)
        if more < 0:
            return _error(404, "no such file")
        text = self.site.redactor.redact(body.decode("utf-8", "replace"))
        if more:
            text += f"\n[hero serve: {more} more bytes not sent]\n"
        return Response(
            text.encode("utf-8"),
            media_type=media_type,
            headers={"Content-Disposition": "inline"},
        )

    # -- metrics (hero.web.metrics)

    def metrics(self, request: Request) -> Response:
        body, content_type = self._metrics.exposition()
        return Response(body, media_type=content_type)


def _json(value: Any, etag: str | None, status: int = 200) -> Response:
    body = json.dumps(value, ensure_ascii=False, indent=1).encode("utf-8")
    headers = {"ETag": etag} if etag else None
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _when(ts: Any) -> str:
    if not isinstance(ts, int | float) or ts <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _story_url(key: str) -> str:
    return "/stories/" + quote(str(key), safe="/")
