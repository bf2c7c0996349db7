"""git.reffiles: a branch's tip read from files answers exactly what git answers, and leaves
every case that is not plain to git (None)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import GIT_ENV, git

from hero.git.ops import branch_tip
from hero.git.reffiles import ref_from_files


def rev_parse(repo: Path, ref: str) -> str:
    """What `git rev-parse --verify --quiet <ref>` prints ("" when it fails)."""
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", ref],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def test_loose_packed_and_missing_branches_read_as_git_reads_them(target_repo: Path) -> None:
    head = git(target_repo, "rev-parse", "HEAD").strip()
    git(target_repo, "branch", "hero/us-001")
    git(target_repo, "branch", "hero/us-002")
    git(target_repo, "pack-refs", "--all")  # both packed, no loose file left
    git(target_repo, "commit", "-q", "--allow-empty", "-m", "two")
    git(target_repo, "branch", "-f", "hero/us-002", "HEAD")  # loose again, newer than packed
    second = git(target_repo, "rev-parse", "HEAD").strip()
    assert not (target_repo / ".git/refs/heads/hero/us-001").exists()
    for branch, want in [
        ("hero/us-001", head),
        ("hero/us-002", second),
        ("main", second),
        ("hero/us-404", ""),
        ("nope", ""),
    ]:
        assert ref_from_files(target_repo, branch) == want
        assert rev_parse(target_repo, f"refs/heads/{branch}") == want
        assert branch_tip(target_repo, branch) == want


def test_what_is_not_plain_is_left_to_git(target_repo: Path) -> None:
    head = git(target_repo, "rev-parse", "HEAD").strip()
    heads = target_repo / ".git" / "refs" / "heads"
    git(target_repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    (heads / "hero").mkdir()
    (heads / "hero" / "linked").symlink_to(heads / "main")
    (heads / "junk").write_text("not an object id\n")
    (heads / "empty").write_text("")
    for branch in ["alias", "hero/linked", "junk", "empty", "../HEAD", "a..b", "x.lock"]:
        assert ref_from_files(target_repo, branch) is None, branch
    # and branch_tip, asking git for them, answers what git answers
    assert branch_tip(target_repo, "alias") == head == rev_parse(target_repo, "refs/heads/alias")
    assert branch_tip(target_repo, "junk") == "" == rev_parse(target_repo, "refs/heads/junk")


def test_a_linked_worktree_or_reftable_repository_is_left_to_git(
    target_repo: Path, tmp_path: Path
) -> None:
    wt = tmp_path / "wt"
    git(target_repo, "worktree", "add", "-q", "-b", "side", str(wt))
    assert ref_from_files(wt, "side") is None  # its .git is a file
    assert branch_tip(wt, "side") == rev_parse(target_repo, "refs/heads/side") != ""
    (target_repo / ".git" / "reftable").mkdir()
    assert ref_from_files(target_repo, "main") is None
