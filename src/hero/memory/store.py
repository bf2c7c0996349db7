"""The memory of one target repository: a Markdown file under the hero home a person can read
and edit.

``<home>/memory/<repo-key>.md`` (:func:`memory_path`) holds the repository's facts and a
recap of its last stories::

    # hero memory: app

    What hero learned about the repository /src/app. ...

    ## Facts

    - [command] Run the tests with APP_ENV=test pytest -q. <!-- id=1a2b3c4d5e6f trust=user seen=2 at=2026-12-02T01:55:00Z story=add-login round=2 role=verifier -->
    - [convention, always-on] Test functions are named test_<unit>_<behaviour>.

    ## Recent stories

    - add-login: passed after 2 rounds <!-- story=add-login status=passed rounds=2 at=2026-12-02T01:55:00Z -->
      - changed: src/app/login.py, tests/test_login.py
      - failed: pytest without APP_ENV

    ## Forgotten

    - 9f8e7d6c5b4a

A fact is one line: ``- [kind] text``, ``[convention, always-on]`` for an always-on one, and
hero's record of it in the comment after it. A line without the comment is a fact a person
wrote (trust user, source person). Trust ``user`` holds only with role ``person``: a file an
older hero wrote, which trusted a fact by its story, reads back with every other
``trust=user`` as ``model`` and such a fact no longer always-on (:func:`hero.memory.facts.vouched`). A person may change a text or a kind, delete a line or
add one; the id follows the content. A fact a person forgot (``hero memory forget``, or
its line deleted in ``hero memory edit``) leaves its id under "Forgotten", and hero does
not learn it again; deleting the id there lets it. Everything read goes through the same cleaning as a
fact hero learned (:func:`hero.memory.facts.clean_text`), secrets included.

Every write is a read, a merge and an atomic write under the memory's lock
(:func:`hero.locks.memory_lock`). A file hero cannot read is never written over: the error
names the file and the line, and nothing is lost. The file is in the home, which a worker's
sandbox hides (hero.sandbox.bwrap), so no worker writes it directly; what a worker can steer
(a reviewer's comment) arrives as text, and is cleaned.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from hero.errors import UsageError
from hero.fsio import atomic_write
from hero.locks import memory_lock
from hero.memory.facts import (
    ID_CHARS,
    TRUST_RANK,
    Evidence,
    Fact,
    FactError,
    Kind,
    Role,
    Source,
    Trust,
    clean_text,
    merge,
    new_fact,
    vouched,
    when,
)
from hero.redact import Redactor
from hero.yamlio import ValueProblem, decode_text, read_file

#: The folder of the home that holds every repository's memory.
MEMORY_DIR = "memory"
#: The largest memory file hero reads (a person's edit may exceed max_bytes until the next
#: write trims it; anything beyond this is refused, not read).
MAX_FILE_BYTES = 4 << 20
FACTS_HEADING = "## Facts"
RECAPS_HEADING = "## Recent stories"
FORGOTTEN_HEADING = "## Forgotten"
#: The ids of forgotten facts a file keeps (the oldest go first): a fact forgotten long ago
#: may be learned again.
MAX_FORGOTTEN = 200
ALWAYS_ON = "always-on"
#: The longest text of a recap's changed / failed line.
MAX_RECAP_CHARS = 300

_FACT_LINE = re.compile(r"^- \[(?P<tags>[^\]]*)\]\s*(?P<text>.*?)\s*(?:<!--(?P<meta>.*?)-->)?\s*$")
_RECAP_LINE = re.compile(r"^- (?P<text>.*?)\s*(?:<!--(?P<meta>.*?)-->)?\s*$")
_RECAP_DETAIL = re.compile(r"^\s+- (?P<key>changed|failed):\s*(?P<text>.*?)\s*$")
_FORGOTTEN_LINE = re.compile(rf"^- (?P<id>[0-9a-f]{{{ID_CHARS}}})\s*$")
_KEY_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_META_KEYS = {
    "facts": ("id", "trust", "evidence", "seen", "at", "story", "round", "role"),
    "recaps": ("story", "status", "rounds", "at"),
}


class MemoryFileError(UsageError):
    """A memory file hero cannot read: names the file and the line; nothing was written."""

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        self.path, self.line, self.message = str(path), line, message
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


class UnknownFact(UsageError):
    """No fact, or more than one, has the id or prefix asked for."""


@dataclass(frozen=True)
class Bounds:
    """How much one repository's memory keeps (config: memory_max_facts, memory_max_bytes,
    memory_recap_stories)."""

    max_facts: int = 200
    max_bytes: int = 64 * 1024
    recap_stories: int = 5


@dataclass(frozen=True)
class Recap:
    """One story's end on the repository, in a few words: what changed, what failed."""

    story: str
    status: str
    rounds: int
    changed: str = ""
    failed: str = ""
    at: float = 0.0


