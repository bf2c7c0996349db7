"""hero never follows what a worker made: a link or a swapped file must not make it read or
write outside the worktree.

The rules files a prompt is built from live in the story's worktree, and the story file in
the inbox, both in reach of a worker or anyone else while a story runs. hero reads them
outside any sandbox: a symlink out of the worktree is not followed, only regular files are
read and with a limit, and a story file swapped for a link or another file is not written.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from hero.roles.repo import MAX_RULES_CHARS, MAX_RULES_TOTAL_CHARS, repo_rules
from hero.roles.worker import build_messages
from hero.story.feedback import append_feedback, write_feedback
from hero.story.format import parse_story
from hero.story.record import Story, StoryFileChanged

MARKER = "HOST-SECRET-7f3a9c"

STORY = """\
---
id: s1
title: Add subtraction
verify: [python -m unittest -q]
---
## Goal
Add `sub(a, b)`.
"""


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    wt.mkdir()
    return wt


@pytest.fixture
def host_file(tmp_path: Path) -> Path:
    """A file outside the worktree, as ~/.ssh/id_rsa or the home's config.local.yaml."""
    outside = tmp_path / "host" / "config.local.yaml"
    outside.parent.mkdir()
    outside.write_text(f"api_key: {MARKER}\n")
    return outside


@pytest.fixture
def story(tmp_path: Path) -> Story:
    path = tmp_path / "inbox" / "s1.md"
    path.parent.mkdir()
    path.write_text(STORY)
    return parse_story(path)


def worker_task(story: Story, worktree: Path) -> str:
    messages = build_messages(
        story, story.verify, worktree, round_no=2, max_rounds=3, feedback="fix it", home=None
    )
    return "\n".join(str(m["content"]) for m in messages)


# ----------------------------------------------------------------------------- rules files


def test_agents_md_linked_to_a_host_file_is_not_followed(
    story: Story, worktree: Path, host_file: Path
) -> None:
    (worktree / "AGENTS.md").symlink_to(host_file)
    (worktree / "CLAUDE.md").write_text("Run make lint.\n")

    task = worker_task(story, worktree)

    assert MARKER not in task
    assert "### AGENTS.md\n[not read: " in task  # named, with the reason, not its text
    assert "### CLAUDE.md\nRun make lint." in task  # the other rules still reach the worker


def test_relative_link_climbing_out_is_not_followed(
    story: Story, worktree: Path, host_file: Path
) -> None:
    (worktree / "CLAUDE.md").symlink_to(Path("..") / "host" / host_file.name)
    assert MARKER not in worker_task(story, worktree)


def test_roo_rule_file_linked_to_a_host_file_is_not_followed(
    story: Story, worktree: Path, host_file: Path
) -> None:
    rules = worktree / ".roo" / "rules"
    rules.mkdir(parents=True)
    (rules / "x.md").symlink_to(host_file)
    (rules / "y.md").write_text("Names in snake_case.\n")

    task = worker_task(story, worktree)

    assert MARKER not in task
    assert "### .roo/rules/x.md\n[not read: " in task
    assert "### .roo/rules/y.md\nNames in snake_case." in task


def test_roo_directory_linked_out_is_not_followed(
    story: Story, worktree: Path, host_file: Path
) -> None:
    # .roo -> a directory outside whose rules/ holds the host's text
    outside = host_file.parent / "roo"
    (outside / "rules").mkdir(parents=True)
    (outside / "rules" / "x.md").write_text(MARKER)
    (worktree / ".roo").symlink_to(outside)

    task = worker_task(story, worktree)

    assert MARKER not in task
    assert "[.roo/rules/ not read: " in task


def test_roo_rules_directory_linked_out_is_not_followed(
    story: Story, worktree: Path, host_file: Path
) -> None:
    (worktree / ".roo").mkdir()
    (worktree / ".roo" / "rules").symlink_to(host_file.parent)  # holds config.local.yaml
    assert MARKER not in worker_task(story, worktree)


