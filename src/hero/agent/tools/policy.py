"""The command policy: which shell commands the bash tool runs (roles.yaml's ``allow_commands``
and ``deny_commands``), checked on the parsed command, never on its raw text.

A command is cut into the simple commands it would run, wherever they stand: joined by
``&&``, ``||``, ``;``, ``|``, ``&`` or a newline, inside ``( )``, ``{ }``, ``$( )``, backquotes,
``<( )``, ``if``/``while``/``for``/``case`` bodies, function bodies, ``coproc``,
``${x:-$(...)}`` and unquoted here-documents. Quotes and escapes are removed from each word
(``'r'm`` is ``rm``); leading ``VAR=value`` assignments, redirections, ``!`` and ``time`` are
set aside. Then the command a wrapper runs is checked as well, its options read as the
wrapper reads them (``_WRAPPERS``: ``sudo``, ``timeout``, ``nice``, ``flock``, ``chrt``,
``taskset``, ``unshare``, ``watch``, ``strace``, ``bwrap`` and the others there; ``env``,
``command``, ``eval``, ``trap``, ``su``/``runuser``, ``find -exec``, ``xargs``,
``parallel``), git's aliases and the commands of ``git rebase --exec``, ``git submodule
foreach`` and ``git bisect run``; a shell's ``-c STRING`` is parsed in turn, and so is what a
shell reads on its standard input when it is a literal on the command line (a here-document,
a here-string, an ``echo``/``printf`` of literal words piped in).

A rule is a command and its first words (``git push``); it matches a simple command whose
words start with the rule's, the program compared by its base name (``/bin/rm`` is ``rm``,
``git-rm`` is ``git rm``) and ``git``'s global options (``git -C dir push``) set aside. A word
``xargs``, ``find`` or ``parallel`` fills in from its input at run time matches any word of a
deny rule. A command hero cannot parse is refused: what cannot be read cannot be checked. So
is one that runs commands the parser cannot see on the command line (``UncheckedCommand``):
a shell reading a pipe from ``curl`` or ``base64 -d``, a file or an inherited standard input;
a wrapper whose command would be put together from input; an alias or ``hash -p`` definition.

This is a guard-rail against accidents of a model that means well, not a wall: the contents
of a script file a command runs (``sh build.sh``, ``make``, ``npm run``), what an interpreter
runs (``python -c``), what a program runs from its own configuration, a program copied or
linked under another name, and a command put together at run time (``$CMD``,
``$(echo rm) x``) are not seen. The sandbox is the wall.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from hero.errors import HeroError

#: How deep substitutions, quotes and wrappers may nest before a command is refused.
MAX_NESTING = 50
#: How much of a refused part the refusal quotes.
_SHOWN_CHARS = 200


class CommandSyntaxError(HeroError, ValueError):
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
    piped_from: SimpleCommand | None = None
    """The simple command whose output is piped into this one (``printf ... | sh``)."""
    stdin_unknown: bool = False
    """Its standard input is a file, a descriptor, or a pipe from a compound command: what it
    reads there cannot be known from the command line."""
    stdin_literal: bool = True
    """False when a here-string or here-document in ``stdin`` holds expansions (``$x``,
    ``$(...)``): its text is known only at run time."""

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
    piped: bool = False
    """Its standard input is a pipe (``a | b``)."""
    source: _Command | None = None
    """The simple command writing into that pipe (None: a compound command writes it)."""
    redirected: bool = False
    """Its standard input is redirected from a file or a descriptor (``<``, ``<&``, ``<>``)."""
    stdin_literal: bool = True
    """False when a here-string or here-document in ``stdin`` holds expansions."""


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
    target: _Command


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
#: Reserved words that start a compound command (after ``coproc NAME``).
_COMPOUND_STARTS = frozenset({"{", "if", "while", "until", "for", "select", "case", "[["})
_INPUT_REDIRECTS = frozenset({"<", "<&", "<>"})
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


def _reserved(word: Word) -> bool:
    """Whether ``word`` starts a compound command (unquoted, as reserved words count)."""
    return word.raw == word.value and word.value in _COMPOUND_STARTS


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
        self._pushed: list[_Token] = []  # tokens read ahead and given back, the next one last

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
                    if not _ASSIGNMENT.match(tok.word.raw):
                        # a compound command (`a | { b; }`): the pipe is not followed into
                        # it, so a shell in it reading stdin is refused, as one inheriting it
                        cmd.piped, cmd.source = False, None
                    continue
                cmd.words.append(tok.word)
                continue
            if tok.kind == "redir":
                waiting = ""
                self._redirect(tok.text, cmd)
                continue
            self._finish(cmd)
            finished, cmd = cmd, _Command()
            if tok.kind == "newline":
                if waiting in ("|", "|&"):  # `a |` newline `b`: b still reads the pipe
                    cmd.piped, cmd.source = finished.piped, finished.source
                continue
            if waiting and not (tok.kind == "op" and tok.text == "("):
                raise CommandSyntaxError(f"'{waiting}' with no command after it")
            if tok.text in _SEPARATORS:
                waiting = "" if tok.text in (";", "&") else tok.text
                if waiting in ("|", "|&"):
                    cmd.piped, cmd.source = True, (finished if finished.words else None)
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
            if v == "coproc":
                self._coproc_name()
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
        self._push(tok)
        return False

    def _coproc_name(self) -> None:
        """After ``coproc``: skip the coprocess's NAME, which bash allows only before a
        compound command (``coproc NAME { ...; }``); in ``coproc rm x`` the word is the
        command. Either way the command that follows is read as any other."""
        tok = self._next()
        if tok.kind == "word" and tok.word is not None and not _reserved(tok.word):
            after = self._next()
            named = (after.kind == "op" and after.text == "(") or (
                after.kind == "word" and after.word is not None and _reserved(after.word)
            )
            self._push(after)
            if named:
                return
        self._push(tok)

    def _function_parens(self, *, required: bool, opened: bool = False) -> None:
        if not opened:
            tok = self._next()
            if not (tok.kind == "op" and tok.text == "("):
                if required:
                    raise CommandSyntaxError("expected '(' in a function definition")
                self._push(tok)
                return
        tok = self._next()
        if not (tok.kind == "op" and tok.text == ")"):
            raise CommandSyntaxError("unexpected '(' (a function definition is 'name() { ...; }')")

    def _skip_word(self, value: str) -> None:
        tok = self._next()
        if not (tok.kind == "word" and tok.word is not None and tok.word.raw == value):
            self._push(tok)

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
            self._push(tok)

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
        if op in _INPUT_REDIRECTS:
            cmd.redirected = True
        elif op == "<<<":
            cmd.stdin.append(target.value)
            cmd.stdin_literal = cmd.stdin_literal and target.literal
        elif op in ("<<", "<<-"):
            quoted = any(c in target.raw for c in "'\"\\")
            self._heredocs.append(_Heredoc(target.value, quoted, op == "<<-", cmd))

    # -- tokens

    def _push(self, tok: _Token) -> None:
        self._pushed.append(tok)

    def _next(self) -> _Token:
        if self._pushed:
            return self._pushed.pop()
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
                if "$" in body or "`" in body:
                    doc.target.stdin_literal = False
            doc.target.stdin.append(body)

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
    made: dict[int, SimpleCommand] = {}  # a pipe's writer comes before its reader
    for c in found:
        source = made.get(id(c.source)) if c.source is not None else None
        unknown = c.redirected or (c.piped and source is None)
        made[id(c)] = SimpleCommand(
            tuple(c.words), tuple(c.stdin), source, unknown, c.stdin_literal
        )
    return tuple(made.values())


# ---------------------------------------------------------------------------------------------
# Wrappers: commands that run another command

#: What a word a wrapper fills in at run time holds (``xargs``' input, ``find``'s ``{}``):
#: it could be any word, so a deny rule's word matches it. NUL: no real argument has one.
FILLED = "\0"
#: The words ``xargs`` (or ``parallel``) appends from its input.
_FROM_INPUT = Word(FILLED, "<input>", literal=False)
#: Bash's tables that make a name run something else: an alias, a remembered program path.
_NAME_TABLES = ("BASH_ALIASES", "BASH_CMDS")


class UncheckedCommand(HeroError, ValueError):
    """The command runs commands the policy cannot see: read from a pipe, a file or a
    descriptor, filled in from input at run time, or named by an alias. Under a policy such a
    command is refused, and this is the reason it gives."""


def command_parts(command: str) -> tuple[SimpleCommand, ...]:
    """Every command ``command`` would run: its simple commands and, after each wrapper,
    the command it wraps (``sudo rm x`` is ``sudo rm x`` and ``rm x``). Raises
    CommandSyntaxError when it cannot be parsed, UncheckedCommand when it runs commands that
    cannot be found on the command line."""
    parts, unchecked = _parts(command)
    if unchecked:
        raise unchecked[0]
    return tuple(parts)


def _parts(command: str) -> tuple[list[SimpleCommand], list[UncheckedCommand]]:
    """The parts ``command_parts`` finds, and why some could not be followed (the parts
    found up to there are kept, so a deny rule can still name one)."""
    parts: list[SimpleCommand] = []
    unchecked: list[UncheckedCommand] = []
    if any(name in command for name in _NAME_TABLES):
        unchecked.append(UncheckedCommand(_TABLES_REASON))
    for simple in parse_commands(command):
        try:
            for part in _with_wrapped(simple, 0):
                parts.append(part)
        except UncheckedCommand as exc:
            unchecked.append(exc)
    return parts, unchecked


_TABLES_REASON = (
    "`BASH_ALIASES` and `BASH_CMDS` make a name run another command (an alias, a remembered "
    "path), which the policy does not follow"
)


def _with_wrapped(cmd: SimpleCommand, depth: int) -> Iterator[SimpleCommand]:
    if depth > MAX_NESTING:
        raise CommandSyntaxError(f"wrappers nested more than {MAX_NESTING} levels deep")
    if any(name in w.value for w in cmd.words for name in _NAME_TABLES):
        raise UncheckedCommand(_TABLES_REASON)
    yield cmd
    for inner in _wrapped(cmd):
        yield from _with_wrapped(inner, depth + 1)


def program(word: str) -> str:
    """A program's name as rules compare it: ``/usr/bin/rm`` is ``rm``."""
    return posixpath.basename(word) or word


