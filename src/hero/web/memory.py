"""What ``hero serve`` shows of the target repository's memory: every fact with its trust.

A fact's trust says who wrote its text (hero.memory.facts.Trust): a person (``user``), a
model or a command (``model``), a GitHub issue's story (``outside``). A person watching the
board sees which facts stories are told, as what, and why (its evidence), so a fact a
worker steered into the memory is in plain sight. The story page shows the facts that
story taught.

Read-only and lock-free, like the rest of the site: the memory file is read as it is (a
file a person is editing, or one hero cannot read, is said so, not fixed). Every text was
cleaned when the store took it and is escaped by the templates all the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hero.memory.facts import Fact
from hero.memory.store import MemoryFileError, MemoryStore, memory_path, stamp, trust_note
from hero.redact import Redactor

#: Facts a page lists at most (the store keeps memory_max_facts, 200 by default).
MAX_SHOWN = 500


def path_of(home: Path, repo: Path | None) -> Path | None:
    """The memory file of the target repository ``repo``; None when no repository is read."""
    return None if repo is None else memory_path(home, repo)


def facts(
    home: Path, repo: Path | None, redactor: Redactor, *, story: str | None = None
) -> dict[str, Any]:
    """The memory as a page shows it: ``facts`` (each with its trust, whether stories are
    told it and why), ``path``, and ``error`` when the file cannot be read. ``story``: only
    the facts that story taught (their last source)."""
    path = path_of(home, repo)
    if path is None:
        return {"path": "", "facts": [], "error": "", "known": False}
    try:
        found = MemoryStore(path, redactor=redactor).facts()
    except MemoryFileError as exc:
        return {"path": str(path), "facts": [], "error": str(exc), "known": True}
    if story is not None:
        found = tuple(f for f in found if f.source.story == story)
    return {
        "path": str(path),
        "facts": [fact_row(f) for f in found[:MAX_SHOWN]],
        "error": "",
        "known": True,
    }


def fact_row(f: Fact) -> dict[str, Any]:
    """One fact as the pages and the JSON API show it."""
    return {
        "id": f.id,
        "kind": f.kind.value,
        "text": f.text,
        "trust": f.trust.value,
        "trust_note": trust_note(f),
        "evidence": f.evidence.value if f.evidence is not None else "",
        "recalled": f.recallable,
        "always_on": f.always_on,
        "source": f.source.label(),
        "seen": f.seen,
        "at": stamp(f.at),
    }
