"""The command policy: which shell commands the bash tool runs (roles.yaml's ``allow_commands``
and ``deny_commands``), checked on the parsed command, never on its raw text.

A command is cut into the simple commands it would run, wherever they stand: joined by
``&&``, ``||``, ``;``, ``|``, ``&`` or a newline, inside ``( )``, ``{ }``, ``$( )``, backquotes,
``<( )``, ``if``/``while``/``for``/``case`` bodies, function bodies, ``${x:-$(...)}`` and
unquoted here-documents. Quotes and escapes are removed from each word (``'r'm`` is ``rm``);
leading ``VAR=value`` assignments, redirections, ``!`` and ``time`` are set aside. Then the
command a wrapper runs is checked as well: ``env``, ``command``, ``exec``, ``builtin``,
``nohup``, ``setsid``, ``time``, ``nice``, ``timeout``, ``stdbuf``, ``xargs``, ``sudo``,
``doas``, ``busybox``, ``find -exec``, ``eval``, and the shells' ``-c STRING`` (or a
here-document fed to a shell), parsed in turn.

A rule is a command and its first words (``git push``); it matches a simple command whose
words start with the rule's, the program compared by its base name (``/bin/rm`` is ``rm``) and
``git``'s global options (``git -C dir push``) set aside. A command hero cannot parse is
refused: what cannot be read cannot be checked.

This is a guard-rail for a model that means well, not a wall: the worker can write a script
and run it, or run ``python -c``, ``make`` or a variable's value, and no parser sees what
those run. The sandbox is the wall.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

#: How deep substitutions, quotes and wrappers may nest before a command is refused.
MAX_NESTING = 50
#: How much of a refused part the refusal quotes.
_SHOWN_CHARS = 200


class CommandSyntaxError(ValueError):
    """The command cannot be parsed (an unclosed quote, ``$(`` or ``(``, ...)."""


@dataclass(frozen=True)
class Word:
    value: str
    """The word with quotes and escapes removed; expansions (``$x``, ``$(...)``) as written."""
    raw: str
    """The word as written in the command."""
    literal: bool = True
    """False when the word holds an expansion, so its value at run time is not known."""


@dataclass(frozen=True)
class SimpleCommand:
    """One command the shell would run: its words, without assignments and redirections."""

    words: tuple[Word, ...]
    stdin: tuple[str, ...] = ()
    """Here-documents and here-strings fed to it (a shell reads them as commands)."""

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(w.value for w in self.words)

    @property
    def text(self) -> str:
        return " ".join(w.raw for w in self.words)


# ---------------------------------------------------------------------------------------------
# The parser


@dataclass
class _Command:
    words: list[Word] = field(default_factory=list)
    stdin: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Token:
    kind: str  # "word", "op", "redir", "newline", "eof"
    text: str = ""
    word: Word | None = None


@dataclass(frozen=True)
class _Heredoc:
    delimiter: str
    quoted: bool
    strip_tabs: bool
    sink: list[str]


_OPERATORS = sorted(
    ("&&", "||", ";;&", ";;", ";&", "|&", "|", "&", ";", "(", ")"), key=len, reverse=True
)
_REDIRECTS = sorted(
    ("&>>", "&>", "<<<", "<<-", "<<", ">>", "<&", ">&", "<>", ">|", "<", ">"),
    key=len,
    reverse=True,
)
_SEPARATORS = frozenset({";", "&", "&&", "||", "|", "|&"})
_CASE_ENDS = frozenset({";;", ";&", ";;&"})
_WORD_STOPS = frozenset(" \t\n;&|()<>")
#: Reserved words that open or continue a compound command: the next word starts a command.
_PREFIX_KEYWORDS = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "while", "until", "do", "done", "time"}
)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_ANSI_ESCAPE = re.compile(
    r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|c.|.)", re.S
)
_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}


def _ansi_c(body: str) -> str:
    """The value of ``$'body'``."""

    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc[0] in "xuU":
            try:
                return chr(int(esc[1:], 16))
            except (ValueError, OverflowError):
                return m.group(0)
        if esc[0] in "01234567":
            return chr(int(esc, 8) & 0xFF)
        if esc[0] == "c" and len(esc) == 2:
            return chr(ord(esc[1]) & 0x1F)
        return _ANSI_SIMPLE.get(esc, esc)

    return _ANSI_ESCAPE.sub(one, body)


class _Parser:
    """A shell parser that finds every simple command in a command string.

    It reads the POSIX shell language and bash's additions closely enough to find commands,
    not to run them: where the two shells differ it takes the reading that finds more
    commands (``((a))`` is two subshells, as ``sh`` reads it).
    """

    def __init__(self, src: str, depth: int = 0) -> None:
        self.src = src
        self.pos = 0
        self.depth = depth
        self.commands: list[_Command] = []
        self._heredocs: list[_Heredoc] = []
        self._peeked: _Token | None = None

    def parse(self) -> list[_Command]:
        self._list(in_subst=False)
        return self.commands

    # -- nesting

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise CommandSyntaxError(f"nested more than {MAX_NESTING} levels deep")

    def _sub(self, src: str) -> None:
        """Parse ``src`` (a backquoted command) into this parser's commands."""
        self.commands.extend(_Parser(src, self.depth + 1).parse())

    # -- the command list

    def _list(self, in_subst: bool) -> None:
        """Read commands to the end, or (``in_subst``) through the ``)`` that closes a ``$(``."""
        self._enter()
        stack: list[str] = []  # open "(" subshells and "case" statements
        cmd = _Command()
        waiting = ""  # the "|", "&&" or "||" that still waits for its command
        while True:
            tok = self._next()
            if tok.kind == "word":
                assert tok.word is not None
                waiting = ""
                if not cmd.words and self._command_start(tok.word, stack):
                    continue
                cmd.words.append(tok.word)
                continue
            if tok.kind == "redir":
                waiting = ""
                self._redirect(tok.text, cmd)
                continue
            self._finish(cmd)
            cmd = _Command()
            if tok.kind == "newline":
                continue
            if waiting and not (tok.kind == "op" and tok.text == "("):
                raise CommandSyntaxError(f"'{waiting}' with no command after it")
            if tok.text in _SEPARATORS:
                waiting = "" if tok.text in (";", "&") else tok.text
                continue
            if tok.kind == "eof":
                if in_subst:
                    raise CommandSyntaxError("unterminated $( or <(")
                if stack:
                    raise CommandSyntaxError(
                        "unclosed '('" if stack[-1] == "(" else "unclosed 'case'"
                    )
                self.depth -= 1
                return
            if tok.text in _CASE_ENDS:
                if not stack or stack[-1] != "case":
                    raise CommandSyntaxError(f"'{tok.text}' outside a case statement")
                if self._case_patterns():
                    stack.pop()
            elif tok.text == "(":
                waiting = ""
                stack.append("(")
            elif tok.text == ")":
                if stack and stack[-1] == "(":
                    stack.pop()
                elif not stack and in_subst:
                    self.depth -= 1
                    return
                else:
                    raise CommandSyntaxError("unbalanced ')'")

    def _finish(self, cmd: _Command) -> None:
        if cmd.words:
            self.commands.append(cmd)

    def _command_start(self, word: Word, stack: list[str]) -> bool:
        """Handle a word where a command starts: a reserved word, an assignment, a function
        definition. True when it was one of those (the next word starts a command again)."""
        v = word.value
        if word.raw == v:  # reserved words count unquoted only
            if v in _PREFIX_KEYWORDS:
                if v == "time":
                    self._skip_word("-p")
                return True
            if v == "case":
                self._case_head()
                if not self._case_patterns():
                    stack.append("case")
                return True
            if v == "esac" and stack and stack[-1] == "case":
                stack.pop()
                return True
            if v in ("for", "select"):
                self._for_head()
                return True
            if v == "function":
                self._expect_word("a function name after 'function'")
                self._function_parens(required=False)
                return True
            if v == "[[":
                self._skip_test()
                return True
        if _ASSIGNMENT.match(word.raw):
            return True
        tok = self._next()
        if tok.kind == "op" and tok.text == "(":  # name() { ...; }: a definition, not a run
            self._function_parens(required=True, opened=True)
            return True
        self._peeked = tok
        return False

    def _function_parens(self, *, required: bool, opened: bool = False) -> None:
        if not opened:
            tok = self._next()
            if not (tok.kind == "op" and tok.text == "("):
                if required:
                    raise CommandSyntaxError("expected '(' in a function definition")
                self._peeked = tok
                return
        tok = self._next()
        if not (tok.kind == "op" and tok.text == ")"):
            raise CommandSyntaxError("unexpected '(' (a function definition is 'name() { ...; }')")

    def _skip_word(self, value: str) -> None:
        tok = self._next()
        if not (tok.kind == "word" and tok.word is not None and tok.word.raw == value):
            self._peeked = tok

    def _expect_word(self, what: str) -> Word:
        tok = self._next()
        if tok.kind != "word" or tok.word is None:
            raise CommandSyntaxError(f"expected {what}")
        return tok.word

    def _skip_newlines(self) -> _Token:
        tok = self._next()
        while tok.kind == "newline":
            tok = self._next()
        return tok

    def _for_head(self) -> None:
        """``for NAME [in WORDS];``: none of it is a command (substitutions in it are read)."""
        self._expect_word("a variable name after 'for'")
        tok = self._skip_newlines()
        if tok.kind == "word" and tok.word is not None and tok.word.raw == "in":
            tok = self._next()
            while tok.kind == "word":
                tok = self._next()
        if not (tok.kind == "newline" or (tok.kind == "op" and tok.text == ";")):
            self._peeked = tok

    def _case_head(self) -> None:
        self._expect_word("a word after 'case'")
        tok = self._skip_newlines()
        if not (tok.kind == "word" and tok.word is not None and tok.word.raw == "in"):
            raise CommandSyntaxError("expected 'in' after 'case WORD'")

    def _case_patterns(self) -> bool:
        """Read ``[(] PATTERN [| PATTERN]... )`` before a case body; True at ``esac`` instead."""
        tok = self._skip_newlines()
        if tok.kind == "word" and tok.word is not None and tok.word.raw == "esac":
            return True
        if tok.kind == "op" and tok.text == "(":
            tok = self._next()
        while True:
            if tok.kind != "word":
                raise CommandSyntaxError("expected a pattern in a case statement")
            tok = self._next()
            if tok.kind == "op" and tok.text == ")":
                return False
            if not (tok.kind == "op" and tok.text == "|"):
                raise CommandSyntaxError("expected ')' after a case pattern")
            tok = self._next()

    def _skip_test(self) -> None:
        """``[[ ... ]]`` runs no program: skip to its end (substitutions in it are read)."""
        while True:
            tok = self._next()
            if tok.kind == "eof":
                raise CommandSyntaxError("unterminated '[['")
            if tok.kind == "word" and tok.word is not None and tok.word.raw == "]]":
                return

    def _redirect(self, op: str, cmd: _Command) -> None:
        tok = self._next()
        if tok.kind != "word" or tok.word is None:
            raise CommandSyntaxError(f"expected a word after '{op}'")
        target = tok.word
        if op == "<<<":
            cmd.stdin.append(target.value)
        elif op in ("<<", "<<-"):
            quoted = any(c in target.raw for c in "'\"\\")
            self._heredocs.append(_Heredoc(target.value, quoted, op == "<<-", cmd.stdin))

    # -- tokens

    def _next(self) -> _Token:
        if self._peeked is not None:
            tok, self._peeked = self._peeked, None
            return tok
        src, n = self.src, len(self.src)
        while True:
            while self.pos < n and src[self.pos] in " \t":
                self.pos += 1
            if src.startswith("\\\n", self.pos):
                self.pos += 2
                continue
            if self.pos < n and src[self.pos] == "#":
                end = src.find("\n", self.pos)
                self.pos = n if end < 0 else end
                continue
            break
        if self.pos >= n:
            return _Token("eof")
        c = src[self.pos]
        if c == "\n":
            self.pos += 1
            self._read_heredocs()
            return _Token("newline")
        if c in "<>" and src.startswith("(", self.pos + 1):
            return self._word()  # <( ... ): process substitution
        if c.isdigit():  # 2>&1: a descriptor number, then a redirection
            end = self.pos
            while end < n and src[end].isdigit():
                end += 1
            if end < n and src[end] in "<>" and not src.startswith("(", end + 1):
                self.pos = end
                return self._redirect_token()
        for op in _OPERATORS:
            if src.startswith(op, self.pos):
                if op == "&" and src.startswith("&>", self.pos):
                    break  # &> is a redirection
                self.pos += len(op)
                return _Token("op", op)
        if c in "<>&":
            return self._redirect_token()
        return self._word()

    def _redirect_token(self) -> _Token:
        for op in _REDIRECTS:
            if self.src.startswith(op, self.pos):
                self.pos += len(op)
                return _Token("redir", op)
        raise CommandSyntaxError(f"unexpected {self.src[self.pos]!r}")  # pragma: no cover

    def _word(self) -> _Token:
        src, n = self.src, len(self.src)
        start = self.pos
        value: list[str] = []
        literal = True
        while self.pos < n:
            c = src[self.pos]
            if c in "<>" and src.startswith("(", self.pos + 1):
                begin = self.pos
                self.pos += 2
                self._list(in_subst=True)
                value.append(src[begin : self.pos])
                literal = False
                continue
            if c == "(" and _ASSIGNMENT.fullmatch(src[start : self.pos]):
                self._array_value(value)
                literal = False
                continue
            if c in _WORD_STOPS:
                break
            if c == "\\":
                if src.startswith("\n", self.pos + 1):
                    self.pos += 2
                    continue
                value.append(src[self.pos + 1 : self.pos + 2] or "\\")
                self.pos += 2
            elif c == "'":
                end = src.find("'", self.pos + 1)
                if end < 0:
                    raise CommandSyntaxError("unterminated single quote")
                value.append(src[self.pos + 1 : end])
                self.pos = end + 1
            elif c == '"':
                self.pos += 1
                text, lit = self._dquoted()
                value.append(text)
                literal = literal and lit
            elif c == "$":
                text, lit = self._dollar(in_dquote=False)
                value.append(text)
                literal = literal and lit
            elif c == "`":
                value.append(self._backquoted(in_dquote=False))
                literal = False
            else:
                value.append(c)
                self.pos += 1
        return _Token("word", word=Word("".join(value), src[start : self.pos], literal))

    def _array_value(self, value: list[str]) -> None:
        """``name=( a b c )``: its elements are words (their substitutions are read)."""
        begin = self.pos
        self.pos += 1
        self._enter()
        while True:
            tok = self._next()
            if tok.kind == "op" and tok.text == ")":
                break
            if tok.kind not in ("word", "newline"):
                raise CommandSyntaxError("unterminated array assignment '=('")
        self.depth -= 1
        value.append(self.src[begin : self.pos])

    def _dquoted(self) -> tuple[str, bool]:
        """From just after an opening ``"`` through the closing one."""
        src, n = self.src, len(self.src)
        out: list[str] = []
        literal = True
        self._enter()
        while True:
            if self.pos >= n:
                raise CommandSyntaxError("unterminated double quote")
            c = src[self.pos]
            if c == '"':
                self.pos += 1
                break
            if c == "\\":
                nxt = src[self.pos + 1 : self.pos + 2]
                if nxt == "\n":
                    self.pos += 2
                elif nxt and nxt in '$`"\\':
                    out.append(nxt)
                    self.pos += 2
                else:
                    out.append("\\")
                    self.pos += 1
            elif c == "$":
                text, lit = self._dollar(in_dquote=True)
                out.append(text)
                literal = literal and lit
            elif c == "`":
                out.append(self._backquoted(in_dquote=True))
                literal = False
            else:
                out.append(c)
                self.pos += 1
        self.depth -= 1
        return "".join(out), literal

    def _dollar(self, *, in_dquote: bool) -> tuple[str, bool]:
        """A ``$`` and what it expands: (the text as written, whether it is literal)."""
        src = self.src
        start = self.pos
        nxt = src[self.pos + 1 : self.pos + 2]
        if nxt == "'" and not in_dquote:
            i = self.pos + 2
            while i < len(src) and src[i] != "'":
                i += 2 if src[i] == "\\" else 1
            if i >= len(src):
                raise CommandSyntaxError("unterminated $'...' quote")
            self.pos = i + 1
            return _ansi_c(src[start + 2 : i]), True
        if nxt == '"' and not in_dquote:
            self.pos += 2
            return self._dquoted()
        if src.startswith("((", self.pos + 1) and self._closes_with_two_parens():
            self._arithmetic()
            return src[start : self.pos], False
        if nxt == "(":  # $( ... ), and $((...) ...) that is not arithmetic, as bash reads it
            self.pos += 2
            self._list(in_subst=True)
            return src[start : self.pos], False
        if nxt == "{":
            self.pos += 2
            self._braced(in_dquote)
            return src[start : self.pos], False
        if nxt and (nxt in _NAME_CHARS):
            i = self.pos + 1
            if nxt.isdigit():
                i += 1
            else:
                while i < len(src) and src[i] in _NAME_CHARS:
                    i += 1
            self.pos = i
            return src[start:i], False
        if nxt and nxt in "@*#?$!-":
            self.pos += 2
            return src[start : self.pos], False
        self.pos += 1
        return "$", True

    def _closes_with_two_parens(self) -> bool:
        """Whether the ``$((`` here closes with ``))`` (arithmetic) rather than with one ``)``
        (a command substitution starting with a subshell). A quick look at the parentheses,
        outside quotes, decides it once, so nested ones are not parsed twice over."""
        src, n = self.src, len(self.src)
        i = self.pos + 3
        inner = 0
        while i < n:
            c = src[i]
            if c == "\\":
                i += 2
                continue
            if c in "'\"":
                end = src.find(c, i + 1)
                while c == '"' and end > 0 and src[end - 1] == "\\":
                    end = src.find(c, end + 1)
                if end < 0:
                    return True  # unterminated: the scan that follows says so
                i = end
            elif c == "(":
                inner += 1
            elif c == ")":
                if not inner:
                    return src.startswith("))", i)
                inner -= 1
            i += 1
        return True

    def _arithmetic(self) -> None:
        """``$(( ... ))`` from its ``$`` through its ``))``: substitutions in it are read."""
        src, n = self.src, len(self.src)
        self.pos += 3
        inner = 0
        self._enter()
        while True:
            if self.pos >= n:
                raise CommandSyntaxError("unterminated $((")
            c = src[self.pos]
            if c == "(":
                inner += 1
                self.pos += 1
            elif c == ")":
                if inner:
                    inner -= 1
                    self.pos += 1
                    continue
                if not src.startswith("))", self.pos):
                    raise CommandSyntaxError("cannot tell where $(( ... )) ends")
                self.pos += 2
                self.depth -= 1
                return
            elif c == "\\":
                self.pos += 2
            elif c == "$":
                self._dollar(in_dquote=True)
            elif c == "`":
                self._backquoted(in_dquote=True)
            elif c == '"':
                self.pos += 1
                self._dquoted()
            else:
                self.pos += 1

    def _braced(self, in_dquote: bool) -> None:
        """``${ ... }`` from just after ``${``: nested quotes and substitutions are read."""
        src, n = self.src, len(self.src)
        depth = 1
        self._enter()
        while True:
            if self.pos >= n:
                raise CommandSyntaxError("unterminated ${")
            c = src[self.pos]
            if c == "}":
                self.pos += 1
                depth -= 1
                if not depth:
                    break
            elif c == "{":
                self.pos += 1
                depth += 1
            elif c == "\\":
                self.pos += 2
            elif c == "'" and not in_dquote:
                end = src.find("'", self.pos + 1)
                if end < 0:
                    raise CommandSyntaxError("unterminated single quote")
                self.pos = end + 1
            elif c == '"':
                self.pos += 1
                self._dquoted()
            elif c == "$":
                self._dollar(in_dquote=True)
            elif c == "`":
                self._backquoted(in_dquote=True)
            else:
                self.pos += 1
        self.depth -= 1

    def _backquoted(self, *, in_dquote: bool) -> str:
        """A backquoted command from its opening backquote; returns the text as written."""
        src, n = self.src, len(self.src)
        start = self.pos
        self.pos += 1
        body: list[str] = []
        escapable = '$`\\"' if in_dquote else "$`\\"
        while True:
            if self.pos >= n:
                raise CommandSyntaxError("unterminated backquote")
            c = src[self.pos]
            if c == "`":
                self.pos += 1
                break
            if c == "\\" and src[self.pos + 1 : self.pos + 2] in tuple(escapable):
                body.append(src[self.pos + 1])
                self.pos += 2
            else:
                body.append(c)
                self.pos += 1
        self._sub("".join(body))
        return src[start : self.pos]

    def _read_heredocs(self) -> None:
        """At a newline: the bodies of the here-documents its line opened."""
        pending, self._heredocs = self._heredocs, []
        src, n = self.src, len(self.src)
        for doc in pending:
            lines: list[str] = []
            while self.pos < n:
                end = src.find("\n", self.pos)
                end = n if end < 0 else end
                line = src[self.pos : end]
                self.pos = min(end + 1, n)
                if (line.lstrip("\t") if doc.strip_tabs else line) == doc.delimiter:
                    break
                lines.append(line.lstrip("\t") if doc.strip_tabs else line)
            body = "".join(line + "\n" for line in lines)
            if not doc.quoted:
                self._sub_text(body)
            doc.sink.append(body)

    def _sub_text(self, text: str) -> None:
        """The substitutions in an unquoted here-document's body."""
        sub = _Parser(text, self.depth + 1)
        sub._expansions()
        self.commands.extend(sub.commands)

    def _expansions(self) -> None:
        """Read ``$``-expansions and backquotes through the whole text; the rest is data."""
        self._enter()
        src, n = self.src, len(self.src)
        while self.pos < n:
            c = src[self.pos]
            if c == "\\":
                self.pos += 2
            elif c == "$":
                self._dollar(in_dquote=True)
            elif c == "`":
                self._backquoted(in_dquote=False)
            else:
                self.pos += 1


def parse_commands(command: str) -> tuple[SimpleCommand, ...]:
    """Every simple command in ``command``, in order of appearance (substitutions before the
    command they stand in). Raises CommandSyntaxError when it cannot be parsed."""
    try:
        found = _Parser(command).parse()
    except RecursionError:
        raise CommandSyntaxError(f"nested more than {MAX_NESTING} levels deep") from None
    return tuple(SimpleCommand(tuple(c.words), tuple(c.stdin)) for c in found)


# ---------------------------------------------------------------------------------------------
# Wrappers: commands that run another command


def command_parts(command: str) -> tuple[SimpleCommand, ...]:
    """Every command ``command`` would run: its simple commands and, after each wrapper,
    the command it wraps (``sudo rm x`` is ``sudo rm x`` and ``rm x``)."""
    out: list[SimpleCommand] = []
    for simple in parse_commands(command):
        out.extend(_with_wrapped(simple, 0))
    return tuple(out)


def _with_wrapped(cmd: SimpleCommand, depth: int) -> Iterator[SimpleCommand]:
    if depth > MAX_NESTING:
        raise CommandSyntaxError(f"wrappers nested more than {MAX_NESTING} levels deep")
    yield cmd
    for inner in _wrapped(cmd):
        yield from _with_wrapped(inner, depth + 1)


def program(word: str) -> str:
    """A program's name as rules compare it: ``/usr/bin/rm`` is ``rm``."""
    return posixpath.basename(word) or word


def _literal(text: str) -> Word:
    return Word(text, shlex.quote(text))


def _options(args: Sequence[Word], short: str = "", long: Iterable[str] = ()) -> int:
    """The index of the first operand after getopt-style options. ``short``: the letters
    whose option takes a value (attached or the next word); ``long``: the ``--name`` options
    that take one (``--name=v`` or ``--name v``); any other ``-x`` or ``--name`` is a flag."""
    longs = frozenset(long)
    i = 0
    while i < len(args):
        a = args[i].value
        if a == "--":
            return i + 1
        if a.startswith("--"):
            i += 2 if (a in longs and "=" not in a) else 1
            continue
        if len(a) < 2 or a[0] != "-":
            return i
        i += 1
        for k, letter in enumerate(a[1:], 1):
            if letter in short:
                if k == len(a) - 1:
                    i += 1  # the value is the next word
                break
    return i


def _after_assignments(args: Sequence[Word], i: int) -> int:
    while i < len(args) and "=" in args[i].value and not args[i].value.startswith("="):
        i += 1
    return i


def _rest(args: Sequence[Word], i: int, stdin: Sequence[str] = ()) -> list[SimpleCommand]:
    return [SimpleCommand(tuple(args[i:]), tuple(stdin))] if i < len(args) else []


def _strings(text: str) -> list[SimpleCommand]:
    return list(parse_commands(text))


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "rbash", "posh", "yash"})


