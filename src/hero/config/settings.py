"""Settings declared once: each one's key, type, default, bounds, section and doc.

A :class:`Setting` describes one key of a hero file: config/roles.yaml, a provider file,
config.local.yaml. Most are attached to the field of the frozen dataclass that holds the
value (:func:`knob`), so that the field's default *is* the setting's default and its
annotation its type; :func:`settings_of` reads them back. Everything else derives from
that declaration:

- reading: :meth:`Setting.read` checks a value as loaded from YAML and returns it typed, or
  raises :class:`~hero.yamlio.ValueProblem` with the wording hero's errors use (``expected
  a whole number >= 1 (default 3); found the number 0``); the caller names file and key;
- the commented config/roles.yaml that ``hero init`` writes (:mod:`hero.config.scaffold`);
- the settings reference, docs/settings.md (:mod:`hero.config.settings_doc`).

A plain table of records, not pydantic: the errors keep hero's wording (file, key, "did you
mean", the default) without translating validation errors back, and ``hero status`` does not
pay pydantic's import on every start. Importing this module does nothing but define things.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from hero.yamlio import ValueProblem, describe, did_you_mean, string_list

T = TypeVar("T")

#: The key of a dataclass field's metadata that holds its Setting.
SETTING = "hero.setting"

#: A string YAML reads back as itself when written plain (unquoted), short of the words
#: and numbers :func:`_special` looks for.
_PLAIN_YAML = re.compile(r"^[A-Za-z0-9_./:@+-][A-Za-z0-9_ ./:@+-]*$")


@dataclass(frozen=True)
class Section:
    """A group of settings: a heading in the reference, a ruled comment in roles.yaml."""

    title: str
    intro: str = ""
    """Shown under the heading: what the settings of the group have in common."""


@dataclass(frozen=True)
class Setting:
    """One key of a hero file: how it is checked, what it defaults to, what it means."""

    key: str
    doc: str
    """One line: what the setting does (the reference's table, the template's comment)."""
    default: Any = None
    type: str = ""
    """The Python annotation of the value (``int``, ``float | None``, ``tuple[str, ...]``);
    :func:`settings_of` fills it from the dataclass field."""
    section: str = ""
    note: str = ""
    """More than one line of explanation, shown after ``doc`` in the template and the
    reference."""
    minimum: float | None = None
    """The smallest valid value (a number): ``int`` from 1 unless given; ``float``: > 0
    unless given (``minimum=0``: >= 0)."""
    maximum: float | None = None
    above: float | None = None
    """A fraction: the value must be more than this (and at most ``maximum``)."""
    choices: tuple[tuple[str, str], ...] = ()
    """The valid values of a string, each with a line of doc (may be empty)."""
    required: str = ""
    """For a setting without a default: what is expected, as the error says it
    (``required; <required>; found nothing``)."""
    check: Callable[[Any], Any] | None = None
    """After the type check: checks more (raising ValueProblem) and may normalise."""
    custom: bool = False
    """Read by its loader itself (it needs more than the value: the home, the file name,
    the environment); :meth:`read` returns the value as found."""
    env: str = ""
    """An environment variable whose value wins over the file's."""
    local: bool = False
    """May be given in config.local.yaml too (which is git-ignored)."""
    secret: bool = False
    """A secret: given only in config.local.yaml or the environment; config/roles.yaml
    refuses it, saying where it belongs."""
    type_doc: str = ""
    """The type as the reference shows it, for a custom setting whose annotation does not
    say it (``mapping of provider name -> API key``)."""
    value: str = ""
    """The YAML ``hero init`` writes for it, when that is not the default (a list that
    adds to a built-in default is written empty)."""
    shown: str = ""
    """How the default is shown when its value alone does not say it (``120000 (2
    minutes)``)."""
    example: str = ""
    """YAML lines the template shows commented out after the key, as a fuller example."""
    written: bool = True
    """Whether ``hero init`` writes the key; False: shown commented out (with ``example``,
    else the default)."""
    attr: str = ""
    """The dataclass field that holds the value (:func:`settings_of` fills it)."""

    # ------------------------------------------------------------------------- reading

    def read(self, value: Any) -> Any:
        """``value`` as loaded from YAML (None: absent), checked and typed; the default
        when absent. Raises ValueProblem with the message (no file, no key)."""
        if self.custom:
            return value
        if value is None:
            if self.required:
                raise ValueProblem(f"required; {self.required}; found nothing")
            return self.default
        typed = self._typed(value)
        return typed if self.check is None else self.check(typed)

    def _typed(self, value: Any) -> Any:
        kind = self.type
        if self.choices:
            return self._choice(value)
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueProblem(f"expected true or false; found {describe(value)}")
            return value
        if kind in ("int", "int | None"):
            return self._integer(value, optional=kind != "int")
        if kind == "float":
            return self._number(value)
        if kind == "float | None":
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueProblem(f"expected a number >= 0 or null; found {describe(value)}")
            return float(value)
        if kind in ("str", "str | None"):
            if not isinstance(value, str) or not value.strip():
                raise ValueProblem(f"expected a non-empty string; found {describe(value)}")
            return value.strip()
        if kind == "tuple[str, ...]":
            return string_list(value) or self.default
        raise TypeError(f"setting {self.key}: no reader for type {kind!r}; mark it custom")

    def _choice(self, value: Any) -> str:
        names = self.names
        if not isinstance(value, str):
            raise ValueProblem(
                f"expected a non-empty string, one of {', '.join(names)}; found {describe(value)}"
            )
        if value.strip() not in names:
            raise ValueProblem(
                f"expected one of {', '.join(names)}{did_you_mean(value, names)}; "
                f"found {describe(value)}"
            )
        return value.strip()

    def _integer(self, value: Any, *, optional: bool) -> int:
        low = int(self.minimum if self.minimum is not None else 1)
        high = None if self.maximum is None else int(self.maximum)
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < low
            or (high is not None and value > high)
        ):
            if optional:
                expected = f"a whole number >= {low} or null"
            else:
                bound = f">= {low}" if high is None else f"from {low} to {high}"
                expected = f"a whole number {bound} (default {self.default})"
            raise ValueProblem(f"expected {expected}; found {describe(value)}")
        return value

    def _number(self, value: Any) -> float:
        number = not isinstance(value, bool) and isinstance(value, int | float)
        if self.above is not None:
            high = self.maximum if self.maximum is not None else math.inf
            if not number or not self.above < value <= high:  # False for NaN too
                raise ValueProblem(
                    f"expected a fraction > {self.above:g} and <= {high:g} (default "
                    f"{self.default:g}); found {describe(value)}"
                )
            return float(value)
        zero = self.minimum == 0
        if (
            not number
            or value != value  # NaN
            or value < 0
            or (value == 0 and not zero)
            or value == math.inf
        ):
            raise ValueProblem(
                f"expected a number {'>= 0' if zero else '> 0'} (default {self.default:g}); "
                f"found {describe(value)}"
            )
        return float(value)

    # ------------------------------------------------------------------------- showing

    @property
    def names(self) -> tuple[str, ...]:
        """The valid values of a setting with ``choices``."""
        return tuple(name for name, _ in self.choices)

    @property
    def default_text(self) -> str:
        """The default as people read it: ``3``, ``null``, ``[]``, ``auto``."""
        if self.shown:
            return self.shown
        if self.required:
            return "required"
        return yaml_value(self.default)

    @property
    def default_literal(self) -> str:
        """The start of :attr:`default_text` that is a YAML value (``120000`` of ``120000 (2
        minutes)``, ``[]`` of ``[] (no checks)``); "" when it is words (``the file name``)."""
        text = self.default_text
        for literal in (self.value, yaml_value(self.default)):
            if literal and not self.required and text.startswith(literal):
                return literal
        return ""

    @property
    def type_text(self) -> str:
        """The type and its bounds in words: ``whole number >= 1``, ``one of a, b``."""
        if self.type_doc:
            return self.type_doc
        if self.choices:
            return "one of " + ", ".join(self.names)
        kind = self.type
        if kind in ("int", "int | None"):
            low = int(self.minimum if self.minimum is not None else 1)
            text = "whole number " + (
                f">= {low}" if self.maximum is None else f"{low} to {int(self.maximum)}"
            )
            return text + (" or null" if kind == "int | None" else "")
        if kind == "float":
            if self.above is not None:
                return f"number > {self.above:g} and <= {self.maximum:g}"
            return "number >= 0" if self.minimum == 0 else "number > 0"
        return {
            "float | None": "number >= 0 or null",
            "bool": "true or false",
            "str": "string",
            "str | None": "string or null",
            "tuple[str, ...]": "list of strings",
            "Path": "path",
        }.get(kind, kind)

    @property
    def text(self) -> str:
        """``doc`` and ``note`` as one text."""
        return f"{self.doc} {self.note}".strip()


