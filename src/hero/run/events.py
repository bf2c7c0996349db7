"""The event stream of `hero run --events` and `hero watch --events`: one JSON object per
line on stdout, as things happen, for scripts (as ``claude -p --output-format
stream-json`` and ``codex exec --json`` do for theirs).

Every event has ``type`` (:class:`EventType`), ``story`` (the story's key: its id, or
``<plan>/<id>``), ``round`` (the round it belongs to, ``null`` outside a round) and
``time`` (ISO-8601 UTC with milliseconds, ``2026-12-02T00:20:01.123Z``). The contract is
the JSON Schema ``hero/schemas/events.schema.json`` shipped in the package
(:func:`schema`), documented in docs/events.md.

Two pieces: an :class:`EventSink` owns the stream (one lock, one whole line and a flush
per event, so the stories of `hero watch` never interleave; a reader that went away
stops the stream quietly, never a story), and a :class:`StoryEvents` per story builds the
events, every string redacted with the story's :class:`~hero.redact.Redactor` *before*
long texts are cut (a cut must not leave half a secret). The round's model turns, tool
calls and results, condensations, checks and verdict come from the round's trace
(:meth:`StoryEvents.tap`, called by :class:`hero.trace.Trace` with each record it writes),
so what the stream says and what the trace keeps cannot drift apart.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TextIO

from hero.redact import Redactor
from hero.trace import Event

if TYPE_CHECKING:
    from hero.state import RunState

#: Long texts in an event (a model's answer, tool arguments and results, a check's
#: output) are cut to this many characters; the full text stays in the round's trace.
CUT_CHARS = 2_000
#: Where the schema lives in the package.
SCHEMA_RESOURCE = "schemas/events.schema.json"

#: A worker's guardrail stop (hero.agent.loop.GUARDRAILS) and the setting that tripped;
#: the output limit is the model's, no setting of hero's.
GUARDRAIL_SETTINGS: Mapping[str, str | None] = {
    "max_turns": "worker_max_turns",
    "max_tool_calls": "worker_max_tool_calls",
    "max_wall_time": "worker_max_wall_s",
    "loop": "loop_repeats",
    "output_limit": None,
}


class EventType(StrEnum):
    """The ``type`` of each event: a contract scripts read (the schema names them all)."""

    RUN_START = "run_start"
    OVERLAP = "overlap"
    ROUND_START = "round_start"
    TURN = "turn"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    CONDENSE = "condense"
    MCP = "mcp"
    SETUP = "setup"
    BASELINE = "baseline"
    UPDATED_TO_BASE = "updated_to_base"
    CONFLICT = "conflict"
    VERIFY_COMMAND = "verify_command"
    VERIFY = "verify"
    VERDICT = "verdict"
    ROUND_END = "round_end"
    STOP = "stop"
    ERROR = "error"
    RESULT = "result"


class StopReason(StrEnum):
    """Why a ``stop`` event's story (or its worker's turn) stopped."""

    GUARDRAIL = "guardrail"  # the worker's turn; the round goes on to its verdict
    BUDGET = "budget"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    OUTAGE = "outage"  # paused on its model's provider, resumable
    GAVE_UP = "gave_up"  # its rounds ran out
    CONFLICT = "conflict"  # its branch conflicts with its target, not resolved


def now_iso() -> str:
    """The ``time`` of an event: ISO-8601 UTC, milliseconds, ``Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def cut(text: str, limit: int = CUT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, with a marker saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters cut; the trace has all]"


def schema() -> dict[str, Any]:
    """The events' JSON Schema, as shipped in the package."""
    text = resources.files("hero").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


_P = ParamSpec("_P")


