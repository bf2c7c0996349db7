"""Reading a command's arguments as the program does: getopt-style options (:func:`scan_options`),
where the command a wrapper runs starts, words filled in at run time (``FILLED``), and
:class:`UncheckedCommand`, the refusal of a command whose parts cannot be seen on the command
line. Shared by the wrappers (:mod:`hero.agent.tools.wrappers`) and the shells' input
(:mod:`hero.agent.tools.shell_input`).
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from hero.agent.tools.shell_syntax import SHOWN_CHARS, SimpleCommand, Word, parse_commands
from hero.errors import HeroError

# ---------------------------------------------------------------------------------------------
# Wrappers: commands that run another command

#: What a word a wrapper fills in at run time holds (``xargs``' input, ``find``'s ``{}``):
#: it could be any word, so a deny rule's word matches it. NUL: no real argument has one.
FILLED = "\0"


class UncheckedCommand(HeroError, ValueError):
    """The command runs commands the policy cannot see: read from a pipe, a file or a
    descriptor, filled in from input at run time, or named by an alias. Under a policy such a
    command is refused, and this is the reason it gives."""


def program(word: str) -> str:
    """A program's name as rules compare it: ``/usr/bin/rm`` is ``rm``."""
    return posixpath.basename(word) or word


def literal_word(text: str) -> Word:
    return Word(text, shlex.quote(text))


def inner_command(cmd: SimpleCommand, words: Sequence[Word]) -> SimpleCommand:
    """The command a wrapper runs: ``words``, reading the wrapper's own standard input."""
    return replace(cmd, words=tuple(words))


def joined_words(words: Sequence[Word]) -> Word:
    """Words joined with blanks into one command string (``watch``, ``eval``)."""
    return Word(
        " ".join(w.value for w in words),
        " ".join(w.raw for w in words),
        all(w.literal for w in words),
    )


def filled_word(word: Word, placeholder: str) -> Word:
    """``word`` with ``placeholder`` (``{}``) standing for what is filled in at run time."""
    if placeholder not in word.value:
        return word
    return Word(word.value.replace(placeholder, FILLED), word.raw, literal=False)


def takes(*names: str, n: int = 1) -> dict[str, int]:
    """Long options that take ``n`` values each (0: a value only after ``=``)."""
    return dict.fromkeys(names, n)


NO_LONG: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True)
class Options:
    """A program's options as read from its arguments."""

    end: int
    """The index of the first operand (where a wrapper's command starts)."""
    found: tuple[tuple[str, Word | None], ...]
    """Each option (``-c`` or ``--command``, abbreviations spelled out) and its value."""
    operands: tuple[Word, ...] = ()
    """With options among the operands (``permute``): every operand, in order."""

    def has(self, names: frozenset[str]) -> bool:
        return any(name in names for name, _ in self.found)

    def value(self, names: Iterable[str]) -> Word | None:
        """The value the last of these options was given."""
        wanted = frozenset(names)
        for name, value in reversed(self.found):
            if name in wanted and value is not None:
                return value
        return None


def scan_options(
    args: Sequence[Word],
    short: str = "",
    long: Mapping[str, int] = NO_LONG,
    *,
    optional: str = "",
    start: int = 0,
    permute: bool = False,
) -> Options:
    """Read getopt-style options. ``short``: the letters whose option takes a value (attached
    or the next word); ``optional``: letters whose value, if any, is attached (``-i{}``);
    ``long``: the ``--name`` options that take values and how many (``--name=v`` or
    ``--name v``; a unique abbreviation counts, as getopt takes it); any other option is a
    flag. Options end at ``--`` or, unless ``permute``, at the first operand."""
    found: list[tuple[str, Word | None]] = []
    operands: list[Word] = []
    i = start
    while i < len(args):
        word = args[i]
        a = word.value
        if a == "--":
            i += 1
            if permute:
                operands.extend(args[i:])
                i = len(args)
            break
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            name, count = _long_option(name, long)
            i += 1
            if eq:
                found.append((name, Word(value, value, word.literal)))
            else:
                found.append((name, args[i] if count and i < len(args) else None))
                i += count
            continue
        if len(a) < 2 or a[0] != "-":
            if not permute:
                break
            operands.append(word)
            i += 1
            continue
        i += 1
        for k, letter in enumerate(a[1:], 1):
            rest = a[k + 1 :]
            if letter in short or (letter in optional and rest):
                if rest:
                    found.append(("-" + letter, Word(rest, rest, word.literal)))
                elif letter in short:
                    found.append(("-" + letter, args[i] if i < len(args) else None))
                    i += 1  # the value is the next word
                break
            found.append(("-" + letter, None))
    return Options(i, tuple(found), tuple(operands))


def _long_option(name: str, long: Mapping[str, int]) -> tuple[str, int]:
    count = long.get(name)
    if count is not None:
        return name, count
    for full, count in long.items():
        if full.startswith(name):
            return full, count
    return name, 0


def first_operand(args: Sequence[Word], short: str = "", long: Mapping[str, int] = NO_LONG) -> int:
    """The index of the first operand after getopt-style options (see ``scan_options``)."""
    return scan_options(args, short, long).end


def after_assignments(args: Sequence[Word], i: int) -> int:
    while i < len(args) and "=" in args[i].value and not args[i].value.startswith("="):
        i += 1
    return i


def check_located(name: str, args: Sequence[Word], i: int) -> None:
    """Refuse when a word before a wrapper's command (an option, a value, an operand) is
    filled in at run time: then where the command starts cannot be known."""
    if any(FILLED in a.value for a in args[:i]):
        raise UncheckedCommand(
            f"the command `{name}` runs would be put together from its input at run time"
        )


def text_commands(text: str) -> list[SimpleCommand]:
    return list(parse_commands(text))


def string_commands(name: str, word: Word) -> list[SimpleCommand]:
    """The commands of a command string ``name`` hands to a shell."""
    if FILLED in word.value:
        raise UncheckedCommand(f"`{name}` would run a command string filled in at run time")
    return text_commands(word.value)


def names_set(*names: str) -> frozenset[str]:
    return frozenset(names)


def clip(text: str) -> str:
    text = text.replace(FILLED, "<input>")
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
