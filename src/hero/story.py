"""Stories: markdown files with YAML frontmatter, parsed and validated.

A story looks like::

    ---
    id: add-login
    title: Add a login page
    priority: high
    verify:
      fast: [ruff check .]
      tests: [pytest -q]
    scope: [src/app/login.py]
    ---
    ## Goal
    ...
    ## Acceptance Criteria
    - [ ] ...

Every problem raises :class:`StoryError`, whose text is one line:
``<path>: <field>: <what was expected>; found <what was there>``.

The harness appends reviewer feedback to the story file under a
``## Reviewer Feedback (auto)`` heading (:func:`append_feedback`); that section is kept out
of :attr:`Story.body` and exposed as :attr:`Story.feedback`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hero.yamlio import describe, quote, strict_loader

ID_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
PRIORITIES = ("low", "normal", "high")
MAX_STORY_BYTES = 1_048_576

MAX_ID_CHARS = 100
FEEDBACK_HEADING = "## Reviewer Feedback (auto)"
KNOWN_FIELDS = (
    "id",
    "title",
    "priority",
    "max_retries",
    "verify",
    "scope",
    "depends_on",
    "base_ref",
)
FLAT_VERIFY_TIER = "verify"

_FEEDBACK_KEY = "reviewer feedback auto"
_SECTION_KEYS = {
    "goal": "goal",
    "acceptance criteria": "acceptance_criteria",
    "constraints": "constraints",
    "out of scope": "out_of_scope",
}
_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_ROUND_RE = re.compile(r"^round\s+(\d+)\b", re.IGNORECASE)
_ITEM_RE = re.compile(r"^(\s*)(?:[-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$")
_CHECKBOX_RE = re.compile(r"^\[[ xX]\](?:[ \t]+|$)")


class StoryError(Exception):
    """A story file that cannot be used; ``str(e) == f"{path}: {field}: {message}"``."""

    def __init__(self, path: Path | str, field: str, message: str) -> None:
        self.path = Path(path)
        self.field = field
        self.message = " ".join(str(message).split())
        super().__init__(f"{self.path}: {self.field}: {self.message}")


@dataclass(frozen=True)
class VerifyTier:
    name: str
    commands: tuple[str, ...]


@dataclass(frozen=True)
class Story:
    path: Path
    id: str
    title: str
    priority: str = "normal"
    max_retries: int | None = None
    verify: tuple[VerifyTier, ...] = ()
    scope: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    base_ref: str | None = None
    body: str = ""
    goal: str = ""
    acceptance_criteria: tuple[str, ...] = ()
    constraints: str = ""
    out_of_scope: str = ""
    feedback: str = ""


# ----------------------------------------------------------------------------- parsing


def parse_story(path: Path) -> Story:
    """Read and validate the story file at ``path``."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_STORY_BYTES:
            raise StoryError(
                path, "file", f"too large: expected at most {MAX_STORY_BYTES} bytes; found {size}"
            )
        data = path.read_bytes()
    except StoryError:
        raise
    except IsADirectoryError:
        raise StoryError(path, "file", "expected a markdown file; found a directory") from None
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise StoryError(path, "file", f"cannot read the file: {reason}") from None
    return parse_story_text(_decode(data, path), path)


def parse_story_text(text: str, path: Path) -> Story:
    """Validate a story given as text; ``path`` is used for errors and kept on the Story."""
    path = Path(path)
    if "\x00" in text:
        raise StoryError(
            path, "file", "expected a UTF-8 markdown file; found binary data (NUL bytes)"
        )
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_STORY_BYTES:
        raise StoryError(
            path, "file", f"too large: expected at most {MAX_STORY_BYTES} bytes; found {size}"
        )
    text = _normalize_newlines(text.removeprefix("\ufeff"))
    if not text.strip():
        raise StoryError(
            path,
            "frontmatter",
            "expected YAML frontmatter between '---' lines; found an empty file",
        )
    split = _split_frontmatter(text)
    if split is None:
        first = text.lstrip("\n").split("\n", 1)[0]
        raise StoryError(
            path,
            "frontmatter",
            "expected the file to start with a '---' line opening the YAML frontmatter; "
            f"found {quote(first)}",
        )
    fm_text, body, closed = split
    if not closed:
        raise StoryError(
            path,
            "frontmatter",
            "expected a closing '---' line after the YAML frontmatter; found none",
        )
    meta = _load_frontmatter(fm_text, path)
    fields = _validate_fields(meta, path)

    sections = _split_body(body)
    ac_text = sections.get("acceptance_criteria", "")
    return Story(
        path=path,
        body=sections["body"],
        goal=sections.get("goal", ""),
        acceptance_criteria=_list_items(ac_text),
        constraints=sections.get("constraints", ""),
        out_of_scope=sections.get("out_of_scope", ""),
        feedback=sections.get("feedback", ""),
        **fields,
    )


