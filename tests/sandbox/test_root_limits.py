"""The limits as root, and what of the homes a command sees (issue 32, root 4): real bwrap,
real processes, a real story repository and a round's session as the pipeline builds them.

- 500 background processes (plain, ``setsid``, ``nohup``, double forks), in several commands
  of one round: bounded by ``limit_processes`` whichever mechanism holds here (cgroup v1 or v2
  pids, or, as root with ``sandbox_cgroups: off``, commands run as an unprivileged uid that
  RLIMIT_NPROC holds), nothing left running, and the round still works: files written in the
  worktree, a commit made, and all of it root's again once the command ended.
- A directory of a home on PATH (``~/bin``) is not shown; a ``toolchain_dirs`` one is,
  read-only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import git
from sandbox_support import story_sandbox

from hero.git.ops import DEFAULT_IDENTITY
from hero.runner import child_env, run_command
from hero.sandbox.bwrap import Sandbox, build, hidden_path_dirs
from hero.sandbox.limits import HOLDS_UID, HOLDS_WEAK, Limits, holds
from hero.sandbox.session import SandboxSession

ENV = child_env(extra=DEFAULT_IDENTITY)
MARK = f"301.{os.getpid()}"  # how the attack's sleeps are found on the host
ATTACKS = (
    f"for i in $(seq 500); do sleep {MARK} & done; echo started",
    f"for i in $(seq 500); do setsid sleep {MARK} & done; echo started",
    f"for i in $(seq 500); do nohup sleep {MARK} >/dev/null 2>&1 & done; echo started",
    f"for i in $(seq 500); do (sleep {MARK} &) ; done; echo started",
)


def _sleeps() -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if MARK.encode() in fh.read():
                    found.append(int(name))
        except (OSError, ValueError):
            continue
    return found


def _box(tmp_path: Path, target_repo: Path, *, cgroups: bool) -> Sandbox:
    return story_sandbox(tmp_path, target_repo, Limits(processes=64), cgroups=cgroups)[1]


@pytest.fixture(params=["auto", "off"])
def box(request: pytest.FixtureRequest, bwrap: str, tmp_path: Path, target_repo: Path) -> Sandbox:
    cgroups = request.param == "auto"
    if not cgroups and os.geteuid() != 0:
        pytest.skip("sandbox_cgroups: off changes nothing of the uid unless hero runs as root")
    if holds(cgroups=cgroups) == HOLDS_WEAK:
        pytest.skip(f"processes cannot be limited here: {holds(cgroups=cgroups)}")
    return _box(tmp_path, target_repo, cgroups=cgroups)


@pytest.fixture
def session(box: Sandbox) -> Iterator[SandboxSession]:
    worktree = Path(box.worktrees[0])
    with SandboxSession(box, worktree) as made:
        yield made


def test_500_background_processes_are_bounded_in_every_command_of_a_round(
    box: Sandbox, session: SandboxSession
) -> None:
    worktree = Path(box.worktrees[0])
    if not box.cgroups and os.geteuid() == 0:
        assert box.uid is not None and holds(cgroups=False) == HOLDS_UID

    results = [_run(session, worktree, attack) for attack in ATTACKS]
    after = _run(
        session,
        worktree,
        "mkdir -p pkg && echo made > pkg/new.txt && chmod 4755 pkg/new.txt && "
        "git add pkg && git commit -qm 'made in the sandbox' && echo committed",
    )

    for result in results:  # each stopped at the limit: forks refused
        assert "Cannot fork" in result.output, result.output[-300:]
    assert _sleeps() == []  # nothing outlived its command
    assert after.exit_code == 0 and after.output.endswith("committed\n"), after.output
    assert session.started == 1  # one sandbox for the whole round
    made = worktree / "pkg" / "new.txt"
    assert made.read_text() == "made\n"
    assert git(worktree, "log", "-1", "--format=%s").strip() == "made in the sandbox"
    # outside a command, everything is hero's again, and no set-uid file is left
    for path in (made, made.parent, worktree / ".git" / "index"):
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid()), path
    if box.uid is not None:  # made by the uid: no set-uid file of root's comes of it
        assert not made.stat().st_mode & (stat.S_ISUID | stat.S_ISGID)


def test_a_check_in_a_sandbox_of_its_own_is_bounded_too(box: Sandbox) -> None:
    worktree = Path(box.worktrees[0])
    result = run_command(ATTACKS[1], worktree, timeout_s=120, env=ENV, sandbox=box)
    wrote = run_command(
        "echo ok > check.txt && cat check.txt", worktree, timeout_s=120, env=ENV, sandbox=box
    )

    assert "Cannot fork" in result.output, result.output[-300:]
    assert _sleeps() == []
    assert wrote.exit_code == 0 and wrote.output == "ok\n", wrote.output
    assert (worktree / "check.txt").stat().st_uid == os.geteuid()


def _run(session: SandboxSession, worktree: Path, command: str):  # type: ignore[no-untyped-def]
    return run_command(command, worktree, timeout_s=120, env=ENV, sandbox=session)


# ----------------------------------------------------------------------------- homes


def test_a_home_directory_on_path_is_not_shown_and_a_named_toolchain_is_read_only(
    bwrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "alice"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "deploy-secret").write_text("API_TOKEN=hunter2\n")
    tool = home / ".cargo" / "bin"
    tool.mkdir(parents=True)
    (tool / "mytool").write_text("#!/bin/sh\necho tool ran\n")
    (tool / "mytool").chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{home / 'bin'}:{tool}:{os.environ['PATH']}")
    worktree = tmp_path / "work"
    worktree.mkdir()

    ours = [d for d in hidden_path_dirs() if d.startswith(str(home))]
    assert ours == [str(home / "bin"), str(tool)]
    assert str(home / "bin") in hidden_path_dirs([str(home / ".cargo")])
    assert str(tool) not in hidden_path_dirs([str(home / ".cargo")])
    box = build(worktree, None, toolchains=[str(home / ".cargo")], limits=Limits())
    result = run_command(
        f"cat {home}/bin/deploy-secret; ls {home}/bin; mytool; "
        f"touch {tool}/x && echo WROTE; echo done",
        worktree,
        timeout_s=120,
        env=ENV | {"PATH": os.environ["PATH"]},
        sandbox=box,
    )

    assert "hunter2" not in result.output
    assert f"cannot access '{home}/bin': No such file or directory" in result.output
    assert "tool ran" in result.output  # the named toolchain is there
    assert "WROTE" not in result.output and "Read-only file system" in result.output
    assert result.output.endswith("done\n"), result.output
