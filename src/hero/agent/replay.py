"""Resume a round mid-conversation: rebuild the worker's history from the round's trace.

The trace holds every message of the round as it entered the history (the first
messages, each assistant message, each tool result, each condensation), so replaying it
gives the exact history the next request would have carried, byte for byte (which also
keeps the provider's prompt cache warm).

A round's trace may hold several attempts: a ``round_start`` event opens one, and a
``round_start`` with ``resumed: true`` continues it. Only the last attempt of the current
run record counts (``round_start`` carries the record's ``base`` and ``started``); an
older one (a fresh start after an error, say) is ignored.

A torn or odd trace is never guessed at: :class:`Unreplayable` says why, and the round
starts over.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hero.agent.window import apply_condense
from hero.errors import HeroError
from hero.llm.client import ToolCallRequest, assistant_message
from hero.llm.usage import Usage
from hero.trace import BY_REVIEWER, Event

#: What the model is told in place of a result that was lost when hero stopped.
LOST_RUNNING = (
    "[hero: this result was lost: hero was stopped while this call ran, so whether it "
    "finished, and what it did, is unknown. Check the worktree before running it again.]"
)
LOST_NOT_RUN = "[hero: this call was not run: hero was stopped before it started.]"
#: What the restart note says of the worktree of a round that goes on where it stopped.
WORKTREE_AS_LEFT = (
    "The worktree is as the stop left it, and hero may have committed work left "
    "uncommitted: check it (git status, git log, the files you were changing) before going on."
)


class Unreplayable(HeroError):
    """The round's trace cannot be replayed (torn, unreadable or inconsistent)."""


@dataclass(frozen=True)
class LostCall:
    id: str
    name: str
    started: bool  # it was running when hero stopped (not merely asked for)


@dataclass
class Replayed:
    """A round's worker conversation as its trace left it."""

    messages: list[dict[str, Any]]
    head: int  # the first messages (system prompt, task)
    parts: int  # attempts so far (1: the round was never resumed)
    turns: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)  # what the model calls replayed spent
    wall_s: float = 0.0
    condensations: int = 0
    #: the tool results in a row, at the end, that were errors (hero's answers for lost
    #: calls neither count nor reset): the resumed round's guardrail goes on counting
    tool_errors: int = 0
    lost: list[LostCall] = field(default_factory=list)
    ended: dict[str, Any] | None = None  # the agent_end event, when the worker had ended
    #: (prompt tokens the provider counted, hero's raw estimate) of the last request
    #: both are known for: the resumed round scales its estimates as the live one did
    calibration: tuple[int, int] | None = None
    final: str | None = None  # the worker's last answer, when it had given it
    #: what the restart note says of the worktree, when the run that goes on knows better
    #: than WORKTREE_AS_LEFT (the round goes on on another machine: hero.engine.wip)
    worktree: str = ""

    @property
    def done(self) -> bool:
        """The worker's part of the round was over: only the checks remain."""
        return self.ended is not None or self.final is not None


def round_start_fields(base_sha: str, started_at: float | None) -> dict[str, Any]:
    """What ties a round's trace to its run record (see :func:`replay_round`)."""
    return {"base": base_sha, "started": started_at}


