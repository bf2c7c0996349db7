"""The tool-calling loop: ask the model, run the tools it calls, repeat.

Every limit is checked in one place (``_limit_reached``), before the work it limits.
The loop knows nothing of stories or branches: it gets a model, a message history, a
tool context and limits, and says why it stopped.

Every secret hero knows (``ToolContext.secrets``) is redacted from what enters the history,
once, as it enters: the first messages (built from the story and the repository's files)
and each tool result. The model never reads one, and no later turn pays to look again.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hero.agent.context import Context
from hero.agent.replay import LOST_NOT_RUN, LOST_RUNNING, Replayed, restart_note
from hero.agent.tools import ToolContext, execute_tool, tool_schemas
from hero.config import WorkerLimits
from hero.errors import Interrupted
from hero.llm import Completion
from hero.redact import Redactor
from hero.trace import Trace

#: Stop reasons. ``done`` is the model's own end of turn; the rest are guardrails.
DONE = "done"
GUARDRAILS = ("max_turns", "max_tool_calls", "max_wall_time", "loop", "output_limit")
#: Replies in a row cut off by the model's output limit before the round stops.
MAX_CUT_REPLIES = 3
#: What the model is told when its reply was cut off by the output limit.
CUT_NOTE = (
    "Your last reply was cut off: it reached the model's output limit (finish_reason "
    "'length'), so it is not your final answer. Continue where it stopped, or work in "
    "smaller steps: one tool call at a time, with shorter text and smaller file writes."
)


class Model(Protocol):
    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> Completion: ...


@dataclass
class AgentResult:
    stop_reason: str = DONE
    detail: str = ""
    turns: int = 0
    tool_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    final_message: str = ""
    llm_s: float = 0.0
    command_s: float = 0.0
    wall_s: float = 0.0
    condensations: int = 0
    parts: int = 1  # the attempts the round's worker ran in (more after a restart)

    @property
    def guardrail(self) -> bool:
        return self.stop_reason in GUARDRAILS

    @classmethod
    def from_replay(cls, replayed: Replayed) -> AgentResult:
        """The result of a worker that had ended before hero stopped (only the checks of
        its round were left to do)."""
        end = replayed.ended or {}
        return cls(
            stop_reason=str(end.get("stop_reason") or DONE),
            detail=str(end.get("detail") or ""),
            turns=replayed.turns,
            tool_calls=replayed.tool_calls,
            tokens_in=replayed.tokens_in,
            tokens_out=replayed.tokens_out,
            final_message=replayed.final or "",
            wall_s=replayed.wall_s,
            condensations=replayed.condensations,
            parts=replayed.parts,
        )

    def end_event(self) -> dict[str, Any]:
        """The ``agent_end`` trace event's fields."""
        return {
            "stop_reason": self.stop_reason,
            "detail": self.detail,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "wall_s": round(self.wall_s, 3),
            "condensations": self.condensations,
            "parts": self.parts,
        }


