"""Stories: markdown files with YAML frontmatter, parsed and validated.

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

Every problem raises :class:`StoryError`, whose text is one line:
``<path>: <field>: <what was expected>; found <what was there>``.

The file's shape goes through python-frontmatter both ways: a ``frontmatter.Post`` holds
the metadata and the content, and :func:`story_handler` (a ``YAMLHandler`` on hero's strict
YAML from :mod:`hero.yamlio`) cuts, loads and dumps the frontmatter. python-frontmatter (and
PyYAML) are imported only when a story is read or written, never by ``hero --help``.

Every story file hero writes goes through one writer, built on ``frontmatter.dumps``:
:func:`write_story` (a whole new story, atomically) or :func:`dumps_story` (its text);
:func:`story_metadata` gives a parsed Story's fields back as metadata.

The harness appends reviewer feedback to the story file under a
``## Reviewer Feedback (auto)`` heading (:func:`append_feedback`, through the same writer,
keeping the user's bytes); that section is kept out of :attr:`Story.body` and exposed as
:attr:`Story.feedback`. A story file is in others' reach while its story runs: it is written
back only while it is still the regular file hero read (never through a symlink; with
``expect``, the very file of :attr:`Story.file_id`), else :class:`StoryFileChanged`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hero.errors import UsageError
from hero.fsio import atomic_write
from hero.names import (
    ID_RE,
    MAX_ID_CHARS,
    RESERVED_IDS,
    StoryRef,
    is_story_id,
    story_id_problem,
)
from hero.yamlio import (
    ValueProblem,
    _check_kind,
    decode_text,
    describe,
    did_you_mean,
    load_yaml,
    quote,
    string_list,
)

if TYPE_CHECKING:
    import frontmatter
    from frontmatter.default_handlers import YAMLHandler

PRIORITIES = ("low", "normal", "high")
MAX_STORY_BYTES = 1_048_576

FEEDBACK_HEADING = "## Reviewer Feedback (auto)"
#: The keys of ``source:``, where a story taken from a GitHub issue came from.
SOURCE_KEYS = ("repo", "issue", "url", "author")
#: The roles a story's ``model:`` and ``reasoning_effort:`` may name (the planner is not
#: the story's: it runs before there is one).
MODEL_ROLES = ("worker", "reviewer")
MAX_MODEL_CHARS = 200
#: A reasoning effort as providers spell them (minimal, low, medium, high, xhigh, ...).
_EFFORT_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
#: The reasoning_effort that sends none (for a model that takes no such parameter).
EFFORT_NOT_SENT = "none"
FLAT_VERIFY_TIER = "verify"

_FEEDBACK_KEY = "reviewer feedback auto"
_SECTION_KEYS = {
    "goal": "goal",
    "acceptance criteria": "acceptance_criteria",
    "constraints": "constraints",
    "out of scope": "out_of_scope",
}
_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_ROUND_RE = re.compile(r"^round\s+(\d+)\b", re.IGNORECASE)
_ITEM_RE = re.compile(r"^(\s*)(?:[-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$")
_CHECKBOX_RE = re.compile(r"^\[[ xX]\](?:[ \t]+|$)")


class StoryError(UsageError):
    """A story file that cannot be used; ``str(e) == f"{path}: {field}: {message}"``."""

    kind = "invalid story"

    def __init__(self, path: Path | str, field: str, message: str) -> None:
        self.path = Path(path)
        self.field = field
        self.message = " ".join(str(message).split())
        super().__init__(f"{self.path}: {self.field}: {self.message}")


class StoryFileChanged(StoryError):
    """The story file is no longer the regular file hero read (a symlink now, another file,
    gone): hero wrote nothing to it. ``found`` says what is there now."""

    def __init__(self, path: Path | str, found: str) -> None:
        self.found = found
        super().__init__(path, "file", f"{found}; hero wrote nothing to it")


#: A file's identity: ``(st_dev, st_ino)`` of the file as opened.
FileId = tuple[int, int]


@dataclass(frozen=True)
class VerifyTier:
    name: str
    commands: tuple[str, ...]


@dataclass(frozen=True)
class Story:
    path: Path
    id: str
    title: str
    priority: str = "normal"
    max_retries: int | None = None
    verify: tuple[VerifyTier, ...] = ()
    scope: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    base_ref: str | None = None
    allow_empty: bool = False  # may pass without a commit of its own
    # False: the repository's memory is neither told this story nor learns from it; None:
    # as the home says (memory_enabled); True cannot turn on what the home turned off
    memory: bool | None = None
    # the story's model and reasoning effort, as written: one string for both roles, or
    # {worker: ..., reviewer: ...}; None: config/roles.yaml's (resolved by hero.models)
    model: str | Mapping[str, str] | None = field(default=None, hash=False)
    reasoning_effort: str | Mapping[str, str] | None = field(default=None, hash=False)
    # where the story came from: {repo, issue, url, author} of a GitHub issue; None: a person
    source: Mapping[str, Any] | None = field(default=None, hash=False)
    body: str = ""
    goal: str = ""
    acceptance_criteria: tuple[str, ...] = ()
    constraints: str = ""
    out_of_scope: str = ""
    feedback: str = ""
    plan: str = ""  # the plan whose folder holds the file ("" for a loose story); not a field
    # (st_dev, st_ino) of the file parse_story read, from fstat on the descriptor it read;
    # None when the story came from text, or was read through a symlink (which hero reads,
    # but never writes back through). append_feedback(..., expect=story.file_id) writes only
    # to this very file. Not part of the story's value: two reads of one text are equal.
    file_id: FileId | None = field(default=None, compare=False)

    @property
    def ref(self) -> StoryRef:
        """The story's name in the home: its plan and its id (see :mod:`hero.names`)."""
        return StoryRef(self.plan, self.id)


