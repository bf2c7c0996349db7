"""Exceptions and exit codes shared across hero's rooms."""

from __future__ import annotations


class Interrupted(BaseException):
    """The story's run was asked to stop (Ctrl-C, SIGTERM or a daemon shutdown).

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way
    up swallows it and records a fake failure.
    """


#: Exit codes of every command: a contract for scripts.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
