"""The worker's context window: a running estimate of each request's size, and the
condensation that keeps a long round's history under the window.

A request never goes out larger than ``window - reserve`` (the reserve is what the answer
may take). When the history passes ``condense_at`` of that limit, it is condensed in one
chunk, down to half the trigger, so that many turns follow before the next condensation:
between two condensations the history only grows at its end, and the request's prefix
stays byte for byte the same (what providers' prompt caches key on).

Condensation goes, in order, as far as needed:

1. the tool results of older turns are replaced by a short note of what they were
   (``read_file src/a.py: 180 lines, 6,120 chars; elided to fit the context window``);
   the first messages (system prompt, task, feedback), every assistant message and the
   most recent ``keep_turns`` turns are kept;
2. the older turns (and any earlier summary) are replaced by one summary, written by the
   model through its own prompt template (``worker_condense.md``);
3. the tool results of the recent turns but the last are elided too;
4. the last turn's long results are cut in the middle.

Each condensation is one ``condense`` trace event holding exactly what changed, so that a
resumed round replays the same history (:func:`apply_condense`).

The estimate is cheap and dependency-free: about three characters per token, scaled by
what the provider reported for the last request when it reports prompt tokens. It is
hero.llm.usage's, the one hero has: the client counts an answer that carries no usage by it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hero.config.home import Config, context_limits
from hero.llm.client import LlmError, Model
from hero.llm.usage import (
    CHARS_PER_TOKEN,
    Usage,
    estimate_message,
    estimate_tools,
)

#: How far the provider's reported counts may scale the estimate (CJK text runs ~1 char
#: per token; an odd count from a gateway must not make the estimate meaningless).
RATIO_BOUNDS = (0.5, 4.0)
#: A condensation brings the estimate down to this share of the trigger.
LOW_WATER = 0.5
#: Older turns are summarized only when they hold at least this many tokens (or an
#: eighth of the trigger): a summary is a model call, never one per turn.
MIN_SUMMARIZED = 1000
#: Tool results shorter than this stay as they are: a note would save nothing.
MIN_ELIDE_CHARS = 600
#: What the note in a result cut in the middle takes, at most, in characters.
CUT_NOTE_CHARS = 100
#: The first words of every note and summary hero puts in place of history.
ELIDED = "[elided by hero to fit the context window]"
SUMMARY_HEAD = "[summary by hero of turns {first}-{last}, written to fit the context window]"


class ContextOverflow(LlmError):
    """The request cannot be brought under the window (the task alone is too large)."""


@dataclass(frozen=True)
class Window:
    """The worker's context window, in tokens, and when to condense."""

    window: int = 128_000
    reserve: int = 4096
    condense_at: float = 0.75
    keep_turns: int = 6

    @property
    def limit(self) -> int:
        """The largest request: the window less what the answer may take."""
        return self.window - self.reserve

    @property
    def trigger(self) -> int:
        return int(self.limit * self.condense_at)


#: No window: a history that is never condensed (a model handed to the loop without one).
UNLIMITED = Window(window=1 << 62, reserve=0)


def window_for(config: Config, role: str) -> Window:
    """The context window of ``role``'s model: its provider's ``context_window`` less its
    ``max_output_tokens``, condensed as the ``context_*`` settings say (their defaults for
    a model handed in directly, with no such role in the config)."""
    knobs = config.context
    if role in config.roles:
        window, reserve = context_limits(config, role)
    else:
        window, reserve = knobs.window_default, knobs.reserve_default
    return Window(window, reserve, knobs.condense_at, knobs.keep_turns)


@dataclass
class Condensation:
    """What one condensation did: the ``condense`` trace event's fields."""

    turn: int
    tokens_before: int
    tokens_after: int = 0
    elided: list[dict[str, str]] = field(default_factory=list)  # {id, note}
    summary: dict[str, Any] | None = None  # {at, count, first, last, content, tokens_*}
    cut: list[dict[str, str]] = field(default_factory=list)  # {id, content}
    usage: Usage = field(default_factory=Usage)  # what the summary's model call spent

    def to_event(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "elided": self.elided,
            "summary": self.summary,
            "cut": self.cut,
        }

    def describe(self) -> str:
        parts = []
        if self.elided:
            parts.append(f"{len(self.elided)} tool result(s) elided")
        if self.summary:
            parts.append(f"turns {self.summary['first']}-{self.summary['last']} summarized")
        if self.cut:
            parts.append(f"{len(self.cut)} result(s) cut")
        return (
            f"context condensed at turn {self.turn}: {', '.join(parts) or 'nothing to do'}; "
            f"~{self.tokens_before} -> ~{self.tokens_after} tokens"
        )