@dataclass(frozen=True)
class Memory:
    """What a memory file holds: its facts (in file order), its recaps (oldest first) and
    the ids of the facts a person forgot (oldest first), which hero does not learn again."""

    facts: tuple[Fact, ...] = ()
    recaps: tuple[Recap, ...] = ()
    forgotten: tuple[str, ...] = ()
    dropped: tuple[Fact, ...] = field(default=(), compare=False)
    """The facts the last bounding dropped (for the caller to log)."""


def repo_key(target_repo: Path) -> str:
    """The name of a repository's memory: its folder's name and a hash of its resolved path
    (two repositories called ``app`` keep apart; the same one reached through a symlink is
    the same memory)."""
    resolved = Path(target_repo).expanduser().resolve()
    name = _KEY_CHARS.sub("-", resolved.name).strip(".-")[:40] or "repo"
    digest = hashlib.sha256(str(resolved).encode("utf-8", "surrogateescape")).hexdigest()
    return f"{name}-{digest[:10]}"


def safe_word(text: str) -> str:
    """``text`` as one word of hero's comments: a story key or a status (``plan/id``)."""
    return re.sub(r"[^A-Za-z0-9._/-]+", "-", text).strip("-")[:120] or "-"


def memory_path(home: Path, target_repo: Path) -> Path:
    return Path(home) / MEMORY_DIR / f"{repo_key(target_repo)}.md"


