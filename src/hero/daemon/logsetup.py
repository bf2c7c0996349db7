"""Logging for long-running commands: readable on a terminal, JSON lines otherwise.

Every string in a log event (its message, its fields, a formatted exception) has the
secrets hero knows redacted (see ``hero.redact``) before it is rendered.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from hero.redact import Redactor


def configure(
    stream: TextIO | None = None, *, json: bool | None = None, secrets: Iterable[str] = ()
) -> Any:
    """Set up structlog and return a logger. ``json=None`` chooses by whether ``stream``
    (default stderr) is a terminal; ``secrets`` are redacted from every event."""
    import structlog

    out = stream or sys.stderr
    as_json = (not out.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=False),
        structlog.processors.format_exc_info,
    ]
    redactor = Redactor(secrets)
    if redactor:
        processors.append(redacting(redactor))
    structlog.configure(
        processors=[*processors, renderer],
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    return structlog.get_logger("hero")


def redacting(redactor: Redactor) -> Any:
    """A structlog processor that redacts ``redactor``'s secrets from an event dict."""

    def processor(_logger: Any, _method: str, event_dict: Any) -> Any:
        return redactor.redact_value(event_dict)

    return processor