def _literal(text: str) -> Word:
    return Word(text, shlex.quote(text))


def _inner(cmd: SimpleCommand, words: Sequence[Word]) -> SimpleCommand:
    """The command a wrapper runs: ``words``, reading the wrapper's own standard input."""
    return replace(cmd, words=tuple(words))


def _joined(words: Sequence[Word]) -> Word:
    """Words joined with blanks into one command string (``watch``, ``eval``)."""
    return Word(
        " ".join(w.value for w in words),
        " ".join(w.raw for w in words),
        all(w.literal for w in words),
    )


def _filled(word: Word, placeholder: str) -> Word:
    """``word`` with ``placeholder`` (``{}``) standing for what is filled in at run time."""
    if placeholder not in word.value:
        return word
    return Word(word.value.replace(placeholder, FILLED), word.raw, literal=False)


def _takes(*names: str, n: int = 1) -> dict[str, int]:
    """Long options that take ``n`` values each (0: a value only after ``=``)."""
    return dict.fromkeys(names, n)


_NO_LONG: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True)
class _Options:
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


def _scan(
    args: Sequence[Word],
    short: str = "",
    long: Mapping[str, int] = _NO_LONG,
    *,
    optional: str = "",
    start: int = 0,
    permute: bool = False,
) -> _Options:
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
    return _Options(i, tuple(found), tuple(operands))


