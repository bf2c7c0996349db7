"""End to end: build output never reaches a story's branch through hero's own commit.

`hero run` in-process against the scripted model over real HTTP, on a target repository
without a ``.gitignore``. The worker leaves bytecode, an installed package and its real work
uncommitted: hero's rescue commit takes the work and leaves the build output in the worktree
(``build_output`` in roles.yaml changes the list). A worker that commits build output itself
keeps it on the branch, and the reviewer is told which files they are.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import git
from helpers import COMMIT, SUB_AC, SUB_IMPL, VERIFY_SUB, load_state, task_text, verdict
from run_support import policy, review_requests, run_hero

from hero.llm.scripted import call, text

#: What the worker's bash leaves: bytecode and an installed JavaScript package.
MAKE_BUILD_OUTPUT = (
    "mkdir -p __pycache__ node_modules && echo bytecode > __pycache__/x.pyc && "
    "echo 'module.exports = 1' > node_modules/a.js"
)
BUILD_FILES = ("__pycache__/x.pyc", "node_modules/a.js")
LINE = "Build or cache output committed on this branch"


@pytest.fixture
def repo(target_repo: Path) -> Path:
    """The target repository with no ignore file at all: nothing of its own keeps build
    output out."""
    git(target_repo, "rm", "-q", ".gitignore")
    git(target_repo, "commit", "-q", "-m", "no ignore file")
    return target_repo


def on_branch(repo: Path) -> set[str]:
    """The files the story's branch adds or changes since main."""
    return set(git(repo, "diff", "--name-only", "main", "hero/s1").split())


def leaving_it_all_uncommitted() -> list:
    return [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("write_file", path="calc/new.py", content="NEW = 1\n"),
        call("bash", command=MAKE_BUILD_OUTPUT),
        text("Done, but I forgot to commit."),
    ]


@pytest.mark.slow
def test_uncommitted_build_output_stays_off_the_branch(
    scripted, make_home, write_story, repo: Path
) -> None:
    model = scripted(policy(leaving_it_all_uncommitted(), verdict(ac=SUB_AC)))
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0

    assert load_state(home)["status"] == "passed"
    log = git(repo, "log", "--format=%s", "main..hero/s1").splitlines()
    assert log == ["hero: commit work left uncommitted in round 1 (s1)"]
    assert on_branch(repo) == {"calc/__init__.py", "calc/new.py"}
    assert git(repo, "show", "hero/s1:calc/new.py") == "NEW = 1\n"
    # the build output is still in the story's worktree, untracked, and not named as a problem
    worktree = home / "worktrees" / "s1"
    assert (worktree / "__pycache__" / "x.pyc").read_text() == "bytecode\n"
    assert (worktree / "node_modules" / "a.js").is_file()
    untracked = git(worktree, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert {"?? __pycache__/x.pyc", "?? node_modules/a.js"} <= set(untracked)
    review = task_text(review_requests(model)[0])
    assert "calc/new.py" in review and LINE not in review
    assert "x.pyc" not in review and "node_modules" not in review


@pytest.mark.slow
def test_the_build_output_setting_changes_the_list(
    scripted, make_home, write_story, repo: Path
) -> None:
    model = scripted(policy(leaving_it_all_uncommitted(), verdict(ac=SUB_AC)))
    # bytecode no longer on it; no checks before round 1, whose bytecode would be committed
    home = make_home(model, build_output=["node_modules/"], baseline=False)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0

    assert on_branch(repo) == {"calc/__init__.py", "calc/new.py", "__pycache__/x.pyc"}
    assert (home / "worktrees" / "s1" / "node_modules" / "a.js").is_file()


@pytest.mark.slow
def test_the_workers_own_commit_of_build_output_is_shown_to_the_reviewer(
    scripted, make_home, write_story, repo: Path
) -> None:
    worker = [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command=MAKE_BUILD_OUTPUT),
        call("bash", command=COMMIT.format(msg="add-sub")),
        text("Added calc.sub."),
    ]
    model = scripted(policy(worker, verdict(ac=SUB_AC)))  # the reviewer's call, whatever it is
    home = make_home(model)
    story = write_story(home, "s1", verify=VERIFY_SUB)

    assert run_hero(home, story) == 0

    # hero does not undo the worker's own commit ...
    assert on_branch(repo) == {"calc/__init__.py", *BUILD_FILES}
    # ... and the reviewer is told, by name
    review = task_text(review_requests(model)[0])
    assert (
        f"{LINE} (2 file(s) matching hero's build_output setting): "
        "__pycache__/x.pyc, node_modules/a.js." in review
    )
