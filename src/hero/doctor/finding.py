"""What a check found (:class:`Finding`), and how outside text is quoted in one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

Status = Literal["ok", "warn", "FAIL"]
OK: Status = "ok"
WARN: Status = "warn"
FAIL: Status = "FAIL"
#: The first check's ``what``: a failure there is a configuration error (exit 2).
CONFIGURATION = "configuration"

#: The most of an error's text a finding quotes.
DETAIL_MAX_CHARS = 300


@dataclass(frozen=True)
class Finding:
    """One check's outcome: ``status``, what was checked, what was found, and for a
    failure or a warning what to do about it."""

    status: Status
    what: str
    detail: str = ""
    fix: str = ""

    def line(self) -> str:
        """``ok   git: 2.43.0``; a failure or warning says its fix after ``->``."""
        text = f"{self.status:<4} {self.what}"
        if self.detail:
            text += f": {self.detail}"
        if self.fix and self.status != OK:
            text += f" -> {self.fix}"
        return text


def without_password(url: str) -> str:
    """``url`` with any password in it replaced by ``***``, for a finding's line."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(unreadable URL)"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def one_line(exc: BaseException) -> str:
    """An error's text as one short line of printable characters: it may hold what a server
    sent (a model's or a proxy's error message), which must not move the cursor or colour
    the terminal, nor fill it."""
    text = "".join(c if c.isprintable() else " " for c in str(exc))
    text = " ".join(text.split()) or type(exc).__name__
    return text if len(text) <= DETAIL_MAX_CHARS else text[:DETAIL_MAX_CHARS] + "..."