def replay_round(path: Path, *, base_sha: str, started_at: float | None) -> Replayed | None:
    """The conversation of the round whose trace is ``path``, for the run record whose
    base is ``base_sha`` and which started at ``started_at``; None when there is nothing
    to resume (no trace, no attempt of this record, or no model answer yet). Raises
    Unreplayable when the trace cannot be trusted."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreplayable(f"cannot read {path.name}: {exc.strerror or exc}") from exc
    events: list[dict[str, Any] | int] = []  # an int: the number of a line that is no event
    for number, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            events.append(number)
            continue
        events.append(event if isinstance(event, dict) else number)
    start = _last_start(events)
    if start is None:
        return None
    opening = events[start]
    assert isinstance(opening, dict)
    if opening.get("base") != base_sha or opening.get("started") != started_at:
        return None  # an attempt of an earlier run record
    segment = events[start:]
    bad = [e for e in segment if isinstance(e, int)]
    if bad:
        return _raise(f"line {bad[0]} of {path.name} is torn or not JSON")
    try:
        replayed = _walk([e for e in segment if isinstance(e, dict)], path.name)
        _check(replayed.messages, path.name)
    except Unreplayable:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        raise Unreplayable(f"{path.name} holds an event hero cannot replay ({exc})") from exc
    if replayed.turns == 0 and replayed.ended is None:
        return None  # no answer yet: starting over loses nothing
    return replayed


def conversation(events: list[dict[str, Any]], name: str, *, condensed: bool) -> Replayed:
    """The conversation of the last attempt in ``events`` (a round's trace, read by the
    caller; ``name`` names it in errors), for ``hero export``: as the model last saw it
    (``condensed``: every condensation applied, as :func:`replay_round` rebuilds it), or in
    full (each message as it first entered the history, no condensation applied; the
    counts and the usage are the same either way but for ``condensations`` and the
    summaries' calls, which only the condensed walk counts). Calls without a result are in
    ``lost``, as for a resume. Raises Unreplayable for events that make no conversation."""
    walked: list[dict[str, Any] | int] = list(events)
    start = _last_start(walked)
    segment = events[start or 0 :]
    if not condensed:
        segment = [e for e in segment if e.get("event") != Event.CONDENSE]
    try:
        replayed = _walk(segment, name)
        _check(replayed.messages, name)
    except Unreplayable:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        raise Unreplayable(f"{name} holds an event hero cannot replay ({exc})") from exc
    return replayed


def _check(messages: list[dict[str, Any]], name: str) -> None:
    """The replayed history is one a chat API takes: text contents, and every tool
    result right after the assistant message that called it (results of calls lost when
    hero stopped come after the walk)."""
    calls: set[str] = set()
    for m in messages:
        if not isinstance(m.get("content"), str):
            raise Unreplayable(f"{name}: a message without text content")
        if m["role"] == "assistant":
            calls = {c["id"] for c in m.get("tool_calls") or ()}
        elif m["role"] == "tool":
            if m.get("tool_call_id") not in calls:
                raise Unreplayable(f"{name}: a tool result away from its call")
        else:
            calls = set()


def _last_start(events: list[dict[str, Any] | int]) -> int | None:
    for i in range(len(events) - 1, -1, -1):
        e = events[i]
        if isinstance(e, dict) and e.get("event") == Event.ROUND_START and not e.get("resumed"):
            return i
    return None


def _raise(why: str) -> Replayed:
    raise Unreplayable(why)


def _walk(events: list[dict[str, Any]], name: str) -> Replayed:
    out = Replayed(messages=[], head=0, parts=0)
    messages = out.messages
    pending: dict[str, str] = {}  # the last assistant message's calls without a result
    started: set[str] = set()
    part_start: float | None = None
    last_ts: float | None = None
    last_finish = ""
    for e in events:
        kind = e.get("event")
        ts = e.get("ts")
        if kind == Event.ROUND_START:
            if part_start is not None and last_ts is not None:
                out.wall_s += max(0.0, last_ts - part_start)
            out.parts += 1
            part_start = ts if isinstance(ts, int | float) else None
            last_ts = part_start
            continue
        if isinstance(ts, int | float) and out.ended is None:
            last_ts = ts
        if e.get("by") == BY_REVIEWER:
            continue  # the reviewer's tool calls: not the worker's conversation
        if kind == Event.MESSAGE:
            if pending:
                _raise(f"{name}: a message between a tool call and its result")
            role = _text(e, "role")
            if role not in ("system", "user") or (role == "system" and messages):
                _raise(f"{name}: a {role!r} message where hero writes none")
            messages.append({"role": role, "content": e.get("content")})
            if out.turns == 0:
                out.head = len(messages)
        elif kind == Event.ASSISTANT:
            if pending:
                _raise(f"{name}: an answer while tool calls had no result")
            message, calls = _assistant(e)
            messages.append(message)
            pending = calls
            started = set()
            out.turns += 1
            out.usage.add(call_usage(e))
            last_finish = str(e.get("finish_reason") or "")
            if (
                _int(e.get("tokens_in")) > 0
                and _int(e.get("estimate")) > 0
                and not _int(e.get("tokens_estimated"))  # hero's estimate calibrates nothing
            ):
                out.calibration = (_int(e.get("tokens_in")), _int(e.get("estimate")))
        elif kind == Event.TOOL_START:
            started.add(str(e.get("id")))
        elif kind == Event.TOOL_RESULT:
            call_id = str(e.get("id"))
            if call_id not in pending:
                _raise(f"{name}: a tool result for a call that was not asked for ({call_id})")
            del pending[call_id]
            messages.append({"role": "tool", "tool_call_id": call_id, "content": e.get("content")})
            if e.get("lost") != "not_run":
                out.tool_calls += 1
            if not e.get("lost"):
                out.tool_errors = out.tool_errors + 1 if e.get("is_error") is True else 0
        elif kind == Event.CONDENSE:
            apply_condense(messages, e)
            out.condensations += 1
            summary = e.get("summary")
            if isinstance(summary, dict):  # the summary's model call
                out.usage.add(call_usage(summary))
        elif kind == Event.AGENT_END:
            out.ended = e
            break
    if part_start is not None and last_ts is not None:
        out.wall_s += max(0.0, last_ts - part_start)
    if out.ended is not None:
        out.wall_s = float(out.ended.get("wall_s") or out.wall_s)
    out.lost = [LostCall(i, n, i in started) for i, n in pending.items()]
    last = messages[-1] if messages else None
    if (
        out.ended is None
        and last is not None
        and last.get("role") == "assistant"
        and not last.get("tool_calls")
        and last_finish != "length"
    ):
        out.final = str(last.get("content") or "")
    if out.ended is not None and out.ended.get("stop_reason") == "done":
        out.final = next(
            (str(m.get("content") or "") for m in reversed(messages) if m["role"] == "assistant"),
            "",
        )
    return out


def _assistant(e: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The assistant message as it entered the history (built by the same
    ``hero.llm.client.assistant_message``), and its calls by id."""
    calls: list[ToolCallRequest] = []
    for call in e.get("tool_calls") or ():
        if not isinstance(call, dict):
            raise Unreplayable("a malformed tool call in the trace")
        calls.append(
            ToolCallRequest(
                str(call.get("id")), str(call.get("name")), str(call.get("arguments", ""))
            )
        )
    sent = e.get("reasoning_sent")
    message = assistant_message(
        str(e.get("content") or ""), calls, sent if isinstance(sent, str) else None
    )
    return message, {c.id: c.name for c in calls}


def _text(e: dict[str, Any], key: str) -> str:
    value = e.get(key)
    if not isinstance(value, str):
        raise Unreplayable(f"an event without its {key}")
    return value


def call_usage(call: dict[str, Any]) -> Usage:
    """What one model call spent, as its trace event (or a condensation's summary) says."""
    estimated = _int(call.get("tokens_estimated"))
    return Usage(
        tokens_in=_int(call.get("tokens_in")),
        tokens_out=_int(call.get("tokens_out")),
        llm_calls=1,
        tokens_cached=_int(call.get("tokens_cached")),
        estimated_calls=1 if estimated else 0,
        estimated_tokens=estimated,
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def restart_note(replayed: Replayed) -> str:
    """The one message that tells the model hero was restarted mid-round."""
    lost = [c for c in replayed.lost if c.started]
    if lost:
        what = (
            f"The result of your last tool call ({', '.join(c.name for c in lost)}) was lost: "
            "it was running when hero stopped, and whether it finished is unknown."
        )
    elif replayed.lost:
        what = "Your last tool calls were not run; run them again if you still need them."
    else:
        what = "Your last request got no answer; go on from here."
    return (
        "hero was restarted (a crash, a reboot or a stop) in the middle of this round, and "
        f"this conversation goes on where it stopped. {what} "
        f"{replayed.worktree or WORKTREE_AS_LEFT} Do not start over."
    )
