"""Report-back: `report_sweep` tells GitHub how stories from issues ended.

Real git (the target repository with a bare repository as its `origin`), real HTTP to
hero's fake GitHub (`tests/fakegithub.py`), run records and story files written as hero
writes them. Each test arranges a home, sweeps, and looks at the remote, the pull requests,
the comments and the labels.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from fakegithub import FakeGitHub
from helpers import SUB_IMPL, Log

from hero.cli import main
from hero.config.home import Config
from hero.config.sections import GitHubSettings
from hero.github.api import GitHub, Retry
from hero.github.defang import OwnIssue, defang, live_references
from hero.github.report import REPORTED_FILE, _push_env, report_sweep
from hero.llm.scripted import call, text
from hero.state import ReviewRecord, Round, RunState, Status, save_state
from hero.story.format import write_story

REPO = "acme/app"
TOKEN = "ghp_Zq9sEcReTt0kenV4lue7731xYz"
IN_PROGRESS, DONE, FAILED = "hero: in progress", "hero: done", "hero: failed"
VERIFY = [
    {
        "tier": "unit",
        "command": "python -m pytest -q",
        "exit_code": 0,
        "duration_s": 1.25,
        "timed_out": False,
        "tail": "",
    },
    {
        "tier": "unit",
        "command": "ruff check | tee out",
        "exit_code": 0,
        "duration_s": 0.5,
        "timed_out": False,
        "tail": "",
    },
]
AC = [{"ac": "`calc.sub(5, 3) == 2`", "satisfied": True, "commit": "abc1234"}]


@dataclass
class World:
    home: Path
    repo: Path
    remote: Path
    fake: FakeGitHub
    config: Config
    settings: GitHubSettings
    gh: GitHub
    log: Log = field(default_factory=Log)

    def sweep(self, gh: GitHub | None = None) -> None:
        report_sweep(self.home, gh or self.gh, self.settings, self.config, self.log)

    def pulls(self) -> list[dict[str, Any]]:
        return self.fake.pulls(REPO)

    def comments(self, number: int) -> list[str]:
        return [c["body"] for c in self.fake.comments(REPO, number)]

    def labels(self, number: int) -> set[str]:
        return set(self.fake.labels(REPO, number))

    def remote_sha(self, branch: str) -> str:
        out = git(self.remote, "for-each-ref", "--format=%(objectname)", f"refs/heads/{branch}")
        return out.strip()

    def writes(self) -> list[str]:
        """The requests that changed something on GitHub, as ``METHOD path``."""
        return [f"{r.method} {r.path}" for r in self.fake.requests if r.method != "GET"]


def client(api_url: str) -> GitHub:
    return GitHub(api_url, TOKEN, REPO, retry=Retry(max_attempts=1), sleep=lambda _s: None)


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN) as server:
        server.add_repo(REPO, default_branch="main")
        yield server


@pytest.fixture
def world(tmp_path: Path, target_repo: Path, fake: FakeGitHub) -> Iterator[World]:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(target_repo, "remote", "add", "origin", str(remote))
    home = tmp_path / "home"
    for sub in ("inbox", "done", "runs/state"):
        (home / sub).mkdir(parents=True)
    config = Config(home=home, target_repo=target_repo, secrets=(TOKEN,), github_token=TOKEN)
    settings = GitHubSettings(repo=REPO, label="hero", api_url=fake.api_url, token=TOKEN)
    gh = client(fake.api_url)
    yield World(home, target_repo, remote, fake, config, settings, gh)
    gh.close()


def new_issue(world: World, title: str = "Add sub()") -> int:
    return int(world.fake.add_issue(REPO, title=title, labels=["hero"])["number"])


def story_branch(world: World, story_id: str, message: str = "work") -> str:
    """A commit of the story's own on branch hero/<id> of the target repository."""
    tree = git(world.repo, "rev-parse", "main^{tree}").strip()
    sha = git(world.repo, "commit-tree", tree, "-p", "main", "-m", f"{story_id}: {message}")
    sha = sha.strip()
    git(world.repo, "update-ref", f"refs/heads/hero/{story_id}", sha)
    return sha