def _long_option(name: str, long: Mapping[str, int]) -> tuple[str, int]:
    count = long.get(name)
    if count is not None:
        return name, count
    for full, count in long.items():
        if full.startswith(name):
            return full, count
    return name, 0


def _options(args: Sequence[Word], short: str = "", long: Mapping[str, int] = _NO_LONG) -> int:
    """The index of the first operand after getopt-style options (see ``_scan``)."""
    return _scan(args, short, long).end


def _after_assignments(args: Sequence[Word], i: int) -> int:
    while i < len(args) and "=" in args[i].value and not args[i].value.startswith("="):
        i += 1
    return i


def _located(name: str, args: Sequence[Word], i: int) -> None:
    """Refuse when a word before a wrapper's command (an option, a value, an operand) is
    filled in at run time: then where the command starts cannot be known."""
    if any(FILLED in a.value for a in args[:i]):
        raise UncheckedCommand(
            f"the command `{name}` runs would be put together from its input at run time"
        )


def _strings(text: str) -> list[SimpleCommand]:
    return list(parse_commands(text))


def _string(name: str, word: Word) -> list[SimpleCommand]:
    """The commands of a command string ``name`` hands to a shell."""
    if FILLED in word.value:
        raise UncheckedCommand(f"`{name}` would run a command string filled in at run time")
    return _strings(word.value)


@dataclass(frozen=True)
class _Wrapper:
    """How a wrapper's own options look, so the command it runs can be found."""

    short: str = ""
    """Option letters that take a value (``-n 5`` or ``-n5``)."""
    long: Mapping[str, int] = field(default_factory=dict)
    """``--name`` options that take values (``--name v`` or ``--name=v``), and how many."""
    optional: str = ""
    """Option letters whose value is optional and attached (``xargs -i{}``)."""
    operands: int = 0
    """Operands between the options and the command (``timeout``'s duration)."""
    arch: bool = False
    """A first word that is no option is an operand before the options (``setarch``)."""
    priority: bool = False
    """A number may stand before the command (``chrt``'s priority)."""
    assignments: bool = False
    """Whether ``VAR=value`` words may stand before the command (``sudo``)."""
    strings: frozenset[str] = frozenset()
    """Options whose value is a command string for ``sh -c`` (``su -c``); ``flock`` and
    ``sg`` take it where the command would stand."""
    joined: bool = False
    """The command's words are joined with blanks and run by ``sh -c`` (``watch``)."""
    direct: frozenset[str] = frozenset()
    """Options with which a ``joined`` wrapper runs the words as they are (``watch -x``)."""
    shell: bool = False
    """With no command it runs a shell, which reads commands from its standard input."""
    shell_options: frozenset[str] = frozenset()
    """Options with which it runs such a shell when no command is given (``sudo -s``)."""
    no_command: frozenset[str] = frozenset()
    """Options with which it runs no command (``chrt -p PID``)."""
    hidden: frozenset[str] = frozenset()
    """Options with which it reads its command from elsewhere (``bwrap --args FD``)."""
    permute: bool = False
    """Options may follow its operands, which are data, not a command (``script FILE``)."""


def _set(*names: str) -> frozenset[str]:
    return frozenset(names)


