"""The tool-calling loop: ask the model, run the tools it calls, repeat.

In mini-swe-agent's shape: :func:`run_agent` loops over turns, and a turn is
:meth:`Agent.query` (the model's answer) then :meth:`Agent.execute` (the tools it called).
Every limit is checked in one place (:meth:`Guardrails.check`), before the work it limits;
it raises :class:`LimitReached`, which :func:`run_agent` catches once. The loop knows nothing
of stories or branches: it gets a model, a message history, a tool context and limits, and
says why it stopped.

Every secret hero knows (``ToolContext.secrets``) is redacted from what enters the history,
once, as it enters: the first messages (built from the story and the repository's files)
and each tool result. The model never reads one, and no later turn pays to look again.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hero.agent.replay import LOST_NOT_RUN, LOST_RUNNING, Replayed, restart_note
from hero.agent.tools import ToolContext
from hero.agent.tools.toolset import Toolset
from hero.agent.window import UNLIMITED, Context
from hero.config.sections import WorkerLimits
from hero.errors import HeroError, Interrupted
from hero.llm.client import Completion, Model, ToolCallRequest
from hero.llm.usage import Usage
from hero.redact import Redactor
from hero.trace import Trace

#: Stop reasons. ``done`` is the model's own end of turn; the rest are guardrails.
DONE = "done"
GUARDRAILS = (
    "max_turns",
    "max_tool_calls",
    "max_wall_time",
    "loop",
    "output_limit",
    "tool_errors",
)
#: Replies in a row cut off by the model's output limit before the round stops.
MAX_CUT_REPLIES = 3
#: What the model is told when its reply was cut off by the output limit.
CUT_NOTE = (
    "Your last reply was cut off: it reached the model's output limit (finish_reason "
    "'length'), so it is not your final answer. Continue where it stopped, or work in "
    "smaller steps: one tool call at a time, with shorter text and smaller file writes."
)


class LimitReached(HeroError):
    """A guardrail stops the worker before the step that would pass it."""

    def __init__(self, stop_reason: str, detail: str, *, mid_turn: bool = False) -> None:
        super().__init__(detail)
        self.stop_reason = stop_reason  # one of GUARDRAILS
        self.detail = detail
        self.mid_turn = mid_turn  # before a tool call: some of the turn's calls may have run


@dataclass
class AgentResult:
    stop_reason: str = DONE
    detail: str = ""
    turns: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)  # the worker's model calls, summaries too
    final_message: str = ""
    llm_s: float = 0.0
    command_s: float = 0.0
    wall_s: float = 0.0
    condensations: int = 0
    parts: int = 1  # the attempts the round's worker ran in (more after a restart)

    @property
    def tokens_in(self) -> int:
        return self.usage.tokens_in

    @property
    def tokens_out(self) -> int:
        return self.usage.tokens_out

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
            usage=Usage() + replayed.usage,
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
    tools: Toolset | None = None,
) -> AgentResult:
    """Run until the model answers without tool calls or a guardrail stops it.

    ``messages`` is extended in place, so the caller holds the whole conversation. The
    history is condensed to fit ``context``, the model's window, before each request (see
    hero.agent.window; none given: no window, nothing is condensed). With ``resume``,
    ``messages`` is a round's history replayed from its trace (see hero.agent.replay): the
    conversation goes on, its counts and wall time carried over, after one message telling
    the model hero was restarted. ``on_turn`` is called after each turn's tool calls.
    ``tools``: the role's toolset (hero.agent.tools.toolset); none given: the worker's seven.
    """
    window = context or Context(UNLIMITED, None)
    agent = Agent(model, messages, ctx, trace, window, on_condense, tools or Toolset())
    rails = Guardrails(limits, time.monotonic())
    if resume is None:
        agent.begin()
    else:
        rails.started -= resume.wall_s
        rails.tool_errors = resume.tool_errors
        agent.resume(resume)
    result = agent.result
    try:
        while True:
            if ctx.cancel is not None and ctx.cancel.is_set():
                raise Interrupted("stopped between worker turns")
            rails.check(result)
            completion = agent.query()
            if rails.replied(completion):  # cut off by the output limit: no final answer
                if rails.cut < MAX_CUT_REPLIES:
                    agent.say(CUT_NOTE)
                continue
            if not completion.tool_calls:
                result.final_message = completion.content
                break
            agent.execute(completion.tool_calls, rails)
            if on_turn is not None:
                on_turn(result)
    except LimitReached as stop:
        result.stop_reason, result.detail = stop.stop_reason, stop.detail
        if stop.mid_turn and on_turn is not None:
            on_turn(result)
    result.wall_s = time.monotonic() - rails.started
    trace.agent_end(result.end_event())
    return result


class Guardrails:
    """Every limit of one worker's turn, checked in one place: :meth:`check`."""

    def __init__(self, limits: WorkerLimits, started: float) -> None:
        self.limits = limits
        self.started = started  # time.monotonic() at the start (earlier on a resume)
        self.cut = 0  # replies in a row cut off by the output limit
        self.cut_off = False  # the last one was, and called no tool: no final answer
        self.last_call: tuple[str, str] | None = None
        self.repeats = 0  # the same call in a row
        # tool results in a row that were errors (is_error: the call was made wrongly; a
        # bash command that exits non-zero is not one). Carried over on a resume.
        self.tool_errors = 0

    def tool_result(self, is_error: bool) -> None:
        """Count a tool call's result: an error adds one, anything else starts again."""
        self.tool_errors = self.tool_errors + 1 if is_error else 0

    def replied(self, completion: Completion) -> bool:
        """Count a reply; whether it was cut off by the output limit and called no tool."""
        self.cut = self.cut + 1 if completion.finish_reason == "length" else 0
        self.cut_off = bool(self.cut) and not completion.tool_calls
        return self.cut_off

    def check(self, result: AgentResult, call: ToolCallRequest | None = None) -> None:
        """Raise LimitReached for the first limit the next step would pass: the next turn,
        or (with ``call``) running that tool call."""
        limits = self.limits
        if 0 < limits.max_tool_errors <= self.tool_errors:
            why = (
                f"{self.tool_errors} tool calls in a row were errors (worker_max_tool_errors "
                f"{limits.max_tool_errors}): the worker keeps calling its tools wrongly"
            )
            raise LimitReached("tool_errors", why, mid_turn=call is not None)
        if call is None:
            if self.cut_off and self.cut >= MAX_CUT_REPLIES:
                why = f"{self.cut} replies in a row were cut off by the model's output limit"
                raise LimitReached("output_limit", why)
            if result.turns >= limits.max_turns:
                why = f"turn cap reached ({limits.max_turns} model calls)"
                raise LimitReached("max_turns", why)
        else:
            signature = (call.name, _canonical(call.arguments))
            self.repeats = self.repeats + 1 if signature == self.last_call else 1
            self.last_call = signature
            if self.repeats >= limits.loop_repeats:
                why = (
                    f"the same call {call.name}({_short(call.arguments)}) was made "
                    f"{self.repeats} times in a row"
                )
                raise LimitReached("loop", why, mid_turn=True)
            if result.tool_calls >= limits.max_tool_calls:
                why = f"tool-call cap reached ({limits.max_tool_calls} calls)"
                raise LimitReached("max_tool_calls", why, mid_turn=True)
        if time.monotonic() - self.started >= limits.max_wall_s:
            why = f"wall-time cap reached ({limits.max_wall_s:g} s)"
            raise LimitReached("max_wall_time", why, mid_turn=call is not None)


