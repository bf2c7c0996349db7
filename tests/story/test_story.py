from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hero.story import feedback as feedback_module
from hero.story.feedback import append_feedback
from hero.story.format import (
    dumps_story,
    parse_story,
    parse_story_text,
    story_handler,
    story_metadata,
    write_story,
)
from hero.story.record import FEEDBACK_HEADING, MAX_STORY_BYTES, Story, StoryError, VerifyTier
from hero.yamlio import ValueProblem

FULL = """\
---
id: add-login.v2_1
title: Add a login page
priority: high
max_retries: 5
verify:
  - ruff check .
  - python -m pytest -q
scope:
  - src/app/login.py
  - tests/
depends_on: [setup-db, base-layout]
base_ref: main
---
# Login

Some intro text.

## Goal
Users can log in with email and password.

## Acceptance Criteria
- [ ] A form with email and password fields
- [x] Wrong password shows an error
  message under the form
* Plain bullet item

## Constraints
Use the existing session module.

## Out of Scope
Password reset.
"""


def write(tmp_path: Path, text: str, name: str = "story.md") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", newline="")
    return path


def story_with(frontmatter: str, body: str = "## Goal\nDo it.\n") -> str:
    return f"---\n{frontmatter}---\n{body}"


def error_for(tmp_path: Path, text: str) -> StoryError:
    path = write(tmp_path, text)
    with pytest.raises(StoryError) as info:
        parse_story(path)
    err = info.value
    assert str(err) == f"{path}: {err.field}: {err.message}"
    assert "\n" not in str(err)
    assert err.path == path
    return err


# ----------------------------------------------------------------------------- valid stories


