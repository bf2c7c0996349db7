"""Tests for hero.git.ops' merges without a worktree (merge_heads) and set_branch, on real git."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
from conftest import git

from hero.git import ops as gitops
from hero.git.ops import DEFAULT_IDENTITY, GitError, MergeConflict, merge_heads, set_branch

IDENTITY = {
    "GIT_AUTHOR_NAME": "Plan Merger",
    "GIT_AUTHOR_EMAIL": "merger@example.com",
    "GIT_COMMITTER_NAME": "Plan Merger",
    "GIT_COMMITTER_EMAIL": "merger@example.com",
}


def branch_with(repo: Path, branch: str, files: dict[str, str], start: str = "main") -> str:
    """Commit ``files`` on a new ``branch`` from ``start``; the main checkout ends on main."""
    git(repo, "checkout", "-q", "-b", branch, start)
    for name, content in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"work on {branch}")
    git(repo, "checkout", "-q", "main")
    return sha_of(repo, branch)


def sha_of(repo: Path, rev: str) -> str:
    return git(repo, "rev-parse", rev).strip()


def parents(repo: Path, sha: str) -> list[str]:
    return git(repo, "rev-list", "--parents", "-n", "1", sha).split()[1:]


def show(repo: Path, sha: str, path: str) -> str:
    return git(repo, "show", f"{sha}:{path}")


def snapshot(repo: Path) -> dict[str, str]:
    """Everything a merge without a worktree must leave as it was."""
    return {
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "head": (repo / ".git" / "HEAD").read_text(),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
        "index": git(repo, "ls-files", "--stage"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "calc": (repo / "calc" / "__init__.py").read_text(),
    }


def dirty(repo: Path) -> None:
    """Uncommitted work in the user's checkout, which a merge must not touch."""
    (repo / "calc" / "__init__.py").write_text("def add(a, b):\n    return a + b  # mine\n")
    (repo / "scratch.txt").write_text("not committed\n")


# ------------------------------------------------------------------------- clean merges


def test_two_branches_merge_into_a_commit_of_both_without_touching_refs_or_checkout(
    target_repo: Path,
) -> None:
    a = branch_with(target_repo, "hero/plans/p/a", {"a.txt": "from a\n"})
    b = branch_with(
        target_repo,
        "hero/plans/p/b",
        {"calc/__init__.py": "def add(a, b):\n    return b + a\n"},
    )
    dirty(target_repo)
    before = snapshot(target_repo)

    sha = merge_heads(
        target_repo, [("hero/plans/p/a", a), ("hero/plans/p/b", b)], "merge a and b", IDENTITY
    )

    assert parents(target_repo, sha) == [a, b]
    assert show(target_repo, sha, "a.txt") == "from a\n"
    assert show(target_repo, sha, "calc/__init__.py") == "def add(a, b):\n    return b + a\n"
    assert show(target_repo, sha, "tests/test_calc.py")  # the base's files are kept
    assert git(target_repo, "log", "-1", "--format=%s|%an <%ae>|%cn", sha).strip() == (
        "merge a and b|Plan Merger <merger@example.com>|Plan Merger"
    )
    assert snapshot(target_repo) == before
    assert not (target_repo / "a.txt").exists()


def test_three_heads_are_merged_left_to_right(target_repo: Path) -> None:
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    b = branch_with(target_repo, "b", {"b.txt": "b\n"})
    c = branch_with(target_repo, "c", {"c.txt": "c\n"})
    before = snapshot(target_repo)

    sha = merge_heads(target_repo, [("a", a), ("b", b), ("c", c)], "merge", DEFAULT_IDENTITY)

    first, right = parents(target_repo, sha)
    assert right == c
    assert parents(target_repo, first) == [a, b]
    # exactly the two merge commits are new
    assert git(target_repo, "rev-list", sha, f"^{a}", f"^{b}", f"^{c}").split() == [sha, first]
    for name in ("a.txt", "b.txt", "c.txt"):
        assert show(target_repo, sha, name) == name[0] + "\n"
    assert snapshot(target_repo) == before


