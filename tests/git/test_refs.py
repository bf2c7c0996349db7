"""hero.git.refs and the ref guard in bulk, on real repositories: thousands of refs a worker
made removed in one go, the user's put back, hostile names, links and clashes refused or
harmless, nothing of the user's lost, reports capped."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import GIT_ENV, git

from hero.git.guard import Guard, snapshot
from hero.git.ops import TargetRepo
from hero.git.phases import PhaseEnd, StoryGit
from hero.git.refs import LISTED, Change, drop_fast, read_refs, update_refs
from hero.git.storyrepo import StoryRepo
from hero.redact import Redactor

STRAY = re.compile(r"hero/s1-stray-\d{8}-\d{6}(-\d+)?")


def feed(repo: Path, lines: list[str]) -> None:
    """The worker's bulk command: ``git update-ref --stdin``."""
    subprocess.run(
        ["git", "update-ref", "--stdin"],
        cwd=repo,
        input="".join(f"{line}\n" for line in lines),
        text=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    )


def commit(repo: Path, name: str) -> str:
    (repo / name).write_text(f"{name}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", name)
    return git(repo, "rev-parse", "HEAD").strip()


def sha(repo: Path, rev: str) -> str:
    return git(repo, "rev-parse", rev).strip()


@pytest.fixture
def story(target_repo: Path) -> tuple[Path, str]:
    """A story's own repository (the worker's and hero's), on hero/s1, with user refs."""
    repo = target_repo
    git(repo, "checkout", "-q", "-b", "hero/s1")
    base = sha(repo, "HEAD")
    git(repo, "branch", "feature", base)
    git(repo, "tag", "v1", base)
    git(repo, "tag", "-a", "-m", "release", "v2", base)
    git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/heads/main")
    return repo, base


def guard_of(repo: Path, base: str) -> Guard:
    guard = Guard(repo, repo, "hero/s1", base, own=True)
    guard.watch()
    return guard


def loose_commits(repo: Path, n: int) -> list[str]:
    """``n`` commits off every branch (the worker's, reachable from no ref)."""
    git(repo, "checkout", "-q", "--detach")
    made = [commit(repo, f"loose{i}.txt") for i in range(n)]
    git(repo, "checkout", "-q", "hero/s1")
    return made


# ------------------------------------------------------------------------------ read, update


def test_all_refs_are_read_in_one_call_packed_and_loose(story: tuple[Path, str]) -> None:
    repo, base = story
    git(repo, "pack-refs", "--all")
    git(repo, "branch", "after-pack", base)
    refs = read_refs(repo)
    assert refs["refs/heads/feature"].oid == base  # packed
    assert refs["refs/heads/after-pack"].oid == base  # loose
    assert refs["refs/tags/v2"].oid != base  # the tag object, not peeled
    assert refs["refs/remotes/origin/HEAD"].value == "ref: refs/heads/main"
    assert set(read_refs(repo, "refs/tags")) == {"refs/tags/v1", "refs/tags/v2"}


def test_one_transaction_restores_and_deletes(story: tuple[Path, str]) -> None:
    repo, base = story
    top = commit(repo, "top.txt")
    feed(repo, [f"create refs/w/{i} {top}" for i in range(300)])
    outcome = update_refs(
        repo,
        [Change(f"refs/w/{i}") for i in range(300)]
        + [Change("refs/heads/feature", top), Change("refs/tags/v9", base)],
    )
    assert outcome.refused == {} and outcome.transactions == 1
    refs = read_refs(repo)
    assert not [r for r in refs if r.startswith("refs/w/")]
    assert refs["refs/heads/feature"].oid == top and refs["refs/tags/v9"].oid == base


def test_refused_changes_are_split_off_and_the_others_apply(story: tuple[Path, str]) -> None:
    repo, base = story
    git(repo, "branch", "taken", base)
    changes = [Change(f"refs/w/good{i}", base) for i in range(100)]
    changes += [
        Change("refs/heads/taken/below", base),  # a directory/file clash
        Change("refs/w/bad..name", base),  # a name git refuses
        Change("refs/w/trailing.lock", base),
        Change("HEAD", base),  # no ref hero changes
        Change("refs/w/missing", "0" * 39 + "1"),  # no such object
    ]
    outcome = update_refs(repo, changes)
    assert set(outcome.refused) == {
        "refs/heads/taken/below",
        "refs/w/bad..name",
        "refs/w/trailing.lock",
        "HEAD",
        "refs/w/missing",
    }
    refs = read_refs(repo)
    assert all(f"refs/w/good{i}" in refs for i in range(100))
    (problem,) = outcome.problems()
    assert "refs/heads/taken/below" in problem and "refs/w/bad..name" in problem


