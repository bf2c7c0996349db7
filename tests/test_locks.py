"""hero.locks: the story lock, the daemon lock, and the probe `hero status` and the
dispatcher use. Real files, real flock, a real second process where it matters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hero.locks import (
    DaemonLock,
    DaemonRunning,
    StoryBusy,
    daemon_lock_path,
    is_held,
    read_holder,
    read_pid,
    repo_story_lock,
    repo_story_lock_path,
    story_lock,
    story_lock_path,
)

HOLD = """
import fcntl, sys, time
fh = open(sys.argv[1], "a")
fcntl.flock(fh, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def hold_in_another_process(path: Path) -> subprocess.Popen[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_story_lock_refuses_a_second_taker_and_is_free_after(tmp_path: Path) -> None:
    path = story_lock_path(tmp_path, "s1")
    assert not is_held(path) and not path.exists()  # the probe creates nothing
    with story_lock(tmp_path, "s1"):
        assert is_held(path)
        with pytest.raises(StoryBusy, match="'s1'"), story_lock(tmp_path, "s1"):
            pass
    assert not is_held(path)
    with story_lock(tmp_path, "s1"):  # taken again once let go
        pass


def test_a_lock_held_by_another_process_is_seen_and_dies_with_it(tmp_path: Path) -> None:
    path = story_lock_path(tmp_path, "s1")
    proc = hold_in_another_process(path)
    try:
        assert is_held(path)
        with pytest.raises(StoryBusy), story_lock(tmp_path, "s1"):
            pass
    finally:
        proc.kill()
        proc.wait()
    assert not is_held(path)  # the kernel let it go with the process
    with story_lock(tmp_path, "s1"):
        pass


def test_a_probe_never_makes_a_taker_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`hero status` probing just as a run takes its lock: the taker tries again. The probe
    is let go during the taker's first pause, whatever the machine's load."""
    import fcntl

    import hero.locks

    path = story_lock_path(tmp_path, "s1")
    path.parent.mkdir(parents=True)
    path.touch()
    probe = open(path, "rb")  # noqa: SIM115 - closed by the pause below
    fcntl.flock(probe, fcntl.LOCK_SH)  # a probe caught mid-look
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if not probe.closed:
            probe.close()  # the probe is done looking

    monkeypatch.setattr(hero.locks.time, "sleep", pause)
    with story_lock(tmp_path, "s1"):
        assert is_held(path)
    assert len(pauses) == 1


def test_daemon_lock_names_the_holder_and_is_taken_over_after_it(tmp_path: Path) -> None:
    first = DaemonLock(tmp_path)
    first.acquire()
    path = daemon_lock_path(tmp_path)
    assert is_held(path) and read_pid(path) == os.getpid()
    with pytest.raises(DaemonRunning, match=f"pid {os.getpid()}"):
        DaemonLock(tmp_path).acquire()
    first.release()
    assert not is_held(path)
    second = DaemonLock(tmp_path)
    second.acquire()
    second.release()


def test_read_pid_of_missing_or_odd_files(tmp_path: Path) -> None:
    assert read_pid(tmp_path / "nope") is None
    (tmp_path / "odd").write_text("not a pid\n")
    assert read_pid(tmp_path / "odd") is None
    (tmp_path / "pid").write_text(" 4242\n")
    assert read_pid(tmp_path / "pid") == 4242


TAKE_REPO_LOCK = """
import sys
from pathlib import Path
from hero.locks import repo_story_lock
with repo_story_lock(Path(sys.argv[1]), "s1", Path(sys.argv[2])):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_repo_story_lock_refuses_another_home_naming_it(tmp_path: Path) -> None:
    common, home_a, home_b = tmp_path / "repo.git", tmp_path / "home-a", tmp_path / "home-b"
    path = repo_story_lock_path(common, "s1")
    assert path == common / "hero" / "locks" / "s1.lock"
    other = subprocess.Popen(
        [sys.executable, "-c", TAKE_REPO_LOCK, str(common), str(home_a)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        assert read_holder(path) == {"home": str(home_a.resolve()), "pid": other.pid}
        with pytest.raises(StoryBusy) as info, repo_story_lock(common, "s1", home_b):
            pass
        assert f"{home_a.resolve()} (pid {other.pid})" in str(info.value)
        with repo_story_lock(common, "s2", home_b):  # another story is free
            pass
    finally:
        other.communicate("")
    assert not is_held(path) and read_holder(path) == {}  # let go, and says so
    with repo_story_lock(common, "s1", home_b):
        assert read_holder(path)["home"] == str(home_b.resolve())
