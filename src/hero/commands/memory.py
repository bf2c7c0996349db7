"""`hero memory list|show|add|promote|forget|edit|export`: what the target repository's
memory holds.

The memory is ``memory/<repo-key>.md`` in the home (docs/memory.md): facts learned by the
stories on the target repository, and a recap of the last ones. These commands read it, add
a person's fact, let a person confirm a learned one, remove a fact, let a person edit the
whole file, or export it as Markdown. ``add``, ``promote`` and ``edit`` are the only ways a
fact becomes trust ``user``: what a story teaches is a model's or a command's text.

``edit`` opens a copy of the file in $VISUAL, else $EDITOR (as ``hero new`` does). Saved and
readable, it replaces the file (under the memory's lock); saved unreadable, nothing is
written and the error names the copy and the line, and the copy is kept. Exit 0: done (or
nothing changed). 2: no such fact, an unreadable file, an edit refused, a usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from hero.commands import CommandLineError, Subparsers, home, home_option, say, say_notices
from hero.errors import EXIT_OK, UsageError

if TYPE_CHECKING:
    from hero.memory import Fact, MemoryStore

KINDS = ("convention", "command", "failure", "decision", "knowledge")
#: Characters of a fact's text ``list`` shows.
TEXT_WIDTH = 60


def add_parser(subparsers: Subparsers) -> None:
    memory = subparsers.add_parser(
        "memory",
        parents=[home_option()],
        help="what the target repository's memory holds: list, show, add, promote, forget, "
        "edit, export",
        description="The facts stories learned about the target repository, kept in "
        "memory/<repository>.md in the hero home (docs/memory.md).",
    )
    memory.set_defaults(handler=_no_command)
    sub = memory.add_subparsers(dest="memory_command", metavar="COMMAND")

    listing = sub.add_parser("list", parents=[home_option()], help="the facts, one per line")
    listing.add_argument("--kind", choices=KINDS, help="only facts of this kind")
    listing.add_argument("--json", action="store_true", help="one JSON object per fact")
    listing.set_defaults(handler=run_list)

    show = sub.add_parser("show", parents=[home_option()], help="one fact, whole")
    show.add_argument("id", help="the fact's id, or the start of it")
    show.set_defaults(handler=run_show)

    add = sub.add_parser("add", parents=[home_option()], help="add a fact of your own (trust user)")
    add.add_argument("kind", choices=KINDS, help="what the fact is about")
    add.add_argument("text", help="the fact, one line of plain text")
    add.add_argument(
        "--always-on",
        action="store_true",
        help="a convention told to every story, whatever it is about",
    )
    add.set_defaults(handler=run_add)

    promote = sub.add_parser(
        "promote",
        parents=[home_option()],
        help="confirm a learned fact: it becomes yours (trust user) and is told when relevant",
    )
    promote.add_argument("id", help="the fact's id, or the start of it")
    promote.add_argument(
        "--always-on", action="store_true", help="a convention: tell it to every story"
    )
    promote.set_defaults(handler=run_promote)

    forget = sub.add_parser(
        "forget", parents=[home_option()], help="remove a fact: no later prompt is told it"
    )
    forget.add_argument("id", help="the fact's id, or the start of it")
    forget.set_defaults(handler=run_forget)

    edit = sub.add_parser(
        "edit",
        parents=[home_option()],
        help="edit the memory file in $VISUAL / $EDITOR; hero checks it before saving",
    )
    edit.set_defaults(handler=run_edit)

    export = sub.add_parser("export", parents=[home_option()], help="the memory as Markdown")
    export.add_argument("-o", "--output", metavar="FILE", help="write it to FILE, not stdout")
    export.set_defaults(handler=run_export)


def _no_command(args: argparse.Namespace) -> NoReturn:
    raise CommandLineError(
        "memory: expected a command: list, show, add, promote, forget, edit or export"
    )


def _store(args: argparse.Namespace) -> MemoryStore:
    from hero.config.loader import load_config
    from hero.memory import enabled, store_for

    config = load_config(home(args), roles=())
    say_notices(config)
    if not enabled(config):
        say("note: memory is off in this home (memory_enabled: false); showing what it kept")
    return store_for(config)


def run_list(args: argparse.Namespace) -> int:
    from hero.views.text import cut

    store = _store(args)
    facts = [f for f in store.facts() if args.kind is None or f.kind.value == args.kind]
    if args.json:
        import json

        for fact in facts:
            print(json.dumps(fact_record(fact), ensure_ascii=False))
        return EXIT_OK
    if not facts:
        print(f"no facts{f' of kind {args.kind}' if args.kind else ''} in {store.path}")
        return EXIT_OK
    rows = [
        (
            f.id,
            f.kind.value,
            f.trust.value,
            told(f),
            "yes" if f.always_on else "",
            f.source.label(),
            cut(f.text, TEXT_WIDTH),
        )
        for f in facts
    ]
    header = ("ID", "KIND", "TRUST", "TOLD", "ALWAYS-ON", "SOURCE", "TEXT")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header) - 1)]
    for row in (header, *rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[-1]]).rstrip())
    return EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    from hero.memory.store import stamp

    fact = _store(args).find(args.id)
    record = fact_record(fact)
    record["at"] = stamp(fact.at)
    for key, value in record.items():
        shown = "yes" if value is True else "no" if value is False else value
        print(f"{key + ':':<11}{'' if shown is None else shown}")
    return EXIT_OK


def run_add(args: argparse.Namespace) -> int:
    from hero.memory import Source, Trust, new_fact
    from hero.memory.facts import FactError

    store = _store(args)
    if args.always_on and args.kind != "convention":
        raise UsageError(f"--always-on: only a convention may be always-on; found {args.kind}")
    try:
        fact = new_fact(
            args.kind,
            args.text,
            Source(),
            redactor=store.redactor,
            trust=Trust.USER,
            always_on=args.always_on,
        )
    except FactError as exc:
        raise UsageError(f"hero memory add: {exc}") from None
    store.add([fact], remember=True)
    kept = store.find(fact.id)
    print(f"added {kept.id} [{kept.kind.value}] {kept.text} (trust {kept.trust.value})")
    return EXIT_OK


def run_promote(args: argparse.Namespace) -> int:
    store = _store(args)
    if args.always_on and store.find(args.id).kind.value != "convention":
        raise UsageError("--always-on: only a convention may be always-on")
    fact = store.promote(args.id, always_on=args.always_on)
    on = ", always-on" if fact.always_on else ""
    print(f"promoted {fact.id} [{fact.kind.value}{on}] {fact.text} (trust {fact.trust.value})")
    return EXIT_OK


def run_forget(args: argparse.Namespace) -> int:
    store = _store(args)
    gone = store.forget(args.id)
    print(f"forgot {gone.id} [{gone.kind.value}] {gone.text}")
    return EXIT_OK


def run_edit(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from hero.commands.new import editor_command, run_editor
    from hero.memory.store import Memory

    store = _store(args)
    editor = editor_command()
    if editor is None:
        raise UsageError(f"set $VISUAL or $EDITOR to edit {store.path}")
    before = store.read_text()
    # a file hero cannot read now: said first, with its line
    was = store.parse(before) if before is not None else Memory()
    shown = before if before is not None else store.render(Memory())
    draft = Path(tempfile.mkdtemp(prefix="hero-memory-")) / store.path.name
    draft.write_text(shown, encoding="utf-8")
    run_editor(editor, draft)
    edited = draft.read_bytes().decode("utf-8", "replace")
    if edited == shown:
        shutil.rmtree(draft.parent, ignore_errors=True)
        print(f"unchanged; nothing written to {store.path}")
        return EXIT_OK
    try:
        store.parse(edited, where=draft)
        saved = store.replace_text(edited, expect=before)
    except UsageError as exc:
        raise UsageError(f"{exc}; your text is kept in {draft}") from None
    shutil.rmtree(draft.parent, ignore_errors=True)
    print(f"saved {store.path}: {len(saved.facts)} facts, {len(saved.recaps)} recent stories")
    known = {f.id: f for f in was.facts}
    for gone in (i for i in saved.forgotten if i not in was.forgotten and i in known):
        print(f"forgot {gone} [{known[gone].kind.value}] {known[gone].text}")
    for fact in saved.dropped:
        say(f"dropped to stay within the memory's bounds: {fact.id} {fact.text}")
    return EXIT_OK


def run_export(args: argparse.Namespace) -> int:
    from hero.fsio import atomic_write
    from hero.memory.store import export_markdown

    store = _store(args)
    text = export_markdown(store.read(), store.repo)
    if args.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    out = Path(args.output)
    try:
        atomic_write(out, text.encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"{out}: cannot be written: {exc.strerror}") from None
    print(f"wrote {out}")
    return EXIT_OK


def fact_record(fact: Fact) -> dict[str, object]:
    """A fact as ``list --json`` shows it."""
    return {
        "id": fact.id,
        "kind": fact.kind.value,
        "text": fact.text,
        "trust": fact.trust.value,
        "evidence": fact.evidence.value if fact.evidence is not None else None,
        "recalled": fact.recallable,
        "always_on": fact.always_on,
        "story": fact.source.story or None,
        "round": fact.source.round,
        "role": fact.source.role.value,
        "at": fact.at,
        "seen": fact.seen,
    }


def told(fact: Fact) -> str:
    """Whether stories are told ``fact``, as ``list`` shows it: ``yes`` (a person's),
    the evidence of a machine-written one (``stories``, ``satisfied``), ``no`` without."""
    if fact.evidence is not None:
        return fact.evidence.value
    return "yes" if fact.recallable else "no"