def gh_story(
    world: World,
    number: int,
    status: Status,
    *,
    rounds: list[Round] | None = None,
    error: str = "",
    runs: int = 1,
    finished_at: float = 1_712_345_678.0,
    repo: str = REPO,
    source: bool = True,
) -> RunState:
    """A gh-story's file (with its ``source``) and its run record, as hero leaves them."""
    story_id = f"gh-{number}"
    folder = world.home / ("done" if status == Status.PASSED else "inbox")
    meta: dict[str, Any] = {"id": story_id, "title": f"Issue {number}: add sub()"}
    if source:
        url = f"https://github.invalid/{repo}/issues/{number}"
        meta["source"] = {"repo": repo, "issue": number, "url": url, "author": "octocat"}
    body = "## Goal\n\nAdd sub.\n\n## Acceptance Criteria\n\n- [ ] `calc.sub(5, 3) == 2`\n"
    path = write_story(folder / f"{story_id}.md", meta, body).path
    head = story_branch(world, story_id)
    state = RunState(
        id=story_id,
        status=status,
        title=meta["title"],
        story_path=str(path),
        branch=f"hero/{story_id}",
        head_sha=head,
        rounds=rounds if rounds is not None else passed_rounds(),
        error=error,
        runs=runs,
        finished_at=None if status == Status.RUNNING else finished_at,
    )
    save_state(world.home, state)
    return state


def passed_rounds(summary: str = "Adds calc.sub with a test; all checks green.") -> list[Round]:
    red = {"passed": False, "commands": [{**VERIFY[0], "exit_code": 1}], "skipped_tiers": []}
    return [
        Round(
            round=1,
            verify=red,
            review=ReviewRecord("CHANGES_REQUESTED", "checks failed", short_circuited=True),
            feedback="**CHANGES_REQUESTED**: checks failed",
        ),
        Round(
            round=2,
            verify={"passed": True, "commands": VERIFY, "skipped_tiers": []},
            review=ReviewRecord("APPROVED", summary, ac_check=AC),
            feedback=f"**APPROVED**: {summary}",
        ),
    ]


def failed_rounds(feedback: str) -> list[Round]:
    return [
        Round(round=1, review=ReviewRecord("CHANGES_REQUESTED", "no"), feedback="first try: no"),
        Round(round=2, review=ReviewRecord("CHANGES_REQUESTED", "no"), feedback=feedback),
    ]


def forget(world: World) -> None:
    """Lose the local memory of reports, as after a crash or a new machine."""
    (world.home / REPORTED_FILE).unlink(missing_ok=True)


# --------------------------------------------------------------------------- passed


def test_a_passed_story_is_pushed_and_gets_one_pull_request_and_one_comment(world: World) -> None:
    n = new_issue(world)
    world.fake.edit_issue(REPO, n, labels=["hero", IN_PROGRESS])
    state = gh_story(world, n, Status.PASSED)

    world.sweep()

    assert world.remote_sha(f"hero/gh-{n}") == state.head_sha
    [pull] = world.pulls()
    assert pull["head"]["ref"] == f"hero/gh-{n}"
    assert pull["base"]["ref"] == "main"  # the repository's default branch
    assert pull["title"] == f"Issue {n}: add sub()"
    body = pull["body"]
    assert body.rstrip().endswith(f"Closes #{n}")
    assert "Adds calc.sub with a test; all checks green." in body  # the summary
    assert "Passed in round 2 (2 rounds in all)" in body
    assert "| 1 | failed (0/1) | CHANGES_REQUESTED (not reviewed: checks failed) |" in body
    assert "| 2 | passed (2/2) | APPROVED |" in body
    assert "| unit | `python -m pytest -q` | passed, 1.2 s |" in body  # verify per command
    assert "`ruff check \\| tee out`" in body  # a pipe does not break the table
    assert "| `calc.sub(5, 3) == 2` | yes | `abc1234` |" in body  # the acceptance check
    [comment] = world.comments(n)
    assert pull["html_url"] in comment
    assert f"<!-- hero:report gh-{n} passed run 1 at 1712345678 -->" in comment
    assert world.labels(n) == {"hero", DONE}
    reported = {"story": f"gh-{n}", "issue": n, "status": "passed", "pull": pull["html_url"]}
    assert ("reported", reported) in world.log.at("info")
    # the board links the pull request itself: its URL is in the report-back's record
    recorded = json.loads((world.home / REPORTED_FILE).read_text())
    assert recorded["pulls"] == {f"gh-{n}": pull["html_url"]}

    before = len(world.fake.requests)
    world.sweep()  # the memory says it was reported: not one request
    assert len(world.fake.requests) == before
    forget(world)
    world.sweep()  # without it, the marker on the issue says so: reads only
    assert all(r.method == "GET" for r in world.fake.requests[before:])
    assert len(world.pulls()) == 1 and len(world.comments(n)) == 1