_SUDO_LONG = _takes(
    *("--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type"),
    *("--other-user", "--command-timeout", "--chroot"),
)
_XARGS_LONG = {
    **_takes("--arg-file", "--delimiter", "--max-args", "--max-procs", "--max-chars"),
    **_takes("--process-slot-var"),
    **_takes("--replace", "--eof", "--max-lines", n=0),
}
_SU_LONG = _takes(
    "--whitelist-environment", "--group", "--supp-group", "--shell", "--command"
) | _takes("--session-command")
_STRACE_LONG = _takes(
    *("--output", "--trace", "--signal", "--status", "--attach", "--user", "--env"),
    *("--detach-on", "--interruptible", "--trace-path", "--columns", "--abbrev", "--verbose"),
    *("--raw", "--read", "--write", "--kvm", "--string-limit", "--const-print-style"),
    *("--summary-syscall-overhead", "--summary-sort-by", "--summary-columns", "--inject"),
    *("--fault", "--decode-pids"),
)
_SYSTEMD_RUN_LONG = _takes(
    *("--unit", "--property", "--host", "--machine", "--description", "--slice"),
    *("--service-type", "--uid", "--gid", "--nice", "--working-directory", "--setenv"),
    *("--path-property", "--socket-property", "--timer-property", "--on-active", "--on-boot"),
    *("--on-startup", "--on-unit-active", "--on-unit-inactive", "--on-calendar"),
    *("--capsule", "--expand-environment", "--background", "--json"),
)
_BWRAP_LONG = {
    **_takes(
        *("--args", "--argv0", "--level-prefix", "--userns", "--userns2", "--pidns", "--uid"),
        *("--gid", "--hostname", "--chdir", "--unsetenv", "--lock-file", "--sync-fd"),
        *("--remount-ro", "--exec-label", "--file-label", "--proc", "--dev", "--tmpfs"),
        *("--mqueue", "--dir", "--seccomp", "--add-seccomp-fd", "--block-fd", "--info-fd"),
        *("--userns-block-fd", "--json-status-fd", "--cap-add", "--cap-drop", "--perms"),
        *("--size", "--overlay-src", "--tmp-overlay", "--ro-overlay"),
    ),
    **_takes(
        *("--bind", "--bind-try", "--dev-bind", "--dev-bind-try", "--ro-bind", "--ro-bind-try"),
        *("--bind-fd", "--ro-bind-fd", "--file", "--bind-data", "--ro-bind-data", "--symlink"),
        *("--chmod", "--setenv"),
        n=2,
    ),
    **_takes("--overlay", n=3),
}
_PARALLEL_LONG = {
    **_takes(
        *("--arg-file", "--arg-sep", "--arg-file-sep", "--colsep", "--delimiter", "--jobs"),
        *("--max-procs", "--max-args", "--max-replace-args", "--max-chars", "--sshlogin"),
        *("--sshloginfile", "--slf", "--joblog", "--results", "--res", "--tmpdir"),
        *("--tempdir", "--timeout", "--delay", "--retries", "--halt", "--halt-on-error"),
        *("--load", "--memfree", "--memsuspend", "--nice", "--workdir", "--wd", "--basefile"),
        *("--bf", "--transferfile", "--tf", "--return", "--env", "--tag-string", "--tagstring"),
        *("--block", "--block-size", "--recstart", "--recend", "--header", "--termseq"),
        *("--sqlmaster", "--sqlworker", "--sqlandworker", "--ssh", "--sshdelay", "--rpl"),
        *("--parens", "--limit", "--semaphorename", "--id", "--template", "--trc", "--trim"),
        *("--group-by", "--compress-program", "--decompress-program", "--profile"),
        *("--minversion", "--seqreplace", "--process-slot-var", "--ctagstring", "--shebang"),
    ),
    **_takes("--replace", "--eof", "--max-lines", n=0),
}
_SHELL_OPTION = _set("-c", "--command")

