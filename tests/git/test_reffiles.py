"""git.reffiles: a branch's tip read from files answers exactly what git answers, and leaves
every case that is not plain to git (None)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import GIT_ENV, git

import hero.git.guard as guard_module
from hero.git.guard import Guard
from hero.git.ops import branch_tip, current_branch
from hero.git.reffiles import head_from_files, ref_from_files, refs_from_files


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


# -- hostile files: a worker can write anything in .git ------------------------------------


def test_links_anywhere_on_the_way_are_never_followed(target_repo: Path, tmp_path: Path) -> None:
    head = git(target_repo, "rev-parse", "HEAD").strip()
    outside = tmp_path / "outside"
    (outside / "heads" / "hero").mkdir(parents=True)
    (outside / "heads" / "hero" / "us-001").write_text("1" * 40 + "\n")
    (outside / "HEAD").write_text("ref: refs/heads/elsewhere\n")
    dot_git = target_repo / ".git"
    # a directory on the way to the ref is a link out of the repository
    (dot_git / "refs" / "heads" / "hero").symlink_to(outside / "heads" / "hero")
    assert ref_from_files(target_repo, "hero/us-001") is None
    assert branch_tip(target_repo, "hero/us-001") == rev_parse(
        target_repo, "refs/heads/hero/us-001"
    )
    (dot_git / "refs" / "heads" / "hero").unlink()
    # packed-refs, HEAD and the ref itself as links out
    (dot_git / "refs" / "heads" / "side").symlink_to(outside / "heads" / "hero" / "us-001")
    assert ref_from_files(target_repo, "side") is None
    (dot_git / "packed-refs").symlink_to(outside / "heads" / "hero" / "us-001")
    assert ref_from_files(target_repo, "hero/us-002") is None
    (dot_git / "packed-refs").unlink()
    (dot_git / "HEAD").rename(tmp_path / "HEAD.real")
    (dot_git / "HEAD").symlink_to(outside / "HEAD")
    assert head_from_files(target_repo) is None
    (dot_git / "HEAD").unlink()
    (tmp_path / "HEAD.real").rename(dot_git / "HEAD")
    assert head_from_files(target_repo) == "main" == current_branch(target_repo)
    assert ref_from_files(target_repo, "main") == head
    # .git itself a link to another repository
    other = tmp_path / "other"
    other.mkdir()
    (other / ".git").symlink_to(dot_git)
    assert ref_from_files(other, "main") is None
    assert head_from_files(other) is None


def test_a_fifo_a_directory_or_a_huge_file_is_not_read(target_repo: Path) -> None:
    heads = target_repo / ".git" / "refs" / "heads"
    os.mkfifo(heads / "fifo")  # opened without blocking: no writer ever comes
    (heads / "dir").mkdir()
    (heads / "big").write_bytes(b"a" * 40 + b"\n" * 10_000)
    for branch in ["fifo", "big"]:
        assert ref_from_files(target_repo, branch) is None, branch
    assert ref_from_files(target_repo, "dir") is None
    os.mkfifo(target_repo / ".git" / "packed-refs")
    assert ref_from_files(target_repo, "nope") is None


def test_loose_refs_in_any_other_form_are_left_to_git(target_repo: Path) -> None:
    head = git(target_repo, "rev-parse", "HEAD").strip()
    heads = target_repo / ".git" / "refs" / "heads"
    forms = {
        "upper": head.upper() + "\n",
        "trailing": head + " trailing\n",
        "long": head + "0" * 24 + "\n",
        "two": head + "\n" + head + "\n",
        "crlf": head + "\r\n",
        "spaced": " " + head + "\n",
    }
    for name, text in forms.items():
        (heads / name).write_text(text)
        assert ref_from_files(target_repo, name) is None, name
        assert branch_tip(target_repo, name) == rev_parse(target_repo, f"refs/heads/{name}")
    (heads / "bare").write_text(head)  # no newline: git reads it too
    assert ref_from_files(target_repo, "bare") == head == rev_parse(target_repo, "refs/heads/bare")


def test_packed_refs_not_in_the_form_git_writes_are_left_to_git(target_repo: Path) -> None:
    head = git(target_repo, "rev-parse", "HEAD").strip()
    packed = target_repo / ".git" / "packed-refs"
    good = (
        f"# pack-refs with: peeled fully-peeled sorted \n{head} refs/heads/a\n{head} refs/heads/b\n"
    )
    packed.write_text(good)
    assert ref_from_files(target_repo, "b") == head == rev_parse(target_repo, "refs/heads/b")
    assert ref_from_files(target_repo, "c") == ""
    for bad in [
        f"{head} refs/heads/b\n{head} refs/heads/a\n",  # out of order: git may miss one
        f"{head} refs/heads/b\n{'0' * 40} refs/heads/b\n",  # the same name twice
        f"{head} refs/heads/a\n^{head}\n^{head}\n",  # two peeled lines
        f"^{head}\n{head} refs/heads/a\n",  # a peeled line with no ref
        f"{head} refs/heads/a\ngarbage\n",
        f"{head} refs/heads/a",  # no newline at the end
        f"{head}  refs/heads/a\n",
        f"{head} heads/a\n",
        f"{head[:-1]} refs/heads/a\n",
        "\x00" * 100,
    ]:
        packed.write_text(bad)
        assert ref_from_files(target_repo, "a") is None, bad
        assert branch_tip(target_repo, "a") == rev_parse(target_repo, "refs/heads/a"), bad


def test_a_repository_git_reads_differently_is_left_to_git(target_repo: Path) -> None:
    dot_git = target_repo / ".git"
    config = (dot_git / "config").read_text()
    (dot_git / "config").write_text(config + "[extensions]\n\tobjectFormat = sha256\n")
    assert ref_from_files(target_repo, "main") is None
    assert head_from_files(target_repo) is None
    (dot_git / "config").write_text(config + "[extensions]\n\trefStorage = reftable\n")
    assert ref_from_files(target_repo, "main") is None
    (dot_git / "config").write_text(config)
    (dot_git / "commondir").write_text("..\n")
    assert ref_from_files(target_repo, "main") is None
    (dot_git / "commondir").unlink()
    (dot_git / "config").unlink()
    assert ref_from_files(target_repo, "main") is None


def test_head_is_read_as_git_symbolic_ref_reads_it(target_repo: Path) -> None:
    head = git(target_repo, "rev-parse", "HEAD").strip()
    assert head_from_files(target_repo) == "main" == current_branch(target_repo)
    git(target_repo, "checkout", "-q", "-b", "hero/us-001")
    assert head_from_files(target_repo) == "hero/us-001" == current_branch(target_repo)
    # a tag of the same name: git says heads/hero/us-001, so the files do not answer
    git(target_repo, "tag", "hero/us-001")
    assert head_from_files(target_repo) is None
    assert current_branch(target_repo) == "heads/hero/us-001"
    git(target_repo, "tag", "-d", "hero/us-001")
    git(target_repo, "tag", "hero/us-001")
    git(target_repo, "pack-refs", "--all")  # the tag packed only
    assert head_from_files(target_repo) is None
    assert current_branch(target_repo) == "heads/hero/us-001"
    git(target_repo, "checkout", "-q", "--detach")
    assert head_from_files(target_repo) == ""
    assert current_branch(target_repo) == "HEAD"
    dot_git = target_repo / ".git"
    for text in [
        "ref: refs/tags/v1\n",
        "ref:refs/heads/main\n",
        f"{head}",
        "ref: refs/heads/a..b\n",
    ]:
        (dot_git / "HEAD").write_text(text)
        assert head_from_files(target_repo) is None, text


# -- every ref at once ---------------------------------------------------------------------


def for_each_ref(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ") for line in out.splitlines())


def test_every_ref_reads_as_for_each_ref_lists_it(target_repo: Path) -> None:
    git(target_repo, "tag", "v1")
    git(target_repo, "branch", "hero/us-001")
    git(target_repo, "pack-refs", "--all")
    git(target_repo, "commit", "-q", "--allow-empty", "-m", "two")
    git(target_repo, "branch", "-f", "hero/us-001", "HEAD")  # loose over packed
    git(target_repo, "update-ref", "refs/notes/x", "HEAD")
    assert refs_from_files(target_repo) == for_each_ref(target_repo)


def test_every_ref_is_left_to_git_when_anything_is_not_plain(
    target_repo: Path, tmp_path: Path
) -> None:
    dot_git = target_repo / ".git"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_text(git(target_repo, "rev-parse", "HEAD"))
    (dot_git / "refs" / "tags" / "linked").symlink_to(outside)  # a directory link
    assert refs_from_files(target_repo) is None
    (dot_git / "refs" / "tags" / "linked").unlink()
    git(target_repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    assert refs_from_files(target_repo) is None
    (dot_git / "refs" / "heads" / "alias").unlink()
    os.mkfifo(dot_git / "refs" / "tags" / "fifo")
    assert refs_from_files(target_repo) is None
    (dot_git / "refs" / "tags" / "fifo").unlink()
    (dot_git / "refs" / "tags" / "odd name").write_text("0" * 40 + "\n")
    assert refs_from_files(target_repo) is None
    (dot_git / "refs" / "tags" / "odd name").unlink()
    assert refs_from_files(target_repo) == for_each_ref(target_repo)


def test_a_guard_whose_refs_did_not_move_runs_no_git_and_still_catches_a_move(
    target_repo: Path, tmp_path: Path
) -> None:
    base = git(target_repo, "rev-parse", "main").strip()
    worktree = tmp_path / "wt"
    git(target_repo, "worktree", "add", "-q", "-b", "hero/s1", str(worktree), base)
    guard = Guard(target_repo, worktree, "hero/s1", base)
    guard.watch()
    calls: list[tuple[str, ...]] = []
    real = guard_module.read_refs

    def counted(repo: Path, prefix: str = "") -> dict:
        calls.append((str(repo), prefix))
        return real(repo, prefix)

    guard_module.read_refs = counted  # type: ignore[assignment]
    try:
        guard.restore_refs()
        assert calls == [] and guard.problems == []
        # a worker moves main by writing the file itself (no git, no reflog)
        (target_repo / ".git" / "refs" / "heads" / "main").write_text("1" * 40 + "\n")
        guard.restore_refs()
        assert len(calls) == 1
    finally:
        guard_module.read_refs = real  # type: ignore[assignment]
    assert git(target_repo, "rev-parse", "refs/heads/main").strip() == base


def test_a_phase_reuses_the_refs_git_listed_while_the_files_still_show_them(
    target_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = git(target_repo, "rev-parse", "main").strip()
    worktree = tmp_path / "wt"
    git(target_repo, "worktree", "add", "-q", "-b", "hero/s1", str(worktree), base)
    first = Guard(target_repo, worktree, "hero/s1", base)
    first.watch()  # git lists the refs
    calls: list[Path] = []
    real = guard_module.read_refs
    monkeypatch.setattr(
        guard_module,
        "read_refs",
        lambda repo, prefix="": (calls.append(repo), real(repo, prefix))[1],
    )
    second = Guard(target_repo, worktree, "hero/s1", base)
    second.watch(listed=first.before)
    assert calls == [] and second.before == first.before
    git(target_repo, "tag", "v9")  # the files no longer show what was listed: git lists
    third = Guard(target_repo, worktree, "hero/s1", base)
    third.watch(listed=first.before)
    assert len(calls) == 1 and "refs/tags/v9" in third.before
    # a guard watching again takes its own record the same way
    third.watch()
    assert len(calls) == 1
    git(target_repo, "tag", "-d", "v9")
    third.watch()
    assert len(calls) == 2 and "refs/tags/v9" not in third.before


def test_refs_nested_too_deep_are_left_to_git(target_repo: Path) -> None:
    deep = target_repo / ".git" / "refs" / "heads"
    for i in range(40):
        deep = deep / f"d{i}"
    deep.mkdir(parents=True)
    assert refs_from_files(target_repo) is None