# ----------------------------------------------------------------------------- parsing


def parse_story(path: Path) -> Story:
    """Read and validate the story file at ``path``; its :attr:`Story.file_id` is the
    identity of the file read."""
    path = Path(path)
    raw, file_id = _read_story_file(path)
    text = _decode(raw, path)
    try:
        story = parse_story_text(text, path)
    except RecursionError:  # a last resort: hero's YAML loader limits nesting first
        raise StoryError(path, "frontmatter", "nested too deeply to be read") from None
    return replace(story, file_id=file_id)


def parse_story_text(text: str, path: Path) -> Story:
    """Validate a story given as text; ``path`` is used for errors and kept on the Story."""
    path = Path(path)
    post = _load_post(text, path)
    fields = _validate_fields(post.metadata, path)
    sections = _split_body(post.content)
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
        acceptance_criteria=_list_items(ac_text),
        constraints=sections.get("constraints", ""),
        out_of_scope=sections.get("out_of_scope", ""),
        feedback=sections.get("feedback", ""),
        **fields,
    )


# O_NONBLOCK: a FIFO never blocks the open; it is refused once fstat sees it.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_WHAT = "markdown file"


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
        _check_kind(os.stat(path).st_mode if linked else st.st_mode, _WHAT)
        fd = os.open(path, _READ_FLAGS if linked else _READ_FLAGS | os.O_NOFOLLOW)
        try:
            info, data = _read_open(fd)
        finally:
            os.close(fd)
    except ValueProblem as exc:
        raise StoryError(path, "file", exc.message) from None
    except OSError as exc:
        raise StoryError(path, "file", f"cannot read the file: {_reason(exc)}") from None
    return data, None if linked else (info.st_dev, info.st_ino)


def _read_open(fd: int) -> tuple[os.stat_result, bytes]:
    """fstat of the open ``fd`` and its bytes: ValueProblem unless it is a regular file of at
    most MAX_STORY_BYTES, checked before reading and while reading (a file that grows
    meanwhile, or says it is smaller than it is)."""
    info = os.fstat(fd)
    _check_kind(info.st_mode, _WHAT)
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


def _reason(exc: OSError) -> str:
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
    text = _normalize_newlines(text.removeprefix("\ufeff"))
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


def _decode(data: bytes, path: Path) -> str:
    try:
        return decode_text(data, what="markdown file")
    except ValueProblem as exc:
        raise StoryError(path, "file", exc.message) from None


def _normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


@dataclass(frozen=True)
class _Layout:
    """A story file's text cut at its frontmatter: the delimiter lines kept as written."""

    open_line: str
    fm_text: str
    close_line: str
    body: str


def _layout(text: str) -> _Layout:
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
            return _Layout(lines[0], "\n".join(lines[1:i]), lines[i], "\n".join(lines[i + 1 :]))
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
            layout = _layout(text)
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
        if f.required or value != _STORY_DEFAULTS[f.name]:
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

    content = _clean(_normalize_newlines(str(body)))
    # A blank line between the frontmatter and the body, as in hero's examples.
    post = frontmatter.Post(f"\n{content}\n" if content else "", story_handler())
    post.metadata = _plain(metadata)
    text = _render(post)
    return text, parse_story_text(text, path)


def _render(post: frontmatter.Post, *, open_line: str = "---", close_line: str = "---") -> str:
    """The one place a story's text is made: ``frontmatter.dumps`` with hero's handler."""
    import frontmatter

    return frontmatter.dumps(post, start_delimiter=open_line, end_delimiter=close_line)


# ----------------------------------------------------------------------------- fields


@dataclass(frozen=True)
class StoryField:
    """One field of a story's frontmatter, declared once: the reference page
    (docs/story-fields.md) shows it, and parsing reads it with ``read``."""

    name: str
    type: str
    """The type as the reference shows it."""
    doc: str
    """What the field does, in a line or two."""
    read: Callable[[Any, Path, Mapping[str, Any]], Any]
    """The Story's value from the YAML value (None: absent), given the fields read before
    it; raises StoryError naming the field."""
    default: str = ""
    """The default as the reference shows it; "" for a required field."""

    @property
    def required(self) -> bool:
        return not self.default


def _read_id(value: Any, path: Path, fields: Mapping[str, Any]) -> str:
    story_id = _required_str(value, "id", path)
    problem = story_id_problem(story_id)
    if problem is not None:
        raise StoryError(path, "id", problem)
    return story_id


