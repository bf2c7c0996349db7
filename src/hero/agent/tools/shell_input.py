"""What a shell runs: ``bash -c STRING``'s commands, a script named by a path the policy can know (a
pipe is refused; a file is not read), and what a shell reads on its standard input when that is a
literal on the command line: a here-document, a here-string, or the output of an ``echo`` /
``printf`` of literal words (or ``cat`` of one) piped in. Anything else a shell would read is an
:class:`~hero.agent.tools.command_args.UncheckedCommand`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hero.agent.tools.command_args import (
    FILLED,
    UncheckedCommand,
    clip,
    first_operand,
    program,
    text_commands,
)
from hero.agent.tools.shell_syntax import SimpleCommand, Word

#: Paths through which a shell reads its own standard input as a script.
_STDIN_FILES = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})


def shell_commands(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    """``bash -c STRING``: STRING's commands; ``bash`` reading its standard input: the
    here-document or the literal piped in, when there is one; ``bash FILE``: nothing (the
    policy does not read files)."""
    name = program(cmd.words[0].value)
    with_c = from_stdin = False
    i = 0
    while i < len(args):
        a = args[i].value
        if a in ("--", "-"):
            i += 1
            break
        if a in ("--rcfile", "--init-file"):
            i += 2
            continue
        if a.startswith("--") or len(a) < 2 or a[0] not in "-+":
            if a.startswith("--"):
                i += 1
                continue
            break
        i += 1
        letters = a[1:]
        if a[0] == "-" and "c" in letters:
            with_c = True
        if a[0] == "-" and "s" in letters:
            from_stdin = True
        if "o" in letters or "O" in letters:
            i += 1  # -o OPTION
    if any(FILLED in a.value for a in args[: i + 1]):
        raise UncheckedCommand(
            f"`{name}` would take its options or commands from input at run time"
        )
    if with_c:
        return text_commands(args[i].value) if i < len(args) else []
    if i < len(args) and not from_stdin:
        return _script(cmd, name, args[i])
    return fed_commands(cmd, f"`{name}`")


def _script(cmd: SimpleCommand, name: str, word: Word) -> list[SimpleCommand]:
    """A script a shell (or ``source``) runs: a file is not read (the policy does not see
    inside files); a pipe, which a file path can name, is read like standard input."""
    path = word.value
    if path in _STDIN_FILES:
        return fed_commands(cmd, f"`{name}`")
    if (
        word.raw.startswith(("<(", ">("))
        or path.startswith("/dev/fd/")
        or (path.startswith("/proc/") and "/fd/" in path)
    ):
        raise UncheckedCommand(
            f"`{name}` would run the commands it reads from `{word.raw}`, a pipe or descriptor "
            "whose contents the policy cannot know"
        )
    return []


def source_commands(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    i = first_operand(args, "p")
    return _script(cmd, program(cmd.words[0].value), args[i]) if i < len(args) else []


def fed_commands(cmd: SimpleCommand, who: str) -> list[SimpleCommand]:
    """The commands a shell reads from its standard input; refused unless they are a
    literal on the command line. ``who``: the shell, as the reason names it."""
    texts = _input_texts(cmd)
    if texts is not None:
        return [part for text in texts for part in text_commands(text)]
    if cmd.stdin_unknown:
        raise UncheckedCommand(
            f"{who} would run the commands it reads on its standard input, which comes "
            "from a file, a descriptor or a compound command"
        )
    if cmd.stdin:
        raise UncheckedCommand(
            f"{who} would run a here-document or here-string with expansions in it ($x, "
            "$(...)), known only at run time (a quoted delimiter, <<'EOF', passes it as it is)"
        )
    if cmd.piped_from is not None:
        raise UncheckedCommand(
            f"{who} would run the commands piped into it by `{clip(cmd.piped_from.text)}`, "
            "whose output the policy cannot know"
        )
    raise UncheckedCommand(
        f"{who} would run the commands on its standard input, which here is neither a "
        "here-document nor a literal piped in"
    )


def _input_texts(cmd: SimpleCommand) -> list[str] | None:
    """What ``cmd`` reads on its standard input, when it is a literal on the command line: a
    here-document, a here-string, or the output of an ``echo``/``printf`` piped in."""
    if cmd.stdin_unknown:
        return None
    if cmd.stdin:
        return list(cmd.stdin) if cmd.stdin_literal else None
    if cmd.piped_from is not None:
        return _output(cmd.piped_from)
    return None


def _output(cmd: SimpleCommand) -> list[str] | None:
    """What ``cmd`` writes, when the policy can know it: ``echo`` and ``printf`` of literal
    words, ``cat`` of a literal input. Several texts when shells' echos differ."""
    if not all(w.literal and FILLED not in w.value for w in cmd.words):
        return None
    name = program(cmd.words[0].value)
    args = [w.value for w in cmd.words[1:]]
    if name == "echo":
        return _echo(args)
    if name == "printf":
        text = _printf(args)
        return None if text is None else [text]
    if name == "cat" and all(a == "-" for a in args):
        return _input_texts(cmd)
    return None


