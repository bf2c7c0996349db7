"""A fact of a repository's memory: what it says, its kind, where it came from, how far it
is trusted.

A fact's text is hostile input: a worker can steer what a reviewer writes, and a story from
a GitHub issue was written by a stranger. So every text goes through :func:`clean_text`
before a :class:`Fact` holds it: secrets out (the caller's :class:`~hero.redact.Redactor`,
and the shapes of common tokens), one paragraph, no control characters, no Markdown
heading, fence, list marker or HTML that could give a prompt a structure of its own, and
bounded. A fact is one line of plain text wherever it goes: the store's file, a prompt,
``hero memory export``.

The rules of trust live here, in :func:`merge`: a fact learned again keeps one entry; a
story a person wrote confirms a fact first learned from an outside story; nothing makes an
outside fact always-on.
"""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
from dataclasses import dataclass, replace
from enum import StrEnum

from hero.errors import HeroError
from hero.redact import REDACTED, Redactor

#: The longest text a fact keeps, in characters (a longer one is cut at a word, with "…").
MAX_TEXT_CHARS = 500
#: Characters of the id: a prefix of the SHA-256 of the normalized kind and text.
ID_CHARS = 12

#: Shapes of common credentials, redacted even when the redactor does not know the value
#: (a token pasted into a reviewer's comment or a command's output that is no key of hero's).
_TOKEN_SHAPES = re.compile(
    r"\b(?:"
    r"gh[pousr]_[A-Za-z0-9]{20,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|sk-[A-Za-z0-9_-]{16,}"  # OpenAI-style API keys
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|AKIA[0-9A-Z]{16}"  # AWS access key ids
    r"|glpat-[A-Za-z0-9_-]{16,}"  # GitLab
    r")"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    re.DOTALL,
)
#: ``password=...``, ``token: ...``, ``API_KEY="..."``: the value after a secret's name.
_NAMED_SECRET = re.compile(
    r"(?i)\b([A-Z0-9_]*(?:password|passwd|secret|token|api[_-]?key)[A-Z0-9_]*)"
    r"(\s*[:=]\s*)(['\"]?)(?!\d+\b)[^\s'\"]{4,}\3"  # not a number: max_tokens=4096
)
_FENCE = re.compile(r"`{3,}|~{3,}")
#: What a line may start with that Markdown reads as structure: a heading, a quote, a list
#: item, a rule, a table row.
_LINE_START = re.compile(r"^\s*(?:#+|>+|[-*+](?=\s)|\d+[.)](?=\s)|[-*_=]{3,}|\|)\s*")


class Kind(StrEnum):
    """What a fact is about."""

    CONVENTION = "convention"  # how this repository wants things done (naming, style)
    COMMAND = "command"  # how to run something (the tests, with what environment)
    FAILURE = "failure"  # an approach that failed, and why
    DECISION = "decision"  # a choice made, to keep
    KNOWLEDGE = "knowledge"  # anything else worth knowing about the repository


class Trust(StrEnum):
    """How far a fact is trusted: by who wrote the story it was learned from."""

    USER = "user"  # a story a person of this home wrote (or a person's own edit)
    OUTSIDE = "outside"  # a story from a GitHub issue: data, never an instruction


class Role(StrEnum):
    """Who a fact was learned from."""

    REVIEWER = "reviewer"
    VERIFIER = "verifier"
    WORKER = "worker"
    MEMORY = "memory"  # the optional `memory:` role's distillation
    PERSON = "person"  # written by hand in the store's file


class FactError(HeroError):
    """A fact that cannot be made: an empty text, an unknown kind, an always-on outside fact."""


@dataclass(frozen=True)
class Source:
    """Where a fact came from: the story (its key, ``plan/id`` or ``id``), the round (None:
    not a round's, e.g. a person's edit) and the role."""

    story: str = ""
    round: int | None = None
    role: Role = Role.PERSON

    def label(self) -> str:
        """``add-login round 2 reviewer``; ``person`` for a hand-written fact."""
        parts = [self.story] if self.story else []
        if self.round is not None:
            parts.append(f"round {self.round}")
        parts.append(self.role.value)
        return " ".join(parts)


@dataclass(frozen=True)
class Fact:
    """One thing learned about a repository. Make one with :func:`new_fact` (which cleans
    the text and computes the id); the store reads them back the same way."""

    id: str
    kind: Kind
    text: str
    source: Source
    at: float
    """When it was last learned (epoch seconds): a fact learned again is fresher."""
    trust: Trust = Trust.USER
    always_on: bool = False
    """An always-on convention: shown in every prompt, whatever the story. Only a
    convention a person's story taught (trust user) may be one."""
    seen: int = 1
    """How many times it was learned: a fact seen often is kept before one seen once."""

    def __post_init__(self) -> None:
        if self.always_on and (self.trust is not Trust.USER or self.kind is not Kind.CONVENTION):
            raise FactError(
                f"fact {self.id}: only a convention of trust user may be always-on; "
                f"found a {self.kind.value} of trust {self.trust.value}"
            )


