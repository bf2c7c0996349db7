"""Reading files and YAML written by people: one home for the rules every hero file shares.

Files are read by :func:`read_file`: a regular file only, with a size limit enforced while
reading, opened so that a FIFO never blocks. Duplicate keys are refused, tags beyond plain
YAML are refused (a SafeLoader), nesting deeper than :data:`MAX_YAML_DEPTH` and aliases
that contain themselves are refused, errors name the line and describe values. Functions
here raise :class:`ValueProblem`, a message without file or field: the caller (config,
story) adds those and raises its own error type.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hero.errors import HeroError

#: Levels of nested lists and mappings a YAML text may have: far more than any hero file
#: needs, far fewer than would exhaust Python's stack (a few frames per level).
MAX_YAML_DEPTH = 64


class ValueProblem(HeroError):
    """What is wrong with a text or a value; ``message`` is one line, with no file or field.

    Not a ValueError on purpose: python-frontmatter's ``parse`` swallows ValueError from a
    handler and carries on with empty metadata; a ValueProblem always reaches the caller.
    """

    def __init__(self, message: str) -> None:
        self.message = " ".join(str(message).split())
        super().__init__(self.message)


def read_file(path: Path, *, limit: int, what: str = "file", follow_link: bool = True) -> bytes:
    """The bytes of the regular file at ``path`` (a symlink is followed, unless ``follow_link``
    is False: then a symlink as its last component is refused), at most ``limit``.

    ValueProblem for anything that is not a regular file (a directory, a FIFO, a device, a
    socket) and for a file over ``limit`` bytes, checked before reading and while reading
    (a file that grows meanwhile, or says it is smaller than it is). The kind of file is
    checked before it is opened and again, on the open descriptor, after: nothing swapped in
    between is read. It is opened non-blocking, so a FIFO never blocks the caller. OSError
    (FileNotFoundError, PermissionError, ...) reaches the caller as it is.
    """
    _check_kind((os.stat(path) if follow_link else os.lstat(path)).st_mode, what)
    nofollow = 0 if follow_link else os.O_NOFOLLOW  # a link swapped in since: ELOOP
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | nofollow)
    try:
        info = os.fstat(fd)
        _check_kind(info.st_mode, what)
        if info.st_size > limit:
            raise ValueProblem(f"too large: expected at most {limit} bytes; found {info.st_size}")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise ValueProblem(f"too large: expected at most {limit} bytes; found more")
    return b"".join(chunks)


def _check_kind(mode: int, what: str) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        kind = "a directory"
    elif stat.S_ISFIFO(mode):
        kind = "a FIFO (named pipe)"
    elif stat.S_ISCHR(mode):
        kind = "a character device"
    elif stat.S_ISBLK(mode):
        kind = "a block device"
    elif stat.S_ISSOCK(mode):
        kind = "a socket"
    elif stat.S_ISLNK(mode):
        kind = "a symlink"
    else:
        kind = "a special file"
    raise ValueProblem(f"expected a regular {what}; found {kind}")


@functools.cache
def strict_loader() -> type:
    """A yaml SafeLoader that refuses duplicate mapping keys (the later one would win
    silently), nesting deeper than MAX_YAML_DEPTH and aliases that contain themselves."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def __init__(self, stream: Any) -> None:
            super().__init__(stream)
            self._depth = 0
            self._open_anchors: set[str] = set()

        def compose_node(self, parent: Any, index: Any) -> Any:
            # PyYAML composes (and later constructs) nested nodes by recursion: a text of
            # a few KB nested a thousand levels deep would end in RecursionError.
            event: Any = self.peek_event()  # type: ignore[no-untyped-call]
            mark: Any = event.start_mark
            if isinstance(event, yaml.AliasEvent) and event.anchor in self._open_anchors:
                raise yaml.composer.ComposerError(
                    None, None, f"found an alias *{event.anchor} inside its own anchor", mark
                )
            if self._depth >= MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"expected at most {MAX_YAML_DEPTH} levels of nested lists and mappings; "
                    "found more",
                    mark,
                )
            anchor = None if isinstance(event, yaml.AliasEvent) else event.anchor
            if anchor is not None:
                self._open_anchors.add(anchor)
            self._depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1
                if anchor is not None:
                    self._open_anchors.discard(anchor)

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def decode_text(data: bytes, *, what: str = "text file", secret: bool = False) -> str:
    """UTF-8 text (a leading BOM dropped); ValueProblem for binary data or bytes not UTF-8.

    ``what`` names the kind of file in the message; with ``secret`` the message never
    quotes a byte of the file.
    """
    if b"\x00" in data:
        raise ValueProblem(f"expected a UTF-8 {what}; found binary data (NUL bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        byte = "a byte" if secret else f"byte 0x{data[exc.start : exc.start + 1].hex()}"
        raise ValueProblem(
            f"expected UTF-8 text; found {byte} at offset {exc.start} that is not valid UTF-8"
        ) from None


def load_yaml(text: str, *, first_line: int = 1, secret: bool = False) -> Any:
    """Parse ``text`` with :func:`strict_loader`; ValueProblem ``invalid YAML at line L, ...``.

    ``first_line`` is the line of the file where ``text`` starts, so that the line in the
    message is the file's (2 for frontmatter after its opening ``---``). With ``secret`` the
    message quotes nothing from the text (a quoted fragment might be a piece of a key).
    """
    import yaml

    try:
        return yaml.load(text, Loader=strict_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + first_line}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        if secret:
            problem = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", problem)
        raise ValueProblem(f"invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ValueProblem("invalid YAML" if secret else f"invalid YAML: {exc}") from None
    except RecursionError:  # a last resort: the depth limit should have stopped it first
        raise ValueProblem("invalid YAML: nested too deeply to be read") from None


def string_list(value: Any, *, noun: str = "strings", item: str = "item") -> tuple[str, ...]:
    """A list of non-empty strings, stripped; one string is a list of one; null is empty.

    ``noun`` and ``item`` name what the strings are in messages: ``expected a list of
    non-empty <noun>; <item> 2 is an empty string``.
    """
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ValueProblem(f"expected a list of {noun} (or one string); found {describe(value)}")
    out: list[str] = []
    for i, entry in enumerate(value, 1):
        if not isinstance(entry, str) or not entry.strip():
            raise ValueProblem(
                f"expected a list of non-empty {noun}; {item} {i} is {describe(entry)}"
            )
        out.append(entry.strip())
    return tuple(out)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name, or an empty string."""
    import difflib  # a mistyped name only: off hero's start

    hint = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean '{hint[0]}'?)" if hint else ""


def type_name(value: Any) -> str:
    """The kind of a value, never the value itself (safe for secrets)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def describe(value: Any) -> str:
    """The kind and a short quote of a value, for files that hold no secrets."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "an empty string" if not value.strip() else f"the string {quote(value)}"
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)" if value else "an empty list"
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    return f"a {type(value).__name__} ({quote(str(value))})"


def quote(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)