def _read_title(value: Any, path: Path, fields: Mapping[str, Any]) -> str:
    return _required_str(value, "title", path)


def _read_priority(value: Any, path: Path, fields: Mapping[str, Any]) -> str:
    if value is None:
        return "normal"
    if value not in PRIORITIES:
        raise StoryError(
            path, "priority", f"expected one of {', '.join(PRIORITIES)}; found {describe(value)}"
        )
    return str(value)


def _read_max_retries(value: Any, path: Path, fields: Mapping[str, Any]) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise StoryError(
            path, "max_retries", f"expected a whole number >= 1; found {describe(value)}"
        )
    return value


def _read_depends_on(value: Any, path: Path, fields: Mapping[str, Any]) -> tuple[str, ...]:
    depends_on = _str_list(value, "depends_on", path)
    for dep in depends_on:
        if not is_story_id(dep):
            raise StoryError(
                path, "depends_on", f"expected story ids (pattern {ID_RE}); found {quote(dep)}"
            )
        if dep == fields["id"]:
            raise StoryError(
                path,
                "depends_on",
                f"expected ids of other stories; found the story's own id {quote(dep)}",
            )
    return depends_on


def _read_base_ref(value: Any, path: Path, fields: Mapping[str, Any]) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise StoryError(
            path, "base_ref", f"expected a git ref as a string (e.g. main); found {describe(value)}"
        )
    return value.strip() if isinstance(value, str) else None


def _read_allow_empty(value: Any, path: Path, fields: Mapping[str, Any]) -> bool:
    if value is not None and not isinstance(value, bool):
        raise StoryError(path, "allow_empty", f"expected true or false; found {describe(value)}")
    return bool(value)


def _read_memory(value: Any, path: Path, fields: Mapping[str, Any]) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise StoryError(path, "memory", f"expected true or false; found {describe(value)}")
    return value if isinstance(value, bool) else None


def _per_role(
    value: Any, path: Path, name: str, check: Callable[[str], str | None], what: str
) -> str | dict[str, str] | None:
    """``model:`` / ``reasoning_effort:``: one string for both roles, or a mapping of
    :data:`MODEL_ROLES` to strings; each string stripped and checked by ``check`` (None:
    fine, else what is wrong with it)."""
    if value is None:
        return None
    expected = f"expected {what}, or a mapping like `{{worker: ..., reviewer: ...}}`"
    if isinstance(value, str):
        return _role_value(value, path, name, check, what)
    if not isinstance(value, dict):
        raise StoryError(path, name, f"{expected}; found {describe(value)}")
    if not value:
        raise StoryError(path, name, f"{expected}; found an empty mapping")
    out: dict[str, str] = {}
    for role, item in value.items():
        if role not in MODEL_ROLES:
            raise StoryError(
                path,
                name,
                f"unknown role {quote(str(role))}; expected {' or '.join(MODEL_ROLES)}",
            )
        if not isinstance(item, str):
            raise StoryError(path, f"{name}.{role}", f"expected {what}; found {describe(item)}")
        out[role] = _role_value(item, path, f"{name}.{role}", check, what)
    return out


def _role_value(
    text: str, path: Path, where: str, check: Callable[[str], str | None], what: str
) -> str:
    stripped = text.strip()
    problem = f"expected {what}; found an empty string" if not stripped else check(stripped)
    if problem:
        raise StoryError(path, where, problem)
    return stripped


def model_problem(text: str) -> str | None:
    if len(text) > MAX_MODEL_CHARS:
        return f"expected at most {MAX_MODEL_CHARS} characters; found {len(text)}"
    if any(c.isspace() or not c.isprintable() for c in text):
        return f"expected a model name without spaces or control characters; found {quote(text)}"
    return None


def effort_problem(text: str) -> str | None:
    if _EFFORT_RE.match(text):
        return None
    return (
        "expected a word like minimal, low, medium or high (letters, digits, '_', '-'; at "
        f"most 32 characters), or {EFFORT_NOT_SENT} (not sent); found {quote(text)}"
    )


def role_value(value: str | Mapping[str, str] | None, role: str) -> str | None:
    """The value a story's ``model:`` or ``reasoning_effort:`` gives ``role``; None: none."""
    if value is None or isinstance(value, str):
        return value
    return value.get(role)