_WRAPPERS: dict[str, _Wrapper] = {
    "builtin": _Wrapper(),
    "busybox": _Wrapper(),
    "nohup": _Wrapper(),
    "setsid": _Wrapper(),
    "exec": _Wrapper("a"),
    "time": _Wrapper("fo", _takes("--format", "--output")),
    "nice": _Wrapper("n", _takes("--adjustment")),
    "timeout": _Wrapper("sk", _takes("--signal", "--kill-after"), operands=1),
    "stdbuf": _Wrapper("ioe", _takes("--input", "--output", "--error")),
    "sudo": _Wrapper(
        "ugCDprtUTR",
        _SUDO_LONG,
        assignments=True,
        shell_options=_set("-s", "--shell", "-i", "--login"),
        no_command=_set("-e", "--edit", "-l", "--list", "-v", "--validate", "-V", "--version"),
    ),
    "doas": _Wrapper("auC", assignments=True, shell_options=_set("-s"), no_command=_set("-C")),
    "pkexec": _Wrapper(long=_takes("--user"), shell=True),
    "ionice": _Wrapper(
        "cnpPu",
        _takes("--class", "--classdata", "--pid", "--pgid", "--uid"),
        no_command=_set("-p", "-P", "-u", "--pid", "--pgid", "--uid"),
    ),
    "flock": _Wrapper(
        "wE",
        _takes("--timeout", "--wait", "--conflict-exit-code"),
        operands=1,
        strings=_SHELL_OPTION,
    ),
    "setpriv": _Wrapper(
        long=_takes(
            *("--ruid", "--euid", "--rgid", "--egid", "--reuid", "--regid", "--groups"),
            *("--inh-caps", "--ambient-caps", "--bounding-set", "--securebits", "--pdeathsig"),
            *("--selinux-label", "--apparmor-profile", "--landlock-access", "--landlock-rule"),
            *("--seccomp-filter",),
        ),
        no_command=_set("-d", "--dump"),
    ),
    "chrt": _Wrapper(
        "TPD",
        _takes("--sched-runtime", "--sched-period", "--sched-deadline"),
        priority=True,
        no_command=_set("-p", "--pid", "-m", "--max"),
    ),
    "taskset": _Wrapper(operands=1, no_command=_set("-p", "--pid")),
    "prlimit": _Wrapper("po", _takes("--pid", "--output"), no_command=_set("-p", "--pid")),
    "unshare": _Wrapper(
        "RwSG",
        _takes(
            *("--map-user", "--map-group", "--map-users", "--map-groups", "--propagation"),
            *("--setgroups", "--root", "--wd", "--setuid", "--setgid", "--monotonic"),
            *("--boottime", "--load-interp"),
        ),
        shell=True,
    ),
    "nsenter": _Wrapper("tSGW", _takes("--target", "--setuid", "--setgid", "--wdns"), shell=True),
    "chroot": _Wrapper(long=_takes("--groups", "--userspec"), operands=1, shell=True),
    "script": _Wrapper(
        "IOBTmEoc",
        _takes(
            *("--log-in", "--log-out", "--log-io", "--log-timing", "--logging-format"),
            *("--echo", "--output-limit", "--command"),
        ),
        strings=_SHELL_OPTION,
        shell=True,
        permute=True,
    ),
    "sg": _Wrapper(operands=1, strings=_set("-c"), joined=True, shell=True),
    "newgrp": _Wrapper(shell=True, permute=True),
    "watch": _Wrapper(
        "nq", _takes("--interval", "--equexit"), joined=True, direct=_set("-x", "--exec")
    ),
    "strace": _Wrapper("abeEIoOpPsSuUX", _STRACE_LONG),
    "ltrace": _Wrapper(
        "aAeFlnopsuxwD",
        _takes("--align", "--config", "--indent", "--library", "--output", "--where"),
    ),
    "valgrind": _Wrapper(),
    "catchsegv": _Wrapper(),
    "eatmydata": _Wrapper(),
    "unbuffer": _Wrapper(),
    "fakeroot": _Wrapper("lsib", _takes("--lib", "--faked"), shell=True),
    "systemd-run": _Wrapper("upHME", _SYSTEMD_RUN_LONG, shell_options=_set("-S", "--shell")),
    "dbus-launch": _Wrapper(long=_takes("--autolaunch", "--config-file")),
    "firejail": _Wrapper(shell=True),
    "bwrap": _Wrapper(long=_BWRAP_LONG, hidden=_set("--args")),
    "setarch": _Wrapper(arch=True, shell=True, no_command=_set("--list")),
    **dict.fromkeys(("linux32", "linux64", "i386", "x86_64", "uname26"), _Wrapper(shell=True)),
    "chpst": _Wrapper("uUbe/nlLmdopfct"),
    "proot": _Wrapper(
        "rbmqwkivRS",
        _takes("--rootfs", "--bind", "--mount", "--qemu", "--pwd", "--cwd", "--kernel-release")
        | _takes("--change-id", "--verbose"),
        shell=True,
    ),
    "torsocks": _Wrapper(
        "upaP", _takes("--user", "--pass", "--address", "--port"), shell_options=_set("--shell")
    ),
}
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "rbash", "posh", "yash"})
_SU = _Wrapper("wgGsc", _SU_LONG, strings=_set("-c", "--command", "--session-command"))
_RUNUSER = replace(_SU, short="wgGscu", long={**_SU_LONG, **_takes("--user")})
_XARGS = _Wrapper("adEILnPs", _XARGS_LONG, optional="iel")
_PARALLEL = _Wrapper("aCdEIjJLnNPSs", _PARALLEL_LONG, optional="iel")


def _wrapped(cmd: SimpleCommand) -> list[SimpleCommand]:
    """The commands ``cmd`` runs when it is a wrapper, else nothing."""
    name = program(cmd.words[0].value)
    args = cmd.words[1:]
    wrapper = _WRAPPERS.get(name)
    if wrapper is not None:
        if name == "sg" and args and args[0].value == "-":  # sg [-] GROUP: a login shell
            args = args[1:]
        return _wrapper(cmd, name, wrapper, args)
    if name in _SHELLS:
        return _shell(cmd, args)
    if name.startswith("git-") and len(name) > 4:  # git-rm, git-core's programs: `git rm`
        return _git((_literal(name[4:]), *args))
    handler = _HANDLERS.get(name)
    return handler(cmd, args) if handler is not None else []


