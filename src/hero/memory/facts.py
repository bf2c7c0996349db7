"""A fact of a repository's memory: what it says, its kind, where it came from, how far it
is trusted.

A fact's text is hostile input: a worker can steer what a reviewer writes, and a story from
a GitHub issue was written by a stranger. So every text goes through :func:`clean_text`
before a :class:`Fact` holds it: secrets out (the caller's :class:`~hero.redact.Redactor`,
and the shapes of common tokens), one paragraph, no control characters, no Markdown
heading, fence, list marker or HTML that could give a prompt a structure of its own, and
bounded. A fact is one line of plain text wherever it goes: the store's file, a prompt,
``hero memory export``.

Trust is by the author of the *text*, not of the story (:class:`Trust`): only what a person
wrote or confirmed (role ``person``) is ``user``; what a model or a command wrote (a
reviewer's comment, a check's output, the memory role's distillation) is ``model`` at most,
and what came from a GitHub issue's story is ``outside``. :func:`vouched` holds that rule
wherever a fact is made, so a store an older hero wrote (which trusted a fact by its story)
reads back with its machine-written facts lowered.

A fact not a person's is told to a story only with evidence of its value
(:class:`Evidence`: seen in two stories, or a reviewer's request the next round satisfied),
and never when it reads as an instruction to run or fetch something
(:func:`instruction_like`, applied where model and command text is learned).

The rules of merging live here, in :func:`merge`: a fact learned again keeps one entry;
learned by a second story it has evidence; no learning raises a fact to ``user``; nothing
but a person's fact is always-on.
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
    """How far a fact is trusted: by who wrote its text.

    Ordered from most to least trusted (:data:`TRUST_RANK`)."""

    USER = "user"  # a person wrote or confirmed it (hero memory add / edit / promote)
    MODEL = "model"  # a model or a command wrote it: reviewer, check output, memory role
    OUTSIDE = "outside"  # learned from a story made from a GitHub issue (a stranger's)


#: Higher is more trusted: a merge keeps the higher of two learnings' trust.
TRUST_RANK = {Trust.OUTSIDE: 0, Trust.MODEL: 1, Trust.USER: 2}


class Evidence(StrEnum):
    """Why a fact not a person's is worth telling a later story: without one, it is kept
    (a second story may give it one) but never recalled."""

    STORIES = "stories"  # learned by two different stories
    SATISFIED = "satisfied"  # a reviewer's request that the round after it satisfied


class Role(StrEnum):
    """Who a fact was learned from."""

    REVIEWER = "reviewer"
    VERIFIER = "verifier"
    WORKER = "worker"
    MEMORY = "memory"  # the optional `memory:` role's distillation
    PERSON = "person"  # written or confirmed by a person (hero memory add / edit / promote)


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
        """``add-login round 2 reviewer``; ``person`` for a hand-written fact, ``person
        (promoted from add-login round 2)`` for one a person confirmed."""
        parts = [self.story] if self.story else []
        if self.round is not None:
            parts.append(f"round {self.round}")
        if self.role is Role.PERSON:
            return f"person (promoted from {' '.join(parts)})" if parts else "person"
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
    evidence: Evidence | None = None
    """Why a fact not a person's may be told to a story (None: it is not told)."""

    @property
    def recallable(self) -> bool:
        """Whether a story may be told it: a person's fact, or one with evidence."""
        return self.trust is Trust.USER or self.evidence is not None

    def __post_init__(self) -> None:
        if self.trust is Trust.USER and self.source.role is not Role.PERSON:
            raise FactError(
                f"fact {self.id}: only a person's fact (role person) may be of trust user; "
                f"found role {self.source.role.value}"
            )
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
    evidence: Evidence | None = None,
) -> Fact:
    """A fact with its text cleaned (:func:`clean_text`, secrets out first) and its id.

    Its trust is what its source may vouch for (:func:`vouched`: ``user`` only for a
    person's). A fact not a person's asked to be always-on is made an ordinary one: being
    always-on takes a person's word, never the extraction's. FactError when the kind is
    unknown or nothing is left of the text."""
    kind = parse_kind(kind)
    cleaned = clean_text(text, redactor)
    if not cleaned:
        raise FactError(f"a {kind.value} fact needs a text; found nothing (after cleaning)")
    trust = vouched(trust, source.role)
    if trust is not Trust.USER or kind is not Kind.CONVENTION:
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
        evidence=None if trust is Trust.USER else evidence,
    )