#: A story's frontmatter fields, in the order hero writes them.
FIELDS = (
    StoryField(
        "id",
        "story id",
        "The story's name: its branch is hero/<id>, its run record runs/state/<id>.json. "
        f"Letters, digits, '.', '_' or '-', starting with a letter or digit (pattern `{ID_RE}`); "
        f"at most {MAX_ID_CHARS} characters; no '..', not ending in '.' or '.lock'; not "
        f"{' or '.join(RESERVED_IDS)} (reserved for plans' branches and paths).",
        _read_id,
    ),
    StoryField("title", "string", "One line saying what the story is.", _read_title),
    StoryField(
        "priority",
        "one of " + ", ".join(PRIORITIES),
        "Which of the waiting stories runs first.",
        _read_priority,
        "normal",
    ),
    StoryField(
        "max_retries",
        "whole number >= 1",
        "Worker -> Verifier -> Reviewer rounds for this story before hero gives up on it.",
        _read_max_retries,
        "max_retries of config/roles.yaml",
    ),
    StoryField(
        "verify",
        "list of commands, or mapping of tier name -> list of commands",
        "The checks after each Worker round: shell commands run in the worktree, each must "
        "exit 0. Named tiers run in the order written and fail fast: a red tier skips the "
        "later ones; every command within a tier runs.",
        lambda value, path, fields: _verify(value, path),
        "default_verify of config/roles.yaml",
    ),
    StoryField(
        "scope",
        "list of paths and globs",
        "What the Worker may change: .gitignore-style globs (`*` within a path component, "
        "`**` across, a glob without `/` at any depth). A write outside is refused, a bash "
        "command's change outside put back; protected files win over scope.",
        lambda value, path, fields: _str_list(value, "scope", path),
        "none: every file",
    ),
    StoryField(
        "depends_on",
        "list of story ids",
        "Stories this one builds on: it waits until each has passed, then starts from their "
        "work (base_ref is then not used).",
        _read_depends_on,
        "[]",
    ),
    StoryField(
        "base_ref",
        "git ref",
        "The branch, tag or commit the story's branch starts from.",
        _read_base_ref,
        "target_base_ref of config/roles.yaml, else the repository's current HEAD",
    ),
    StoryField(
        "allow_empty",
        "true or false",
        "Whether the story may pass without a commit of its own.",
        _read_allow_empty,
        "false",
    ),
    StoryField(
        "memory",
        "true or false",
        "false: the repository's memory (docs/memory.md) is neither shown to this story nor "
        "learns from it; true cannot turn on a memory the home turned off.",
        _read_memory,
        "memory_enabled of config/roles.yaml",
    ),
    StoryField(
        "model",
        "model name, or mapping of worker / reviewer -> model name",
        "The model the story's Worker and Reviewer use: `<model>` on the role's provider, or "
        "`<provider>:<model>` when the part before the first ':' is the name of a file in "
        "config/providers/ (so `qwen2.5:7b` stays a model name). A mapping sets the roles "
        "apart; a role it leaves out keeps its own. `hero run --model` overrides it.",
        lambda value, path, fields: _per_role(
            value, path, "model", model_problem, "a model name as a string"
        ),
        "the role's model in config/roles.yaml",
    ),
    StoryField(
        "reasoning_effort",
        "word, or mapping of worker / reviewer -> word",
        "The reasoning effort sent with the story's requests (minimal, low, medium, high, "
        f"...); `{EFFORT_NOT_SENT}`: not sent. A mapping sets the roles apart.",
        lambda value, path, fields: _per_role(
            value, path, "reasoning_effort", effort_problem, "a word like low or high"
        ),
        "the role's, or the provider's default_reasoning_effort when the model is on "
        "another provider",
    ),
    StoryField(
        "source",
        "mapping: " + ", ".join(SOURCE_KEYS),
        "Where a story taken from a GitHub issue came from (hero writes it): OWNER/NAME, the "
        "issue's number, its URL and author; repo and issue required.",
        lambda value, path, fields: _source(value, path),
        "none (a story a person wrote)",
    ),
)
KNOWN_FIELDS = tuple(f.name for f in FIELDS)
#: The Story's value of each field when the frontmatter does not give it.
_STORY_DEFAULTS = {f.name: f.default for f in dataclass_fields(Story) if f.name in KNOWN_FIELDS}


def _validate_fields(meta: dict[Any, Any], path: Path) -> dict[str, Any]:
    """The frontmatter ``meta`` read field by field (:data:`FIELDS`); an unknown field is
    an error with the closest known one."""
    for key in meta:
        if key not in KNOWN_FIELDS:
            name = str(key)
            hint = did_you_mean(name, KNOWN_FIELDS)
            raise StoryError(
                path, name, f"unknown field{hint}; known fields: {', '.join(KNOWN_FIELDS)}"
            )
    values: dict[str, Any] = {}
    for f in FIELDS:
        values[f.name] = f.read(meta.get(f.name), path, values)
    return values