class MemoryStore:
    """The memory of one target repository, in its file. Every method reads the file as it
    is now (a person may have edited it); every change is made under the lock."""

    def __init__(
        self,
        path: Path,
        *,
        redactor: Redactor,
        bounds: Bounds = Bounds(),
        repo: Path | None = None,
    ) -> None:
        # the redactor is required: no text reaches the file without passing it
        self.path = Path(path)
        self.redactor = redactor
        self.bounds = bounds
        self.repo = repo

    @classmethod
    def for_repo(
        cls, home: Path, target_repo: Path, *, redactor: Redactor, bounds: Bounds = Bounds()
    ) -> MemoryStore:
        return cls(
            memory_path(home, target_repo), redactor=redactor, bounds=bounds, repo=target_repo
        )

    # ------------------------------------------------------------------------ reading

    def read(self) -> Memory:
        """The memory as the file holds it now; empty when there is no file.
        MemoryFileError when it cannot be read."""
        text = self.read_text()
        return Memory() if text is None else self.parse(text)

    def facts(self) -> tuple[Fact, ...]:
        return self.read().facts

    def recaps(self) -> tuple[Recap, ...]:
        return self.read().recaps

    def read_text(self) -> str | None:
        """The file's text; None when there is none."""
        try:
            data = read_file(self.path, limit=MAX_FILE_BYTES, what="memory file")
            return decode_text(data, what="memory file")
        except FileNotFoundError:
            return None
        except ValueProblem as exc:
            raise MemoryFileError(self.path, None, exc.message) from None
        except OSError as exc:
            raise MemoryFileError(self.path, None, f"cannot be read: {exc.strerror}") from None

    def parse(self, text: str, *, where: Path | None = None) -> Memory:
        """A memory file's text read into facts and recaps; MemoryFileError naming ``where``
        (default: the store's file) and the line for anything hero cannot read."""
        return _Parser(where or self.path, self.redactor).parse(text)

    def find(self, id_or_prefix: str) -> Fact:
        return _find(self.facts(), id_or_prefix, self.path)

    # ------------------------------------------------------------------------ writing

    def add(self, facts: Iterable[Fact], *, remember: bool = False) -> tuple[Fact, ...]:
        """Add ``facts``, deduplicated by id (a fact learned again is merged: fresher, seen
        more, perhaps with evidence, see :func:`hero.memory.facts.merge`), then bounded.
        Returns the facts that were new to the memory. A fact a person forgot is not added
        again, unless ``remember`` (a person adding it by hand: ``hero memory add``)."""
        incoming = list(facts)
        added: list[Fact] = []
        with self._changing() as memory:
            known = {f.id: f for f in memory.facts}
            if remember:
                wanted = {self._recleaned(f).id for f in incoming}
                memory.forgotten = tuple(i for i in memory.forgotten if i not in wanted)
            forgotten = set(memory.forgotten)
            for fact in incoming:
                fact = self._recleaned(fact)
                if fact.id in known:
                    known[fact.id] = merge(known[fact.id], fact)
                elif fact.id in forgotten:
                    continue
                else:
                    known[fact.id] = fact
                    added.append(fact)
            memory.facts = tuple(known.values())
        kept = {f.id for f in memory.result.facts}
        return tuple(f for f in added if f.id in kept)

    def add_recap(self, recap: Recap) -> None:
        """Add a story's recap; an earlier recap of the same story is replaced, and only the
        last ``recap_stories`` are kept."""
        recap = replace(
            recap,
            story=safe_word(recap.story),
            status=safe_word(recap.status),
            rounds=max(0, recap.rounds),
            at=when(recap.at or None),
            changed=_clean_recap(recap.changed, self.redactor),
            failed=_clean_recap(recap.failed, self.redactor),
        )
        with self._changing() as memory:
            memory.recaps = (*(r for r in memory.recaps if r.story != recap.story), recap)

    def forget(self, id_or_prefix: str) -> Fact:
        """Remove the fact with this id (or the one whose id starts with it), and keep its
        id among the forgotten, so no later story learns it again; returns it. UnknownFact
        when none or several match."""
        with self._changing() as memory:
            gone = _find(memory.facts, id_or_prefix, self.path)
            memory.facts = tuple(f for f in memory.facts if f.id != gone.id)
            memory.forgotten = _forgetting(memory.forgotten, [gone.id])
        return gone

    def promote(self, id_or_prefix: str, *, always_on: bool = False) -> Fact:
        """A person confirms the fact with this id (or the one whose id starts with it): its
        trust becomes ``user`` and its role ``person`` (its story and round kept, to say
        where it came from); ``always_on``: a convention told to every story. Returns it as
        now kept. UnknownFact when none or several match."""
        with self._changing() as memory:
            found = _find(memory.facts, id_or_prefix, self.path)
            source = replace(found.source, role=Role.PERSON)
            on = found.always_on or (always_on and found.kind is Kind.CONVENTION)
            promoted = replace(found, trust=Trust.USER, source=source, evidence=None, always_on=on)
            memory.facts = tuple(promoted if f.id == found.id else f for f in memory.facts)
        return promoted

    def replace_text(self, text: str, *, expect: str | None) -> Memory:
        """Write a person's edit of the whole file, once it reads (MemoryFileError naming the
        line otherwise, and nothing written). ``expect``: the file's text when the edit
        began (None: there was no file); if the file changed meanwhile (a story ended and
        added facts), UsageError and nothing written, so neither side is lost.

        A fact whose line the edit deleted (or whose text or kind it changed: a new id) is
        forgotten, as with :meth:`forget`; a fact the edit brings back is no longer."""
        edited = self.parse(text)
        with memory_lock(self.path):
            if self.read_text() != expect:
                raise UsageError(
                    f"{self.path} changed while you edited it (a story added to it); nothing "
                    "written"
                )
            kept = {f.id for f in edited.facts}
            before = self.parse(expect).facts if expect is not None else ()
            forgotten = _forgetting(edited.forgotten, [f.id for f in before if f.id not in kept])
            edited = replace(edited, forgotten=tuple(i for i in forgotten if i not in kept))
            result = self._bounded(edited)
            self._write(result)
        return result

    def render(self, memory: Memory) -> str:
        return render(memory, self.repo)

    # ------------------------------------------------------------------------ inside

    @contextmanager
    def _changing(self) -> Iterator[_Change]:
        """A read-modify-write under the lock: the block changes the facts or recaps of the
        memory it is given; the result is bounded and written (not when the block raises)."""
        with memory_lock(self.path):
            change = _Change(self.read())
            yield change
            change.result = self._bounded(Memory(change.facts, change.recaps, change.forgotten))
            self._write(change.result)

    def _write(self, memory: Memory) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # a link put in the file's place is not written through
            atomic_write(self.path, render(memory, self.repo).encode("utf-8"), follow_link=False)
        except OSError as exc:
            raise MemoryFileError(
                self.path, None, f"cannot be written: {exc.strerror}; nothing was written"
            ) from None

    def _recleaned(self, fact: Fact) -> Fact:
        """``fact`` as the store keeps it: its text through this store's redactor and the
        cleaning again, whoever made it (a Fact can be built without new_fact)."""
        again = new_fact(
            fact.kind,
            fact.text,
            replace(fact.source, story=safe_word(fact.source.story) if fact.source.story else ""),
            redactor=self.redactor,
            trust=fact.trust,
            always_on=fact.always_on,
            at=fact.at,
            seen=fact.seen,
            evidence=fact.evidence,
        )
        return again

    def _bounded(self, memory: Memory) -> Memory:
        """``memory`` within the bounds: the last recaps; then facts dropped, least kept
        first, until their count and the file's size fit. An always-on convention of a
        person's goes last of all; then the less trusted before the more (outside, model,
        a person's), one without evidence before one with, one seen less before one seen
        more, an older before a newer."""
        b = self.bounds
        forgotten = memory.forgotten[-MAX_FORGOTTEN:]
        recaps = (
            tuple(sorted(memory.recaps, key=lambda r: r.at))[-b.recap_stories :]
            if b.recap_stories
            else ()
        )
        order = sorted(
            memory.facts,
            key=lambda f: (
                f.always_on and f.trust is Trust.USER,
                TRUST_RANK[f.trust],
                f.evidence is not None,
                f.seen,
                f.at,
            ),
        )
        dropped: list[Fact] = []
        while len(order) > b.max_facts:
            dropped.append(order.pop(0))
        size = len(render(Memory(tuple(order), recaps, forgotten), self.repo).encode())
        while order and size > b.max_bytes:
            gone = order.pop(0)
            dropped.append(gone)
            size -= len(_fact_line(gone).encode()) + 1
        gone_ids = {f.id for f in dropped}
        facts = tuple(f for f in memory.facts if f.id not in gone_ids)
        return Memory(facts, recaps, forgotten, tuple(dropped))


