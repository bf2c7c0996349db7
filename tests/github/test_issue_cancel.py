"""A story whose GitHub issue is closed, or loses its label, is cancelled: no pull request,
no comment (``github.cancel_when_closed``).

The fake GitHub (``tests/fakegithub.py``) and the scripted model run on loopback; the
home, the story files, the target repository with a bare ``origin``, and the `hero run`
child process are real. Each sweep is the watcher's own (``Watcher.sweep``: intake,
cancelling, report-back), run in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from fakegithub import FakeGitHub
from helpers import Hero, Log, is_review, step_of, verdict

from hero.cli import main
from hero.config.loader import load_config
from hero.github.api import GitHub, Retry
from hero.github.settings import settings_for
from hero.github.watch import Watcher
from hero.llm.scripted import Reply, ScriptedModel, call, text
from hero.views.status import collect_status

REPO = "acme/app"
LABEL = "hero"
TOKEN = "ghp_" + "CancelT0kenForTests" * 2
WAIT_S = 60.0  # a generous "did not hang" bound, not a speed check


@dataclass
class World:
    home: Path
    fake: FakeGitHub
    model: ScriptedModel
    log: Log = field(default_factory=Log)

    def sweep(self) -> None:
        """One sweep of the watcher, as `hero github watch` runs it."""
        env = {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": self.fake.api_url}
        config = load_config(self.home, roles=(), env=env)
        settings = settings_for(config)
        watcher = Watcher(self.home, settings, config, self.log)
        with GitHub(settings.api_url, TOKEN, REPO, retry=Retry(max_attempts=1)) as gh:
            assert watcher.sweep(gh)
        assert not [e for e in self.log.events if e["level"] in ("warning", "error")]

    def issue(self) -> int:
        return int(self.fake.add_issue(REPO, title="Add sub()", labels=[LABEL])["number"])

    def close(self, n: int) -> None:
        self.fake.edit_issue(REPO, n, state="closed")

    def state(self, n: int) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            (self.home / "runs" / "state" / f"gh-{n}.json").read_text()
        )
        return data

    def said_nothing(self, n: int) -> None:
        """No pull request, no comment, no label hero sets."""
        assert self.fake.pulls(REPO) == []
        assert self.fake.comments(REPO, n) == []
        assert not set(self.fake.labels(REPO, n)) & {
            "hero: in progress",
            "hero: done",
            "hero: failed",
        }

    def set_block(self, **extra: str) -> None:
        roles = self.home / "config" / "roles.yaml"
        kept = roles.read_text().split("github:\n")[0]
        lines = ["github:", f"  repo: {REPO}", f"  label: {LABEL}", "  verify: ['true']"]
        lines += [f"  {k}: {v}" for k, v in extra.items()]
        roles.write_text(kept + "\n".join(lines) + "\n")


def worker_policy(body: dict[str, Any]) -> Reply:
    """A commit, then a few more turns, then done; the reviewer approves."""
    if is_review(body):
        return verdict("APPROVED", "Good.")
    steps = [
        call("bash", command="echo sub > sub.txt && git add -A && git commit -q -m 'Add sub'"),
        call("bash", command="true"),
        call("bash", command="true"),
        call("bash", command="true"),
        text("Done."),
    ]
    return steps[min(step_of(body), len(steps) - 1)]


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token=TOKEN) as server:
        server.add_repo(REPO, default_branch="main")
        yield server


def make_world(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    fake: FakeGitHub,
    target_repo: Path,
    tmp_path: Path,
    *,
    latency_s: float = 0.0,
    **block: str,
) -> World:
    model = scripted(worker_policy, latency_s=latency_s)
    home = make_home(model, sandbox="none")
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(target_repo, "remote", "add", "origin", str(remote))
    world = World(home, fake, model)
    world.set_block(**block)
    return world


@pytest.fixture
def world(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    fake: FakeGitHub,
    target_repo: Path,
    tmp_path: Path,
) -> World:
    return make_world(scripted, make_home, fake, target_repo, tmp_path)


# --------------------------------------------------------------------------- queued


@pytest.mark.slow
@pytest.mark.parametrize("how", ["closed", "unlabelled"])
def test_a_queued_story_whose_issue_is_closed_or_unlabelled_is_cancelled(
    world: World, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    n = world.issue()
    world.sweep()
    story = world.home / "inbox" / f"gh-{n}.md"
    assert story.is_file()

    if how == "closed":
        world.close(n)
        why = f"cancelled: GitHub issue #{n} of {REPO} was closed"
    else:
        world.fake.edit_issue(REPO, n, labels=["bug"])
        why = f"cancelled: GitHub issue #{n} of {REPO} no longer has the label '{LABEL}'"
    world.sweep()

    # out of the inbox, where the user sees it, with the reason on record
    moved = world.home / "cancelled" / f"gh-{n}.md"
    assert not story.exists() and moved.is_file()
    state = world.state(n)
    assert state["status"] == "cancelled" and state["error"] == why
    assert state["story_path"] == str(moved.resolve())
    [said] = world.log.named("story cancelled")
    assert said["story"] == f"gh-{n}" and said["moved_to"] == f"cancelled/gh-{n}.md"

    # not written again, not run, nothing said on the issue, however often it is swept
    world.sweep()
    world.sweep()
    assert not story.exists() and world.state(n)["status"] == "cancelled"
    assert len(world.log.named("story cancelled")) == 1
    assert world.model.requests == []
    world.said_nothing(n)

    # `hero status` shows it with the reason
    (row,) = collect_status(world.home)["stories"]
    assert row["status"] == "cancelled" and row["error"] == why
    assert main(["status", "--home", str(world.home)]) == 0
    table = capsys.readouterr().out
    assert f"gh-{n} " in table and "cancelled" in table and why in table


@pytest.mark.slow
def test_retry_puts_a_cancelled_story_back_once_its_issue_is_open_again(world: World) -> None:
    n = world.issue()
    world.sweep()
    world.close(n)
    world.sweep()
    assert world.state(n)["status"] == "cancelled"

    world.fake.edit_issue(REPO, n, state="open")
    assert main(["retry", f"gh-{n}", "--home", str(world.home)]) == 0
    story = world.home / "inbox" / f"gh-{n}.md"
    assert story.is_file() and not (world.home / "cancelled" / f"gh-{n}.md").exists()
    assert world.state(n)["status"] == "queued"
    assert not (world.home / "runs" / f"gh-{n}" / "cancel.json").exists()

    world.sweep()  # open and labelled: it stays
    assert story.is_file() and world.state(n)["status"] == "queued"
    assert main(["run", str(story), "--home", str(world.home)]) == 0
    world.sweep()
    assert [p["head"]["ref"] for p in world.fake.pulls(REPO)] == [f"hero/gh-{n}"]


def test_a_story_asked_to_start_while_its_cancellation_stands_does_not_start(
    world: World, target_repo: Path
) -> None:
    """A run that was about to start as the issue closed (the daemon had read the file):
    it records the cancellation and touches nothing, no branch made."""
    n = world.issue()
    world.sweep()
    story = world.home / "inbox" / f"gh-{n}.md"
    copy = world.home / f"gh-{n}.md"
    copy.write_bytes(story.read_bytes())  # the file as a run that read it has it
    world.close(n)
    world.sweep()

    assert main(["run", str(copy), "--home", str(world.home)]) == 1
    assert world.state(n)["status"] == "cancelled"
    assert world.model.requests == []
    assert git(target_repo, "branch", "--list", "hero/*") == ""


# --------------------------------------------------------------------------- running


@pytest.mark.slow
def test_a_running_story_whose_issue_closes_is_stopped_and_reported_nowhere(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    fake: FakeGitHub,
    target_repo: Path,
    tmp_path: Path,
) -> None:
    world = make_world(scripted, make_home, fake, target_repo, tmp_path, latency_s=0.5)
    n = world.issue()
    world.sweep()
    story = world.home / "inbox" / f"gh-{n}.md"
    hero = Hero(world.home, story, tmp_path, "run")
    try:
        deadline = time.monotonic() + WAIT_S
        while len(world.model.requests) < 2 and time.monotonic() < deadline:
            if hero.proc.poll() is not None:
                pytest.fail(f"hero ended early:\n{hero.output()}")
            time.sleep(0.05)
        assert world.state(n)["status"] == "running", hero.output()

        world.close(n)
        world.sweep()  # the story is asked to stop; its run ends itself
        [asked] = world.log.named("story asked to stop")
        assert asked["story"] == f"gh-{n}"
        assert hero.wait() == 1, hero.output()
    finally:
        if hero.proc.poll() is None:
            hero.proc.kill()
            hero.proc.wait()

    state = world.state(n)
    assert state["status"] == "cancelled", hero.output()
    assert state["error"] == f"cancelled: GitHub issue #{n} of {REPO} was closed"
    assert state["rounds"] == [] and state["phase"] == ""
    assert [r for r in world.model.requests if is_review(r.body)] == []  # stopped mid-worker
    assert (world.home / "cancelled" / f"gh-{n}.md").is_file() and not story.exists()
    # its work so far is kept on its branch
    assert "Add sub" in git(target_repo, "log", "--format=%s", f"main..hero/gh-{n}")
    world.sweep()
    world.said_nothing(n)
    assert "hero: in progress" not in world.fake.labels(REPO, n)


@pytest.mark.slow
def test_an_issue_closed_after_its_story_passed_gets_no_pull_request_nor_comment(
    world: World,
    target_repo: Path,
) -> None:
    n = world.issue()
    world.sweep()
    story = world.home / "inbox" / f"gh-{n}.md"
    assert main(["run", str(story), "--home", str(world.home)]) == 0
    assert world.state(n)["status"] == "passed"

    world.close(n)  # before the watcher's next sweep would report it
    world.sweep()

    world.said_nothing(n)
    [note] = world.log.named("not reported")
    assert note["story"] == f"gh-{n}" and "was closed" in note["reason"]
    assert world.state(n)["status"] == "passed"  # the work stays on its branch
    assert git(target_repo, "rev-parse", f"hero/gh-{n}").strip() == world.state(n)["head_sha"]
    world.sweep()  # decided once: not looked up again
    assert len(world.log.named("not reported")) == 1
    world.said_nothing(n)


# --------------------------------------------------------------------------- off


@pytest.mark.slow
def test_with_the_setting_off_a_closed_issues_story_runs_and_is_reported(world: World) -> None:
    world.set_block(cancel_when_closed="false")
    n = world.issue()
    world.sweep()
    story = world.home / "inbox" / f"gh-{n}.md"
    world.close(n)
    world.sweep()
    assert story.is_file() and not (world.home / "cancelled").exists()
    assert world.log.named("story cancelled") == []

    assert main(["run", str(story), "--home", str(world.home)]) == 0
    world.sweep()
    [pull] = world.fake.pulls(REPO)
    assert pull["head"]["ref"] == f"hero/gh-{n}"
    assert any(pull["html_url"] in c["body"] for c in world.fake.comments(REPO, n))


def test_a_bad_value_of_the_setting_is_an_error_naming_it(world: World) -> None:
    world.set_block(cancel_when_closed="'sometimes'")
    with pytest.raises(Exception, match=r"github\.cancel_when_closed") as raised:
        load_config(world.home, roles=(), env={"GITHUB_TOKEN": TOKEN})
    assert "roles.yaml" in str(raised.value)


def test_a_killed_run_of_a_story_whose_issue_closed_is_cancelled_by_the_sweep(
    world: World,
) -> None:
    """A record left ``running`` by a killed run: nobody holds the story, so the sweep
    cancels it at once."""
    n = world.issue()
    world.sweep()
    path = world.home / "runs" / "state" / f"gh-{n}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"id": f"gh-{n}", "status": "running", "runs": 1}))
    world.close(n)
    world.sweep()
    assert world.state(n)["status"] == "cancelled"
    assert (world.home / "cancelled" / f"gh-{n}.md").is_file()


# --------------------------------------------------------------------------- hero watch


@pytest.mark.slow
def test_hero_watch_stops_a_story_whose_issue_closes_while_it_runs(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    fake: FakeGitHub,
    target_repo: Path,
    tmp_path: Path,
) -> None:
    """The daemon runs the story, its GitHub thread sees the issue closed and the story
    ends cancelled; the daemon goes idle and exits, having said nothing on the issue."""
    world = make_world(
        scripted, make_home, fake, target_repo, tmp_path, latency_s=0.5, interval_s="0.5"
    )
    n = world.issue()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "HERO_"))}
    env.update(GITHUB_TOKEN=TOKEN, GITHUB_API_URL=fake.api_url)
    out, err = tmp_path / "watch.out", tmp_path / "watch.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hero", "watch", "--home", str(world.home), "--exit-when-idle"],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + WAIT_S
        while len(world.model.requests) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, err.read_text()
            time.sleep(0.05)
        assert len(world.model.requests) >= 2, err.read_text()
        world.close(n)
        assert proc.wait(timeout=WAIT_S) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    state = world.state(n)
    assert state["status"] == "cancelled", err.read_text()
    assert state["error"] == f"cancelled: GitHub issue #{n} of {REPO} was closed"
    assert (world.home / "cancelled" / f"gh-{n}.md").is_file()
    assert not (world.home / "inbox" / f"gh-{n}.md").exists()
    assert [r for r in world.model.requests if is_review(r.body)] == []
    assert fake.pulls(REPO) == [] and fake.comments(REPO, n) == []
    assert TOKEN not in out.read_text() + err.read_text()