def _source(value: Any, path: Path) -> dict[str, Any] | None:
    """``source:``: a GitHub issue, as ``{repo: OWNER/NAME, issue: N, url: ..., author: ...}``
    (repo and issue required)."""
    if value is None:
        return None
    expected = "expected a mapping like `{repo: OWNER/NAME, issue: 12, url: ..., author: ...}`"
    if not isinstance(value, dict):
        raise StoryError(path, "source", f"{expected}; found {describe(value)}")
    for key in value:
        if key not in SOURCE_KEYS:
            name = str(key)
            raise StoryError(
                path,
                f"source.{name}",
                f"unknown key{did_you_mean(name, SOURCE_KEYS)}; known keys: {', '.join(SOURCE_KEYS)}",
            )
    out: dict[str, Any] = {}
    for key in ("repo", "issue"):
        if value.get(key) is None:
            raise StoryError(path, f"source.{key}", f"required; {expected}")
    for key in ("repo", "url", "author"):
        text = value.get(key)
        if text is None:
            continue
        if not isinstance(text, str) or not text.strip() or "\n" in text:
            raise StoryError(
                path, f"source.{key}", f"expected a one-line string; found {describe(text)}"
            )
        out[key] = text.strip()
    if not re.match(r"^[^/\s]+/[^/\s]+$", out["repo"]):
        raise StoryError(path, "source.repo", f"expected OWNER/NAME; found {quote(out['repo'])}")
    issue = value["issue"]
    if isinstance(issue, bool) or not isinstance(issue, int) or issue < 1:
        raise StoryError(
            path, "source.issue", f"expected an issue number >= 1; found {describe(issue)}"
        )
    return {
        "repo": out["repo"],
        "issue": issue,
        **{k: out[k] for k in ("url", "author") if k in out},
    }


def _required_str(value: Any, key: str, path: Path) -> str:
    if value is None:
        raise StoryError(path, key, "required field is missing; expected a non-empty string")
    if not isinstance(value, str):
        raise StoryError(
            path, key, f"expected a string (quote it in the YAML); found {describe(value)}"
        )
    text = " ".join(value.split())
    if not text:
        raise StoryError(path, key, "expected a non-empty string; found an empty string")
    return text


def _str_list(value: Any, key: str, path: Path) -> tuple[str, ...]:
    try:
        return string_list(value)
    except ValueProblem as exc:
        raise StoryError(path, key, exc.message) from None


def _verify(value: Any, path: Path) -> tuple[VerifyTier, ...]:
    if value is None:
        return ()
    expected = "expected a list of shell commands, or a mapping of tier name -> list of commands"
    if isinstance(value, str | list):
        commands = _commands(value, path, "")
        return (VerifyTier(FLAT_VERIFY_TIER, commands),) if commands else ()
    if not isinstance(value, dict):
        raise StoryError(path, "verify", f"{expected}; found {describe(value)}")
    tiers: list[VerifyTier] = []
    for name, commands in value.items():
        if not isinstance(name, str) or not name.strip():
            raise StoryError(
                path,
                "verify",
                f"expected tier names to be non-empty strings; found {describe(name)}",
            )
        if not isinstance(commands, str | list):
            raise StoryError(
                path,
                "verify",
                f"tier '{name}': expected a command or a list of commands; found {describe(commands)}",
            )
        tier_commands = _commands(commands, path, f"tier '{name}': ")
        if not tier_commands:
            raise StoryError(
                path,
                "verify",
                f"tier '{name}': expected at least one command; found an empty list",
            )
        tiers.append(VerifyTier(name.strip(), tier_commands))
    return tuple(tiers)


def _commands(value: str | list[Any], path: Path, where: str) -> tuple[str, ...]:
    try:
        return string_list(value, noun="command strings", item="command")
    except ValueProblem as exc:
        raise StoryError(path, "verify", f"{where}{exc.message}") from None


# ----------------------------------------------------------------------------- body


@dataclass(frozen=True)
class _Heading:
    index: int  # line index
    level: int
    key: str  # normalized title


def _scan(lines: list[str]) -> tuple[list[_Heading], str | None]:
    """ATX headings outside fenced code blocks, and the fence still open at the end (if any)."""
    headings: list[_Heading] = []
    fence: str | None = None
    for i, line in enumerate(lines):
        fence, is_fence = _fence_step(line, fence)
        if is_fence or fence is not None:
            continue
        h = _HEADING_RE.match(line)
        if h:
            headings.append(_Heading(i, len(h.group(1)), _heading_key(h.group(2) or "")))
    return headings, fence


def _fence_step(line: str, fence: str | None) -> tuple[str | None, bool]:
    """Track fenced code blocks: (fence open after this line, whether the line is a fence)."""
    m = _FENCE_RE.match(line)
    if m is None:
        return fence, False
    marker, rest = m.group(1), m.group(2)
    if fence is not None:
        closes = marker[0] == fence[0] and len(marker) >= len(fence) and not rest.strip()
        return (None, True) if closes else (fence, False)
    if marker[0] == "`" and "`" in rest:  # not a fence: inline code like ```x```
        return None, False
    return marker, True


def _heading_key(title: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", title.lower()).split())


def _sections(lines: list[str], headings: list[_Heading]) -> Iterator[tuple[_Heading, int]]:
    """Each level-1/2 heading with the line index where its section ends."""
    tops = [h for h in headings if h.level <= 2]
    for n, h in enumerate(tops):
        end = tops[n + 1].index if n + 1 < len(tops) else len(lines)
        yield h, end


def _split_body(body: str) -> dict[str, str]:
    lines = body.split("\n")
    headings, _ = _scan(lines)
    found: dict[str, list[str]] = {}
    dropped: list[tuple[int, int]] = []
    for h, end in _sections(lines, headings):
        if h.key == _FEEDBACK_KEY:
            found.setdefault("feedback", []).append(_clean("\n".join(lines[h.index + 1 : end])))
            dropped.append((h.index, end))
        elif h.key in _SECTION_KEYS:
            text = _clean("\n".join(lines[h.index + 1 : end]))
            found.setdefault(_SECTION_KEYS[h.key], []).append(text)
    kept = [
        line for i, line in enumerate(lines) if not any(start <= i < end for start, end in dropped)
    ]
    out = {name: "\n\n".join(t for t in texts if t) for name, texts in found.items()}
    out["body"] = _clean("\n".join(kept))
    return out


def _clean(text: str) -> str:
    """Drop leading blank lines and trailing whitespace."""
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines).rstrip()