def _quiet(
    method: Callable[Concatenate[StoryEvents, _P], None],
) -> Callable[Concatenate[StoryEvents, _P], None]:
    """A StoryEvents method that never raises: the stream is a view of the story, never a
    part of it, so an event hero fails to build (a bug) is said once on stderr, and the
    story goes on."""

    def wrapper(self: StoryEvents, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        if not self:
            return
        try:
            method(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self._warn(exc)

    wrapper.__doc__ = method.__doc__
    wrapper.__name__ = method.__name__
    return wrapper


class EventSink:
    """One stream of events (default: stdout), shared by every story of a process.

    ``write`` is thread-safe and never raises: a reader that went away (a closed pipe)
    or a closed stream ends the stream for good, quietly, and ``on_gone`` is called once
    (`hero run` points stdout at /dev/null then, so the final flush does not complain).
    """

    def __init__(
        self, stream: TextIO | None = None, *, on_gone: Callable[[], None] | None = None
    ) -> None:
        self._stream = stream if stream is not None else sys.stdout
        self._on_gone = on_gone
        self._lock = threading.Lock()
        self._open = True

    @property
    def open(self) -> bool:
        return self._open

    def write(self, event: Mapping[str, Any]) -> None:
        # ASCII: what a worker wrote may hold U+2028 or U+0085 (line breaks to
        # str.splitlines and some JSON readers) or a lone surrogate (unencodable: it would
        # end the stream); escaped, every event is one line that any reader can split.
        line = json.dumps(event, ensure_ascii=True, default=str) + "\n"
        with self._lock:
            if not self._open:
                return
            try:
                self._stream.write(line)  # one write per line: whole lines, never mixed
                self._stream.flush()
            except (OSError, ValueError):  # BrokenPipeError, or a closed stream
                self._open = False
                if self._on_gone is not None:
                    try:
                        self._on_gone()
                    except OSError:
                        pass


class StoryEvents:
    """The events of one story, on ``sink`` (``None``: none at all, every call a no-op).

    One story's run is one thread, so ``round`` (the round under way, stamped on each
    event) needs no lock; the sink has the lock that the stories of a daemon share.
    """

    def __init__(
        self, sink: EventSink | None, story: str, redactor: Redactor | None = None
    ) -> None:
        self.sink = sink
        self.story = story
        self.round: int | None = None
        self._redactor = redactor if redactor else None
        self._arguments: dict[str, str] = {}  # tool call id -> its arguments (from its turn)
        self._warned = False

    def __bool__(self) -> bool:
        return self.sink is not None and self.sink.open

    # -- writing -----------------------------------------------------------------------

    def emit(self, event_type: EventType, /, **fields: Any) -> None:
        """Write one event; a failure to build it is said once on stderr, never raised:
        the stream is a view of the story, not a part of it."""
        if not self:
            return
        assert self.sink is not None
        try:
            event = {"type": event_type.value, "story": self.story, "round": self.round}
            event["time"] = now_iso()
            event.update(fields)
            if self._redactor is not None:
                event = self._redactor.redact_value(event)
            self.sink.write(event)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self._warn(exc)

    def _warn(self, exc: Exception) -> None:
        """An event that could not be built (a bug of hero's): said once, on stderr."""
        if not self._warned:
            self._warned = True
            print(f"hero: event stream: {type(exc).__name__}: {exc}", file=sys.stderr)

    def _text(self, value: Any) -> str:
        """A long text for an event: redacted, then cut."""
        text = "" if value is None else str(value)
        if self._redactor is not None:
            text = self._redactor.redact(text)
        return cut(text)

    # -- what the run says itself ------------------------------------------------------

    @_quiet
    def run_start(self, *, story_id: str, plan: str, file: Path, branch: str) -> None:
        self.round = None
        self.emit(
            EventType.RUN_START, id=story_id, plan=plan or None, file=str(file), branch=branch
        )

    @_quiet
    def overlap(self, *, others: list[str], scope: tuple[str, ...], mode: str) -> None:
        """The story starts beside running stories whose scopes overlap its own (``others``,
        their keys): said by `hero watch` (hero.daemon.overlap) right after ``run_start``."""
        self.emit(EventType.OVERLAP, mode=mode, scope=list(scope), **{"with": list(others)})

    @_quiet
    def round_start(self, n: int, *, max_rounds: int, part: int) -> None:
        self.round = n
        self._arguments.clear()
        self.emit(EventType.ROUND_START, max_rounds=max_rounds, part=part)

    @_quiet
    def round_end(self, record: Mapping[str, Any]) -> None:
        """``record``: the round as the run record keeps it (``Round.to_dict`` shape)."""
        worker = record.get("worker") or {}
        review = record.get("review") or {}
        self.emit(
            EventType.ROUND_END,
            verdict=review.get("verdict"),
            duration_s=record.get("duration_s"),
            turns=worker.get("turns", 0),
            tool_calls=worker.get("tool_calls", 0),
            stop_reason=worker.get("stop_reason") or None,
            head_sha=record.get("head_sha") or None,
        )
        self.round = None

    @_quiet
    def setup(self, record: Mapping[str, Any]) -> None:
        """``record``: the run record's ``setup`` (hero.run.environment)."""
        self.emit(
            EventType.SETUP,
            key=str(record.get("key", "")),
            reused=bool(record.get("reused")),
            seconds=float(record.get("seconds") or 0.0),
            log=str(record.get("log", "")),
        )

    @_quiet
    def baseline(self, record: Mapping[str, Any]) -> None:
        """``record``: the run record's ``baseline`` (hero.run.baseline)."""
        self.emit(
            EventType.BASELINE,
            commit=str(record.get("commit", "")),
            cached=bool(record.get("cached")),
            checks=[
                {
                    "tier": str(c.get("tier", "")),
                    "command": self._text(c.get("command")),
                    "passed": c.get("passed") if c.get("passed") is None else bool(c["passed"]),
                    "exit_code": c.get("exit_code"),
                }
                for c in record.get("checks", [])
            ],
        )

    @_quiet
    def updated_to_base(self, record: Mapping[str, Any]) -> None:
        """The branch was brought up to date with its target (hero.run.keepup); ``record``:
        the update as the round's ``update`` keeps it."""
        self.emit(
            EventType.UPDATED_TO_BASE,
            mode=str(record.get("mode", "")),
            targets=[str(t) for t in record.get("targets", [])],
            base=str(record.get("base", "")),
            head_before=str(record.get("from", "")),
            head_after=str(record.get("to", "")),
        )

    @_quiet
    def conflict(self, record: Mapping[str, Any]) -> None:
        """Bringing the branch up to date conflicts: the worker's round to resolve it
        follows (hero.run.keepup)."""
        self.emit(
            EventType.CONFLICT,
            target=str(record.get("conflict", "")),
            commit=str(record.get("base", "")),
            files=[str(f) for f in record.get("files", [])],
        )

    @_quiet
    def verify_command(self, check: Mapping[str, Any]) -> None:
        """``check``: a verify command's ``hero.roles.verifier.CommandCheck`` as a dict."""
        self.emit(
            EventType.VERIFY_COMMAND,
            tier=check.get("tier", ""),
            command=self._text(check.get("command")),
            exit_code=check.get("exit_code"),
            duration_s=check.get("duration_s"),
            timed_out=bool(check.get("timed_out")),
            output=self._text(check.get("tail")),
        )

    @_quiet
    def stop(
        self, /, reason: StopReason, detail: str, *, setting: str | None = None, **more: Any
    ) -> None:
        self.emit(
            EventType.STOP, reason=reason.value, setting=setting, detail=self._text(detail), **more
        )

    @_quiet
    def error(self, message: str) -> None:
        self.emit(EventType.ERROR, message=self._text(message))

    @_quiet
    def result(self, summary: Mapping[str, Any]) -> None:
        """The last event of a story: ``summary`` is the object `hero run --json` prints
        (:func:`run_result`), under ``result``."""
        self.round = None
        self.emit(EventType.RESULT, result=dict(summary))

    # -- what the round's trace says (hero.trace.Trace calls this with each record) -----

    @_quiet
    def tap(self, record: Mapping[str, Any]) -> None:
        """Translate one trace record (already redacted by the trace) into its event, if
        the stream has one for it; the rest (prompts, the reviewer's task) stay in the
        trace."""
        kind = record.get("event")
        if kind == Event.ASSISTANT:
            calls = record.get("tool_calls") or []
            for call in calls:
                self._arguments[str(call.get("id"))] = str(call.get("arguments") or "")
            self.emit(
                EventType.TURN,
                role="worker",
                turn=record.get("turn"),
                tokens_in=record.get("tokens_in", 0),
                tokens_out=record.get("tokens_out", 0),
                tokens_cached=record.get("tokens_cached", 0),
                tokens_estimated=record.get("tokens_estimated", 0),
                duration_s=record.get("http_s"),
                finish_reason=record.get("finish_reason"),
                text=self._text(record.get("content")),
                tool_calls=[str(c.get("name")) for c in calls],
            )
        elif kind == Event.REVIEW_ANSWER:
            calls = record.get("tool_calls") or []
            for call in calls:
                self._arguments[str(call.get("id"))] = str(call.get("arguments") or "")
            self.emit(
                EventType.TURN,
                role="reviewer",
                turn=record.get("turn"),
                tokens_in=record.get("tokens_in", 0),
                tokens_out=record.get("tokens_out", 0),
                tokens_cached=record.get("tokens_cached", 0),  # in the trace since metrics
                tokens_estimated=record.get("tokens_estimated", 0),
                duration_s=record.get("http_s"),
                finish_reason=None,
                text=self._text(record.get("content")),
                tool_calls=[str(c.get("name")) for c in calls],
            )
        elif kind == Event.TOOL_START:
            call_id = str(record.get("id"))
            self.emit(
                EventType.TOOL_CALL,
                turn=record.get("turn"),
                id=call_id,
                name=record.get("name"),
                arguments=self._text(self._arguments.get(call_id, "")),
            )
        elif kind == Event.TOOL_RESULT:
            self._arguments.pop(str(record.get("id")), None)
            self.emit(
                EventType.TOOL_RESULT,
                turn=record.get("turn"),
                id=str(record.get("id")),
                name=record.get("name"),
                is_error=bool(record.get("is_error")),
                content=self._text(record.get("content")),
                duration_s=record.get("duration_s"),
                lost=record.get("lost") or None,
            )
        elif kind == Event.CONDENSE:
            elided: Any = record.get("elided")  # the list of turns elided (window.Condensation)
            self.emit(
                EventType.CONDENSE,
                turn=record.get("turn"),
                tokens_before=record.get("tokens_before"),
                tokens_after=record.get("tokens_after"),
                elided=len(elided) if isinstance(elided, list) else 0,
                summarized=bool(record.get("summary")),
            )
        elif kind == Event.MCP and not record.get("by"):  # the worker's round's servers
            self.emit(EventType.MCP, servers=record.get("servers") or [])
        elif kind == Event.AGENT_END:
            why = str(record.get("stop_reason") or "")
            if why in GUARDRAIL_SETTINGS:
                self.stop(
                    StopReason.GUARDRAIL,
                    str(record.get("detail") or why),
                    setting=GUARDRAIL_SETTINGS[why],
                    guardrail=why,
                )
        elif kind == Event.VERIFY:
            self.emit(
                EventType.VERIFY,
                passed=bool(record.get("passed")),
                skipped_tiers=list(record.get("skipped_tiers") or []),
                log=record.get("log") or None,
            )
        elif kind == Event.VERDICT:
            self.emit(
                EventType.VERDICT,
                verdict=record.get("verdict"),
                summary=self._text(record.get("summary")),
                short_circuited=bool(record.get("short_circuited")),
                malformed=bool(record.get("malformed")),
            )


def run_result(state: RunState, home: Path, duration_s: float) -> dict[str, Any]:
    """The result of a run: what `hero run --json` prints, and the ``result`` event holds.

    ``final_text`` is the end of the last round's worker's final message, ``transcripts``
    the round traces that exist (``runs/<id>/round-N.jsonl``), ``turns`` and
    ``tool_calls`` the worker's totals over the rounds, ``models`` the model each role
    used (hero.llm.models).
    """
    run_dir = state.ref.run_dir(home)
    transcripts = [
        str(path)
        for n in range(1, max(len(state.rounds), state.current_round) + 1)
        if (path := run_dir / f"round-{n}.jsonl").is_file()
    ]
    return {
        "id": state.id,
        "status": state.status.value,
        "rounds": len(state.rounds),
        "verdicts": [r.review.verdict for r in state.rounds],
        "branch": state.branch,
        "base_sha": state.base_sha,
        "head_sha": state.head_sha,
        "usage": state.usage,
        "duration": round(duration_s, 3),  # seconds
        "error": state.error or None,
        "outage": state.outage or None,
        "budget": state.budget or None,  # the budget that stopped it (budget_exceeded)
        "models": state.models or None,  # {role: {provider, model, reasoning_effort}}
        "setup": state.setup or None,  # {key, reused, seconds, log, path}
        "baseline": state.baseline or None,  # {commit, cached, log, checks: [...]}
        "state": str(state.ref.state_path(home)),
        "story": state.story_path,
        "final_text": state.rounds[-1].worker.summary if state.rounds else "",
        "transcripts": transcripts,
        "turns": sum(r.worker.turns for r in state.rounds),
        "tool_calls": sum(r.worker.tool_calls for r in state.rounds),
    }
