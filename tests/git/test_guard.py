"""hero.git.guard on real repositories: the user's refs put back, the story branch kept
growing, what a rescue commit must not take, and git push refused in children's env."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import GIT_ENV, git

from hero.config.project import DEFAULT_BUILD_OUTPUT
from hero.git.guard import (
    Guard,
    Leftovers,
    Strays,
    has_conflict_markers,
    is_protected,
    leftovers,
    push_refusals,
    recover_branch,
    snapshot,
)
from hero.redact import Redactor
from hero.runner import PUSH_REFUSED_URL, child_env

STRAY = re.compile(r"hero/s1-stray-\d{8}-\d{6}(-\d+)?")


def commit(repo: Path, name: str, content: str | None = None) -> str:
    (repo / name).write_text(content if content is not None else f"{name}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", name)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def story(target_repo: Path, tmp_path: Path) -> tuple[Path, Path, str]:
    """(repo, worktree on hero/s1, base sha)."""
    base = git(target_repo, "rev-parse", "main").strip()
    worktree = tmp_path / "wt"
    git(target_repo, "worktree", "add", "-q", "-b", "hero/s1", str(worktree), base)
    return target_repo, worktree, base


def settle(guard: Guard) -> None:
    guard.before_rescue()
    guard.after_rescue()


# ------------------------------------------------------------------------------ refs


def test_protected_refs_are_the_users() -> None:
    assert is_protected("refs/heads/main")
    assert is_protected("refs/tags/v1")
    assert is_protected("refs/remotes/origin/main")
    assert is_protected("refs/notes/commits")
    assert is_protected("refs/heads/herocopy")  # only the hero/ folder is hero's
    assert not is_protected("refs/heads/hero/s1")
    assert not is_protected("refs/heads/hero/other-story")
    assert not is_protected("refs/hero/anything")
    assert not is_protected("refs/stash")


def test_snapshot_records_symbolic_refs_by_target(story: tuple[Path, Path, str]) -> None:
    repo, _, base = story
    git(repo, "update-ref", "refs/remotes/origin/main", base)
    git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
    git(repo, "stash", "list")
    refs = snapshot(repo)
    assert refs == {
        "refs/heads/main": base,
        "refs/remotes/origin/main": base,
        "refs/remotes/origin/HEAD": "ref: refs/remotes/origin/main",
    }


def test_moved_deleted_and_created_refs_are_put_right(story: tuple[Path, Path, str]) -> None:
    repo, worktree, base = story
    git(repo, "branch", "feature")
    git(repo, "tag", "v1")
    git(repo, "update-ref", "refs/remotes/origin/main", base)
    git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
    guard = Guard(repo, worktree, "hero/s1", base)
    guard.watch()
    before = dict(guard.before)

    # the worker: commits off the story branch, then rewires the user's refs
    git(worktree, "checkout", "-q", "--detach")
    loose = commit(worktree, "loose.txt")
    git(worktree, "checkout", "-q", "hero/s1")
    git(repo, "update-ref", "refs/heads/main", loose)
    git(repo, "update-ref", "-d", "refs/heads/feature")
    git(repo, "update-ref", "refs/heads/feature/x", loose)  # where "feature" was: D/F clash
    git(repo, "tag", "-f", "v1", loose)
    git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/heads/main")
    git(repo, "notes", "add", "-m", "note", base)
    settle(guard)

    assert snapshot(repo) == before
    text = "\n".join(guard.problems)
    for name in ("main", "feature", "feature/x", "v1", "refs/notes/commits", "origin/HEAD"):
        assert name in text
    # one branch keeps the loose commit, however many refs held it (another the notes commit)
    tips = {git(repo, "rev-parse", b).strip(): b for b in guard.strays.made}
    assert len(guard.strays.made) == 2 and all(STRAY.fullmatch(b) for b in guard.strays.made)
    assert loose in tips and tips[loose] in text


def test_a_commit_on_the_story_branch_needs_no_stray(story: tuple[Path, Path, str]) -> None:
    repo, worktree, base = story
    guard = Guard(repo, worktree, "hero/s1", base)
    guard.watch()
    work = commit(worktree, "work.txt")
    git(repo, "update-ref", "refs/heads/main", work)
    settle(guard)
    assert git(repo, "rev-parse", "main").strip() == base
    assert guard.strays.made == [] and any("main" in p for p in guard.problems)


def test_nothing_done_is_nothing_reported(story: tuple[Path, Path, str]) -> None:
    repo, worktree, base = story
    guard = Guard(repo, worktree, "hero/s1", base)
    guard.watch()
    commit(worktree, "work.txt")
    git(worktree, "stash", "list")
    (worktree / "work.txt").write_text("changed\n")
    git(worktree, "stash", "-q")  # refs/stash is the worker's
    git(repo, "branch", "hero/s1-scratch")  # and hero/ is hero's
    settle(guard)
    assert guard.problems == [] and guard.notes == []


def test_a_commit_the_user_makes_in_their_checkout_is_left_alone(
    story: tuple[Path, Path, str],
) -> None:
    repo, worktree, base = story
    guard = Guard(repo, worktree, "hero/s1", base)
    guard.watch()
    mine = commit(repo, "users-own.txt")  # in the user's checkout of main, meanwhile
    settle(guard)
    assert git(repo, "rev-parse", "main").strip() == mine
    assert guard.problems == [] and guard.notes
    assert git(repo, "status", "--porcelain") == ""


def test_worktree_left_on_the_users_branch_is_detached_before_anything_is_committed(
    story: tuple[Path, Path, str],
) -> None:
    repo, worktree, base = story
    guard = Guard(repo, worktree, "hero/s1", base)
    guard.watch()
    git(worktree, "checkout", "-q", "--ignore-other-worktrees", "main")
    (worktree / "uncommitted.txt").write_text("x\n")
    guard.before_rescue()
    assert git(worktree, "rev-parse", "--abbrev-ref", "HEAD").strip() == "HEAD"
    assert guard.left == "main"
    assert (worktree / "uncommitted.txt").exists()  # files untouched
    assert git(repo, "rev-parse", "main").strip() == base


# ------------------------------------------------------------------------------ history


def test_a_rewritten_branch_is_put_back_and_the_rewrite_kept(story: tuple[Path, Path, str]) -> None:
    repo, worktree, base = story
    reviewed = commit(worktree, "reviewed.txt")
    guard = Guard(repo, worktree, "hero/s1", reviewed)
    guard.watch()
    git(worktree, "commit", "-q", "--amend", "-m", "amended")
    amended = git(worktree, "rev-parse", "HEAD").strip()
    settle(guard)
    assert git(repo, "rev-parse", "hero/s1").strip() == reviewed
    assert git(worktree, "status", "--porcelain") == ""
    (stray,) = guard.strays.made
    assert git(repo, "rev-parse", stray).strip() == amended
    assert "history was rewritten" in guard.problems[0]


def test_uncommitted_work_is_stashed_before_a_rewrite_is_undone(
    story: tuple[Path, Path, str],
) -> None:
    """A reset --hard to undo a rewrite must not take the files the rescue left uncommitted."""
    repo, worktree, base = story
    reviewed = commit(worktree, "reviewed.txt")
    guard = Guard(repo, worktree, "hero/s1", reviewed)
    guard.watch()
    git(worktree, "commit", "-q", "--amend", "-m", "amended")
    (worktree / "conflicted.txt").write_text("<<<<<<< ours\na\n=======\nb\n>>>>>>> theirs\n")
    (worktree / "reviewed.txt").write_text("edited, not committed\n")
    guard.keep_history()
    assert git(repo, "rev-parse", "hero/s1").strip() == reviewed
    stash = git(worktree, "stash", "list")
    assert "uncommitted work kept by hero" in stash
    kept = git(worktree, "diff", "--name-only", "stash@{0}^1", "stash@{0}")
    assert "conflicted.txt" in kept and "reviewed.txt" in kept
    assert any("git stash" in p for p in guard.problems)
    git(worktree, "stash", "pop", "-q")
    assert (worktree / "reviewed.txt").read_text() == "edited, not committed\n"
    assert (worktree / "conflicted.txt").read_text().startswith("<<<<<<< ours")


def test_commits_on_top_of_the_start_are_fine(story: tuple[Path, Path, str]) -> None:
    repo, worktree, base = story
    guard = Guard(repo, worktree, "hero/s1", base)
    guard.watch()
    commit(worktree, "one.txt")
    git(worktree, "checkout", "-q", "-b", "hero/s1-side")  # hero's namespace: taken over
    top = commit(worktree, "two.txt")
    settle(guard)
    assert guard.problems == []
    assert git(repo, "rev-parse", "hero/s1").strip() == top
    assert git(worktree, "symbolic-ref", "--short", "HEAD").strip() == "hero/s1"


def test_strays_get_numbered_names_and_are_made_once(story: tuple[Path, Path, str]) -> None:
    repo, worktree, _ = story
    git(worktree, "checkout", "-q", "--detach")
    one = commit(worktree, "one.txt")
    two = commit(worktree, "two.txt")
    git(worktree, "checkout", "-q", "hero/s1")
    strays = Strays(repo, "hero/s1")
    first = strays.keep(one)
    assert strays.keep(one) == first
    git(repo, "branch", "-f", first, base_of(repo))  # pretend a clash of names
    second = strays.keep(two)
    assert second != first and STRAY.fullmatch(first) and STRAY.fullmatch(second)
    assert strays.keep(git(repo, "rev-parse", "hero/s1").strip()) == ""


def base_of(repo: Path) -> str:
    return git(repo, "rev-parse", "main").strip()


# ------------------------------------------------------------------------------ its own branch


def test_a_deleted_branch_comes_back_at_the_worktrees_head(story: tuple[Path, Path, str]) -> None:
    repo, worktree, base = story
    work = commit(worktree, "work.txt")
    git(worktree, "checkout", "-q", "--detach")
    git(repo, "branch", "-D", "hero/s1")
    assert "recreated" in recover_branch(repo, worktree, "hero/s1", base)
    assert git(repo, "rev-parse", "hero/s1").strip() == work
    assert git(worktree, "symbolic-ref", "--short", "HEAD").strip() == "hero/s1"
    assert recover_branch(repo, worktree, "hero/s1", base) == ""  # there now


def test_a_deleted_branch_comes_back_at_the_record_if_head_went_elsewhere(
    story: tuple[Path, Path, str], tmp_path: Path
) -> None:
    repo, worktree, base = story
    recorded = commit(worktree, "work.txt")
    git(worktree, "checkout", "-q", "--detach", base)
    commit(worktree, "elsewhere.txt")
    git(repo, "branch", "-D", "hero/s1")
    recover_branch(repo, worktree, "hero/s1", recorded)
    assert git(repo, "rev-parse", "hero/s1").strip() == recorded
    assert recover_branch(repo, tmp_path / "no-worktree", "hero/s2", recorded)
    assert git(repo, "rev-parse", "hero/s2").strip() == recorded


# ------------------------------------------------------------------------------ leftovers


def test_conflict_markers_new_since_the_base_are_found(story: tuple[Path, Path, str]) -> None:
    repo, worktree, _ = story
    (repo / "sample.md").write_text("<<<<<<< a\nx\n=======\ny\n>>>>>>> b\n")
    base = commit(repo, "sample.md", (repo / "sample.md").read_text())
    git(worktree, "merge", "-q", "--ff-only", base)
    (worktree / "sample.md").write_text((worktree / "sample.md").read_text() + "more\n")
    (worktree / "new.py").write_text("x = 1\n>>>>>>> theirs\n")
    (worktree / "heading.rst").write_text("Title\n=======\n")
    (worktree / "blob.bin").write_bytes(b"\0<<<<<<< x\n")
    (worktree / "calc" / "__init__.py").write_text("<<<<<<< HEAD\na\n=======\nb\n>>>>>>> x\n")
    left = leftovers(worktree, base)
    assert sorted(left.conflicted) == ["calc/__init__.py", "new.py"]
    assert left.in_submodules == () and left.committable
    assert "calc/__init__.py" in left.problems()[0]


def test_unmerged_paths_are_found(story: tuple[Path, Path, str]) -> None:
    repo, worktree, base = story
    git(worktree, "checkout", "-q", "-b", "hero/s1-side")
    commit(worktree, "f.txt", "theirs\n")
    git(worktree, "checkout", "-q", "hero/s1")
    commit(worktree, "f.txt", "ours\n")
    subprocess.run(
        ["git", "merge", "-q", "hero/s1-side"],
        cwd=worktree,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
    )
    (worktree / "f.txt").write_text("hand-resolved, still unmerged in the index\n")
    assert leftovers(worktree, base).conflicted == ("f.txt",)


def test_clean_worktree_has_no_leftovers(story: tuple[Path, Path, str]) -> None:
    _, worktree, base = story
    left = leftovers(worktree, base)
    assert left.conflicted == () and left.in_submodules == () and not left.committable
    assert left.problems() == []


def test_markers_at_line_starts_only() -> None:
    assert has_conflict_markers("a\n<<<<<<< HEAD\n")
    assert has_conflict_markers(">>>>>>> branch\n")
    assert not has_conflict_markers("x = '<<<<<<< not at a line start'\n")
    assert not has_conflict_markers("Title\n=======\n")


def test_changes_inside_a_submodule_are_found(
    story: tuple[Path, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, worktree, base = story
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    commit(lib, "lib.txt")
    git(worktree, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "lib")
    git(worktree, "commit", "-q", "-m", "lib")
    (worktree / "lib" / "lib.txt").write_text("changed\n")
    left = leftovers(worktree, base)
    assert left.in_submodules == ("lib",) and not left.committable
    assert "lib" in left.problems()[0]
    (worktree / "top.txt").write_text("x\n")
    assert leftovers(worktree, base).committable


def test_untracked_files_inside_a_submodule_are_found(
    story: tuple[Path, Path, str], tmp_path: Path
) -> None:
    _, worktree, base = story
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    commit(lib, "lib.txt")
    git(worktree, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "lib")
    git(worktree, "commit", "-q", "-m", "lib")
    (worktree / "lib" / "new.txt").write_text("untracked in the submodule\n")
    left = leftovers(worktree, base, build_output=DEFAULT_BUILD_OUTPUT)
    assert left.in_submodules == ("lib",) and not left.committable


def test_untracked_build_output_is_no_leftover(story: tuple[Path, Path, str]) -> None:
    """What the rescue commit leaves out as build output is neither work left to commit nor
    looked into: a secret or conflict markers there do not stop the rescue of the rest."""
    _, worktree, base = story
    secret = "sk-test-" + "7" * 32
    git(worktree, "rm", "-q", ".gitignore")
    git(worktree, "commit", "-q", "-m", "no ignore file")
    (worktree / "node_modules").mkdir()
    (worktree / "node_modules" / "a.js").write_text("<<<<<<< a\nx\n=======\ny\n>>>>>>> b\n")
    (worktree / "calc" / "__pycache__").mkdir()
    (worktree / "calc" / "__pycache__" / "x.pyc").write_text(f"key={secret}\n")
    left = leftovers(worktree, base, Redactor([secret]), DEFAULT_BUILD_OUTPUT)
    assert left == Leftovers() and left.problems() == []
    # without the list, the same files are work left uncommitted, and refused
    left = leftovers(worktree, base, Redactor([secret]))
    assert left.committable
    assert left.conflicted == ("node_modules/a.js",)
    assert left.with_secrets == ("calc/__pycache__/x.pyc",)
    (worktree / "calc" / "new.py").write_text("x = 1\n")
    assert leftovers(worktree, base, Redactor([secret]), DEFAULT_BUILD_OUTPUT).committable


# ------------------------------------------------------------------------------ push


def test_child_env_adds_its_git_settings_after_the_inherited_ones() -> None:
    env = child_env(
        {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "a.b", "GIT_CONFIG_VALUE_0": "c"},
        git_config=[("x.y", "z")],
    )
    assert env["GIT_CONFIG_COUNT"] == "3"
    assert (env["GIT_CONFIG_KEY_0"], env["GIT_CONFIG_VALUE_0"]) == ("a.b", "c")
    assert env["GIT_CONFIG_KEY_1"] == f"url.{PUSH_REFUSED_URL}.pushInsteadOf"
    assert env["GIT_CONFIG_VALUE_1"] == ""
    assert (env["GIT_CONFIG_KEY_2"], env["GIT_CONFIG_VALUE_2"]) == ("x.y", "z")


@pytest.mark.parametrize("pushurl", [False, True], ids=["url", "pushurl"])
def test_git_push_fails_in_a_childs_env_and_fetch_still_works(
    target_repo: Path, tmp_path: Path, pushurl: bool
) -> None:
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(target_repo), str(origin))
    git(target_repo, "remote", "add", "origin", str(origin))
    if pushurl:
        git(target_repo, "config", "remote.origin.pushurl", f"file://{origin}")
    before = git(origin, "for-each-ref")
    env = {**child_env(git_config=push_refusals(target_repo)), **GIT_ENV}
    for args in (
        ["push", "origin", ":main"],
        ["push", "origin", "HEAD:main"],
        ["push", "--all", "origin"],
        ["push", "--mirror", "origin"],
        ["push", str(origin), "HEAD:refs/heads/x"],
        ["push", f"file://{origin}", "HEAD:refs/heads/y"],
    ):
        r = subprocess.run(["git", *args], cwd=target_repo, env=env, capture_output=True, text=True)
        assert r.returncode != 0, args
        assert "git push is disabled" in r.stderr, (args, r.stderr)
    assert git(origin, "for-each-ref") == before
    r = subprocess.run(["git", "fetch", "-q", "origin"], cwd=target_repo, env=env)
    assert r.returncode == 0