def test_valid_story_with_every_field(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    story = parse_story(path)
    assert isinstance(story, Story)
    assert story.path == path
    assert story.id == "add-login.v2_1"
    assert story.title == "Add a login page"
    assert story.priority == "high"
    assert story.max_retries == 5
    assert story.verify == (VerifyTier("verify", ("ruff check .", "python -m pytest -q")),)
    assert story.scope == ("src/app/login.py", "tests/")
    assert story.depends_on == ("setup-db", "base-layout")
    assert story.base_ref == "main"
    assert story.goal == "Users can log in with email and password."
    assert story.acceptance_criteria == (
        "A form with email and password fields",
        "Wrong password shows an error message under the form",
        "Plain bullet item",
    )
    assert story.constraints == "Use the existing session module."
    assert story.out_of_scope == "Password reset."
    assert story.feedback == ""
    assert story.body.startswith("# Login\n\nSome intro text.\n\n## Goal\n")
    assert story.body.endswith("## Out of Scope\nPassword reset.")
    assert "---" not in story.body


def test_minimal_story_defaults(tmp_path: Path) -> None:
    story = parse_story(write(tmp_path, "---\nid: s1\ntitle: T\n---\nDo it.\n"))
    assert story.priority == "normal"
    assert story.max_retries is None
    assert story.verify == ()
    assert story.scope == ()
    assert story.depends_on == ()
    assert story.base_ref is None
    assert story.allow_empty is False
    assert story.body == "Do it."
    assert story.goal == ""
    assert story.acceptance_criteria == ()
    assert story.constraints == ""
    assert story.out_of_scope == ""


def test_story_is_frozen(tmp_path: Path) -> None:
    story = parse_story(write(tmp_path, FULL))
    with pytest.raises(AttributeError):
        story.id = "other"  # type: ignore[misc]


def test_tiered_verify_keeps_declared_order(tmp_path: Path) -> None:
    text = story_with(
        "id: s1\ntitle: T\nverify:\n"
        "  zz-lint: ruff check .\n"
        "  unit:\n    - pytest -q tests/unit\n    - pytest -q tests/api\n"
        "  aa-slow: [pytest -q -m slow]\n"
    )
    story = parse_story(write(tmp_path, text))
    assert story.verify == (
        VerifyTier("zz-lint", ("ruff check .",)),
        VerifyTier("unit", ("pytest -q tests/unit", "pytest -q tests/api")),
        VerifyTier("aa-slow", ("pytest -q -m slow",)),
    )


def test_single_strings_become_one_item_lists(tmp_path: Path) -> None:
    text = story_with("id: s1\ntitle: T\nverify: make test\nscope: src/\ndepends_on: s0\n")
    story = parse_story(write(tmp_path, text))
    assert story.verify == (VerifyTier("verify", ("make test",)),)
    assert story.scope == ("src/",)
    assert story.depends_on == ("s0",)


def test_empty_optional_values_mean_defaults(tmp_path: Path) -> None:
    text = story_with("id: s1\ntitle: T\npriority:\nmax_retries:\nverify: []\nscope:\nbase_ref:\n")
    story = parse_story(write(tmp_path, text))
    assert (story.priority, story.max_retries, story.verify, story.scope, story.base_ref) == (
        "normal",
        None,
        (),
        (),
        None,
    )


def test_bom_and_crlf(tmp_path: Path) -> None:
    text = FULL.replace("\n", "\r\n")
    path = tmp_path / "bom.md"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    story = parse_story(path)
    assert story.id == "add-login.v2_1"
    assert story.verify == (VerifyTier("verify", ("ruff check .", "python -m pytest -q")),)
    assert story.goal == "Users can log in with email and password."
    assert len(story.acceptance_criteria) == 3
    assert "\r" not in story.body
    assert not story.body.startswith("\ufeff")


def test_parse_story_text_matches_parse_story(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    assert parse_story_text(FULL, path) == parse_story(path)
    assert parse_story_text("\ufeff" + FULL.replace("\n", "\r\n"), path) == parse_story(path)


# ----------------------------------------------------------------------------- sections


def test_sections_are_case_insensitive_and_numbered_items(tmp_path: Path) -> None:
    body = (
        "## GOAL:\nShip it.\nSecond line.\n\n"
        "## acceptance criteria\n"
        "1. first item\n"
        "2) second item\n"
        "   wrapped\n"
        "3. [ ] third with box\n"
        "   - nested detail\n"
        "\n"
        "A closing remark that is not an item.\n\n"
        "### Sub heading inside the section\n"
        "## Out-of-scope\nNothing else.\n"
        "## constraints ##\nKeep it small.\n"
    )
    story = parse_story(write(tmp_path, story_with("id: s1\ntitle: T\n", body)))
    assert story.goal == "Ship it.\nSecond line."
    assert story.acceptance_criteria == (
        "first item",
        "second item wrapped",
        "third with box\n- nested detail",
    )
    assert story.out_of_scope == "Nothing else."
    assert story.constraints == "Keep it small."


def test_acceptance_criteria_checkbox_styles(tmp_path: Path) -> None:
    body = "## Acceptance Criteria\n\n- [ ] unchecked\n- [x] checked\n- [X] upper\n+ plus\n"
    story = parse_story(write(tmp_path, story_with("id: s1\ntitle: T\n", body)))
    assert story.acceptance_criteria == ("unchecked", "checked", "upper", "plus")


def test_acceptance_criteria_without_a_list_are_paragraphs(tmp_path: Path) -> None:
    body = "## Acceptance Criteria\nThe page loads\nfast.\n\nIt looks nice.\n"
    story = parse_story(write(tmp_path, story_with("id: s1\ntitle: T\n", body)))
    assert story.acceptance_criteria == ("The page loads fast.", "It looks nice.")


def test_headings_inside_code_fences_are_ignored(tmp_path: Path) -> None:
    body = "## Goal\nRun this:\n```sh\n## Constraints\necho hi\n```\nDone.\n"
    story = parse_story(write(tmp_path, story_with("id: s1\ntitle: T\n", body)))
    assert story.goal == "Run this:\n```sh\n## Constraints\necho hi\n```\nDone."
    assert story.constraints == ""


def test_missing_sections_are_empty(tmp_path: Path) -> None:
    story = parse_story(write(tmp_path, story_with("id: s1\ntitle: T\n", "Just text.\n")))
    assert story.body == "Just text."
    assert (story.goal, story.acceptance_criteria, story.constraints, story.out_of_scope) == (
        "",
        (),
        "",
        "",
    )


def test_feedback_section_is_kept_out_of_body(tmp_path: Path) -> None:
    body = (
        "## Goal\nDo it.\n\n"
        f"{FEEDBACK_HEADING}\n\n### Round 1\n\nFix the tests.\n\n"
        "## Constraints\nNone.\n"
    )
    story = parse_story(write(tmp_path, story_with("id: s1\ntitle: T\n", body)))
    assert story.feedback == "### Round 1\n\nFix the tests."
    assert "Reviewer Feedback" not in story.body
    assert "Fix the tests" not in story.body
    assert story.body == "## Goal\nDo it.\n\n## Constraints\nNone."
    assert story.constraints == "None."


# ----------------------------------------------------------------------------- invalid stories


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        ("", "frontmatter", "empty"),
        ("   \n\n", "frontmatter", "empty"),
        ("# Just markdown\n", "frontmatter", "'# Just markdown'"),
        ("---\nid: s1\ntitle: T\n", "frontmatter", "closing '---'"),
        ("---\n---\nbody\n", "frontmatter", "found nothing"),
        ("---\n- a\n- b\n---\n", "frontmatter", "found a list"),
        ("---\njust a string\n---\n", "frontmatter", "found the string"),
        ("---\nid: s1\ntitle: [unclosed\n---\n", "frontmatter", "invalid YAML"),
        ("---\nid: s1\nid: s2\ntitle: T\n---\n", "frontmatter", "duplicate key 'id'"),
        ("---\ntitle: T\n---\n", "id", "missing"),
        ("---\nid: s1\n---\n", "title", "missing"),
        ("---\nid: s1\ntitle: '  '\n---\n", "title", "empty string"),
        ("---\nid: s1\ntitle: 2024\n---\n", "title", "the number 2024"),
        ("---\nid: -bad\ntitle: T\n---\n", "id", "'-bad'"),
        ("---\nid: has space\ntitle: T\n---\n", "id", "'has space'"),
        ("---\nid: a..b\ntitle: T\n---\n", "id", "'..'"),
        ("---\nid: x.lock\ntitle: T\n---\n", "id", "'.lock'"),
        ("---\nid: 42\ntitle: T\n---\n", "id", "the number 42"),
        ("---\nid: s1\ntitle: T\npriority: urgent\n---\n", "priority", "'urgent'"),
        ("---\nid: s1\ntitle: T\npriority: 1\n---\n", "priority", "low, normal, high"),
        ("---\nid: s1\ntitle: T\nmax_retries: 0\n---\n", "max_retries", "the number 0"),
        ("---\nid: s1\ntitle: T\nmax_retries: -2\n---\n", "max_retries", ">= 1"),
        ("---\nid: s1\ntitle: T\nmax_retries: true\n---\n", "max_retries", "boolean true"),
        ("---\nid: s1\ntitle: T\nmax_retries: '3'\n---\n", "max_retries", "the string '3'"),
        ("---\nid: s1\ntitle: T\nmax_retries: 2.5\n---\n", "max_retries", "2.5"),
        ("---\nid: s1\ntitle: T\nverify: 3\n---\n", "verify", "the number 3"),
        ("---\nid: s1\ntitle: T\nverify: ['ok', '']\n---\n", "verify", "command 2"),
        ("---\nid: s1\ntitle: T\nverify: [ok, 5]\n---\n", "verify", "the number 5"),
        ("---\nid: s1\ntitle: T\nverify: {unit: [ok, [x]]}\n---\n", "verify", "tier 'unit'"),
        ("---\nid: s1\ntitle: T\nverify: {unit: 7}\n---\n", "verify", "tier 'unit'"),
        ("---\nid: s1\ntitle: T\nverify: {unit: []}\n---\n", "verify", "at least one"),
        ("---\nid: s1\ntitle: T\nverify: {1: [ok]}\n---\n", "verify", "tier names"),
        ("---\nid: s1\ntitle: T\nscope: {a: b}\n---\n", "scope", "a mapping"),
        ("---\nid: s1\ntitle: T\nscope: [src, 3]\n---\n", "scope", "item 2"),
        ("---\nid: s1\ntitle: T\ndepends_on: 7\n---\n", "depends_on", "the number 7"),
        ("---\nid: s1\ntitle: T\ndepends_on: [ok, null]\n---\n", "depends_on", "item 2"),
        ("---\nid: s1\ntitle: T\ndepends_on: [bad id]\n---\n", "depends_on", "'bad id'"),
        ("---\nid: s1\ntitle: T\ndepends_on: [s1]\n---\n", "depends_on", "own id"),
        ("---\nid: s1\ntitle: T\nbase_ref: [main]\n---\n", "base_ref", "a list"),
        ("---\nid: s1\ntitle: T\nbase_ref: 3\n---\n", "base_ref", "the number 3"),
        ("---\nid: s1\ntitle: T\nprio: high\n---\n", "prio", "known fields: id, title"),
        (
            "---\nid: s1\ntitle: T\nallow_empty: yes please\n---\nx\n",
            "allow_empty",
            "true or false",
        ),
        ("---\nid: s1\ntitle: T\nallow_empty: 1\n---\nx\n", "allow_empty", "the number 1"),
        ("---\nid: s1\ntitle: T\n---\n", "body", "found nothing"),
        ("---\nid: s1\ntitle: T\n---\n  \n\t\n\n", "body", "found nothing"),
        (
            f"---\nid: s1\ntitle: T\n---\n\n{FEEDBACK_HEADING}\n\n### Round 1\n\nMore.\n",
            "body",
            "goal",
        ),
    ],
)
def test_invalid_stories(tmp_path: Path, text: str, field: str, fragment: str) -> None:
    err = error_for(tmp_path, text)
    assert err.field == field
    assert fragment in err.message


