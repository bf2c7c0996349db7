"""hero.git.output on real repositories: hero's own commit of a worktree takes every change
but untracked build output (``build_output``), .gitignore or not; what a branch's commits
add as build output, named for the reviewer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import git

from hero.config.project import DEFAULT_BUILD_OUTPUT
from hero.git import output
from hero.git.ops import DEFAULT_IDENTITY, head_sha
from hero.git.output import added_build_output, build_output_line, commit_all, untracked

#: What a test run and an install leave in a Python or JavaScript project.
BUILD_FILES = (
    "calc/__pycache__/x.cpython-311.pyc",
    "stray.pyc",
    "node_modules/a.js",
    "node_modules/dep/index.js",
    ".pytest_cache/v/cache/lastfailed",
    "pkg.egg-info/PKG-INFO",
)


def write(root: Path, *paths: str, content: str = "x\n") -> None:
    for rel in paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def committed(repo: Path, rev: str = "HEAD") -> set[str]:
    """The files commit ``rev`` changes."""
    return set(git(repo, "show", "--name-only", "--format=", rev).split())


@pytest.fixture
def repo(target_repo: Path) -> Path:
    """``target_repo`` without a .gitignore: nothing but hero's list keeps build output out."""
    git(target_repo, "rm", "-q", ".gitignore")
    git(target_repo, "commit", "-q", "-m", "no ignore file")
    return target_repo


# ------------------------------------------------------------------------- commit_all


def test_commit_all_clean_tree_returns_none(target_repo: Path) -> None:
    assert commit_all(target_repo, "nothing", DEFAULT_IDENTITY) is None


def test_commit_all_commits_changes_and_untracked_files(target_repo: Path) -> None:
    before = head_sha(target_repo)
    (target_repo / "calc" / "__init__.py").write_text("def add(a, b):\n    return b + a\n")
    (target_repo / "new_dir").mkdir()
    (target_repo / "new_dir" / "fresh.txt").write_text("fresh\n")

    sha = commit_all(target_repo, "hero: save work", DEFAULT_IDENTITY)

    assert sha is not None and sha == head_sha(target_repo) != before
    changed = git(target_repo, "show", "--name-only", "--format=", sha).split()
    assert sorted(changed) == ["calc/__init__.py", "new_dir/fresh.txt"]
    assert git(target_repo, "status", "--porcelain").strip() == ""
    assert git(target_repo, "log", "-1", "--format=%an <%ae>|%s") == (
        "hero <hero@localhost>|hero: save work\n"
    )
    assert commit_all(target_repo, "again", DEFAULT_IDENTITY) is None


def test_untracked_build_output_is_left_out_without_a_gitignore(repo: Path) -> None:
    write(repo, "calc/new.py", *BUILD_FILES)
    (repo / "calc" / "__init__.py").write_text("def add(a, b):\n    return b + a\n")

    assert commit_all(repo, "hero: rescue", DEFAULT_IDENTITY, DEFAULT_BUILD_OUTPUT)

    assert committed(repo) == {"calc/new.py", "calc/__init__.py"}
    tree = set(git(repo, "ls-tree", "-r", "--name-only", "HEAD").split())
    assert not tree & set(BUILD_FILES)
    # left in the worktree as they were, untracked
    assert all((repo / p).read_text() == "x\n" for p in BUILD_FILES)
    left = git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(left) == sorted(f"?? {p}" for p in BUILD_FILES)


def test_without_the_list_build_output_is_committed(repo: Path) -> None:
    write(repo, "calc/new.py", "calc/__pycache__/x.pyc", "node_modules/a.js")
    assert commit_all(repo, "hero: rescue", DEFAULT_IDENTITY, ())
    assert committed(repo) == {"calc/new.py", "calc/__pycache__/x.pyc", "node_modules/a.js"}


def test_a_list_of_ones_own_replaces_the_default(repo: Path) -> None:
    write(repo, "calc/new.py", "calc/__pycache__/x.pyc", "out/run.log", "logs/a.txt")
    assert commit_all(repo, "hero: rescue", DEFAULT_IDENTITY, ("*.log", "/logs/"))
    assert committed(repo) == {"calc/new.py", "calc/__pycache__/x.pyc"}
    assert (repo / "out" / "run.log").exists() and (repo / "logs" / "a.txt").exists()


def test_changes_to_tracked_files_under_build_paths_are_still_committed(repo: Path) -> None:
    write(repo, "dist/keep.txt", "build/gen.py", "vendored/thing.pyc")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tracked on purpose")
    (repo / "dist" / "keep.txt").write_text("changed\n")
    (repo / "vendored" / "thing.pyc").write_text("changed\n")
    (repo / "build" / "gen.py").unlink()
    write(repo, "dist/new.txt")  # new beside them: left out

    assert commit_all(repo, "hero: rescue", DEFAULT_IDENTITY, DEFAULT_BUILD_OUTPUT)

    assert committed(repo) == {"dist/keep.txt", "vendored/thing.pyc", "build/gen.py"}
    assert git(repo, "show", "HEAD:dist/keep.txt") == "changed\n"
    assert git(repo, "status", "--porcelain").splitlines() == ["?? dist/new.txt"]


