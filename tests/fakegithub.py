"""A fake GitHub REST API on loopback for tests: issues, comments, labels, pull requests.

    with FakeGitHub(token="t0ken") as gh:
        gh.add_issue("acme/app", title="Add --verbose", labels=["hero"])
        client = GitHub(gh.api_url, "t0ken", "acme/app")
        assert [i["title"] for i in client.open_issues("hero")] == ["Add --verbose"]
        assert gh.requests[-1].headers["authorization"] == "Bearer t0ken"

It answers the endpoints hero uses, with GitHub's JSON shapes (the fields hero reads):

- ``GET /repos/{o}/{r}``: the repository, with ``default_branch``;
- ``GET /repos/{o}/{r}/issues``: ``state`` (open, closed, all), ``labels`` (comma
  separated, all must be on the issue), ``direction`` (desc, GitHub's default, or asc),
  ``per_page`` (default 30, at most 100) and ``page``, with a ``Link`` header (``next``,
  ``last``, ``first``, ``prev``); pull requests are listed too, with a ``pull_request`` key;
- ``GET /repos/{o}/{r}/issues/{n}``; ``GET`` and ``POST /repos/{o}/{r}/issues/{n}/comments``;
- ``GET`` and ``POST /repos/{o}/{r}/issues/{n}/labels``, ``DELETE .../labels/{name}`` (404
  when the issue does not have it);
- ``GET /repos/{o}/{r}/pulls`` (``state``, ``head=owner:branch``, ``base``, pages) and
  ``POST`` (422 when an open one has the same head and base), ``GET .../pulls/{n}`` (its
  ``head.sha``, ``state`` open or closed, ``merged``);
- ``GET .../pulls/{n}/reviews`` (``state`` CHANGES_REQUESTED, APPROVED, COMMENTED),
  ``GET .../pulls/{n}/comments`` (review comments: ``path``, ``line``, ``body``, ``id``,
  ``in_reply_to_id``, ``pull_request_review_id``) and ``POST
  .../pulls/{n}/comments/{id}/replies``; comments on a pull request as on an issue;
- ``GET .../commits/{sha}/check-runs`` (``status`` queued, in_progress, completed;
  ``conclusion``; ``output.title``, ``summary``, ``text``) and ``GET
  .../commits/{sha}/status`` (the combined status: its ``state`` and ``statuses``);
- ``GET .../collaborators/{user}/permission`` (``permission`` admin, write, read or none,
  and ``role_name`` as set: maintain and triage too; ``none`` for a stranger).

With ``scopes`` set, every answer says them in ``X-OAuth-Scopes``, as for a classic
token. Every 200 answer to a GET has an ``ETag`` (a hash of its body), and a request whose
``If-None-Match`` holds it gets a 304 without a body, which costs no rate limit. Every
answer has the ``x-ratelimit-*`` headers. With ``token`` set, a request without
``Authorization: Bearer <token>`` gets a 401.

Faults for the next requests, served in the order they were asked for, one per request:
``fail_next`` (an error status), ``drop_next`` (the connection closed without an answer),
``rate_limit_next`` (a primary or secondary rate limit) and ``redirect_next``. Every request
is recorded in ``requests``, faulted ones too.

Standard library only; quiet; HTTP/1.1 keep-alive; a daemon thread serves it.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import socket
import socketserver
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from hero.errors import HeroError

__all__ = ["FakeGitHub", "RecordedRequest"]

#: Where the fake's ``html_url`` values point: a reserved name that never resolves.
HTML_BASE = "https://github.invalid"
#: The rate limit the headers report (GitHub's for a token).
RATE_LIMIT = 5000

_DOCS = "https://docs.github.com/rest"


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake received it."""

    method: str
    path: str  # path and query as sent, e.g. "/repos/o/r/issues?state=open&page=2"
    headers: dict[str, str]  # names lower-cased
    body: Any  # the parsed JSON body, None when there was none


@dataclass(frozen=True)
class _Answer:
    status: int
    payload: Any = None  # JSON; None: no body
    headers: Mapping[str, str] | None = None


_DROP = "drop"  # a fault: close the connection without an answer
_Fault = _Answer | str


@dataclass
class _Repo:
    name: str  # "owner/name" as first given
    default_branch: str
    issues: dict[int, dict[str, Any]]  # number -> issue JSON (pull requests too)
    comments: dict[int, list[dict[str, Any]]]
    pulls: dict[int, dict[str, Any]]  # number -> pull JSON
    id: int
    reviews: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # pull -> reviews
    review_comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    check_runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sha -> runs
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sha -> statuses
    roles: dict[str, str] = field(default_factory=dict)  # login (lower) -> role name


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _label(name: str) -> dict[str, Any]:
    return {"name": name, "color": "ededed", "default": False, "description": None}


