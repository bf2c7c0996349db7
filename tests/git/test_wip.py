"""Work in progress (hero.git.wip, hero.engine.wip's mark): a snapshot of a worktree that
touches nothing of it, put back into a fresh checkout; secrets kept off it; a mark read
from Redis checked like any hostile input. Real git repositories."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import git

from hero.agent.replay import WORKTREE_AS_LEFT, Replayed, restart_note
from hero.config.project import DEFAULT_BUILD_OUTPUT
from hero.engine.trust import Untrusted
from hero.engine.wip import WipMark
from hero.git.wip import (
    WipRefused,
    check_secrets,
    commit_snapshot,
    restore,
    tree_of,
    worktree_tree,
)
from hero.redact import Redactor

IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def repo_with_work(tmp_path: Path) -> tuple[Path, str]:
    """A repository with a commit, then uncommitted work of every kind: a changed file, a
    staged new one, an untracked one, a deletion, an ignored file."""
    repo = tmp_path / "work"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "kept.txt").write_text("one\n")
    (repo / "gone.txt").write_text("bye\n")
    (repo / ".gitignore").write_text("build/\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "base")
    tip = git(repo, "rev-parse", "HEAD").strip()
    (repo / "kept.txt").write_text("two\n")
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    (repo / "new" / "deep").mkdir(parents=True)
    (repo / "new" / "deep" / "file.txt").write_text("untracked\n")
    (repo / "gone.txt").unlink()
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_text("ignored\n")
    return repo, tip


def test_a_snapshot_touches_nothing_and_puts_the_work_back_uncommitted(tmp_path: Path) -> None:
    repo, tip = repo_with_work(tmp_path)
    status_before = git(repo, "status", "--porcelain")
    index_before = (repo / ".git" / "index").read_bytes()

    tree = worktree_tree(repo, repo / ".git")
    sha = commit_snapshot(repo, tree, tip, IDENTITY)

    # the worktree, its index and its branch as they were
    assert git(repo, "status", "--porcelain") == status_before
    assert (repo / ".git" / "index").read_bytes() == index_before
    assert git(repo, "rev-parse", "HEAD").strip() == tip
    assert not (repo / ".git" / "hero-wip-index").exists()
    assert git(repo, "rev-parse", f"{sha}^@").split() == [tip]
    assert tree != tree_of(repo, tip)

    # another machine: a fresh checkout of the tip, the snapshot put back
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(repo), str(other))
    git(other, "fetch", "-q", str(repo), sha)
    restore(other, sha)
    assert git(other, "rev-parse", "HEAD").strip() == tip  # no commit made
    assert (other / "kept.txt").read_text() == "two\n"
    assert (other / "staged.txt").read_text() == "staged\n"
    assert (other / "new" / "deep" / "file.txt").read_text() == "untracked\n"
    assert not (other / "gone.txt").exists()
    assert not (other / "build").exists()  # ignored: not kept
    assert git(other, "diff", "--cached", "--name-only") == ""  # all of it uncommitted
    changed = set(git(other, "status", "--porcelain", "--untracked-files=all").splitlines())
    assert changed == {" M kept.txt", " D gone.txt", "?? new/deep/file.txt", "?? staged.txt"}


def test_a_clean_worktree_is_its_tips_tree(tmp_path: Path) -> None:
    repo, tip = repo_with_work(tmp_path)
    git(repo, "checkout", "-q", "--", ".")
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-qfd")
    assert worktree_tree(repo, repo / ".git") == tree_of(repo, tip)


def test_a_snapshot_leaves_untracked_build_output_out(tmp_path: Path) -> None:
    """No .gitignore names them: the build_output list keeps them out of the snapshot (a
    staged one too), a tracked file under such a path is kept, the worktree untouched."""
    repo, _ = repo_with_work(tmp_path)
    (repo / "dist").mkdir()
    (repo / "dist" / "tracked.txt").write_text("one\n")
    git(repo, "add", "dist/tracked.txt")
    identity = ("-c", "user.name=t", "-c", "user.email=t@example.com")
    git(repo, *identity, "commit", "-qm", "dist", "--", "dist/tracked.txt")  # that one only
    (repo / "dist" / "tracked.txt").write_text("two\n")
    for rel in ("pkg/__pycache__/m.pyc", "node_modules/a.js", "staged.pyc"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("build\n")
    git(repo, "add", "staged.pyc")
    status_before = git(repo, "status", "--porcelain", "--untracked-files=all")
    index_before = (repo / ".git" / "index").read_bytes()

    tree = worktree_tree(repo, repo / ".git", DEFAULT_BUILD_OUTPUT)

    files = set(git(repo, "ls-tree", "-r", "--name-only", tree).split())
    assert files == {
        ".gitignore",
        "dist/tracked.txt",
        "kept.txt",
        "new/deep/file.txt",
        "staged.txt",
    }
    assert git(repo, "show", f"{tree}:dist/tracked.txt") == "two\n"
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == status_before
    assert (repo / ".git" / "index").read_bytes() == index_before
    # without the list they are in it
    files = set(
        git(repo, "ls-tree", "-r", "--name-only", worktree_tree(repo, repo / ".git")).split()
    )
    assert {"pkg/__pycache__/m.pyc", "node_modules/a.js", "staged.pyc"} <= files


def test_a_link_planted_as_the_scratch_index_is_not_written_through(tmp_path: Path) -> None:
    repo, tip = repo_with_work(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("not git's\n")
    os.symlink(outside, repo / ".git" / "hero-wip-index")
    worktree_tree(repo, repo / ".git")
    assert outside.read_text() == "not git's\n"
    assert not os.path.lexists(repo / ".git" / "hero-wip-index")


def test_a_snapshot_with_a_secret_value_is_refused(tmp_path: Path) -> None:
    repo, tip = repo_with_work(tmp_path)
    secret = "sk-test-" + "9" * 32
    (repo / "notes.txt").write_text(f"key = {secret}\n")
    tree = worktree_tree(repo, repo / ".git")
    with pytest.raises(WipRefused) as caught:
        check_secrets(repo, tip, tree, tip, Redactor([secret]))
    assert "notes.txt" in str(caught.value) and secret not in str(caught.value)
    check_secrets(repo, tip, tree, tip, Redactor(["not-there-" + "1" * 20]))  # no leak


def mark(**changes: object) -> str:
    value: dict[str, object] = {
        "sha": "a" * 40,
        "tip": "b" * 40,
        "round": 2,
        "started": 1700000000.5,
        "base": "c" * 40,
        "refused": "",
    }
    value.update(changes)
    return json.dumps(value)


def test_a_mark_read_back_is_checked() -> None:
    parsed = WipMark.parse(mark())
    assert parsed.round == 2 and parsed.sha == "a" * 40
    assert WipMark.parse(parsed.to_json()) == parsed
    assert WipMark.parse(mark(sha="")).sha == ""
    for bad in (
        "not json",
        "[]",
        mark(sha="HEAD"),
        mark(sha="--upload-pack=evil"),
        mark(tip="b" * 39),
        mark(round=0),
        mark(round=True),
        mark(round="2"),
        mark(started="yesterday"),
        mark(refused=["x"]),
        mark(extra=1),
    ):
        with pytest.raises(Untrusted):
            WipMark.parse(bad)


def test_the_restart_note_says_what_the_resuming_run_knows_of_the_worktree() -> None:
    replayed = Replayed(messages=[], head=0, parts=1)
    assert WORKTREE_AS_LEFT in restart_note(replayed)
    replayed.worktree = "The worktree is a fresh checkout: your changes were lost."
    note = restart_note(replayed)
    assert replayed.worktree in note and WORKTREE_AS_LEFT not in note
    assert note.endswith("Do not start over.")