def test_refusals_are_listed_at_most_twenty(story: tuple[Path, str]) -> None:
    repo, base = story
    git(repo, "branch", "taken", base)
    outcome = update_refs(repo, [Change(f"refs/heads/taken/{i}", base) for i in range(30)])
    assert len(outcome.refused) == 30
    (problem,) = outcome.problems()
    assert len(re.findall(r"refs/heads/taken/\d+ \(", problem)) == LISTED
    assert problem.endswith("and 10 more")


# ------------------------------------------------------------------------------ dropped fast


def test_a_symlinked_loose_ref_is_removed_not_followed(
    story: tuple[Path, str], tmp_path: Path
) -> None:
    repo, base = story
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "victim").write_text(f"{base}\n")
    (outside / "dir" / "inner").write_text(f"{base}\n")
    refs = repo / ".git" / "refs"
    (refs / "w").mkdir()
    os.symlink(outside / "victim", refs / "w" / "link")  # a ref that is a link to a file
    os.symlink(outside / "dir", refs / "w" / "dirlink")  # a directory of refs that is a link
    drop_fast(repo / ".git", ["refs/w/link", "refs/w/dirlink/inner", "refs/w/../../victim"])
    assert (outside / "victim").read_text() == f"{base}\n"
    assert (outside / "dir" / "inner").read_text() == f"{base}\n"
    assert not os.path.lexists(refs / "w" / "link")
    assert not os.path.lexists(refs / "w" / "dirlink")
    assert "refs/heads/feature" in read_refs(repo)


def test_many_refs_are_dropped_by_making_the_refs_directory_anew(
    story: tuple[Path, str], tmp_path: Path
) -> None:
    """More refs to drop than to keep: ``refs`` and ``logs/refs`` are made anew with the
    kept loose files moved over; the old ones, links and all, are deleted aside."""
    repo, base = story
    gitdir = repo / ".git"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text(f"{base}\n")
    git(repo, "pack-refs", "--all")  # feature, v1, v2 packed
    git(repo, "branch", "loose-user", base)  # and one loose, with a reflog
    keep = read_refs(repo)
    feed(repo, [f"create refs/heads/w/{i} {base}" for i in range(300)])
    os.symlink(outside, gitdir / "refs" / "heads" / "w" / "out")
    os.symlink(outside / "victim", gitdir / "refs" / "tags" / "victim")
    drop_fast(gitdir, [*(f"refs/heads/w/{i}" for i in range(300)), "refs/tags/victim"], keep)
    assert read_refs(repo) == keep
    assert (gitdir / "logs" / "refs" / "heads" / "loose-user").is_file()
    assert not (gitdir / "logs" / "refs" / "heads" / "w").exists()
    assert (outside / "victim").read_text() == f"{base}\n"
    for _ in range(600):  # deleted in the background
        if not [e for e in os.listdir(gitdir) if e.startswith("hero-dropped-")]:
            break
        threading.Event().wait(0.1)
    assert not [e for e in os.listdir(gitdir) if e.startswith("hero-dropped-")]
    assert (outside / "victim").exists()
    git(repo, "fsck", "--no-progress")


def test_a_refs_directory_that_is_a_link_is_left_alone(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "heads").mkdir(parents=True)
    (outside / "heads" / "x").write_text("0" * 40 + "\n")
    gitdir = tmp_path / "repo" / ".git"
    (gitdir / "logs").mkdir(parents=True)
    os.symlink(outside, gitdir / "refs")
    drop_fast(gitdir, ["refs/heads/x"])
    assert (outside / "heads" / "x").exists() and os.path.islink(gitdir / "refs")


def test_packed_refs_are_rewritten_under_gits_lock(story: tuple[Path, str]) -> None:
    repo, base = story
    feed(repo, [f"create refs/tags/w{i} {base}" for i in range(200)])
    git(repo, "pack-refs", "--all")
    feed(repo, [f"update refs/tags/w{i} {sha(repo, 'v2')}" for i in range(0, 200, 2)])  # loose too
    gitdir = repo / ".git"
    (gitdir / "packed-refs.lock").write_text("")  # git holds it: packed-refs left alone
    drop_fast(gitdir, [f"refs/tags/w{i}" for i in range(200)])
    left = read_refs(repo)  # the loose ones gone; their packed lines show again
    assert len([r for r in left if r.startswith("refs/tags/w")]) == 200
    assert left["refs/tags/w0"].oid == base
    (gitdir / "packed-refs.lock").unlink()
    drop_fast(gitdir, [f"refs/tags/w{i}" for i in range(200)])
    assert not [r for r in read_refs(repo) if r.startswith("refs/tags/w")]
    assert not (gitdir / "packed-refs.lock").exists()
    assert read_refs(repo)["refs/tags/v2"].oid == sha(repo, "v2")  # its peeled line kept
    assert sha(repo, "v2^{}") == base
    git(repo, "fsck", "--no-progress")