@dataclass(frozen=True)
class _Wrapper:
    """How a wrapper's own options look, so the command it runs can be found."""

    short: str = ""
    """Option letters that take a value (``-n 5`` or ``-n5``)."""
    long: frozenset[str] = frozenset()
    """``--name`` options that take a value (``--name v`` or ``--name=v``)."""
    operands: int = 0
    """Operands between the options and the command (``timeout``'s duration)."""
    assignments: bool = False
    """Whether ``VAR=value`` words may stand before the command (``sudo``)."""


_SUDO_LONG = frozenset(
    {"--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type"}
    | {"--other-user", "--command-timeout", "--chroot"}
)
_XARGS_LONG = frozenset(
    {"--arg-file", "--delimiter", "--max-args", "--max-procs", "--max-chars"}
    | {"--process-slot-var"}
)
_WRAPPERS: dict[str, _Wrapper] = {
    "builtin": _Wrapper(),
    "busybox": _Wrapper(),
    "nohup": _Wrapper(),
    "setsid": _Wrapper(),
    "exec": _Wrapper("a"),
    "time": _Wrapper("fo", frozenset({"--format", "--output"})),
    "nice": _Wrapper("n", frozenset({"--adjustment"})),
    "timeout": _Wrapper("sk", frozenset({"--signal", "--kill-after"}), operands=1),
    "stdbuf": _Wrapper("ioe", frozenset({"--input", "--output", "--error"})),
    "xargs": _Wrapper("adEILnPs", _XARGS_LONG),
    "sudo": _Wrapper("ugCDprtUTR", _SUDO_LONG, assignments=True),
    "doas": _Wrapper("uC", assignments=True),
}


