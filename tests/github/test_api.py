"""The GitHub REST client (hero.github.api) against hero's fake GitHub, over real HTTP.

Waits are recorded, not slept: every test runs in well under a second.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fakegithub import FakeGitHub

from hero import __version__
from hero.github.api import GitHub, GitHubError, Retry

TOKEN = "ghp_" + "S3cr3tT0k3n" * 3
REPO = "acme/app"
ISSUES = "/repos/acme/app/issues"


@dataclass
class Waits:
    """What a client would have slept, and what it said before each wait."""

    slept: list[float] = field(default_factory=list)
    told: list[str] = field(default_factory=list)


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN) as fake:
        fake.add_repo(REPO)
        yield fake


@pytest.fixture
def other() -> Iterator[FakeGitHub]:
    """Another host: it must never hear from the client."""
    with FakeGitHub() as fake:
        fake.add_repo(REPO)
        yield fake


@pytest.fixture
def waits() -> Waits:
    return Waits()


Connect = Callable[..., GitHub]


@pytest.fixture
def connect(gh: FakeGitHub, waits: Waits) -> Iterator[Connect]:
    """A client of ``gh`` (or of ``api_url=``) with recorded waits; closed after the test."""
    made: list[GitHub] = []

    def make(**options: Any) -> GitHub:
        api_url = options.pop("api_url", gh.api_url)
        token = options.pop("token", TOKEN)
        repo = options.pop("repo", REPO)
        client = GitHub(
            api_url, token, repo, sleep=waits.slept.append, on_wait=waits.told.append, **options
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def issue_requests(gh: FakeGitHub) -> list[str]:
    return [r.path for r in gh.requests if r.path.startswith(ISSUES + "?")]


# ----------------------------------------------------------------------------- listing


def test_open_issues_reads_every_page_and_leaves_pull_requests_out(
    gh: FakeGitHub, connect: Connect
) -> None:
    wanted = set()
    for i in range(250):
        wanted.add(gh.add_issue(REPO, title=f"story {i}", labels=["hero"])["number"])
        if i % 12 == 0:
            gh.add_issue(REPO, title=f"pull {i}", labels=["hero"], is_pull=True)
    gh.add_issue(REPO, title="not for hero", labels=["bug"])
    gh.add_issue(REPO, title="done", labels=["hero"], state="closed")

    found = connect().open_issues("hero")

    assert sorted(i["number"] for i in found) == sorted(wanted)
    assert len(found) == 250 and not any("pull_request" in i for i in found)
    pages = issue_requests(gh)
    assert len(pages) == 3  # 271 labelled and open (21 of them pulls), 100 a page
    assert all("state=open" in p and "labels=hero" in p and "per_page=100" in p for p in pages)
    assert pages[1].endswith("page=2") and pages[2].endswith("page=3")


def test_a_second_poll_is_conditional_and_costs_no_rate_limit(
    gh: FakeGitHub, connect: Connect
) -> None:
    for i in range(150):
        gh.add_issue(REPO, title=f"story {i}", labels=["hero"])
    client = connect()
    first = client.open_issues("hero")
    titles = [i["title"] for i in first]
    first[0]["title"] = "changed by the caller"  # the remembered answer is not the caller's
    remaining = gh.rate_limit_remaining
    asked = len(gh.requests)

    second = client.open_issues("hero")

    assert [i["title"] for i in second] == titles
    assert [i["title"] for i in client.open_issues("hero")] == titles  # still remembered
    again = gh.requests[asked:]
    assert len(again) == 4 and all("if-none-match" in r.headers for r in again)
    assert gh.rate_limit_remaining == remaining  # every page answered 304


def test_an_edited_issue_changes_the_etag_and_is_read_again(
    gh: FakeGitHub, connect: Connect
) -> None:
    number = gh.add_issue(REPO, title="before", labels=["hero"])["number"]
    client = connect()
    assert [i["title"] for i in client.open_issues("hero")] == ["before"]
    remaining = gh.rate_limit_remaining

    gh.edit_issue(REPO, number, title="after")
    assert [i["title"] for i in client.open_issues("hero")] == ["after"]
    assert gh.rate_limit_remaining == remaining - 1  # a 200, not a 304

    gh.edit_issue(REPO, number, labels=["other"])
    assert client.open_issues("hero") == []


# ----------------------------------------------------------------------------- waiting


def test_a_rate_limit_is_waited_out_until_the_reset_and_is_not_a_failed_try(
    gh: FakeGitHub, connect: Connect, waits: Waits
) -> None:
    gh.add_issue(REPO, title="story", labels=["hero"])
    gh.rate_limit_next(reset_in_s=42)
    gh.fail_next(1, status=500)  # the one failure allowed: the wait before it was not one

    found = connect(retry=Retry(max_attempts=2)).open_issues("hero")

    assert [i["title"] for i in found] == ["story"]
    assert len(waits.slept) == 2 and 42 <= waits.slept[0] <= 45  # the reset, + 1 s
    assert "rate limit" in waits.told[0] and "until the reset" in waits.told[0]
    assert len(issue_requests(gh)) == 3


@pytest.mark.parametrize("status", [403, 429])
def test_a_secondary_rate_limit_waits_as_retry_after_asks(
    gh: FakeGitHub, connect: Connect, waits: Waits, status: int
) -> None:
    gh.add_issue(REPO, title="story", labels=["hero"])
    gh.rate_limit_next(reset_in_s=7, secondary=True, status=status)

    assert len(connect().open_issues("hero")) == 1
    assert waits.slept == [7.0]
    assert "secondary rate limit" in waits.told[0]


def test_a_rate_limit_wait_is_capped_and_the_waits_are_counted(
    gh: FakeGitHub, connect: Connect, waits: Waits
) -> None:
    gh.rate_limit_next(reset_in_s=10_000, n=3)
    client = connect(retry=Retry(max_wait_s=5, max_waits=2))

    with pytest.raises(GitHubError) as caught:
        client.default_branch()

    assert waits.slept == [5.0, 5.0]
    assert caught.value.status == 403 and "rate limited" in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_a_5xx_storm_is_survived_with_growing_capped_backoff(
    gh: FakeGitHub, connect: Connect, waits: Waits
) -> None:
    gh.add_issue(REPO, title="story", labels=["hero"])
    gh.fail_next(5, status=502)

    found = connect(retry=Retry(backoff_base_s=1.0, backoff_max_s=6.0)).open_issues("hero")

    assert [i["title"] for i in found] == ["story"]
    assert len(issue_requests(gh)) == 6
    ceilings = [1.0, 2.0, 4.0, 6.0, 6.0]
    assert len(waits.slept) == 5
    for slept, ceiling in zip(waits.slept, ceilings, strict=True):
        assert ceiling / 2 <= slept <= ceiling  # jitter keeps the upper half
    assert waits.slept != ceilings  # jittered: watchers do not all come back at once
    assert all("502" in told and "trying again" in told for told in waits.told)


def test_dropped_connections_are_survived(gh: FakeGitHub, connect: Connect, waits: Waits) -> None:
    gh.add_issue(REPO, title="story", labels=["hero"])
    gh.drop_next(3)

    assert len(connect().open_issues("hero")) == 1
    assert len(issue_requests(gh)) == 4 and len(waits.slept) == 3


@pytest.mark.parametrize("fault", ["fail", "drop"])
def test_too_many_failures_end_in_an_error_that_does_not_hold_the_token(
    gh: FakeGitHub, connect: Connect, waits: Waits, fault: str
) -> None:
    if fault == "fail":
        gh.fail_next(10, status=503)
    else:
        gh.drop_next(10)

    with pytest.raises(GitHubError) as caught:
        connect(retry=Retry(max_attempts=3)).open_issues("hero")

    error = caught.value
    assert len(gh.requests) == 3 and len(waits.slept) == 2
    assert error.method == "GET" and error.path.startswith(ISSUES + "?state=open")
    assert str(error).startswith(f"GitHub GET {ISSUES}?state=open")
    assert "failed 3 times" in str(error)
    assert error.status == (503 if fault == "fail" else None)
    assert TOKEN not in str(error) and TOKEN not in repr(error.args)
    assert not any(TOKEN in told for told in waits.told)


@pytest.mark.slow
def test_a_timeout_is_tried_again_then_reported(connect: Connect, waits: Waits) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        port = silent.getsockname()[1]
        client = connect(
            api_url=f"http://127.0.0.1:{port}", timeout_s=0.2, retry=Retry(max_attempts=2)
        )
        with pytest.raises(GitHubError) as caught:
            client.issue(1)
    assert "Timeout" in str(caught.value) and len(waits.slept) == 1


def test_a_4xx_is_an_error_at_once_with_github_s_message(
    gh: FakeGitHub, connect: Connect, waits: Waits
) -> None:
    client = connect()
    with pytest.raises(GitHubError) as caught:
        client.issue(404)
    assert caught.value.status == 404 and "Not Found" in str(caught.value)
    assert f"GET {ISSUES}/404 answered 404" in str(caught.value)
    assert len(gh.requests) == 1 and waits.slept == []

    with pytest.raises(GitHubError) as caught:
        connect(token="ghp_wrong_wrong_wrong").default_branch()
    assert caught.value.status == 401 and "Bad credentials" in str(caught.value)
    assert "ghp_wrong" not in str(caught.value)


# ----------------------------------------------------------------------------- the token's way


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_to_another_host_is_refused(
    gh: FakeGitHub, other: FakeGitHub, connect: Connect, status: int
) -> None:
    gh.redirect_next(f"{other.api_url}{ISSUES}?state=open", status=status)

    with pytest.raises(GitHubError) as caught:
        connect().open_issues("hero")

    assert caught.value.status == status and "redirect" in str(caught.value)
    assert other.requests == []
    assert other.api_url not in str(caught.value)  # no header value (Location) in the error


def test_a_next_page_on_another_host_is_not_followed(
    gh: FakeGitHub, other: FakeGitHub, connect: Connect
) -> None:
    for i in range(150):
        gh.add_issue(REPO, title=f"story {i}", labels=["hero"])
    gh.link_base = other.api_url

    with pytest.raises(GitHubError) as caught:
        connect().open_issues("hero")

    assert "next page link leads to another host" in str(caught.value)
    assert caught.value.path == f"{ISSUES}?state=open&labels=hero&per_page=100"  # the page read
    assert len(gh.requests) == 1 and other.requests == []


def test_no_request_at_all_goes_to_another_host(
    gh: FakeGitHub, other: FakeGitHub, connect: Connect
) -> None:
    # The last gate, under the pagination check: whatever URL a future method builds (one
    # taken from an answer's body, say), a request off the API host is never sent.
    client = connect()
    for url in (f"{other.api_url}/repos/acme/app", f"https://127.0.0.1:{gh.port}/repos"):
        with pytest.raises(GitHubError, match="another host"):
            client._send("GET", url)
    assert other.requests == [] and gh.requests == []


def test_the_token_and_hero_s_headers_go_to_the_api_host_on_every_request(
    gh: FakeGitHub, connect: Connect
) -> None:
    number = gh.add_issue(REPO, title="story", labels=["hero"])["number"]
    client = connect()
    client.open_issues("hero")
    client.issue(number)
    client.add_comment(number, "On it.")
    client.add_labels(number, ["hero:running"])
    client.remove_label(number, "hero")
    client.find_open_pull("hero/story")
    client.default_branch()

    assert len(gh.requests) == 7
    for request in gh.requests:
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        assert request.headers["accept"] == "application/vnd.github+json"
        assert request.headers["x-github-api-version"] == "2022-11-28"
        assert request.headers["user-agent"] == f"hero/{__version__}"


def test_without_a_token_no_authorization_header_is_sent(connect: Connect) -> None:
    with FakeGitHub() as public:
        public.add_issue(REPO, title="story", labels=["hero"])
        assert len(connect(api_url=public.api_url, token=None).open_issues("hero")) == 1
        assert len(connect(api_url=public.api_url, token="").open_issues("hero")) == 1
        assert all("authorization" not in r.headers for r in public.requests)


def test_an_api_url_with_a_path_as_on_github_enterprise(connect: Connect) -> None:
    with FakeGitHub(token=TOKEN, path_prefix="/api/v3") as ghe:
        for i in range(120):
            ghe.add_issue(REPO, title=f"story {i}", labels=["hero"])
        assert ghe.api_url.endswith("/api/v3")
        client = connect(api_url=ghe.api_url + "/")
        assert len(client.open_issues("hero")) == 120
        assert client.default_branch() == "main"
        assert len(ghe.requests) == 3
        assert all(r.path.startswith("/api/v3/repos/acme/app") for r in ghe.requests)


# ----------------------------------------------------------------------------- round trips


def test_comments_round_trip_across_pages(gh: FakeGitHub, connect: Connect) -> None:
    number = gh.add_issue(REPO, title="story")["number"]
    for i in range(130):
        gh.add_comment(REPO, number, f"human {i}", author="alice")
    client = connect()

    made = client.add_comment(number, "hero: started")

    assert made["body"] == "hero: started" and made["user"]["login"] == gh.bot_login
    bodies = [c["body"] for c in client.comments(number)]
    assert bodies == [f"human {i}" for i in range(130)] + ["hero: started"]
    assert [c["body"] for c in gh.comments(REPO, number)][-1] == "hero: started"
    assert client.issue(number)["comments"] == 131


def test_pull_requests_are_found_by_head_branch_and_created(
    gh: FakeGitHub, connect: Connect
) -> None:
    gh.add_pull(REPO, head="someone-else")
    gh.add_pull(REPO, head="hero/story-1", state="closed")
    client = connect()
    assert client.find_open_pull("hero/story-1") is None
    assert any("head=acme%3Ahero%2Fstory-1" in r.path for r in gh.requests)

    made = client.create_pull(title="Story 1", body="Closes #1", head="hero/story-1", base="main")

    assert made["head"]["ref"] == "hero/story-1" and made["base"]["ref"] == "main"
    found = client.find_open_pull("hero/story-1")
    assert found is not None and found["number"] == made["number"]
    assert found["html_url"] == made["html_url"]
    assert [p["number"] for p in gh.pulls(REPO)][-1] == made["number"]
    with pytest.raises(GitHubError) as caught:  # GitHub's 422, with its reason
        client.create_pull(title="Again", body="", head="hero/story-1", base="main")
    assert caught.value.status == 422 and "already exists" in str(caught.value)


def test_labels_round_trip_and_an_absent_label_is_fine_to_remove(
    gh: FakeGitHub, connect: Connect
) -> None:
    number = gh.add_issue(REPO, title="story", labels=["hero"])["number"]
    client = connect()

    client.add_labels(number, ["hero:running", "needs review/ok"])
    assert gh.labels(REPO, number) == ["hero", "hero:running", "needs review/ok"]
    client.remove_label(number, "needs review/ok")  # quoted: one path segment
    client.remove_label(number, "hero")
    assert gh.labels(REPO, number) == ["hero:running"]

    client.remove_label(number, "never-there")
    assert gh.labels(REPO, number) == ["hero:running"]
    assert gh.requests[-1].path == f"{ISSUES}/{number}/labels/never-there"


def test_the_default_branch(gh: FakeGitHub, connect: Connect) -> None:
    gh.add_repo(REPO, default_branch="trunk")
    assert connect().default_branch() == "trunk"
    assert gh.requests[-1].path == "/repos/acme/app"


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "repo",
    ["acme", "acme/app/x", "../app", "acme/..", "acme/a b", "acme/app?x=1", "acme/app#x", "",
     "acme/", "/app", "acme/app%2F..", "acme\\app"],
)  # fmt: skip
def test_a_bad_repository_name_is_refused(gh: FakeGitHub, repo: str) -> None:
    with pytest.raises(ValueError, match="OWNER/NAME"):
        GitHub(gh.api_url, TOKEN, repo)


@pytest.mark.parametrize(
    "api_url", ["api.github.com", "ftp://api.github.com", "https://", "https://u:p@host/api"]
)
def test_a_bad_api_url_is_refused(api_url: str) -> None:
    with pytest.raises(ValueError, match="GitHub API URL"):
        GitHub(api_url, TOKEN, REPO)


def test_a_bad_issue_number_is_refused_before_anything_is_sent(
    gh: FakeGitHub, connect: Connect
) -> None:
    client = connect()
    for bad in (0, -1, True):
        with pytest.raises(ValueError, match="positive integer"):
            client.issue(bad)
    assert gh.requests == []


def test_github_s_words_are_scrubbed_of_the_token(gh: FakeGitHub, connect: Connect) -> None:
    gh.fail_next(1, status=400, message=f"the token {TOKEN} is not welcome here")
    with pytest.raises(GitHubError) as caught:
        connect().issue(1)
    assert TOKEN not in str(caught.value)
    assert "the token [redacted] is not welcome here" in str(caught.value)


def test_a_token_read_from_a_file_loses_its_newline(gh: FakeGitHub, connect: Connect) -> None:
    connect(token=TOKEN + "\n").default_branch()
    assert gh.requests[-1].headers["authorization"] == f"Bearer {TOKEN}"
    with pytest.raises(ValueError, match="copy it again"):
        GitHub(gh.api_url, "ghp_two\nlines", REPO)


def test_the_fake_keeps_what_the_api_changed_for_the_test_to_see(
    gh: FakeGitHub, connect: Connect
) -> None:
    number = gh.add_issue(REPO, title="story", body="Do it.", author="alice")["number"]
    gh.edit_issue(REPO, number, state="closed")
    client = connect()
    assert client.open_issues("") == []
    seen = client.issue(number)
    assert (seen["state"], seen["body"], seen["user"]["login"]) == ("closed", "Do it.", "alice")
    assert seen["author_association"] == "OWNER"
    assert [i["number"] for i in gh.issues(REPO)] == [number]
    with pytest.raises(KeyError):
        gh.issue(REPO, number + 1)
    with pytest.raises(GitHubError) as caught:
        connect(repo="acme/ghost").default_branch()
    assert caught.value.status == 404


# ----------------------------------------------------------------------------- pull requests


def test_reviews_review_comments_replies_checks_statuses_and_permissions(
    gh: FakeGitHub, connect: Connect
) -> None:
    pull = gh.add_pull(REPO, head="hero/gh-1")["number"]
    gh.set_head(REPO, pull, "a" * 40)
    gh.set_permission(REPO, "mia", "maintain")
    review = gh.add_review(
        REPO, pull, author="mia", comments=[{"path": "a.py", "line": 3, "body": "here"}]
    )
    gh.add_check_run(REPO, "a" * 40, "tests", conclusion="failure", text="boom")
    gh.add_status(REPO, "a" * 40, "ci/docs", "pending")
    client = connect()

    assert client.pull(pull)["head"]["sha"] == "a" * 40
    [got] = client.reviews(pull)
    assert got["state"] == "CHANGES_REQUESTED" and got["user"]["login"] == "mia"
    [comment] = client.review_comments(pull)
    assert (comment["path"], comment["line"]) == ("a.py", 3)
    assert comment["pull_request_review_id"] == review["id"]
    reply = client.reply_to_review_comment(pull, comment["id"], "done")
    assert reply["in_reply_to_id"] == comment["id"] and reply["path"] == "a.py"
    [run] = client.check_runs("a" * 40)
    assert (run["name"], run["conclusion"], run["output"]["text"]) == ("tests", "failure", "boom")
    assert [s["state"] for s in client.statuses("a" * 40)] == ["pending"]
    assert client.permission("mia") == "maintain"
    assert client.permission("stranger") == "none"
    before = len(gh.requests)
    assert client.permission("../../x") == "none"  # not a login: not asked at all
    with pytest.raises(ValueError, match="hex sha"):
        client.check_runs("HEAD/../../x")
    assert len(gh.requests) == before
