"""GitHub's REST API, the part hero needs: issues, comments, labels, pull requests (their
reviews and review comments), checks and commit statuses, collaborators' permissions.

One :class:`GitHub` talks to one repository through one API host: ``https://api.github.com``,
a GitHub Enterprise ``https://HOST/api/v3``, or a test's fake server. Its rules:

- The token goes to the API host and nowhere else. A redirect is an error, not followed; a
  pagination link to another scheme, host or port is refused before anything is sent; and
  over plain ``http`` no proxy from the environment is used (it would read the token).
- A passing trouble never ends the caller's loop by surprise: a 5xx answer, a dropped
  connection or a timeout is tried again after a capped exponential backoff with jitter, up
  to ``Retry.max_attempts`` tries. A rate limit (403 or 429 with ``x-ratelimit-remaining:
  0``, or with ``retry-after``) is waited out instead: it is not a failed try.
- Every GET is conditional: the client remembers each URL's ETag and body, and a 304 answer
  (which GitHub does not count against the rate limit) gives the remembered body again.
- It logs nothing. A wait is told through ``on_wait`` before it starts; a failure is a
  :class:`GitHubError` that names the method, path and status and holds no header value
  and never the token.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from hero import __version__
from hero.errors import HeroError
from hero.redact import REDACTED

if TYPE_CHECKING:
    import httpx2

__all__ = ["GitHub", "GitHubError", "Retry"]

#: Items asked for per page of a list: GitHub's maximum.
PER_PAGE = 100
#: Conditional GETs remembered (URL -> ETag, body, next page); the least recently used go.
ETAG_CACHE_SIZE = 1024
#: The wait for a secondary rate limit that names no time: GitHub asks for at least a minute.
SECONDARY_WAIT_S = 60.0
#: The longest piece of GitHub's own error message kept in a GitHubError.
MAX_MESSAGE_CHARS = 500

_SEGMENT = re.compile(r"[A-Za-z0-9_.-]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class GitHubError(HeroError):
    """A GitHub request failed for good.

    The message names the method, the path and the status (or the transport failure); it
    holds no header value and never the token.
    """

    def __init__(
        self, message: str, *, method: str = "", path: str = "", status: int | None = None
    ) -> None:
        super().__init__(message)
        self.method = method
        """The HTTP method of the failed request ("" when no request was made)."""
        self.path = path
        """Its path and query, without the host."""
        self.status = status
        """GitHub's last answer status; None when there was none (dropped, timed out)."""


