"""`hero logs KEY -f` for a story that is queued but has not started: it says so once,
waits, and follows the story once a run starts it; a key hero knows nothing of is still an
error (exit 2), and so is a story that leaves the queue without starting."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import HomeFactory, StoryWriter
from helpers import WAIT_S, commit_once, is_review, read_lines, step_of, verdict, wait_for_line
from plan_support import write_plan

from hero.cli import main
from hero.llm.scripted import ScriptedModel, call, text
from hero.views.logs import LogsError, follow

WAITING = "queued, not started yet; waiting for it"


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hero", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "GIT_CONFIG_GLOBAL": "/dev/null"},
    )


def one_round_model(body: dict[str, object]) -> object:
    if is_review(body):
        return verdict("APPROVED", "sub is there.")
    if step_of(body) == 0:
        return call("bash", command=commit_once("sub"))
    return text("Added sub.")


@pytest.mark.slow
def test_follow_waits_for_a_queued_story_then_follows_its_run(
    make_home: HomeFactory, write_story: StoryWriter
) -> None:
    with ScriptedModel(one_round_model) as model:
        home = make_home(model)
        story = write_story(home, "s1", verify=["test -f sub.txt"])
        logs = spawn("logs", "s1", "-f", "--home", str(home))
        run: subprocess.Popen[str] | None = None
        try:
            lines, seen = read_lines(logs), []
            wait_for_line(lines, WAITING, seen)
            assert not (home / "runs" / "state" / "s1.json").exists()
            run = spawn("run", str(story), "--home", str(home))
            assert run.wait(WAIT_S) == 0, run.communicate()
            assert logs.wait(WAIT_S) == 0
        finally:
            for proc in (logs, run):
                if proc is not None and proc.poll() is None:
                    proc.kill()
    assert logs.stderr is not None and logs.stderr.read() == ""
    while not lines.empty():
        seen.append(lines.get())
    out = "".join(seen)
    assert out.count(WAITING) == 1  # said once, however long it waited
    assert "=== round 1 ===" in out and "APPROVED: sub is there." in out
    assert out.endswith("--- s1: passed\n")


def test_a_story_leaving_the_queue_unstarted_ends_the_wait(
    make_home: HomeFactory, write_story: StoryWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("hero.views.logs.QUEUE_LOOK_S", 0.0)
    with ScriptedModel([]) as model:
        home = make_home(model)
    story = write_story(home, "s1")
    out = io.StringIO()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            follow(home, "s1", out, poll_s=0.01)
        except LogsError as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while WAITING not in out.getvalue():
        assert thread.is_alive(), f"follow ended instead of waiting: {errors}"
        thread.join(0.01)
    story.unlink()  # taken away before anything ran it
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert [str(e) for e in errors] == ["story 's1' left the queue without starting"]


def test_a_plans_queued_story_is_waited_for_and_an_unknown_one_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_plan(tmp_path, "calc", {"a": [], "b": ["a"]})
    out = io.StringIO()
    stop = threading.Event()
    result: list[str | None] = []
    thread = threading.Thread(
        target=lambda: result.append(follow(tmp_path, "calc/b", out, poll_s=0.01, stop=stop)),
        daemon=True,
    )
    thread.start()
    try:
        while WAITING not in out.getvalue():
            assert thread.is_alive(), "follow ended instead of waiting"
            thread.join(0.01)
    finally:
        stop.set()
        thread.join(WAIT_S)
    assert result == [None]
    assert out.getvalue() == f"--- calc/b: {WAITING} (Ctrl-C to stop)\n"

    for key in ("calc/zzz", "zzz"):  # in no queue, never run: exit 2 as before
        assert main(["logs", key, "-f", "--home", str(tmp_path)]) == 2
        assert f"no story '{key}'" in capsys.readouterr().err
    # without -f, a queued story's error says how to wait for it
    assert main(["logs", "calc/a", "--home", str(tmp_path)]) == 2
    assert "`hero logs calc/a -f` waits for it" in capsys.readouterr().err