def _wrapper(
    cmd: SimpleCommand, name: str, w: _Wrapper, args: Sequence[Word]
) -> list[SimpleCommand]:
    start = 1 if w.arch and args and not args[0].value.startswith("-") else 0
    opts = _scan(args, w.short, w.long, optional=w.optional, start=start, permute=w.permute)
    if opts.has(w.no_command):
        return []
    for option, _ in opts.found:
        if option in w.hidden:
            raise UncheckedCommand(f"`{name} {option}` reads the command it runs from elsewhere")
    string = opts.value(w.strings)
    if string is not None:
        return _string(name, string)
    i = len(args) if w.permute else opts.end + w.operands
    if w.priority and i < len(args) and args[i].value.isdigit():
        i += 1
    if w.assignments:
        i = _after_assignments(args, i)
    _located(name, args, i)
    if i < len(args) and args[i].value in w.strings:  # flock FILE -c STRING, sg GROUP -c ...
        return _string(name, args[i + 1]) if i + 1 < len(args) else []
    if i >= len(args):
        if w.shell or opts.has(w.shell_options):  # the shell it runs reads stdin
            return _fed_commands(cmd, f"`{name}` (with no command it runs a shell)")
        return []
    if w.joined and not opts.has(w.direct):
        return _string(name, _joined(args[i:]))
    return [_inner(cmd, args[i:])]