def test_one_head_is_the_answer(target_repo: Path) -> None:
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    assert merge_heads(target_repo, [("a", a)], "merge", DEFAULT_IDENTITY) == a


@pytest.mark.parametrize("order", ["ancestor first", "descendant first"])
def test_a_head_that_is_an_ancestor_of_another_is_dropped(target_repo: Path, order: str) -> None:
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    a2 = branch_with(target_repo, "a2", {"a2.txt": "a2\n"}, start="a")
    heads = [("a", a), ("a2", a2)]
    if order == "descendant first":
        heads.reverse()
    before = snapshot(target_repo)

    assert merge_heads(target_repo, heads, "merge", DEFAULT_IDENTITY) == a2
    assert snapshot(target_repo) == before


def test_an_ancestor_is_dropped_from_a_merge_of_several(target_repo: Path) -> None:
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    a2 = branch_with(target_repo, "a2", {"a2.txt": "a2\n"}, start="a")
    b = branch_with(target_repo, "b", {"b.txt": "b\n"})

    sha = merge_heads(target_repo, [("a", a), ("b", b), ("a2", a2)], "merge", DEFAULT_IDENTITY)

    assert parents(target_repo, sha) == [b, a2]  # one merge; a is in a2 already
    assert show(target_repo, sha, "a.txt") == "a\n"


def test_the_same_head_twice_is_merged_once(target_repo: Path) -> None:
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    b = branch_with(target_repo, "b", {"b.txt": "b\n"})

    assert merge_heads(target_repo, [("a", a), ("a again", a)], "m", DEFAULT_IDENTITY) == a
    sha = merge_heads(target_repo, [("a", a), ("b", b), ("a", a)], "m", DEFAULT_IDENTITY)
    assert parents(target_repo, sha) == [a, b]


# ------------------------------------------------------------------------- conflicts

NOTES = 'naïve "notes".txt'  # a name git quotes in its output unless asked for -z


def test_conflicting_edits_raise_merge_conflict_naming_files_and_branches(
    target_repo: Path,
) -> None:
    branch_with(target_repo, "base-notes", {NOTES: "one\ntwo\nthree\n"})
    git(target_repo, "merge", "-q", "--ff-only", "base-notes")
    a = branch_with(
        target_repo,
        "hero/plans/p/a",
        {
            "calc/__init__.py": "def add(a, b):\n    return a + b + 0\n",
            NOTES: "one\nTWO from a\nthree\n",
            "only-a.txt": "clean\n",
        },
    )
    b = branch_with(
        target_repo,
        "hero/plans/p/b",
        {
            "calc/__init__.py": "def add(a, b):\n    return 0 + a + b\n",
            NOTES: "one\n2 (b)\nthree\n",
        },
    )
    dirty(target_repo)
    before = snapshot(target_repo)

    with pytest.raises(MergeConflict) as info:
        merge_heads(
            target_repo, [("hero/plans/p/a", a), ("hero/plans/p/b", b)], "m", DEFAULT_IDENTITY
        )

    assert info.value.files == ("calc/__init__.py", NOTES)
    assert info.value.branches == ("hero/plans/p/a", "hero/plans/p/b")
    assert str(info.value) == (
        f"merge conflict between hero/plans/p/a and hero/plans/p/b in: calc/__init__.py, {NOTES}"
    )
    assert snapshot(target_repo) == before


