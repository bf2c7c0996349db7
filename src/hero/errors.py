"""Exceptions and exit codes shared across hero's rooms.

Every error hero raises on purpose derives from :class:`HeroError`. Its ``exit_code`` is
what a command exits with when the error ends it, and ``hero.cli.main`` is the one place
that turns an error into that exit code and one line on stderr: ``hero: <message>``, or
``hero: <kind>: <message>`` for a class with a ``kind``. A command that wants other words
for an error catches it itself.

The classes, by exit code (the contract for scripts is in :data:`EXIT_OK` and its line):

- 2, :class:`UsageError` and below: what was asked cannot be done as things stand (a bad
  argument, an unknown or invalid story or plan, an unreadable run record, a repository
  hero cannot work with, another process holding the home); the user fixes it and runs the
  command again. :class:`ConfigurationError` (``config.ConfigError`` with its file and key)
  is the one with a kind: ``hero: configuration error: ...``.
- 1, :class:`HeroError` itself: everything else that stopped a command (the model could not
  be reached, the planner's answer stayed invalid, ...).
- 130: :class:`Interrupted`, which is no HeroError: see its docstring.

`hero run` also exits 75 (:data:`EXIT_UNAVAILABLE`, sysexits' EX_TEMPFAIL) when the
story paused because its model's provider was unavailable: run it again later to resume;
and 124 (:data:`EXIT_TIMEOUT`, as timeout(1) does) when the story stopped on a time budget
(``max_story_wall_s``, ``max_round_wall_s``). The one table of them all is in docs/run.md
(``hero.state.exit_code`` maps a story's end to its code).
"""

from __future__ import annotations

from typing import ClassVar

#: Exit codes of every command: a contract for scripts.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: `hero run`: the story paused on a model outage that heals by itself; try again later.
EXIT_UNAVAILABLE = 75
#: `hero run`, `hero run-plan`: a story stopped on a time budget (timeout(1)'s code).
EXIT_TIMEOUT = 124


class HeroError(Exception):
    """An error hero raises on purpose; ``str()`` is one message for the user."""

    exit_code: ClassVar[int] = EXIT_FAILED
    """What a command exits with when this error ends it."""
    kind: ClassVar[str] = ""
    """Said before the message when it ends a command (``hero: <kind>: <message>``)."""

    def for_user(self) -> str:
        """The line ``hero`` prints when this error ends a command, without ``hero: ``."""
        return f"{self.kind}: {self}" if self.kind else str(self)


class UsageError(HeroError):
    """What was asked cannot be done as things stand; the user fixes it and asks again."""

    exit_code = EXIT_USAGE


class ConfigurationError(UsageError):
    """The home's configuration does not allow the command: ``config.ConfigError`` (which
    names the file and key), or a problem found beyond config/ (an extra that is not
    installed, a GitHub token the client cannot use)."""

    kind = "configuration error"


class Interrupted(BaseException):
    """The story's run was asked to stop (Ctrl-C, SIGTERM or a daemon shutdown).

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way
    up swallows it and records a fake failure; for that reason it is no HeroError (which
    is an Exception). A command it ends exits with ``exit_code``.
    """

    exit_code: ClassVar[int] = EXIT_INTERRUPTED