def _env(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    i = _options(args, "uCSPa", _takes("--unset", "--chdir", "--split-string", "--argv0"))
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
            if FILLED in split:
                raise UncheckedCommand("`env -S` would split a string filled in at run time")
            try:
                words = [_literal(w) for w in shlex.split(split)]
            except ValueError as exc:
                raise CommandSyntaxError(f"env -S: {exc}") from None
            return [_inner(cmd, (_literal("env"), *words, *args[after:]))]
        k += 1
    while i < len(args) and args[i].value == "-":  # "env -" is "env -i"
        i += 1
    i = _after_assignments(args, i)
    _located("env", args, i)
    return [_inner(cmd, args[i:])] if i < len(args) else []


def _value_after(args: Sequence[Word], k: int) -> str:
    return args[k + 1].value if k + 1 < len(args) else ""


def _command(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    opts = _scan(args)
    if any(name in ("-v", "-V") for name, _ in opts.found):
        return []  # command -v NAME describes NAME, it does not run it
    _located("command", args, opts.end)
    return [_inner(cmd, args[opts.end :])] if opts.end < len(args) else []


def _eval(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    return _string("eval", _joined(args))


#: Paths through which a shell reads its own standard input as a script.
_STDIN_FILES = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})


def _shell(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
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
        return _strings(args[i].value) if i < len(args) else []
    if i < len(args) and not from_stdin:
        return _script(cmd, name, args[i])
    return _fed_commands(cmd, f"`{name}`")


def _script(cmd: SimpleCommand, name: str, word: Word) -> list[SimpleCommand]:
    """A script a shell (or ``source``) runs: a file is not read (the policy does not see
    inside files); a pipe, which a file path can name, is read like standard input."""
    path = word.value
    if path in _STDIN_FILES:
        return _fed_commands(cmd, f"`{name}`")
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


def _source(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    i = _options(args, "p")
    return _script(cmd, program(cmd.words[0].value), args[i]) if i < len(args) else []


def _fed_commands(cmd: SimpleCommand, who: str) -> list[SimpleCommand]:
    """The commands a shell reads from its standard input; refused unless they are a
    literal on the command line. ``who``: the shell, as the reason names it."""
    texts = _input_texts(cmd)
    if texts is not None:
        return [part for text in texts for part in _strings(text)]
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
            f"{who} would run the commands piped into it by `{_clip(cmd.piped_from.text)}`, "
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


def _find_exec(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    """``find ... -exec CMD {} ;`` (and -execdir, -ok, -okdir): the CMDs, ``{}`` filled in."""
    out: list[SimpleCommand] = []
    i = 0
    while i < len(args):
        if args[i].value in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(args) and args[j].value not in (";", "+"):
                j += 1
            if j > i + 1:
                out.append(SimpleCommand(tuple(_filled(w, "{}") for w in args[i + 1 : j])))
            i = j
        i += 1
    return out


def _xargs(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    """``xargs CMD``: CMD with the words of its input appended, or put where ``-I``'s string
    stands."""
    opts = _scan(args, _XARGS.short, _XARGS.long, optional=_XARGS.optional)
    _located("xargs", args, opts.end)
    placeholder: str | None = None
    for option, value in opts.found:
        if option == "-I" and value is not None:
            placeholder = value.value
        elif option in ("-i", "--replace"):
            placeholder = value.value if value is not None else "{}"
    words = list(args[opts.end :]) or [_literal("echo")]
    if placeholder:
        return [SimpleCommand(tuple(_filled(w, placeholder) for w in words))]
    return [SimpleCommand((*words, _FROM_INPUT))]


#: The replacement strings of GNU parallel (``{}``, ``{.}``, ``{/}``, ``{2}``, ``{= perl =}``).
_PARALLEL_PLACEHOLDER = re.compile(r"\{=.*?=\}|\{[^{}\s]*\}")


def _parallel(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    """``parallel CMD ::: ARGS``: CMD joined into a command line for a shell, each argument
    (quoted, as parallel does) where a replacement string stands or appended. Without CMD
    each argument is a command line itself."""
    opts = _scan(args, _PARALLEL.short, _PARALLEL.long, optional=_PARALLEL.optional)
    _located("parallel", args, opts.end)
    arg_sep = opts.value(("--arg-sep",))
    file_sep = opts.value(("--arg-file-sep",))
    seps = {arg_sep.value if arg_sep else ":::", file_sep.value if file_sep else "::::"}
    seps |= {s + "+" for s in seps}
    rest = args[opts.end :]
    k = next((n for n, w in enumerate(rest) if w.value in seps), len(rest))
    template, inputs = rest[:k], rest[k:]
    if not template:
        literal_only = (
            inputs
            and inputs[0].value == (arg_sep.value if arg_sep else ":::")
            and not any(w.value in seps for w in inputs[1:])
            and not opts.has(_set("-a", "--arg-file"))
        )
        if not literal_only:
            raise UncheckedCommand(
                "`parallel` without a command runs the command lines of its input, which the "
                "policy cannot read"
            )
        return [part for w in inputs[1:] for part in _string("parallel", w)]
    line = _PARALLEL_PLACEHOLDER.sub(FILLED, " ".join(w.value for w in template))
    custom = opts.value(("-I", "-i", "--replace"))
    if custom is not None:
        line = line.replace(custom.value, FILLED)
    if FILLED not in line:
        line += " " + FILLED
    return _strings(line)


def _su(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    """``su [-] [-c STRING] [-s SHELL] [USER [ARGS]]``: SHELL (``sh``) with ``-c STRING`` and
    ARGS; ``runuser -u USER [--] CMD``: CMD itself."""
    name = program(cmd.words[0].value)
    w = _RUNUSER if name == "runuser" else _SU
    _located(name, args, len(args))
    opts = _scan([a for a in args if a.value != "-"], w.short, w.long, permute=True)
    shell = opts.value(("-s", "--shell")) or _literal("sh")
    string = opts.value(w.strings)
    if string is not None:
        return [_inner(cmd, (shell, _literal("-c"), string, *opts.operands[1:]))]
    if name == "runuser" and opts.value(("-u", "--user")) is not None:
        return [_inner(cmd, opts.operands or (shell,))]
    return [_inner(cmd, (shell, *opts.operands[1:]))]


def _alias(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    # An alias makes a name run other words; following it would mean expanding aliases as
    # bash does (from the next line on, only when expand_aliases is on or in POSIX mode, as
    # `sh` is; a value ending in a blank expands the next word too), and checking the value
    # alone is not enough (`alias g=git` then `g rm x`). A one-shot command has no need for
    # an alias, so under a policy defining one is refused; listing them (`alias`) is not.
    if any("=" in a.value and not a.value.startswith("-") for a in args):
        raise UncheckedCommand(
            "`alias` would give other commands a name the policy does not follow; aliases "
            "cannot be defined while a command policy is set"
        )
    return []


def _hash(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    if _scan(args, "p").has(_set("-p")):  # hash -p /bin/rm ls: `ls` then runs /bin/rm
        raise UncheckedCommand(
            "`hash -p` would make a name run another program, which the policy does not follow"
        )
    return []


def _trap(cmd: SimpleCommand, args: Sequence[Word]) -> list[SimpleCommand]:
    """``trap STRING SIGNAL...``: STRING runs when the signal comes (EXIT: at the end)."""
    operands = args[_options(args) :]
    if len(operands) >= 2 and operands[0].value != "-":
        return _string("trap", operands[0])
    return []


#: git's global options (before the subcommand) that take a value as the next word.
_GIT_VALUE_OPTIONS = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env"}
)


def _git(args: Sequence[Word]) -> list[SimpleCommand]:
    """What git runs from its command line: aliases defined there (``-c alias.x=...``,
    ``git config alias.x ...``: the alias's command, checked when it is defined), and the
    commands of ``rebase --exec``, ``submodule foreach`` and ``bisect run``."""
    out: list[SimpleCommand] = []
    settings: list[Word] = []
    i = 0
    while i < len(args) and args[i].value.startswith("-") and args[i].value != "--":
        a = args[i].value
        if a == "-c" and i + 1 < len(args):
            settings.append(args[i + 1])
        elif a.startswith("--config-env"):
            env_setting = a.partition("=")[2] if "=" in a else _value_after(args, i)
            if env_setting.lower().startswith("alias."):
                raise UncheckedCommand("`git --config-env alias...` takes an alias from a variable")
        i += 2 if a in _GIT_VALUE_OPTIONS else 1
    if i >= len(args):
        return out
    sub, rest = args[i].value, args[i + 1 :]
    for word in settings:
        key, _, value = word.value.partition("=")
        if key.lower().startswith("alias."):
            out += _git_alias(value, rest)
    if sub == "config":
        opts = _scan(rest, "f", _GIT_CONFIG_LONG, permute=True)
        operands = [w.value for w in opts.operands]
        if operands[:1] == ["set"]:
            operands = operands[1:]
        if len(operands) >= 2 and operands[0].lower().startswith("alias."):
            out += _git_alias(operands[1], ())
    elif sub == "rebase":
        opts = _scan(rest, "sXCx", _GIT_REBASE_LONG, permute=True)
        for option, command in opts.found:
            if option in ("-x", "--exec") and command is not None:
                out += _string("git rebase --exec", command)
    elif sub == "submodule":
        values = [w.value for w in rest]
        if "foreach" in values:
            after = rest[values.index("foreach") + 1 :]
            words = after[_options(after) :]
            if words:
                out += _string("git submodule foreach", _joined(words))
    elif sub == "bisect" and rest[:1] and rest[0].value == "run" and rest[1:]:
        out.append(SimpleCommand(tuple(rest[1:])))
    return out


_GIT_CONFIG_LONG = _takes("--file", "--blob", "--type", "--default", "--comment", "--value")
_GIT_REBASE_LONG = _takes("--exec", "--onto", "--strategy", "--strategy-option", "--whitespace")


def _git_alias(value: str, tail: Sequence[Word]) -> list[SimpleCommand]:
    """What a git alias runs: ``!COMMAND`` a shell command, else git with its words."""
    if FILLED in value:
        raise UncheckedCommand("a git alias would be filled in at run time")
    if value.startswith("!"):
        return _strings(value[1:])
    try:
        words = [_literal(w) for w in shlex.split(value)]
    except ValueError as exc:
        raise CommandSyntaxError(f"git alias {value!r}: {exc}") from None
    return [SimpleCommand((_literal("git"), *words, *tail))]


_HANDLERS: dict[str, Callable[[SimpleCommand, Sequence[Word]], list[SimpleCommand]]] = {
    "env": _env,
    "command": _command,
    "eval": _eval,
    "find": _find_exec,
    "xargs": _xargs,
    "parallel": _parallel,
    "su": _su,
    "runuser": _su,
    "alias": _alias,
    "hash": _hash,
    "trap": _trap,
    ".": _source,
    "source": _source,
    "git": lambda cmd, args: _git(args),
}


def _clip(text: str) -> str:
    text = text.replace(FILLED, "<input>")
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


# ---------------------------------------------------------------------------------------------
# Rules and the policy


def normal_words(values: Sequence[str]) -> tuple[str, ...]:
    """A command's words as rules compare them: the program by its base name, and for git,
    its global options set aside (``git -C dir --no-pager push`` is ``git push``) and its
    dashed programs read as subcommands (``/usr/lib/git-core/git-push`` is ``git push``)."""
    if not values:
        return ()
    name = program(values[0])
    rest = list(values[1:])
    if name.startswith("git-") and len(name) > 4:
        name, rest = "git", [name[4:], *rest]
    elif name == "git":
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

    def matches(self, words: Sequence[str], *, filled: bool = False) -> bool:
        """Whether ``words`` start with the rule's. ``filled``: a word filled in at run time
        (``xargs``' input, ``find``'s ``{}``) matches whatever stands in the rule there."""
        for k, rule_word in enumerate(self.words):
            if k >= len(words):
                return False
            if words[k] != rule_word:
                return filled and FILLED in words[k]
        return True


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
            parts, unchecked = _parts(command)
        except CommandSyntaxError as exc:
            return (
                f"refused: the command cannot be parsed ({exc}), and a command policy is set "
                "(roles.yaml allow_commands / deny_commands), so only commands it can check "
                "run; nothing was run"
            )
        normal = [(part, normal_words(part.values)) for part in parts]
        for part, words in normal:
            for rule in self.deny:
                if rule.matches(words, filled=True):
                    note = "" if rule.matches(words) else _FILLED_NOTE
                    return (
                        f"refused by deny_commands rule '{rule.text}': {_show(part)}{note}; "
                        "nothing was run"
                    )
        if unchecked:  # what runs there cannot be seen, so no rule can be checked on it
            return (
                f"refused: {unchecked[0]}; a command policy is set (roles.yaml allow_commands "
                "/ deny_commands), so only commands it can check run; nothing was run"
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


_FILLED_NOTE = " (a word it fills in from its input at run time could make it that command)"


def _show(part: SimpleCommand) -> str:
    return f"`{_clip(part.text)}`"