def knob(key: str, default: T, doc: str, *, repr: bool = True, **more: Any) -> T:
    """A dataclass field holding the setting ``key``: ``default`` is both the field's default
    and the setting's; ``more`` are further :class:`Setting` attributes."""
    setting = Setting(key, doc, default=default, **more)
    field: T = dataclasses.field(default=default, repr=repr, metadata={SETTING: setting})
    return field


def declare(key: str, doc: str, **more: Any) -> dict[str, Setting]:
    """The metadata of a dataclass field without a default that holds the setting ``key``:
    ``field(metadata=declare(...))``."""
    return {SETTING: Setting(key, doc, **more)}


@functools.cache
def settings_of(cls: type) -> tuple[Setting, ...]:
    """The settings declared on the fields of the dataclass ``cls``, in field order, each
    with its type (the field's annotation), its default and its field's name."""
    found: list[Setting] = []
    for f in dataclasses.fields(cls):
        setting = f.metadata.get(SETTING)
        if not isinstance(setting, Setting):
            continue
        default = setting.default if f.default is dataclasses.MISSING else f.default
        found.append(dataclasses.replace(setting, type=str(f.type), attr=f.name, default=default))
    return tuple(found)


def read_all(
    settings: Iterable[Setting], data: Any, fail: Callable[[str, str], Exception]
) -> dict[str, Any]:
    """Each setting's value read from the mapping ``data``, by key; ``fail(key, message)``
    makes the error raised for a bad one."""
    values: dict[str, Any] = {}
    for setting in settings:
        try:
            values[setting.key] = setting.read(data.get(setting.key))
        except ValueProblem as exc:
            raise fail(setting.key, exc.message) from None
    return values


def yaml_value(value: Any) -> str:
    """A default as one line of YAML: ``3``, ``0.75``, ``null``, ``true``, ``[]``, ``auto``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN_YAML.match(text) and text.strip() == text and not _special(text):
        return text
    import json  # only the template and the reference show values: not at start-up

    return json.dumps(text)


def _special(text: str) -> bool:
    """Whether YAML would read the plain scalar ``text`` as something else than this string
    (a number, a boolean, null) or as a mapping."""
    if ": " in text or text.endswith(":"):
        return True
    lowered = text.lower()
    if lowered in ("null", "~", "true", "false", "yes", "no", "on", "off", "y", "n"):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True