def _list_items(text: str) -> tuple[str, ...]:
    """Items of a markdown list (top level); paragraphs when the section has no list."""
    if not text:
        return ()
    lines = text.split("\n")
    base: int | None = None
    for line in lines:
        m = _ITEM_RE.match(line)
        if m:
            indent = len(m.group(1).expandtabs(4))
            base = indent if base is None else min(base, indent)
    if base is None:
        return tuple(" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip())
    items: list[str] = []
    current: str | None = None
    after_blank = False
    for line in lines:
        m = _ITEM_RE.match(line)
        indent = len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())
        if m and indent == base:
            if current:
                items.append(current)
            current = _CHECKBOX_RE.sub("", (m.group(2) or "").strip()).strip()
        elif not line.strip():
            after_blank = True
            continue
        elif current is not None and after_blank and indent <= base:
            items.append(current)  # a paragraph after the list ends the last item
            current = None
        elif current is not None:
            # a nested list item stays on its own line; a wrapped line joins the item
            sep = "\n" if m else " "
            current = f"{current}{sep}{line.strip()}".strip()
        after_blank = False
    if current:
        items.append(current)
    return tuple(items)


# ----------------------------------------------------------------------------- feedback


def append_feedback(path: Path, round_no: int, text: str, *, expect: FileId | None = None) -> bool:
    """Append reviewer feedback for ``round_no`` to the story file.

    Adds the ``## Reviewer Feedback (auto)`` heading when the file's last section is not
    already that heading, then ``### Round N`` and ``text``. Returns False (and writes
    nothing) when ``### Round N`` is already under a feedback heading.

    The file is rewritten atomically by the story writer (:func:`_rewritten`, then a new
    file renamed over it), and only grows: every byte the user wrote stays as it was
    (frontmatter text, key order, comments, BOM, line endings); the feedback uses the file's
    line ending style.

    Headings of level 1-3 inside ``text`` are demoted to level 4 (outside code fences) and an
    unclosed code fence is closed, so the appended feedback cannot break the file's sections.

    The story file is in others' reach while a story runs: someone may swap it for a symlink
    to another file (``config.local.yaml``, ``~/.bashrc``) or for another file. It is read
    without following a symlink at its last component, and written only if it is still the
    regular file read, checked once more right before the rename; with ``expect`` (a
    :attr:`Story.file_id`), it must also be that file. Otherwise nothing is written and
    :class:`StoryFileChanged` says what is there now. The file behind a link is never
    written. See :func:`write_feedback` for the file's identity after the write.
    """
    return write_feedback(path, round_no, text, expect=expect).appended


@dataclass(frozen=True)
class FeedbackWrite:
    """What :func:`write_feedback` did."""

    appended: bool  # False: that round's feedback was in the file already; nothing written
    file_id: FileId  # the story file's identity now: the new file when appended


def write_feedback(
    path: Path, round_no: int, text: str, *, expect: FileId | None = None
) -> FeedbackWrite:
    """:func:`append_feedback`, also giving the story file's identity afterwards: each
    append renames a new file over the old one (a new inode), so the ``expect`` of the next
    round is this call's ``file_id``."""
    path = Path(path)
    if isinstance(round_no, bool) or not isinstance(round_no, int) or round_no < 0:
        raise ValueError(f"round_no must be a whole number >= 0, got {round_no!r}")
    try:
        # the directory as named (a story may live under a symlinked directory); the file
        # itself is opened in it without following a link, and replaced in that very one
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StoryError(path, "file", f"cannot read the file: {_reason(exc)}") from None
    try:
        raw, info = _read_for_rewrite(dir_fd, path, expect)
        new_body = _with_feedback(_decode(raw, path), round_no, text)
        if new_body is None:
            return FeedbackWrite(False, (info.st_dev, info.st_ino))
        new_id = _replace_story_file(dir_fd, path, _rewritten(path, raw, new_body), info)
    finally:
        os.close(dir_fd)
    return FeedbackWrite(True, new_id)


