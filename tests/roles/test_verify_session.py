"""The checks of one verification in one sandbox (``hero.roles.verifier.run_verify`` given a
``Sandbox``): one ``SandboxSession`` for all of them, each check still on its own.

Real checks run in a real bubblewrap built for a real story repository, as the pipeline
builds it; skipped where bubblewrap does not work.
"""

from __future__ import annotations

import os
import shlex
import signal
import threading
import uuid
from pathlib import Path

import pytest
from helpers import PY, alive
from sandbox_support import agents, daemon, processes_with, story_sandbox

from hero.errors import Interrupted
from hero.git.ops import DEFAULT_IDENTITY
from hero.roles import verifier
from hero.roles.verifier import VerifyResult, run_verify
from hero.runner import child_env
from hero.sandbox import session as session_module
from hero.sandbox.bwrap import Sandbox
from hero.sandbox.limits import Limits
from hero.sandbox.session import SandboxSession
from hero.story.record import VerifyTier

ENV = child_env(extra=DEFAULT_IDENTITY)


class Checks:
    """A story's repository and the checks' sandbox, as the pipeline builds them."""

    def __init__(self, worktree: Path, box: Sandbox, log: Path) -> None:
        self.worktree = worktree
        self.box = box
        self.log = log

    def verify(
        self,
        *commands: str,
        timeout_s: float = 120.0,
        sandbox: Sandbox | SandboxSession | None = None,
        **kwargs: object,
    ) -> VerifyResult:
        return run_verify(
            (VerifyTier("checks", commands),),
            self.worktree,
            timeout_s=timeout_s,
            env=kwargs.pop("env", ENV),  # type: ignore[arg-type]
            log_path=self.log,
            sandbox=self.box if sandbox is None else sandbox,
            **kwargs,  # type: ignore[arg-type]
        )


def make_checks(tmp_path: Path, target_repo: Path, limits: Limits | None = None) -> Checks:
    worktree, box = story_sandbox(tmp_path, target_repo, limits)
    return Checks(worktree, box, tmp_path / "home" / "runs" / "s1" / "verify-r1.log")