def _wrapped(cmd: SimpleCommand) -> list[SimpleCommand]:
    """The commands ``cmd`` runs when it is a wrapper, else nothing."""
    name = program(cmd.words[0].value)
    args = cmd.words[1:]
    wrapper = _WRAPPERS.get(name)
    if wrapper is not None:
        i = _options(args, wrapper.short, wrapper.long) + wrapper.operands
        return _rest(args, _after_assignments(args, i) if wrapper.assignments else i)
    if name in _SHELLS:
        return _shell(args, cmd.stdin)
    if name == "env":
        return _env(args)
    if name == "command":
        i = _options(args)
        if any("v" in a.value or "V" in a.value for a in args[:i]):
            return []  # command -v NAME describes NAME, it does not run it
        return _rest(args, i)
    if name == "eval":
        return _strings(" ".join(a.value for a in args))
    if name == "find":
        return _find_exec(args)
    return []


def _env(args: Sequence[Word]) -> list[SimpleCommand]:
    i = _options(args, "uCSPa", ("--unset", "--chdir", "--split-string", "--argv0"))
    # -S STRING / --split-string=STRING: the string is split into more arguments for env
    k = 0
    while k < i:
        v = args[k].value
        split: str | None = None
        after = k + 1
        if v.startswith("--split-string"):
            if "=" in v:
                split = v.partition("=")[2]
            else:
                split, after = _value_after(args, k), k + 2
        elif v.startswith("-") and not v.startswith("--"):
            for at, letter in enumerate(v[1:], 1):
                if letter in "uCSPa":
                    if letter == "S":
                        split = v[at + 1 :]
                        if not split:
                            split, after = _value_after(args, k), k + 2
                    break
        if split is not None:
            try:
                words = [_literal(w) for w in shlex.split(split)]
            except ValueError as exc:
                raise CommandSyntaxError(f"env -S: {exc}") from None
            return [SimpleCommand((_literal("env"), *words, *args[after:]))]
        k += 1
    while i < len(args) and args[i].value == "-":  # "env -" is "env -i"
        i += 1
    return _rest(args, _after_assignments(args, i))


