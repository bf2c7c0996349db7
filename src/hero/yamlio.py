"""Reading YAML written by people: one home for the rules every hero file shares.

Duplicate keys are refused, tags beyond plain YAML are refused (a SafeLoader), errors name
the line and describe values. Functions here raise :class:`ValueProblem`, a message without
file or field: the caller (config, story) adds those and raises its own error type.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable
from typing import Any


class ValueProblem(Exception):
    """What is wrong with a text or a value; ``message`` is one line, with no file or field.

    Not a ValueError on purpose: python-frontmatter's ``parse`` swallows ValueError from a
    handler and carries on with empty metadata; a ValueProblem always reaches the caller.
    """

    def __init__(self, message: str) -> None:
        self.message = " ".join(str(message).split())
        super().__init__(self.message)


@functools.cache
def strict_loader() -> type:
    """A yaml SafeLoader that refuses duplicate mapping keys (the later one would win silently)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
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
