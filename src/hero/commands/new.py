"""`hero new [ID]`: write a new story in your editor; hero checks it before it reaches the inbox.

The editor ($VISUAL, else $EDITOR, split as a shell would) opens a copy of the story template
(:func:`hero.config.scaffold.story_template`, the one ``hero init`` writes as its sample) in a
temporary file. Saved and valid, the story goes to ``inbox/<id>.md`` through the story
writer, never over a file already there. Saved invalid, the one-line error is shown (and
put at the top of the frontmatter, as a comment) and, on a terminal, "edit again? [Y/n]".

Exit 0: the story written (or the template printed: with ``--print``, with no editor set,
or when stdin or stdout is not a terminal). 1: nothing written because the text was saved
unchanged or empty, the editor failed, or "edit again?" was answered no. 2: a bad ID, no
inbox/ in the home, or ``inbox/<id>.md`` already there; text you edited is kept in a file
the message names.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hero.commands import Subparsers, home, home_option, say
from hero.errors import EXIT_FAILED, EXIT_OK, HeroError, UsageError

#: The id the template has when none is given: not a valid id, so that a story saved with
#: it is refused until the user names it.
PLACEHOLDER_ID = "<story-id>"
#: The comment a story being written with ``hero new`` starts with.
NEW_COMMENT = """\
# A new story (`hero new`). Save and close the editor: hero checks it and writes it to
# inbox/<id>.md, where `hero watch` runs it (or `hero run inbox/<id>.md`). Save it unchanged
# or empty to abort. docs/stories.md and docs/story-fields.md have every field.
"""
#: The line that says why the last save was refused, a YAML comment in the frontmatter.
ERROR_PREFIX = "# hero: error: "


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "new", parents=[home_option()], help="write a new story in your editor, into inbox/"
    )
    parser.add_argument("id", nargs="?", help="the story's id (else you set it in the editor)")
    parser.add_argument(
        "--print", action="store_true", help="print the story template instead of editing it"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from hero.config.scaffold import story_template
    from hero.names import story_id_problem

    if args.id is not None:
        problem = story_id_problem(args.id)
        if problem is not None:
            raise UsageError(f"ID: {problem}")
    template = story_template(args.id or PLACEHOLDER_ID, NEW_COMMENT)
    editor = editor_command()
    if args.print or editor is None or not (sys.stdin.isatty() and sys.stdout.isatty()):
        sys.stdout.write(template)
        return EXIT_OK
    inbox = home(args) / "inbox"
    if not inbox.is_dir():
        raise UsageError(f"{inbox}: no such folder; run `hero init` there first, or give --home")
    if args.id is not None:
        _refuse_existing(inbox / f"{args.id}.md", None)
    draft = Path(tempfile.mkdtemp(prefix="hero-new-")) / f"{args.id or 'new-story'}.md"
    written = _edit_loop(editor, draft, template, inbox)
    if written is None:
        return EXIT_FAILED
    shutil.rmtree(draft.parent, ignore_errors=True)
    print(f"created {written}")
    print(f"next: `hero watch` runs it, or `hero run {written}`")
    return EXIT_OK


def editor_command() -> list[str] | None:
    """$VISUAL, else $EDITOR, split as a shell would; None when neither is set."""
    import shlex

    for name in ("VISUAL", "EDITOR"):
        value = os.environ.get(name, "").strip()
        if value:
            try:
                words = shlex.split(value)
            except ValueError as exc:
                raise UsageError(f"${name} ({value!r}): cannot be split: {exc}") from None
            if words:
                return words
    return None


def _edit_loop(editor: list[str], draft: Path, template: str, inbox: Path) -> Path | None:
    """Edit until the draft is a valid story, then write it: its path in the inbox; None
    when the user gave up (said why)."""
    from hero.story.format import parse_story, story_metadata, write_story
    from hero.story.record import StoryError

    shown = template
    while True:
        draft.write_text(shown, encoding="utf-8")
        run_editor(editor, draft)
        try:
            edited = draft.read_bytes()
        except OSError as exc:
            _gave_up(f"the edited file cannot be read ({exc.strerror})", draft, keep=False)
            return None
        if not edited.strip():
            _gave_up("the story was emptied", draft, keep=False)
            return None
        if edited == shown.encode("utf-8"):
            _gave_up("the story was saved unchanged", draft, keep=shown != template)
            return None
        try:
            story = parse_story(draft)
        except StoryError as exc:
            error = f"{exc.field}: {exc.message}"
            if exc.field == "id" and PLACEHOLDER_ID in exc.message:
                error = f"id: still {PLACEHOLDER_ID}: give the story its id ({exc.message})"
            say(f"invalid story: {error}")
            if not _ask("edit again? [Y/n] "):
                _gave_up("the story is not valid", draft, keep=True)
                return None
            shown = _with_error(edited.decode("utf-8", "replace"), error)
            continue
        target = inbox / f"{story.id}.md"
        _refuse_existing(target, draft)
        try:
            write_story(target, story_metadata(story), story.body, exist_ok=False)
        except FileExistsError:
            _refuse_existing(target, draft)
        return target


def run_editor(editor: list[str], draft: Path) -> None:
    """Run the editor on ``draft``; HeroError (naming the draft) when it fails."""
    import shlex
    import subprocess

    try:
        code = subprocess.run([*editor, str(draft)], check=False).returncode
    except OSError as exc:
        raise UsageError(
            f"editor {shlex.join(editor)} ($VISUAL or $EDITOR) cannot be run: {exc.strerror}"
        ) from None
    if code != 0:  # as `git commit` does: an editor that failed says nothing was meant
        raise HeroError(
            f"the editor {shlex.join(editor)} exited {code}; nothing written (the text it "
            f"was given is in {draft})"
        )


def _gave_up(why: str, draft: Path, *, keep: bool) -> None:
    """Say that nothing was written and why; the draft is kept (and named) when it holds
    the user's work, else removed."""
    if keep:
        say(f"{why}; nothing written (your text is kept in {draft})")
    else:
        import shutil

        shutil.rmtree(draft.parent, ignore_errors=True)
        say(f"{why}; nothing written")


def _refuse_existing(target: Path, draft: Path | None) -> None:
    if target.exists() or target.is_symlink():
        kept = f"; your story is kept in {draft}" if draft is not None else ""
        raise UsageError(
            f"{target} already exists: nothing written{kept}; pick another id, or edit that file"
        )


def _ask(prompt: str) -> bool:
    """A yes (the default) or no from the terminal; no at end of input."""
    print(f"hero: {prompt}", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if not answer:
        return False
    return answer.strip().lower() in ("", "y", "yes")


def _with_error(text: str, error: str) -> str:
    """``text`` with ``error`` as a comment line right after its opening ``---`` (the one
    of an earlier save replaced); as it is when it has no frontmatter to hold a comment."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return text
    rest = lines[1:]
    while rest and rest[0].startswith(ERROR_PREFIX):
        rest.pop(0)
    error = " ".join(error.split())
    return "\n".join([lines[0], f"{ERROR_PREFIX}{error}", *rest])
