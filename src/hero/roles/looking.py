"""A role that can look: the agent loop, read-only, bounded, before the role's answer.

One loop for every role that looks before it answers: the reviewer (before its verdict) and
the planner (before its plan, hero.roles.planner: its calls are marked ``by: planner``).

The reviewer's model gets its read-only toolset (hero.agent.tools.toolset: by default
read_file, ls, grep, find, git_log, git_show; never a tool that writes or runs a command)
and runs the agent loop (hero.agent.loop.run_agent) in the story's repository, with at most
``reviewer_max_tool_calls`` calls, each result cut to :data:`RESULT_CHARS`. Its last answer
is its verdict. Once its calls are used up (or another limit stops it) it is asked once
more, without tools, for the verdict; an answer that holds none is today's malformed one.

Its model calls and tool calls go into the round's trace as the reviewer's: each answer a
``review_answer`` (with its tool calls), each call a ``tool_start`` / ``tool_result``
marked ``by: reviewer`` (which the replay of the worker's conversation leaves out).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hero.agent.loop import DONE, run_agent
from hero.agent.tools.context import ToolContext
from hero.agent.tools.toolset import Toolset
from hero.config.sections import WorkerLimits
from hero.llm.client import Completion, Model, ToolCallRequest
from hero.trace import BY_PLANNER, BY_REVIEWER, Event, Trace

#: The most characters of one tool result the reviewer reads.
RESULT_CHARS = 8_000
#: Seconds one review's tool loop may take.
WALL_S = 900.0
#: What the reviewer is told when its tool calls are used up.
ANSWER_NOW = (
    "You cannot call tools any more in this review ({why}). Give your verdict now, as the "
    "JSON object asked for, from what you have read."
)
#: What the planner is told when its tool calls are used up.
PLAN_NOW = (
    "You cannot call tools any more ({why}). Give the plan now, as the JSON object asked "
    "for, from what you have read."
)
#: The result of a call the loop stopped before running.
NOT_RUN = "not run: the review's tool calls are used up"
#: The same, for the planner's calls.
PLAN_NOT_RUN = "not run: the planner's tool calls are used up"
#: Records one answer of the looking role's (its turn, None for the answer asked for
#: without tools).
OnAnswer = Callable[[Completion, "int | None"], None]


def look_and_answer(
    model: Model,
    messages: list[dict[str, Any]],
    ctx: ToolContext,
    tools: Toolset,
    trace: Trace,
    *,
    max_tool_calls: int,
    by: str = BY_REVIEWER,
    on_answer: OnAnswer | None = None,
) -> str:
    """The role's final answer after it looked around with ``tools`` in ``ctx.root``.

    ``by``: the role (BY_REVIEWER or BY_PLANNER), which marks its tool calls' events and
    chooses what it is told once its calls are used up; ``on_answer``: records each of its
    answers (default: the trace's ``review_answer``)."""
    record = on_answer or (lambda c, turn: trace.review_answer(c, turn=turn))
    ctx.max_result_chars = min(ctx.max_result_chars, RESULT_CHARS)
    limits = WorkerLimits(
        max_turns=max_tool_calls + 2,
        max_tool_calls=max_tool_calls,
        max_wall_s=WALL_S,
        loop_repeats=3,
        max_tool_errors=max(3, max_tool_calls // 2),
    )
    looks = ReviewTrace(trace, by=by, on_answer=record)
    result = run_agent(model, messages, ctx, limits, looks, tools=tools)
    if result.stop_reason == DONE:
        return result.final_message
    planner = by == BY_PLANNER
    _answer_lost_calls(messages, PLAN_NOT_RUN if planner else NOT_RUN)
    note = (PLAN_NOW if planner else ANSWER_NOW).format(why=result.detail)
    messages.append({"role": "user", "content": note})
    completion = model.complete(messages)
    record(completion, None)
    return completion.content


def _answer_lost_calls(messages: list[dict[str, Any]], not_run: str = NOT_RUN) -> None:
    """A result for each call of the last answer that the loop stopped before running (the
    request must pair every call with its result)."""
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    if last is None:
        return
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    for call in last.get("tool_calls") or ():
        if call.get("id") not in answered:
            messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": not_run})


class ReviewTrace(Trace):
    """The agent loop's trace calls, written into ``inner`` as the looking role's (``by``):
    its answers through ``on_answer``, its calls as events marked ``by``."""

    def __init__(
        self, inner: Trace, *, by: str = BY_REVIEWER, on_answer: OnAnswer | None = None
    ) -> None:
        super().__init__(None)
        self.inner = inner
        self.by = by
        self.on_answer: OnAnswer = on_answer or (lambda c, t: inner.review_answer(c, turn=t))

    def message(self, role: str, content: Any, *, restart: bool = False) -> None:
        """The first messages: the reviewer's task is in ``review_request`` already."""

    def assistant(self, turn: int, completion: Completion, *, estimate: int | None) -> None:
        self.on_answer(completion, turn)

    def tool_start(self, turn: int, call: ToolCallRequest) -> None:
        self.inner.event(Event.TOOL_START, turn=turn, id=call.id, name=call.name, by=self.by)

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
        self.inner.event(
            Event.TOOL_RESULT,
            turn=turn,
            id=call_id,
            name=name,
            is_error=is_error,
            content=content,
            duration_s=round(duration_s or 0.0, 4),
            by=self.by,
        )

    def condense(self, fields: Any) -> None:
        """No window is kept for the reviewer: nothing is condensed."""

    def agent_end(self, fields: Any) -> None:
        """The verdict (or the answer asked for after a stop) ends the review."""
