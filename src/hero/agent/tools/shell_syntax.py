"""Shell syntax as the command policy reads it: a command line cut into the simple commands it would
run (:func:`parse_commands`), wherever they stand: joined by ``&&``, ``||``, ``;``, ``|``, ``&`` or a
newline, inside ``( )``, ``{ }``, ``$( )``, backquotes, ``<( )``, ``if``/``while``/``for``/``case``
bodies, function bodies, ``coproc``, ``${x:-$(...)}`` and unquoted here-documents. Quotes and
escapes are removed from each word (``'r'm`` is ``rm``); leading ``VAR=value`` assignments,
redirections, ``!`` and ``time`` are set aside. A command that cannot be parsed raises
:class:`CommandSyntaxError`: what cannot be read cannot be checked (see
:mod:`hero.agent.tools.policy`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hero.errors import HeroError

#: How deep substitutions, quotes and wrappers may nest before a command is refused.
MAX_NESTING = 50
#: How much of a refused part the refusal quotes.
SHOWN_CHARS = 200


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