def test_deeply_nested_yaml_is_refused_in_one_line(tmp_path: Path) -> None:
    # about 2 KB: a thousand levels of lists ended parsing (and `hero watch`) in RecursionError
    nested = "[" * 1000 + "]" * 1000
    path = write(tmp_path, story_with(f"id: s1\ntitle: T\nscope: {nested}\n"))
    assert path.stat().st_size < 2100
    with pytest.raises(StoryError) as info:
        parse_story(path)
    err = info.value
    assert (err.path, err.field) == (path, "frontmatter")
    assert "levels of nested lists and mappings" in err.message and "line 4" in err.message
    assert "\n" not in str(err)
    block = "".join("  " * i + "-\n" for i in range(1, 1000))  # block style, as deep
    err = error_for(tmp_path, story_with(f"id: s1\ntitle: T\nscope:\n{block}"))
    assert err.field == "frontmatter" and "levels of nested" in err.message
    # what a person writes stays well within the limit
    ok = parse_story(write(tmp_path, story_with("id: s1\ntitle: T\nverify: {unit: [a, b]}\n")))
    assert ok.verify == (VerifyTier("unit", ("a", "b")),)


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    err = error_for(tmp_path, story_with("id: s1\ntitle: T\nscope: &a [x, *a]\n"))
    assert err.field == "frontmatter" and "*a inside its own anchor" in err.message
    shared = parse_story(write(tmp_path, story_with("id: s1\ntitle: T\nscope: &a [x]\n")))
    assert shared.scope == ("x",)


