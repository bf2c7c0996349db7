"""Tests for hero.git.ops: worktrees, branches, commits, diffs and the repo lock, on real git."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import git

from hero.git.ops import (
    DEFAULT_IDENTITY,
    GitError,
    TargetRepo,
    clear_stale_locks,
    diff_since,
    head_sha,
    log_since,
)
from hero.git.ops import git as git_call
from hero.git.output import commit_all
from hero.git.storyrepo import StoryRepo


def worktree_paths(repo: Path) -> list[Path]:
    listing = git(repo, "worktree", "list", "--porcelain")
    return [
        Path(line[len("worktree ") :]).resolve()
        for line in listing.splitlines()
        if line.startswith("worktree ")
    ]


def commit_file(cwd: Path, name: str, content: str, message: str) -> str:
    path = cwd / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    git(cwd, "add", "-A")
    git(cwd, "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(target_repo: Path) -> TargetRepo:
    return TargetRepo(target_repo)


@pytest.fixture
def base(target_repo: Path) -> str:
    return git(target_repo, "rev-parse", "HEAD").strip()


# ------------------------------------------------------------------------- worktrees


def add_worktree(target_repo: Path, branch: str, path: Path, base: str) -> Path:
    """A linked worktree of a new branch, as an earlier hero (or a person) made it."""
    git(target_repo, "worktree", "add", "-q", "-b", branch, str(path), base)
    return path


def test_keep_branch_aside_renames_and_keeps_commits(
    repo: TargetRepo, base: str, tmp_path: Path, target_repo: Path
) -> None:
    wt = add_worktree(target_repo, "hero/x", tmp_path / "worktrees" / "x", base)
    sha = commit_file(wt, "work.txt", "work\n", "work to keep")

    new = repo.keep_branch_aside("hero/x", wt)

    assert new.startswith("hero/x-prev-")
    assert repo.branch_sha("hero/x") is None
    assert repo.branch_sha(new) == sha
    assert "work to keep" in git(target_repo, "log", "--format=%s", new)
    assert wt.resolve() not in worktree_paths(target_repo)

    assert not wt.exists()
    # The name and the folder are free again: a fresh branch starts at the base.
    add_worktree(target_repo, "hero/x", wt, base)
    assert head_sha(wt) == base


def test_keep_branch_aside_refuses_a_worktree_it_did_not_create(
    repo: TargetRepo, base: str, tmp_path: Path, target_repo: Path
) -> None:
    theirs = add_worktree(target_repo, "hero/x", tmp_path / "home-a" / "worktrees" / "x", base)
    sha = commit_file(theirs, "a.txt", "a\n", "their work")
    (theirs / "uncommitted.txt").write_text("precious\n")

    with pytest.raises(GitError, match="did not create") as info:
        repo.keep_branch_aside("hero/x", tmp_path / "home-b" / "worktrees" / "x")

    assert str(theirs) in str(info.value)
    assert repo.branch_sha("hero/x") == sha  # not renamed
    assert (theirs / "uncommitted.txt").read_text() == "precious\n"
    assert theirs.resolve() in worktree_paths(target_repo)


def test_keep_branch_aside_twice_gives_distinct_names(repo: TargetRepo, base: str) -> None:
    git(repo.path, "branch", "hero/x", base)
    first = repo.keep_branch_aside("hero/x")
    git(repo.path, "branch", "hero/x", base)
    second = repo.keep_branch_aside("hero/x")
    assert first != second
    assert repo.branch_sha(first) == repo.branch_sha(second) == base


# ------------------------------------------------------------------------- identity


def test_identity_env_defaults_without_user_config(repo: TargetRepo) -> None:
    assert repo.identity_env() == DEFAULT_IDENTITY


def test_identity_env_empty_when_repo_has_user(target_repo: Path) -> None:
    git(target_repo, "config", "user.name", "Repo Owner")
    git(target_repo, "config", "user.email", "owner@example.com")
    assert TargetRepo(target_repo).identity_env() == {}


def test_identity_env_needs_both_name_and_email(target_repo: Path) -> None:
    git(target_repo, "config", "user.name", "Only Name")
    assert TargetRepo(target_repo).identity_env() == DEFAULT_IDENTITY


# ------------------------------------------------------------------------- commits and diffs


def test_diff_since_keeps_whole_files_and_names_omitted(target_repo: Path) -> None:
    base = head_sha(target_repo)
    (target_repo / "a_small.txt").write_text("small a\n")
    (target_repo / "b_big.txt").write_text("".join(f"line {i}\n" for i in range(500)))
    (target_repo / "c_small.txt").write_text("small c\n")
    commit_all(target_repo, "three files", DEFAULT_IDENTITY)

    full, stat = diff_since(target_repo, base)
    assert full.cut_chars == 0 and full.omitted == ()
    assert "b/b_big.txt" in full.text

    bounded, stat2 = diff_since(target_repo, base, max_chars=600)
    assert stat2 == stat
    assert "a_small.txt" in stat and "b_big.txt" in stat and "c_small.txt" in stat
    assert len(bounded.text) <= 600
    assert "+small a" in bounded.text
    assert "+small c" in bounded.text
    assert "b_big.txt" not in bounded.text
    assert "line 1" not in bounded.text
    assert len(bounded.omitted) == 1
    assert bounded.omitted[0].startswith("b_big.txt (")
    assert "lines)" in bounded.omitted[0]
    assert bounded.cut_chars > 500 * len("+line 0\n") // 2


def test_diff_since_with_no_changes(target_repo: Path) -> None:
    base = head_sha(target_repo)
    bounded, stat = diff_since(target_repo, base)
    assert bounded.text == "" and stat == ""


def test_log_since(target_repo: Path) -> None:
    base = head_sha(target_repo)
    assert log_since(target_repo, base).text == ""
    commit_file(target_repo, "one.txt", "1\n", "first change")
    commit_file(target_repo, "two.txt", "2\n", "second change")

    log = log_since(target_repo, base)
    lines = log.text.splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["second change", "first change"]
    assert log.cut_chars == 0

    short = log_since(target_repo, base, max_chars=10)
    assert len(short.text) == 10
    assert short.cut_chars == len(log.text) - 10


def test_rev_parse(repo: TargetRepo, base: str) -> None:
    assert repo.rev_parse("main") == base
    assert repo.rev_parse("HEAD") == base
    with pytest.raises(GitError) as info:
        repo.rev_parse("no-such-branch")
    assert "no-such-branch" in str(info.value)


def test_git_error_names_the_command(target_repo: Path) -> None:
    with pytest.raises(GitError) as info:
        git_call(target_repo, "checkout", "does-not-exist")
    assert "git checkout does-not-exist" in str(info.value)


# ------------------------------------------------------------------------- the lock


def _hold_lock(repo: TargetRepo, name: str, events: list[str], ready: threading.Barrier) -> None:
    ready.wait()
    with repo.locked():
        events.append(f"{name} in")
        time.sleep(0.05)
        events.append(f"{name} out")


def _assert_no_interleaving(events: list[str]) -> None:
    assert len(events) == 4
    for i in (0, 2):
        name = events[i].split()[0]
        assert events[i : i + 2] == [f"{name} in", f"{name} out"]


def test_locked_serializes_threads_on_one_repo(repo: TargetRepo) -> None:
    events: list[str] = []
    ready = threading.Barrier(2)
    threads = [
        threading.Thread(target=_hold_lock, args=(repo, name, events, ready)) for name in "ab"
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _assert_no_interleaving(events)


def test_locked_serializes_separate_repo_objects(target_repo: Path) -> None:
    # Two TargetRepo objects share no thread lock: only the flock on the git dir holds them.
    events: list[str] = []
    ready = threading.Barrier(2)
    threads = [
        threading.Thread(target=_hold_lock, args=(TargetRepo(target_repo), n, events, ready))
        for n in "ab"
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _assert_no_interleaving(events)
    assert (target_repo / ".git" / "hero.lock").exists()


def test_locked_from_a_worktree_uses_the_common_git_dir(
    repo: TargetRepo, base: str, tmp_path: Path, target_repo: Path
) -> None:
    wt = add_worktree(target_repo, "hero/x", tmp_path / "worktrees" / "x", base)
    with TargetRepo(wt).locked():
        pass
    assert (target_repo / ".git" / "hero.lock").exists()
    assert not (wt / "hero.lock").exists()


# ------------------------------------------------------------------------- git() itself


def _alive(pid: int) -> bool:
    """Running and not a zombie (some container inits never reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _wait_until(predicate: Callable[[], bool], within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


@pytest.mark.slow
def test_hung_git_times_out_and_leaves_no_process(target_repo: Path, tmp_path: Path) -> None:
    # A network remote that never answers, without a network: the ssh git runs sleeps.
    pids = tmp_path / "pids"
    ssh = f"echo $$ $PPID > {pids}; exec sleep 30 #"
    started = time.monotonic()
    with pytest.raises(GitError) as info:
        git_call(
            target_repo,
            "-c",
            f"core.sshCommand={ssh}",
            "ls-remote",
            "ssh://hero.invalid/repo.git",
            timeout_s=1,
        )
    assert time.monotonic() - started < 10  # ended, not waited out (the sleep is 30 s)
    assert str(info.value) == (
        f"git -c core.sshCommand={ssh} ls-remote ssh://hero.invalid/repo.git (in {target_repo}) "
        "timed out after 1 s and was ended with its child processes; git may be waiting for a "
        "lock, a credential prompt or a network remote"
    )
    ssh_pid, git_pid = map(int, pids.read_text().split())
    # git ran in its own process group, and that group is gone: git and the "ssh" child.
    assert _wait_until(lambda: not _alive(ssh_pid) and not _alive(git_pid))
    assert _group_members(git_pid) == []


def test_git_leaves_no_background_child_behind(target_repo: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "bg.pid"
    alias = f"!sleep 30 & echo $! > {pid_file}; echo started"
    started = time.monotonic()
    out = git_call(target_repo, "-c", f"alias.bg={alias}", "bg", timeout_s=20)
    assert out == "started\n"
    # git returned when it exited, not when the child holding its stdout did
    assert time.monotonic() - started < 10
    assert _wait_until(lambda: not _alive(int(pid_file.read_text())))


def test_git_environment_has_no_secrets_and_no_prompts(
    target_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-gitops-secret-1a2b3c4d5e"
    monkeypatch.setenv("HERO_TEST_API_KEY", secret)
    monkeypatch.setenv("GIT_DIR", "/nonexistent/.git")  # would point git elsewhere
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", "false")  # would change the diff hero reads
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")  # a submodule clone needs it
    monkeypatch.setenv("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    out = git_call(target_repo, "-c", "alias.showenv=!env", "showenv")
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert secret not in out and "HERO_TEST_API_KEY" not in env
    assert env.get("GIT_DIR") != "/nonexistent/.git" and "GIT_EXTERNAL_DIFF" not in env
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert (env["GIT_EDITOR"], env["GIT_PAGER"], env["LC_ALL"]) == ("true", "cat", "C")
    # what git needs is still there: where its config lives, where its programs are
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["PATH"]
    assert env["HTTPS_PROXY"] == "http://proxy.invalid:3128"
    assert env["GIT_SSH_COMMAND"] == "ssh -o BatchMode=yes"


def test_hero_git_runs_no_hooks(repo: TargetRepo, base: str, tmp_path: Path) -> None:
    wt = add_worktree(repo.path, "hero/x", tmp_path / "worktrees" / "x", base)  # hooks not yet
    hooks = repo.path / ".git" / "hooks"
    fired = tmp_path / "fired"
    for name in ("post-checkout", "reference-transaction", "post-commit", "pre-commit"):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> {fired}\n")
        (hooks / name).chmod(0o755)
    git(repo.path, "commit", "-q", "--allow-empty", "-m", "hooks are live")  # plain git
    assert "post-commit" in fired.read_text()
    fired.unlink()

    (wt / "new.txt").write_text("new\n")
    assert commit_all(wt, "hero: commit", DEFAULT_IDENTITY)
    repo.keep_branch_aside("hero/x", wt)
    assert not fired.exists()


def test_git_that_cannot_start_is_a_git_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(GitError) as info:
        git_call(missing, "status")
    assert str(info.value).startswith(f"git status (in {missing}) could not start: ")


# ------------------------------------------------------------------------- stale lock files

HOLD_LOCK = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # as git takes it
os.write(fd, b"0" * 40 + b"\\n")
print("held", flush=True)
sys.stdin.read()  # until told
os.unlink(sys.argv[1])  # as git lets go (it renames it into place)
"""


def hold_lock(path: Path) -> subprocess.Popen[str]:
    """A live process holding ``path`` open, as git holds its lock file while it works."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def age(path: Path, seconds: float = 30.0) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.fixture
def story_wt(target_repo: Path, base: str, tmp_path: Path) -> Path:
    """A story of an earlier hero's layout: a linked worktree of the target on hero/x."""
    return add_worktree(target_repo, "hero/x", tmp_path / "worktrees" / "x", base)


@pytest.mark.slow
def test_git_killed_mid_commit_leaves_locks_that_are_waited_on_then_cleared(
    repo: TargetRepo, story_wt: Path, target_repo: Path
) -> None:
    """A real git stopped in the middle of its commit (its reflog is a FIFO nobody reads):
    while it lives its ref locks are waited on, though git has closed them; after kill -9
    they are stale, and removed."""
    common = target_repo / ".git"
    reflog = common / "logs" / "refs" / "heads" / "hero" / "x"
    reflog.unlink()
    os.mkfifo(reflog)
    (story_wt / "work.txt").write_text("work\n")
    git(story_wt, "add", "-A")
    stuck = subprocess.Popen(
        ["git", "commit", "-q", "-m", "stuck"],
        cwd=story_wt,
        env={**os.environ, **DEFAULT_IDENTITY},
        stdin=subprocess.DEVNULL,
    )
    head_lock = common / "worktrees" / "x" / "HEAD.lock"
    ref_lock = common / "refs" / "heads" / "hero" / "x.lock"
    try:
        deadline = time.monotonic() + 30
        while not (head_lock.exists() and ref_lock.exists()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert head_lock.exists() and ref_lock.exists()
        notes: list[str] = []
        with pytest.raises(GitError, match=f"pid {stuck.pid}"):
            clear_stale_locks(repo, "hero/x", story_wt, notes.append, wait_s=0.5)
        assert head_lock.exists() and ref_lock.exists()  # a live git's locks are kept
        assert not any("removed" in n for n in notes)
    finally:
        stuck.kill()
        stuck.wait()
    reflog.unlink()  # the test's trap, not part of what a crash leaves
    with pytest.raises(GitError, match="File exists"):
        commit_all(story_wt, "hero: rescue", DEFAULT_IDENTITY)  # stuck, as the issue says

    # as the next run finds them, a while after the crash: past the grace a lock file no
    # process has open gets (LOCK_GRACE_S, sat out by test_e2e_stuck's kill -9 test)
    age(head_lock)
    age(ref_lock)
    notes = []
    clear_stale_locks(repo, "hero/x", story_wt, notes.append)

    assert not head_lock.exists() and not ref_lock.exists()
    assert f"removed stale git lock {head_lock} left by a process that died" in notes
    assert f"removed stale git lock {ref_lock} left by a process that died" in notes
    assert commit_all(story_wt, "hero: rescue", DEFAULT_IDENTITY)
    assert (story_wt / "work.txt").read_text() == "work\n"


def test_lock_files_where_git_leaves_them_are_cleared(
    repo: TargetRepo, story_wt: Path, target_repo: Path
) -> None:
    common = target_repo / ".git"
    left = [
        common / "worktrees" / "x" / "index.lock",
        common / "worktrees" / "x" / "HEAD.lock",
        common / "refs" / "heads" / "hero" / "x.lock",
        common / "packed-refs.lock",
        common / "config.lock",
        common / "index.lock",
    ]
    for path in left:
        path.write_text("0" * 40 + "\n")
        age(path)
    notes: list[str] = []

    clear_stale_locks(repo, "hero/x", story_wt, notes.append)

    assert [p for p in left if p.exists()] == []
    assert len([n for n in notes if n.startswith("removed stale git lock")]) == len(left)
    (story_wt / "w.txt").write_text("w\n")
    assert commit_all(story_wt, "hero: commit", DEFAULT_IDENTITY)


def test_lock_files_of_a_story_repository_are_cleared(
    repo: TargetRepo, base: str, tmp_path: Path, target_repo: Path
) -> None:
    """The current layout: the story's own repository, whose git directory holds its index,
    HEAD and refs; the story branch's lock in the target too."""
    git(target_repo, "branch", "hero/x", base)
    story = StoryRepo(repo, tmp_path / "worktrees" / "x", "hero/x")
    story.lay_out(base)
    gitdir = story.gitdir
    left = [
        gitdir / "index.lock",
        gitdir / "HEAD.lock",
        gitdir / "packed-refs.lock",
        gitdir / "refs" / "heads" / "hero" / "x.lock",
        target_repo / ".git" / "refs" / "heads" / "hero" / "x.lock",
    ]
    for path in left:
        path.write_text("0" * 40 + "\n")
        age(path)
    (story.path / "w.txt").write_text("w\n")
    with pytest.raises(GitError, match="File exists"):
        commit_all(story.path, "hero: rescue", DEFAULT_IDENTITY)  # stuck, as git leaves it
    notes: list[str] = []

    clear_stale_locks(repo, "hero/x", story.path, notes.append)

    assert [p for p in left if p.exists()] == []
    assert sorted(notes) == sorted(
        f"removed stale git lock {p} left by a process that died" for p in left
    )
    work = commit_all(story.path, "hero: rescue", DEFAULT_IDENTITY)
    assert work and story.bring_back() == work == repo.branch_sha("hero/x")


@pytest.mark.slow
def test_a_lock_a_live_process_holds_is_waited_on_never_removed(
    repo: TargetRepo, story_wt: Path, target_repo: Path
) -> None:
    lock = target_repo / ".git" / "worktrees" / "x" / "index.lock"
    holder = hold_lock(lock)
    try:
        age(lock)
        notes: list[str] = []
        with pytest.raises(GitError, match=f"still held after 0.3 s.*pid {holder.pid}"):
            clear_stale_locks(repo, "hero/x", story_wt, notes.append, wait_s=0.3)
        assert lock.exists()
        assert len(notes) == 1  # said once, not at every look
        assert notes[0].startswith(f"waiting for git lock {lock}, held by pid {holder.pid} (")
        # the holder finishes while hero waits: hero goes on, nothing removed by hero
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(
                clear_stale_locks, repo, "hero/x", story_wt, notes.append, wait_s=30
            )
            assert _wait_until(lambda: len(notes) == 2, within_s=30)  # it found it held
            holder.communicate("")
            waiting.result(timeout=60)
        assert not lock.exists()
        assert not any(n.startswith("removed") for n in notes)
    finally:
        holder.kill()
        holder.wait()


def test_a_shared_lock_in_use_is_left_alone_and_not_waited_on(
    repo: TargetRepo, story_wt: Path, target_repo: Path
) -> None:
    lock = target_repo / ".git" / "packed-refs.lock"
    holder = hold_lock(lock)
    try:
        age(lock)
        notes: list[str] = []
        clear_stale_locks(repo, "hero/x", story_wt, notes.append, wait_s=600)
        assert lock.exists() and notes == []
    finally:
        holder.kill()
        holder.wait()