class Agent:
    """One worker's conversation: the model's answers, the tools' results, their trace."""

    def __init__(
        self,
        model: Model,
        messages: list[dict[str, Any]],
        ctx: ToolContext,
        trace: Trace,
        context: Context,
        on_condense: Callable[[str], None] | None,
        toolset: Toolset,
    ) -> None:
        self.model = model
        self.messages = messages
        self.ctx = ctx
        self.trace = trace
        self.context = context
        self.on_condense = on_condense
        self.toolset = toolset
        self.tools = toolset.schemas()
        self.redactor = Redactor(ctx.secrets)
        self.result = AgentResult()
        # every tool-call id in the history: results are matched to their calls by id (by
        # the API, and by condensation and its replay), so an id a server gives twice is
        # renamed
        self.seen_ids = {c["id"] for m in messages for c in m.get("tool_calls") or ()}

    def begin(self) -> None:
        """The first messages, redacted as they enter the history."""
        redactor = self.redactor
        for message in self.messages:
            if redactor and isinstance(message.get("content"), str):
                message["content"] = redactor.redact(message["content"])
            self.trace.message(message["role"], message.get("content"))

    def resume(self, replayed: Replayed) -> None:
        """Carry a replayed round's counts over, answer its lost calls, and tell the model."""
        result = self.result
        result.turns = replayed.turns
        result.tool_calls = replayed.tool_calls
        result.usage = Usage() + replayed.usage
        result.condensations = replayed.condensations
        result.parts = replayed.parts + 1
        if replayed.calibration is not None:
            self.context.reported(*replayed.calibration)  # scale estimates as the live round did
        for lost in replayed.lost:
            content = LOST_RUNNING if lost.started else LOST_NOT_RUN
            self.messages.append({"role": "tool", "tool_call_id": lost.id, "content": content})
            how = "running" if lost.started else "not_run"
            self.trace.tool_result(
                replayed.turns, lost.id, lost.name, content, is_error=True, lost=how
            )
            if lost.started:
                result.tool_calls += 1
        self.say(restart_note(replayed), restart=True)

    def say(self, note: str, *, restart: bool = False) -> None:
        """A message of hero's own to the model."""
        self.messages.append({"role": "user", "content": note})
        self.trace.message("user", note, restart=restart)

    def query(self) -> Completion:
        """The model's answer to the history, condensed first if it outgrew the window."""
        result, context = self.result, self.context
        done = context.fit(self.messages, self.model, result.turns)
        if done is not None:
            result.condensations += 1
            result.usage.add(done.usage)  # the summary's model call, if it took one
            self.trace.condense(done.to_event())
            if self.on_condense is not None:
                self.on_condense(done.describe())
        context.sent(self.messages)
        answer = self.model.complete(self.messages, self.tools)
        completion = _unique_ids(answer, self.seen_ids, result.turns + 1)
        if not completion.tokens_estimated:  # an estimate of hero's own calibrates nothing
            context.reported(completion.tokens_in)
        result.turns += 1
        result.usage.add(completion.usage)
        result.llm_s += completion.http_s
        self.messages.append(completion.message)
        self.trace.assistant(result.turns, completion, estimate=context.last_sent)
        return completion

    def execute(self, calls: tuple[ToolCallRequest, ...], rails: Guardrails) -> None:
        """Run the turn's tool calls in order, each once the guardrails let it."""
        result = self.result
        for call in calls:
            rails.check(result, call)
            t0 = time.monotonic()
            self.trace.tool_start(result.turns, call)
            outcome = self.toolset.execute(self.ctx, call.name, call.arguments)
            result.tool_calls += 1
            result.command_s += outcome.command_s
            content = self.redactor.redact(outcome.content)
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            self.trace.tool_result(
                result.turns,
                call.id,
                call.name,
                content,
                is_error=outcome.is_error,
                duration_s=time.monotonic() - t0,
            )
            rails.tool_result(outcome.is_error)


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


def _canonical(arguments: str) -> str:
    """The arguments in one spelling (key order aside), or as written when they are no
    JSON: what the model writes may be nested past the parser's depth, too."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except (ValueError, RecursionError):
        return arguments


def _short(arguments: str, limit: int = 80) -> str:
    return arguments if len(arguments) <= limit else arguments[: limit - 3] + "..."