def test_a_conflict_in_a_later_merge_names_every_branch_merged_so_far(target_repo: Path) -> None:
    a = branch_with(target_repo, "a", {"shared.txt": "from a\n"})
    b = branch_with(target_repo, "b", {"b.txt": "b\n"})
    c = branch_with(target_repo, "c", {"shared.txt": "from c\n"})
    before = snapshot(target_repo)

    with pytest.raises(MergeConflict) as info:
        merge_heads(target_repo, [("a", a), ("b", b), ("c", c)], "m", DEFAULT_IDENTITY)

    assert info.value.files == ("shared.txt",)
    assert info.value.branches == ("a", "b", "c")
    assert str(info.value) == "merge conflict between the merge of a, b and c in: shared.txt"
    assert snapshot(target_repo) == before


def test_a_conflict_git_names_no_file_for_is_still_a_conflict(target_repo: Path) -> None:
    """A directory renamed to two places on one side, a file added to it on the other: git
    exits 1 but lists no conflicted path, so only the exit code tells."""
    split = {f"z/f{i}": "\n".join(str(n) for n in range(i, 100)) + "\n" for i in range(1, 5)}
    branch_with(target_repo, "with-z", split)
    git(target_repo, "merge", "-q", "--ff-only", "with-z")
    git(target_repo, "checkout", "-q", "-b", "a")
    for i, where in ((1, "y"), (2, "y"), (3, "w"), (4, "w")):
        (target_repo / where).mkdir(exist_ok=True)
        git(target_repo, "mv", f"z/f{i}", f"{where}/f{i}")
    git(target_repo, "commit", "-q", "-m", "split z into y and w")
    git(target_repo, "checkout", "-q", "main")
    a = sha_of(target_repo, "a")
    b = branch_with(target_repo, "b", {"z/new": "new\n"})

    with pytest.raises(MergeConflict) as info:
        merge_heads(target_repo, [("a", a), ("b", b)], "m", DEFAULT_IDENTITY)

    assert info.value.files == ()
    assert info.value.branches == ("a", "b")
    assert "between a and b" in str(info.value)


# ------------------------------------------------------------------------- failures


def test_a_sha_that_is_no_commit_is_a_git_error_not_a_conflict(target_repo: Path) -> None:
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    with pytest.raises(GitError) as info:
        merge_heads(target_repo, [("a", a), ("ghost", "1" * 40)], "m", DEFAULT_IDENTITY)
    assert not isinstance(info.value, MergeConflict)
    assert "1" * 40 in str(info.value)


def test_merge_tree_exiting_1_without_a_tree_is_a_git_error_not_a_conflict(
    target_repo: Path,
) -> None:
    """``git merge-tree`` exits 1 for a conflict, and also for a name that is no commit (with
    nothing on stdout): only a tree on stdout makes it a conflict."""
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    with pytest.raises(GitError) as info:
        gitops._merge_tree(target_repo, a, "no-such-branch")
    assert not isinstance(info.value, MergeConflict)
    assert "no-such-branch - not something we can merge" in str(info.value)


def test_unrelated_histories_are_a_git_error_not_a_conflict(target_repo: Path) -> None:
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    git(target_repo, "checkout", "-q", "--orphan", "other")
    git(target_repo, "commit", "-q", "-m", "unrelated root")
    git(target_repo, "checkout", "-q", "main")
    other = sha_of(target_repo, "other")

    with pytest.raises(GitError) as info:
        merge_heads(target_repo, [("a", a), ("other", other)], "m", DEFAULT_IDENTITY)
    assert not isinstance(info.value, MergeConflict)
    assert "unrelated histories" in str(info.value)