def _has_label(issue: Mapping[str, Any], name: str) -> bool:
    return any(lbl["name"].lower() == name.lower() for lbl in issue["labels"])


class FakeGitHub:
    """A GitHub REST API server on loopback holding repositories in memory.

    ``token``: when set, requests must carry ``Authorization: Bearer <token>``.
    ``path_prefix``: the API's path (``/api/v3`` as on GitHub Enterprise); ``api_url``
    ends with it. ``link_base``: when set, pagination links point there instead of at the
    server itself (to test that a client refuses to follow them). ``bot_login`` is the
    author of the comments and pull requests made through the API.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        path_prefix: str = "",
        bot_login: str = "hero-bot",
    ) -> None:
        self.token = token
        self.host = host
        self.port = port
        self.path_prefix = "/" + path_prefix.strip("/") if path_prefix.strip("/") else ""
        self.bot_login = bot_login
        self.link_base: str | None = None
        self.requests: list[RecordedRequest] = []
        self.rate_limit_remaining = RATE_LIMIT
        """Reported in ``x-ratelimit-remaining``; one less per answer but a 304 (never
        enforced: use ``rate_limit_next`` for a limit)."""
        self.rate_limit_reset = int(time.time()) + 3600
        """Reported in ``x-ratelimit-reset`` (epoch seconds)."""
        self.scopes: str | None = None
        """Sent as ``X-OAuth-Scopes`` with every answer, as GitHub does for a classic token
        (e.g. ``"repo, read:org"``); None sends no such header, as for a fine-grained one."""
        self._repos: dict[str, _Repo] = {}
        self._faults: deque[_Fault] = deque()
        self._ids = itertools.count(1000)
        self._lock = threading.RLock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    # ------------------------------------------------------------------------- lifecycle

    def start(self) -> FakeGitHub:
        """Bind and serve on a daemon thread; returns self. A second call is a no-op."""
        if self._stopped:
            raise RuntimeError("FakeGitHub cannot be restarted after stop()")
        if self._server is None:
            server = _Server((self.host, self.port), self)
            self.port = server.server_port
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"hero-fakegithub-{self.port}",
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

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def api_url(self) -> str:
        """``http://127.0.0.1:<port>`` plus ``path_prefix`` (once started)."""
        if self._server is None and not self._stopped:
            raise RuntimeError("FakeGitHub is not started; call start() or use `with`")
        return f"http://{self.host}:{self.port}{self.path_prefix}"

    # ------------------------------------------------------------------------- arranging

    def add_repo(self, repo: str, *, default_branch: str = "main") -> None:
        """Create ``repo`` ("owner/name"), or set its default branch if it exists."""
        with self._lock:
            found = self._repos.get(repo.lower())
            if found is not None:
                found.default_branch = default_branch
            else:
                self._repos[repo.lower()] = _Repo(repo, default_branch, {}, {}, {}, self._id())

    def add_issue(
        self,
        repo: str,
        *,
        title: str = "An issue",
        body: str | None = "",
        labels: Iterable[str] = (),
        author: str = "octocat",
        association: str = "OWNER",
        is_pull: bool = False,
        state: str = "open",
    ) -> dict[str, Any]:
        """A new issue (a pull request with ``is_pull``: listed among issues, with a
        ``pull_request`` key, and in ``pulls`` with head ``pull-<n>``). Creates ``repo``
        when needed. Returns a copy of the issue's JSON (``number`` is in it)."""
        if isinstance(labels, str):
            raise TypeError("labels is a list of names, not one string")
        with self._lock:
            if repo.lower() not in self._repos:
                self.add_repo(repo)
            r = self._repos[repo.lower()]
            number = 1 + max([*r.issues, 0])
            issue = self._new_issue(r, number, title, body, labels, author, association, state)
            if is_pull:
                pull = self._new_pull(r, number, title, body, f"pull-{number}", None, author)
                pull["state"] = state
                issue["pull_request"] = {"html_url": pull["html_url"]}
            return copy.deepcopy(issue)

    def edit_issue(
        self,
        repo: str,
        number: int,
        *,
        title: str | None = None,
        body: str | None = None,
        labels: Iterable[str] | None = None,
        state: str | None = None,
        author: str | None = None,
        association: str | None = None,
    ) -> dict[str, Any]:
        """Change the given fields of an issue; returns a copy of it."""
        with self._lock:
            issue = self._issue(repo, number)
            if title is not None:
                issue["title"] = title
            if body is not None:
                issue["body"] = body
            if isinstance(labels, str):
                raise TypeError("labels is a list of names, not one string")
            if labels is not None:
                issue["labels"] = [_label(name) for name in labels]
            if state is not None:
                issue["state"] = state
            if author is not None:
                issue["user"] = {"login": author, "id": self._id(), "type": "User"}
            if association is not None:
                issue["author_association"] = association
            issue["updated_at"] = _now_iso()
            return copy.deepcopy(issue)

    def add_comment(
        self,
        repo: str,
        number: int,
        body: str,
        *,
        author: str = "octocat",
        association: str = "OWNER",
    ) -> dict[str, Any]:
        """A comment on issue ``number`` by ``author``; returns a copy of it."""
        with self._lock:
            comment = self._new_comment(repo, number, body, author, association)
            return copy.deepcopy(comment)

    def add_pull(
        self,
        repo: str,
        *,
        head: str,
        base: str | None = None,
        title: str = "A pull request",
        body: str = "",
        state: str = "open",
    ) -> dict[str, Any]:
        """An existing pull request from branch ``head`` into ``base`` (the default branch
        when None), also listed among issues; returns a copy of the pull's JSON."""
        with self._lock:
            if repo.lower() not in self._repos:
                self.add_repo(repo)
            r = self._repos[repo.lower()]
            number = 1 + max([*r.issues, 0])
            pull = self._new_pull(r, number, title, body, head, base, self.bot_login)
            pull["state"] = state
            issue = self._new_issue(r, number, title, body, (), self.bot_login, "OWNER", state)
            issue["pull_request"] = {"html_url": pull["html_url"]}
            return copy.deepcopy(pull)

    def merge_pull(self, repo: str, number: int) -> None:
        """Pull request ``number`` is merged: closed, ``merged`` and ``merged_at`` set."""
        with self._lock:
            pull = self._repo_or_key_error(repo).pulls[number]
            pull.update(state="closed", merged=True, merged_at=_now_iso(), updated_at=_now_iso())

    def close_pull(self, repo: str, number: int) -> None:
        """Pull request ``number`` is closed without a merge."""
        with self._lock:
            r = self._repo_or_key_error(repo)
            r.pulls[number].update(state="closed", updated_at=_now_iso())
            r.issues[number].update(state="closed", updated_at=_now_iso())

    def set_head(self, repo: str, number: int, sha: str) -> None:
        """Pull request ``number``'s head commit is ``sha`` (as after a push to its branch)."""
        with self._lock:
            self._repo_or_key_error(repo).pulls[number]["head"]["sha"] = sha

    def set_permission(self, repo: str, user: str, role: str) -> None:
        """``user``'s role on ``repo``: admin, maintain, write, triage, read or none."""
        if role not in _ROLES:
            raise ValueError(f"role {role!r} is not one of {', '.join(_ROLES)}")
        with self._lock:
            self._repo_or_key_error(repo).roles[user.lower()] = role

    def add_review(
        self,
        repo: str,
        number: int,
        *,
        state: str = "CHANGES_REQUESTED",
        body: str = "",
        author: str = "octocat",
        comments: Iterable[Mapping[str, Any]] = (),
    ) -> dict[str, Any]:
        """A review of pull request ``number`` with line ``comments`` (each a mapping with
        ``path``, ``line`` and ``body``); returns a copy of the review, its comments' JSON
        under ``"comments"``."""
        if state not in ("CHANGES_REQUESTED", "APPROVED", "COMMENTED", "DISMISSED", "PENDING"):
            raise ValueError(f"review state {state!r} is not one of GitHub's")
        with self._lock:
            r = self._repo_or_key_error(repo)
            pull = r.pulls[number]
            review_id = self._id()
            review = {
                "id": review_id,
                "user": {"login": author, "type": "User"},
                "body": body,
                "state": state,
                "commit_id": pull["head"].get("sha"),
                "html_url": f"{pull['html_url']}#pullrequestreview-{review_id}",
                "submitted_at": _now_iso(),
            }
            r.reviews.setdefault(number, []).append(review)
            made = [
                self._new_review_comment(
                    r, number, str(c["body"]), author, c.get("path"), c.get("line"), review_id
                )
                for c in comments
            ]
            return copy.deepcopy({**review, "comments": made})

    def add_review_comment(
        self,
        repo: str,
        number: int,
        body: str,
        *,
        path: str | None = "README.md",
        line: int | None = 1,
        author: str = "octocat",
        in_reply_to: int | None = None,
    ) -> dict[str, Any]:
        """A review comment on pull request ``number`` (a reply in a thread with
        ``in_reply_to``: its path and line are the thread's); GitHub wraps it in a
        COMMENTED review, as here. Returns a copy of it."""
        with self._lock:
            r = self._repo_or_key_error(repo)
            review_id = self._id()
            r.reviews.setdefault(number, []).append(
                {
                    "id": review_id,
                    "user": {"login": author, "type": "User"},
                    "body": "",
                    "state": "COMMENTED",
                    "commit_id": r.pulls[number]["head"].get("sha"),
                    "submitted_at": _now_iso(),
                }
            )
            made = self._new_review_comment(
                r, number, body, author, path, line, review_id, in_reply_to
            )
            return copy.deepcopy(made)

    def edit_comment(self, repo: str, comment_id: int, body: str) -> None:
        """Edit the body of a comment (on an issue or a review) or a review: same id."""
        with self._lock:
            r = self._repo_or_key_error(repo)
            every = [
                *itertools.chain.from_iterable(r.comments.values()),
                *itertools.chain.from_iterable(r.review_comments.values()),
                *itertools.chain.from_iterable(r.reviews.values()),
            ]
            for item in every:
                if item["id"] == comment_id:
                    item.update(body=body, updated_at=_now_iso())
                    return
            raise KeyError(f"no comment {comment_id} in {repo}")

    def add_check_run(
        self,
        repo: str,
        sha: str,
        name: str,
        *,
        status: str = "completed",
        conclusion: str | None = "success",
        title: str | None = None,
        summary: str | None = None,
        text: str | None = None,
    ) -> dict[str, Any]:
        """A check run on commit ``sha`` (a later one of the same name replaces it)."""
        if status not in ("queued", "in_progress", "completed", "waiting", "requested", "pending"):
            raise ValueError(f"check run status {status!r} is not one of GitHub's")
        with self._lock:
            r = self._repo_or_key_error(repo)
            run = {
                "id": self._id(),
                "name": name,
                "head_sha": sha,
                "status": status,
                "conclusion": conclusion if status == "completed" else None,
                "output": {"title": title, "summary": summary, "text": text},
                "html_url": f"{HTML_BASE}/{r.name}/runs/{name}",
            }
            runs = [c for c in r.check_runs.get(sha, []) if c["name"] != name]
            r.check_runs[sha] = [*runs, run]
            return copy.deepcopy(run)

    def add_status(
        self, repo: str, sha: str, context: str, state: str, *, description: str = ""
    ) -> None:
        """A commit status on ``sha`` (error, failure, pending or success); the latest of a
        context counts."""
        if state not in ("error", "failure", "pending", "success"):
            raise ValueError(f"commit status state {state!r} is not one of GitHub's")
        with self._lock:
            r = self._repo_or_key_error(repo)
            entry = {
                "id": self._id(),
                "context": context,
                "state": state,
                "description": description,
                "target_url": f"{HTML_BASE}/ci/{context}",
                "created_at": _now_iso(),
            }
            r.statuses[sha] = [s for s in r.statuses.get(sha, []) if s["context"] != context]
            r.statuses[sha].append(entry)

    # ------------------------------------------------------------------------- looking

    def issue(self, repo: str, number: int) -> dict[str, Any]:
        """A copy of issue ``number`` (KeyError when there is none)."""
        with self._lock:
            return copy.deepcopy(self._issue(repo, number))

    def issues(self, repo: str) -> list[dict[str, Any]]:
        """Copies of every issue of ``repo`` (pull requests too), by number."""
        with self._lock:
            r = self._repo_or_key_error(repo)
            return [copy.deepcopy(r.issues[n]) for n in sorted(r.issues)]

    def labels(self, repo: str, number: int) -> list[str]:
        """The label names on issue ``number``."""
        with self._lock:
            return [lbl["name"] for lbl in self._issue(repo, number)["labels"]]

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        """Copies of the comments on issue ``number``, oldest first."""
        with self._lock:
            self._issue(repo, number)
            return copy.deepcopy(self._repo_or_key_error(repo).comments.get(number, []))

    def pulls(self, repo: str) -> list[dict[str, Any]]:
        """Copies of every pull request of ``repo``, by number."""
        with self._lock:
            r = self._repo_or_key_error(repo)
            return [copy.deepcopy(r.pulls[n]) for n in sorted(r.pulls)]

    def review_comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        """Copies of the review comments on pull request ``number`` (replies too), oldest
        first."""
        with self._lock:
            return copy.deepcopy(self._repo_or_key_error(repo).review_comments.get(number, []))

    def default_branch(self, repo: str) -> str:
        with self._lock:
            return self._repo_or_key_error(repo).default_branch

    # ------------------------------------------------------------------------- faults

    def fail_next(self, n: int = 1, status: int = 500, *, message: str | None = None) -> None:
        """The next ``n`` requests get ``status`` with a GitHub error body whose ``message``
        is ``message`` (default: the status's phrase, e.g. "Internal Server Error")."""
        body = {"message": message or HTTPStatus(status).phrase, "documentation_url": _DOCS}
        self._add_faults(n, _Answer(status, body))

    def drop_next(self, n: int = 1) -> None:
        """The next ``n`` requests get no answer: the connection is closed."""
        self._add_faults(n, _DROP)

    def rate_limit_next(
        self,
        reset_in_s: float = 60,
        *,
        secondary: bool = False,
        status: int | None = None,
        n: int = 1,
    ) -> None:
        """The next ``n`` requests hit a rate limit.

        Primary: ``status`` (default 403) with ``x-ratelimit-remaining: 0`` and
        ``x-ratelimit-reset`` = now + ``reset_in_s`` (epoch seconds, rounded up).
        Secondary: ``status`` (default 403; GitHub also sends 429) with ``retry-after:
        <reset_in_s>`` (whole seconds, rounded up).
        """
        seconds = math.ceil(reset_in_s)
        if secondary:
            message = "You have exceeded a secondary rate limit. Please wait a few minutes."
            headers = {"retry-after": str(seconds)}
        else:
            message = "API rate limit exceeded for user."
            headers = {
                "x-ratelimit-remaining": "0",
                "x-ratelimit-reset": str(math.ceil(time.time() + reset_in_s)),
            }
        body = {"message": message, "documentation_url": _DOCS}
        self._add_faults(n, _Answer(status or 403, body, headers))

    def redirect_next(self, location: str, *, status: int = 302, n: int = 1) -> None:
        """The next ``n`` requests are redirected to ``location``."""
        self._add_faults(n, _Answer(status, {"message": "Moved"}, {"Location": location}))

    def _add_faults(self, n: int, fault: _Fault) -> None:
        with self._lock:
            self._faults.extend([fault] * n)

    # ------------------------------------------------------------------------- serving

    def _serve(self, method: str, raw_path: str, headers: dict[str, str], body: Any) -> _Fault:
        """The answer to one request (called from the server's threads)."""
        with self._lock:
            self.requests.append(RecordedRequest(method, raw_path, headers, body))
            if self._faults:
                return self._faults.popleft()
            if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
                return _error(401, "Bad credentials")
            split = urlsplit(raw_path)
            path = split.path
            if self.path_prefix:
                if not (path + "/").startswith(self.path_prefix + "/"):
                    return _error(404, "Not Found")
                path = path[len(self.path_prefix) :]
            query = dict(parse_qsl(split.query))
            parts = [unquote(p) for p in path.strip("/").split("/")]
            try:
                answer = self._route(method, parts, query, body, split.path)
            except _Refusal as refusal:
                answer = refusal.answer
            return copy.deepcopy(answer)  # written out after the lock is let go

    def _route(
        self, method: str, parts: list[str], query: dict[str, str], body: Any, path: str
    ) -> _Answer:
        if len(parts) < 3 or parts[0] != "repos":
            raise _Refusal(_error(404, "Not Found"))
        r = self._repo_or_404(f"{parts[1]}/{parts[2]}")
        rest = parts[3:]
        match (method, rest):
            case ("GET", []):
                return _Answer(200, self._repo_json(r))
            case ("GET", ["issues"]):
                return self._list_issues(r, query, path)
            case ("GET", ["issues", n]):
                return _Answer(200, self._issue_json(r, self._issue_or_404(r, n)))
            case ("GET", ["issues", n, "comments"]):
                comments = r.comments.get(self._issue_or_404(r, n)["number"], [])
                return self._page(comments, query, path)
            case ("POST", ["issues", n, "comments"]):
                number = self._issue_or_404(r, n)["number"]
                text = body.get("body") if isinstance(body, dict) else None
                if not isinstance(text, str):
                    raise _Refusal(_invalid("body is missing"))
                return _Answer(201, self._new_comment(r.name, number, text, self.bot_login, "NONE"))
            case ("GET", ["issues", n, "labels"]):
                return _Answer(200, self._issue_or_404(r, n)["labels"])
            case ("POST", ["issues", n, "labels"]):
                return self._add_labels(self._issue_or_404(r, n), body)
            case ("DELETE", ["issues", n, "labels", name]):
                issue = self._issue_or_404(r, n)
                if not _has_label(issue, name):
                    raise _Refusal(_error(404, "Label does not exist"))
                issue["labels"] = [x for x in issue["labels"] if x["name"].lower() != name.lower()]
                return _Answer(200, issue["labels"])
            case ("GET", ["pulls"]):
                return self._list_pulls(r, query, path)
            case ("GET", ["pulls", n]):
                pull = r.pulls.get(int(n)) if n.isdigit() else None
                if pull is None:
                    raise _Refusal(_error(404, "Not Found"))
                return _Answer(200, pull)
            case ("POST", ["pulls"]):
                return self._create_pull(r, body)
            case ("GET", ["pulls", n, "reviews"]):
                return self._page(r.reviews.get(self._pull_or_404(r, n)["number"], []), query, path)
            case ("GET", ["pulls", n, "comments"]):
                number = self._pull_or_404(r, n)["number"]
                return self._page(r.review_comments.get(number, []), query, path)
            case ("POST", ["pulls", n, "comments", cid, "replies"]):
                return self._reply(r, self._pull_or_404(r, n)["number"], cid, body)
            case ("GET", ["commits", sha, "check-runs"]):
                runs = r.check_runs.get(sha, [])
                return _Answer(200, {"total_count": len(runs), "check_runs": runs})
            case ("GET", ["commits", sha, "status"]):
                return _Answer(200, _combined(sha, r.statuses.get(sha, [])))
            case ("GET", ["collaborators", user, "permission"]):
                role = r.roles.get(user.lower(), "none")
                permission = {"maintain": "write", "triage": "read"}.get(role, role)
                return _Answer(
                    200,
                    {"permission": permission, "role_name": role, "user": {"login": user}},
                )
        raise _Refusal(_error(404, "Not Found"))

    def _list_issues(self, r: _Repo, query: Mapping[str, str], path: str) -> _Answer:
        state = query.get("state", "open")
        wanted = [w.strip() for w in query.get("labels", "").split(",") if w.strip()]
        found = [
            self._issue_json(r, issue)
            for issue in r.issues.values()
            if (state == "all" or issue["state"] == state)
            and all(_has_label(issue, w) for w in wanted)
        ]
        found.sort(key=lambda i: i["number"], reverse=query.get("direction", "desc") != "asc")
        return self._page(found, query, path)

    def _list_pulls(self, r: _Repo, query: Mapping[str, str], path: str) -> _Answer:
        state = query.get("state", "open")
        head = query.get("head")
        base = query.get("base")
        found = []
        for pull in r.pulls.values():
            if state != "all" and pull["state"] != state:
                continue
            if head is not None and pull["head"]["label"].lower() != head.lower():
                if ":" in head or pull["head"]["ref"] != head:
                    continue
            if base is not None and pull["base"]["ref"] != base:
                continue
            found.append(pull)
        found.sort(key=lambda p: p["number"], reverse=query.get("direction", "desc") != "asc")
        return self._page(found, query, path)

    def _page(self, items: Sequence[Any], query: Mapping[str, str], path: str) -> _Answer:
        """One page of ``items`` with GitHub's Link header."""
        try:
            per_page = min(max(int(query.get("per_page", "30")), 1), 100)
            page = max(int(query.get("page", "1")), 1)
        except ValueError:
            raise _Refusal(_invalid("per_page and page are numbers")) from None
        last = max(1, math.ceil(len(items) / per_page))
        chunk = list(items[(page - 1) * per_page : page * per_page])
        base = (self.link_base or f"http://{self.host}:{self.port}").rstrip("/")

        def link(to: int, rel: str) -> str:
            return f'<{base}{path}?{urlencode({**query, "page": to})}>; rel="{rel}"'

        links = []
        if page < last:
            links += [link(page + 1, "next"), link(last, "last")]
        if page > 1:
            links += [link(1, "first"), link(min(page - 1, last), "prev")]
        return _Answer(200, chunk, {"Link": ", ".join(links)} if links else None)

    def _add_labels(self, issue: dict[str, Any], body: Any) -> _Answer:
        names = body.get("labels") if isinstance(body, dict) else body
        if not isinstance(names, list) or not all(isinstance(x, str) and x for x in names):
            raise _Refusal(_invalid("labels must be a list of names"))
        for name in names:
            if not _has_label(issue, name):
                issue["labels"].append(_label(name))
        issue["updated_at"] = _now_iso()
        return _Answer(200, issue["labels"])

    def _create_pull(self, r: _Repo, body: Any) -> _Answer:
        fields = body if isinstance(body, dict) else {}
        title, head, base = fields.get("title"), fields.get("head"), fields.get("base")
        if not (isinstance(title, str) and isinstance(head, str) and isinstance(base, str)):
            raise _Refusal(_invalid("title, head and base are required"))
        if not (title and head and base):
            raise _Refusal(_invalid("title, head and base cannot be empty"))
        owner = r.name.split("/")[0]
        ref = head.split(":", 1)[1] if ":" in head else head
        if head.count(":") > 1 or (":" in head and head.split(":")[0].lower() != owner.lower()):
            raise _Refusal(_invalid(f"head {head!r} is not a branch of {r.name}"))
        for pull in r.pulls.values():
            if (
                pull["state"] == "open"
                and pull["head"]["ref"] == ref
                and pull["base"]["ref"] == base
            ):
                raise _Refusal(_invalid(f"A pull request already exists for {owner}:{ref}."))
        text = fields.get("body")
        number = 1 + max([*r.issues, 0])
        pull = self._new_pull(r, number, title, text, ref, base, self.bot_login)
        issue = self._new_issue(r, number, title, text, (), self.bot_login, "NONE", "open")
        issue["pull_request"] = {"html_url": pull["html_url"]}
        return _Answer(201, pull)

    # ------------------------------------------------------------------------- records

    def _pull_or_404(self, r: _Repo, n: str) -> dict[str, Any]:
        pull = r.pulls.get(int(n)) if n.isdigit() else None
        if pull is None:
            raise _Refusal(_error(404, "Not Found"))
        return pull

    def _reply(self, r: _Repo, number: int, cid: str, body: Any) -> _Answer:
        text = body.get("body") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text:
            raise _Refusal(_invalid("body is missing"))
        thread = [c for c in r.review_comments.get(number, []) if str(c["id"]) == cid]
        if not thread:
            raise _Refusal(_error(404, "Not Found"))
        first = thread[0]
        made = self._new_review_comment(
            r,
            number,
            text,
            self.bot_login,
            first.get("path"),
            first.get("line"),
            self._id(),
            first.get("in_reply_to_id") or first["id"],
        )
        return _Answer(201, made)

    def _new_review_comment(
        self,
        r: _Repo,
        number: int,
        body: str,
        author: str,
        path: str | None,
        line: int | None,
        review_id: int,
        in_reply_to: int | None = None,
    ) -> dict[str, Any]:
        comment_id = self._id()
        now = _now_iso()
        comment: dict[str, Any] = {
            "id": comment_id,
            "pull_request_review_id": review_id,
            "body": body,
            "path": path,
            "line": line,
            "user": {"login": author, "type": "User"},
            "html_url": f"{HTML_BASE}/{r.name}/pull/{number}#discussion_r{comment_id}",
            "created_at": now,
            "updated_at": now,
        }
        if in_reply_to is not None:
            comment["in_reply_to_id"] = in_reply_to
        r.review_comments.setdefault(number, []).append(comment)
        return comment

    def _id(self) -> int:
        return next(self._ids)

    def _repo_or_key_error(self, repo: str) -> _Repo:
        found = self._repos.get(repo.lower())
        if found is None:
            raise KeyError(f"no repository {repo!r} in the fake (add_repo or add_issue first)")
        return found

    def _repo_or_404(self, repo: str) -> _Repo:
        found = self._repos.get(repo.lower())
        if found is None:
            raise _Refusal(_error(404, "Not Found"))
        return found

    def _issue(self, repo: str, number: int) -> dict[str, Any]:
        r = self._repo_or_key_error(repo)
        if number not in r.issues:
            raise KeyError(f"no issue #{number} in {repo}")
        return r.issues[number]

    def _issue_or_404(self, r: _Repo, n: str) -> dict[str, Any]:
        issue = r.issues.get(int(n)) if n.isdigit() else None
        if issue is None:
            raise _Refusal(_error(404, "Not Found"))
        return issue

    def _issue_json(self, r: _Repo, issue: dict[str, Any]) -> dict[str, Any]:
        return {**issue, "comments": len(r.comments.get(issue["number"], []))}

    def _repo_json(self, r: _Repo) -> dict[str, Any]:
        owner, name = r.name.split("/")
        return {
            "id": r.id,
            "name": name,
            "full_name": r.name,
            "owner": {"login": owner, "type": "User"},
            "private": False,
            "html_url": f"{HTML_BASE}/{r.name}",
            "default_branch": r.default_branch,
        }

    def _new_issue(
        self,
        r: _Repo,
        number: int,
        title: str,
        body: str | None,
        labels: Iterable[str],
        author: str,
        association: str,
        state: str,
    ) -> dict[str, Any]:
        now = _now_iso()
        issue: dict[str, Any] = {
            "id": self._id(),
            "number": number,
            "title": title,
            "body": body,
            "state": state,
            "labels": [_label(name) for name in labels],
            "user": {"login": author, "id": self._id(), "type": "User"},
            "author_association": association,
            "html_url": f"{HTML_BASE}/{r.name}/issues/{number}",
            "created_at": now,
            "updated_at": now,
        }
        r.issues[number] = issue
        return issue

    def _new_pull(
        self,
        r: _Repo,
        number: int,
        title: str,
        body: str | None,
        head: str,
        base: str | None,
        author: str,
    ) -> dict[str, Any]:
        owner = r.name.split("/")[0]
        base_ref = base or r.default_branch
        now = _now_iso()
        pull: dict[str, Any] = {
            "id": self._id(),
            "number": number,
            "title": title,
            "body": body,
            "state": "open",
            "html_url": f"{HTML_BASE}/{r.name}/pull/{number}",
            "user": {"login": author, "type": "User"},
            "head": {
                "ref": head,
                "label": f"{owner}:{head}",
                "sha": None,
                "repo": {"full_name": r.name},
            },
            "base": {
                "ref": base_ref,
                "label": f"{owner}:{base_ref}",
                "repo": {"full_name": r.name},
            },
            "draft": False,
            "merged": False,
            "created_at": now,
            "updated_at": now,
        }
        r.pulls[number] = pull
        return pull

    def _new_comment(
        self, repo: str, number: int, body: str, author: str, association: str
    ) -> dict[str, Any]:
        r = self._repo_or_key_error(repo)
        self._issue(repo, number)
        comment_id = self._id()
        now = _now_iso()
        comment = {
            "id": comment_id,
            "body": body,
            "user": {"login": author, "type": "User"},
            "author_association": association,
            "html_url": f"{HTML_BASE}/{r.name}/issues/{number}#issuecomment-{comment_id}",
            "created_at": now,
            "updated_at": now,
        }
        r.comments.setdefault(number, []).append(comment)
        r.issues[number]["updated_at"] = now
        return comment

    def _rate_headers(self, counted: bool) -> dict[str, str]:
        with self._lock:
            if counted:
                self.rate_limit_remaining = max(0, self.rate_limit_remaining - 1)
            return {
                "x-ratelimit-limit": str(RATE_LIMIT),
                "x-ratelimit-remaining": str(self.rate_limit_remaining),
                "x-ratelimit-reset": str(self.rate_limit_reset),
                "x-ratelimit-used": str(RATE_LIMIT - self.rate_limit_remaining),
                "x-ratelimit-resource": "core",
            }


