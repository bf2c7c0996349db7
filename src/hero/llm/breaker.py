"""One circuit breaker per model provider: stories wait out an outage instead of failing.

A story whose model call met an outage (:class:`hero.llm.client.ModelOutage`) is paused, not
failed: its record says so (``outage`` in ``runs/state/<id>.json``) and it goes back to the
queue. The daemon then trips the breaker of the provider named, and asks the breakers
before it starts a story:

- ``closed``: stories run.
- ``open`` (a transient outage: refused connections, timeouts, 5xx, 429): stories of the
  provider wait until ``retry_at``. The wait doubles with each failed try, up to a cap,
  with jitter so that the homes and workers of one provider do not all come back at once.
- ``half_open``: ``retry_at`` has come; exactly one story (``probe``) is started. Its first
  model answer closes the breaker; its outage opens it again, for twice as long.
- ``stopped`` (a permanent refusal: 401, 403, an unknown model, a 400): no story of the
  provider starts again in this daemon; the message says what to fix. Restarting
  ``hero watch`` (after the fix) closes it.

Only what concerns every request of the provider reaches a breaker. A refusal of one
story's content (moderation, a content filter, a guard model:
:class:`hero.llm.client.ContentRefused`), an answer over ``llm_max_response_mb`` and a
conversation too long for the window are that story's errors: it ends in ``error`` and
the breaker never hears of it, so no story's content can stop the provider's queue.

The probe is a story, not a tiny request of hero's own: it asks exactly what the stories
need (the role's model, key and endpoint, from where they run: on the Celery engine that
is a worker's machine, not the coordinator's), costs nothing extra, and a story that
meets the outage again loses nothing (it pauses and resumes mid-round, as after kill -9).

The breakers are saved to ``runs/breakers.json`` (atomically, after every change) for
``hero status`` and for a restarted daemon, which keeps an open breaker's ``retry_at``.
Only the daemon, one per home, writes the file; anything else only reads it.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from hero.fsio import atomic_write

CLOSED, OPEN, HALF_OPEN, STOPPED = "closed", "open", "half_open", "stopped"
STATES = (CLOSED, OPEN, HALF_OPEN, STOPPED)
TRANSIENT, PERMANENT = "transient", "permanent"
#: The breakers file is hero's own and small; a larger one is no breakers file.
MAX_BYTES = 1024 * 1024


def breakers_path(home: Path) -> Path:
    return home / "runs" / "breakers.json"


@dataclass
class Breaker:
    """One provider's breaker, as ``runs/breakers.json`` holds it."""

    provider: str
    state: str = CLOSED
    kind: str = ""  # transient | permanent: what opened it last
    reason: str = ""  # why it opened, as the model error said it
    story: str = ""  # the story that met it
    opened_at: float = 0.0
    retry_at: float | None = None  # when an open breaker lets one story try (time.time())
    failures: int = 0  # outages in a row: the wait doubles with each
    probe: str = ""  # the story sent to try the provider while half-open

    @classmethod
    def from_dict(cls, data: object) -> Breaker:
        """A breaker read from the file; ValueError for anything that does not fit."""
        if not isinstance(data, dict):
            raise ValueError("a breaker is not an object")
        names = {f.name for f in fields(cls)}
        breaker = cls(**{k: v for k, v in data.items() if k in names})
        text = (breaker.provider, breaker.state, breaker.kind, breaker.reason, breaker.story)
        if not all(isinstance(v, str) for v in (*text, breaker.probe)):
            raise ValueError(f"breaker {breaker.provider!r}: a text field is not text")
        if breaker.state not in STATES:
            raise ValueError(f"breaker {breaker.provider!r}: unknown state {breaker.state!r}")
        numbers = [breaker.opened_at, breaker.failures]
        if breaker.retry_at is not None:
            numbers.append(breaker.retry_at)
        # JSON as Python reads it has NaN and Infinity: a wait that never ends, or never
        # starts, is no breaker's
        if not all(_finite(v) and v >= 0 for v in numbers):
            raise ValueError(
                f"breaker {breaker.provider!r}: opened_at, retry_at or failures is not a "
                "finite number >= 0"
            )
        return breaker

    def event(self) -> dict[str, Any]:
        """What ``on_open`` is given: JSON-able, for an alert hook."""
        return {
            "provider": self.provider,
            "kind": self.kind,
            "reason": self.reason,
            "retry_at": self.retry_at,
        }


