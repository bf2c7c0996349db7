"""Tests for hero.git.storyrepo: a story's own repository, on real git repos in tmp_path.

A story works in ``worktrees/<id>``, a repository of its own whose object store borrows the
target's objects through alternates. hero lays it out, puts back what it owns of its git
directory between commands, and brings its commits onto the target's branch itself: only
forward, every received object checked. The worker is an adversary: these tests write what a
worker could (refs, objects, packed-refs, ``.gitmodules``, files in ``.git``) and check what
reaches the user's repository.
"""

from __future__ import annotations

import binascii
import contextlib
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import GIT_ENV, git
from helpers import SUB_IMPL

from hero.git.ops import GitError, TargetRepo
from hero.git.ops import git as hero_git
from hero.git.rewrite import rewrite_messages
from hero.git.storyrepo import COPIED_SETTINGS, BringBackRefused, StoryRepo
from hero.github.defang import commit_message_rule

BRANCH = "hero/s1"
IDENT = "A U Thor <author@example.com> 1700000000 +0000"


def run_git(cwd: Path, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """git as a person (or a worker) runs it, hooks and all; not checked."""
    result = subprocess.run(
        ["git", *args],
        cwd=cwd,
        input=data,
        capture_output=True,
        env={**os.environ, **GIT_ENV},
    )
    return subprocess.CompletedProcess(
        result.args,
        result.returncode,
        result.stdout.decode(errors="replace"),
        result.stderr.decode(errors="replace"),
    )


def commit_file(cwd: Path, name: str, content: str, message: str) -> str:
    path = cwd / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    git(cwd, "add", "-A")
    git(cwd, "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD").strip()


def refs(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines())


def has_object(repo: Path, rev: str) -> bool:
    return run_git(repo, "cat-file", "-e", rev).returncode == 0


def assert_sound(repo: Path) -> None:
    """``git fsck --full`` finds nothing wrong (dangling objects are no fault)."""
    fsck = run_git(repo, "fsck", "--full", "--strict", "--no-dangling")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert fsck.stdout == "" and "error" not in fsck.stderr, fsck.stdout + fsck.stderr


def linked_worktrees(repo: Path) -> list[str]:
    listing = git(repo, "worktree", "list", "--porcelain")
    paths = [
        line[len("worktree ") :] for line in listing.splitlines() if line.startswith("worktree ")
    ]
    return [p for p in paths if Path(p).resolve() != repo.resolve()]


@pytest.fixture
def target(target_repo: Path) -> TargetRepo:
    return TargetRepo(target_repo)


@pytest.fixture
def base(target_repo: Path) -> str:
    return git(target_repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def story(target: TargetRepo, base: str, tmp_path: Path) -> StoryRepo:
    """The story's repository laid out on hero/s1 at the base, as a story's start does it."""
    git(target.path, "branch", BRANCH, base)
    repo = StoryRepo(target, tmp_path / "worktrees" / "s1", BRANCH)
    assert repo.lay_out(base) == []
    return repo


# ----------------------------------------------------------------------------- lay_out


def test_lay_out_makes_a_repository_of_its_own_that_borrows_the_targets_objects(
    target: TargetRepo, base: str, tmp_path: Path
) -> None:
    user = target.path
    git(user, "tag", "v1", base)
    git(user, "tag", "-a", "-m", "release", "v1-annotated", base)
    git(user, "branch", "feature", base)
    git(user, "branch", "hero/other", base)  # another story's branch
    git(user, "branch", BRANCH, base)
    later = commit_file(user, "later.txt", "later\n", "a commit after the base")
    path = tmp_path / "worktrees" / "s1"
    story = StoryRepo(target, path, BRANCH)

    assert story.lay_out(base) == []

    gitdir = path / ".git"
    assert gitdir.is_dir() and not gitdir.is_symlink() and story.exists()
    assert not story.is_linked_worktree()
    common = git(path, "rev-parse", "--path-format=absolute", "--git-common-dir").strip()
    assert Path(common) == gitdir.resolve()  # its own, not the user's
    objects = (user / ".git" / "objects").resolve()
    assert story.objects_dir() == objects
    assert (gitdir / "objects" / "info" / "alternates").read_text() == f"{objects}\n"
    # nothing of the user's object store copied or hard-linked: the story's own store is empty
    own = sorted(p.relative_to(gitdir) for p in (gitdir / "objects").rglob("*") if p.is_file())
    assert own == [Path("objects/info/alternates")]
    # the user's branches and tags, as they are; other stories' branches left out
    assert refs(path) == {
        "refs/heads/feature": base,
        f"refs/heads/{BRANCH}": base,
        "refs/heads/main": later,
        "refs/tags/v1": base,
        "refs/tags/v1-annotated": git(user, "rev-parse", "refs/tags/v1-annotated").strip(),
    }
    assert git(path, "log", "--format=%s", "main").splitlines() == [
        "a commit after the base",
        "initial",
    ]
    # on the story branch at the tip, its files checked out, nothing else
    assert git(path, "symbolic-ref", "HEAD").strip() == f"refs/heads/{BRANCH}"
    assert git(path, "rev-parse", "HEAD").strip() == base == story.tip()
    assert (path / "calc" / "__init__.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (path / "tests" / "test_calc.py").is_file()
    assert not (path / "later.txt").exists()
    assert git(path, "status", "--porcelain", "--untracked-files=all") == ""
    # the git directory's files hero owns: no hooks, an empty exclude
    assert list((gitdir / "hooks").iterdir()) == []
    assert [p.name for p in (gitdir / "info").iterdir()] == ["exclude"]
    assert (gitdir / "info" / "exclude").read_text() == ""
    assert (gitdir / "modules").is_dir() and list((gitdir / "modules").iterdir()) == []
    assert story.guarded() == [
        gitdir / "config",
        gitdir / "hooks",
        gitdir / "info",
        gitdir / "objects" / "info",
    ]
    # the user's repository: no linked worktree, its checkout as it was
    assert linked_worktrees(user) == []
    assert git(user, "symbolic-ref", "--short", "HEAD").strip() == "main"
    assert git(user, "status", "--porcelain") == ""


def test_moving_the_users_branches_in_the_story_repository_moves_nothing_of_the_users(
    story: StoryRepo, target: TargetRepo, base: str
) -> None:
    before = refs(target.path)
    work = commit_file(story.path, "work.txt", "work\n", "work")
    git(story.path, "update-ref", "refs/heads/main", work)
    git(story.path, "tag", "-f", "v9", work)
    git(story.path, "gc", "--quiet", "--prune=now")  # packs and prunes the story's own store

    assert refs(target.path) == before
    assert not has_object(target.path, work)
    assert_sound(target.path)
    assert git(story.path, "rev-parse", "main").strip() == work
    assert_sound(story.path)  # the borrowed objects are still there for the story too


PROGRAM_KEYS = re.compile(
    r"core\.(fsmonitor|hookspath|sshcommand|gitproxy|askpass|editor|pager|worktree"
    r"|alternaterefscommand|attributesfile|excludesfile)"
    r"|sequence\..+|interactive\..+|diff\..+|merge\..+|filter\..+|gpg.*|credential.*"
    r"|pager\..+|alias\..+|hook\..+|include\..+|includeif\..+|remote\..+|protocol\..+"
    r"|extensions\..+|uploadpack\.packobjectshook|url\..+|http\..+|user\..+"
    r"|.+\.(command|cmd|program|driver|textconv|helper|update)"
)


def test_lay_out_writes_the_config_hero_owns(target: TargetRepo, base: str, tmp_path: Path) -> None:
    """How files are checked out is the user's (core.autocrlf...); nothing that runs a
    program, reads another file or names a remote reaches the story's repository."""
    user = target.path
    git(user, "branch", BRANCH, base)
    git(user, "config", "core.autocrlf", "input")
    git(user, "config", "core.eol", "lf")
    planted = {
        "core.fsmonitor": "touch pwned",
        "core.hooksPath": str(tmp_path / "hooks"),
        "core.sshCommand": "touch pwned",
        "alias.st": "!touch pwned",
        "filter.evil.clean": "touch pwned",
        "diff.evil.textconv": "touch pwned",
        "include.path": str(tmp_path / "more.cfg"),
        "remote.origin.url": "https://example.invalid/r.git",
        "credential.helper": "store",
        "gpg.program": "touch pwned",
        "user.name": "Repo Owner",
    }
    for key, value in planted.items():
        git(user, "config", key, value)
    story = StoryRepo(target, tmp_path / "worktrees" / "s1", BRANCH)

    story.lay_out(base)

    config = story.gitdir / "config"
    assert config.read_text() == story.config_text()
    listed = git(story.path, "config", "--file", str(config), "--list").splitlines()
    keys = [line.split("=", 1)[0] for line in listed]
    assert [k for k in keys if PROGRAM_KEYS.fullmatch(k)] == []
    allowed = {
        "core.repositoryformatversion",
        "core.bare",
        "core.logallrefupdates",
        "gc.auto",
        "gc.writecommitgraph",
        "fetch.writecommitgraph",
        "repack.updateserverinfo",
        "uploadpack.allowanysha1inwant",
        "submodule.recurse",
        *COPIED_SETTINGS,
    }
    assert set(keys) <= allowed
    assert "core.autocrlf=input" in listed and "core.eol=lf" in listed
    # git reads the file as hero wrote it
    assert git(story.path, "config", "core.autocrlf").strip() == "input"
    assert git(story.path, "config", "core.bare").strip() == "false"


def test_lay_out_again_keeps_the_workers_commits_and_uncommitted_files(
    story: StoryRepo, target: TargetRepo, base: str
) -> None:
    """A run that crashed, laid out again by a new hero process: what the worker made stays."""
    work = commit_file(story.path, "work.txt", "work\n", "the worker's commit")
    (story.path / "calc" / "__init__.py").write_text(SUB_IMPL)
    (story.path / "untracked.txt").write_text("keep me\n")

    again = StoryRepo(target, story.path, BRANCH)
    assert again.lay_out(base) == []  # the tip the target knows: behind the worker's

    assert again.tip() == work == git(story.path, "rev-parse", "HEAD").strip()
    assert (story.path / "work.txt").read_text() == "work\n"
    assert (story.path / "calc" / "__init__.py").read_text() == SUB_IMPL
    assert (story.path / "untracked.txt").read_text() == "keep me\n"
    assert target.branch_sha(BRANCH) == base  # laying out brings nothing back


def test_lay_out_again_puts_back_what_hero_owns(story: StoryRepo, base: str) -> None:
    (story.gitdir / "hooks" / "post-checkout").write_text("#!/bin/sh\ntouch pwned\n")
    notes = story.lay_out(base)
    assert ".git/hooks/post-checkout was made; hero removed it" in notes
    assert list((story.gitdir / "hooks").iterdir()) == []


def test_lay_out_refuses_a_folder_that_is_not_a_story_repository(
    target: TargetRepo, base: str, tmp_path: Path
) -> None:
    path = tmp_path / "worktrees" / "s1"
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("mine\n")
    with pytest.raises(GitError, match="not a story repository; move it aside"):
        StoryRepo(target, path, BRANCH).lay_out(base)
    assert os.listdir(path) == ["notes.txt"]
    assert (path / "notes.txt").read_text() == "mine\n"


def test_lay_out_refuses_a_link_in_its_place(target: TargetRepo, base: str, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = tmp_path / "worktrees" / "s1"
    path.parent.mkdir()
    path.symlink_to(elsewhere)
    with pytest.raises(GitError, match="not a story repository"):
        StoryRepo(target, path, BRANCH).lay_out(base)
    assert list(elsewhere.iterdir()) == []


def test_lay_out_takes_an_empty_folder(target: TargetRepo, base: str, tmp_path: Path) -> None:
    path = tmp_path / "worktrees" / "s1"
    path.mkdir(parents=True)
    story = StoryRepo(target, path, BRANCH)
    story.lay_out(base)
    assert story.exists() and story.tip() == base
    assert (path / "calc" / "__init__.py").is_file()


# ------------------------------------------------- a linked worktree left by an earlier hero


def _old_layout(target: TargetRepo, base: str, path: Path) -> str:
    """An earlier hero's story: a linked worktree of the user's repository on the branch,
    with a commit and uncommitted work. Returns the commit."""
    git(target.path, "worktree", "add", "-q", "-b", BRANCH, str(path), base)
    committed = commit_file(path, "committed.txt", "committed\n", "committed in the old layout")
    (path / "uncommitted.txt").write_text("keep me\n")
    (path / "calc" / "__init__.py").write_text(SUB_IMPL)
    return committed


def test_a_linked_worktree_of_an_earlier_hero_is_retired(
    target: TargetRepo, base: str, tmp_path: Path
) -> None:
    path = tmp_path / "worktrees" / "s1"
    committed = _old_layout(target, base, path)
    story = StoryRepo(target, path, BRANCH)
    assert story.is_linked_worktree() and not story.exists()

    notes = story.lay_out(committed)

    assert notes == [
        f"kept the uncommitted work of {path} on {BRANCH}",
        f"{path} is now a repository of its own",
    ]
    # what it left uncommitted is a commit on the branch, in the user's repository
    kept = target.branch_sha(BRANCH)
    assert kept is not None and kept != committed
    assert git(target.path, "rev-parse", f"{kept}^").strip() == committed
    assert git(target.path, "show", f"{kept}:uncommitted.txt") == "keep me\n"
    assert git(target.path, "show", f"{kept}:calc/__init__.py") == SUB_IMPL
    assert git(target.path, "log", "-1", "--format=%s", kept).startswith(
        "hero: keep uncommitted work when moving to a repository of its own"
    )
    # the folder is a repository of its own; the user's repository lists no worktree
    assert (path / ".git").is_dir() and story.exists() and not story.is_linked_worktree()
    assert linked_worktrees(target.path) == []
    assert not list((target.path / ".git").glob("worktrees/*"))
    assert (path / "committed.txt").read_text() == "committed\n"
    assert_sound(target.path)


def test_a_retired_linked_worktree_goes_on_from_the_work_it_kept(
    target: TargetRepo, base: str, tmp_path: Path
) -> None:
    path = tmp_path / "worktrees" / "s1"
    committed = _old_layout(target, base, path)
    story = StoryRepo(target, path, BRANCH)
    story.lay_out(committed)  # the branch's tip as the caller read it
    kept = target.branch_sha(BRANCH)
    assert story.tip() == kept
    assert (path / "uncommitted.txt").read_text() == "keep me\n"
    nxt = commit_file(path, "next.txt", "next\n", "the next round")
    assert story.bring_back() == nxt


def test_a_linked_worktree_whose_folder_is_gone_leaves_the_branch_to_a_story_repository(
    target: TargetRepo, base: str, tmp_path: Path
) -> None:
    """An earlier hero home's checkout of the branch, its folder since deleted: git still
    lists it; a story repository elsewhere takes the branch on, its commits included."""
    old = tmp_path / "moved-home" / "worktrees" / "s1"
    git(target.path, "worktree", "add", "-q", "-b", BRANCH, str(old), base)
    work = commit_file(old, "w.txt", "w\n", "work in the old checkout")
    shutil.rmtree(old.parent.parent)
    story = StoryRepo(target, tmp_path / "worktrees" / "s1", BRANCH)

    story.lay_out(work)

    assert story.tip() == work and (story.path / "w.txt").read_text() == "w\n"
    more = commit_file(story.path, "more.txt", "more\n", "more work")
    assert story.bring_back() == more == target.branch_sha(BRANCH)
    assert_sound(target.path)


def test_a_linked_worktree_whose_folder_is_gone_is_laid_out_again_at_its_path(
    target: TargetRepo, base: str, tmp_path: Path
) -> None:
    path = tmp_path / "worktrees" / "s1"
    git(target.path, "worktree", "add", "-q", "-b", BRANCH, str(path), base)
    work = commit_file(path, "w.txt", "w\n", "work in the old checkout")
    shutil.rmtree(path)
    story = StoryRepo(target, path, BRANCH)

    story.lay_out(work)

    assert story.exists() and story.tip() == work
    assert (path / "w.txt").read_text() == "w\n"


def test_a_gone_linked_worktree_laid_out_again_at_its_path_is_no_longer_listed(
    target: TargetRepo, base: str, tmp_path: Path
) -> None:
    path = tmp_path / "worktrees" / "s1"
    git(target.path, "worktree", "add", "-q", "-b", BRANCH, str(path), base)
    shutil.rmtree(path)
    StoryRepo(target, path, BRANCH).lay_out(base)
    git(target.path, "worktree", "prune")
    assert linked_worktrees(target.path) == []


@pytest.mark.parametrize("step", ["lay_out", "remove"])
def test_a_dot_git_file_pointing_at_the_users_repository_is_not_retired(
    story: StoryRepo, target: TargetRepo, base: str, step: str
) -> None:
    (story.path / "backdoor.py").write_text("import os\n")
    shutil.rmtree(story.gitdir)
    story.gitdir.write_text(f"gitdir: {target.path / '.git'}\n")
    before = refs(target.path)

    again = StoryRepo(target, story.path, BRANCH)
    with contextlib.suppress(GitError):
        if step == "lay_out":
            again.lay_out(base)
        else:
            again.remove()

    assert refs(target.path) == before
    assert git(target.path, "rev-parse", "main").strip() == base
    assert git(target.path, "status", "--porcelain") == ""


# ----------------------------------------------------------------------------- bring_back


def test_bring_back_moves_the_targets_branch_forward_with_its_objects(
    story: StoryRepo, target: TargetRepo, base: str
) -> None:
    first = commit_file(story.path, "calc/__init__.py", SUB_IMPL, "add sub")
    second = commit_file(story.path, "notes/n.txt", "notes\n", "add notes")
    before = refs(target.path)

    assert story.bring_back() == second

    assert refs(target.path) == {**before, f"refs/heads/{BRANCH}": second}  # no hero ref left
    for rev in (first, second, f"{second}:notes/n.txt", f"{first}:calc/__init__.py"):
        assert has_object(target.path, rev), rev
    assert git(target.path, "log", "--format=%s", BRANCH).splitlines() == [
        "add notes",
        "add sub",
        "initial",
    ]
    assert_sound(target.path)
    assert story.bring_back() == second  # nothing new: nothing to do
    # the commits live in the user's object store now, not only in the story's
    story.remove()
    assert not story.path.exists()
    assert_sound(target.path)
    assert git(target.path, "show", f"{BRANCH}:calc/__init__.py") == SUB_IMPL


def test_bring_back_makes_the_branch_where_the_user_deleted_it(
    story: StoryRepo, target: TargetRepo
) -> None:
    work = commit_file(story.path, "w.txt", "w\n", "work")
    git(target.path, "branch", "-D", BRANCH)
    assert story.bring_back() == work == target.branch_sha(BRANCH)


def _unrelated(story: StoryRepo, target: TargetRepo, base: str) -> str:
    """The worker resets the story branch to a commit with a history of its own."""
    tree = git(story.path, "rev-parse", "HEAD^{tree}").strip()
    sha = git(story.path, "commit-tree", tree, "-m", "a history of its own").strip()
    git(story.path, "reset", "-q", "--hard", sha)
    return sha


def _back(story: StoryRepo, target: TargetRepo, base: str) -> str:
    """The worker resets the story branch behind what hero brought back."""
    commit_file(story.path, "w.txt", "w\n", "work hero brought back")
    story.bring_back()
    git(story.path, "reset", "-q", "--hard", base)
    return base


def _sideways(story: StoryRepo, target: TargetRepo, base: str) -> str:
    """The worker rewrites what hero brought back (an amend)."""
    commit_file(story.path, "w.txt", "w\n", "work hero brought back")
    story.bring_back()
    git(story.path, "commit", "-q", "--amend", "-m", "rewritten")
    return git(story.path, "rev-parse", "HEAD").strip()


@pytest.mark.parametrize("reset", [_unrelated, _back, _sideways], ids=lambda f: f.__name__[1:])
def test_bring_back_refuses_a_tip_that_does_not_build_on_the_targets_branch(
    story: StoryRepo,
    target: TargetRepo,
    base: str,
    reset: Callable[[StoryRepo, TargetRepo, str], str],
) -> None:
    tip = reset(story, target, base)
    before = refs(target.path)
    current = target.branch_sha(BRANCH)
    assert current is not None

    with pytest.raises(BringBackRefused) as info:
        story.bring_back()

    said = str(info.value)
    assert f"{BRANCH} at {tip[:12]}" in said and f"does not build on {current[:12]}" in said
    assert refs(target.path) == before  # no refs/hero/incoming/* either
    assert target.branch_sha(BRANCH) == current
    assert_sound(target.path)


def _write_object(repo: Path, kind: str, data: bytes) -> str:
    """An object as a worker can write it: git's checks left out."""
    made = run_git(repo, "hash-object", "-w", "--literally", "-t", kind, "--stdin", data=data)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def _tree_holding_dot_git(repo: Path, base: str) -> tuple[str, str]:
    """A commit whose tree has a `.git` entry (a checkout would write into .git)."""
    blob = _write_object(repo, "blob", b"[core]\n\tfsmonitor = touch pwned\n")
    entry = b"100644 .git\0" + binascii.unhexlify(blob)
    tree = _write_object(repo, "tree", entry)
    commit = f"tree {tree}\nparent {base}\nauthor {IDENT}\ncommitter {IDENT}\n\nx\n"
    return _write_object(repo, "commit", commit.encode()), "hasDotgit"


def _commit_missing_an_email(repo: Path, base: str) -> tuple[str, str]:
    tree = git(repo, "rev-parse", f"{base}^{{tree}}").strip()
    author = "A U Thor 1700000000 +0000"
    commit = f"tree {tree}\nparent {base}\nauthor {author}\ncommitter {IDENT}\n\nx\n"
    return _write_object(repo, "commit", commit.encode()), "missingEmail"


@pytest.mark.parametrize(
    "corrupt", [_tree_holding_dot_git, _commit_missing_an_email], ids=["dot-git", "no-email"]
)
def test_bring_back_checks_every_object_it_receives(
    story: StoryRepo,
    target: TargetRepo,
    base: str,
    tmp_path: Path,
    corrupt: Callable[[Path, str], tuple[str, str]],
) -> None:
    bad, fsck_id = corrupt(story.path, base)
    (story.gitdir / "refs" / "heads" / "hero" / "s1").write_text(f"{bad}\n")  # as a worker can
    assert story.tip() == bad
    # git sends it where nobody checks: the object is sound enough to travel
    control = tmp_path / "control.git"
    git(tmp_path, "init", "-q", "--bare", str(control))
    git(control, "-c", "transfer.fsckObjects=false", "fetch", "-q", str(story.gitdir), bad)
    assert has_object(control, bad)
    before = refs(target.path)

    with pytest.raises(GitError, match="fsck") as info:
        story.bring_back()

    assert fsck_id in str(info.value)
    assert not has_object(target.path, bad)
    assert refs(target.path) == before and target.branch_sha(BRANCH) == base
    assert_sound(target.path)


def test_keep_in_target_brings_a_branch_of_the_story_repository_into_the_users(
    story: StoryRepo, target: TargetRepo, base: str
) -> None:
    git(story.path, "switch", "-q", "-c", "hero/s1-stray-1")
    stray = commit_file(story.path, "stray.txt", "stray\n", "work hero took off a ref")
    git(story.path, "switch", "-q", BRANCH)
    before = refs(target.path)

    assert story.keep_in_target("hero/s1-stray-1") == stray
    assert story.keep_in_target("hero/s1-stray-1", "hero/s1-kept") == stray

    assert refs(target.path) == {
        **before,
        "refs/heads/hero/s1-stray-1": stray,
        "refs/heads/hero/s1-kept": stray,
    }
    assert git(target.path, "show", "hero/s1-kept:stray.txt") == "stray\n"
    assert target.branch_sha(BRANCH) == base  # the story branch is not moved
    assert_sound(target.path)
    assert story.keep_in_target("no-such-branch") == ""
    assert refs(target.path) == {
        **before,
        "refs/heads/hero/s1-stray-1": stray,
        "refs/heads/hero/s1-kept": stray,
    }


# ----------------------------------------------------------------------------- messages

ISSUE_21 = commit_message_rule({"repo": "acme/app", "issue": 21, "author": "octocat"})
LIVE_22 = re.compile(r"(?i)\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?):?\s+#22\b")
LIVE_MENTION = re.compile(r"(?<!\w)@[A-Za-z0-9]")
WORKER = {
    "GIT_AUTHOR_NAME": "Wörker Bee",
    "GIT_AUTHOR_EMAIL": "worker@example.com",
    "GIT_AUTHOR_DATE": "@1700000000 +0530",
    "GIT_COMMITTER_NAME": "Com Mitter",
    "GIT_COMMITTER_EMAIL": "committer@example.com",
    "GIT_COMMITTER_DATE": "@1700000100 -0700",
}


def worker_commit(cwd: Path, name: str, message: str, *more: str) -> str:
    """A commit as the worker makes it, with its own author, committer and dates."""
    (cwd / name).write_text(f"{name}\n")
    env = {**os.environ, **GIT_ENV, **WORKER}
    subprocess.run(["git", "add", "-A"], cwd=cwd, check=True, env=env)
    args = ["git", "commit", "-q", "-m", message, *(a for m in more for a in ("-m", m))]
    subprocess.run(args, cwd=cwd, check=True, env=env)
    return git(cwd, "rev-parse", "HEAD").strip()


def history(repo: Path, rev: str, since: str) -> list[list[str]]:
    """Each commit in ``since..rev``, oldest first: tree, parent count, author, committer,
    message."""
    fmt = "%T%x00%P%x00%an <%ae> %ad%x00%cn <%ce> %cd%x00%B%x01"
    out = git(
        repo, "log", "--reverse", "--topo-order", "--date=raw", f"--format={fmt}", f"{since}..{rev}"
    )
    rows = [r.strip("\n").split("\0") for r in out.split("\x01") if r.strip("\n")]
    return [[t, str(len(p.split())), a, c, m] for t, p, a, c, m in rows]


def test_bring_back_rewrites_the_new_commits_of_a_story_from_an_issue(
    target: TargetRepo, base: str, tmp_path: Path
) -> None:
    git(target.path, "branch", BRANCH, base)
    story = StoryRepo(target, tmp_path / "worktrees" / "s1", BRANCH, messages=ISSUE_21)
    story.lay_out(base)
    fine = worker_commit(story.path, "a.txt", "add a")
    git(story.path, "switch", "-q", "-c", "side")
    worker_commit(story.path, "side.txt", "side work, cc @carol")
    git(story.path, "switch", "-q", BRANCH)
    worker_commit(story.path, "b.txt", "Fixes #22, thanks @boss", "Closes #21")
    subprocess.run(
        ["git", "merge", "-q", "--no-ff", "-m", "Merge side (fixes: acme/app#22)", "side"],
        cwd=story.path,
        check=True,
        env={**os.environ, **GIT_ENV, **WORKER},
    )
    worker_commit(story.path, "c.txt", "after the merge")
    old = story.tip()
    was = history(story.path, old, base)
    notes: list[str] = []

    new = story.bring_back(notes)

    assert new != old and target.branch_sha(BRANCH) == new == story.tip()
    now = history(target.path, new, base)
    # trees, shapes (the merge keeps two parents), authors, committers and dates are kept
    assert [row[:4] for row in now] == [row[:4] for row in was]
    joined = "\n".join(row[4] for row in now)
    assert not LIVE_22.search(joined) and not LIVE_MENTION.search(joined), joined
    assert "Closes #21" in joined  # the story's own issue stays
    plain = joined.replace("\u200b", "")
    assert "Fixes `#22`, thanks `@boss`" in plain and "cc `@carol`" in plain
    assert "Merge side (fixes: `acme/app#22`)" in plain
    assert "Wörker Bee" in now[-1][2]
    # a commit that needed no change and builds on none that did is the same commit
    assert git(target.path, "rev-list", "--reverse", f"{base}..{new}").split()[0] == fine
    # the worker's checkout follows, clean, on the branch
    assert git(story.path, "status", "--porcelain") == ""
    assert git(story.path, "symbolic-ref", "HEAD").strip() == f"refs/heads/{BRANCH}"
    [note] = notes
    assert "rewrote the message of 3 commit(s)" in note and old[:12] in note and new[:12] in note
    assert "after them were made anew" in note
    assert_sound(target.path)
    # the same commits give the same new commits
    again = rewrite_messages(target.path, old, [base], ISSUE_21)
    assert again.tip == new and len(again.reworded) == 3

    # forward only: what was brought back stays; only a new commit is rewritten
    later = worker_commit(story.path, "d.txt", "ping @dave")
    assert story.bring_back(notes) == target.branch_sha(BRANCH) != later
    assert git(target.path, "rev-parse", f"{BRANCH}~1").strip() == new
    assert "`@\u200bdave`" in git(target.path, "log", "-1", "--format=%B", BRANCH)
    assert story.bring_back(notes) == target.branch_sha(BRANCH)  # nothing new: as it is
    assert len(notes) == 2


def test_bring_back_leaves_the_users_commits_and_other_stories_alone(
    target: TargetRepo, base: str, tmp_path: Path
) -> None:
    git(target.path, "branch", BRANCH, base)
    story = StoryRepo(target, tmp_path / "worktrees" / "s1", BRANCH, messages=ISSUE_21)
    story.lay_out(base)
    # the user's own commit on main, after the story started, which the worker merges
    users = commit_file(target.path, "u.txt", "u\n", "Fixes #22, as @boss wanted")
    worker_commit(story.path, "w.txt", "work")
    git(story.path, "merge", "-q", "--no-edit", users)
    mine = worker_commit(story.path, "x.txt", "all good")
    plain = StoryRepo(target, tmp_path / "worktrees" / "s2", "hero/s2")  # no rule: not from GitHub
    git(target.path, "branch", "hero/s2", base)
    plain.lay_out(base)
    other = worker_commit(plain.path, "y.txt", "Fixes #22, thanks @boss")

    assert story.bring_back() == mine  # nothing to rewrite: the only fangs are the user's
    assert plain.bring_back() == other
    assert git(target.path, "log", "-1", "--format=%s", "hero/s2").strip() == (
        "Fixes #22, thanks @boss"
    )


def test_a_commit_hero_cannot_make_anew_is_not_brought_back(
    target: TargetRepo, base: str, tmp_path: Path
) -> None:
    git(target.path, "branch", BRANCH, base)
    story = StoryRepo(target, tmp_path / "worktrees" / "s1", BRANCH, messages=ISSUE_21)
    story.lay_out(base)
    tree = git(story.path, "rev-parse", f"{base}^{{tree}}").strip()
    nameless = ". <x@example.com> 1700000000 +0000"  # no name git makes a commit with
    commit = f"tree {tree}\nparent {base}\nauthor {nameless}\ncommitter {IDENT}\n\nFixes #22\n"
    bad = _write_object(story.path, "commit", commit.encode())
    git(story.path, "update-ref", f"refs/heads/{BRANCH}", bad)
    before = refs(target.path)

    with pytest.raises(BringBackRefused, match="must rewrite commit messages") as info:
        story.bring_back()

    assert bad[:12] in str(info.value)
    assert refs(target.path) == before and target.branch_sha(BRANCH) == base
    assert story.tip() == bad


# ----------------------------------------------------------------------------- catch_up


def test_catch_up_moves_the_story_repository_forward_only(
    story: StoryRepo, target: TargetRepo, base: str, tmp_path: Path
) -> None:
    # another machine's run of the story moved the user's branch on
    other = StoryRepo(target, tmp_path / "elsewhere" / "s1", BRANCH)
    other.lay_out(base)
    ahead = commit_file(other.path, "ahead.txt", "ahead\n", "another machine's round")
    other.bring_back()
    other.remove()

    assert story.catch_up(ahead) == [f"{story.path} moved forward to {BRANCH} at {ahead[:12]}"]

    assert story.tip() == ahead == git(story.path, "rev-parse", "HEAD").strip()
    assert git(story.path, "symbolic-ref", "HEAD").strip() == f"refs/heads/{BRANCH}"
    assert (story.path / "ahead.txt").read_text() == "ahead\n"
    assert git(story.path, "status", "--porcelain") == ""
    assert story.catch_up(ahead) == [] and story.catch_up("") == []
    # ahead of the user's branch: not moved back
    mine = commit_file(story.path, "mine.txt", "mine\n", "the worker's commit")
    assert story.catch_up(ahead) == []
    assert story.tip() == mine and (story.path / "mine.txt").is_file()
    # gone its own way: not moved either (bring_back decides)
    git(story.path, "reset", "-q", "--hard", base)
    sideways = commit_file(story.path, "sideways.txt", "s\n", "another way")
    assert story.catch_up(ahead) == []
    assert story.tip() == sideways and not (story.path / "ahead.txt").exists()
    # the story branch deleted by the worker: made again at the user's tip
    git(story.path, "switch", "-q", "--detach")
    git(story.path, "branch", "-q", "-D", BRANCH)
    assert story.catch_up(ahead) != []
    assert story.tip() == ahead
    assert git(story.path, "symbolic-ref", "HEAD").strip() == f"refs/heads/{BRANCH}"


# ----------------------------------------------------------------------------- make_safe


def test_make_safe_puts_back_what_hero_owns_and_removes_what_points_git_elsewhere(
    story: StoryRepo, base: str, tmp_path: Path
) -> None:
    gitdir = story.gitdir
    config = (gitdir / "config").read_text()
    alternates = (gitdir / "objects" / "info" / "alternates").read_text()
    outside = tmp_path / "outside"
    (outside / "hooks").mkdir(parents=True)
    (outside / "config").write_text("[core]\n\tfsmonitor = touch pwned\n")
    (outside / "hooks" / "post-commit").write_text("#!/bin/sh\ntouch pwned\n")
    (gitdir / "config").unlink()
    (gitdir / "config").symlink_to(outside / "config")
    (gitdir / "objects" / "info" / "alternates").write_text("/etc\n")
    shutil.rmtree(gitdir / "hooks")
    (gitdir / "hooks").symlink_to(outside / "hooks")
    (gitdir / "info" / "exclude").write_text("conftest.py\n")
    (gitdir / "info" / "attributes").write_text("* filter=evil\n")
    (gitdir / "info" / "grafts").write_text(f"{base}\n")
    (gitdir / "commondir").write_text(f"{tmp_path}\n")
    (gitdir / "shallow").write_text(f"{base}\n")
    (gitdir / "config.worktree").write_text("[core]\n\tworktree = /\n")
    (gitdir / "objects" / "info" / "commit-graph").write_bytes(b"CGPH garbage")
    (gitdir / "objects" / "info" / "commit-graphs").mkdir()
    (gitdir / "objects" / "info" / "commit-graphs" / "commit-graph-chain").write_text("x\n")

    said = story.make_safe().splitlines()

    assert sorted(said) == sorted(
        [
            ".git/config was changed; hero put it back",
            ".git/objects/info/alternates was changed; hero put it back",
            ".git/commondir was made; hero removed it",
            ".git/shallow was made; hero removed it",
            ".git/config.worktree was made; hero removed it",
            ".git/objects/info/commit-graph was made; hero removed it",
            ".git/objects/info/commit-graphs was made; hero removed it",
            ".git/hooks was replaced; hero put it back",
            ".git/info/attributes was made; hero removed it",
            ".git/info/grafts was made; hero removed it",
            ".git/info/exclude was changed; hero emptied it",
        ]
    )
    assert (gitdir / "config").read_text() == config and not (gitdir / "config").is_symlink()
    assert (gitdir / "objects" / "info" / "alternates").read_text() == alternates
    assert (gitdir / "hooks").is_dir() and not (gitdir / "hooks").is_symlink()
    assert list((gitdir / "hooks").iterdir()) == []
    assert [p.name for p in (gitdir / "info").iterdir()] == ["exclude"]
    assert (gitdir / "info" / "exclude").read_text() == ""
    for name in ("commondir", "shallow", "config.worktree", "objects/info/commit-graph"):
        assert not os.path.lexists(gitdir / name), name
    assert not (gitdir / "objects" / "info" / "commit-graphs").exists()
    # what a link pointed at is left as it was: replaced, never written through
    assert (outside / "config").read_text() == "[core]\n\tfsmonitor = touch pwned\n"
    assert (outside / "hooks" / "post-commit").is_file()
    # git works there, with its whole history
    assert git(story.path, "rev-list", "--count", "HEAD").strip() == "1"
    commit_file(story.path, "w.txt", "w\n", "work")
    assert story.make_safe() == ""


def test_make_safe_notes_each_change(story: StoryRepo, base: str, tmp_path: Path) -> None:
    gitdir = story.gitdir
    (gitdir / "objects" / "info" / "alternates").unlink()
    (gitdir / "info" / "exclude").write_text("secret\n")
    (gitdir / "shallow").write_text(f"{base}\n")

    said = story.make_safe()

    assert ".git/objects/info/alternates was changed; hero put it back" in said
    assert ".git/info/exclude was changed; hero emptied it" in said
    assert ".git/shallow was made; hero removed it" in said
    assert git(story.path, "cat-file", "-e", base) == ""
    assert story.make_safe() == ""


@pytest.mark.parametrize("how", ["removed", "a file", "a link"])
def test_make_safe_refuses_a_git_directory_that_is_gone_or_replaced(
    story: StoryRepo, target: TargetRepo, base: str, tmp_path: Path, how: str
) -> None:
    other = tmp_path / "other"
    git(tmp_path, "init", "-q", str(other))
    shutil.rmtree(story.gitdir)
    if how == "a file":
        story.gitdir.write_text(f"gitdir: {other / '.git'}\n")
    elif how == "a link":
        story.gitdir.symlink_to(other / ".git")
    before = (other / ".git" / "config").read_text()

    with pytest.raises(GitError, match="no longer a directory"):
        story.make_safe()
    with pytest.raises(GitError, match="no longer a directory"):
        story.bring_back()

    assert (other / ".git" / "config").read_text() == before
    assert target.branch_sha(BRANCH) == base


# ----------------------------------------------------------------------------- packed-refs


def _packed(story: StoryRepo) -> Path:
    git(story.path, "tag", "-a", "-m", "release", "v1")  # a peeled line too
    git(story.path, "pack-refs", "--all")
    return story.gitdir / "packed-refs"


def test_make_safe_leaves_a_sound_packed_refs_alone(story: StoryRepo) -> None:
    packed = _packed(story)
    data = packed.read_bytes()
    assert data.startswith(b"# pack-refs with:") and b"\n^" in data
    inode = packed.stat().st_ino

    assert story.make_safe() == ""

    assert packed.read_bytes() == data and packed.stat().st_ino == inode


def _sound_then(extra: bytes) -> Callable[[bytes, str], bytes]:
    return lambda sound, sha: sound + extra.replace(b"SHA", sha.encode())


UNREADABLE = [
    pytest.param(_sound_then(b"garbage\n"), id="garbage"),
    pytest.param(
        lambda sound, sha: sound.replace(b"\n", b"\n^" + sha.encode() + b"\n", 1),
        id="peeled-line-after-the-header",
    ),
    pytest.param(_sound_then(b"SHA refs/heads/../../outside\n"), id="dangerous-refname"),
    pytest.param(_sound_then(b"SHA refs/heads/unterminated"), id="unterminated-last-line"),
    pytest.param(_sound_then(b"# pack-refs with: peeled \n"), id="header-not-first"),
    pytest.param(
        _sound_then(b"a" * 64 + b" refs/heads/long\n"), id="sha256-length-oid-in-a-sha1-repository"
    ),
]


@pytest.mark.parametrize("spoil", UNREADABLE)
def test_make_safe_drops_the_packed_refs_lines_git_cannot_read(
    story: StoryRepo, base: str, spoil: Callable[[bytes, str], bytes]
) -> None:
    packed = _packed(story)
    sound = packed.read_bytes()
    packed.write_bytes(spoil(sound, base))

    story.make_safe()

    listed = run_git(story.path, "for-each-ref", "--format=%(refname)")
    assert listed.returncode == 0, listed.stderr
    assert f"refs/heads/{BRANCH}" in listed.stdout.split()
    if spoil(sound, base).startswith(sound):
        assert "refs/heads/main" in listed.stdout.split()
        assert "refs/tags/v1" in listed.stdout.split()
    assert story.make_safe() == ""


def test_make_safe_notes_how_many_packed_refs_lines_it_dropped(story: StoryRepo) -> None:
    packed = _packed(story)
    sound = packed.read_bytes()
    packed.write_bytes(sound + b"garbage\nmore garbage\n")

    assert story.make_safe() == (
        ".git/packed-refs held 2 line(s) git cannot read; hero dropped them"
    )
    assert packed.read_bytes() == sound


def test_make_safe_removes_a_packed_refs_that_is_no_file(story: StoryRepo, tmp_path: Path) -> None:
    packed = story.gitdir / "packed-refs"
    packed.unlink()
    packed.mkdir()
    assert story.make_safe() == (".git/packed-refs was not a file git can read; hero removed it")
    assert not os.path.lexists(packed)
    assert story.tip()


def test_make_safe_sees_a_packed_refs_rewritten_in_place_with_its_time_put_back(
    story: StoryRepo,
) -> None:
    packed = _packed(story)
    assert story.make_safe() == ""  # found sound, remembered
    before = packed.stat()
    size = before.st_size
    with open(packed, "r+b") as fh:
        fh.write(b"x" * (size - 1) + b"\n")
    os.utime(packed, ns=(before.st_atime_ns, before.st_mtime_ns))

    story.make_safe()

    listed = run_git(story.path, "for-each-ref")
    assert listed.returncode == 0, listed.stderr


# ----------------------------------------------------------------------------- end_phase


def test_end_phase_removes_a_rebase_cherry_pick_or_revert_left_in_progress(
    story: StoryRepo, base: str, tmp_path: Path
) -> None:
    gitdir = story.gitdir
    pwned = tmp_path / "pwned"
    rebase = gitdir / "rebase-merge"
    rebase.mkdir()
    (rebase / "head-name").write_text(f"refs/heads/{BRANCH}\n")
    (rebase / "onto").write_text(f"{base}\n")
    (rebase / "orig-head").write_text(f"{base}\n")
    (rebase / "interactive").write_text("")
    (rebase / "git-rebase-todo").write_text(f"exec touch {pwned}\n")
    assert "git rebase --continue" in git(story.path, "status")  # git sees it
    (gitdir / "rebase-apply").mkdir()
    (gitdir / "rebase-apply" / "applying").write_text("")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "todo").write_text(f"exec touch {pwned}\n")
    (gitdir / "sequencer").symlink_to(outside)

    assert story.end_phase() == [
        "a rebase merge left in progress in .git/rebase-merge; hero removed it",
        "a rebase apply left in progress in .git/rebase-apply; hero removed it",
        "a sequencer left in progress in .git/sequencer; hero removed it",
    ]

    for name in ("rebase-merge", "rebase-apply", "sequencer"):
        assert not os.path.lexists(gitdir / name), name
    assert (outside / "todo").is_file()  # the link removed, not what it pointed at
    assert "rebase" not in git(story.path, "status")
    assert run_git(story.path, "rebase", "--continue").returncode != 0
    assert not pwned.exists()
    assert story.end_phase() == []


# ----------------------------------------------------------------------------- submodules


@dataclass
class Probe:
    """A local HTTP server that records every request (and answers 404)."""

    url: str
    hits: list[str] = field(default_factory=list)


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[Probe]:
    for scheme in ("http", "https", "all"):  # the requests come here, to no proxy
        monkeypatch.delenv(f"{scheme}_proxy", raising=False)
        monkeypatch.delenv(f"{scheme.upper()}_PROXY", raising=False)
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(404)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Probe(f"http://127.0.0.1:{server.server_address[1]}/exfil/data", hits)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@dataclass
class WithLib:
    base: str  # the user's commit whose .gitmodules names lib
    lib: Path  # lib's own repository
    lib_sha: str
    story: StoryRepo


@pytest.fixture
def with_lib(
    target: TargetRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probe: Probe
) -> WithLib:
    """The user's main has a submodule ``lib`` (a local repository, a file:// URL); the
    story's repository is laid out from it, submodules not checked out yet."""
    # local-path submodules need this since git 2.38.1; hero's git inherits GIT_CONFIG_*
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    lib_sha = commit_file(lib, "lib.txt", "LIB-CONTENT\n", "lib")
    git(target.path, "submodule", "add", "-q", lib.as_uri(), "lib")
    git(target.path, "commit", "-q", "-m", "add lib")
    base = git(target.path, "rev-parse", "HEAD").strip()
    git(target.path, "branch", BRANCH, base)
    story = StoryRepo(target, tmp_path / "worktrees" / "s1", BRANCH, base)
    story.lay_out(base)
    # the probe answers: a fetch of its URL by hero's git would be seen
    hero_git(target.path, "ls-remote", probe.url, check=False)
    assert probe.hits != []
    probe.hits.clear()
    return WithLib(base, lib, lib_sha, story)


@pytest.mark.slow
def test_init_submodules_checks_out_what_the_users_base_names(
    with_lib: WithLib, probe: Probe
) -> None:
    story = with_lib.story
    assert 'url = "' + with_lib.lib.as_uri() + '"' in story.config_text()

    assert story.init_submodules() == []

    assert (story.path / "lib" / "lib.txt").read_text() == "LIB-CONTENT\n"
    assert git(story.path / "lib", "rev-parse", "HEAD").strip() == with_lib.lib_sha
    modules = story.gitdir / "modules" / "lib"
    assert {modules / n for n in ("config", "hooks", "info")} <= set(story.guarded())
    assert probe.hits == []


@pytest.mark.slow
def test_init_submodules_fetches_no_submodule_the_story_branch_added(
    with_lib: WithLib, probe: Probe
) -> None:
    story = with_lib.story
    git(story.path, "config", "--file", ".gitmodules", "submodule.evil.path", "evil")
    git(story.path, "config", "--file", ".gitmodules", "submodule.evil.url", probe.url)
    git(story.path, "update-index", "--add", "--cacheinfo", f"160000,{with_lib.lib_sha},evil")
    git(story.path, "add", ".gitmodules")
    git(story.path, "commit", "-q", "-m", "add a submodule")
    assert "160000" in git(story.path, "ls-tree", "HEAD", "evil")

    assert story.init_submodules() == []

    assert (story.path / "lib" / "lib.txt").is_file()  # the user's is checked out
    assert not (story.path / "evil").exists() or list((story.path / "evil").iterdir()) == []
    assert probe.hits == []
    # a git that follows the branch's .gitmodules would have fetched it
    run_git(story.path, "submodule", "update", "--init", "--", "evil")
    assert probe.hits != []


@pytest.mark.slow
def test_init_submodules_checks_out_no_submodule_the_story_branch_pointed_elsewhere(
    with_lib: WithLib, probe: Probe
) -> None:
    story = with_lib.story
    git(story.path, "config", "--file", ".gitmodules", "submodule.lib.url", probe.url)
    git(story.path, "commit", "-q", "-am", "lib from elsewhere")

    assert story.init_submodules() == [
        "submodule lib not checked out: the story's branch changed its path or URL"
    ]

    assert not (story.path / "lib" / "lib.txt").exists()
    assert probe.hits == []


@pytest.mark.slow
def test_init_submodules_without_a_base_checks_out_nothing(
    target: TargetRepo, with_lib: WithLib, probe: Probe, tmp_path: Path
) -> None:
    story = StoryRepo(target, tmp_path / "worktrees" / "s2", "hero/s2")  # no submodules_from
    story.lay_out(with_lib.base)
    assert story.init_submodules() == []
    assert not (story.path / "lib" / "lib.txt").exists()
    assert '[submodule "' not in (story.gitdir / "config").read_text()


@pytest.mark.slow
def test_init_submodules_fetches_no_url_the_story_branch_gave_a_base_path(
    with_lib: WithLib, probe: Probe
) -> None:
    story = with_lib.story
    git(story.path, "config", "--file", ".gitmodules", "submodule.evil.path", "lib")
    git(story.path, "config", "--file", ".gitmodules", "submodule.evil.url", probe.url)
    git(story.path, "commit", "-q", "-am", "lib under another name")

    with contextlib.suppress(GitError):  # checked out from the user's URL or not at all
        story.init_submodules()

    assert probe.hits == []


# ----------------------------------------------------------------------------- hooks, remove


def test_hero_runs_none_of_the_users_hooks(target: TargetRepo, base: str, tmp_path: Path) -> None:
    fired = tmp_path / "fired"
    hooks = target.path / ".git" / "hooks"
    for name in ("reference-transaction", "post-checkout", "pre-commit", "post-commit"):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> {fired}\n")
        (hooks / name).chmod(0o755)
    git(target.path, "branch", BRANCH, base)  # plain git runs them
    assert "reference-transaction" in fired.read_text()
    fired.unlink()

    story = StoryRepo(target, tmp_path / "worktrees" / "s1", BRANCH)
    story.lay_out(base)
    git(story.path, "switch", "-q", "-c", "stray")
    commit_file(story.path, "stray.txt", "s\n", "stray")
    git(story.path, "switch", "-q", BRANCH)
    work = commit_file(story.path, "w.txt", "w\n", "work")
    story.bring_back()
    story.keep_in_target("stray")
    story.catch_up(work)
    story.remove()

    assert target.branch_sha(BRANCH) == work
    assert not fired.exists()


def test_remove_deletes_the_story_repository(
    story: StoryRepo, target: TargetRepo, base: str
) -> None:
    work = commit_file(story.path, "w.txt", "w\n", "work")
    story.bring_back()
    (story.path / "uncommitted.txt").write_text("gone with it\n")

    story.remove()

    assert not os.path.lexists(story.path)
    assert target.branch_sha(BRANCH) == work
    assert_sound(target.path)
    story.remove()  # nothing there: nothing to do


def test_remove_retires_a_linked_worktree_of_an_earlier_hero(
    target: TargetRepo, base: str, tmp_path: Path
) -> None:
    path = tmp_path / "worktrees" / "s1"
    committed = _old_layout(target, base, path)

    StoryRepo(target, path, BRANCH).remove()

    assert not os.path.lexists(path)
    assert linked_worktrees(target.path) == []
    kept = target.branch_sha(BRANCH)
    assert kept is not None
    assert git(target.path, "rev-parse", f"{kept}^").strip() == committed
    assert git(target.path, "show", f"{kept}:uncommitted.txt") == "keep me\n"
    assert_sound(target.path)


# ----------------------------------------------------------------------------- object formats


def test_lay_out_of_a_sha256_repository(tmp_path: Path) -> None:
    user = tmp_path / "sha256"
    user.mkdir()
    git(user, "init", "-q", "-b", "main", "--object-format=sha256")
    tip = commit_file(user, "a.txt", "a\n", "initial")
    git(user, "branch", BRANCH, tip)
    story = StoryRepo(TargetRepo(user), tmp_path / "worktrees" / "s1", BRANCH)

    story.lay_out(tip)

    assert story.tip() == tip and (story.path / "a.txt").read_text() == "a\n"
    work = commit_file(story.path, "w.txt", "w\n", "work")
    assert story.bring_back() == work