@dataclass(frozen=True)
class Retry:
    """How long the client keeps trying before a :class:`GitHubError`."""

    max_attempts: int = 6
    """Tries of one request that fails with a 5xx, a dropped connection or a timeout."""
    backoff_base_s: float = 1.0
    """The wait after the first failed try; it doubles after each next one (with jitter)."""
    backoff_max_s: float = 60.0
    """The cap on one wait between two tries."""
    max_wait_s: float = 3600.0
    """The cap on one wait for a rate limit to reset."""
    max_waits: int = 5
    """Rate-limit waits for one request before it fails (a wait is not a failed try)."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.max_waits < 0:
            raise ValueError("Retry: max_attempts must be at least 1 and max_waits at least 0")
        if min(self.backoff_base_s, self.backoff_max_s, self.max_wait_s) < 0:
            raise ValueError("Retry: waits cannot be negative")


DEFAULT_RETRY = Retry()


class GitHub:
    """One repository (``OWNER/NAME``) through GitHub's REST API at ``api_url``.

    ``token`` None (or empty) sends no ``Authorization`` header. ``sleep`` and ``on_wait``
    let a caller (or a test) see and shape the waits. Not thread-safe: one per thread.
    """

    def __init__(
        self,
        api_url: str,
        token: str | None,
        repo: str,
        *,
        retry: Retry = DEFAULT_RETRY,
        sleep: Callable[[float], None] = time.sleep,
        on_wait: Callable[[str], None] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        import httpx2  # heavy: imported when a client is made, not when hero starts

        self._base = _api_base(api_url)
        self._origin = _origin(self._base)
        owner, name = _repo_parts(repo)
        self.repo = repo
        """``OWNER/NAME`` as given."""
        self._owner = owner
        self._repo_path = f"/repos/{quote(owner, safe='')}/{quote(name, safe='')}"
        self._token = (token or "").strip() or None  # a token read from a file ends in "\n"
        if self._token is not None and any(c in self._token for c in "\r\n\0 "):
            raise ValueError("the GitHub token holds a space, line break or NUL: copy it again")
        self._retry = retry
        self._sleep = sleep
        self._on_wait = on_wait
        self._cache: dict[str, tuple[str, bytes, str | None]] = {}
        self._httpx = httpx2
        self._client = httpx2.Client(
            headers={
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": f"hero/{__version__}",
            },
            timeout=httpx2.Timeout(timeout_s),
            # A redirect would carry the token to wherever it points: refused, not followed.
            follow_redirects=False,
            # A proxy from the environment would read the token over plain http; over https
            # it only tunnels, and a GitHub Enterprise behind a proxy needs it.
            trust_env=self._origin[0] == "https",
        )

    # ------------------------------------------------------------------------- issues

    def open_issues(self, label: str) -> list[dict[str, Any]]:
        """Every open issue with ``label`` (all pages), pull requests left out."""
        query: dict[str, str | int] = {"state": "open", "labels": label, "per_page": PER_PAGE}
        items = self._pages(f"{self._repo_path}/issues", query)
        return [item for item in items if "pull_request" not in item]

    def issue(self, number: int) -> dict[str, Any]:
        return self._get_object(f"{self._repo_path}/issues/{_number(number)}")

    def comments(self, number: int) -> list[dict[str, Any]]:
        """Every comment of issue ``number``, oldest first (all pages)."""
        path = f"{self._repo_path}/issues/{_number(number)}/comments"
        return self._pages(path, {"per_page": PER_PAGE})

    def add_comment(self, number: int, body: str) -> dict[str, Any]:
        path = f"{self._repo_path}/issues/{_number(number)}/comments"
        return self._object(
            "POST", path, self._send("POST", self._url(path), {"body": body}).content
        )

    def add_labels(self, number: int, labels: Sequence[str]) -> None:
        if isinstance(labels, str):
            raise TypeError("add_labels takes a sequence of label names, not one string")
        path = f"{self._repo_path}/issues/{_number(number)}/labels"
        self._send("POST", self._url(path), {"labels": list(labels)})

    def remove_label(self, number: int, label: str) -> None:
        """Take ``label`` off issue ``number``; a label the issue does not have is fine."""
        path = f"{self._repo_path}/issues/{_number(number)}/labels/{quote(label, safe='')}"
        self._send("DELETE", self._url(path), accept=frozenset({404}))

    # ------------------------------------------------------------------------- pulls

    def find_open_pull(self, head_branch: str) -> dict[str, Any] | None:
        """The open pull request from ``head_branch`` of this repository, or None."""
        query: dict[str, str | int] = {
            "state": "open",
            "head": f"{self._owner}:{head_branch}",
            "per_page": PER_PAGE,
        }
        for pull in self._pages(f"{self._repo_path}/pulls", query):
            head = pull.get("head")
            if not isinstance(head, dict) or head.get("ref") in (None, head_branch):
                return pull
        return None

    def merged_pull(self, head_branch: str) -> bool:
        """Whether a pull request from ``head_branch`` of this repository has been merged
        (closed with a ``merged_at``)."""
        query: dict[str, str | int] = {
            "state": "closed",
            "head": f"{self._owner}:{head_branch}",
            "per_page": PER_PAGE,
        }
        for pull in self._pages(f"{self._repo_path}/pulls", query):
            head = pull.get("head")
            if isinstance(head, dict) and head.get("ref") not in (None, head_branch):
                continue
            if pull.get("merged_at") or pull.get("merged") is True:
                return True
        return False

    def create_pull(self, *, title: str, body: str, head: str, base: str) -> dict[str, Any]:
        path = f"{self._repo_path}/pulls"
        payload = {"title": title, "body": body, "head": head, "base": base}
        return self._object("POST", path, self._send("POST", self._url(path), payload).content)

    def pull(self, number: int) -> dict[str, Any]:
        """Pull request ``number``: its ``state`` (open, closed), ``merged``, ``head``."""
        return self._get_object(f"{self._repo_path}/pulls/{_number(number)}")

    def reviews(self, number: int) -> list[dict[str, Any]]:
        """The reviews of pull request ``number``, oldest first."""
        path = f"{self._repo_path}/pulls/{_number(number)}/reviews"
        return self._pages(path, {"per_page": PER_PAGE})

    def review_comments(self, number: int) -> list[dict[str, Any]]:
        """The review (line) comments of pull request ``number``, replies too."""
        path = f"{self._repo_path}/pulls/{_number(number)}/comments"
        return self._pages(path, {"per_page": PER_PAGE})

    def reply_to_review_comment(self, number: int, comment_id: int, body: str) -> dict[str, Any]:
        """A reply in the thread of review comment ``comment_id`` of pull request ``number``."""
        path = f"{self._repo_path}/pulls/{_number(number)}/comments/{_number(comment_id)}/replies"
        return self._object(
            "POST", path, self._send("POST", self._url(path), {"body": body}).content
        )

    def check_runs(self, sha: str) -> list[dict[str, Any]]:
        """The check runs on commit ``sha`` (GitHub keeps the latest of each name)."""
        path = f"{self._repo_path}/commits/{_sha(sha)}/check-runs"
        found = self._get_object(path + f"?per_page={PER_PAGE}").get("check_runs")
        return [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []

    def statuses(self, sha: str) -> list[dict[str, Any]]:
        """The commit statuses on ``sha``: the latest of each context (the combined status)."""
        path = f"{self._repo_path}/commits/{_sha(sha)}/status"
        found = self._get_object(path + f"?per_page={PER_PAGE}").get("statuses")
        return [s for s in found if isinstance(s, dict)] if isinstance(found, list) else []

    def permission(self, user: str) -> str:
        """``user``'s role on this repository: admin, maintain, write, triage, read or none
        (GitHub's ``role_name`` when it gives one, else its ``permission``). A user GitHub
        does not know as a collaborator has none."""
        if not _SEGMENT.fullmatch(user):
            return "none"
        path = f"{self._repo_path}/collaborators/{quote(user, safe='')}/permission"
        try:
            found = self._get_object(path)
        except GitHubError as exc:
            if exc.status == 404:
                return "none"
            raise
        role = found.get("role_name") or found.get("permission")
        return str(role).lower() if isinstance(role, str) and role else "none"

    # ------------------------------------------------------------------------- repository

    def default_branch(self) -> str:
        branch = self._get_object(self._repo_path).get("default_branch")
        if not isinstance(branch, str) or not branch:
            raise GitHubError(
                f"GitHub GET {self._repo_path} gave no default_branch",
                method="GET",
                path=self._repo_path,
                status=200,
            )
        return branch

    # ------------------------------------------------------------------------- lifecycle

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> GitHub:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------------- reading

    def _get_object(self, path: str) -> dict[str, Any]:
        content, _ = self._get(self._url(path))
        return self._object("GET", path, content)

    def _pages(self, path: str, query: dict[str, str | int]) -> list[dict[str, Any]]:
        """Every item of a paginated list, following ``Link: rel="next"`` on our origin only."""
        url: str | None = self._url(path, query)
        seen: set[str] = set()
        items: list[dict[str, Any]] = []
        while url is not None:
            if url in seen:
                raise self._error("GET", url, None, "its pages link back to an earlier one")
            seen.add(url)
            content, next_url = self._get(url)
            page = _parse(content)
            if not isinstance(page, list) or not all(isinstance(i, dict) for i in page):
                raise self._error("GET", url, 200, "the answer is not a list of objects")
            items.extend(page)
            url = next_url
        return items

    def _get(self, url: str) -> tuple[bytes, str | None]:
        """A conditional GET: (body, next page's URL), the remembered ones on a 304."""
        cached = self._cache.pop(url, None)
        headers = {"If-None-Match": cached[0]} if cached is not None else {}
        response = self._send("GET", url, headers=headers, accept=frozenset({304}))
        if response.status_code == 304:
            if cached is None:
                raise self._error("GET", url, 304, "not modified, but nothing was remembered")
            self._cache[url] = cached  # back in, as the most recently used
            return cached[1], cached[2]
        next_url = response.links.get("next", {}).get("url")
        if next_url is not None:
            # A relative link is resolved against this page; any link leaving our origin is
            # refused, before anything (the token above all) is sent to it.
            next_url = str(response.request.url.join(next_url))
            if not self._same_origin(next_url):
                raise self._error(
                    "GET", url, 200, "its next page link leads to another host: not followed"
                )
        etag = response.headers.get("etag")
        if etag:
            self._cache[url] = (etag, response.content, next_url)
            while len(self._cache) > ETAG_CACHE_SIZE:
                del self._cache[next(iter(self._cache))]
        return response.content, next_url

    def _object(self, method: str, path: str, content: bytes) -> dict[str, Any]:
        value = _parse(content)
        if not isinstance(value, dict):
            raise self._error(method, self._url(path), 200, "the answer is not a JSON object")
        return value

    # ------------------------------------------------------------------------- sending

    def _url(self, path: str, query: dict[str, str | int] | None = None) -> str:
        return self._base + path + (f"?{urlencode(query)}" if query else "")

    def _same_origin(self, url: str) -> bool:
        try:
            return _origin(url) == self._origin
        except ValueError:
            return False

    def _send(
        self,
        method: str,
        url: str,
        payload: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        accept: frozenset[int] = frozenset(),
    ) -> httpx2.Response:
        """One request, tried again on a 5xx or a lost connection and held over a rate limit.

        Gives back a 2xx answer, or one whose status is in ``accept``; raises GitHubError
        for anything else.
        """
        if not self._same_origin(url):  # the gate every request passes; names no foreign URL
            raise GitHubError(
                f"GitHub {method}: refused a request to another host than the API URL's",
                method=method,
            )
        sent = dict(headers or {})
        if self._token is not None:
            sent["Authorization"] = f"Bearer {self._token}"
        failures = waits = 0
        status: int | None
        while True:
            try:
                response = self._client.request(method, url, headers=sent, json=payload)
            except self._httpx.TransportError as exc:
                failures += 1
                trouble, status = f"no answer ({type(exc).__name__})", None
            else:
                status = response.status_code
                if status >= 500:
                    failures += 1
                    trouble = f"answered {status}"
                else:
                    wait = self._rate_limit_wait(response)
                    if wait is None:
                        return self._checked(method, url, response, accept)
                    waits += 1
                    if waits > self._retry.max_waits:
                        raise self._error(
                            method, url, status, f"still rate limited after {waits - 1} waits"
                        )
                    self._wait(wait[0], wait[1])
                    continue
            if failures >= self._retry.max_attempts:
                raise self._error(
                    method, url, status, f"failed {failures} times; the last: {trouble}"
                )
            delay = self._backoff(failures)
            self._wait(
                delay,
                f"GitHub {method} {self._scrub(_shown(url))} {trouble}: trying again in {delay:.1f} s "
                f"(try {failures + 1} of {self._retry.max_attempts})",
            )

    def _checked(
        self, method: str, url: str, response: httpx2.Response, accept: frozenset[int]
    ) -> httpx2.Response:
        status = response.status_code
        if 200 <= status < 300 or status in accept:
            return response
        if 300 <= status < 400:
            raise self._error(
                method,
                url,
                status,
                "is a redirect, which hero does not follow so that the token goes to the "
                "API host only: set the API URL to where GitHub's API really is",
            )
        hint = {
            401: " (check the token: GITHUB_TOKEN or config.local.yaml)",
            403: f" (can the token reach {self.repo}?)",
            404: f" (does {self.repo} exist, and can the token see it?)",
        }.get(status, "")
        message = self._scrub(_github_message(response.content))  # GitHub's words: scrubbed
        raise self._error(method, url, status, message + hint)

    def _rate_limit_wait(self, response: httpx2.Response) -> tuple[float, str] | None:
        """(seconds, what to tell) when ``response`` says to wait for a rate limit."""
        status = response.status_code
        if status not in (403, 429):
            return None
        limit = self._retry.max_wait_s
        retry_after = _seconds(response.headers.get("retry-after"))
        if retry_after is not None:
            wait = min(max(retry_after, 1.0), limit)
            return wait, f"GitHub secondary rate limit: waiting {wait:.0f} s as asked"
        if response.headers.get("x-ratelimit-remaining") == "0":
            reset = _seconds(response.headers.get("x-ratelimit-reset"))
            if reset is not None:
                wait = min(max(reset - time.time() + 1.0, 1.0), limit)
                return wait, f"GitHub rate limit: waiting {wait:.0f} s until the reset"
        elif status == 403 and "rate limit" not in _github_message(response.content).lower():
            return None  # a plain 403: no access
        wait = min(SECONDARY_WAIT_S, limit)
        return wait, f"GitHub secondary rate limit: waiting {wait:.0f} s"

    def _backoff(self, failures: int) -> float:
        retry = self._retry
        ceiling = min(retry.backoff_max_s, retry.backoff_base_s * 2.0 ** min(failures - 1, 60))
        return ceiling * random.uniform(0.5, 1.0)  # jitter: many watchers do not come back at once

    def _wait(self, seconds: float, message: str) -> None:
        if self._on_wait is not None:
            self._on_wait(message)
        self._sleep(seconds)

    def _error(self, method: str, url: str, status: int | None, what: str) -> GitHubError:
        path = self._scrub(_shown(url))
        said = f"GitHub {method} {path}" + (f" answered {status}" if status is not None else "")
        return GitHubError(f"{said}: {what}", method=method, path=path, status=status)

    def _scrub(self, text: str) -> str:
        """``text`` (a path, or words of GitHub's) without the token, should it hold it."""
        return text.replace(self._token, REDACTED) if self._token else text


# ----------------------------------------------------------------------------- helpers


def _api_base(api_url: str) -> str:
    url = api_url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(
            f"GitHub API URL {api_url!r} is not an http(s) URL with a host: set GITHUB_API_URL "
            "to e.g. https://api.github.com or https://HOST/api/v3"
        )
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(
            f"GitHub API URL {api_url!r} holds a query, fragment or user: give scheme, host "
            "and path only (the token comes from GITHUB_TOKEN or config.local.yaml)"
        )
    return url


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username or parts.password:
        raise ValueError(f"not an http(s) URL on a host: {url!r}")
    return scheme, parts.hostname.lower(), parts.port or _DEFAULT_PORTS[scheme]


def _repo_parts(repo: str) -> tuple[str, str]:
    parts = repo.split("/")
    if len(parts) != 2 or not all(_SEGMENT.fullmatch(p) and p not in (".", "..") for p in parts):
        raise ValueError(
            f"GitHub repository {repo!r} is not OWNER/NAME (letters, digits, '.', '_', '-')"
        )
    return parts[0], parts[1]


def _number(number: int) -> int:
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"an issue or pull request number is a positive integer, not {number!r}")
    return number


def _sha(sha: str) -> str:
    if not re.fullmatch(r"[0-9a-fA-F]{7,64}", sha or ""):
        raise ValueError(f"a commit is named by its hex sha, not {sha!r}")
    return sha


def _shown(url: str) -> str:
    """The path and query of ``url``: what a message names (the host is known)."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if number == number and abs(number) != float("inf") else None


def _parse(content: bytes) -> Any:
    try:
        return json.loads(content) if content else None
    except ValueError:
        return None


def _github_message(content: bytes) -> str:
    """GitHub's own ``message`` of an error answer, with its validation errors if any."""
    value = _parse(content)
    if not isinstance(value, dict):
        return "no message"
    message = str(value.get("message") or "no message")
    errors = value.get("errors")
    if isinstance(errors, list):
        details = [
            str(e.get("message") or e.get("code") or "") if isinstance(e, dict) else str(e)
            for e in errors
        ]
        if any(details):
            message += " (" + "; ".join(d for d in details if d) + ")"
    return message[:MAX_MESSAGE_CHARS]