def _value_after(args: Sequence[Word], k: int) -> str:
    return args[k + 1].value if k + 1 < len(args) else ""


def _shell(args: Sequence[Word], stdin: Sequence[str]) -> list[SimpleCommand]:
    """``bash -c STRING``: STRING's commands; ``bash <<EOF``: the here-document's."""
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
    if with_c:
        return _strings(args[i].value) if i < len(args) else []
    if i < len(args) and not from_stdin:
        return []  # a script file: not read here
    return [part for text in stdin for part in _strings(text)]


def _find_exec(args: Sequence[Word]) -> list[SimpleCommand]:
    """``find ... -exec CMD {} ;`` (and -execdir, -ok, -okdir): the CMDs."""
    out: list[SimpleCommand] = []
    i = 0
    while i < len(args):
        if args[i].value in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(args) and args[j].value not in (";", "+"):
                j += 1
            if j > i + 1:
                out.append(SimpleCommand(tuple(args[i + 1 : j])))
            i = j
        i += 1
    return out


# ---------------------------------------------------------------------------------------------
# Rules and the policy

#: git's global options (before the subcommand) that take a value as the next word.
_GIT_VALUE_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})


def normal_words(values: Sequence[str]) -> tuple[str, ...]:
    """A command's words as rules compare them: the program by its base name, and for git,
    its global options set aside (``git -C dir --no-pager push`` is ``git push``)."""
    if not values:
        return ()
    name = program(values[0])
    rest = list(values[1:])
    if name == "git":
        i = 0
        while i < len(rest) and rest[i].startswith("-") and rest[i] != "--":
            i += 2 if (rest[i] in _GIT_VALUE_OPTIONS) else 1
        rest = rest[i:]
    return (name, *rest)


