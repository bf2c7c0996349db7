"""Logging for long-running commands: readable on a terminal, JSON lines otherwise."""

from __future__ import annotations

import sys
from typing import Any, TextIO


def configure(stream: TextIO | None = None, *, json: bool | None = None) -> Any:
    """Set up structlog and return a logger. ``json=None`` chooses by whether ``stream``
    (default stderr) is a terminal."""
    import structlog

    out = stream or sys.stderr
    as_json = (not out.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=False),
            structlog.processors.format_exc_info,
            renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    return structlog.get_logger("hero")