@pytest.fixture(autouse=True)
def one_sandbox_from_one_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every verification here shares one sandbox, however few its checks."""
    monkeypatch.setattr(verifier, "ONE_SANDBOX_FROM", 1)


@pytest.fixture
def checks(bwrap: str, tmp_path: Path, target_repo: Path) -> Checks:
    return make_checks(tmp_path, target_repo)


#: The start time of the sandbox's PID 1 (its init): the same for two checks in one sandbox.
INIT_STARTED = "cut -d' ' -f22 /proc/1/stat"


def test_a_verifications_checks_share_one_sandbox_that_ends_with_it(checks: Checks) -> None:
    result = checks.verify(INIT_STARTED, "echo kept > /tmp/note", INIT_STARTED, "cat /tmp/note")

    assert result.passed, result.summary()
    first, _, second, note = (c.tail for c in result.commands)
    assert first == second and first.strip().isdigit()
    assert note == "kept\n"  # /tmp is the verification's, as a round's is the worker's
    assert agents() == []  # ended with the verification


def test_each_verification_gets_a_fresh_sandbox(checks: Checks) -> None:
    checks.verify("echo kept > /tmp/note")

    again = checks.verify("cat /tmp/note 2>/dev/null || echo no-note; ls -A $HOME")

    assert again.commands[0].tail == "no-note\n", again.commands[0].tail


def test_what_a_check_started_is_gone_before_the_next_check(checks: Checks) -> None:
    token = f"hero-verify-left-{uuid.uuid4().hex}"
    left: list[list[int]] = []

    result = checks.verify(
        f"{daemon(token, 'up')} && echo $a",
        "rm up; ls /proc | grep -c '^[0-9]'",
        on_command=lambda _check: left.append(processes_with(token)),
    )

    assert result.passed, result.summary()
    assert result.commands[0].tail == "up\n"
    assert left == [[], []]  # gone as the first check returned
    assert int(result.commands[1].tail) <= 4  # in the sandbox: the agent, sh, ls and grep


def test_each_check_has_its_own_timeout_and_the_next_runs_in_the_same_sandbox(
    checks: Checks,
) -> None:
    token = f"hero-verify-slow-{uuid.uuid4().hex}"

    result = checks.verify(
        f"echo started; {INIT_STARTED}; {daemon(token, 'up')}; exec sleep 300",
        f"rm up; {INIT_STARTED}; echo after",
        timeout_s=3.0,
    )

    slow, after = result.commands
    assert slow.timed_out and slow.exit_code == 124 and "started" in slow.tail
    assert not after.timed_out and after.exit_code == 0, after.tail
    assert after.tail.endswith("after\n")
    assert slow.tail.splitlines()[1] == after.tail.splitlines()[0]  # the same sandbox
    assert processes_with(token) == []
    assert "(timed out after 3 s)" in Path(result.log_path).read_text()


def test_a_cancelled_check_ends_the_verification_and_its_sandbox(checks: Checks) -> None:
    token = f"hero-verify-cancel-{uuid.uuid4().hex}"
    cancel = threading.Event()
    started = checks.worktree / "started"
    os.mkfifo(started)

    def cancel_once_started() -> None:
        with open(started) as fifo:
            fifo.read()
        cancel.set()

    canceller = threading.Thread(target=cancel_once_started, daemon=True)
    canceller.start()
    with pytest.raises(Interrupted):
        checks.verify(
            f"{daemon(token, 'up')}; echo go > started; exec sleep 300",
            "touch ran-next",
            cancel=cancel,
        )
    canceller.join(10)

    assert processes_with(token) == [] and agents() == []
    assert not (checks.worktree / "ran-next").exists()


def test_a_check_whose_sandbox_dies_fails_clearly_and_the_next_gets_a_fresh_one(
    checks: Checks,
) -> None:
    """The agent killed from outside under a check (inside, the OOM killer could): the check
    fails saying so, not a hang; the next check runs in a fresh sandbox."""
    started = checks.worktree / "started"
    os.mkfifo(started)
    killed: list[int] = []

    def kill_agent_once_started() -> None:
        with open(started) as fifo:
            fifo.read()
        (agent,) = agents()
        killed.append(agent)
        os.kill(agent, signal.SIGKILL)

    killer = threading.Thread(target=kill_agent_once_started, daemon=True)
    killer.start()
    result = checks.verify(
        "echo kept > /tmp/note; echo go > started; exec sleep 300",
        "rm started; cat /tmp/note 2>/dev/null || echo no-note",
    )
    killer.join(10)

    lost, after = result.commands
    assert lost.exit_code == 137 and not lost.timed_out, lost
    assert "hero: the sandbox ended while the command ran" in lost.tail
    assert after.exit_code == 0 and after.tail == "no-note\n", after
    assert not result.passed
    assert "the sandbox ended" in Path(result.log_path).read_text()
    assert killed and not alive(killed[0]) and agents() == []


def test_a_check_that_kills_everything_from_inside_leaves_the_next_check_working(
    checks: Checks,
) -> None:
    result = checks.verify(
        f"{INIT_STARTED}; kill -9 1; (kill -9 -1); sleep 5; echo survived",
        f"{INIT_STARTED}; echo next",
    )

    killer, after = result.commands
    assert "survived" not in killer.tail and killer.exit_code == 137, killer
    assert after.exit_code == 0 and after.tail.endswith("next\n"), after
    assert killer.tail.splitlines()[0] == after.tail.splitlines()[0]  # the same sandbox
    assert agents() == []


def test_a_check_sees_exactly_the_environment_it_is_given(checks: Checks) -> None:
    env = {**ENV, "HERO_CHECK_VALUE": "one"}

    result = checks.verify(
        "echo $HERO_CHECK_VALUE $HOME",
        "export HERO_CHECK_VALUE=changed; echo $HERO_CHECK_VALUE",
        "echo ${HERO_CHECK_VALUE:-unset}",
        env=env,
    )

    assert [c.tail for c in result.commands] == ["one /tmp/home\n", "changed\n", "one\n"]


def test_the_limits_hold_for_each_check(bwrap: str, tmp_path: Path, target_repo: Path) -> None:
    limited = make_checks(tmp_path, target_repo, Limits(file_size_mb=1))

    result = limited.verify(
        "head -c 2M /dev/zero > big", "echo fine", "rm big; head -c 2M /dev/zero > big"
    )

    big, fine, again = result.commands
    assert big.exit_code != 0 and "limit_file_size_mb" in big.tail, big
    assert fine.exit_code == 0 and fine.tail == "fine\n"  # a limit hit is the check's own
    assert again.exit_code != 0 and "limit_file_size_mb" in again.tail, again
    assert (limited.worktree / "big").stat().st_size == 1 << 20


def test_the_checks_have_the_network_verify_network_gives(
    checks: Checks, loopback_server: int
) -> None:
    code = (
        f"import socket; socket.create_connection(('127.0.0.1', {loopback_server}), "
        "timeout=10); print('reach' + 'ed')"
    )
    connect = f"{PY} -c {shlex.quote(code)}"

    closed = checks.verify(connect, connect)
    opened = checks.verify(connect, connect, sandbox=checks.box.with_network(True))

    assert [c.exit_code != 0 and "reached" not in c.tail for c in closed.commands] == [True] * 2
    assert [c.tail for c in opened.commands] == ["reached\n"] * 2


def test_a_session_given_is_used_as_it_is_and_left_open(checks: Checks) -> None:
    with SandboxSession(checks.box, checks.worktree) as session:
        first = checks.verify(INIT_STARTED, sandbox=session)
        second = checks.verify(INIT_STARTED, sandbox=session)
        assert len(agents()) == 1
    assert first.commands[0].tail == second.commands[0].tail
    assert session.started == 1 and agents() == []


def test_a_few_checks_get_a_sandbox_each(checks: Checks, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verifier, "ONE_SANDBOX_FROM", 3)
    mark, look = "touch /tmp/mark", "test -e /tmp/mark && echo shared || echo fresh"

    few = checks.verify(mark, look)
    enough = checks.verify(mark, look, look)

    assert [c.tail for c in few.commands] == ["", "fresh\n"]  # a sandbox each
    assert [c.tail for c in enough.commands] == ["", "shared\n", "shared\n"]  # one for all


def test_without_a_shared_sandbox_each_check_gets_one_and_the_log_says_why(
    checks: Checks, monkeypatch: pytest.MonkeyPatch
) -> None:
    def start(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise session_module._StartFailed("no python in the sandbox")

    monkeypatch.setattr(session_module, "_start", start)
    mark, look = "touch /tmp/mark", "test -e /tmp/mark && echo shared || echo fresh"

    result = checks.verify(mark, look)

    assert [c.tail for c in result.commands] == ["", "fresh\n"] and result.passed
    assert "the shared one could not be made: no python in the sandbox" in checks.log.read_text()