def fact_id(kind: Kind, text: str) -> str:
    """The id of a fact: the same for the same kind and text, however spaced or cased."""
    normal = " ".join(text.casefold().split())
    digest = hashlib.sha256(f"{kind.value}\0{normal}".encode()).hexdigest()
    return digest[:ID_CHARS]


def new_fact(
    kind: Kind | str,
    text: str,
    source: Source,
    *,
    redactor: Redactor,
    trust: Trust = Trust.USER,
    always_on: bool = False,
    at: float | None = None,
    seen: int = 1,
) -> Fact:
    """A fact with its text cleaned (:func:`clean_text`, secrets out first) and its id.

    An outside fact asked to be always-on is made an ordinary one: being always-on takes a
    person's confirmation (:func:`merge`), never the extraction's word. FactError when the
    kind is unknown or nothing is left of the text."""
    kind = parse_kind(kind)
    cleaned = clean_text(text, redactor)
    if not cleaned:
        raise FactError(f"a {kind.value} fact needs a text; found nothing (after cleaning)")
    if trust is Trust.OUTSIDE or kind is not Kind.CONVENTION:
        always_on = False
    return Fact(
        id=fact_id(kind, cleaned),
        kind=kind,
        text=cleaned,
        source=source,
        at=when(at),
        trust=trust,
        always_on=always_on,
        seen=max(1, seen),
    )


#: The latest time a fact may carry (the end of year 9999): its file shows it as a date.
_LATEST_AT = 253402300799.0


def when(at: float | None) -> float:
    """``at`` as a fact keeps it: now when not given, within 1970 .. 9999 (a caller's
    nonsense clamped, so the file can always show it)."""
    if at is None or at != at:  # None or NaN
        return time.time()
    return min(max(float(at), 0.0), _LATEST_AT)


def parse_kind(value: Kind | str) -> Kind:
    try:
        return Kind(value)
    except ValueError:
        known = ", ".join(k.value for k in Kind)
        raise FactError(f"unknown kind {value!r}; expected one of {known}") from None


def merge(old: Fact, new: Fact) -> Fact:
    """The one fact two learnings of the same content (same id) make.

    It is as fresh as the newer, seen as often as both, and keeps the newer source. A story
    a person wrote confirms an outside fact (trust becomes user); an outside story never
    lowers a person's fact. Always-on stays only with trust user: a confirmation keeps what
    a person asked for, an outside learning never adds it."""
    if old.id != new.id:
        raise ValueError(f"merge of two different facts: {old.id} and {new.id}")
    trust = Trust.USER if Trust.USER in (old.trust, new.trust) else Trust.OUTSIDE
    newer = new if new.at >= old.at else old
    asked = old.always_on or (new.always_on and new.trust is Trust.USER)
    return replace(
        newer,
        trust=trust,
        always_on=asked and trust is Trust.USER and old.kind is Kind.CONVENTION,
        seen=old.seen + new.seen,
        at=max(old.at, new.at),
    )


def clean_text(text: str, redactor: Redactor) -> str:
    """``text`` as a fact holds it: secrets redacted, then one line of plain text.

    Redaction comes first, on the text as given, so a secret broken over lines is still
    found. Then: control and format characters out (a zero-width space cannot hide a
    heading), every line break a space, Markdown structure at the start of each line out,
    fences and HTML made inert (``<`` and ``>`` become ``‹`` and ``›``), and the whole cut
    at :data:`MAX_TEXT_CHARS`."""
    text = redact_secrets(text, redactor)
    chars = []
    for ch in text:
        if ch in "\n\r\t\v\f\u2028\u2029\x85":
            chars.append("\n")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs", "Cn"):
            continue
        else:
            chars.append(ch)
    lines = [_LINE_START.sub("", line) for line in "".join(chars).split("\n")]
    flat = " ".join(" ".join(line.split()) for line in lines if line.strip())
    flat = " ".join(_FENCE.sub(" ", flat).split()).replace("<", "‹").replace(">", "›")
    # a heading or list marker can come back once the one before it is gone (``# # x``)
    while (shorter := _LINE_START.sub("", flat, count=1).strip()) != flat:
        flat = shorter
    if len(flat) > MAX_TEXT_CHARS:
        cut = flat[: MAX_TEXT_CHARS - 1]
        space = cut.rfind(" ")
        flat = (cut[:space] if space > MAX_TEXT_CHARS // 2 else cut).rstrip() + "…"
    return flat


def redact_secrets(text: str, redactor: Redactor) -> str:
    """``text`` without the secrets the redactor knows, nor values that look like one."""
    text = redactor.redact(text)
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    return _NAMED_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
