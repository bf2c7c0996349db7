"""Processes a story started do not outlive it: those a crashed run left are ended by the
next run, and those a command detached (setsid, nohup) are ended when the command returns."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hero.leftovers import RUN_MARKER, kill_marked
from hero.runner import run_command


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_kill_marked_ends_marked_processes_only(tmp_path: Path) -> None:
    env = dict(os.environ)
    home = str(tmp_path)  # unique per test run: another suite running beside this one is safe
    marked = subprocess.Popen(
        ["sleep", "60"], env={**env, RUN_MARKER: f"{home}/story-1"}, start_new_session=True
    )
    other = subprocess.Popen(
        ["sleep", "60"], env={**env, RUN_MARKER: f"{home}/story-10"}, start_new_session=True
    )
    try:
        assert kill_marked(f"{home}/story-1") == 1
        marked.wait(timeout=10)
        assert marked.returncode == -9
        assert _alive(other.pid)
    finally:
        other.kill()
        other.wait()


def test_kill_marked_reaches_grandchildren(tmp_path: Path) -> None:
    env = {**os.environ, RUN_MARKER: f"{tmp_path}/grand"}
    shell = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; wait"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    grandchild = int(shell.stdout.readline())  # type: ignore[union-attr]
    assert kill_marked(f"{tmp_path}/grand") >= 2  # the shell and its background child
    shell.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


# ---------------------------------------------------------------- after every marked command


def _marked_env(tmp_path: Path, story: str = "s1") -> dict[str, str]:
    return {**os.environ, RUN_MARKER: f"{tmp_path}/{story}"}


def detach(pid_file: Path, prefix: str = "") -> str:
    """Shell: start `sleep 777` in a session of its own (``prefix`` before ``setsid``), and
    go on only once it is there: its pid in ``pid_file``, written after ``setsid``."""
    return (
        f"{prefix}setsid sh -c 'echo $$ > {pid_file}; exec sleep 777' >/dev/null 2>&1 & "
        f"while [ ! -s {pid_file} ]; do sleep 0.01; done; "
    )


def _pid(pid_file: Path) -> int:
    return int(pid_file.read_text())


def test_a_detached_process_ends_when_its_command_returns(tmp_path: Path) -> None:
    a, b = tmp_path / "a.pid", tmp_path / "b.pid"
    try:
        result = run_command(
            detach(a) + detach(b, prefix="nohup "),
            tmp_path,
            timeout_s=30,
            env=_marked_env(tmp_path),
        )
        assert result.exit_code == 0, result.output
        assert not _alive(_pid(a)) and not _alive(_pid(b))  # gone by the time it returned
    finally:
        _kill_all(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_a_detached_process_ends_with_a_command_that_is_stopped(tmp_path: Path, how: str) -> None:
    pid_file = tmp_path / "detached.pid"
    cancel = threading.Event()
    if how == "cancel":  # once the detached process is there, while the command goes on

        def cancel_once_detached() -> None:
            deadline = time.monotonic() + 30
            while not pid_file.exists() or not pid_file.read_text().strip():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            cancel.set()

        threading.Thread(target=cancel_once_detached, daemon=True).start()
    try:
        result = run_command(
            detach(pid_file) + "sleep 60",
            tmp_path,
            timeout_s=1.0 if how == "timeout" else 60,
            env=_marked_env(tmp_path),
            cancel=cancel,
        )
        assert result.timed_out if how == "timeout" else result.cancelled
        assert not _alive(_pid(pid_file))
    finally:
        _kill_all(pid_file)


def test_another_storys_and_unmarked_processes_are_left_alone(tmp_path: Path) -> None:
    """Stories run in parallel in one daemon, each with its marker: a command ends only
    what carries its own story's marker, and only what started while it ran."""
    before = subprocess.Popen(  # the same story's, started before this command
        ["sleep", "60"], env=_marked_env(tmp_path), start_new_session=True
    )
    other, unmarked, own = (tmp_path / f"{name}.pid" for name in ("other", "unmarked", "own"))
    try:
        result = run_command(
            detach(other, prefix=f"{RUN_MARKER}={tmp_path}/s10 ")
            + detach(unmarked, prefix=f"env -u {RUN_MARKER} ")
            + detach(own),
            tmp_path,
            timeout_s=30,
            env=_marked_env(tmp_path),
        )
        assert result.exit_code == 0, result.output
        assert not _alive(_pid(own))
        assert _alive(_pid(other)) and _alive(_pid(unmarked)) and _alive(before.pid)
    finally:
        _kill_all(other, unmarked, own)
        before.kill()
        before.wait()


def _kill_all(*pid_files: Path) -> None:
    for pid_file in pid_files:
        try:
            os.kill(_pid(pid_file), signal.SIGKILL)
        except (OSError, ValueError):
            pass