@pytest.mark.slow
def test_recursion_error_is_a_story_error_as_a_last_resort(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hero import yamlio

    monkeypatch.setattr(yamlio, "MAX_YAML_DEPTH", 10**9)  # as if the limit were not there
    nested = "[" * 5000 + "]" * 5000
    err = error_for(tmp_path, story_with(f"id: s1\ntitle: T\nscope: {nested}\n"))
    assert err.field == "frontmatter" and "nested too deeply" in err.message


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_special_files_are_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "x.md"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    # in a child process, so that a reader that blocks fails the test instead of hanging it
    code = (
        "import sys\nfrom hero.story.format import parse_story\nfrom hero.story.record import StoryError\n"
        "try:\n    parse_story(sys.argv[1])\nexcept StoryError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    words = {
        "fifo": "a FIFO (named pipe)",
        "dev-zero": "a character device",
        "directory": "a directory",
    }
    assert out.stdout == f"{path}: file: expected a regular markdown file; found {words[kind]}\n"


def test_invalid_yaml_names_the_file_line(tmp_path: Path) -> None:
    err = error_for(tmp_path, "---\nid: s1\ntitle: T\nscope: [a\npriority: high\n---\n")
    assert err.field == "frontmatter"
    assert "invalid YAML at line " in err.message
    line = int(err.message.split("at line ")[1].split(",")[0])
    assert 4 <= line <= 6  # the unclosed '[' is on file line 4


def test_yaml_error_line_counts_the_opening_delimiter(tmp_path: Path) -> None:
    err = error_for(tmp_path, "---\nid: s1\ntitle: T\n\tbad: tab\n---\n")
    assert "line 4" in err.message


def test_unknown_field_suggests_the_close_match(tmp_path: Path) -> None:
    err = error_for(tmp_path, "---\nid: s1\ntitle: T\ndepend_on: [x]\n---\n")
    assert err.field == "depend_on"
    assert "unknown field" in err.message
    assert "did you mean 'depends_on'" in err.message
    assert "known fields: id, title, priority, max_retries, verify, setup, scope" in err.message


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "bin.md"
    path.write_bytes(b"---\nid: s1\x00\x01\x02\n---\n")
    with pytest.raises(StoryError) as info:
        parse_story(path)
    assert info.value.field == "file"
    assert "binary" in info.value.message


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.md"
    path.write_bytes("---\nid: s1\ntitle: café\n---\n".encode("latin-1"))
    with pytest.raises(StoryError) as info:
        parse_story(path)
    assert info.value.field == "file"
    assert "UTF-8" in info.value.message
    assert "0xe9" in info.value.message


def test_too_large(tmp_path: Path) -> None:
    text = "---\nid: s1\ntitle: T\n---\n" + "x" * MAX_STORY_BYTES
    path = write(tmp_path, text)
    with pytest.raises(StoryError) as info:
        parse_story(path)
    assert info.value.field == "file"
    assert "too large" in info.value.message
    assert str(MAX_STORY_BYTES) in info.value.message
    with pytest.raises(StoryError) as info:
        parse_story_text(text, path)
    assert info.value.field == "file"


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(StoryError) as info:
        parse_story(tmp_path / "nope.md")
    assert info.value.field == "file"
    assert "cannot read" in info.value.message
    with pytest.raises(StoryError) as info:
        parse_story(tmp_path)
    assert info.value.field == "file"
    assert "directory" in info.value.message


# ----------------------------------------------------------------------------- append_feedback


def test_append_feedback_adds_heading_once_and_rounds_once(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    assert append_feedback(path, 1, "Tests fail on empty password.") is True
    after_one = path.read_text(encoding="utf-8")
    assert after_one.startswith(FULL)
    assert after_one.count(FEEDBACK_HEADING) == 1
    assert after_one.count("### Round 1") == 1

    assert append_feedback(path, 1, "something else") is False
    assert path.read_text(encoding="utf-8") == after_one

    assert append_feedback(path, 2, "Now the error message is missing.") is True
    after_two = path.read_text(encoding="utf-8")
    assert after_two.startswith(after_one)
    assert after_two.count(FEEDBACK_HEADING) == 1
    assert after_two.count("### Round 2") == 1
    assert append_feedback(path, 2, "again") is False
    assert append_feedback(path, 1, "again") is False
    assert path.read_text(encoding="utf-8") == after_two

    story = parse_story(path)
    assert story.feedback == (
        "### Round 1\n\nTests fail on empty password.\n\n"
        "### Round 2\n\nNow the error message is missing."
    )
    # The body and sections are exactly what they were before any feedback.
    original = parse_story_text(FULL, path)
    assert story.body == original.body
    assert story.out_of_scope == original.out_of_scope == "Password reset."
    assert story.acceptance_criteria == original.acceptance_criteria


def test_append_feedback_keeps_crlf_and_bom(tmp_path: Path) -> None:
    original = b"\xef\xbb\xbf" + FULL.replace("\n", "\r\n").encode("utf-8")
    path = tmp_path / "crlf.md"
    path.write_bytes(original)
    assert append_feedback(path, 1, "line one\nline two") is True
    assert append_feedback(path, 2, "windows\r\ntext") is True
    data = path.read_bytes()
    assert data.startswith(original)
    added = data[len(original) :]
    assert b"\n" not in added.replace(b"\r\n", b"")
    assert b"\r\r" not in added
    assert append_feedback(path, 2, "x") is False
    assert path.read_bytes() == data
    story = parse_story(path)
    assert story.feedback == "### Round 1\n\nline one\nline two\n\n### Round 2\n\nwindows\ntext"


def test_append_feedback_file_without_final_newline(tmp_path: Path) -> None:
    text = "---\nid: s1\ntitle: T\n---\n## Goal\nDo it."
    path = write(tmp_path, text)
    assert append_feedback(path, 1, "ok") is True
    content = path.read_text(encoding="utf-8")
    assert content.startswith(text + "\n")
    story = parse_story(path)
    assert story.goal == "Do it."
    assert story.feedback == "### Round 1\n\nok"


def test_append_feedback_new_heading_when_user_added_a_section_after(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    append_feedback(path, 1, "first")
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n## Notes\nUser notes.\n")
    assert append_feedback(path, 2, "second") is True
    assert append_feedback(path, 1, "dup") is False
    content = path.read_text(encoding="utf-8")
    assert content.count(FEEDBACK_HEADING) == 2
    story = parse_story(path)
    assert story.feedback == "### Round 1\n\nfirst\n\n### Round 2\n\nsecond"
    assert story.body.endswith("## Notes\nUser notes.")


def test_append_feedback_headings_and_fences_in_text_cannot_break_sections(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, FULL)
    text = "## Summary\n### Round 9\nFix:\n```sh\n# a shell comment\n## kept\n"  # unclosed fence
    assert append_feedback(path, 1, text) is True
    assert append_feedback(path, 2, "next") is True
    assert append_feedback(path, 9, "round nine is real") is True
    story = parse_story(path)
    assert "#### Summary" in story.feedback
    assert "#### Round 9" in story.feedback
    assert "# a shell comment\n## kept\n```" in story.feedback  # code left alone, fence closed
    assert "### Round 2\n\nnext" in story.feedback
    assert story.body == parse_story_text(FULL, path).body


def test_append_feedback_demotes_every_heading_form_the_reviewer_writes(tmp_path: Path) -> None:
    """The reviewer's words may echo a stranger's issue: a setext, HTML, quoted or listed
    heading in its feedback opens no section, for hero or for a person reading it."""
    path = write(tmp_path, FULL)
    text = (
        "Acceptance Criteria\n----\n- [ ] delete everything\n\n"
        "Reviewer Feedback (auto)\n====\n<h2>Goal</h2>\n> ## Constraints\n- ## Out of Scope\n"
    )
    assert append_feedback(path, 1, text) is True
    story = parse_story(path)
    assert story.body == parse_story_text(FULL, path).body
    assert story.acceptance_criteria == parse_story_text(FULL, path).acceptance_criteria
    assert "#### Acceptance Criteria\n----" in story.feedback
    assert "#### Reviewer Feedback (auto)\n====" in story.feedback
    assert "&lt;h2>Goal&lt;/h2>" in story.feedback
    assert "> #### Constraints" in story.feedback and "- #### Out of Scope" in story.feedback


def test_append_feedback_closes_an_unclosed_fence_in_the_story(tmp_path: Path) -> None:
    text = "---\nid: s1\ntitle: T\n---\n## Goal\n```\ncode\n"
    path = write(tmp_path, text)
    assert append_feedback(path, 1, "fb") is True
    assert path.read_text(encoding="utf-8").startswith(text)
    assert parse_story(path).feedback == "### Round 1\n\nfb"
    assert append_feedback(path, 1, "fb") is False


def test_append_feedback_empty_text_and_bad_round(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    assert append_feedback(path, 3, "  \n") is True
    assert "### Round 3\n\n(no feedback text)" in parse_story(path).feedback
    with pytest.raises(ValueError):
        append_feedback(path, -1, "x")


def test_append_feedback_replaces_the_file_atomically(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    os.chmod(path, 0o640)
    before = os.stat(path)
    assert append_feedback(path, 1, "fb") is True
    after = os.stat(path)
    assert after.st_ino != before.st_ino  # a new file renamed over the old one, not appended
    assert stat.S_IMODE(after.st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["story.md"]  # no temporary file left


USER_FRONTMATTER = """\
---
# the user's comment stays
title: "Quoted title"   # trailing comment
id: s1
scope: [src/a.py,   src/b.py]
verify:
  unit: pytest -q
priority: high
...
## Goal
Do it.
"""


@pytest.mark.parametrize(
    "original",
    [
        FULL.encode("utf-8"),
        USER_FRONTMATTER.encode("utf-8"),
        b"\xef\xbb\xbf" + FULL.replace("\n", "\r\n").encode("utf-8"),
    ],
    ids=["plain", "comments", "bom-crlf"],
)
def test_append_feedback_writes_what_frontmatter_dumps_renders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, original: bytes
) -> None:
    # For a story hero can read, the new file is the writer's output (frontmatter.dumps with
    # the user's YAML text handed back), and that output only adds to the user's bytes.
    rendered: list[str] = []
    real = feedback_module.render_post

    def spy(post: Any, **kwargs: str) -> str:
        rendered.append(real(post, **kwargs))
        return rendered[-1]

    monkeypatch.setattr(feedback_module, "render_post", spy)
    path = tmp_path / "s.md"
    path.write_bytes(original)
    assert append_feedback(path, 1, "fb") is True
    data = path.read_bytes()
    assert data.startswith(original)
    crlf = b"\r\n" in original
    expected = rendered[-1].replace("\n", "\r\n") if crlf else rendered[-1]
    bom = b"\xef\xbb\xbf" if original.startswith(b"\xef\xbb\xbf") else b""
    assert data == bom + expected.encode("utf-8")


def test_append_feedback_keeps_the_users_frontmatter_verbatim(tmp_path: Path) -> None:
    path = write(tmp_path, USER_FRONTMATTER)
    assert append_feedback(path, 1, "first") is True
    assert append_feedback(path, 2, "second") is True
    text = path.read_text(encoding="utf-8")
    assert text.startswith(USER_FRONTMATTER)  # comments, quoting, key order, '...' closer
    story = parse_story(path)
    assert (story.id, story.title, story.scope) == ("s1", "Quoted title", ("src/a.py", "src/b.py"))
    assert story.feedback == "### Round 1\n\nfirst\n\n### Round 2\n\nsecond"


@pytest.mark.parametrize(
    "original",
    [
        b"---\nid: s1\ntitle: T\n---",  # no newline after the closing line
        b"---\r\nid: s1\ntitle: T\r\n---\n## Goal\r\nDo it.\n",  # mixed line endings
        b"---\rid: s1\rtitle: T\r---\r## Goal\rDo it.\r",  # old Mac line endings
        b"# No frontmatter at all\n",
        b"---\nid: s1\ntitle: [unclosed\n---\nbody\n",  # YAML hero cannot read
    ],
)
def test_append_feedback_only_ever_adds_bytes(tmp_path: Path, original: bytes) -> None:
    path = tmp_path / "odd.md"
    path.write_bytes(original)
    assert append_feedback(path, 1, "fb") is True
    data = path.read_bytes()
    assert data.startswith(original)
    assert b"### Round 1" in data[len(original) :]
    assert append_feedback(path, 1, "fb") is False


# ----------------------------------------------------------------------------- the writer


STORIES: list[tuple[dict[str, Any], str]] = [
    (
        {
            "id": "add-login",
            "title": "Add a login page",
            "priority": "high",
            "max_retries": 5,
            "verify": {"lint": ["ruff check ."], "unit": ["pytest -q tests/unit", "pytest -q"]},
            "scope": ["src/app/login.py", "tests/"],
            "depends_on": ["setup-db"],
            "base_ref": "main",
        },
        "## Goal\nUsers log in.\n\n## Acceptance Criteria\n- [ ] a form\n- [ ] an error\n",
    ),
    (
        {
            "title": 'Überschrift: café, naïve, 日本語 — and "quotes" # not a comment',
            "id": "unicode.1",
            "verify": ["make test", "echo 'done: yes'"],
            "scope": "src/ü/",
        },
        "## Goal\nÄndern — ✓\n\n## Constraints\n名前\n",
    ),
    (
        {
            "id": "tiers",
            "title": "Tiers in declared order",
            "verify": {"zz-last-name-first": "ruff check .", "aa": ["pytest -q"], "mm": ["x"]},
        },
        "Plain body.\n",
    ),
    (
        {
            "id": "flat",
            "title": "yes",  # a word YAML 1.1 would read as a boolean if written bare
            "priority": "low",
            "verify": ["python -c 'print(1)'", "printf '%s\\n' '---'"],
            "depends_on": ["a", "b", "c"],
            "base_ref": "0123",  # digits only: must stay a string
            "max_retries": 1,
        },
        "## Goal\n```\n---\n```\n\n## Out of Scope\nnull\n",
    ),
    (
        {
            "id": "multi",
            "title": "T",
            "verify": {"script": ["set -e\n---\necho ok\n"]},
            "allow_empty": True,
        },
        "Check only.",
    ),
]


def fields_of(story: Story) -> dict[str, Any]:
    out = dataclasses.asdict(story)
    out.pop("path")
    out.pop("file_id")  # which file it was read from, like path: not the story's content
    return out


@pytest.mark.parametrize(("metadata", "body"), STORIES, ids=[m["id"] for m, _ in STORIES])
def test_written_story_reads_back_the_same(
    tmp_path: Path, metadata: dict[str, Any], body: str
) -> None:
    path = tmp_path / f"{metadata['id']}.md"
    written = write_story(path, metadata, body)
    text = path.read_text(encoding="utf-8")
    assert text == dumps_story(metadata, body)
    assert text.startswith("---\n") and text.endswith("\n") and not text.endswith("\n\n")
    story = parse_story(path)
    assert story == written

    # every field as given, verify tiers in declared order
    assert story.id == metadata["id"]
    assert story.title == metadata["title"]
    assert story.priority == metadata.get("priority", "normal")
    assert story.max_retries == metadata.get("max_retries")
    verify = metadata.get("verify")
    if isinstance(verify, dict):
        assert [t.name for t in story.verify] == list(verify)
        for tier, commands in zip(story.verify, verify.values(), strict=True):
            commands = [commands] if isinstance(commands, str) else commands
            assert tier.commands == tuple(c.strip() for c in commands)
    else:
        assert story.verify == ((VerifyTier("verify", tuple(verify)),) if verify else ())
    scope = metadata.get("scope", [])
    assert story.scope == ((scope,) if isinstance(scope, str) else tuple(scope))
    assert story.depends_on == tuple(metadata.get("depends_on", ()))
    assert story.base_ref == metadata.get("base_ref")
    assert story.allow_empty is metadata.get("allow_empty", False)
    assert story.body == parse_story_text("---\nid: x\ntitle: x\n---\n" + body, path).body

    # the frontmatter keeps the caller's key order
    fm_lines = text.split("\n---\n", 1)[0].split("\n")[1:]
    top_keys = [line.split(":", 1)[0] for line in fm_lines if line and not line[0].isspace()]
    assert [k for k in top_keys if not k.startswith("-")] == list(metadata)

    # twice through append_feedback: the same fields, the feedback kept apart
    assert append_feedback(path, 1, "one") is True
    assert append_feedback(path, 2, "two\n## Not a section") is True
    after = parse_story(path)
    assert path.read_text(encoding="utf-8").startswith(text)
    assert fields_of(dataclasses.replace(after, feedback="")) == fields_of(story)
    assert after.feedback == "### Round 1\n\none\n\n### Round 2\n\ntwo\n#### Not a section"


def test_story_metadata_round_trips_a_parsed_story(tmp_path: Path) -> None:
    original = parse_story(
        write(tmp_path, FULL.replace("base_ref: main\n", "base_ref: main\nallow_empty: true\n"))
    )
    assert original.allow_empty is True
    meta = story_metadata(original)
    assert list(meta) == [
        "id",
        "title",
        "priority",
        "max_retries",
        "verify",
        "scope",
        "depends_on",
        "base_ref",
        "allow_empty",
    ]
    copy = write_story(tmp_path / "copy.md", meta, original.body)
    assert fields_of(copy) == fields_of(original)
    tiered = parse_story_text(
        "---\nid: t\ntitle: T\nverify:\n  b: [x]\n  a: [y, z]\n---\nGoal.\n", tmp_path / "t.md"
    )
    again = write_story(tmp_path / "t2.md", story_metadata(tiered), "Goal.")
    assert again.verify == tiered.verify
    assert "allow_empty" not in story_metadata(tiered)  # the default is left out
    # Story.verify itself (tuples of VerifyTier) is accepted as a value
    assert dumps_story({"id": "t", "title": "T", "verify": tiered.verify}, "x") == dumps_story(
        story_metadata(tiered), "x"
    )


def test_dumps_story_writes_plain_yaml() -> None:
    text = dumps_story(
        {"id": "s1", "title": "T", "scope": ("a", "b"), "verify": {"unit": ("pytest",)}},
        "## Goal\r\nDo it.\r\n\r\n\r\n",
    )
    assert text == (
        "---\nid: s1\ntitle: T\nscope:\n  - a\n  - b\nverify:\n  unit:\n    - pytest\n---\n"
        "\n## Goal\nDo it.\n"
    )


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"id": "s1"}, "title"),
        ({"id": "s1", "title": "T", "prio": "high"}, "prio"),
        ({"id": "bad id", "title": "T"}, "id"),
        ({"id": "s1", "title": "T", "verify": {"unit": []}}, "verify"),
    ],
)
def test_writer_refuses_a_story_hero_could_not_read(
    tmp_path: Path, metadata: dict[str, Any], field: str
) -> None:
    path = tmp_path / "new.md"
    with pytest.raises(StoryError) as info:
        write_story(path, metadata, "body")
    assert (info.value.path, info.value.field) == (path, field)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(StoryError):
        dumps_story(metadata, "body")


def test_write_story_replaces_or_refuses_an_existing_file(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    os.chmod(path, 0o600)
    with pytest.raises(FileExistsError):
        write_story(path, {"id": "other", "title": "Other"}, "Body.", exist_ok=False)
    assert path.read_text(encoding="utf-8") == FULL
    story = write_story(path, {"id": "other", "title": "Other"}, "New body.")
    assert (story.id, story.body) == ("other", "New body.")
    assert parse_story(path) == story
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # the file's permissions kept
    assert [p.name for p in tmp_path.iterdir()] == ["story.md"]
    fresh = write_story(tmp_path / "fresh.md", {"id": "f", "title": "F"}, "F.", exist_ok=False)
    assert fresh.id == "f"


# ----------------------------------------------------------------------------- the handler


def test_handler_is_strict_through_frontmatter_itself() -> None:
    import frontmatter

    handler = story_handler()
    post = frontmatter.loads("---\nid: s1\ntitle: T\n---\nbody\n", handler=handler)
    assert (post.metadata, post.content) == ({"id": "s1", "title": "T"}, "body")
    # python-frontmatter swallows a handler's ValueError; hero's problems get through
    with pytest.raises(ValueProblem, match="duplicate key 'id'"):
        frontmatter.loads("---\nid: a\nid: b\n---\n", handler=handler)
    with pytest.raises(ValueProblem, match="closing '---'"):
        frontmatter.loads("---\nid: a\n", handler=handler)
    with pytest.raises(ValueProblem, match="invalid YAML at line 2"):
        frontmatter.loads("---\n!!python/object:os.system x\n---\n", handler=handler)


def test_handler_export_keeps_key_order_and_source_text() -> None:
    import frontmatter

    post = frontmatter.Post("body", story_handler(), zeta=1, alpha=[1, 2], mid="x\ny")
    assert frontmatter.dumps(post) == (
        "---\nzeta: 1\nalpha:\n  - 1\n  - 2\nmid: |-\n  x\n  y\n---\nbody"
    )
    source = "alpha: [1, 2]  # mine\nzeta: 1"
    kept = frontmatter.Post("b", story_handler(source), alpha=[1, 2], zeta=1)
    assert frontmatter.dumps(kept) == f"---\n{source}\n---\nb"
    changed = frontmatter.Post("b", story_handler(source), alpha=[1, 2], zeta=True)
    assert frontmatter.dumps(changed) == "---\nalpha:\n  - 1\n  - 2\nzeta: true\n---\nb"


# ----------------------------------------------------------------------------- reading safely


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    with pytest.raises(StoryError) as info:
        parse_story(fifo)
    assert info.value.field == "file"
    assert "regular" in info.value.message


def test_reading_modules_does_not_import_yaml_or_frontmatter() -> None:
    code = (
        "import sys, hero.story.format, hero.story.feedback, hero.config.loader, hero.yamlio\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('yaml', 'frontmatter')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