def _with_feedback(content: str, round_no: int, text: str) -> str | None:
    """The story's body (LF) with the feedback of ``round_no`` appended; None when that
    round is under a feedback heading already."""
    normalized = _normalize_newlines(content)
    try:
        body = _layout(normalized).body
    except ValueProblem:  # no frontmatter hero can cut: the whole text is the body
        body = normalized
    lines = body.split("\n")
    headings, open_fence = _scan(lines)

    rounds: set[int] = set()
    last_top: _Heading | None = None
    for h, end in _sections(lines, headings):
        last_top = h
        if h.key != _FEEDBACK_KEY:
            continue
        for sub in headings:
            if h.index < sub.index < end and sub.level == 3:
                m = _ROUND_RE.match(sub.key)
                if m:
                    rounds.add(int(m.group(1)))
    if round_no in rounds:
        return None

    parts: list[str] = []
    if normalized and not normalized.endswith("\n"):
        parts.append("\n")
    if open_fence is not None:
        parts.append(open_fence + "\n")
    if last_top is None or last_top.key != _FEEDBACK_KEY or open_fence is not None:
        parts.append(("\n" if normalized else "") + FEEDBACK_HEADING + "\n")
    parts.append(f"\n### Round {round_no}\n\n{_sanitize_feedback(text)}\n")
    return body + "".join(parts)


def _read_for_rewrite(
    dir_fd: int, path: Path, expect: FileId | None
) -> tuple[bytes, os.stat_result]:
    """The story file's bytes and fstat, opened in ``dir_fd`` without following a link:
    StoryFileChanged unless it is a regular file (and, with ``expect``, that very file)."""
    name = path.name
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise _changed(path, dir_fd, expect is not None)
        if not stat.S_ISREG(st.st_mode):  # a FIFO, a device: never opened
            _check_kind(st.st_mode, _WHAT)
        try:
            fd = os.open(name, _READ_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):  # a link swapped in since the stat
                raise _changed(path, dir_fd, True) from None
            raise
        try:
            info, data = _read_open(fd)
        finally:
            os.close(fd)
    except ValueProblem as exc:
        if expect is not None:
            raise StoryFileChanged(
                path, f"is no longer the file hero read: {exc.message}"
            ) from None
        raise StoryError(path, "file", exc.message) from None
    except FileNotFoundError as exc:
        if expect is not None:
            raise StoryFileChanged(path, "is gone") from None
        raise StoryError(path, "file", f"cannot read the file: {_reason(exc)}") from None
    except OSError as exc:
        raise StoryError(path, "file", f"cannot read the file: {_reason(exc)}") from None
    if expect is not None and (info.st_dev, info.st_ino) != tuple(expect):
        raise StoryFileChanged(path, "is a different file than the one hero read")
    return data, info


def _changed(path: Path, dir_fd: int, now: bool) -> StoryFileChanged:
    """The error for a story file that is a symlink (``now``: it was not when hero read it)."""
    try:
        target = f" (to {os.readlink(path.name, dir_fd=dir_fd)})"
    except OSError:
        target = ""
    if now:
        return StoryFileChanged(path, f"is now a symlink{target}")
    return StoryFileChanged(path, f"is a symlink{target}; hero does not write through links")


def _replace_story_file(dir_fd: int, path: Path, data: bytes, read: os.stat_result) -> FileId:
    """Write ``data`` to a new dot-file in ``dir_fd`` (the inbox ignores dot-files), flush
    it, check that ``path`` is still the file ``read`` described, and rename the new file
    over it: a reader sees the old file or the new one, never half. The rename replaces the
    directory entry; it never writes into whatever the entry points to. The new file's
    identity."""
    name = path.name
    while True:
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o666,
                dir_fd=dir_fd,
            )
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise StoryError(path, "file", f"cannot write the file: {_reason(exc)}") from None
    try:
        try:
            os.fchmod(fd, stat.S_IMODE(read.st_mode))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            written = os.fstat(fd)
        finally:
            os.close(fd)
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise StoryFileChanged(path, "is gone") from None
        if stat.S_ISLNK(now.st_mode):
            raise _changed(path, dir_fd, True)
        if (now.st_dev, now.st_ino) != (read.st_dev, read.st_ino):
            raise StoryFileChanged(path, "is a different file than the one hero read")
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        if isinstance(exc, OSError):
            raise StoryError(path, "file", f"cannot write the file: {_reason(exc)}") from None
        raise
    with contextlib.suppress(OSError):  # not every file system can sync a directory
        os.fsync(dir_fd)
    return (written.st_dev, written.st_ino)


