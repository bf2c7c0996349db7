"""What the tests of shared sandboxes (a round's, a verification's) look for on the host: the
sandbox agents this test process started, the processes a command left, and a story's
repository with its sandbox built as the pipeline builds it."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from conftest import git
from helpers import PY, alive

from hero.git.ops import TargetRepo
from hero.git.storyrepo import StoryRepo
from hero.sandbox import pid1 as sandbox_agent
from hero.sandbox.bwrap import Sandbox, resolve
from hero.sandbox.limits import Limits


def story_sandbox(
    tmp_path: Path, target_repo: Path, limits: Limits | None = None, *, cgroups: bool = True
) -> tuple[Path, Sandbox]:
    """A story's repository (``hero/s1`` of ``target_repo``) in a hero home
    (``tmp_path/home``, which may hold files already), and its sandbox: the worktree, the
    Sandbox."""
    home = tmp_path / "home"
    (home / "worktrees").mkdir(parents=True, exist_ok=True)
    worktree = home / "worktrees" / "s1"
    target = TargetRepo(target_repo)
    git(target_repo, "branch", "hero/s1")
    repo = StoryRepo(target, worktree, "hero/s1")
    repo.lay_out(target.rev_parse("hero/s1"))
    box = resolve(
        "bwrap",
        worktree=worktree,
        objects=repo.objects_dir(),
        guarded=repo.guarded(),
        hide=(home, target_repo),
        limits=limits or Limits(),
        cgroups=cgroups,
    )
    assert box is not None
    return worktree, box


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(") ", 1)[1].split()[1])


def agents() -> list[int]:
    """The sandbox agents this test process started (the children of its bwraps) that run."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if sandbox_agent.BOOT.encode() in argv and argv[0] == sys.executable.encode():
            if _parent(_parent(int(name))) == os.getpid() and alive(int(name)):
                found.append(int(name))
    return found


def processes_with(token: str) -> list[int]:
    """The live processes with ``token`` in their command line."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if token.encode() in Path(f"/proc/{name}/cmdline").read_bytes() and alive(int(name)):
                found.append(int(name))
        except OSError:
            continue
    return found


def daemon(token: str, fifo: str) -> str:
    """Shell that starts a detached process (``token`` in its argv) that says "up" into
    ``fifo`` and sleeps 300 s, and waits for it to be up (``$a``)."""
    code = f"import time; open('{fifo}', 'w').write('up\\n'); time.sleep(300)  # {token}"
    return f"mkfifo {fifo} && {{ setsid {PY} -c {shlex.quote(code)} & }} && read a < {fifo}"
