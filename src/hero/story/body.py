"""A story's body: its sections (Goal, Acceptance Criteria, Constraints, Out of Scope, the
reviewer's feedback) found by their headings outside code fences, and the criteria's list items."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

FEEDBACK_KEY = "reviewer feedback auto"
_SECTION_KEYS = {
    "goal": "goal",
    "acceptance criteria": "acceptance_criteria",
    "constraints": "constraints",
    "out of scope": "out_of_scope",
}
_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
ROUND_RE = re.compile(r"^round\s+(\d+)\b", re.IGNORECASE)
_ITEM_RE = re.compile(r"^(\s*)(?:[-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$")
_CHECKBOX_RE = re.compile(r"^\[[ xX]\](?:[ \t]+|$)")


# ----------------------------------------------------------------------------- body


@dataclass(frozen=True)
class Heading:
    index: int  # line index
    level: int
    key: str  # normalized title


def scan_headings(lines: list[str]) -> tuple[list[Heading], str | None]:
    """ATX headings outside fenced code blocks, and the fence still open at the end (if any)."""
    headings: list[Heading] = []
    fence: str | None = None
    for i, line in enumerate(lines):
        fence, is_fence = fence_step(line, fence)
        if is_fence or fence is not None:
            continue
        h = _HEADING_RE.match(line)
        if h:
            headings.append(Heading(i, len(h.group(1)), _heading_key(h.group(2) or "")))
    return headings, fence


def fence_step(line: str, fence: str | None) -> tuple[str | None, bool]:
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


def sections_of(lines: list[str], headings: list[Heading]) -> Iterator[tuple[Heading, int]]:
    """Each level-1/2 heading with the line index where its section ends."""
    tops = [h for h in headings if h.level <= 2]
    for n, h in enumerate(tops):
        end = tops[n + 1].index if n + 1 < len(tops) else len(lines)
        yield h, end


def split_body(body: str) -> dict[str, str]:
    lines = body.split("\n")
    headings, _ = scan_headings(lines)
    found: dict[str, list[str]] = {}
    dropped: list[tuple[int, int]] = []
    for h, end in sections_of(lines, headings):
        if h.key == FEEDBACK_KEY:
            found.setdefault("feedback", []).append(
                clean_section("\n".join(lines[h.index + 1 : end]))
            )
            dropped.append((h.index, end))
        elif h.key in _SECTION_KEYS:
            text = clean_section("\n".join(lines[h.index + 1 : end]))
            found.setdefault(_SECTION_KEYS[h.key], []).append(text)
    kept = [
        line for i, line in enumerate(lines) if not any(start <= i < end for start, end in dropped)
    ]
    out = {name: "\n\n".join(t for t in texts if t) for name, texts in found.items()}
    out["body"] = clean_section("\n".join(kept))
    return out


def clean_section(text: str) -> str:
    """Drop leading blank lines and trailing whitespace."""
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines).rstrip()


def list_items(text: str) -> tuple[str, ...]:
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