@dataclass
class _Change:
    """The memory a read-modify-write changes."""

    before: Memory
    facts: tuple[Fact, ...] = ()
    recaps: tuple[Recap, ...] = ()
    forgotten: tuple[str, ...] = ()
    result: Memory = field(default_factory=Memory)

    def __post_init__(self) -> None:
        self.facts, self.recaps = self.before.facts, self.before.recaps
        self.forgotten = self.before.forgotten


def _forgetting(forgotten: Iterable[str], ids: Iterable[str]) -> tuple[str, ...]:
    """``forgotten`` with ``ids`` added last (an id forgotten again moves to the end)."""
    new = list(dict.fromkeys(ids))
    return (*(i for i in forgotten if i not in new), *new)


def _find(facts: Iterable[Fact], id_or_prefix: str, path: Path) -> Fact:
    wanted = id_or_prefix.strip().lower()
    if not wanted:
        raise UnknownFact("expected a fact's id or the start of one; found nothing")
    matches = [f for f in facts if f.id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UnknownFact(f"no fact with id {wanted!r} in {path} (`hero memory list` shows them)")
    ids = ", ".join(f.id for f in matches[:5])
    raise UnknownFact(
        f"{len(matches)} facts have ids starting {wanted!r} ({ids}); give more of the id"
    )


# ---------------------------------------------------------------------------- the file


def render(memory: Memory, repo: Path | None = None) -> str:
    """The text of a memory file (also what ``hero memory export`` prints)."""
    name = clean_text(repo.name, Redactor(())) if repo is not None else "repository"
    where = f" {clean_text(str(repo), Redactor(()))}" if repo is not None else ""
    lines = [
        f"# hero memory: {name}",
        "",
        f"What hero learned about the repository{where}, from the stories it ran there. "
        "Edit it with `hero memory edit`: change a fact's text or kind, delete its line, or "
        "add one as `- [kind] text` (kinds: " + ", ".join(k.value for k in Kind) + "; "
        f"`[convention, {ALWAYS_ON}]` puts it in every prompt). The comment after a fact is "
        "hero's record of it. Under Forgotten, the ids of facts you forgot: hero does not "
        "learn them again (delete an id to let it).",
        "",
        FACTS_HEADING,
        "",
        *(_fact_line(f) for f in memory.facts),
        "",
        RECAPS_HEADING,
        "",
    ]
    for r in memory.recaps:
        rounds = f"{r.rounds} round{'s' if r.rounds != 1 else ''}"
        meta = f"story={r.story} status={r.status} rounds={r.rounds} at={stamp(r.at)}"
        lines.append(f"- {r.story}: {r.status} after {rounds} <!-- {meta} -->")
        if r.changed:
            lines.append(f"  - changed: {r.changed}")
        if r.failed:
            lines.append(f"  - failed: {r.failed}")
    if memory.forgotten:
        lines += ["", FORGOTTEN_HEADING, "", *(f"- {i}" for i in memory.forgotten)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _fact_line(f: Fact) -> str:
    tags = f.kind.value + (f", {ALWAYS_ON}" if f.always_on else "")
    meta = [f"id={f.id}", f"trust={f.trust.value}"]
    if f.evidence is not None:
        meta.append(f"evidence={f.evidence.value}")
    meta += [f"seen={f.seen}", f"at={stamp(f.at)}"]
    if f.source.story:
        meta.append(f"story={f.source.story}")
    if f.source.round is not None:
        meta.append(f"round={f.source.round}")
    meta.append(f"role={f.source.role.value}")
    return f"- [{tags}] {f.text} <!-- {' '.join(meta)} -->"


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: The headings of ``hero memory export``, by kind.
_EXPORT_HEADINGS = {
    Kind.CONVENTION: "Conventions",
    Kind.COMMAND: "Commands",
    Kind.FAILURE: "What failed",
    Kind.DECISION: "Decisions",
    Kind.KNOWLEDGE: "Knowledge",
}


def export_markdown(memory: Memory, repo: Path | None = None) -> str:
    """The memory as a Markdown page for people (``hero memory export``): facts by kind,
    each with where it came from, then the recent stories."""
    name = clean_text(repo.name, Redactor(())) if repo is not None else "the repository"
    lines = [f"# What hero remembers of {name}", ""]
    if not memory.facts:
        lines += ["No facts yet.", ""]
    for kind, heading in _EXPORT_HEADINGS.items():
        facts = [f for f in memory.facts if f.kind is kind]
        if not facts:
            continue
        lines += [f"## {heading}", ""]
        for f in facts:
            notes = ["always-on"] if f.always_on else []
            notes.append(trust_note(f))
            seen = f"seen {f.seen} times" if f.seen > 1 else "seen once"
            notes += [f"from {f.source.label()}", seen, f"last {stamp(f.at)}", f"id {f.id}"]
            lines.append(f"- {f.text} _({'; '.join(notes)})_")
        lines.append("")
    if memory.recaps:
        lines += ["## Recent stories", ""]
        for r in reversed(memory.recaps):
            rounds = f"{r.rounds} round{'s' if r.rounds != 1 else ''}"
            more = "".join(
                f" {label}: {text}."
                for label, text in (("Changed", r.changed), ("Failed", r.failed))
                if text
            )
            lines.append(f"- **{r.story}**: {r.status} after {rounds} ({stamp(r.at)}).{more}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


#: What each trust means, as ``hero memory export`` and the status page say it.
TRUST_NOTES = {
    Trust.USER: "written or confirmed by a person",
    Trust.MODEL: "machine-written (a model's or a command's text): data, not an instruction",
    Trust.OUTSIDE: "from an outside story (a GitHub issue): data, not an instruction",
}
#: Why a fact not a person's may be told, as ``hero memory list`` and the status page say it.
EVIDENCE_NOTES = {
    Evidence.STORIES: "learned by two stories",
    Evidence.SATISFIED: "a reviewer's request the next round satisfied",
}


def trust_note(f: Fact) -> str:
    """The trust of ``f`` in words, with whether it is told to stories and why."""
    note = TRUST_NOTES[f.trust]
    if f.trust is Trust.USER:
        return note
    if f.evidence is None:
        return f"{note}; not told to stories until it has evidence (or a person promotes it)"
    return f"{note}; told when relevant: {EVIDENCE_NOTES[f.evidence]}"


def _clean_recap(text: str, redactor: Redactor) -> str:
    cleaned = clean_text(text, redactor)
    return cleaned if len(cleaned) <= MAX_RECAP_CHARS else cleaned[: MAX_RECAP_CHARS - 1] + "…"


class _Parser:
    """Reads a memory file line by line; every problem names the line."""

    def __init__(self, path: Path, redactor: Redactor) -> None:
        self.path = path
        self.redactor = redactor

    def error(self, line: int, message: str) -> MemoryFileError:
        return MemoryFileError(self.path, line, f"{message}; nothing was written")

    def parse(self, text: str) -> Memory:
        facts: dict[str, Fact] = {}
        recaps: list[Recap] = []
        forgotten: list[str] = []
        section = ""  # before the first known heading: the title and the intro, free text
        for n, raw in enumerate(text.splitlines(), start=1):
            line = raw.rstrip()
            if line.startswith("## "):
                section = self._section(n, line)
                continue
            if not line.strip() or not section:
                continue
            if section == "facts":
                fact = self._fact(n, line)
                facts[fact.id] = merge(facts[fact.id], fact) if fact.id in facts else fact
            elif section == "forgotten":
                forgotten.append(self._forgotten(n, line))
            elif _RECAP_DETAIL.match(line):
                self._detail(n, line, recaps)
            else:
                recaps.append(self._recap(n, line))
        return Memory(tuple(facts.values()), tuple(recaps), _forgetting((), forgotten))

    def _section(self, n: int, line: str) -> str:
        heading = " ".join(line.split())
        if heading == FACTS_HEADING:
            return "facts"
        if heading == RECAPS_HEADING:
            return "recaps"
        if heading == FORGOTTEN_HEADING:
            return "forgotten"
        known = f"{FACTS_HEADING!r}, {RECAPS_HEADING!r} or {FORGOTTEN_HEADING!r}"
        raise self.error(n, f"unknown section {heading!r}; expected {known}")

    def _forgotten(self, n: int, line: str) -> str:
        m = _FORGOTTEN_LINE.match(line.strip().lower())
        if m is None:
            raise self.error(
                n, f"expected a forgotten fact's id like `- 9f8e7d6c5b4a` ({ID_CHARS} hex digits)"
            )
        return m["id"]

    def _meta(self, n: int, text: str | None, section: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for word in (text or "").split():
            key, eq, value = word.partition("=")
            if not eq or key not in _META_KEYS[section] or not value:
                known = ", ".join(f"{k}=..." for k in _META_KEYS[section])
                raise self.error(n, f"cannot read {word!r} in hero's comment; expected {known}")
            out[key] = value
        return out

    def _fact(self, n: int, line: str) -> Fact:
        m = _FACT_LINE.match(line)
        if m is None:
            raise self.error(
                n, "expected a fact like `- [kind] text` (or `- [convention, always-on] text`)"
            )
        tags = [t.strip().lower() for t in m["tags"].split(",")]
        kinds = ", ".join(k.value for k in Kind)
        if not tags[0] or tags[0] not in {k.value for k in Kind}:
            raise self.error(n, f"unknown kind {tags[0]!r}; expected one of {kinds}")
        if any(t != ALWAYS_ON for t in tags[1:]):
            raise self.error(n, f"expected `[kind]` or `[kind, {ALWAYS_ON}]`; found [{m['tags']}]")
        meta = self._meta(n, m["meta"], "facts")
        try:
            said = Trust(meta.get("trust", Trust.USER.value))
            role = Role(meta.get("role", Role.PERSON.value))
            evidence = Evidence(meta["evidence"]) if "evidence" in meta else None
        except ValueError as exc:
            raise self.error(n, str(exc)) from None
        # an older hero's file: a machine-written fact it trusted by its story is model now,
        # and what it made always-on is an ordinary fact (not an error: the file must load)
        trust = vouched(said, role)
        always_on = ALWAYS_ON in tags[1:] and trust is said
        if always_on and (trust is not Trust.USER or tags[0] != Kind.CONVENTION.value):
            raise self.error(
                n,
                f"only a convention of trust user may be {ALWAYS_ON}; found a {tags[0]} of "
                f"trust {trust.value} (confirm it with `hero memory promote ID`, or set "
                "trust=user role=person in its comment)",
            )
        source = Source(meta.get("story", ""), self._int(n, meta, "round", None), role)
        try:
            return new_fact(
                tags[0],
                m["text"],
                source,
                redactor=self.redactor,
                trust=trust,
                always_on=always_on,
                at=self._time(n, meta.get("at")),
                seen=self._int(n, meta, "seen", 1) or 1,
                evidence=evidence,
            )
        except FactError as exc:
            raise self.error(n, str(exc)) from None

    def _recap(self, n: int, line: str) -> Recap:
        m = _RECAP_LINE.match(line)
        meta = self._meta(n, m["meta"] if m else None, "recaps")
        if m is None or "story" not in meta or "status" not in meta:
            raise self.error(
                n,
                "expected a story's recap like `- ID: passed after 2 rounds <!-- story=ID status=passed rounds=2 -->`",
            )
        rounds = self._int(n, meta, "rounds", 0) or 0
        return Recap(meta["story"], meta["status"], rounds, at=self._time(n, meta.get("at")))

    def _detail(self, n: int, line: str, recaps: list[Recap]) -> None:
        m = _RECAP_DETAIL.match(line)
        assert m is not None
        if not recaps:
            raise self.error(n, f"a `{m['key']}:` line belongs under a story's recap")
        text = _clean_recap(m["text"], self.redactor)
        last = recaps[-1]
        recaps[-1] = (
            replace(last, changed=text) if m["key"] == "changed" else replace(last, failed=text)
        )

    def _int(self, n: int, meta: dict[str, str], key: str, default: int | None) -> int | None:
        value = meta.get(key)
        if value is None:
            return default
        if not value.isdigit() or len(value) > 9:
            raise self.error(n, f"{key}: expected a whole number; found {value!r}")
        return int(value)

    def _time(self, n: int, value: str | None) -> float:
        if value is None:  # a fact a person added: learned now
            return time.time()
        try:
            return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        except ValueError:
            raise self.error(
                n, f"at: expected a time like 2026-12-02T01:55:00Z; found {value!r}"
            ) from None