def test_a_gitignore_that_unignores_build_output_does_not_bring_it_in(repo: Path) -> None:
    (repo / ".gitignore").write_text("!*.pyc\n!node_modules/\n!__pycache__/\n")
    write(repo, "calc/__pycache__/x.pyc", "node_modules/a.js", "calc/new.py")
    assert commit_all(repo, "hero: rescue", DEFAULT_IDENTITY, DEFAULT_BUILD_OUTPUT)
    assert committed(repo) == {".gitignore", "calc/new.py"}


def test_the_repositorys_own_ignore_file_still_counts(repo: Path) -> None:
    (repo / ".gitignore").write_text("*.tmp\n")
    write(repo, "scratch.tmp", "calc/new.py")
    assert commit_all(repo, "hero: rescue", DEFAULT_IDENTITY, DEFAULT_BUILD_OUTPUT)
    assert committed(repo) == {".gitignore", "calc/new.py"}


def test_staged_build_output_is_unstaged_and_left_out(repo: Path) -> None:
    write(repo, "calc/__pycache__/x.pyc", "node_modules/a.js", "calc/new.py")
    git(repo, "add", "-A")  # staged, never committed: not on the branch yet

    assert commit_all(repo, "hero: rescue", DEFAULT_IDENTITY, DEFAULT_BUILD_OUTPUT)

    assert committed(repo) == {"calc/new.py"}
    assert (repo / "calc" / "__pycache__" / "x.pyc").exists()
    left = git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(left) == ["?? calc/__pycache__/x.pyc", "?? node_modules/a.js"]


def test_only_build_output_left_makes_no_commit(repo: Path) -> None:
    before = head_sha(repo)
    write(repo, "calc/__pycache__/x.pyc", "node_modules/a.js")
    git(repo, "add", "node_modules/a.js")
    assert commit_all(repo, "hero: rescue", DEFAULT_IDENTITY, DEFAULT_BUILD_OUTPUT) is None
    assert head_sha(repo) == before
    assert untracked(repo, DEFAULT_BUILD_OUTPUT) == []


def test_paths_are_added_as_they_are_never_as_patterns(repo: Path) -> None:
    """A file named ``*`` or ``:(glob)**`` is one file: given to ``git add`` as a pattern it
    would take the build output with it."""
    odd = ("*", ":(glob)**", "a b\tc.txt", "ünï.txt")
    write(repo, *odd, "node_modules/a.js", "calc/__pycache__/x.pyc")
    assert commit_all(repo, "hero: rescue", DEFAULT_IDENTITY, DEFAULT_BUILD_OUTPUT)
    names = git(repo, "show", "-z", "--name-only", "--format=", "HEAD").strip("\0\n")
    assert set(names.split("\0")) == set(odd)


def test_many_files_are_added_in_several_commands(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "_CHUNK_PATHS", 3)
    files = [f"new/f{i}.txt" for i in range(10)]
    write(repo, *files, "new/__pycache__/f.pyc")
    assert commit_all(repo, "hero: rescue", DEFAULT_IDENTITY, DEFAULT_BUILD_OUTPUT)
    assert committed(repo) == set(files)


def test_untracked_lists_a_nested_repository_once(repo: Path) -> None:
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    write(nested, "lib.py")
    write(repo, "node_modules/a.js")
    assert untracked(repo, DEFAULT_BUILD_OUTPUT) == ["vendor/lib/"]


# ------------------------------------------------------------------------- the reviewer's line


@pytest.mark.slow
def test_added_build_output_names_what_the_branch_adds(repo: Path, tmp_path: Path) -> None:
    write(repo, "dist/old.txt")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a tracked dist file")
    base = head_sha(repo)
    (repo / "dist" / "old.txt").write_text("changed\n")  # changed, not added: not named
    write(repo, "calc/new.py", "calc/__pycache__/x.pyc", "node_modules/a.js", "gone.pyc")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "worker: everything")
    git(repo, "rm", "-q", "gone.pyc")
    git(repo, "commit", "-q", "-m", "worker: one taken back")
    index_before = (repo / ".git" / "index").read_bytes()
    tip = head_sha(repo)

    found = added_build_output(repo, base, tip, DEFAULT_BUILD_OUTPUT)

    assert found == ["calc/__pycache__/x.pyc", "node_modules/a.js"]
    assert (repo / ".git" / "index").read_bytes() == index_before
    assert git(repo, "status", "--porcelain") == ""
    assert added_build_output(repo, base, tip, ()) == []
    assert added_build_output(repo, base, tip, ("*.py",)) == ["calc/new.py"]
    assert added_build_output(repo, tip, tip, DEFAULT_BUILD_OUTPUT) == []
    # a bare repository (no worktree, no index) gives the same answer
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    assert added_build_output(bare, base, tip, DEFAULT_BUILD_OUTPUT) == found
    shutil.rmtree(bare)


def test_the_line_is_bounded_and_empty_for_none() -> None:
    assert build_output_line([]) == ""
    line = build_output_line(["a/__pycache__/x.pyc"])
    assert line.startswith("Build or cache output committed on this branch (1 file(s)")
    assert "a/__pycache__/x.pyc" in line and "more" not in line
    many = [f"node_modules/m{i:03}.js" for i in range(500)]
    line = build_output_line(many)
    assert "node_modules/m019.js" in line and "node_modules/m020.js" not in line
    assert "(500 file(s)" in line and "and 480 more" in line
    assert len(line) < 1000
