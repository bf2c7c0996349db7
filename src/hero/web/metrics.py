"""``/metrics``: a home's numbers in the Prometheus text format, read from its files.

``hero serve`` is a process of its own beside ``hero watch``, so every number comes from
what is on disk (the page docs/metrics.md lists each metric and its source):

- the run records (``runs/state/...``, :mod:`hero.state`): stories by status, rounds,
  verdicts, verify command durations, the stories' spend, outages. Under the Celery engine
  the coordinator mirrors every story's record, so these cover the fleet;
- the round traces (``runs/<story>/round-N.jsonl``, :mod:`hero.trace`): model calls,
  tokens, cost, latency and retried errors by role, provider and model. A trace is written
  where its story runs: under Celery, on the worker machines, so these are this machine's;
- the inbox (the queue), ``runs/watch.lock`` (the daemon), ``runs/breakers.json``, through
  :mod:`hero.views.status`, as ``hero status`` reads them.

Cost: one :class:`Metrics` per server keeps what it has read. A record is parsed again
only when its (device, inode, mtime, size) changed; a trace is read from the byte offset
the last scrape stopped at (only whole lines are taken; a file that shrank or was replaced
is read again from the start). What a file counted stays counted when the file goes
(``hero clean``), so counters only go up while the server runs.

Hostile input: a trace holds the model's and the tools' text, and a record's fields can be
edited by hand. A line that is not a JSON object is skipped (counted), numbers that are not
finite and non-negative count 0, and every label value is printable, at most
``LABEL_CHARS`` long, and one label takes at most ``LABEL_VALUES`` values (later ones are
``other``): the series stay bounded whatever the files say. Nothing below ``runs/`` is read
through a symlink, nor is anything that is not a regular file (a FIFO never blocks a scrape).
"""

from __future__ import annotations

import json
import math
import os
import stat
import threading
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from prometheus_client import exposition as _exposition
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from hero.llm.usage import Usage
from hero.names import StoryRef, plan_name_problem
from hero.state import MAX_STATE_BYTES, STATUSES, RunState, Status

#: A label value's longest form; longer ones are cut.
LABEL_CHARS = 64
#: The values one label may take over the server's life; later ones are ``other``.
LABEL_VALUES = 64
OTHER = "other"
UNKNOWN = "unknown"

#: Model call latency (``http_s`` of a call), in seconds.
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: A verify command's duration, in seconds.
VERIFY_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0)

#: Read a trace this much at a time; a line longer than MAX_LINE is skipped, not held.
CHUNK = 1 << 20
MAX_LINE = 16 << 20

#: What the retried errors of a call may be called (hero.llm.client.error_kind); else ``other``.
_ERROR_KINDS = frozenset({"http", "timeout", "connection", "unusable"})
#: The trace events that are model calls, and whose call each is.
_CALL_ROLES = {"assistant": "worker", "review_answer": "reviewer"}
#: hero writes every trace line as ``{"t": ..., "ts": ..., "event": "<kind>", ...}``: the
#: kind sits in the line's first bytes, so the lines of no interest (tool output, most of a
#: trace's bytes) are passed over without parsing them.
_LINE_START = b'{"t": '
_CALL_MARKS = tuple(f'"event": "{kind}"'.encode() for kind in _CALL_ROLES)
_HEAD = 96

Key = tuple[str, tuple[str, ...]]  # (metric, label values)

#: The text format generate_latest writes (0.0.4: what every Prometheus reads); a client
#: older than the constant's name has it as its latest.
CONTENT_TYPE = getattr(_exposition, "CONTENT_TYPE_PLAIN_0_0_4", _exposition.CONTENT_TYPE_LATEST)


# ----------------------------------------------------------------------------- totals