#: The backslash escapes every ``echo`` and ``printf`` reads alike; a text with any other is
#: not followed (shells differ on them), and the command is refused.
_COMMON_ESCAPES = {"\\": "\\", "n": "\n", "t": "\t"}


def _unescape(text: str) -> str | None:
    out: list[str] = []
    i = 0
    while (j := text.find("\\", i)) >= 0:
        escaped = _COMMON_ESCAPES.get(text[j + 1 : j + 2])
        if escaped is None:
            return None
        out += [text[i:j], escaped]
        i = j + 2
    return "".join(out) + text[i:]


def _echo(args: Sequence[str]) -> list[str] | None:
    """What ``echo`` prints: bash's (``-n``/``-e``/``-E`` options, escapes with ``-e``) and
    dash's, which ``sh`` is on Debian (``-n`` only, escapes always)."""
    k, newline, escapes = 0, True, False
    while k < len(args) and len(args[k]) > 1 and args[k][0] == "-":
        if not all(c in "neE" for c in args[k][1:]):
            break
        for c in args[k][1:]:
            newline = newline and c != "n"
            escapes = c == "e" if c in "eE" else escapes
        k += 1
    body = " ".join(args[k:])
    bash = _unescape(body) if escapes else body
    k = 1 if args[:1] == ["-n"] else 0
    dash = _unescape(" ".join(args[k:]))
    if bash is None or dash is None:
        return None
    return sorted({bash + ("\n" if newline else ""), dash + ("" if k else "\n")})


_PRINTF_SPEC = re.compile(r"%([-+ #0]*)(\d{0,4})(?:\.(\d{0,4}))?([sbcdi%])")


def _printf(args: Sequence[str]) -> str | None:
    """What ``printf FORMAT ARGS`` prints, for ``%s``, ``%b``, ``%c``, ``%d``, ``%i``, ``%%``
    and the common escapes; None for anything else."""
    if args[:1] == ["--"]:
        args = args[1:]
    if args[:1] and args[0].startswith("-v"):
        return ""  # printf -v NAME: into a variable
    if not args:
        return None
    fmt, rest = args[0], args[1:]
    out: list[str] = []
    k = 0
    while True:
        before = k
        i = 0
        while i < len(fmt):
            c = fmt[i]
            if c == "\\":
                escaped = _COMMON_ESCAPES.get(fmt[i + 1 : i + 2])
                if escaped is None:
                    return None
                out.append(escaped)
                i += 2
                continue
            if c != "%":
                out.append(c)
                i += 1
                continue
            m = _PRINTF_SPEC.match(fmt, i)
            if m is None:
                return None
            i = m.end()
            flags, width, precision, conv = m.groups()
            if conv == "%":
                out.append("%")
                continue
            arg = rest[k] if k < len(rest) else ""
            k += 1
            value: str | int | None = arg
            if conv == "b":
                value = _unescape(arg)
            elif conv == "c":
                value = arg[:1]
            elif conv in "di":
                value = _integer(arg)
            if value is None:
                return None
            spec = f"%{flags}{width}" + (f".{precision}" if precision is not None else "")
            try:
                out.append((spec + ("d" if conv in "di" else "s")) % value)
            except (TypeError, ValueError):
                return None
        if k >= len(rest) or k == before:
            return "".join(out)


def _integer(arg: str) -> int | None:
    """A ``%d`` argument's value: decimal only (the shells' hex, octal and 'c forms: None)."""
    if not arg:
        return 0
    try:
        return int(arg) if arg.lstrip("+-").isdecimal() else None
    except ValueError:
        return None
