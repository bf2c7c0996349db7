"""JSONL traces: one line per event, appended and flushed as it happens.

Appending (never rewriting) keeps a trace's cost per event flat as a round grows, and a
crash loses at most the line being written. Every string in an event is redacted (see
``hero.redact``) before it is written: no secret hero knows reaches a trace.

The kinds of event are :class:`Event`; each is written by its own method of :class:`Trace`,
and read back by the same names (``hero.agent.replay`` rebuilds a round's history from
them, ``hero logs`` shows them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from hero.redact import Redactor

if TYPE_CHECKING:
    from hero.llm.client import Completion, ToolCallRequest


#: The ``by`` of a tool call's events that the reviewer made (hero.roles.looking): the
#: worker's conversation, replayed from the trace, leaves them out.
BY_REVIEWER = "reviewer"
BY_PLANNER = "planner"


class Event(StrEnum):
    """The kinds of trace event: the value is each line's ``event``, a contract that
    ``hero logs`` and the replay of a round read."""

    ROUND_START = "round_start"
    """A round (or a part of it, after a restart) begins; ties the trace to its run record."""
    RESUME_FAILED = "resume_failed"
    """The round's trace could not be replayed: it starts over."""
    MESSAGE = "message"
    """A system or user message entered the worker's history."""
    ASSISTANT = "assistant"
    """The model's answer to one worker turn, as it entered the history."""
    TOOL_START = "tool_start"
    """A tool call is about to run."""
    TOOL_RESULT = "tool_result"
    """A tool call's result, as it entered the history."""
    CONDENSE = "condense"
    """The worker's history was condensed to fit the context window (what changed)."""
    AGENT_END = "agent_end"
    """The worker's turn ended: why, and its counts."""
    VERIFY = "verify"
    """The checks' record."""
    REVIEW_REQUEST = "review_request"
    """The reviewer's task."""
    REVIEW_ANSWER = "review_answer"
    """The reviewer's answer, as the model gave it."""
    VERDICT = "verdict"
    """The round's verdict (the reviewer's, or the short circuit that stood in for it)."""
    MCP = "mcp"
    """The round's MCP servers as the worker's turn begins: each one's tools, or why it has
    none (it did not start)."""