def vouched(trust: Trust, role: Role) -> Trust:
    """The trust a fact of ``role`` may have: ``user`` only for a person's (role person);
    a machine-written text said to be ``user`` (as an older hero recorded what a person's
    story taught) is ``model``."""
    if trust is Trust.USER and role is not Role.PERSON:
        return Trust.MODEL
    return trust


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

    It is as fresh as the newer and seen as often as both. Its trust is the higher of the
    two, with that one's source (of two equally trusted, the newer's): a person's fact
    learned again by a story stays the person's; a story's learning never raises a fact to
    ``user``; an outside story never lowers one. Always-on stays only with a person's fact.
    Evidence is kept, and two different stories' learnings are evidence
    (:attr:`Evidence.STORIES`): a story retried, or learning the same thing twice, is not."""
    if old.id != new.id:
        raise ValueError(f"merge of two different facts: {old.id} and {new.id}")
    newer, older = (new, old) if new.at >= old.at else (old, new)
    kept = newer if TRUST_RANK[newer.trust] >= TRUST_RANK[older.trust] else older
    evidence = old.evidence or new.evidence
    stories = (old.source.story, new.source.story)
    if evidence is None and all(stories) and stories[0] != stories[1]:
        evidence = Evidence.STORIES
    user = kept.trust is Trust.USER
    asked = any(f.always_on and f.trust is Trust.USER for f in (old, new))
    return replace(
        kept,
        always_on=asked and user and old.kind is Kind.CONVENTION,
        seen=old.seen + new.seen,
        at=max(old.at, new.at),
        evidence=None if user else evidence,
    )


#: Text that reads as an instruction to run a command or fetch something: a URL, a program
#: that fetches, a pipe into a shell, a command substitution, ``sudo``, an imperative "run
#: ..." / "install ..." at the start of a sentence, "before any change ...". Model and
#: command text matching it is never learned (a check's output or a steered reviewer could
#: otherwise plant ``curl ... | sh`` in every later prompt). Broad on purpose: a lost fact
#: costs little, a planted instruction a lot.
_INSTRUCTION = re.compile(
    r"(?i)"
    r"\b[a-z][a-z0-9+.-]{1,15}://"  # a URL: http://, ftp://, git+ssh://
    r"|\bwww\.[a-z0-9-]+\."
    r"|\b(?:curl|wget|invoke-webrequest|invoke-expression|iwr|iex|nc|netcat|scp|rsync)\b"
    r"|\|\s*(?:sudo\s+)?(?:ba|z|da|k|c|tc|fi)?sh\b"  # ... | sh, | sudo bash
    r"|\|\s*(?:python\d?|perl|ruby|node)\b"
    r"|\$\(|\beval\s+[\"'$`]|\bsudo\b|\bchmod\s+\+x\b"  # not "must not use eval()"
    r"|(?:^|[.!?:;]\s*|\b(?:then|first|always|please|now|you\s+must|you\s+should)\s+)"
    r"(?:run|execute|exec|install|download|pip|npm|apt|apt-get|bash|sh)\b"
    r"|\b(?:before|prior\s+to)\s+(?:any|every|each|all|making|you)\b"
)


def instruction_like(text: str) -> bool:
    """Whether ``text`` reads as an instruction to run a command or fetch something (see
    :data:`_INSTRUCTION`): what hero never learns from a model's or a command's text."""
    return bool(_INSTRUCTION.search(" ".join(text.split())))


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
