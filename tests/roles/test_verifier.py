"""Tests for hero.roles.verifier.run_verify: tiers of real shell commands in a directory."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from hero.errors import Interrupted
from hero.roles.verifier import TAIL_CHARS, CommandCheck, VerifyResult, run_verify
from hero.runner import child_env
from hero.story.record import VerifyTier


def verify(
    tmp_path: Path, *tiers: VerifyTier, timeout_s: float = 30.0, **kwargs: object
) -> VerifyResult:
    cwd = tmp_path / "wt"
    cwd.mkdir(exist_ok=True)
    return run_verify(
        tuple(tiers),
        cwd,
        timeout_s=timeout_s,
        env=kwargs.pop("env", child_env()),  # type: ignore[arg-type]
        log_path=tmp_path / "runs" / "s1" / "verify-r1.log",
        **kwargs,  # type: ignore[arg-type]
    )


def test_all_tiers_pass(tmp_path: Path) -> None:
    result = verify(
        tmp_path,
        VerifyTier("fast", ("echo lint ok", "true")),
        VerifyTier("tests", ("echo tests ok",)),
    )
    assert result.passed
    assert [(c.tier, c.command, c.exit_code) for c in result.commands] == [
        ("fast", "echo lint ok", 0),
        ("fast", "true", 0),
        ("tests", "echo tests ok", 0),
    ]
    assert result.skipped_tiers == ()
    assert result.commands[0].tail == "lint ok\n"
    assert not result.commands[0].timed_out


def test_failing_tier_runs_all_its_commands_and_skips_later_tiers(tmp_path: Path) -> None:
    result = verify(
        tmp_path,
        VerifyTier("fast", ("echo first; exit 3", "echo second", "exit 1")),
        VerifyTier("tests", ("touch ran-tests",)),
        VerifyTier("e2e", ("touch ran-e2e",)),
    )
    assert not result.passed
    assert [c.exit_code for c in result.commands] == [3, 0, 1]
    assert {c.tier for c in result.commands} == {"fast"}
    assert result.skipped_tiers == ("tests", "e2e")
    assert not (tmp_path / "wt" / "ran-tests").exists()
    assert not (tmp_path / "wt" / "ran-e2e").exists()


def test_second_tier_failure_skips_only_what_follows(tmp_path: Path) -> None:
    result = verify(
        tmp_path,
        VerifyTier("a", ("true",)),
        VerifyTier("b", ("false",)),
        VerifyTier("c", ("true",)),
    )
    assert not result.passed
    assert [c.tier for c in result.commands] == ["a", "b"]
    assert result.skipped_tiers == ("c",)


def test_commands_run_in_the_worktree(tmp_path: Path) -> None:
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / "marker.txt").write_text("here\n")
    result = verify(tmp_path, VerifyTier("verify", ("cat marker.txt",)))
    assert result.passed
    assert result.commands[0].tail == "here\n"


@pytest.mark.slow
def test_timeout_gives_exit_124(tmp_path: Path) -> None:
    result = verify(
        tmp_path,
        VerifyTier("slow", ("echo started; sleep 30", "echo after")),
        VerifyTier("later", ("true",)),
        timeout_s=0.5,
    )
    assert not result.passed
    slow = result.commands[0]
    assert slow.exit_code == 124
    assert slow.timed_out
    assert "started" in slow.tail
    # The rest of the tier still runs; later tiers do not.
    assert result.commands[1].exit_code == 0
    assert result.skipped_tiers == ("later",)
    log = Path(result.log_path).read_text()
    assert "=== exit 124 (timed out after 0.5 s)" in log
    assert "(timed out)" in result.summary()


def test_log_holds_every_commands_full_output_and_exit_codes(tmp_path: Path) -> None:
    big = "python3 -c \"print('\\n'.join(f'row {i:05d}' for i in range(3000)))\""
    result = verify(
        tmp_path,
        VerifyTier("fast", (big, "echo oops >&2; exit 2")),
        VerifyTier("tests", ("echo never",)),
    )
    log_path = tmp_path / "runs" / "s1" / "verify-r1.log"
    assert result.log_path == str(log_path)
    log = log_path.read_text()

    assert f"=== tier fast: $ {big}" in log
    assert all(f"row {i:05d}\n" in log for i in (0, 1500, 2999))
    assert "=== exit 0 " in log
    assert "=== tier fast: $ echo oops >&2; exit 2\noops\n=== exit 2 " in log
    assert "=== tier tests: skipped, an earlier tier failed" in log
    assert "never" not in log.replace("echo never", "")

    # The tail kept in the result is bounded and ends with the end of the output.
    tail = result.commands[0].tail
    assert len(tail) <= TAIL_CHARS
    assert tail.endswith("row 02999\n")
    assert "row 00000" not in tail
    assert result.commands[1].tail == "oops\n"


def test_env_is_passed_to_commands(tmp_path: Path) -> None:
    env = child_env(extra={"HERO_PROBE": "probe-value"})
    result = verify(
        tmp_path,
        VerifyTier("env", ('echo "CI=$CI probe=$HERO_PROBE"',)),
        env=env,
    )
    assert result.commands[0].tail.strip() == "CI=1 probe=probe-value"


def test_empty_tiers_pass_with_no_commands(tmp_path: Path) -> None:
    result = verify(tmp_path)
    assert result.passed
    assert result.commands == ()
    assert result.skipped_tiers == ()
    assert Path(result.log_path).exists()
    assert result.summary() == "No verify commands are configured for this story."
    assert result.failures() == ""
    assert result.to_dict() == {
        "passed": True,
        "commands": [],
        "skipped_tiers": [],
        "log": result.log_path,
    }


def test_summary_and_failures_text(tmp_path: Path) -> None:
    result = verify(
        tmp_path,
        VerifyTier("fast", ("echo fine", "echo broken; exit 5")),
        VerifyTier("tests", ("true",)),
    )
    summary = result.summary()
    assert "- [PASS] fast: `echo fine` exit 0" in summary
    assert "- [FAIL] fast: `echo broken; exit 5` exit 5" in summary
    assert "not run (an earlier tier failed): tests" in summary

    failures = result.failures()
    assert "`echo broken; exit 5` exited 5" in failures
    assert "broken" in failures
    assert "echo fine" not in failures

    as_dict = result.to_dict()
    assert as_dict["passed"] is False
    assert as_dict["skipped_tiers"] == ["tests"]
    assert as_dict["commands"][1]["exit_code"] == 5


def test_check_records_are_plain_data(tmp_path: Path) -> None:
    result = verify(tmp_path, VerifyTier("t", ("true",)))
    check = result.commands[0]
    assert isinstance(check, CommandCheck)
    assert check.duration_s >= 0


def test_cancel_raises_interrupted(tmp_path: Path) -> None:
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    try:
        with pytest.raises(Interrupted):
            verify(tmp_path, VerifyTier("slow", ("sleep 30",)), cancel=cancel)
    finally:
        timer.cancel()