def test_git_without_merge_tree_write_tree_says_which_git_is_needed(
    target_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git before 2.38 has only the old three-tree merge-tree, which prints its usage."""
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    b = branch_with(target_repo, "b", {"b.txt": "b\n"})
    real = shutil.which("git")
    assert real
    fake = tmp_path / "old-git" / "git"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do\n'
        '  case "$arg" in\n'
        "    --write-tree) echo 'usage: git merge-tree <base-tree> <b1> <b2>' >&2; exit 129;;\n"
        "    version) echo 'git version 2.37.1'; exit 0;;\n"
        "  esac\n"
        "done\n"
        f'exec {real} "$@"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake.parent}:{Path(real).parent}")

    with pytest.raises(GitError) as info:
        merge_heads(target_repo, [("a", a), ("b", b)], "m", DEFAULT_IDENTITY)
    assert not isinstance(info.value, MergeConflict)
    assert "git >= 2.38" in str(info.value)
    assert "git version 2.37.1" in str(info.value)


# ------------------------------------------------------------------------- set_branch


def test_set_branch_creates_a_branch(target_repo: Path) -> None:
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    before = snapshot(target_repo)

    set_branch(target_repo, "hero/plans/p", a)

    assert sha_of(target_repo, "refs/heads/hero/plans/p") == a
    after = snapshot(target_repo)
    assert after.pop("refs") != before.pop("refs")
    assert after == before


def test_set_branch_moves_a_branch(target_repo: Path) -> None:
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    b = branch_with(target_repo, "b", {"b.txt": "b\n"})
    set_branch(target_repo, "hero/plans/p", a)

    set_branch(target_repo, "hero/plans/p", b)  # not a fast-forward: hero owns the branch

    assert sha_of(target_repo, "refs/heads/hero/plans/p") == b


def test_set_branch_refuses_a_branch_checked_out_in_a_worktree(
    target_repo: Path, tmp_path: Path
) -> None:
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    b = branch_with(target_repo, "b", {"b.txt": "b\n"})
    wt = tmp_path / "someone" / "wt"
    git(target_repo, "worktree", "add", "-q", str(wt), "a")

    with pytest.raises(GitError) as info:
        set_branch(target_repo, "a", b)

    assert str(wt) in str(info.value)
    assert sha_of(target_repo, "refs/heads/a") == a
    assert git(wt, "status", "--porcelain").strip() == ""


def test_set_branch_refuses_the_branch_of_the_main_worktree(target_repo: Path) -> None:
    main = sha_of(target_repo, "main")
    b = branch_with(target_repo, "b", {"b.txt": "b\n"})

    with pytest.raises(GitError) as info:
        set_branch(target_repo, "main", b)

    assert str(target_repo) in str(info.value)
    assert sha_of(target_repo, "main") == main


def test_set_branch_to_where_a_checked_out_branch_already_is_moves_nothing(
    target_repo: Path,
) -> None:
    main = sha_of(target_repo, "main")
    set_branch(target_repo, "main", main)
    assert sha_of(target_repo, "main") == main


def test_set_branch_refuses_what_is_not_a_commit(target_repo: Path) -> None:
    tree = sha_of(target_repo, "main^{tree}")
    with pytest.raises(GitError) as info:
        set_branch(target_repo, "hero/x", tree)
    assert "not a commit" in str(info.value)
    assert git(target_repo, "branch", "--list", "hero/x").strip() == ""


@pytest.mark.parametrize("exists", [True, False], ids=["move", "create"])
def test_set_branch_does_not_overwrite_a_concurrent_move(
    target_repo: Path, monkeypatch: pytest.MonkeyPatch, exists: bool
) -> None:
    """Another process sets the branch between set_branch's read and its write: git refuses
    the write, and the other process's commit stays on the branch."""
    a = branch_with(target_repo, "a", {"a.txt": "a\n"})
    b = branch_with(target_repo, "b", {"b.txt": "b\n"})
    c = branch_with(target_repo, "c", {"c.txt": "c\n"})
    if exists:
        set_branch(target_repo, "hero/plans/p", a)
    checkouts_of = gitops._checkouts_of

    def racing(repo: Path, branch: str) -> list[Path]:
        git(repo, "update-ref", f"refs/heads/{branch}", c)
        return checkouts_of(repo, branch)

    monkeypatch.setattr(gitops, "_checkouts_of", racing)

    with pytest.raises(GitError):
        set_branch(target_repo, "hero/plans/p", b)
    assert sha_of(target_repo, "refs/heads/hero/plans/p") == c
