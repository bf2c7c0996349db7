"""Follow-up stories: more rounds for a finished story, on its branch (``revises: <id>``).

A follow-up is a story like any other (docs/revise.md): its frontmatter says ``revises:``
the story whose branch it adds rounds to, and its body is the findings its worker
addresses, shown to it as a reviewer's feedback. :func:`write_followup` is the one writer of
such a story, for `hero revise` and for whatever turns outside findings (a review comment,
a failing check) into rounds. Its API is small and kept stable::

    from hero.story.followup import Finding, write_followup

    path = write_followup(
        home,
        "add-login",
        ["Rename the helper", Finding("Off by one here", file="src/app.py", line=12)],
        source={"repo": "o/r", "issue": 7},  # the source: field (optional)
        max_rounds=2,  # the story's max_retries (optional: followup_max_rounds)
    )
    # path == home / "inbox" / "add-login-rev-1.md"

Findings are hostile input (a comment anyone may have written): each is cut to
:data:`MAX_FINDING_CHARS`, its headings demoted so that nothing in it opens a section of the
story file, and a finding's file must be one line. Nothing is checked of the story it
revises here: the run does that (an unknown story, a story still running or without a branch
ends the follow-up in ``error`` with the reason, see hero.run.revision).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hero.errors import UsageError
from hero.names import MAX_ID_CHARS, StoryRef, story_id_problem

#: A finding's text is cut to this many characters.
MAX_FINDING_CHARS = 8000
#: At most this many findings go into one follow-up (the rest are counted, not shown).
MAX_FINDINGS = 100
#: A title made from the first finding is cut to this many characters.
MAX_TITLE_CHARS = 72
#: Ids tried (``<id>-rev-1`` ... ``<id>-rev-N``) before giving up.
MAX_REVISIONS = 1000
#: What ``<id>-rev-<n>`` adds to the id.
REV = "-rev-"


class FollowupError(UsageError):
    """A follow-up that cannot be written as asked (a bad id, no findings); nothing written."""


class FollowupTaken(FollowupError):
    """The id asked for (``story_id``) is held already: by a story file in inbox/ or done/,
    or by a run record; nothing written."""


@dataclass(frozen=True)
class Finding:
    """One thing to address: its text and, when it is about a place, the file and line."""

    text: str
    file: str = ""
    """The path the finding is about, relative to the repository's root; "" for none."""
    line: int | None = None
    """The line of ``file`` (1-based); None for the whole file or none."""

    def render(self) -> str:
        """The finding as one item of the story's list (its text may span lines)."""
        text = _clean_text(self.text)
        where = ""
        if self.file:
            where = f"`{self.file}`" + (f" line {self.line}" if self.line is not None else "")
        return f"{where}: {text}" if where else text


def write_followup(
    home: Path | str,
    of_id: str,
    findings: Iterable[str | Finding],
    *,
    source: Mapping[str, Any] | None = None,
    max_rounds: int | None = None,
    title: str = "",
    story_id: str | None = None,
) -> Path:
    """Write a follow-up of the story ``of_id`` into ``home``'s inbox and return its path.

    - ``findings``: what the follow-up's worker addresses, in order; a string is a finding
      about no place, a :class:`Finding` may carry a file and a line. Empty ones are dropped;
      FollowupError when none is left.
    - ``source``: the story's ``source:`` field (where the findings came from), as that
      field takes it; None: none.
    - ``max_rounds``: the story's ``max_retries``; None: ``followup_max_rounds`` of the home.
    - ``title``: the story's title; "" makes one from ``of_id`` and the first finding.

    The id is ``<of_id>-rev-<n>`` (``of_id`` cut when that would be too long), ``n`` the first
    that no file in ``inbox/`` or ``done/`` and no run record holds. The file is written
    atomically and never over another (hero.story.format.write_story): two writers at once
    get two ids. FollowupError for a bad ``of_id``, ``max_rounds`` or ``source``.

    ``story_id``: this id and no other (one :func:`next_revision_id` gave, recorded by the
    caller before writing, so that a crash between the two can be told from a story never
    written); FollowupTaken when it is held already.
    """
    from hero.story.format import write_story
    from hero.story.record import StoryError

    problem = story_id_problem(of_id) if isinstance(of_id, str) else "expected a string"
    if problem is not None:
        raise FollowupError(f"follow-up of {of_id!r}: the story id: {problem}")
    if max_rounds is not None and (
        isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1
    ):
        raise FollowupError(
            f"follow-up of {of_id}: max_rounds: expected a whole number >= 1; found {max_rounds!r}"
        )
    items = [f for f in (_finding(f) for f in findings) if f.text.strip()]
    if not items:
        raise FollowupError(
            f"follow-up of {of_id}: no findings; give at least one non-empty instruction"
        )
    body = followup_body(of_id, items)
    home = Path(home)
    inbox = home / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    if story_id is not None:
        problem = story_id_problem(story_id) if isinstance(story_id, str) else "not a string"
        if problem is not None:
            raise FollowupError(f"follow-up of {of_id}: story_id {story_id!r}: {problem}")
        ids = [story_id]
    else:
        ids = [revision_id(of_id, n) for n in range(1, MAX_REVISIONS + 1)]
    for candidate in ids:
        if _taken(home, candidate):
            if story_id is not None:
                raise FollowupTaken(f"follow-up of {of_id}: {candidate} is taken")
            continue
        metadata: dict[str, Any] = {
            "id": candidate,
            "title": title.strip() or _title(of_id, items[0]),
            "revises": of_id,
        }
        if max_rounds is not None:
            metadata["max_retries"] = max_rounds
        if source is not None:
            metadata["source"] = dict(source)
        path = inbox / f"{candidate}.md"
        try:
            write_story(path, metadata, body, exist_ok=False)
        except FileExistsError:
            if story_id is not None:
                raise FollowupTaken(f"follow-up of {of_id}: {candidate} is taken") from None
            continue  # another writer took this id meanwhile
        except StoryError as exc:
            raise FollowupError(f"follow-up of {of_id}: {exc.field}: {exc.message}") from None
        return path
    raise FollowupError(
        f"follow-up of {of_id}: ids {revision_id(of_id, 1)} to "
        f"{revision_id(of_id, MAX_REVISIONS)} are all taken"
    )


