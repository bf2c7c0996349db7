"""The net for processes a story's command left behind: every process started for one story
carries the story's marker (``RUN_MARKER``) in its environment, so its detached leftovers, and a
crashed run's, are found through /proc and ended (``kill_marked``), whatever their process group.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from collections.abc import Set as AbstractSet

#: Environment variable that marks every process started for one story, so that its
#: command's detached leftovers, and a crashed run's, can be found and ended.
RUN_MARKER = "HERO_RUN_MARKER"
#: Passes over /proc: a process killed while it forks may leave a child the pass missed.
_KILL_PASSES = 5
#: Seconds ``kill_marked`` waits for the processes it killed to be gone.
KILL_WAIT_S = 2.0


def running_pids() -> frozenset[int] | None:
    """The pids in /proc now (one directory listing), or None where /proc is not there."""
    try:
        return frozenset(int(e) for e in os.listdir("/proc") if e.isdigit())
    except OSError:
        return None


def kill_marked(marker: str, *, spare: AbstractSet[int] = frozenset()) -> int:
    """SIGKILL every process of this user whose environment has ``RUN_MARKER=marker``,
    except hero itself and the pids in ``spare``; returns how many were killed.

    Used before a story runs (a hero process killed with SIGKILL cannot clean up its
    commands), and by ``run_command`` after each marked command, with ``spare`` the pids
    that were there before the command started: only the processes that appeared since
    are read, so the check costs one /proc listing and a read per new process. Another
    story's processes carry another marker and hero's own none. Passes over /proc until
    one finds nothing (a process killed mid-fork leaves no child behind), then waits a
    moment for the killed ones to be gone. Does nothing where /proc is not available.
    """
    needle = b"\0" + f"{RUN_MARKER}={marker}".encode() + b"\0"
    skip = set(spare)
    skip.add(os.getpid())
    killed: list[int] = []
    for _ in range(_KILL_PASSES):
        pids = running_pids()
        if pids is None:
            break
        again = False  # something killed (it may have forked), or a process mid-exec
        for pid in sorted(pids - skip):  # parents (mostly older, lower pids) first
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    environ = fh.read()
            except OSError:
                skip.add(pid)  # gone, or not ours
                continue
            if not environ and _mid_exec(pid):
                again = True  # its environment reads empty for a moment: look again
                continue
            skip.add(pid)
            if needle in b"\0" + environ + b"\0":
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    continue
                killed.append(pid)
                again = True
        if not again:
            break
        time.sleep(0.001)
    _wait_gone(killed, KILL_WAIT_S)
    return len(killed)


def stat_fields(pid: int) -> list[bytes]:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...); [] if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2 :].split()


def _mid_exec(pid: int) -> bool:
    """Whether a process whose environment reads empty may just be in ``execve`` (its new
    environment not in place yet), rather than a zombie or a kernel thread."""
    fields = stat_fields(pid)
    if len(fields) < 7 or fields[0] in (b"Z", b"X"):
        return False
    return not int(fields[6]) & 0x00200000  # PF_KTHREAD


def _wait_gone(pids: Iterable[int], timeout_s: float) -> None:
    """Wait until each of ``pids`` has exited (a zombie counts as gone), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline:
            fields = stat_fields(pid)
            if not fields or fields[0] in (b"Z", b"X"):
                break
            time.sleep(0.002)
