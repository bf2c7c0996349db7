"""The scope check skipped while nothing changed, and the ways a command could try to slip
a change past the skip: each must still be put back by the next check.

Real git repositories in tmp_path and real bash commands through the tools. The stamp's
"too recent to trust" window is set to zero here (the repository is seconds old), except
where a test is about that window.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import git

from hero.agent.tools import ToolContext, execute_tool
from hero.agent.tools import scope as scope_mod
from hero.config.schema import DEFAULT_PROTECTED
from hero.git.ops import DEFAULT_IDENTITY
from hero.runner import child_env

BASE_FILES = {
    "src/app.py": "def app():\n    return 1\n",
    "src/deep/a/b/c/mod.py": "X = 1\n",
    "docs/guide.md": "# Guide\n",
    "tests/test_x.py": "def test_app():\n    assert True\n",
}
GUIDE = "# Guide\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(scope_mod, "RACY_NS", 0)
    monkeypatch.setattr(scope_mod, "RACY_FINE_NS", 0)
    root = tmp_path / "wt"
    for rel, content in BASE_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
        # an hour old: git's index then holds no "racily clean" entry, which git status
        # would rewrite the index for on every call (and so change the stamp)
        os.utime(root / rel, (time.time() - 3600, time.time() - 3600))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    return root


def make_ctx(repo: Path) -> ToolContext:
    return ToolContext(
        root=repo,
        env=child_env(extra=DEFAULT_IDENTITY),
        scope=("src/**",),
        protected=DEFAULT_PROTECTED,
        base_sha=git(repo, "rev-parse", "HEAD").strip(),
    )


def bash(ctx: ToolContext, command: str) -> str:
    out = execute_tool(ctx, "bash", json.dumps({"command": command}))
    assert not out.is_error, out.content
    return out.content


def settled(ctx: ToolContext) -> tuple[int, tuple[object, ...]]:
    """Run clean commands until a check is skipped (the first may refresh git's index);
    the stamp the skips use."""
    for _ in range(4):
        bash(ctx, "true")
        kept = ctx.scope_stamp
        bash(ctx, "true")
        if kept is not None and ctx.scope_stamp is kept:
            return kept
    raise AssertionError("no check was ever skipped")


def status(repo: Path) -> str:
    return git(repo, "status", "--porcelain", "--untracked-files=all")


def test_a_clean_command_after_a_clean_check_skips_the_check(repo: Path) -> None:
    ctx = make_ctx(repo)
    kept = settled(ctx)
    out = bash(ctx, "echo hi")
    assert "hero undid" not in out
    assert ctx.scope_stamp is kept  # the same stamp: no full check ran


def test_a_write_outside_with_its_times_set_back_is_put_back(repo: Path) -> None:
    ctx = make_ctx(repo)
    settled(ctx)
    out = bash(
        ctx,
        "touch -r docs/guide.md /tmp/hero-ref-$$ && echo bad > docs/guide.md && "
        "echo new > docs/new.md && touch -r /tmp/hero-ref-$$ docs/guide.md docs/new.md docs "
        "&& rm /tmp/hero-ref-$$",
    )
    assert "docs/guide.md: put back" in out
    assert "docs/new.md: deleted" in out
    assert (repo / "docs/guide.md").read_text() == GUIDE
    assert status(repo) == ""


def test_a_protected_file_deep_in_the_scope_is_removed(repo: Path) -> None:
    ctx = make_ctx(repo)
    settled(ctx)
    out = bash(ctx, "echo KEY=1 > src/deep/a/b/c/.env && touch -d 2001-01-01 src/deep/a/b/c/.env")
    assert "src/deep/a/b/c/.env: deleted" in out
    assert not (repo / "src/deep/a/b/c/.env").exists()


def test_a_rename_out_of_the_scope_is_undone(repo: Path) -> None:
    ctx = make_ctx(repo)
    settled(ctx)
    out = bash(ctx, "mv docs/guide.md src/guide.md")
    assert "docs/guide.md: put back" in out
    assert (repo / "docs/guide.md").read_text() == GUIDE


def test_a_write_through_a_hard_link_from_outside_is_seen(repo: Path, tmp_path: Path) -> None:
    ctx = make_ctx(repo)
    link = tmp_path / "link"
    bash(ctx, f"ln docs/guide.md {link}")
    settled(ctx)
    link.write_text("changed from outside\n")  # no command of the worker's ran meanwhile
    out = bash(ctx, "true")
    assert "docs/guide.md: put back" in out
    assert (repo / "docs/guide.md").read_text() == GUIDE


def test_a_write_through_a_symlink_in_the_scope_is_seen(repo: Path) -> None:
    ctx = make_ctx(repo)
    bash(ctx, "ln -s ../docs src/docs")
    settled(ctx)
    out = bash(ctx, "echo bad > src/docs/guide.md && touch -d 2001-01-01 src/docs/guide.md")
    assert "docs/guide.md: put back" in out
    assert (repo / "docs/guide.md").read_text() == GUIDE


def test_a_change_to_the_index_alone_is_seen(repo: Path) -> None:
    ctx = make_ctx(repo)
    settled(ctx)
    out = bash(
        ctx,
        "b=$(echo bad | git hash-object -w --stdin) && "
        "git update-index --cacheinfo 100644,$b,docs/guide.md",
    )
    assert "docs/guide.md: put back" in out
    assert status(repo) == ""


def test_a_background_write_after_the_command_is_gone_by_the_next_check(repo: Path) -> None:
    ctx = make_ctx(repo)
    settled(ctx)
    bash(
        ctx,
        "for how in '' setsid nohup; do $how sh -c 'sleep 0.3; echo bad > docs/guide.md; "
        "touch -d 2001-01-01 docs/guide.md docs' >/dev/null 2>&1 < /dev/null & done",
    )
    time.sleep(1)  # past the writes, had they outlived the command (hero ends them)
    bash(ctx, "true")
    assert (repo / "docs/guide.md").read_text() == GUIDE
    assert status(repo) == ""


def test_a_write_from_another_process_between_commands_is_seen(repo: Path) -> None:
    ctx = make_ctx(repo)
    settled(ctx)
    subprocess.run(
        ["sh", "-c", "echo x > tests/new_test.py && touch -d 2001-01-01 tests/new_test.py tests"],
        cwd=repo,
        check=True,
    )
    out = bash(ctx, "true")
    assert "tests/new_test.py: deleted" in out


def test_a_worktree_changed_moments_ago_is_checked_in_full(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scope_mod, "RACY_NS", 3600 * 10**9)
    monkeypatch.setattr(scope_mod, "RACY_FINE_NS", 3600 * 10**9)
    ctx = make_ctx(repo)
    bash(ctx, "true")
    bash(ctx, "true")
    assert scope_mod.stamp(repo) is None
    assert ctx.scope_stamp is None


def test_a_large_worktree_is_checked_in_full(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scope_mod, "STAMP_LIMIT", 5)
    ctx = make_ctx(repo)
    bash(ctx, "true")
    assert scope_mod.stamp(repo) == scope_mod.TOO_BIG
    kept = ctx.scope_stamp
    assert kept is not None and kept[1] == scope_mod.TOO_BIG  # not walked for a while
    out = bash(ctx, "echo bad > docs/guide.md")  # and every check meanwhile a full one
    assert "docs/guide.md: put back" in out
    assert ctx.scope_stamp is kept


def test_a_stamp_is_trusted_for_a_bounded_time(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scope_mod, "STAMP_TRUST_NS", 0)
    ctx = make_ctx(repo)
    seen = []
    for _ in range(4):
        bash(ctx, "true")
        seen.append(ctx.scope_stamp)
    # every check a full one: each leaves a stamp of its own
    assert len({id(s) for s in seen}) == 4
    assert seen[-1] is not None