def next_revision_id(home: Path | str, of_id: str) -> str:
    """The id :func:`write_followup` would give a follow-up of ``of_id`` now: the first
    ``<of_id>-rev-<n>`` no story file or run record holds (another writer may take it
    before it is written: ``write_followup(..., story_id=...)`` then says FollowupTaken)."""
    for n in range(1, MAX_REVISIONS + 1):
        candidate = revision_id(of_id, n)
        if not _taken(Path(home), candidate):
            return candidate
    raise FollowupError(
        f"follow-up of {of_id}: ids {revision_id(of_id, 1)} to "
        f"{revision_id(of_id, MAX_REVISIONS)} are all taken"
    )


def revision_id(of_id: str, n: int) -> str:
    """The id of the ``n``-th follow-up of ``of_id``: ``<of_id>-rev-<n>``, ``of_id`` cut (and
    its cut end tidied) to fit the id's length."""
    suffix = f"{REV}{n}"
    stem = of_id[: MAX_ID_CHARS - len(suffix)].rstrip(".-_")
    return f"{stem}{suffix}"


def followup_body(of_id: str, findings: list[Finding]) -> str:
    """The follow-up's text: a line saying what it is, then the findings as a numbered list;
    headings in them demoted (hero.story.feedback.contain_sections)."""
    from hero.story.feedback import contain_sections

    lines = [
        f"Findings on the work of story {of_id}, to address on its branch (a follow-up: "
        "address every point, keep the rest of the work as it is).",
        "",
    ]
    for n, finding in enumerate(findings[:MAX_FINDINGS], start=1):
        first, *rest = finding.render().split("\n")
        lines.append(f"{n}. {first}")
        lines.extend(f"   {line}" if line.strip() else "" for line in rest)
    if len(findings) > MAX_FINDINGS:
        lines.append("")
        lines.append(f"({len(findings) - MAX_FINDINGS} more findings not shown)")
    return contain_sections("\n".join(lines)) + "\n"


def _finding(item: str | Finding) -> Finding:
    if isinstance(item, Finding):
        finding = item
    elif isinstance(item, str):
        finding = Finding(item)
    else:
        raise FollowupError(f"a finding: expected text or a Finding; found {type(item).__name__}")
    file = finding.file.strip() if isinstance(finding.file, str) else ""
    if not isinstance(finding.file, str) or "\n" in file or "`" in file or len(file) > 1000:
        raise FollowupError(
            f"a finding's file: expected one line of a path without '`'; found {finding.file!r}"
        )
    line = finding.line
    if line is not None and (isinstance(line, bool) or not isinstance(line, int) or line < 1):
        raise FollowupError(f"a finding's line: expected a whole number >= 1; found {line!r}")
    if not isinstance(finding.text, str):
        raise FollowupError(
            f"a finding's text: expected a string; found {type(finding.text).__name__}"
        )
    return Finding(finding.text, file, line if file else None)


def _clean_text(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "").strip()
    if len(text) > MAX_FINDING_CHARS:
        text = text[:MAX_FINDING_CHARS].rstrip() + " ... (cut)"
    return text


def _title(of_id: str, first: Finding) -> str:
    words = " ".join(_clean_text(first.text).split()).lstrip("#> ")
    title = f"Revise {of_id}: {words}"
    if len(title) > MAX_TITLE_CHARS:
        title = title[: MAX_TITLE_CHARS - 3].rstrip() + "..."
    return title


def _taken(home: Path, story_id: str) -> bool:
    """Whether a story file in inbox/ or done/ or a run record already holds ``story_id``."""
    ref = StoryRef("", story_id)
    places = (home / "inbox" / f"{story_id}.md", home / "done" / f"{story_id}.md")
    return any(p.exists() or p.is_symlink() for p in (*places, ref.state_path(home)))
