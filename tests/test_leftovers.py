"""Processes left behind by a crashed run are ended by the next run."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from hero.runner import RUN_MARKER, kill_marked


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
