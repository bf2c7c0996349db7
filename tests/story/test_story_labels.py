"""A story's ``labels:`` (issue 37: the board filters by them): a list of one-line strings,
kept in order without repeats; anything else is an error naming the file and the field.
Written back as read (hero rewrites story files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hero.story.fields import MAX_LABEL_CHARS, MAX_LABELS
from hero.story.format import dumps_story, parse_story, parse_story_text, story_metadata
from hero.story.record import StoryError


def _story(tmp_path: Path, labels: str) -> Path:
    path = tmp_path / "s.md"
    path.write_text(f"---\nid: s\ntitle: T\nlabels: {labels}\n---\n## Goal\nDo it.\n")
    return path


def test_labels_are_read_in_order_without_repeats_and_written_back(tmp_path: Path) -> None:
    story = parse_story(_story(tmp_path, "[ui, bug, 'good first issue', ui]"))
    assert story.labels == ("ui", "bug", "good first issue")
    again = parse_story_text(dumps_story(story_metadata(story), story.body), tmp_path / "x.md")
    assert again.labels == story.labels
    assert parse_story(_story(tmp_path, "[]")).labels == ()
    assert "labels" not in story_metadata(parse_story(_story(tmp_path, "[]")))
    # one word is a list of one, as in every list field; spaces around a label are dropped
    assert parse_story(_story(tmp_path, "' ui '")).labels == ("ui",)


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        ("{a: b}", "expected a list"),
        ("[1, 2]", "item 1 is"),
        ("[ok, {a: b}]", "item 2 is"),
        ("['']", "item 1 is an empty string"),
        ('["a\\tb"]', "printable"),
        (f"[{'x' * (MAX_LABEL_CHARS + 1)}]", "1 to"),
        ("[" + ", ".join(f"l{i}" for i in range(MAX_LABELS + 1)) + "]", f"at most {MAX_LABELS}"),
    ],
)
def test_a_bad_label_names_the_file_and_the_field(tmp_path: Path, labels: str, says: str) -> None:
    path = _story(tmp_path, labels)
    with pytest.raises(StoryError) as info:
        parse_story(path)
    assert info.value.field == "labels" and info.value.path == path
    assert str(info.value).startswith(f"{path}: labels: ") and says in str(info.value)