@dataclass(frozen=True)
class Backoff:
    """How long an open breaker waits: ``base_s`` doubled per outage in a row, at most
    ``max_s``, drawn from its upper half (jitter)."""

    base_s: float
    max_s: float

    def delay(self, failures: int, draw: Callable[[], float] = random.random) -> float:
        ceiling = min(self.max_s, self.base_s * 2 ** min(max(failures, 1) - 1, 60))
        return float(ceiling / 2 + draw() * ceiling / 2)


class Breakers:
    """The breakers of one home's daemon. Thread-safe: story threads trip them, the
    dispatcher's loop asks them. ``say(event, **fields)`` logs a change, once per change;
    ``on_open(event)`` is called when a breaker opens or stops (not again on each failed
    try while it stays open), after the change is saved; whatever it raises is logged."""

    def __init__(
        self,
        path: Path,
        backoff: Backoff,
        *,
        say: Callable[..., None] | None = None,
        on_open: Callable[[dict[str, Any]], None] | None = None,
        clock: Callable[[], float] = time.time,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.path = path
        self.backoff = backoff
        self.on_open = on_open
        self._say = say or (lambda event, **_fields: None)
        self._clock = clock
        self._draw = draw
        self._lock = threading.Lock()
        self._breakers: dict[str, Breaker] = {}
        self._notes: list[tuple[str, dict[str, Any]]] = []  # said once the file has it

    # -- start-up ------------------------------------------------------------------------

    def start(self, providers: Iterable[str] | None = None) -> None:
        """Take up the breakers a previous daemon left (it may have been killed): an open
        one keeps its ``retry_at``; a half-open one tries again now (its probe died with
        that daemon); a stopped one is closed, the restart being how the user says it is
        fixed. With ``providers``, the breakers of any other provider (one no role uses
        any more) are dropped. A file that cannot be read is said and started afresh."""
        try:
            found = read_breakers(self.path)
        except ValueError as exc:
            self._say("breakers unreadable", path=str(self.path), reason=str(exc))
            found = {}
        if providers is not None:
            keep = set(providers)
            found = {name: b for name, b in found.items() if name in keep}
        now = self._clock()
        with self._lock:
            self._breakers = found
            for b in found.values():
                # a clock that jumped back, or a hand edit, holds stories back no longer
                # than the longest wait
                if b.retry_at is not None:
                    b.retry_at = min(b.retry_at, now + self.backoff.max_s)
                if b.state == HALF_OPEN:
                    b.state, b.probe, b.retry_at = OPEN, "", now
                elif b.state == STOPPED:
                    self._note("provider restarted", provider=b.provider, was=b.reason)
                    self._close(b)
                if b.state == OPEN:
                    self._note(
                        "provider still held back",
                        provider=b.provider,
                        reason=b.reason,
                        retry_at=_clock_time(b.retry_at),
                    )
            self._save()

    # -- asking ----------------------------------------------------------------------------

    def admit(self, providers: Iterable[str], story: str) -> bool:
        """Whether ``story``, which uses ``providers``, may start now. An open breaker
        whose ``retry_at`` has come lets it through as its one probe (it turns half-open)."""
        now = self._clock()
        with self._lock:
            probing = []
            for name in set(providers):
                b = self._breakers.get(name)
                if b is None or b.state == CLOSED:
                    continue
                if b.state == OPEN and (b.retry_at is None or b.retry_at <= now):
                    probing.append(b)
                    continue
                return False
            for b in probing:
                b.state, b.probe = HALF_OPEN, story
                self._note("provider probed", provider=b.provider, story=story)
            if probing:
                self._save()
            return True

    def stopped(self, providers: Iterable[str]) -> bool:
        """Whether any of ``providers`` is stopped (nothing of theirs runs in this daemon)."""
        with self._lock:
            return any(
                (b := self._breakers.get(name)) is not None and b.state == STOPPED
                for name in providers
            )

    def next_due(self) -> float | None:
        """Seconds until the first open breaker lets a story try (0 if one may now), or
        None when none waits."""
        with self._lock:
            due = [b.retry_at or 0.0 for b in self._breakers.values() if b.state == OPEN]
        if not due:
            return None
        return max(0.0, min(due) - self._clock())

    def snapshot(self) -> list[Breaker]:
        with self._lock:
            return [Breaker(**asdict(b)) for b in self._breakers.values()]

    # -- what stories met --------------------------------------------------------------------

    def trip(self, provider: str, kind: str, reason: str, story: str) -> None:
        """``story`` met an outage of ``provider`` (``kind`` transient or permanent)."""
        now = self._clock()
        opened: Breaker | None = None
        with self._lock:
            b = self._breakers.setdefault(provider, Breaker(provider))
            if kind == PERMANENT:
                if b.state == STOPPED:
                    return  # said once: the other stories that meet it say nothing more
                b.state, b.kind, b.reason, b.story = STOPPED, PERMANENT, reason, story
                b.opened_at, b.retry_at, b.probe = now, None, ""
                opened = b
                self._note(
                    "provider stopped",
                    provider=provider,
                    reason=reason,
                    story=story,
                    fix=f"fix what the error says (the key, the model, config/providers/"
                    f"{provider}.yaml), then restart `hero watch`; no story was spent",
                )
            elif b.state == STOPPED:
                return
            elif b.state == OPEN or (b.state == HALF_OPEN and b.probe != story):
                return  # a story that was running when it opened: the same outage
            else:
                first = b.state == CLOSED
                b.failures = b.failures + 1 if not first else 1
                b.state, b.kind, b.reason, b.story, b.probe = OPEN, TRANSIENT, reason, story, ""
                b.opened_at = now if first else b.opened_at
                b.retry_at = now + self.backoff.delay(b.failures, self._draw)
                opened = b if first else None
                self._note(
                    "provider unavailable" if first else "provider still unavailable",
                    provider=provider,
                    reason=reason,
                    story=story,
                    retry_at=_clock_time(b.retry_at),
                )
            self._save()
            event = opened.event() if opened is not None else None
        if event is not None and self.on_open is not None:
            try:
                self.on_open(event)
            except Exception as exc:  # noqa: BLE001 - an alert that fails must not stop stories
                self._say("breaker alert failed", provider=provider, error=str(exc)[:300])

    def answered(self, providers: Iterable[str], story: str) -> None:
        """A model call of ``story`` was answered: the breakers it probed close."""
        with self._lock:
            changed = False
            for name in set(providers):
                b = self._breakers.get(name)
                if b is not None and b.state == HALF_OPEN and b.probe == story:
                    self._note("provider back", provider=name, story=story, was=b.reason)
                    self._close(b)
                    changed = True
            if changed:
                self._save()

    def ended(self, providers: Iterable[str], story: str) -> None:
        """``story`` ended without meeting an outage and without an answer seen: a breaker
        it probed lets the next story try at once."""
        with self._lock:
            changed = False
            for name in set(providers):
                b = self._breakers.get(name)
                if b is not None and b.state == HALF_OPEN and b.probe == story:
                    b.state, b.probe, b.retry_at = OPEN, "", self._clock()
                    changed = True
            if changed:
                self._save()

    # -- helpers -----------------------------------------------------------------------------

    def _close(self, b: Breaker) -> None:
        b.state, b.kind, b.reason, b.story, b.probe = CLOSED, "", "", "", ""
        b.retry_at, b.failures = None, 0

    def _note(self, event: str, **said: Any) -> None:
        """Under the lock: ``event`` is said by the next ``_save``, once the file holds
        what it says (a daemon killed in between has logged nothing it did not keep)."""
        self._notes.append((event, said))

    def _save(self) -> None:
        """Under the lock: the file as the breakers are now, then what changed, said. A
        disk that refuses the file is said, and the daemon goes on with the breakers it
        holds."""
        data = {"breakers": {n: asdict(b) for n, b in sorted(self._breakers.items())}}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(data, indent=2).encode("utf-8"))
        except OSError as exc:
            self._say("breakers not saved", path=str(self.path), error=str(exc))
        notes, self._notes = self._notes, []
        for event, said in notes:
            self._say(event, **said)


def read_breakers(path: Path) -> dict[str, Breaker]:
    """The breakers in ``path`` by provider ({} when there is no file); ValueError naming
    the file for one that is not a breakers file."""
    from hero.yamlio import ValueProblem, read_file

    try:
        raw = read_file(path, limit=MAX_BYTES, what="breakers file")
    except FileNotFoundError:
        return {}
    except (OSError, ValueProblem) as exc:
        raise ValueError(f"{path}: cannot read it ({exc})") from exc
    try:
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("breakers"), dict):
            raise ValueError('expected an object with "breakers"')
        found = {}
        for name, value in data["breakers"].items():
            b = Breaker.from_dict(value)
            if b.provider != name:
                raise ValueError(f"breaker {name!r} names provider {b.provider!r}")
            found[name] = b
        return found
    except (ValueError, TypeError, RecursionError) as exc:
        raise ValueError(f"{path}: not a breakers file ({exc})") from exc


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _clock_time(at: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) if at else "now"
