"""A story whose GitHub issue was closed, or no longer carries the watched label, is
cancelled (``github.cancel_when_closed``, on by default): see :mod:`hero.run.cancel` for what
cancelling does to a queued story and to one being run.

Each sweep of the watcher, after the intake, :func:`cancel_sweep` looks at the inbox's
stories from issues of the watched repository (their ``source`` block) that would run:
no run record yet, or ``queued``, ``running``, ``interrupted``. One whose issue is not among
the open issues with the label is looked up alone (a list can miss an issue for a moment;
the issue itself says why it is gone) and, if it is closed, gone, or lost the label, is
cancelled with that reason.

With ``dry_run``, nothing is cancelled: ``would cancel`` is logged instead.

The report-back checks again right before it opens a pull request or comments
(:func:`issue_gone`): an issue closed while its story was being run gets neither.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hero.config.sections import GitHubSettings
from hero.github.api import GitHub, GitHubError
from hero.github.intake import _frontmatter, issue_number
from hero.names import StoryRef, story_id_problem
from hero.run.cancel import CANCELLABLE, cancel, requested
from hero.state import StateError, load_state


@dataclass(frozen=True)
class _Candidate:
    """An inbox story from an issue of the watched repository that would run."""

    ref: StoryRef
    path: Path
    number: int


def cancel_sweep(
    home: Path,
    gh: GitHub,
    settings: GitHubSettings,
    open_issues: list[dict[str, Any]],
    log: Any,
) -> list[str]:
    """Cancel the stories whose issue is no longer open with the label (see the module's
    text); the keys of those cancelled or asked to stop. Never raises an Exception: a
    failure with one story is logged, and the next sweep tries again."""
    if not settings.cancel_when_closed:
        return []
    still_open = {n for n in map(issue_number, open_issues) if n is not None}
    done: list[str] = []
    for candidate in _candidates(Path(home), settings.repo):
        if candidate.number in still_open:
            continue
        try:
            standing = requested(home, candidate.ref)
            gone = standing or issue_gone(gh, candidate.number, settings)
            if gone is None:
                continue
            reason = standing or (
                f"cancelled: GitHub issue #{candidate.number} of {settings.repo} {gone}"
            )
            if settings.dry_run:
                log.info(
                    "would cancel", story=candidate.ref.key, issue=candidate.number, reason=reason
                )
                continue
            result = cancel(home, candidate.ref, candidate.path, reason)
        except (GitHubError, OSError, StateError) as exc:
            log.warning(
                "cancel failed",
                story=candidate.ref.key,
                issue=candidate.number,
                error=" ".join(str(exc).split()),
                note="tried again on the next sweep",
            )
            continue
        if standing is not None and result.outcome != "cancelled":
            continue  # said when it was asked: the run ends itself
        if result.outcome == "left":
            continue
        done.append(candidate.ref.key)
        log.info(
            "story cancelled" if result.outcome == "cancelled" else "story asked to stop",
            story=candidate.ref.key,
            issue=candidate.number,
            reason=reason,
            moved_to=str(result.moved_to.relative_to(Path(home).resolve()))
            if result.moved_to is not None
            else None,
        )
    return done


def issue_gone(gh: GitHub, number: int, settings: GitHubSettings) -> str | None:
    """Why issue ``number`` no longer asks for its story ("was closed", "no longer has
    the label 'hero'", "no longer exists"), or None when it still does (open, labelled).
    GitHubError when GitHub cannot say."""
    try:
        issue = gh.issue(number)
    except GitHubError as exc:
        if exc.status in (404, 410):  # deleted, or transferred to another repository
            return "no longer exists"
        raise
    if str(issue.get("state") or "") != "open":
        return "was closed"
    if settings.label.lower() not in _labels(issue):
        return f"no longer has the label '{settings.label}'"
    return None


def _labels(issue: Mapping[str, Any]) -> set[str]:
    """The issue's label names, lower-cased: GitHub matches labels without case."""
    names = set()
    for label in issue.get("labels") or []:
        name = label.get("name") if isinstance(label, Mapping) else label
        if isinstance(name, str):
            names.add(name.lower())
    return names


def _candidates(home: Path, repo: str) -> Iterator[_Candidate]:
    """The inbox's stories from issues of ``repo`` that would run, by file name."""
    inbox = home / "inbox"
    try:
        names = sorted(entry.name for entry in os.scandir(inbox) if entry.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if name.startswith(".") or not name.endswith(".md"):
            continue
        path = inbox / name
        meta = _frontmatter(path)
        source = meta.get("source") if meta is not None else None
        if meta is None or not isinstance(source, Mapping):
            continue
        number = source.get("issue")
        if str(source.get("repo") or "").lower() != repo.lower():
            continue
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            continue
        story_id = str(meta.get("id") or "")
        if story_id_problem(story_id) is not None:
            continue
        ref = StoryRef("", story_id)
        try:
            state = load_state(home, ref)
        except StateError:
            continue  # the user's to move aside; the run says so
        if state is None or state.status in CANCELLABLE:
            yield _Candidate(ref, path, number)
