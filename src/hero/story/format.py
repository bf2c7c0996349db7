"""A story file's format: markdown with YAML frontmatter, read into a :class:`~hero.story.record.Story`
and written back.

A story looks like::

    ---
    id: add-login
    title: Add a login page
    priority: high
    verify:
      fast: [ruff check .]
      tests: [pytest -q]
    scope: [src/app/login.py]
    ---
    ## Goal
    ...
    ## Acceptance Criteria
    - [ ] ...

Every problem raises :class:`~hero.story.record.StoryError`, whose text is one line:
``<path>: <field>: <what was expected>; found <what was there>``.

The file's shape goes through python-frontmatter both ways: a ``frontmatter.Post`` holds
the metadata and the content, and :func:`story_handler` (a ``YAMLHandler`` on hero's strict
YAML from :mod:`hero.yamlio`) cuts, loads and dumps the frontmatter. python-frontmatter (and
PyYAML) are imported only when a story is read or written, never by ``hero --help``.

Every story file hero writes goes through one writer, built on ``frontmatter.dumps``:
:func:`write_story` (a whole new story, atomically) or :func:`dumps_story` (its text);
:func:`story_metadata` gives a parsed Story's fields back as metadata. The fields are
:mod:`hero.story.fields`'s, the body's sections :mod:`hero.story.body`'s, the reviewer's
feedback :mod:`hero.story.feedback`'s.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hero.fsio import atomic_write
from hero.story.body import clean_section, list_items, split_body
from hero.story.fields import FIELDS, STORY_DEFAULTS, validate_fields
from hero.story.record import (
    FLAT_VERIFY_TIER,
    MAX_STORY_BYTES,
    FileId,
    Story,
    StoryError,
    VerifyTier,
)
from hero.yamlio import (
    ValueProblem,
    _check_kind,
    decode_text,
    describe,
    load_yaml,
    quote,
)

if TYPE_CHECKING:
    import frontmatter
    from frontmatter.default_handlers import YAMLHandler


# ----------------------------------------------------------------------------- parsing


def parse_story(path: Path) -> Story:
    """Read and validate the story file at ``path``; its :attr:`Story.file_id` is the
    identity of the file read."""
    path = Path(path)
    raw, file_id = _read_story_file(path)
    text = decode_story(raw, path)
    try:
        story = parse_story_text(text, path)
    except RecursionError:  # a last resort: hero's YAML loader limits nesting first
        raise StoryError(path, "frontmatter", "nested too deeply to be read") from None
    return replace(story, file_id=file_id)


def parse_story_text(text: str, path: Path) -> Story:
    """Validate a story given as text; ``path`` is used for errors and kept on the Story."""
    path = Path(path)
    post = _load_post(text, path)
    fields = validate_fields(post.metadata, path)
    sections = split_body(post.content)
    if not sections["body"].strip():
        raise StoryError(
            path,
            "body",
            "expected the story's text after the frontmatter (its goal: what to change); "
            "found nothing",
        )
    ac_text = sections.get("acceptance_criteria", "")
    return Story(
        path=path,
        body=sections["body"],
        goal=sections.get("goal", ""),
        acceptance_criteria=list_items(ac_text),
        constraints=sections.get("constraints", ""),
        out_of_scope=sections.get("out_of_scope", ""),
        feedback=sections.get("feedback", ""),
        **fields,
    )


# O_NONBLOCK: a FIFO never blocks the open; it is refused once fstat sees it.
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
FILE_WHAT = "markdown file"


def _read_story_file(path: Path) -> tuple[bytes, FileId | None]:
    """The bytes of the regular story file at ``path`` (at most MAX_STORY_BYTES, read with
    that limit, never blocking on a FIFO) and the identity of the file read: None when the
    last component is a symlink. A symlinked story is read, as a user may link one in, but
    hero never writes back through the link (see :func:`write_feedback`)."""
    try:
        st = os.lstat(path)
        linked = stat.S_ISLNK(st.st_mode)
        # the kind is checked before opening (a device is never opened) and after, on the
        # descriptor: nothing swapped in between is read
        _check_kind(os.stat(path).st_mode if linked else st.st_mode, FILE_WHAT)
        fd = os.open(path, READ_FLAGS if linked else READ_FLAGS | os.O_NOFOLLOW)
        try:
            info, data = read_open(fd)
        finally:
            os.close(fd)
    except ValueProblem as exc:
        raise StoryError(path, "file", exc.message) from None
    except OSError as exc:
        raise StoryError(path, "file", f"cannot read the file: {os_reason(exc)}") from None
    return data, None if linked else (info.st_dev, info.st_ino)


def read_open(fd: int) -> tuple[os.stat_result, bytes]:
    """fstat of the open ``fd`` and its bytes: ValueProblem unless it is a regular file of at
    most MAX_STORY_BYTES, checked before reading and while reading (a file that grows
    meanwhile, or says it is smaller than it is)."""
    info = os.fstat(fd)
    _check_kind(info.st_mode, FILE_WHAT)
    if info.st_size > MAX_STORY_BYTES:
        raise ValueProblem(
            f"too large: expected at most {MAX_STORY_BYTES} bytes; found {info.st_size}"
        )
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_STORY_BYTES:
        chunk = os.read(fd, min(MAX_STORY_BYTES + 1 - size, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > MAX_STORY_BYTES:
        raise ValueProblem(f"too large: expected at most {MAX_STORY_BYTES} bytes; found more")
    return info, b"".join(chunks)


def os_reason(exc: OSError) -> str:
    return exc.strerror or exc.__class__.__name__


def _load_post(text: str, path: Path) -> frontmatter.Post:
    """The story's frontmatter (strict YAML, a mapping) and content as a ``frontmatter.Post``.

    Not ``frontmatter.loads``: it strips the content, returns empty metadata when the closing
    ``---`` is missing or the YAML is not a mapping, and passes the metadata as keyword
    arguments (a ``content:`` field would be a TypeError). hero calls its handler's ``split``
    and ``load`` itself and keeps its own errors.
    """
    import frontmatter

    if "\x00" in text:
        raise StoryError(
            path, "file", "expected a UTF-8 markdown file; found binary data (NUL bytes)"
        )
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_STORY_BYTES:
        raise StoryError(
            path, "file", f"too large: expected at most {MAX_STORY_BYTES} bytes; found {size}"
        )
    text = normalize_newlines(text.removeprefix("\ufeff"))
    if not text.strip():
        raise StoryError(
            path,
            "frontmatter",
            "expected YAML frontmatter between '---' lines; found an empty file",
        )
    handler = story_handler()
    try:
        fm_text, content = handler.split(text)
        meta = handler.load(fm_text)
    except ValueProblem as exc:
        raise StoryError(path, "frontmatter", exc.message) from None
    if meta is None:
        raise StoryError(
            path,
            "frontmatter",
            "expected a mapping of fields (at least id and title); found nothing",
        )
    if not isinstance(meta, dict):
        raise StoryError(
            path,
            "frontmatter",
            f"expected a mapping of fields (id, title, ...); found {describe(meta)}",
        )
    post = frontmatter.Post(content, handler)
    post.metadata = meta
    return post


def decode_story(data: bytes, path: Path) -> str:
    try:
        return decode_text(data, what="markdown file")
    except ValueProblem as exc:
        raise StoryError(path, "file", exc.message) from None


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


@dataclass(frozen=True)
class Layout:
    """A story file's text cut at its frontmatter: the delimiter lines kept as written."""

    open_line: str
    fm_text: str
    close_line: str
    body: str