@dataclass(frozen=True)
class Rule:
    """One ``allow_commands`` or ``deny_commands`` entry: a command and its first words."""

    text: str
    words: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, setting: str = "rule") -> Rule:
        try:
            words = normal_words(shlex.split(text))
        except ValueError as exc:
            raise ValueError(f"{setting}: {text!r} cannot be parsed: {exc}") from None
        if not words:
            raise ValueError(f"{setting}: {text!r} names no command")
        return cls(text, words)

    def matches(self, words: Sequence[str]) -> bool:
        return tuple(words[: len(self.words)]) == self.words


@dataclass(frozen=True)
class Policy:
    """roles.yaml's ``allow_commands`` and ``deny_commands``, checked on every part of a
    command. Deny wins over allow; an empty allow list allows what deny does not refuse."""

    allow: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()

    @classmethod
    def from_rules(cls, *, allow: Iterable[str] = (), deny: Iterable[str] = ()) -> Policy | None:
        """The policy for these rules, or None (no policy) when both lists are empty.
        Raises ValueError naming a rule that cannot be parsed."""
        allow_rules = tuple(Rule.parse(t, "allow_commands") for t in allow)
        deny_rules = tuple(Rule.parse(t, "deny_commands") for t in deny)
        if not allow_rules and not deny_rules:
            return None
        return cls(allow_rules, deny_rules)

    def refusal(self, command: str) -> str | None:
        """Why ``command`` must not run (a message for the model), or None when it may."""
        try:
            parts = command_parts(command)
        except CommandSyntaxError as exc:
            return (
                f"refused: the command cannot be parsed ({exc}), and a command policy is set "
                "(roles.yaml allow_commands / deny_commands), so only commands it can check "
                "run; nothing was run"
            )
        normal = [(part, normal_words(part.values)) for part in parts]
        for part, words in normal:
            for rule in self.deny:
                if rule.matches(words):
                    return (
                        f"refused by deny_commands rule '{rule.text}': {_show(part)}; "
                        "nothing was run"
                    )
        if self.allow:
            for part, words in normal:
                if not any(rule.matches(words) for rule in self.allow):
                    allowed = ", ".join(f"'{r.text}'" for r in self.allow)
                    return (
                        f"refused by allow_commands: {_show(part)} is none of the allowed "
                        f"commands ({allowed}); nothing was run"
                    )
        return None


def _show(part: SimpleCommand) -> str:
    text = part.text
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 3] + "..."
    return f"`{text}`"