@dataclass
class Hist:
    """A histogram's buckets (not cumulative; the last is +Inf), sum and bounds."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def add(self, other: Hist) -> None:
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        self.total += other.total

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, float(running)))
        return out


@dataclass
class Totals:
    """Counter values and histograms by (metric, label values): what one file counted, or
    the sum of many."""

    counts: dict[Key, float] = field(default_factory=dict)
    hists: dict[Key, Hist] = field(default_factory=dict)

    def inc(self, name: str, labels: tuple[str, ...], by: float = 1.0) -> None:
        self.counts[(name, labels)] = self.counts.get((name, labels), 0.0) + by

    def observe(
        self, name: str, labels: tuple[str, ...], value: float, bounds: tuple[float, ...]
    ) -> None:
        hist = self.hists.get((name, labels))
        if hist is None:
            hist = self.hists[(name, labels)] = Hist(bounds)
        hist.observe(value)

    def add(self, other: Totals) -> None:
        for key, value in other.counts.items():
            self.counts[key] = self.counts.get(key, 0.0) + value
        for key, hist in other.hists.items():
            mine = self.hists.get(key)
            if mine is None:
                mine = self.hists[key] = Hist(hist.bounds)
            mine.add(hist)


class Labels:
    """Label values kept bounded: printable, cut to LABEL_CHARS, at most LABEL_VALUES
    values per label (a record or trace can say anything; a scrape must stay small)."""

    def __init__(self) -> None:
        self._seen: dict[str, set[str]] = {}

    def __call__(self, label: str, value: object) -> str:
        text = value if isinstance(value, str) else ""
        text = "".join(c for c in text if c.isprintable()).strip()[:LABEL_CHARS] or UNKNOWN
        seen = self._seen.setdefault(label, set())
        if text in seen:
            return text
        if len(seen) >= LABEL_VALUES:
            return OTHER
        seen.add(text)
        return text


def count(value: object) -> int:
    """A count as a file says it: a non-negative finite number, else 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def amount(value: object) -> float | None:
    """A non-negative finite number as a file says it, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value) if value >= 0 else None


# ----------------------------------------------------------------------------- files


Ident = tuple[int, int, int, int]  # (device, inode, mtime_ns, size)


@dataclass
class RecordSeen:
    """One run record as last read: what it said and what it counted."""

    ident: Ident
    status: str  # a Status value, or "unreadable"
    models: dict[str, tuple[str, str]]  # role -> (provider, model), labels made
    outage: tuple[str, str] | None  # (provider, kind) of a story paused on its provider
    totals: Totals


@dataclass
class TraceSeen:
    """One trace as read so far: which file, how far, what it counted."""

    ident: tuple[int, int]  # (device, inode)
    offset: int = 0  # bytes taken: up to the end of the last whole line
    skipping: bool = False  # inside a line longer than MAX_LINE, passed over
    totals: Totals = field(default_factory=Totals)


def _open_regular(path: Path) -> tuple[int, os.stat_result] | None:
    """A read-only descriptor of ``path`` and its stat, when it is a regular file reached
    without following a symlink at its last component; None otherwise (a FIFO is opened
    non-blocking and refused, never read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


def _lident(path: Path) -> Ident:
    """``(device, inode, mtime_ns, size)`` of a regular file at ``path`` (not followed if
    a link); zeros for anything else."""
    try:
        st = os.lstat(path)
    except OSError:
        return (0, 0, 0, 0)
    if not stat.S_ISREG(st.st_mode):
        return (0, 0, 0, 0)
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _real_dir(path: Path) -> bool:
    """Whether ``path`` is a folder and not a symlink."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []


# ----------------------------------------------------------------------------- metrics


class Metrics:
    """The metrics of one home, made once per server and scraped many times: it keeps
    what it read of each file between scrapes. Scrapes may overlap: one lock serializes
    them (a scrape of an unchanged home reads no trace byte, so waiting is short)."""

    def __init__(self, home: Path, *, max_line: int = MAX_LINE) -> None:
        self.home = Path(home)
        self.max_line = max_line
        self.registry = CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._labels = Labels()
        self._records: dict[str, RecordSeen] = {}  # by story key
        self._traces: dict[Path, TraceSeen] = {}
        self._retired = Totals()  # what files that are gone counted
        #: trace bytes read over the server's life (a scrape of an unchanged home adds 0)
        self.trace_bytes_read = 0
        self.records_parsed = 0
        self.files_opened = 0  # records and traces opened (an unchanged one is not)
        self.lines_skipped = 0
        self._errors: dict[str, int] = {}
        self.registry.register(self)

    def exposition(self) -> tuple[bytes, str]:
        """The body of a ``/metrics`` answer and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE

    def collect(self) -> list[Metric]:
        with self._lock:  # made whole under the lock, not yielded while holding it
            return self._families()

    # -- reading ---------------------------------------------------------------------

    def _families(self) -> list[Metric]:
        records = self._read_records()
        live: set[Path] = set()
        for key, seen in records.items():  # an unreadable record's too: it may come back
            live.update(self._read_traces(StoryRef.of(key), seen))
        for path in [p for p in self._traces if p not in live]:
            self._retired.add(self._traces.pop(path).totals)
        totals = Totals()
        totals.add(self._retired)
        for seen in records.values():
            totals.add(seen.totals)
        for path in live:
            totals.add(self._traces[path].totals)
        out = self._record_families(records, totals)
        out += self._call_families(totals)
        out += self._home_families(records)
        return out

    def _read_records(self) -> dict[str, RecordSeen]:
        root = self.home / "runs" / "state"
        found: list[tuple[StoryRef, Path]] = []
        # runs/ itself is the user's to place (a link to another disk is fine); below it
        # every folder is hero's, and a link there is not followed
        if (self.home / "runs").is_dir() and _real_dir(root):
            folders = [("", root)]
            plans = root / "plans"
            if _real_dir(plans):
                folders += [
                    (e.name, Path(e.path))
                    for e in _entries(plans)
                    if plan_name_problem(e.name) is None and _real_dir(Path(e.path))
                ]
            for plan, folder in folders:
                for e in _entries(folder):
                    if e.name.endswith(".json") and not e.name.startswith("."):
                        found.append((StoryRef(plan, e.name[: -len(".json")]), Path(e.path)))
        now: dict[str, RecordSeen] = {}
        for ref, path in found:
            if not ref.valid():  # a name no story has: not one of hero's records
                continue
            now[ref.key] = self._record(ref, path, self._records.get(ref.key))
        for key in [k for k in self._records if k not in now]:
            self._retired.add(self._records.pop(key).totals)
        self._records = now
        return now

    def _record(self, ref: StoryRef, path: Path, old: RecordSeen | None) -> RecordSeen:
        if old is not None and old.ident == _lident(path):
            return old  # unchanged since the last scrape: not even opened

        def unreadable(ident: Ident) -> RecordSeen:
            # what the record counted while it could be read stays counted: a record
            # broken by hand (or for a moment) must not make the counters go down
            kept = old.totals if old is not None else Totals()
            return RecordSeen(ident, "unreadable", old.models if old else {}, None, kept)

        self.files_opened += 1
        opened = _open_regular(path)
        if opened is None:
            return unreadable((0, 0, 0, 0))
        fd, st = opened
        try:
            ident = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            if old is not None and old.ident == ident:
                return old
            if st.st_size > MAX_STATE_BYTES:
                return unreadable(ident)
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(MAX_STATE_BYTES + 1)
        except OSError:
            return unreadable((0, 0, 0, 0))
        finally:
            os.close(fd)
        self.records_parsed += 1
        try:
            raw = json.loads(data)
            if (
                not isinstance(raw, dict)
                or raw.get("id") != ref.id
                or (raw.get("plan") or "") != ref.plan
            ):
                raise ValueError("not this story's record")
            state = RunState.from_dict(raw)
        except (ValueError, TypeError, RecursionError):
            return unreadable(ident)
        return RecordSeen(
            ident,
            state.status.value,
            self._models(state.models),
            self._outage(state),
            self._record_totals(state),
        )

    def _models(self, models: dict[str, dict[str, str | None]]) -> dict[str, tuple[str, str]]:
        return {
            role: (
                self._labels("provider", used.get("provider")),
                self._labels("model", used.get("model")),
            )
            for role, used in models.items()
            if role in ("worker", "reviewer")
        }

    def _outage(self, state: RunState) -> tuple[str, str] | None:
        if state.status != Status.INTERRUPTED or not state.outage:
            return None
        kind = state.outage.get("kind")
        return (
            self._labels("provider", state.outage.get("provider")),
            kind if kind in ("transient", "permanent") else OTHER,
        )

    def _record_totals(self, state: RunState) -> Totals:
        t = Totals()
        t.inc("rounds", (), len(state.rounds))
        for r in state.rounds:
            verdict = {"APPROVED": "approved", "CHANGES_REQUESTED": "changes_requested"}.get(
                r.review.verdict, "none" if not r.review.verdict else OTHER
            )
            source = (
                "short_circuit"
                if r.review.short_circuited
                else "malformed"
                if r.review.malformed
                else "reviewer"
            )
            t.inc("verdicts", (verdict, source))
            commands = r.verify.get("commands")
            for c in commands if isinstance(commands, list) else []:
                if not isinstance(c, dict) or (seconds := amount(c.get("duration_s"))) is None:
                    continue
                result = (
                    "timeout"
                    if c.get("timed_out") is True
                    else "passed"
                    if c.get("exit_code") == 0
                    else "failed"
                )
                tier = self._labels("tier", c.get("tier"))
                t.observe("verify", (tier, result), seconds, VERIFY_BUCKETS)
        usage = Usage.from_dict(state.usage)
        t.inc("usage_tokens", ("in",), usage.tokens_in)
        t.inc("usage_tokens", ("out",), usage.tokens_out)
        t.inc("usage_tokens", ("cached",), usage.tokens_cached)
        t.inc("usage_calls", (), usage.llm_calls)
        t.inc("usage_cost", (), usage.cost_usd)
        return t

    def _read_traces(self, ref: StoryRef, record: RecordSeen) -> list[Path]:
        """The story's traces, each read from where the last scrape stopped."""
        runs = self.home / "runs"
        run_dir = ref.run_dir(self.home)
        # no part below runs/ may be a link: a run folder swapped for one leads anywhere
        current = runs
        for part in run_dir.relative_to(runs).parts:
            current = current / part
            if not _real_dir(current):
                return []
        paths = []
        for e in _entries(run_dir):
            name = e.name
            if name.startswith("round-") and name.endswith(".jsonl") and name[6:-6].isdigit():
                path = Path(e.path)
                seen = self._read_trace(path, self._traces.get(path), record.models)
                if seen is not None:
                    self._traces[path] = seen
                    paths.append(path)
        return paths

    def _read_trace(
        self, path: Path, seen: TraceSeen | None, models: dict[str, tuple[str, str]]
    ) -> TraceSeen | None:
        if seen is not None:
            dev, ino, _, size = _lident(path)
            if (dev, ino) == seen.ident and size == seen.offset:
                return seen  # read to its end and not grown: not even opened
        self.files_opened += 1
        opened = _open_regular(path)
        if opened is None:  # swapped for a link or a FIFO, or cannot be opened now:
            return seen  # what it counted stays, nothing more is read
        fd, st = opened
        try:
            ident = (st.st_dev, st.st_ino)
            if seen is None or seen.ident != ident or st.st_size < seen.offset:
                seen = TraceSeen(ident)  # new, replaced or cut short: counted from the start
            if st.st_size == seen.offset:
                return seen
            os.lseek(fd, seen.offset, os.SEEK_SET)
            base, carry = seen.offset, b""
            while chunk := os.read(fd, CHUNK):
                self.trace_bytes_read += len(chunk)
                data, start = carry + chunk, 0
                while (end := data.find(b"\n", start)) >= 0:
                    if seen.skipping:  # the end of an overlong line
                        seen.skipping = False
                    else:
                        self._line(data[start:end], seen.totals, models)
                    start = end + 1
                base, carry = base + start, data[start:]
                if len(carry) > self.max_line:
                    self.lines_skipped += 0 if seen.skipping else 1
                    seen.skipping = True
                    base, carry = base + len(carry), b""
            seen.offset = base  # a line still being written is read next time, whole
            return seen
        except OSError:
            return seen
        finally:
            os.close(fd)

    def _line(self, line: bytes, totals: Totals, models: dict[str, tuple[str, str]]) -> None:
        if not line.strip():
            return
        if not line.startswith(_LINE_START):  # torn, or not hero's
            self.lines_skipped += 1
            return
        head = line[:_HEAD]
        if not any(mark in head for mark in _CALL_MARKS):
            return
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            self.lines_skipped += 1
            return
        if not isinstance(event, dict):
            self.lines_skipped += 1
            return
        kind = event.get("event")
        role = _CALL_ROLES.get(kind) if isinstance(kind, str) else None
        if role is None:  # the mark was in another field's text: not a call
            return
        provider, model = models.get(role, (UNKNOWN, UNKNOWN))
        labels = (role, provider, model)
        totals.inc("calls", labels)
        for kind in ("in", "out", "cached"):
            totals.inc("tokens", (*labels, kind), count(event.get(f"tokens_{kind}")))
        totals.inc("cost", labels, amount(event.get("cost_usd")) or 0.0)
        if (seconds := amount(event.get("http_s"))) is not None:
            totals.observe("latency", labels, seconds, LATENCY_BUCKETS)
        errors = event.get("errors")
        for kind in errors[:100] if isinstance(errors, list) else []:
            name = kind if isinstance(kind, str) else ""
            status = name[5:] if name.startswith("http_") else ""
            if name not in _ERROR_KINDS and not (len(status) == 3 and status.isdigit()):
                name = OTHER
            totals.inc("errors", (*labels, name))

    # -- the families ----------------------------------------------------------------

    def _record_families(self, records: dict[str, RecordSeen], totals: Totals) -> list[Metric]:
        stories = GaugeMetricFamily(
            "hero_stories",
            "Stories by the status of their run record (unreadable: a record hero cannot read).",
            labels=["status"],
        )
        by_status = dict.fromkeys((*STATUSES, "unreadable"), 0)
        for seen in records.values():
            by_status[seen.status] = by_status.get(seen.status, 0) + 1
        for status, n in by_status.items():
            stories.add_metric([status], n)
        running = GaugeMetricFamily(
            "hero_running_stories", "Stories whose run record says running."
        )
        running.add_metric([], by_status[Status.RUNNING.value])
        paused = GaugeMetricFamily(
            "hero_stories_paused_on_outage",
            "Interrupted stories paused on their model provider (kind: transient outage or "
            "permanent refusal).",
            labels=["provider", "kind"],
        )
        outages: dict[tuple[str, str], int] = {}
        for seen in records.values():
            if seen.outage is not None:
                outages[seen.outage] = outages.get(seen.outage, 0) + 1
        for labels, n in sorted(outages.items()):
            paused.add_metric(list(labels), n)
        out: list[Metric] = [stories, running, paused]
        out.append(
            _counter(totals, "rounds", "hero_rounds", "Rounds finished, over every story.", [])
        )
        out.append(
            _counter(
                totals,
                "verdicts",
                "hero_verdicts",
                "Round verdicts by kind (approved, changes_requested) and by whom "
                "(reviewer, short_circuit: hero's own when the checks failed, malformed: an "
                "answer that could not be read).",
                ["verdict", "source"],
            )
        )
        out.append(
            _histogram(
                totals,
                "verify",
                "hero_verify_command_duration_seconds",
                "How long each verify command ran, by tier and result (passed, failed, timeout).",
                ["tier", "result"],
            )
        )
        out.append(
            _counter(
                totals,
                "usage_tokens",
                "hero_story_tokens",
                "Tokens the stories' model calls spent, as their run records count them "
                "(kind: in, out, cached; cached is part of in).",
                ["kind"],
            )
        )
        out.append(
            _counter(
                totals,
                "usage_calls",
                "hero_story_model_calls",
                "Answered model calls, as the stories' run records count them.",
                [],
            )
        )
        out.append(
            _counter(
                totals,
                "usage_cost",
                "hero_story_cost_usd",
                "What the stories' model calls cost in US dollars, as their run records count it.",
                [],
            )
        )
        return out

    def _call_families(self, totals: Totals) -> list[Metric]:
        call = ["role", "provider", "model"]
        return [
            _counter(
                totals,
                "calls",
                "hero_model_calls",
                "Answered model calls by role and model, from the round traces on this machine.",
                call,
            ),
            _counter(
                totals,
                "tokens",
                "hero_model_tokens",
                "Tokens of the model calls by role, model and kind (in, out, cached; cached "
                "is part of in), from the round traces on this machine.",
                [*call, "kind"],
            ),
            _counter(
                totals,
                "cost",
                "hero_model_cost_usd",
                "What the model calls cost in US dollars by role and model (0 when the "
                "provider reports no cost and has no prices), from the round traces on this "
                "machine.",
                call,
            ),
            _histogram(
                totals,
                "latency",
                "hero_model_latency_seconds",
                "Time inside each answered model call's HTTP request, by role and model, from "
                "the round traces on this machine.",
                call,
            ),
            _counter(
                totals,
                "errors",
                "hero_model_errors",
                "Failed model requests that were retried and then answered, by role, model and "
                "kind (http_<status>, timeout, connection, unusable), from the round traces on "
                "this machine.",
                [*call, "kind"],
            ),
        ]

    def _home_families(self, records: dict[str, RecordSeen]) -> list[Metric]:
        from hero.llm.breaker import STATES
        from hero.views.status import breaker_rows, daemon_status, queued_keys

        out: list[Metric] = []
        up = GaugeMetricFamily(
            "hero_daemon_up", "1 while a hero watch holds this home's runs/watch.lock."
        )
        if (daemon := self._part("daemon", lambda: daemon_status(self.home))) is not None:
            up.add_metric([], 1 if daemon.get("running") else 0)
            out.append(up)
        queue = GaugeMetricFamily(
            "hero_queue_length",
            "Stories in the inbox that hero watch would run, as hero status lists them.",
        )
        if (keys := self._part("queue", lambda: queued_keys(self.home))) is not None:
            queue.add_metric([], len(keys))
            out.append(queue)
        breakers = GaugeMetricFamily(
            "hero_breaker_state",
            "Each model provider's circuit breaker: 1 for its state, 0 for the others.",
            labels=["provider", "state"],
        )
        if (rows := self._part("breakers", lambda: breaker_rows(self.home))) is not None:
            for row in rows:
                provider = self._labels("provider", row.get("provider"))
                state = row.get("state")
                for name in (*STATES, "unreadable"):
                    breakers.add_metric([provider, name], 1 if state == name else 0)
            out.append(breakers)
        meta = CounterMetricFamily(
            "hero_metrics_trace_lines_skipped",
            "Trace lines this server passed over: torn, not JSON, or not hero's.",
        )
        meta.add_metric([], self.lines_skipped)
        read = CounterMetricFamily(
            "hero_metrics_trace_bytes_read", "Trace bytes this server has read, in bytes."
        )
        read.add_metric([], self.trace_bytes_read)
        errors = CounterMetricFamily(
            "hero_metrics_errors",
            "Parts of a scrape that failed and were left out (daemon, queue, breakers).",
            labels=["part"],
        )
        for part, n in sorted(self._errors.items()):
            errors.add_metric([part], n)
        return [*out, meta, read, errors]

    def _part(self, name: str, read: Callable[[], Any]) -> Any:
        """What ``read`` returns, or None (counted) when it fails: a bad inbox file or
        breakers file must not take the whole scrape down."""
        try:
            return read()
        except Exception:  # noqa: BLE001 - one part missing, the rest still scraped
            self._errors[name] = self._errors.get(name, 0) + 1
            return None


def _counter(totals: Totals, name: str, metric: str, doc: str, labels: list[str]) -> Metric:
    family = CounterMetricFamily(metric, doc, labels=labels)
    for (kind, values), value in sorted(totals.counts.items()):
        if kind == name:
            family.add_metric(list(values), value)
    if not labels and not family.samples:
        family.add_metric([], 0.0)
    return family


def _histogram(totals: Totals, name: str, metric: str, doc: str, labels: list[str]) -> Metric:
    family = HistogramMetricFamily(metric, doc, labels=labels)
    for (kind, values), hist in sorted(totals.hists.items(), key=lambda kv: kv[0]):
        if kind == name:
            family.add_metric(list(values), hist.buckets(), hist.total)
    return family


@lru_cache(maxsize=16)
def _metrics_for(home: Path) -> Metrics:
    return Metrics(home)


def exposition(home: Path) -> tuple[bytes, str]:
    """The ``/metrics`` body of ``home`` and its content type. Keeps one :class:`Metrics`
    per home (a few homes at most), so repeated scrapes read only what changed; a server
    that holds its own ``Metrics`` calls its ``exposition()`` instead."""
    return _metrics_for(Path(home).resolve()).exposition()