def test_a_hard_link_to_a_host_file_is_not_read(
    story: Story, worktree: Path, host_file: Path
) -> None:
    os.link(host_file, worktree / "AGENTS.md")  # same file system: tmp_path holds both
    assert MARKER not in worker_task(story, worktree)


def test_a_fifo_is_not_read_and_never_blocks(worktree: Path) -> None:
    os.mkfifo(worktree / "AGENTS.md")  # a reader would wait forever for a writer
    (worktree / ".roo" / "rules").mkdir(parents=True)
    os.mkfifo(worktree / ".roo" / "rules" / "pipe.md")
    (worktree / "CLAUDE.md").write_text("Only this.\n")

    rules = repo_rules(worktree)

    assert "### CLAUDE.md\nOnly this." in rules
    assert "pipe.md" not in rules


def test_links_inside_the_worktree_still_work(worktree: Path) -> None:
    (worktree / "docs").mkdir()
    (worktree / "docs" / "agents.md").write_text("Use tabs.\n")
    (worktree / "AGENTS.md").symlink_to(Path("docs") / "agents.md")
    (worktree / "CLAUDE.md").symlink_to("AGENTS.md")  # a common layout: shown once

    rules = repo_rules(worktree)

    assert "### AGENTS.md\nUse tabs." in rules
    assert "### CLAUDE.md\n(the same file as AGENTS.md)" in rules
    assert rules.count("Use tabs.") == 1


def test_a_link_into_git_is_not_read(worktree: Path) -> None:
    (worktree / ".git").mkdir()  # a story's own clone keeps its .git in the worktree
    (worktree / ".git" / "config").write_text(f"url = https://x:{MARKER}@example.com\n")
    (worktree / "AGENTS.md").symlink_to(Path(".git") / "config")
    assert MARKER not in repo_rules(worktree)


def test_an_oversized_rules_file_is_read_with_a_limit(worktree: Path) -> None:
    size = 64 * 1024 * 1024
    with open(worktree / "AGENTS.md", "wb") as fh:  # sparse: no disk space used
        fh.write(b"rule " * 10)
        fh.truncate(size)

    tracemalloc.start()
    try:
        rules = repo_rules(worktree)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 4 * 1024 * 1024  # never the whole file in memory
    assert "### AGENTS.md\n" + "rule " * 10 in rules
    assert f"the file has {size} bytes; only its first {MAX_RULES_CHARS} characters" in rules
    assert len(rules) < MAX_RULES_CHARS + 500


def test_many_rules_files_are_bounded_together(worktree: Path) -> None:
    rules_dir = worktree / ".roo" / "rules"
    rules_dir.mkdir(parents=True)
    for n in range(40):
        (rules_dir / f"{n:02}.md").write_text(f"rule {n}\n" + "x" * MAX_RULES_CHARS)

    rules = repo_rules(worktree)

    assert len(rules) < MAX_RULES_TOTAL_CHARS + 2_000
    assert "### .roo/rules/00.md\nrule 0\n" in rules
    assert "more rules files not shown" in rules


# ----------------------------------------------------------------------------- story files


def test_parse_story_records_the_identity_of_the_file_read(story: Story) -> None:
    st = os.stat(story.path)
    assert story.file_id == (st.st_dev, st.st_ino)


def test_a_normal_append_works_and_gives_the_next_rounds_identity(story: Story) -> None:
    first = write_feedback(story.path, 1, "Tests fail.", expect=story.file_id)
    assert first.appended is True
    st = os.stat(story.path)
    assert first.file_id == (st.st_dev, st.st_ino)  # a new file was renamed over the old one

    assert append_feedback(story.path, 2, "Now lint fails.", expect=first.file_id) is True
    again = parse_story(story.path)
    assert again.feedback == "### Round 1\n\nTests fail.\n\n### Round 2\n\nNow lint fails."
    assert [p.name for p in story.path.parent.iterdir()] == ["s1.md"]  # no temporary file