def run_agent(
    model: Model,
    messages: list[dict[str, Any]],
    ctx: ToolContext,
    limits: WorkerLimits,
    trace: Trace,
    *,
    on_turn: Callable[[AgentResult], None] | None = None,
    context: Context | None = None,
    resume: Replayed | None = None,
    on_condense: Callable[[str], None] | None = None,
) -> AgentResult:
    """Run until the model answers without tool calls or a guardrail stops it.

    ``messages`` is extended in place, so the caller holds the whole conversation. With
    ``context``, the history is condensed to fit the model's window before each request
    (see hero.agent.context). With ``resume``, ``messages`` is a round's history replayed
    from its trace (see hero.agent.replay): the conversation goes on, its counts and wall
    time carried over, after one message telling the model hero was restarted.
    """
    tools = tool_schemas()
    redactor = Redactor(ctx.secrets)
    result = AgentResult()
    started = time.monotonic()
    last_call: tuple[str, str] | None = None
    repeats = 0
    cut = 0  # replies in a row cut off by the output limit
    # every tool-call id in the history: results are matched to their calls by id (by the
    # API, and by condensation and its replay), so an id a server gives twice is renamed
    seen_ids = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
    if resume is None:
        for message in messages:
            if redactor and isinstance(message.get("content"), str):
                message["content"] = redactor.redact(message["content"])
            trace.event("message", role=message["role"], content=message.get("content"))
    else:
        _resume(result, messages, resume, trace)
        started -= resume.wall_s
        if context is not None and resume.calibration is not None:
            context.reported(*resume.calibration)  # scale estimates as the live round did
    while True:
        if ctx.cancel is not None and ctx.cancel.is_set():
            raise Interrupted("stopped between worker turns")
        if _limit_reached(result, limits, started, next_step="turn"):
            break
        if context is not None:
            done = context.fit(messages, model, result.turns)
            if done is not None:
                result.condensations += 1
                if done.summary:
                    result.tokens_in += done.summary["tokens_in"]
                    result.tokens_out += done.summary["tokens_out"]
                trace.event("condense", **done.to_event())
                if on_condense is not None:
                    on_condense(done.describe())
            context.sent(messages)
        completion = _unique_ids(model.complete(messages, tools), seen_ids, result.turns + 1)
        if context is not None:
            context.reported(completion.tokens_in)
        result.turns += 1
        result.tokens_in += completion.tokens_in
        result.tokens_out += completion.tokens_out
        result.llm_s += completion.http_s
        messages.append(completion.message)
        extra: dict[str, Any] = {}
        if context is not None:
            extra["estimate"] = context.last_sent  # what the provider's count calibrates
        if completion.tokens_cached:
            extra["tokens_cached"] = completion.tokens_cached
        if completion.reasoning:
            extra["reasoning"] = completion.reasoning
            if "reasoning_content" in completion.message:
                extra["reasoning_sent"] = completion.message["reasoning_content"]
        trace.event(
            "assistant",
            turn=result.turns,
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
        cut = cut + 1 if completion.finish_reason == "length" else 0
        if not completion.tool_calls and cut:
            # a reply the output limit cut off is no final answer: say so, and go on
            if cut >= MAX_CUT_REPLIES:
                result.stop_reason = "output_limit"
                result.detail = f"{cut} replies in a row were cut off by the model's output limit"
                break
            messages.append({"role": "user", "content": CUT_NOTE})
            trace.event("message", role="user", content=CUT_NOTE)
            continue
        if not completion.tool_calls:
            result.final_message = completion.content
            break
        stopped = False
        for call in completion.tool_calls:
            signature = (call.name, _canonical(call.arguments))
            repeats = repeats + 1 if signature == last_call else 1
            last_call = signature
            if repeats >= limits.loop_repeats:
                result.stop_reason = "loop"
                result.detail = (
                    f"the same call {call.name}({_short(call.arguments)}) was made "
                    f"{repeats} times in a row"
                )
                stopped = True
                break
            if _limit_reached(result, limits, started, next_step="tool"):
                stopped = True
                break
            t0 = time.monotonic()
            trace.event("tool_start", turn=result.turns, id=call.id, name=call.name)
            outcome = execute_tool(ctx, call.name, call.arguments)
            result.tool_calls += 1
            result.command_s += outcome.command_s
            content = redactor.redact(outcome.content)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            trace.event(
                "tool_result",
                turn=result.turns,
                id=call.id,
                name=call.name,
                is_error=outcome.is_error,
                content=content,
                duration_s=round(time.monotonic() - t0, 4),
            )
        if on_turn is not None:
            on_turn(result)
        if stopped:
            break
    result.wall_s = time.monotonic() - started
    trace.event("agent_end", **result.end_event())
    return result


def _unique_ids(completion: Completion, seen: set[str], turn: int) -> Completion:
    """``completion`` with every tool-call id unique in the round (``seen`` grows)."""
    calls = list(completion.tool_calls)
    renamed = False
    for n, call in enumerate(calls):
        if call.id in seen:
            new_id, k = f"{call.id}_t{turn}", 1
            while new_id in seen:
                k += 1
                new_id = f"{call.id}_t{turn}_{k}"
            calls[n] = dataclasses.replace(call, id=new_id)
            renamed = True
        seen.add(calls[n].id)
    if not renamed:
        return completion
    message = dict(completion.message)
    message["tool_calls"] = [
        {**wire, "id": call.id}
        for wire, call in zip(completion.message["tool_calls"], calls, strict=True)
    ]
    return dataclasses.replace(completion, tool_calls=tuple(calls), message=message)


def _resume(
    result: AgentResult, messages: list[dict[str, Any]], resume: Replayed, trace: Trace
) -> None:
    """Carry a replayed round's counts over, answer its lost calls, and tell the model."""
    result.turns = resume.turns
    result.tool_calls = resume.tool_calls
    result.tokens_in = resume.tokens_in
    result.tokens_out = resume.tokens_out
    result.condensations = resume.condensations
    result.parts = resume.parts + 1
    for lost in resume.lost:
        content = LOST_RUNNING if lost.started else LOST_NOT_RUN
        messages.append({"role": "tool", "tool_call_id": lost.id, "content": content})
        trace.event(
            "tool_result",
            turn=resume.turns,
            id=lost.id,
            name=lost.name,
            is_error=True,
            content=content,
            lost="running" if lost.started else "not_run",
        )
        if lost.started:
            result.tool_calls += 1
    note = restart_note(resume)
    messages.append({"role": "user", "content": note})
    trace.event("message", role="user", content=note, restart=True)


def _limit_reached(
    result: AgentResult, limits: WorkerLimits, started: float, next_step: str
) -> bool:
    if next_step == "turn" and result.turns >= limits.max_turns:
        result.stop_reason = "max_turns"
        result.detail = f"turn cap reached ({limits.max_turns} model calls)"
    elif next_step == "tool" and result.tool_calls >= limits.max_tool_calls:
        result.stop_reason = "max_tool_calls"
        result.detail = f"tool-call cap reached ({limits.max_tool_calls} calls)"
    elif time.monotonic() - started >= limits.max_wall_s:
        result.stop_reason = "max_wall_time"
        result.detail = f"wall-time cap reached ({limits.max_wall_s:g} s)"
    else:
        return False
    return True


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments


def _short(arguments: str, limit: int = 80) -> str:
    return arguments if len(arguments) <= limit else arguments[: limit - 3] + "..."
