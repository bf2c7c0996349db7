"""JSONL traces: one line per event, appended and flushed as it happens.

Appending (never rewriting) keeps a trace's cost per event flat as a round grows, and a
crash loses at most the line being written. Every string in an event is redacted (see
``hero.redact``) before it is written: no secret hero knows reaches a trace.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

from hero.redact import Redactor


class Trace:
    def __init__(self, path: Path | None, *, redact: Redactor | None = None) -> None:
        self.path = path
        self._redact = redact if redact else None  # an empty Redactor costs nothing, skip it
        self._t0 = time.monotonic()
        self._fh: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            if _torn(path):  # a line half written by a process that died: end it
                self._fh.write("\n")

    def event(self, kind: str, **data: Any) -> None:
        if self._fh is None:
            return
        record = {"t": round(time.monotonic() - self._t0, 4), "ts": time.time(), "event": kind}
        record.update(data if self._redact is None else self._redact.redact_value(data))
        self._fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _torn(path: Path) -> bool:
    """Whether the file's last line has no end (a crash mid-write)."""
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        if fh.tell() == 0:
            return False
        fh.seek(-1, 2)
        return fh.read(1) != b"\n"


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The events of a trace; a torn last line (a crash mid-write) is skipped."""
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events