class Trace:
    def __init__(
        self,
        path: Path | None,
        *,
        redact: Redactor | None = None,
        tap: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.path = path
        self._redact = redact if redact else None  # an empty Redactor costs nothing, skip it
        #: called with each record once written (redacted): the event stream (hero.run.events)
        self._tap = tap
        self._t0 = time.monotonic()
        self._fh: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
            if _torn(path):  # a line half written by a process that died: end it
                self._fh.write("\n")

    def event(self, kind: Event, **data: Any) -> None:
        """Append one event of ``kind`` with ``data`` as its fields (in that order)."""
        if self._fh is None and self._tap is None:
            return
        record = {"t": round(time.monotonic() - self._t0, 4), "ts": time.time(), "event": kind}
        record.update(data if self._redact is None else self._redact.redact_value(data))
        if self._fh is not None:
            self._fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            self._fh.flush()
        if self._tap is not None:  # after the write: the trace holds all the stream shows
            self._tap(record)

    # -- one method per kind -------------------------------------------------------------

    def round_start(
        self, round_no: int, *, story: str, run: int, branch: str, part: int = 1, **tie: Any
    ) -> None:
        """Round ``round_no`` begins (``part`` > 1: goes on after a restart); ``tie`` is
        ``hero.agent.replay.round_start_fields``."""
        resumed = {"resumed": True, "part": part} if part > 1 else {}
        self.event(
            Event.ROUND_START, story=story, round=round_no, run=run, branch=branch, **tie, **resumed
        )

    def resume_failed(self, reason: str) -> None:
        self.event(Event.RESUME_FAILED, reason=reason)

    def message(self, role: str, content: Any, *, restart: bool = False) -> None:
        if restart:  # the note telling the model hero was restarted mid-round
            self.event(Event.MESSAGE, role=role, content=content, restart=True)
        else:
            self.event(Event.MESSAGE, role=role, content=content)

    def assistant(self, turn: int, completion: Completion, *, estimate: int | None) -> None:
        """The answer of worker turn ``turn``; ``estimate``: hero's raw estimate of the
        request (what the provider's count calibrates on a resume)."""
        extra: dict[str, Any] = {}
        if estimate is not None:
            extra["estimate"] = estimate
        extra.update(_call_extras(completion))
        if completion.reasoning:
            extra["reasoning"] = completion.reasoning
            if "reasoning_content" in completion.message:
                extra["reasoning_sent"] = completion.message["reasoning_content"]
        self.event(
            Event.ASSISTANT,
            turn=turn,
            content=completion.content,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.arguments}
                for c in completion.tool_calls
            ],
            tokens_in=completion.tokens_in,
            tokens_out=completion.tokens_out,
            http_s=round(completion.http_s, 4),
            finish_reason=completion.finish_reason,
            **extra,
        )

    def tool_start(self, turn: int, call: ToolCallRequest) -> None:
        self.event(Event.TOOL_START, turn=turn, id=call.id, name=call.name)

    def tool_result(
        self,
        turn: int,
        call_id: str,
        name: str,
        content: str,
        *,
        is_error: bool,
        duration_s: float | None = None,
        lost: str = "",
    ) -> None:
        """A call's result; ``lost``: ``running`` or ``not_run`` for one hero answered
        itself after a restart, else ``duration_s``."""
        end = {"lost": lost} if lost else {"duration_s": round(duration_s or 0.0, 4)}
        self.event(
            Event.TOOL_RESULT,
            turn=turn,
            id=call_id,
            name=name,
            is_error=is_error,
            content=content,
            **end,
        )

    def condense(self, fields: Mapping[str, Any]) -> None:
        """``fields``: ``hero.agent.window.Condensation.to_event``."""
        self.event(Event.CONDENSE, **fields)

    def agent_end(self, fields: Mapping[str, Any]) -> None:
        """``fields``: ``hero.agent.loop.AgentResult.end_event``."""
        self.event(Event.AGENT_END, **fields)

    def verify(self, record: Mapping[str, Any]) -> None:
        self.event(Event.VERIFY, **record)

    def review_request(self, content: str) -> None:
        self.event(Event.REVIEW_REQUEST, content=content)

    def review_answer(self, completion: Completion, *, turn: int | None = None) -> None:
        """One answer of the reviewer's; ``turn``: its turn when it looks with tools (then
        its tool calls are written too, and its calls' events carry ``by: reviewer``)."""
        calls: dict[str, Any] = {}
        if turn is not None:
            calls["turn"] = turn
            calls["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments}
                for c in completion.tool_calls
            ]
        self.event(
            Event.REVIEW_ANSWER,
            content=completion.content,
            tokens_in=completion.tokens_in,
            tokens_out=completion.tokens_out,
            http_s=round(completion.http_s, 4),
            **calls,
            **_call_extras(completion),
        )

    def verdict(self, record: Mapping[str, Any]) -> None:
        self.event(Event.VERDICT, **record)

    def mcp(
        self, servers: list[dict[str, Any]], tools: list[dict[str, Any]], *, by: str = ""
    ) -> None:
        """The round's MCP servers (each one's tools or its problem) and the schemas of
        their tools as the model was given them (for ``hero export``); ``by``: the role
        they were started for when not the worker (``reviewer``)."""
        if by:
            self.event(Event.MCP, servers=servers, tools=tools, by=by)
        else:
            self.event(Event.MCP, servers=servers, tools=tools)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _call_extras(completion: Completion) -> dict[str, Any]:
    """What a model call's event holds only when there is something to say: its cached
    prompt tokens, its cost (the run record keeps only the story's total; this is the
    call's, for cost by role and model), the kinds of the errors retried before it
    answered (``hero.llm.client.error_kind``), which nothing else keeps, and how many of its
    tokens are hero's estimate (``tokens_estimated``: the answer carried no count)."""
    extra: dict[str, Any] = {}
    if completion.tokens_cached:
        extra["tokens_cached"] = completion.tokens_cached
    if completion.cost_usd:
        extra["cost_usd"] = round(completion.cost_usd, 8)
    if completion.errors:
        extra["errors"] = list(completion.errors)
    if completion.tokens_estimated:  # the answer carried no count of them (hero.llm.client)
        extra["tokens_estimated"] = completion.tokens_estimated
    return extra


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