def test_a_restart_between_pull_request_and_comment_still_gives_one_of_each(
    world: World,
) -> None:
    n = new_issue(world)
    gh_story(world, n, Status.PASSED)
    fake = world.fake

    class CommentFails(GitHub):
        def add_comment(self, number: int, body: str) -> dict[str, Any]:
            fake.fail_next(1, 502)  # GitHub falls over just as the comment is posted
            return super().add_comment(number, body)

    with CommentFails(fake.api_url, TOKEN, REPO, retry=Retry(max_attempts=1)) as flaky:
        world.sweep(flaky)
    assert len(world.pulls()) == 1 and world.comments(n) == []
    [(event, kw)] = world.log.at("warning")
    assert event == "report failed" and kw["story"] == f"gh-{n}" and "502" in kw["error"]

    forget(world)  # and the local memory is gone too
    world.sweep()
    world.sweep()
    [pull] = world.pulls()
    [comment] = world.comments(n)
    assert pull["html_url"] in comment
    assert [w for w in world.writes() if w.endswith("/pulls")] == [f"POST /repos/{REPO}/pulls"]


def test_an_open_pull_request_made_by_hand_is_reused(world: World) -> None:
    n = new_issue(world)
    by_hand = world.fake.add_pull(REPO, head=f"hero/gh-{n}", base="main", title="by hand")
    state = gh_story(world, n, Status.PASSED)

    world.sweep()

    assert [p["number"] for p in world.pulls()] == [by_hand["number"]]
    assert f"POST /repos/{REPO}/pulls" not in world.writes()
    [comment] = world.comments(n)
    assert by_hand["html_url"] in comment
    recorded = json.loads((world.home / REPORTED_FILE).read_text())
    assert recorded["pulls"] == {f"gh-{n}": by_hand["html_url"]}
    assert world.remote_sha(f"hero/gh-{n}") == state.head_sha  # its branch is up to date


def test_the_base_is_target_base_ref_when_set(world: World) -> None:
    world.config = Config(
        home=world.home, target_repo=world.repo, target_base_ref="origin/develop", secrets=(TOKEN,)
    )
    n = new_issue(world)
    gh_story(world, n, Status.PASSED)

    world.sweep()

    [pull] = world.pulls()
    assert pull["base"]["ref"] == "develop"  # the remote's name is not part of a branch's


def test_a_branch_pushed_before_is_replaced_after_a_retry(world: World) -> None:
    n = new_issue(world)
    old = story_branch(world, f"gh-{n}", "an earlier ending")
    git(world.repo, "push", "-q", "origin", f"hero/gh-{n}")
    assert world.remote_sha(f"hero/gh-{n}") == old
    state = gh_story(world, n, Status.PASSED)  # a new head beside it, not descending from it
    assert git(world.repo, "merge-base", old, state.head_sha).strip() != old

    world.sweep()

    assert world.remote_sha(f"hero/gh-{n}") == state.head_sha
    assert len(world.pulls()) == 1


def test_a_push_that_fails_is_logged_and_tried_again(world: World) -> None:
    n = new_issue(world)
    state = gh_story(world, n, Status.PASSED)
    git(world.repo, "remote", "set-url", "origin", str(world.remote.parent / "nowhere.git"))

    world.sweep()

    [(event, kw)] = world.log.at("warning")
    assert event == "report failed" and kw["story"] == f"gh-{n}"
    assert "nowhere.git" in kw["error"]
    assert world.pulls() == [] and world.comments(n) == []  # no pull request without the branch

    git(world.repo, "remote", "set-url", "origin", str(world.remote))
    world.sweep()
    assert world.remote_sha(f"hero/gh-{n}") == state.head_sha
    assert len(world.pulls()) == 1 and len(world.comments(n)) == 1