class _Refusal(HeroError):
    """An error answer raised from deep in a route."""

    def __init__(self, answer: _Answer) -> None:
        super().__init__(answer.status)
        self.answer = answer


def _error(status: int, message: str) -> _Answer:
    return _Answer(status, {"message": message, "documentation_url": _DOCS})


def _invalid(message: str) -> _Answer:
    return _Answer(
        422,
        {
            "message": "Validation Failed",
            "errors": [{"resource": "Issue", "code": "custom", "message": message}],
            "documentation_url": _DOCS,
        },
    )


#: The roles a collaborator can have, least first.
_ROLES = ("none", "read", "triage", "write", "maintain", "admin")


def _combined(sha: str, statuses: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """GitHub's combined status of ``sha``: failure over pending over success."""
    states = {s["state"] for s in statuses}
    if states & {"error", "failure"}:
        state = "failure"
    elif "pending" in states or not statuses:
        state = "pending"
    else:
        state = "success"
    return {"sha": sha, "state": state, "total_count": len(statuses), "statuses": list(statuses)}


def _etag(content: bytes) -> str:
    return '"' + hashlib.sha256(content).hexdigest()[:40] + '"'


def _matches(if_none_match: str | None, etag: str) -> bool:
    if if_none_match is None:
        return False
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


# ----------------------------------------------------------------------------- HTTP plumbing


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], fake: FakeGitHub) -> None:
        self.fake = fake
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, _Handler)

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
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client went away mid-request: not worth a traceback
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: no request logging

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            with fake._lock:
                fake.requests.append(
                    RecordedRequest(method, self.path, headers, raw.decode(errors="replace"))
                )
            self._send(_error(400, "Problems parsing JSON"), fake._rate_headers(True))
            return
        answer = fake._serve(method, self.path, headers, body)
        if not isinstance(answer, _Answer):  # _DROP: no answer; the socket is closed after this
            self.close_connection = True
            return
        if method == "GET" and answer.status == 200:
            etag = _etag(json.dumps(answer.payload).encode())
            if _matches(headers.get("if-none-match"), etag):
                self._send(_Answer(304, None, {"ETag": etag}), fake._rate_headers(False))
                return
            answer = _Answer(200, answer.payload, {**(answer.headers or {}), "ETag": etag})
        self._send(answer, fake._rate_headers(True))

    def _send(self, answer: _Answer, rate_headers: Mapping[str, str]) -> None:
        content = b"" if answer.payload is None else json.dumps(answer.payload).encode()
        self.send_response(answer.status)
        merged = {**rate_headers, **(answer.headers or {})}
        if self.server.fake.scopes is not None:  # "" too: a classic token with no scope
            merged["X-OAuth-Scopes"] = self.server.fake.scopes
        for name, value in merged.items():
            self.send_header(name, value)
        if answer.status != 304:
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        if answer.status != 304:
            self.wfile.write(content)