def _decode(data: bytes, path: Path) -> str:
    if b"\x00" in data:
        raise StoryError(
            path, "file", "expected a UTF-8 markdown file; found binary data (NUL bytes)"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        raise StoryError(
            path,
            "file",
            f"expected UTF-8 text; found byte 0x{bad} at offset {exc.start} that is not valid UTF-8",
        ) from None


def _normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _split_frontmatter(text: str) -> tuple[str, str, bool] | None:
    """Split LF text into (frontmatter, body, closed). None when there is no opening '---'."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return None
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1 :]), True
    return "\n".join(lines[1:]), "", False


def _load_frontmatter(fm_text: str, path: Path) -> dict[Any, Any]:
    import yaml

    try:
        meta = yaml.load(fm_text, Loader=strict_loader())  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 2}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        raise StoryError(path, "frontmatter", f"invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise StoryError(path, "frontmatter", f"invalid YAML: {exc}") from None
    if meta is None:
        raise StoryError(
            path,
            "frontmatter",
            "expected a mapping of fields (at least id and title); found nothing",
        )
    if not isinstance(meta, dict):
        raise StoryError(
            path,
            "frontmatter",
            f"expected a mapping of fields (id, title, ...); found {describe(meta)}",
        )
    return meta


# ----------------------------------------------------------------------------- fields


def _validate_fields(meta: dict[Any, Any], path: Path) -> dict[str, Any]:
    for key in meta:
        if key not in KNOWN_FIELDS:
            name = str(key)
            hint = difflib.get_close_matches(name, KNOWN_FIELDS, n=1)
            did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise StoryError(
                path, name, f"unknown field{did_you_mean}; known fields: {', '.join(KNOWN_FIELDS)}"
            )

    story_id = _required_str(meta, "id", path)
    if not re.match(ID_RE, story_id):
        raise StoryError(
            path,
            "id",
            "expected letters, digits, '.', '_' or '-' starting with a letter or digit "
            f"(pattern {ID_RE}); found {quote(story_id)}",
        )
    if len(story_id) > MAX_ID_CHARS:
        raise StoryError(
            path, "id", f"expected at most {MAX_ID_CHARS} characters; found {len(story_id)}"
        )
    if ".." in story_id or story_id.endswith((".", ".lock")):
        raise StoryError(
            path,
            "id",
            "expected a name usable as a git branch (no '..', not ending in '.' or '.lock'); "
            f"found {quote(story_id)}",
        )
    title = _required_str(meta, "title", path)

    priority = meta.get("priority")
    if priority is None:
        priority = "normal"
    elif priority not in PRIORITIES:
        raise StoryError(
            path,
            "priority",
            f"expected one of {', '.join(PRIORITIES)}; found {describe(priority)}",
        )

    max_retries = meta.get("max_retries")
    if max_retries is not None and (
        isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 1
    ):
        raise StoryError(
            path, "max_retries", f"expected a whole number >= 1; found {describe(max_retries)}"
        )

    depends_on = _str_list(meta.get("depends_on"), "depends_on", path)
    for dep in depends_on:
        if not re.match(ID_RE, dep):
            raise StoryError(
                path,
                "depends_on",
                f"expected story ids (pattern {ID_RE}); found {quote(dep)}",
            )
        if dep == story_id:
            raise StoryError(
                path,
                "depends_on",
                f"expected ids of other stories; found the story's own id {quote(dep)}",
            )

    base_ref = meta.get("base_ref")
    if base_ref is not None and (not isinstance(base_ref, str) or not base_ref.strip()):
        raise StoryError(
            path,
            "base_ref",
            f"expected a git ref as a string (e.g. main); found {describe(base_ref)}",
        )

    return {
        "id": story_id,
        "title": title,
        "priority": priority,
        "max_retries": max_retries,
        "verify": _verify(meta.get("verify"), path),
        "scope": _str_list(meta.get("scope"), "scope", path),
        "depends_on": depends_on,
        "base_ref": base_ref.strip() if isinstance(base_ref, str) else None,
    }


def _required_str(meta: dict[Any, Any], key: str, path: Path) -> str:
    if key not in meta or meta[key] is None:
        raise StoryError(path, key, "required field is missing; expected a non-empty string")
    value = meta[key]
    if not isinstance(value, str):
        raise StoryError(
            path, key, f"expected a string (quote it in the YAML); found {describe(value)}"
        )
    value = " ".join(value.split())
    if not value:
        raise StoryError(path, key, "expected a non-empty string; found an empty string")
    return value


def _str_list(value: Any, key: str, path: Path) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise StoryError(
            path, key, f"expected a list of strings (or one string); found {describe(value)}"
        )
    out: list[str] = []
    for i, item in enumerate(value, 1):
        if not isinstance(item, str) or not item.strip():
            raise StoryError(
                path, key, f"expected a list of non-empty strings; item {i} is {describe(item)}"
            )
        out.append(item.strip())
    return tuple(out)


def _verify(value: Any, path: Path) -> tuple[VerifyTier, ...]:
    if value is None:
        return ()
    expected = "expected a list of shell commands, or a mapping of tier name -> list of commands"
    if isinstance(value, str | list):
        commands = _commands(value, path, "")
        return (VerifyTier(FLAT_VERIFY_TIER, commands),) if commands else ()
    if not isinstance(value, dict):
        raise StoryError(path, "verify", f"{expected}; found {describe(value)}")
    tiers: list[VerifyTier] = []
    for name, commands in value.items():
        if not isinstance(name, str) or not name.strip():
            raise StoryError(
                path,
                "verify",
                f"expected tier names to be non-empty strings; found {describe(name)}",
            )
        if not isinstance(commands, str | list):
            raise StoryError(
                path,
                "verify",
                f"tier '{name}': expected a command or a list of commands; found {describe(commands)}",
            )
        tier_commands = _commands(commands, path, f"tier '{name}': ")
        if not tier_commands:
            raise StoryError(
                path,
                "verify",
                f"tier '{name}': expected at least one command; found an empty list",
            )
        tiers.append(VerifyTier(name.strip(), tier_commands))
    return tuple(tiers)


def _commands(value: str | list[Any], path: Path, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    out: list[str] = []
    for i, item in enumerate(items, 1):
        if not isinstance(item, str) or not item.strip():
            raise StoryError(
                path,
                "verify",
                f"{where}expected non-empty command strings; command {i} is {describe(item)}",
            )
        out.append(item.strip())
    return tuple(out)


# ----------------------------------------------------------------------------- body


@dataclass(frozen=True)
class _Heading:
    index: int  # line index
    level: int
    key: str  # normalized title


def _scan(lines: list[str]) -> tuple[list[_Heading], str | None]:
    """ATX headings outside fenced code blocks, and the fence still open at the end (if any)."""
    headings: list[_Heading] = []
    fence: str | None = None
    for i, line in enumerate(lines):
        fence, is_fence = _fence_step(line, fence)
        if is_fence or fence is not None:
            continue
        h = _HEADING_RE.match(line)
        if h:
            headings.append(_Heading(i, len(h.group(1)), _heading_key(h.group(2) or "")))
    return headings, fence


def _fence_step(line: str, fence: str | None) -> tuple[str | None, bool]:
    """Track fenced code blocks: (fence open after this line, whether the line is a fence)."""
    m = _FENCE_RE.match(line)
    if m is None:
        return fence, False
    marker, rest = m.group(1), m.group(2)
    if fence is not None:
        closes = marker[0] == fence[0] and len(marker) >= len(fence) and not rest.strip()
        return (None, True) if closes else (fence, False)
    if marker[0] == "`" and "`" in rest:  # not a fence: inline code like ```x```
        return None, False
    return marker, True


def _heading_key(title: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", title.lower()).split())


def _sections(lines: list[str], headings: list[_Heading]) -> Iterator[tuple[_Heading, int]]:
    """Each level-1/2 heading with the line index where its section ends."""
    tops = [h for h in headings if h.level <= 2]
    for n, h in enumerate(tops):
        end = tops[n + 1].index if n + 1 < len(tops) else len(lines)
        yield h, end


def _split_body(body: str) -> dict[str, str]:
    lines = body.split("\n")
    headings, _ = _scan(lines)
    found: dict[str, list[str]] = {}
    dropped: list[tuple[int, int]] = []
    for h, end in _sections(lines, headings):
        if h.key == _FEEDBACK_KEY:
            found.setdefault("feedback", []).append(_clean("\n".join(lines[h.index + 1 : end])))
            dropped.append((h.index, end))
        elif h.key in _SECTION_KEYS:
            text = _clean("\n".join(lines[h.index + 1 : end]))
            found.setdefault(_SECTION_KEYS[h.key], []).append(text)
    kept = [
        line for i, line in enumerate(lines) if not any(start <= i < end for start, end in dropped)
    ]
    out = {name: "\n\n".join(t for t in texts if t) for name, texts in found.items()}
    out["body"] = _clean("\n".join(kept))
    return out


def _clean(text: str) -> str:
    """Drop leading blank lines and trailing whitespace."""
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines).rstrip()


def _list_items(text: str) -> tuple[str, ...]:
    """Items of a markdown list (top level); paragraphs when the section has no list."""
    if not text:
        return ()
    lines = text.split("\n")
    base: int | None = None
    for line in lines:
        m = _ITEM_RE.match(line)
        if m:
            indent = len(m.group(1).expandtabs(4))
            base = indent if base is None else min(base, indent)
    if base is None:
        return tuple(" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip())
    items: list[str] = []
    current: str | None = None
    after_blank = False
    for line in lines:
        m = _ITEM_RE.match(line)
        indent = len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())
        if m and indent == base:
            if current:
                items.append(current)
            current = _CHECKBOX_RE.sub("", (m.group(2) or "").strip()).strip()
        elif not line.strip():
            after_blank = True
            continue
        elif current is not None and after_blank and indent <= base:
            items.append(current)  # a paragraph after the list ends the last item
            current = None
        elif current is not None:
            # a nested list item stays on its own line; a wrapped line joins the item
            sep = "\n" if m else " "
            current = f"{current}{sep}{line.strip()}".strip()
        after_blank = False
    if current:
        items.append(current)
    return tuple(items)


# ----------------------------------------------------------------------------- feedback


def append_feedback(path: Path, round_no: int, text: str) -> bool:
    """Append reviewer feedback for ``round_no`` to the story file.

    Adds the ``## Reviewer Feedback (auto)`` heading when the file's last section is not
    already that heading, then ``### Round N`` and ``text``. Only appends: the user's text is
    never rewritten. The file's line ending style is kept. Returns False (and writes nothing)
    when ``### Round N`` is already under a feedback heading.

    Headings of level 1-3 inside ``text`` are demoted to level 4 (outside code fences) and an
    unclosed code fence is closed, so the appended feedback cannot break the file's sections.
    """
    path = Path(path)
    if isinstance(round_no, bool) or not isinstance(round_no, int) or round_no < 0:
        raise ValueError(f"round_no must be a whole number >= 0, got {round_no!r}")
    raw = path.read_bytes()
    content = _decode(raw, path)
    crlf = "\r\n" in content
    normalized = _normalize_newlines(content)
    split = _split_frontmatter(normalized)
    body = split[1] if split is not None and split[2] else normalized
    lines = body.split("\n")
    headings, open_fence = _scan(lines)

    rounds: set[int] = set()
    last_top: _Heading | None = None
    for h, end in _sections(lines, headings):
        last_top = h
        if h.key != _FEEDBACK_KEY:
            continue
        for sub in headings:
            if h.index < sub.index < end and sub.level == 3:
                m = _ROUND_RE.match(sub.key)
                if m:
                    rounds.add(int(m.group(1)))
    if round_no in rounds:
        return False

    parts: list[str] = []
    if normalized and not normalized.endswith("\n"):
        parts.append("\n")
    if open_fence is not None:
        parts.append(open_fence + "\n")
    if last_top is None or last_top.key != _FEEDBACK_KEY or open_fence is not None:
        parts.append(("\n" if normalized else "") + FEEDBACK_HEADING + "\n")
    parts.append(f"\n### Round {round_no}\n\n{_sanitize_feedback(text)}\n")
    addition = "".join(parts)
    if crlf:
        addition = addition.replace("\n", "\r\n")
    with path.open("ab") as fh:
        fh.write(addition.encode("utf-8"))
    return True


def _sanitize_feedback(text: str) -> str:
    text = _normalize_newlines(str(text)).strip("\n").rstrip()
    if not text.strip():
        return "(no feedback text)"
    lines = text.split("\n")
    out: list[str] = []
    fence: str | None = None
    for line in lines:
        fence, is_fence = _fence_step(line, fence)
        if not is_fence and fence is None:
            h = re.match(r"^( {0,3})(#{1,3})(?=[ \t]|$)", line)
            if h:
                line = h.group(1) + "####" + line[h.end() :]
        out.append(line)
    if fence is not None:
        out.append(fence)
    return "\n".join(out)
