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

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hero.agent.tools.command_args import FILLED, clip, program
from hero.agent.tools.shell_syntax import CommandSyntaxError, SimpleCommand
from hero.agent.tools.wrappers import GIT_VALUE_OPTIONS, find_parts

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
            i += 2 if (rest[i] in GIT_VALUE_OPTIONS) else 1
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
            parts, unchecked = find_parts(command)
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
    return f"`{clip(part.text)}`"
