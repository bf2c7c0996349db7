"""`hero revise` through the real command line: what it refuses, with what words and exit
code, writing nothing; and what `hero status` says of a follow-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git

from hero.cli import main
from hero.locks import story_lock
from hero.state import RunState, Status, save_state
from hero.views.status import collect_status, format_status


@pytest.fixture
def home(scripted, make_home, target_repo: Path) -> Path:
    home = make_home(scripted([]))
    tip = git(target_repo, "rev-parse", "main").strip()
    git(target_repo, "branch", "hero/done-1", tip)
    for story_id, status in (("done-1", Status.PASSED), ("gone-1", Status.GAVE_UP)):
        save_state(
            home,
            RunState(id=story_id, status=status, branch=f"hero/{story_id}", head_sha=tip),
        )
    save_state(home, RunState(id="paused-1", status=Status.INTERRUPTED, branch="hero/paused-1"))
    save_state(home, RunState(id="busy-1", status=Status.RUNNING, branch="hero/busy-1"))
    return home


def _inbox(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "inbox").iterdir())


@pytest.mark.parametrize(
    ("story_id", "instruction", "says"),
    [
        ("done-1", "   ", "hero: instruction: is empty; say what to change"),
        (
            "no-such",
            "fix it",
            "revises 'no-such': no story by that id has run in this home "
            "(no runs/state/no-such.json)",
        ),
        ("gone-1", "fix it", "revises 'gone-1', whose branch hero/gone-1 is gone from"),
        ("paused-1", "fix it", "revises 'paused-1', which has not finished (interrupted)"),
        ("../x", "fix it", "ID: expected letters, digits"),
    ],
)
def test_what_hero_revise_refuses_exits_2_and_writes_nothing(
    home: Path, story_id: str, instruction: str, says: str
) -> None:
    before = _inbox(home)
    done = subprocess.run(
        [sys.executable, "-m", "hero", "revise", story_id, instruction, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert _inbox(home) == before


def test_a_story_still_running_is_not_revised(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with story_lock(home, "busy-1"):  # its run, live
        code = main(["revise", "busy-1", "fix it", "--queue", "--home", str(home)])
    assert code == 2
    assert "story 'busy-1' is still running; revise it once it has finished" in (
        capsys.readouterr().err
    )
    assert _inbox(home) == []


def test_queue_writes_the_follow_up_and_status_shows_it(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["revise", "done-1", "Rename the helper", "--queue", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "done-1-rev-1: follow-up of done-1 queued as inbox/done-1-rev-1.md" in out
    text = (home / "inbox" / "done-1-rev-1.md").read_text()
    assert "revises: done-1\n" in text and "1. Rename the helper" in text

    save_state(
        home,
        RunState(id="done-1-rev-1", status=Status.GAVE_UP, branch="hero/done-1", revises="done-1"),
    )
    report = collect_status(home)
    row = next(r for r in report["stories"] if r["id"] == "done-1-rev-1")
    assert row["revises"] == "done-1" and row["branch"] == "hero/done-1"
    assert next(r for r in report["stories"] if r["id"] == "done-1")["revises"] == ""
    assert "    follow-up of done-1" in format_status(report)


def test_a_follow_up_whose_branch_is_in_use_waits_in_the_inbox(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with story_lock(home, "done-1"):  # another follow-up of it runs, say
        code = main(["revise", "done-1", "fix it", "--home", str(home)])
    assert code == 2
    err = capsys.readouterr().err
    assert "story 'done-1' is being run by another hero process" in err
    assert "the follow-up waits in inbox/done-1-rev-1.md: `hero watch` runs it" in err
    assert _inbox(home) == ["done-1-rev-1.md"]
    assert not (home / "runs" / "state" / "done-1-rev-1.json").exists()