def test_the_push_goes_where_the_remote_says(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hero's git refuses every push (runner.PUSH_REFUSED_URL) but its own report-back's:
    to the remote's URL as the user's settings resolve it (here an ``insteadOf`` from the
    environment's GIT_CONFIG_*), or to the remote's own push URL when it has one."""
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.{world.remote}.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "company:")
    git(world.repo, "remote", "set-url", "origin", "company:")
    mirror = tmp_path / "push-here.git"
    git(tmp_path, "init", "-q", "--bare", str(mirror))
    a = new_issue(world)
    first = gh_story(world, a, Status.PASSED)
    world.sweep()
    assert world.remote_sha(f"hero/gh-{a}") == first.head_sha

    git(world.repo, "remote", "set-url", "--push", "origin", str(mirror))
    b = new_issue(world)
    second = gh_story(world, b, Status.PASSED)
    world.sweep()
    pushed = git(mirror, "for-each-ref", "--format=%(objectname)", f"refs/heads/hero/gh-{b}")
    assert pushed.strip() == second.head_sha
    assert world.log.at("warning") == []


def test_the_push_settings_come_after_the_users_own(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.abbrev")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "12")
    assert _push_env(world.repo, "origin") == {
        "GIT_CONFIG_KEY_1": "remote.origin.pushurl",
        "GIT_CONFIG_VALUE_1": str(world.remote),
        "GIT_CONFIG_COUNT": "2",
    }


def test_model_text_cannot_close_other_issues_or_ping_people(world: World) -> None:
    n = new_issue(world)
    summary = "Fixes #99 and resolves acme/other#3 as @alice asked; closes: #7."
    gh_story(world, n, Status.PASSED, rounds=passed_rounds(summary))

    world.sweep()

    [pull] = world.pulls()
    # a code span for the rendered body, a zero-width space (Z) for text GitHub reads plain
    body = pull["body"].replace("\u200b", "Z")
    assert "Fixes `#Z99` and resolves `acme/other#Z3` as `@Zalice` asked; closes: `#Z7`." in body
    assert pull["body"].count("Closes #") == 1


@pytest.mark.parametrize(
    ("text", "inert"),
    [
        ("Fixes #22, thanks @boss", "Fixes `#Z22`, thanks `@Zboss`"),
        ("CLOSES: acme/other#21", "CLOSES: `acme/other#Z21`"),
        (
            "resolved https://github.com/acme/app/issues/22.",
            "resolved `https://github.com/acme/app/issues/Z22`.",
        ),
        ("fixed GH-7 with `@alice`", "fixed `GH-Z7` with ``@Zalice``"),
        ("cc @acme/devs; mail boss@example.com", "cc `@Zacme/devs`; mail boss@example.com"),
        # the story's own issue, in every form, stays live
        ("Closes #21. Fixes ACME/App#21, resolves https://github.com/acme/app/issues/21", None),
    ],
)
def test_only_the_storys_own_issue_stays_live(text: str, inert: str | None) -> None:
    own = OwnIssue("acme/app", 21)
    done = defang(text, own)
    assert done.replace("\u200b", "Z") == (inert or text)
    assert defang(done, own) == done  # twice changes nothing
    assert live_references(done, own) == []
    assert bool(live_references(text, own)) == (inert is not None)


def test_the_pull_requests_title_closes_no_other_issue(world: World) -> None:
    # a squash merge makes the title the subject of the commit that lands
    n = new_issue(world)
    state = gh_story(world, n, Status.PASSED)
    state.title = f"Fixes #{n}, fixes #99 for @alice"
    save_state(world.home, state)

    world.sweep()

    [pull] = world.pulls()
    assert pull["title"].replace("\u200b", "Z") == f"Fixes #{n}, fixes `#Z99` for `@Zalice`"


@pytest.mark.parametrize("pushed_before", [False, True], ids=["new", "pushed-by-an-older-hero"])
def test_a_branch_whose_commits_close_other_issues_or_ping_people_is_not_pushed(
    world: World, pushed_before: bool
) -> None:
    # a branch as an older hero left it: the worker's messages as it wrote them
    n = new_issue(world)
    state = gh_story(world, n, Status.PASSED)
    tree = git(world.repo, "rev-parse", "main^{tree}").strip()
    first = state.head_sha  # "gh-N: work": nothing GitHub acts on
    bad = git(world.repo, "commit-tree", tree, "-p", first, "-m", "Fixes #22, thanks @boss")
    bad = bad.strip()
    git(world.repo, "update-ref", f"refs/heads/hero/gh-{n}", bad)
    state.head_sha = bad
    save_state(world.home, state)
    if pushed_before:  # pushed, and the report cut short before the pull request
        git(world.repo, "push", "-q", "origin", f"hero/gh-{n}")
        assert git(world.repo, "rev-parse", f"origin/hero/gh-{n}").strip() == bad

    world.sweep()

    assert world.remote_sha(f"hero/gh-{n}") == (bad if pushed_before else "")  # not by hero
    assert world.pulls() == [] and world.comments(n) == []
    [(event, said)] = world.log.at("error")
    assert event == "report failed" and said["story"] == f"gh-{n}"
    assert bad[:12] in said["error"] and "Fixes #22" in said["error"] and "@boss" in said["error"]
    assert first[:12] not in said["error"]  # only the commit at fault is named


def test_a_commit_that_closes_the_storys_own_issue_is_pushed(world: World) -> None:
    n = new_issue(world)
    state = gh_story(world, n, Status.PASSED)
    tree = git(world.repo, "rev-parse", "main^{tree}").strip()
    message = f"Closes #{n}, also {REPO}#{n}; mail boss@example.com; fixes `#\u200b22`"
    own = git(world.repo, "commit-tree", tree, "-p", state.head_sha, "-m", message).strip()
    git(world.repo, "update-ref", f"refs/heads/hero/gh-{n}", own)
    state.head_sha = own
    save_state(world.home, state)

    world.sweep()

    assert world.remote_sha(f"hero/gh-{n}") == own
    assert len(world.pulls()) == 1 and world.log.at("error") == []


# --------------------------------------------------------------------------- failed


def test_gave_up_and_error_get_one_comment_each_with_reason_and_last_feedback(
    world: World,
) -> None:
    a, b, c = new_issue(world), new_issue(world), new_issue(world)
    for number in (a, b, c):
        world.fake.edit_issue(REPO, number, labels=["hero", IN_PROGRESS])
    gh_story(world, a, Status.GAVE_UP, rounds=failed_rounds("**CHANGES_REQUESTED**: add tests"))
    gh_story(
        world,
        b,
        Status.ERROR,
        rounds=failed_rounds("**CHANGES_REQUESTED**: still red"),
        error="model error: the endpoint stayed unreachable",
    )
    gh_story(
        world,
        c,
        Status.BUDGET_EXCEEDED,
        rounds=[],
        error="budget exceeded: story tokens 12034 > max_story_tokens 10000",
    )

    world.sweep()

    [gave_up] = world.comments(a)
    assert "hero gave up after 2 rounds" in gave_up
    assert "Last reviewer feedback (round 2):\n\n> **CHANGES_REQUESTED**: add tests" in gave_up
    assert f"<!-- hero:report gh-{a} gave_up run 1 at 1712345678 -->" in gave_up
    [error] = world.comments(b)
    assert "stopped with an error after 2 rounds: model error: the endpoint stayed" in error
    assert "> **CHANGES_REQUESTED**: still red" in error
    [budget] = world.comments(c)
    assert "ran out of budget before any round: budget exceeded: story tokens 12034" in budget
    assert "No reviewer feedback was recorded." in budget
    for number in (a, b, c):
        assert world.labels(number) == {"hero", FAILED}
    assert world.pulls() == []  # a failure opens no pull request
    assert world.remote_sha(f"hero/gh-{a}") == ""  # nor pushes

    world.sweep()
    forget(world)
    world.sweep()
    assert [len(world.comments(x)) for x in (a, b, c)] == [1, 1, 1]

    # `hero retry`, and it gives up again: a new ending, a new comment
    gh_story(
        world,
        a,
        Status.GAVE_UP,
        rounds=failed_rounds("**CHANGES_REQUESTED**: the tests still fail"),
        runs=2,
        finished_at=1_712_999_999.0,
    )
    world.sweep()
    first, second = world.comments(a)
    assert "the tests still fail" in second and "run 2 at 1712999999" in second


def test_a_running_story_gets_the_in_progress_label_once(world: World) -> None:
    n = new_issue(world)
    world.fake.edit_issue(REPO, n, labels=["hero", FAILED])  # it failed before: a retry
    gh_story(world, n, Status.RUNNING, rounds=[], runs=2)

    world.sweep()
    world.sweep()

    assert world.labels(n) == {"hero", IN_PROGRESS}
    assert world.writes().count(f"POST /repos/{REPO}/issues/{n}/labels") == 1
    assert world.comments(n) == []


def test_a_github_failure_on_one_story_does_not_stop_the_others(world: World) -> None:
    a, b = new_issue(world), new_issue(world)
    gh_story(world, a, Status.PASSED)
    gh_story(world, b, Status.GAVE_UP, rounds=failed_rounds("nope"))
    world.fake.fail_next(1, 500)  # the first request: reading issue a's comments

    world.sweep()

    assert world.comments(a) == [] and world.pulls() == []
    assert len(world.comments(b)) == 1
    [(event, kw)] = world.log.at("warning")
    assert (event, kw["story"], kw["note"]) == (
        "report failed",
        f"gh-{a}",
        "tried again on the next sweep",
    )

    world.sweep()
    assert len(world.comments(a)) == 1 and len(world.pulls()) == 1
    assert len(world.comments(b)) == 1


def test_a_bug_in_one_report_is_logged_and_the_others_go_on(world: World) -> None:
    a, b = new_issue(world), new_issue(world)
    gh_story(world, a, Status.PASSED)
    gh_story(world, b, Status.GAVE_UP, rounds=failed_rounds("nope"))

    class Buggy(GitHub):
        def find_open_pull(self, head_branch: str) -> dict[str, Any] | None:
            raise ValueError(f"a bug, with the token {TOKEN} in its message")

    with Buggy(world.fake.api_url, TOKEN, REPO, retry=Retry(max_attempts=1)) as buggy:
        world.sweep(buggy)

    [(event, kw)] = world.log.at("error")
    assert (event, kw["story"]) == ("report failed", f"gh-{a}")
    assert "internal error: ValueError: a bug, with the token [redacted]" in kw["error"]
    assert len(world.comments(b)) == 1 and world.comments(a) == []


def test_stories_not_from_this_repository_are_left_alone(world: World) -> None:
    n = new_issue(world)
    gh_story(world, n, Status.PASSED, repo="someone/else")
    m = new_issue(world)
    gh_story(world, m, Status.PASSED, source=False)  # a person's story that took the id

    world.sweep()

    assert world.fake.requests == []
    assert world.remote_sha(f"hero/gh-{n}") == "" == world.remote_sha(f"hero/gh-{m}")


def test_a_broken_record_or_memory_does_not_stop_the_sweep(world: World) -> None:
    (world.home / "runs" / "state" / "gh-5.json").write_text("{not json")
    (world.home / REPORTED_FILE).parent.mkdir(parents=True)
    (world.home / REPORTED_FILE).write_text("[1, 2")
    n = new_issue(world)
    gh_story(world, n, Status.PASSED)

    world.sweep()

    assert len(world.pulls()) == 1 and len(world.comments(n)) == 1
    memory = json.loads((world.home / REPORTED_FILE).read_text())
    assert memory["done"] == {f"gh-{n}": "passed run 1 at 1712345678"}
    assert memory["pulls"] == {f"gh-{n}": world.pulls()[0]["html_url"]}


# --------------------------------------------------------------------------- the token


def test_the_token_is_never_written_sent_elsewhere_or_logged(world: World) -> None:
    a, b = new_issue(world), new_issue(world)
    # a reviewer that quotes the token (say, from a file it read) does not publish it
    gh_story(world, a, Status.PASSED, rounds=passed_rounds(f"Uses the token {TOKEN} here."))
    gh_story(
        world,
        b,
        Status.ERROR,
        rounds=failed_rounds(f"leaked {TOKEN}"),
        error=f"git error: fatal: https://x:{TOKEN}@github.com refused",
    )
    world.fake.fail_next(1, 500)
    world.sweep()  # one failure on the way, logged
    world.sweep()

    [pull] = world.pulls()
    assert TOKEN not in pull["body"] and "Uses the token [redacted] here." in pull["body"]
    assert all(TOKEN not in body for x in (a, b) for body in world.comments(x))
    assert "[redacted]" in world.comments(b)[0]
    assert TOKEN not in world.log.text()
    # the run records hold it because this test put it there (hero's own are redacted)
    records = world.home / "runs" / "state"
    for path in [*world.home.rglob("*"), world.repo / ".git" / "config", world.remote / "config"]:
        if path.is_file() and path.parent != records:
            assert TOKEN not in path.read_text(errors="replace"), path
    assert TOKEN not in git(world.repo, "config", "--list")
    # only ever sent to the configured API host, and only in the Authorization header
    assert all(r.headers["host"].startswith("127.0.0.1:") for r in world.fake.requests)
    sent = [r.body for r in world.fake.requests if r.body is not None]
    assert sent and TOKEN not in json.dumps(sent)


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_story_from_an_issue_run_by_hero_is_reported(
    world: World, scripted: Callable[..., Any], make_home: Callable[..., Path]
) -> None:
    def handler(body: dict[str, Any]) -> Any:
        if str(body["messages"][0]["content"]).startswith("You are hero's reviewer"):
            return text(
                json.dumps(
                    {
                        "verdict": "APPROVED",
                        "summary": "sub() added.",
                        "ac_check": [{"ac": "sub works", "satisfied": True, "commit": ""}],
                        "comments": [],
                    }
                )
            )
        steps = [
            call("write_file", path="calc/__init__.py", content=SUB_IMPL),
            call("bash", command="git add -A && git commit -q -m add-sub"),
            text("Added calc.sub."),
        ]
        done = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        return steps[min(done, len(steps) - 1)]

    home = make_home(scripted(handler))
    assert home == world.home
    n = new_issue(world)
    py = shlex.quote(sys.executable)
    story = write_story(
        home / "inbox" / f"gh-{n}.md",
        {
            "id": f"gh-{n}",
            "title": "Add sub()",
            "verify": [f"{py} -c 'from calc import sub; assert sub(5, 3) == 2'"],
            "source": {"repo": REPO, "issue": n, "author": "octocat"},
        },
        "## Goal\n\nAdd sub.\n\n## Acceptance Criteria\n\n- [ ] sub works\n",
    )
    assert main(["run", str(story.path), "--home", str(home)]) == 0

    world.sweep()

    head = git(world.repo, "rev-parse", f"hero/gh-{n}").strip()
    assert world.remote_sha(f"hero/gh-{n}") == head
    [pull] = world.pulls()
    assert pull["head"]["ref"] == f"hero/gh-{n}" and pull["title"] == "Add sub()"
    assert "sub() added." in pull["body"] and f"Closes #{n}" in pull["body"]
    assert "assert sub(5, 3) == 2" in pull["body"] and "| sub works | yes |" in pull["body"]
    [comment] = world.comments(n)
    assert pull["html_url"] in comment and f"hero:report gh-{n} passed run 1 at" in comment
    assert world.labels(n) == {"hero", DONE}


def test_a_remote_named_like_an_option_is_no_option(world: World, tmp_path: Path) -> None:
    """github.remote is passed to git after "--": `--upload-pack=...` runs nothing, it is
    only a remote git cannot find (the push fails, logged, and is tried again)."""
    ran = tmp_path / "ran"
    world.settings = replace(world.settings, remote=f"--upload-pack=touch {ran};git-upload-pack")
    n = new_issue(world)
    gh_story(world, n, Status.PASSED)

    world.sweep()

    assert not ran.exists()
    [(event, kw)] = world.log.at("warning")
    assert event == "report failed" and kw["story"] == f"gh-{n}"
    assert world.pulls() == [] and world.comments(n) == []


# ------------------------------------------------------- keeping up with a main that moved on

MUL = "\n\ndef mul(a, b):\n    return a * b\n"  # main's change: conflicts with the story's


def _moving_main(world: World, resolve: bool) -> Callable[[dict[str, Any]], Any]:
    """The story adds sub(); main adds mul() at the same place as round 1 is reviewed; round
    2's worker resolves the conflict (``resolve``) or does nothing."""
    moved: list[str] = []

    def handler(body: dict[str, Any]) -> Any:
        done = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        if str(body["messages"][0]["content"]).startswith("You are hero's reviewer"):
            if not moved:
                (world.repo / "calc" / "__init__.py").write_text(
                    "def add(a, b):\n    return a + b\n" + MUL
                )
                # a mention in main's own message: main's commits are never rewritten
                git(world.repo, "commit", "-qam", "main: add mul (thanks @octo)")
                moved.append("yes")
            answer = {"verdict": "APPROVED", "summary": "Fine.", "ac_check": [], "comments": []}
            return text(json.dumps(answer))
        if "This is round 2 of" in str(body["messages"][1]["content"]):
            steps = [
                call("write_file", path="calc/__init__.py", content=SUB_IMPL + MUL),
                call("bash", command="git add -A && git commit -q --no-edit"),
                text("Resolved."),
            ]
            return steps[min(done, 2)] if resolve else text("I leave it.")
        steps = [
            call("write_file", path="calc/__init__.py", content=SUB_IMPL),
            call("bash", command="git add -A && git commit -q -m add-sub"),
            text("Added calc.sub."),
        ]
        return steps[min(done, len(steps) - 1)]

    return handler


def _issue_story(world: World, home: Path) -> tuple[int, Path]:
    n = new_issue(world)
    py = shlex.quote(sys.executable)
    story = write_story(
        home / "inbox" / f"gh-{n}.md",
        {
            "id": f"gh-{n}",
            "title": "Add sub()",
            "verify": [f"{py} -c 'from calc import sub; assert sub(5, 3) == 2'"],
            "source": {"repo": REPO, "issue": n, "author": "octocat"},
        },
        "## Goal\n\nAdd sub.\n\n## Acceptance Criteria\n\n- [ ] sub works\n",
    )
    return n, story.path


@pytest.mark.slow
def test_a_conflict_with_main_not_resolved_pushes_nothing_and_says_which_files(
    world: World, scripted: Callable[..., Any], make_home: Callable[..., Path]
) -> None:
    home = make_home(scripted(_moving_main(world, resolve=False)))
    n, story = _issue_story(world, home)
    assert main(["run", str(story), "--home", str(home)]) == 1

    world.sweep()

    assert world.remote_sha(f"hero/gh-{n}") == ""  # nothing pushed
    assert git(world.remote, "for-each-ref").strip() == ""
    assert world.pulls() == []  # no pull request
    [comment] = world.comments(n)
    assert "stopped with an error" in comment and "conflict" in comment
    assert "calc/__init__.py" in comment
    assert world.labels(n) == {"hero", FAILED}


@pytest.mark.slow
def test_a_conflict_with_main_resolved_is_pushed_holding_mains_commit(
    world: World, scripted: Callable[..., Any], make_home: Callable[..., Path]
) -> None:
    home = make_home(scripted(_moving_main(world, resolve=True)))
    n, story = _issue_story(world, home)
    assert main(["run", str(story), "--home", str(home)]) == 0

    world.sweep()

    head = git(world.repo, "rev-parse", f"hero/gh-{n}").strip()
    assert world.remote_sha(f"hero/gh-{n}") == head
    main_sha = git(world.repo, "rev-parse", "main").strip()
    assert git(world.repo, "merge-base", main_sha, head).strip() == main_sha  # as it is
    assert git(world.repo, "show", f"{head}:calc/__init__.py") == SUB_IMPL + MUL
    [pull] = world.pulls()
    assert pull["head"]["ref"] == f"hero/gh-{n}"


def test_each_sweep_fetches_a_remote_base_so_stories_keep_up_with_the_remote(
    world: World, tmp_path: Path
) -> None:
    from hero.github.watch import Watcher

    git(world.repo, "push", "-q", str(world.remote), "HEAD:refs/heads/main")
    git(world.repo, "fetch", "-q", "origin")
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", "-b", "main", str(world.remote), str(other))
    (other / "upstream.txt").write_text("pushed by someone else\n")
    git(other, "add", "upstream.txt")
    git(other, "-c", "user.name=p", "-c", "user.email=p@x", "commit", "-qm", "upstream")
    git(other, "push", "-q", str(world.remote), "HEAD:main")
    moved = git(other, "rev-parse", "HEAD").strip()
    assert git(world.repo, "rev-parse", "origin/main").strip() != moved

    config = Config(
        home=world.home, target_repo=world.repo, target_base_ref="origin/main", secrets=(TOKEN,)
    )
    Watcher(world.home, world.settings, config, world.log).sweep(world.gh)
    assert git(world.repo, "rev-parse", "origin/main").strip() == moved

    # a base that is no branch of the remote: logged, the sweep goes on
    config = Config(
        home=world.home, target_repo=world.repo, target_base_ref="origin/gone", secrets=(TOKEN,)
    )
    Watcher(world.home, world.settings, config, world.log).sweep(world.gh)
    assert any(e.get("event") == "base not fetched" for e in world.log.events)
