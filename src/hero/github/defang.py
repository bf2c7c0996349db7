"""What GitHub acts on in text, made inert: closing keywords and @mentions.

In a pull request's body and in the messages of the commits it brings, GitHub acts on two
things: a closing keyword with an issue reference (``Fixes #22``, ``closes: acme/app#22``,
``Resolves https://github.com/acme/app/issues/22``; also ``GH-22``) closes that issue when
the pull request merges, and an @mention notifies a person or a team. Text a model wrote,
or a stranger's issue, must do neither: :func:`defang` puts each such reference in a code
span, and a zero-width space (U+200B) before its number or after the ``@``. The code span
is what a reader of the rendered markdown sees (and markdown does not link code); the
zero-width space is what keeps plain text inert, where GitHub shows commit messages and
links references without markdown. A reference made inert is not matched again, so
defanging twice changes nothing.

A story's own issue may stay live (``own``): a commit of story ``gh-21`` that says
``Closes #21`` closes the issue the pull request answers, which the pull request's body
says too. Another repository's ``#21`` is another issue.

Used for the pull request's body (``hero.github.report``), for the commits of stories from
issues (:func:`commit_message_rule`, which ``hero.git.storyrepo`` applies as it brings
their commits back) and, before a push, to check the commits pushed (:func:`live_references`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hero.git.rewrite import MessageRule

#: GitHub's closing keywords, an optional colon, then an issue reference.
CLOSING_RE = re.compile(
    r"\b((?:close|closes|closed|fix|fixes|fixed|resolve|resolves|resolved)\s*:?\s+)"
    r"([\w.-]+/[\w.-]+#\d+|#\d+|GH-\d+|https?://\S+/(?:issues|pull)/\d+)",
    re.IGNORECASE,
)
#: An @mention of a user (``@boss``) or a team (``@acme/devs``): an ``@`` that does not
#: follow a word character (``a@b.c`` is an e-mail address), then a login.
MENTION_RE = re.compile(r"(?<!\w)@([A-Za-z0-9][A-Za-z0-9-]*(?:/[A-Za-z0-9_.-]+)?)")
#: What goes between a reference's sigil and its name: invisible, and no reference.
BREAK = "\u200b"

_URL_RE = re.compile(r"^https?://[^/\s]+/([^/\s]+/[^/\s]+)/issues/(\d+)$", re.IGNORECASE)
_NUMBER_RE = re.compile(r"(\d+)$")  # every reference ends in its number
_SHORT_RE = re.compile(r"^(?:([\w.-]+/[\w.-]+)#|#|GH-)(\d+)$", re.IGNORECASE)


@dataclass(frozen=True)
class OwnIssue:
    """The issue a text may close: ``repo`` (``owner/name``) and its number."""

    repo: str
    number: int

    def named_by(self, ref: str) -> bool:
        """``ref`` (``#21``, ``GH-21``, ``acme/app#21``, an issue URL) is this issue."""
        url = _URL_RE.match(ref)
        found = url or _SHORT_RE.match(ref)
        if found is None:
            return False
        repo, number = found.group(1), found.group(2)
        return int(number) == self.number and (repo is None or repo.lower() == self.repo.lower())


def defang(text: str, own: OwnIssue | None = None) -> str:
    """``text`` with every closing keyword's reference (but ``own``'s) and every @mention
    made inert (see the module's text)."""

    def closing(m: re.Match[str]) -> str:
        ref = m.group(2)
        if own is not None and own.named_by(ref):
            return m.group(0)
        inert = _NUMBER_RE.sub(BREAK + r"\1", ref)
        return f"{m.group(1)}`{inert}`"

    text = CLOSING_RE.sub(closing, text)
    return MENTION_RE.sub(lambda m: f"`@{BREAK}{m.group(1)}`", text)


def live_references(text: str, own: OwnIssue | None = None) -> list[str]:
    """What in ``text`` GitHub would act on: each closing keyword with a reference other
    than ``own`` (``Fixes #22``), each @mention (``@boss``)."""
    found = [
        " ".join(m.group(0).split())
        for m in CLOSING_RE.finditer(text)
        if own is None or not own.named_by(m.group(2))
    ]
    return found + [m.group(0) for m in MENTION_RE.finditer(text)]


def own_issue(source: Mapping[str, Any] | None) -> OwnIssue | None:
    """The issue a story's ``source`` block names (its repository and number), or None
    for a story not taken from an issue."""
    if not isinstance(source, Mapping):
        return None
    repo, number = source.get("repo"), source.get("issue")
    if not isinstance(repo, str) or not repo or isinstance(number, bool):
        return None
    if not isinstance(number, int) or number < 1:
        return None
    return OwnIssue(repo, number)


def commit_message_rule(source: Mapping[str, Any] | None) -> MessageRule | None:
    """For a story taken from an issue (its ``source``): its commits' messages close no
    issue but its own and mention no one. None for any other story."""
    own = own_issue(source)
    if own is None:
        return None
    return MessageRule(
        edit=lambda message: defang(message, own),
        why=(
            f"a story from issue #{own.number} of {own.repo} may close only that issue and "
            "mention no one, so hero put other issues' closing references and @mentions in "
            "code spans, where GitHub does not act on them"
        ),
    )
