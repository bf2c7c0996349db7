"""The round's sandbox made before its first command (``SandboxSession.start``): in a thread of
its own while the round's first model request is in flight; the first command waits for it.

Real bubblewrap, a real story repository; where a start is to be held back or to fail, the
session's own start function is wrapped. Skipped where bubblewrap does not work.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import alive, is_review, wait_dead
from sandbox_support import agents, story_sandbox

from hero.cli import main
from hero.git.ops import DEFAULT_IDENTITY
from hero.llm.scripted import text
from hero.runner import CommandResult, child_env, run_command
from hero.sandbox import session as session_module
from hero.sandbox.session import SandboxSession

ENV = child_env(extra=DEFAULT_IDENTITY)
#: The start time of the sandbox's PID 1: the same for two commands in one sandbox.
INIT_STARTED = "cut -d' ' -f22 /proc/1/stat"


@pytest.fixture
def session(bwrap: str, tmp_path: Path, target_repo: Path) -> Iterator[SandboxSession]:
    worktree, box = story_sandbox(tmp_path, target_repo)
    made = SandboxSession(box, worktree)
    yield made
    made.close()


def run(session: SandboxSession, command: str) -> CommandResult:
    return run_command(command, session.root, timeout_s=120, env=ENV, sandbox=session)


def held_start(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[str]]:
    """The session's start held until the event is set; who started it, per start."""
    go = threading.Event()
    starts: list[str] = []
    real = session_module._start

    def start(*args, **kwargs):  # type: ignore[no-untyped-def]
        starts.append(threading.current_thread().name)
        assert go.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(session_module, "_start", start)
    return go, starts


def test_a_sandbox_started_early_is_the_one_the_first_command_runs_in(
    session: SandboxSession,
) -> None:
    session.start()
    session.start()  # once made or being made: nothing more
    with session._lock:  # the thread holds it while it makes the sandbox
        (agent,) = agents()

    first = run(session, INIT_STARTED)
    second = run(session, INIT_STARTED)

    assert first.exit_code == 0 and first.output == second.output, (first, second)
    assert session.started == 1 and agents() == [agent]


def test_the_first_command_waits_for_the_sandbox_being_made(
    session: SandboxSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    go, starts = held_start(monkeypatch)
    session.start()
    results: list[CommandResult] = []
    command = threading.Thread(target=lambda: results.append(run(session, "echo ran")))

    command.start()
    command.join(0.5)
    waited = command.is_alive() and not results
    go.set()
    command.join(60)

    assert waited  # held while the sandbox is being made
    assert [r.output for r in results] == ["ran\n"]
    assert starts == ["hero-sandbox-start"] and session.started == 1


def test_a_sandbox_that_cannot_be_made_early_gives_each_command_one_of_its_own(
    session: SandboxSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    def start(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise session_module._StartFailed("no python in the sandbox")

    monkeypatch.setattr(session_module, "_start", start)
    session.start()

    first = run(session, "touch /tmp/mark")
    second = run(session, "test -e /tmp/mark && echo shared || echo fresh")

    assert first.exit_code == 0 and second.output == "fresh\n"  # a sandbox each, as before
    assert session.problem == "no python in the sandbox" and session.started == 0


def test_an_error_while_making_it_early_is_raised_by_the_first_command(
    session: SandboxSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def start(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        calls.append(threading.current_thread().name)
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(session_module, "_start", start)
    session.start()

    with pytest.raises(OSError, match="Too many open files"):
        run(session, "true")
    assert calls == ["hero-sandbox-start", threading.current_thread().name]


def test_a_sandbox_started_early_that_died_is_replaced_at_the_first_command(
    session: SandboxSession,
) -> None:
    session.start()
    with session._lock:
        (agent,) = agents()
    os.kill(agent, signal.SIGKILL)
    assert wait_dead(agent)

    result = run(session, "echo next")

    assert result.exit_code == 0 and result.output == "next\n", result
    assert result.sandbox_note is None and session.started == 2


def test_closing_while_the_sandbox_is_being_made_leaves_nothing_behind(
    session: SandboxSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    go, _ = held_start(monkeypatch)
    session.start()
    threading.Timer(0.2, go.set).start()

    session.close()

    assert agents() == [] and session.started == 1
    assert not [pid for pid in agents() if alive(pid)]


APPROVE = text('{"verdict": "APPROVED", "summary": "ok", "ac_check": [], "comments": []}')


@pytest.mark.slow
def test_a_round_that_runs_no_command_leaves_no_sandbox_behind(
    bwrap: str, scripted, make_home, write_story, capsys: pytest.CaptureFixture[str]
) -> None:
    """The round's sandbox is started as the round begins, used or not; it ends with it."""
    model = scripted(lambda body: APPROVE if is_review(body) else text("Nothing to change."))
    home = make_home(model, sandbox="bwrap")
    story = write_story(home, "s1", verify=["true"], allow_empty=True)

    code = main(["run", str(story), "--home", str(home)])

    assert code == 0, capsys.readouterr().err
    assert agents() == []
    assert not [t for t in threading.enumerate() if t.name == "hero-sandbox-start"]