# ------------------------------------------------------------------------------ the guard


def test_five_thousand_refs_a_worker_made_are_cleaned_and_nothing_is_lost(
    story: tuple[Path, str],
) -> None:
    repo, base = story
    guard = guard_of(repo, base)
    before = snapshot(repo)
    mine = loose_commits(repo, 12)  # more than get a branch each
    feed(repo, [f"create refs/w/a{i} {mine[i % 12]}" for i in range(2500)])
    git(repo, "pack-refs", "--all")
    feed(repo, [f"create refs/tags/w{i} {base}" for i in range(2500)])
    feed(repo, [f"update refs/heads/feature {mine[0]}", "delete refs/tags/v1"])
    guard.before_rescue()
    guard.after_rescue()

    assert snapshot(repo) == before
    (stray,) = guard.strays.made
    assert STRAY.fullmatch(stray)
    held = git(repo, "rev-list", stray)
    assert all(c in held for c in mine)  # every commit the worker's refs held is kept
    text = "\n".join(guard.problems)
    assert "5000 refs" in text and "and 4980 more" in text and stray in text
    assert (
        "feature (refs/heads/feature) was moved" in text and "v1 (refs/tags/v1) was deleted" in text
    )
    assert len(text) < 6000
    git(repo, "fsck", "--no-progress")


def test_the_users_refs_deleted_by_the_thousand_come_back(story: tuple[Path, str]) -> None:
    repo, base = story
    feed(repo, [f"create refs/tags/user{i} {base}" for i in range(600)])
    guard = guard_of(repo, base)
    before = snapshot(repo)
    feed(repo, [f"delete refs/tags/user{i}" for i in range(600)])
    guard.before_rescue()
    guard.after_rescue()
    assert snapshot(repo) == before
    assert any("600 refs" in p and "put them back" in p for p in guard.problems)


def test_a_clash_of_the_workers_refs_with_the_users_is_undone(story: tuple[Path, str]) -> None:
    repo, base = story
    guard = guard_of(repo, base)
    before = snapshot(repo)
    feed(repo, ["delete refs/heads/feature"])
    feed(repo, [f"create refs/heads/feature/{i} {base}" for i in range(100)])
    guard.before_rescue()
    guard.after_rescue()
    assert snapshot(repo) == before


def test_a_broken_loose_ref_over_the_users_is_reported_or_put_back(story: tuple[Path, str]) -> None:
    repo, base = story
    guard = guard_of(repo, base)
    feed(repo, [f"create refs/w/{i} {base}" for i in range(100)])
    (repo / ".git" / "refs" / "heads" / "feature").write_text("not a sha\n")
    guard.before_rescue()
    guard.after_rescue()
    refs = read_refs(repo)
    assert not [r for r in refs if r.startswith("refs/w/")]
    fixed = refs.get("refs/heads/feature")
    text = "\n".join(guard.problems)
    assert (fixed is not None and fixed.oid == base) or "refs/heads/feature" in text


# ------------------------------------------------------------------------------ the lock


def test_the_phase_end_cleans_the_story_repository_without_the_users_lock(
    target_repo: Path, tmp_path: Path
) -> None:
    """Another hero process holds the user's repository's lock all along: the story's own
    repository is cleaned meanwhile (3,000 refs of the worker's gone), and only moving the
    user's branch waits for the lock."""
    base = sha(target_repo, "HEAD")
    git(target_repo, "branch", "hero/s1", base)
    target = TargetRepo(target_repo)
    story = StoryRepo(target, tmp_path / "worktrees" / "s1", "hero/s1")
    assert story.lay_out(base) == []
    phases = StoryGit(target, story, secrets=Redactor([]))
    guard = phases.watch(base)
    work = commit(story.path, "work.txt")
    feed(story.path, [f"create refs/w/{i} {work}" for i in range(3000)])

    ended: list[PhaseEnd] = []
    other = TargetRepo(target_repo)  # another process's view: its own flock
    with other.locked():
        runner = threading.Thread(target=lambda: ended.append(phases.end_work(guard, "m", base)))
        runner.start()
        for _ in range(1200):  # the cleaning goes on while the lock is held
            if not read_refs(story.path, "refs/w"):
                break
            runner.join(0.1)
        assert not read_refs(story.path, "refs/w")
        assert runner.is_alive() and sha(target_repo, "hero/s1") == base  # waits to move it
    runner.join(300)
    (end,) = ended
    assert end.head == work == sha(target_repo, "hero/s1")
    assert any("3000 refs" in p for p in end.problems)
    assert not read_refs(target_repo, "refs/hero")  # no incoming ref left behind


def test_the_users_lock_is_reentrant_within_a_thread(target_repo: Path) -> None:
    target = TargetRepo(target_repo)
    with target.locked(), target.locked():
        pass
    with target.locked():  # taken and given back whole
        pass