def _rewritten(path: Path, raw: bytes, new_body: str) -> bytes:
    """The bytes of the story file whose bytes were ``raw`` with ``new_body`` (LF) as its body.

    The text comes from :func:`_render` (``frontmatter.dumps``), with the file's own YAML
    text, delimiter lines, line endings and BOM handed back to it, so that a file hero can
    read comes out with its frontmatter byte for byte as the user wrote it. Where rendering
    would still change the user's bytes (mixed or lone-CR line endings, a frontmatter hero
    cannot read), the original frontmatter block is kept verbatim instead: only the body
    changes. ``new_body`` must start with the old body: append_feedback only appends.
    """
    import frontmatter

    content = _decode(raw, path)
    crlf = "\r\n" in content
    bom = raw.startswith(b"\xef\xbb\xbf")
    normalized = _normalize_newlines(content)

    def encode(text: str) -> bytes:
        return (text.replace("\n", "\r\n") if crlf else text).encode("utf-8")

    data: bytes | None = None
    try:
        layout: _Layout | None = _layout(normalized)
    except ValueProblem:
        layout = None
    if layout is not None:
        handler = story_handler(layout.fm_text)
        try:
            meta = handler.load(layout.fm_text)
        except ValueProblem:
            meta = None
        if isinstance(meta, dict):
            post = frontmatter.Post(new_body, handler)
            post.metadata = meta
            text = _render(post, open_line=layout.open_line, close_line=layout.close_line)
            data = (b"\xef\xbb\xbf" if bom else b"") + encode(text)
    old_body = layout.body if layout is not None else normalized
    if not new_body.startswith(old_body):
        raise ValueError("the new body must start with the story's current body")
    appended = raw + encode(new_body[len(old_body) :])
    uniform = encode(normalized) == raw.removeprefix(b"\xef\xbb\xbf")  # one kind of line end
    if data is None or not uniform:
        data = appended  # rendering would change what the user wrote: keep their bytes
    return data


def _sanitize_feedback(text: str) -> str:
    text = _normalize_newlines(str(text)).strip("\n").rstrip()
    if not text.strip():
        return "(no feedback text)"
    return contain_sections(text)


def contain_sections(text: str) -> str:
    """``text`` made safe to put inside a story section: headings of level 1-3 demoted in
    every form (:func:`demote_headings`) and an unclosed fence closed, so that nothing in it
    can open a section (``## Acceptance Criteria``, the feedback heading) or hide the ones
    after, for hero's parser or for a person reading it rendered."""
    out = demote_headings(text).split("\n")
    fence: str | None = None
    for line in out:
        fence, _ = _fence_step(line, fence)
    if fence is not None:
        out.append(fence)
    return "\n".join(out)


#: What may stand before a heading's ``#`` (or a setext heading's text) and leave it a
#: heading to a markdown renderer: indentation and the markers of block quotes and list
#: items, nested (``> - ## X``). Any indentation: a line of an indented code block that
#: looks like a heading is demoted too, which changes it by two ``#``.
_CONTAINER = r"(?:[ \t]*(?:>|[-*+](?=[ \t])|\d{1,9}[.)](?=[ \t])))*[ \t]*"
_CONTAINER_RE = re.compile(_CONTAINER)
_ATX_RE = re.compile(rf"^({_CONTAINER})(#{{1,6}})(?=[ \t]|$)")
#: A setext heading's underline (``===`` level 1, ``---`` level 2), in block quotes or
#: indented; a list marker in front of it starts an item instead.
_UNDERLINE_RE = re.compile(r"^[ \t>]*(?:=+|-+)[ \t]*$")
#: A thematic break (``---``, ``* * *``, ``___``): no paragraph, so nothing to underline.
_RULE_RE = re.compile(rf"^{_CONTAINER}(?:(?:-[ \t]*){{3,}}|(?:\*[ \t]*){{3,}}|(?:_[ \t]*){{3,}})$")
#: The start of an HTML heading tag of level 1-3, opening or closing (``<h2>``, ``</H1>``,
#: ``<h3 class=x>``, also split over lines).
_HTML_HEADING_RE = re.compile(r"<(/?h[1-3])(?=[\s/>]|$)", re.IGNORECASE)


def demote_headings(text: str) -> str:
    """``text`` (markdown) with no heading of level 1-3 in any form a markdown renderer or
    hero's story parser knows, outside code fences, its words kept:

    - ATX (``## X``), also in block quotes and list items (``> ## X``, ``- ## X``,
      ``1. ## X``) and indented: level 4 (``#### X``);
    - setext (a line of text over ``===`` or ``---``): the text line made a level-4 ATX
      heading (``#### X``), the underline left below it (a rule or a line of ``=``);
    - HTML (``<h2>X</h2>``, any case, with attributes): the tags' ``<`` written as
      ``&lt;``, so that they show as text.

    Levels 4-6 are left as they are: hero's sections are level 2 (rounds of feedback
    level 3). :func:`contain_sections` then closes a fence left open."""
    out: list[str] = []
    fence: str | None = None
    text_line: int | None = None  # the line of ``out`` an underline would make a heading
    for line in text.split("\n"):
        fence, is_fence = _fence_step(line, fence)
        if is_fence or fence is not None:
            out.append(line)
            text_line = None
            continue
        line = _HTML_HEADING_RE.sub(r"&lt;\1", line)
        atx = _ATX_RE.match(line)
        if atx is not None:
            if len(atx.group(2)) <= 3:
                line = f"{atx.group(1)}####{line[atx.end() :]}"
            text_line = None
        elif text_line is not None and _UNDERLINE_RE.match(line):
            before = out[text_line]
            cut = _CONTAINER_RE.match(before)
            at = cut.end() if cut is not None else 0
            out[text_line] = f"{before[:at]}#### {before[at:]}"
            text_line = None
        elif not line.strip(" \t>") or _RULE_RE.match(line):
            text_line = None
        else:
            text_line = len(out)
        out.append(line)
    return "\n".join(out)