class Context:
    """The running size of one round's history, and its condensation.

    ``head`` is the number of first messages that are never touched (system prompt and
    task, which holds the reviewer's feedback)."""

    def __init__(
        self,
        window: Window,
        tools: Sequence[dict[str, Any]] | None,
        *,
        head: int = 2,
        render_summary_prompt: Callable[[str], str] | None = None,
    ) -> None:
        self.window = window
        self.head = head
        self._tools = estimate_tools(tools)
        self._sizes: list[int] = []  # estimate of each message, aligned with the history
        self._total = 0
        self._ratio = 1.0  # reported / estimated, from the last request the provider counted
        self._sent = 0  # raw estimate of the last request sent
        self._render = render_summary_prompt
        self.condensations = 0
        self.summaries = 0
        self.largest = 0  # the largest request sent, as estimated when it went

    # -- size ----------------------------------------------------------------------------

    def estimate(self, messages: Sequence[dict[str, Any]]) -> int:
        """The next request's size in tokens (history appended since the last look is
        measured now; nothing else is)."""
        sizes = self._sizes
        if len(sizes) > len(messages):  # the history was replaced behind our back
            self._resize(messages)
        for message in messages[len(sizes) :]:
            size = estimate_message(message)
            sizes.append(size)
            self._total += size
        return self._scaled(self._total + self._tools)

    def sent(self, messages: Sequence[dict[str, Any]]) -> None:
        """A request with ``messages`` is going out."""
        self._sent = self._total + self._tools
        self.largest = max(self.largest, self._scaled(self._sent))

    def reported(self, prompt_tokens: int, estimated: int | None = None) -> None:
        """The provider counted the last request (``estimated`` raw, else the one
        :meth:`sent` saw) at ``prompt_tokens``."""
        estimated = self._sent if estimated is None else estimated
        if prompt_tokens > 0 and estimated > 0:
            low, high = RATIO_BOUNDS
            self._ratio = min(high, max(low, prompt_tokens / estimated))

    @property
    def last_sent(self) -> int:
        """The raw estimate of the last request sent (for the trace: a resumed round
        scales its estimate as the live one did, see :meth:`reported`)."""
        return self._sent

    def _scaled(self, raw: int) -> int:
        return int(raw * self._ratio) + 1

    def _resize(self, messages: Sequence[dict[str, Any]]) -> None:
        self._sizes = [estimate_message(m) for m in messages]
        self._total = sum(self._sizes)

    # -- condensation ------------------------------------------------------------------

    def fit(
        self, messages: list[dict[str, Any]], model: Model | None, turn: int
    ) -> Condensation | None:
        """Make ``messages`` fit before the next request: condense in place when the
        estimate passes the trigger. Returns what was done, or None; raises
        ContextOverflow when even the first messages and the last turn do not fit."""
        size = self.estimate(messages)
        if size <= self.window.trigger:
            return None
        record = Condensation(turn=turn, tokens_before=size)
        target = int(self.window.trigger * LOW_WATER)
        turns = _turns(messages, self.head)
        recent = turns[-self.window.keep_turns :] if self.window.keep_turns else []
        old = turns[: len(turns) - len(recent)]
        # 1. the older turns' tool results
        self._elide(messages, [i for t in old for i in t], record)
        # 2. the older turns, summarized
        if (
            self.estimate(messages) > target
            and old
            and model is not None
            and self._span(old[0][0], old[-1][-1]) >= max(MIN_SUMMARIZED, self.window.trigger // 8)
        ):
            self._summarize(messages, old, model, record, turn)
            turns = _turns(messages, self.head)
            recent = turns[-self.window.keep_turns :]
        # 3. the recent turns' results, oldest first, but the last turn's
        for t in recent[:-1]:
            if self.estimate(messages) <= target:
                break
            self._elide(messages, t, record)
        # 4. the last turn's results, cut
        if self.estimate(messages) > self.window.limit and turns:
            self._cut(messages, turns[-1], record)
        record.tokens_after = self.estimate(messages)
        if record.tokens_after > self.window.limit:
            raise ContextOverflow(
                f"the worker's request needs ~{record.tokens_after} tokens even condensed, more "
                f"than its context window ({self.window.window}) less the output reserve "
                f"({self.window.reserve}); give the provider a larger context_window, a "
                "smaller max_output_tokens, or the story a shorter text"
            )
        if not (record.elided or record.summary or record.cut):
            return None  # over the trigger, under the limit, nothing left to condense
        self.condensations += 1
        return record

    def _elide(
        self, messages: list[dict[str, Any]], indexes: Sequence[int], record: Condensation
    ) -> None:
        calls = None
        for i in indexes:
            message = messages[i]
            content = message.get("content")
            if message.get("role") != "tool" or not isinstance(content, str):
                continue
            if len(content) < MIN_ELIDE_CHARS or content.startswith(ELIDED):
                continue
            if calls is None:
                calls = _calls_by_id(messages)
            call_id = str(message.get("tool_call_id", ""))
            note = elision_note(calls.get(call_id), content)
            replace_content(messages, i, note)
            record.elided.append({"id": call_id, "note": note})
        self._resize(messages)

    def _cut(
        self, messages: list[dict[str, Any]], indexes: Sequence[int], record: Condensation
    ) -> None:
        results = [i for i in indexes if messages[i].get("role") == "tool"]
        if not results:
            return
        original = {i: str(messages[i].get("content") or "") for i in results}
        over = self.estimate(messages) - self.window.limit
        # what the results may keep in all, shared evenly, in characters, less the note
        # each cut result gains; cut again, shorter, if that was not enough
        room = sum(len(c) for c in original.values())
        room -= int((over + 64) * CHARS_PER_TOKEN / self._ratio) + CUT_NOTE_CHARS * len(results)
        each = max(200, room // len(results))
        while True:
            cut: dict[int, str] = {}
            for i, content in original.items():
                if len(content) > each:
                    keep = each // 2
                    cut[i] = (
                        f"{content[:keep]}\n[... {len(content) - 2 * keep} characters cut by "
                        f"hero to fit the context window ...]\n{content[-keep:]}"
                    )
                replace_content(messages, i, cut.get(i, content))
            self._resize(messages)
            if self.estimate(messages) <= self.window.limit or each <= 200:
                break
            each = max(200, each * 2 // 3)
        for i, new in cut.items():
            record.cut.append({"id": str(messages[i].get("tool_call_id", "")), "content": new})

    def _summarize(
        self,
        messages: list[dict[str, Any]],
        old: list[list[int]],
        model: Model,
        record: Condensation,
        turn: int,
    ) -> None:
        at = self.head
        count = old[-1][-1] + 1 - at  # the old turns and anything between head and them
        # every turn since the last summary is in the history, one assistant message each
        first, last = 1, turn - len(_turns(messages, self.head)) + len(old)
        history = render_history(messages[at : at + count], budget_chars=self._history_budget())
        prompt = self._render(history) if self._render else _default_prompt(history)
        completion = model.complete([{"role": "user", "content": prompt}], None)
        text = completion.content.strip()
        record.usage = completion.usage
        if not text:  # an empty answer: a plain digest of what was done keeps the essentials
            text = digest(messages[at : at + count])
        most = self.window.trigger * CHARS_PER_TOKEN // 4  # a summary is no new history
        if len(text) > most:
            text = text[:most] + f"\n[... {len(text) - most} characters of summary cut by hero]"
        content = SUMMARY_HEAD.format(first=first, last=last) + "\n\n" + text
        apply_summary(messages, at, count, content)
        self.summaries += 1
        record.summary = {
            "at": at,
            "count": count,
            "first": first,
            "last": last,
            "content": content,
            "tokens_in": completion.tokens_in,
            "tokens_out": completion.tokens_out,
        }
        if completion.tokens_estimated:  # the answer carried no count (hero.llm.client)
            record.summary["tokens_estimated"] = completion.tokens_estimated
        self._resize(messages)

    def _span(self, first: int, last: int) -> int:
        """The estimated size of messages ``first..last`` (as sent: scaled)."""
        return self._scaled(sum(self._sizes[first : last + 1]))

    def _history_budget(self) -> int:
        """Characters of history the summary request may hold: half the limit."""
        return int(self.window.limit * CHARS_PER_TOKEN / 2 / max(self._ratio, 1.0))


# -- the pieces, shared with replay -------------------------------------------------------


def replace_content(messages: list[dict[str, Any]], i: int, content: str) -> None:
    """A message with new content and everything else as it was (its keys in order)."""
    messages[i] = {**messages[i], "content": content}


def apply_summary(messages: list[dict[str, Any]], at: int, count: int, content: str) -> None:
    messages[at : at + count] = [{"role": "user", "content": content}]


def apply_condense(messages: list[dict[str, Any]], event: dict[str, Any]) -> None:
    """Replay a ``condense`` trace event on the history it was made from; ValueError for
    an event that does not fit it."""
    notes = {str(e["id"]): str(e["note"]) for e in event.get("elided") or ()}
    cuts = {str(e["id"]): str(e["content"]) for e in event.get("cut") or ()}
    for i, message in enumerate(messages):
        if message.get("role") != "tool":
            continue
        call_id = str(message.get("tool_call_id", ""))
        if call_id in notes:
            replace_content(messages, i, notes[call_id])
    summary = event.get("summary")
    if isinstance(summary, dict):
        at, count = summary["at"], summary["count"]
        if not (isinstance(at, int) and isinstance(count, int) and 0 < at < at + count):
            raise ValueError(f"a summary of messages {at!r}+{count!r}")
        if at + count > len(messages) or messages[min(at + count, len(messages) - 1)].get(
            "role"
        ) not in ("assistant", "user"):
            raise ValueError("a summary that does not end where a turn ends")
        apply_summary(messages, at, count, str(summary["content"]))
    for i, message in enumerate(messages):
        call_id = str(message.get("tool_call_id", ""))
        if message.get("role") == "tool" and call_id in cuts:
            replace_content(messages, i, cuts[call_id])


def _turns(messages: Sequence[dict[str, Any]], head: int) -> list[list[int]]:
    """The indexes of each turn after the first messages: an assistant message and what
    follows it up to the next one. Messages before the first assistant message (an
    earlier summary) belong to no turn."""
    turns: list[list[int]] = []
    for i in range(head, len(messages)):
        if messages[i].get("role") == "assistant":
            turns.append([i])
        elif turns:
            turns[-1].append(i)
    return turns


def _calls_by_id(messages: Sequence[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    calls: dict[str, tuple[str, str]] = {}
    for m in messages:
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {}
            calls[str(call.get("id"))] = (str(fn.get("name", "?")), str(fn.get("arguments", "")))
    return calls


#: The argument that says best what a call was about, per tool.
_MAIN_ARGUMENT = ("path", "command", "pattern", "query", "file")


def describe_call(call: tuple[str, str] | None) -> str:
    if call is None:
        return "a tool call"
    name, arguments = call
    try:
        args = json.loads(arguments)
    except (ValueError, RecursionError):
        args = None
    if isinstance(args, dict):
        for key in _MAIN_ARGUMENT:
            value = args.get(key)
            if isinstance(value, str) and value:
                value = " ".join(value.split())
                return f"{name} {value[:117] + '...' if len(value) > 120 else value}"
    return name


def elision_note(call: tuple[str, str] | None, content: str) -> str:
    """What a tool result was, in one line, for the model to decide whether to ask again."""
    lines = content.count("\n") + 1
    last = next((ln.strip() for ln in reversed(content.splitlines()) if ln.strip()), "")
    ending = f'; it ended: "{last[:117] + "..." if len(last) > 120 else last}"' if last else ""
    return (
        f"{ELIDED} {describe_call(call)}: {lines} lines, {len(content):,} chars{ending}. "
        "Run it again if you need it."
    )


def render_history(messages: Sequence[dict[str, Any]], *, budget_chars: int) -> str:
    """The turns to summarize as plain text, cut to ``budget_chars`` (long texts are
    shortened in the middle; the assistant's words are kept before the tools' output)."""
    calls = _calls_by_id(messages)
    parts: list[str] = []
    for m in messages:
        role = m.get("role")
        content = str(m.get("content") or "")
        if role == "assistant":
            text = f"ASSISTANT: {content}".rstrip()
            for call in m.get("tool_calls") or ():
                fn = call.get("function") or {}
                text += f"\n  CALLED {fn.get('name', '?')} {fn.get('arguments', '')}"
            parts.append(text)
        elif role == "tool":
            name = describe_call(calls.get(str(m.get("tool_call_id"))))
            parts.append(f"RESULT of {name}:\n{content}")
        else:
            parts.append(f"{str(role).upper()}: {content}")
    each = max(400, budget_chars // max(1, len(parts)))
    out = [p if len(p) <= each else p[: each // 2] + "\n[...]\n" + p[-each // 2 :] for p in parts]
    text = "\n\n".join(out)
    return text if len(text) <= budget_chars else text[-budget_chars:]


def digest(messages: Sequence[dict[str, Any]]) -> str:
    """A summary without a model: the calls made, in order."""
    lines = []
    for m in messages:
        if m.get("role") == "assistant":
            for call in m.get("tool_calls") or ():
                fn = call.get("function") or {}
                lines.append(
                    "- " + describe_call((str(fn.get("name", "?")), str(fn.get("arguments", ""))))
                )
        elif str(m.get("content") or "").startswith("[summary by hero"):
            lines.append(str(m.get("content")))
    return "The model wrote no summary; the calls made were:\n" + "\n".join(lines[-200:])


def _default_prompt(history: str) -> str:
    return (
        "Summarize this part of a coding session for the agent that continues it: files "
        "changed, commands run, what passed and what failed, and the open to-dos.\n\n" + history
    )