def layout_of(text: str) -> Layout:
    """Cut LF text at its frontmatter; ValueProblem when it has no opening or closing line."""
    lines = text.split("\n")
    if lines[0].rstrip() != "---":
        first = text.lstrip("\n").split("\n", 1)[0]
        raise ValueProblem(
            "expected the file to start with a '---' line opening the YAML frontmatter; "
            f"found {quote(first)}"
        )
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            return Layout(lines[0], "\n".join(lines[1:i]), lines[i], "\n".join(lines[i + 1 :]))
    raise ValueProblem("expected a closing '---' line after the YAML frontmatter; found none")


# ----------------------------------------------------------------------------- the handler


def story_handler(source: str | None = None) -> YAMLHandler:
    """A python-frontmatter handler for story files: hero's strict YAML both ways.

    ``split`` requires ``---`` on the first line and a closing ``---`` (or ``...``) line;
    ``load`` is :func:`hero.yamlio.load_yaml` (duplicate keys refused, only plain YAML
    tags, errors with the file's line); ``export`` keeps the declared key order, writes
    multi-line strings as ``|`` blocks and never wraps lines; ``format`` puts the content
    right after the closing line, as it is. Given ``source``, the YAML text a file holds,
    ``export`` returns that text verbatim while it still loads to exactly the metadata being
    written: comments, quoting and layout a person chose survive a rewrite.
    """
    return _handler_class()(source)