def test_story_swapped_for_a_symlink_is_not_written_through(story: Story, host_file: Path) -> None:
    before = host_file.read_bytes()
    story.path.unlink()
    story.path.symlink_to(host_file)

    with pytest.raises(StoryFileChanged) as info:
        append_feedback(story.path, 1, "feedback", expect=story.file_id)

    assert "is now a symlink" in str(info.value)
    assert str(story.path) in str(info.value)
    assert host_file.read_bytes() == before
    assert story.path.is_symlink()  # the link itself left as it was
    assert [p.name for p in story.path.parent.iterdir()] == ["s1.md"]


def test_a_symlink_is_refused_even_without_expect(story: Story, host_file: Path) -> None:
    before = host_file.read_bytes()
    story.path.unlink()
    story.path.symlink_to(host_file)

    with pytest.raises(StoryFileChanged, match="is a symlink"):
        append_feedback(story.path, 1, "feedback")

    assert host_file.read_bytes() == before


def test_story_replaced_by_another_regular_file_is_refused_with_expect(story: Story) -> None:
    other = STORY.replace("Add subtraction", "Someone else's story")
    side = story.path.with_name("other.txt")
    side.write_text(other)
    os.replace(side, story.path)  # another file (another inode) at the same name

    with pytest.raises(StoryFileChanged, match="is a different file than the one hero read"):
        append_feedback(story.path, 1, "feedback", expect=story.file_id)

    assert story.path.read_text() == other


def test_a_link_swapped_in_just_before_the_rename_is_refused(
    story: Story, host_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The swap happens after hero read the file and while it writes the new one.
    import hero.story.feedback as story_module

    before = host_file.read_bytes()
    real = story_module._rewritten

    def swap_then_render(path: Path, raw: bytes, new_body: str) -> bytes:
        path.unlink()
        path.symlink_to(host_file)
        return real(path, raw, new_body)

    monkeypatch.setattr(story_module, "_rewritten", swap_then_render)

    with pytest.raises(StoryFileChanged, match="is now a symlink"):
        append_feedback(story.path, 1, "feedback")

    assert host_file.read_bytes() == before
    assert story.path.is_symlink()
    assert [p.name for p in story.path.parent.iterdir()] == ["s1.md"]  # temp file removed


def test_a_story_read_through_a_link_is_read_but_not_written(
    tmp_path: Path, host_file: Path
) -> None:
    real = host_file.parent / "s1.md"
    real.write_text(STORY)
    link = tmp_path / "inbox" / "s1.md"
    link.parent.mkdir()
    link.symlink_to(real)
    before = real.read_bytes()

    linked = parse_story(link)
    assert linked.title == "Add subtraction"
    assert linked.file_id is None  # never an identity to write back through
    with pytest.raises(StoryFileChanged, match="is a symlink"):
        append_feedback(link, 1, "feedback", expect=linked.file_id)
    assert real.read_bytes() == before


def test_a_story_under_a_symlinked_directory_is_written(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "s1.md").write_text(STORY)
    (tmp_path / "inbox").symlink_to(tmp_path / "real")

    story = parse_story(tmp_path / "inbox" / "s1.md")
    assert append_feedback(story.path, 1, "ok", expect=story.file_id) is True
    assert parse_story(tmp_path / "real" / "s1.md").feedback == "### Round 1\n\nok"


def test_atomic_write_refuses_a_link_when_told_not_to_follow_one(tmp_path: Path) -> None:
    """The Celery engine's copies of a story file: a link swapped in for one is never
    written through."""
    from hero.fsio import atomic_write

    victim = tmp_path / "config.local.yaml"
    victim.write_text("keys: {}\n")
    story = tmp_path / "inbox" / "s1.md"
    story.parent.mkdir()
    story.symlink_to(victim)

    with pytest.raises(OSError, match="symlink"):
        atomic_write(story, b"---\nid: s1\n---\nhostile\n", follow_link=False)

    assert victim.read_text() == "keys: {}\n"
    assert story.is_symlink()