@functools.cache
def _handler_class() -> Callable[[str | None], YAMLHandler]:
    from frontmatter.default_handlers import YAMLHandler

    class StoryYAMLHandler(YAMLHandler):
        def __init__(self, source: str | None = None) -> None:
            super().__init__()
            self.source = source

        def detect(self, text: str) -> bool:
            return text.split("\n", 1)[0].rstrip() == "---"

        def split(self, text: str) -> tuple[str, str]:
            layout = layout_of(text)
            return layout.fm_text, layout.body

        def load(self, fm: str, **kwargs: object) -> Any:
            return load_yaml(fm, first_line=2)

        def format(self, post: frontmatter.Post, **kwargs: object) -> str:
            # python-frontmatter's own format adds a blank line before the content and
            # strips it; a rewrite must give back the user's body as it was.
            start = kwargs.pop("start_delimiter", self.START_DELIMITER)
            end = kwargs.pop("end_delimiter", self.END_DELIMITER)
            metadata = self.export(post.metadata, **kwargs)
            return f"{start}\n{metadata}\n{end}\n{post.content}"

        def export(self, metadata: dict[str, object], **kwargs: object) -> str:
            if self.source is not None:
                try:
                    if _identical(load_yaml(self.source), metadata):
                        return self.source
                except ValueProblem:
                    pass
            return _dump_yaml(metadata)

    return StoryYAMLHandler


def _identical(a: Any, b: Any) -> bool:
    """Equal, with the same types and the same key order (1 == True is not enough here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_identical(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _dump_yaml(metadata: Mapping[str, Any]) -> str:
    import yaml

    text: str = yaml.dump(
        _plain(metadata),
        Dumper=_dumper(),
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1 << 30,
    )
    return text.rstrip("\n")


@functools.cache
def _dumper() -> type:
    import yaml

    class StoryDumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

        def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
            super().increase_indent(flow, False)  # list items indented, as people write them

    def represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        # A `|` block keeps a multi-line string readable, and indented: no line of it can
        # be read as the closing '---'. PyYAML falls back to a quoted form when it must.
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    StoryDumper.add_representer(str, represent_str)
    return StoryDumper


def _plain(value: Any) -> Any:
    """Metadata as YAML-ready values: mappings to dicts, tuples to lists, verify tiers to YAML."""
    if isinstance(value, VerifyTier):
        return {value.name: list(value.commands)}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, VerifyTier) for v in value):
            return _verify_yaml(tuple(value))
        return [_plain(v) for v in value]
    return value


def _verify_yaml(tiers: tuple[VerifyTier, ...]) -> list[str] | dict[str, list[str]]:
    if len(tiers) == 1 and tiers[0].name == FLAT_VERIFY_TIER:
        return list(tiers[0].commands)
    return {tier.name: list(tier.commands) for tier in tiers}


# ----------------------------------------------------------------------------- writing


def story_metadata(story: Story) -> dict[str, Any]:
    """The frontmatter fields of ``story`` in declared order (:data:`FIELDS`), defaults
    left out."""
    meta: dict[str, Any] = {}
    for f in FIELDS:
        value = getattr(story, f.name)
        if f.required or value != STORY_DEFAULTS[f.name]:
            meta[f.name] = _plain(value)
    return meta


def dumps_story(metadata: Mapping[str, Any], body: str, *, path: Path | str = "<story>") -> str:
    """The text of a story file: ``metadata`` as YAML frontmatter (in the given key order),
    then ``body``, ending in one newline.

    Raises StoryError (naming ``path``) when hero would refuse to read the result back: hero
    never writes a story it cannot run. Tuples, nested mappings and ``Story.verify`` (a
    tuple of VerifyTier) are accepted as values.
    """
    text, _ = _dumps_checked(metadata, body, Path(path))
    return text


def write_story(
    path: Path | str, metadata: Mapping[str, Any], body: str, *, exist_ok: bool = True
) -> Story:
    """Write a whole story file atomically and return it as read back.

    The text is :func:`dumps_story`'s. It goes to a temporary dot-file in the same directory
    (the inbox ignores dot-files), is flushed to disk, then renamed over ``path``: a reader
    sees the old file or the new one, never half. With ``exist_ok=False`` an existing file
    is left alone and FileExistsError raised.
    """
    path = Path(path)
    text, story = _dumps_checked(metadata, body, path)
    atomic_write(path, text.encode("utf-8"), exclusive=not exist_ok)
    return story


def _dumps_checked(metadata: Mapping[str, Any], body: str, path: Path) -> tuple[str, Story]:
    import frontmatter

    content = clean_section(normalize_newlines(str(body)))
    # A blank line between the frontmatter and the body, as in hero's examples.
    post = frontmatter.Post(f"\n{content}\n" if content else "", story_handler())
    post.metadata = _plain(metadata)
    text = render_post(post)
    return text, parse_story_text(text, path)


def render_post(post: frontmatter.Post, *, open_line: str = "---", close_line: str = "---") -> str:
    """The one place a story's text is made: ``frontmatter.dumps`` with hero's handler."""
    import frontmatter

    return frontmatter.dumps(post, start_delimiter=open_line, end_delimiter=close_line)
