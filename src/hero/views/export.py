"""``hero export``: each round's worker conversation as OpenAI chat-format JSONL.

One line per round of each story chosen: ``{"messages": [...], "tools": [...],
"metadata": {...}}``. ``messages`` and ``tools`` are exactly what a chat request (or an
OpenAI fine-tuning file) takes: each message has only its role's keys (see
``hero.llm.scripted.chat_problem``, the check every line passes before it is written);
what hero knows beside them goes in ``metadata``, never inside a message.

The conversation is rebuilt from the round's trace by ``hero.agent.replay.conversation``,
the walk a resumed round uses. ``history="full"`` (the default) gives every message as
it first entered the history, none condensed: the whole round, for training. ``"seen"``
gives the history as the model last saw it, condensations applied: a tool result hero
elided or cut keeps its text marker (``[elided by hero ...``) and a summary its own
(``[summary by hero ...``), and ``metadata.condensed`` lists their indexes.

A round cut mid-way (hero stopped while a tool call ran, or before it ran) ends with
calls that have no result: each is closed with a tool message saying the result was lost
(the words hero itself tells the model when it resumes such a round), listed in
``metadata.closed_calls``, so the line stays a valid request.

Secrets: traces are redacted when written; the whole line is redacted again with the
current configuration's secrets, so a key added to the configuration after a trace was
written does not leave in an export. A configuration that cannot be loaded stops the
export (it could not be cleaned).

Traces are hero's files, but what is in them came from the worker: a line that is not
JSON is skipped (and counted), a round whose events make no conversation is left out with
a note, a trace over :data:`MAX_TRACE_BYTES` is not read, and a run directory or trace
reached through a symlink is not followed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hero.agent.replay import LOST_NOT_RUN, LOST_RUNNING, Unreplayable, call_usage, conversation
from hero.agent.tools.schemas import tool_schemas
from hero.agent.window import ELIDED
from hero.errors import UsageError
from hero.llm.scripted import chat_problem
from hero.llm.usage import Usage
from hero.names import StoryRef
from hero.redact import Redactor
from hero.state import Round, RunState, StateError, load_state
from hero.trace import Event
from hero.views.logs import story_ref
from hero.yamlio import ValueProblem, read_file

#: A round's trace larger than this is not read (its round is left out, with a note).
MAX_TRACE_BYTES = 64 * 1024 * 1024
#: ``--history``: every message as it entered (``full``), or as the model last saw it.
HISTORIES = ("full", "seen")
#: What a summary of turns hero wrote in place of them starts with (``agent.window``).
SUMMARY_MARK = "[summary by hero"


class ExportError(UsageError):
    """The stories asked for cannot be exported (exit 2): unknown, or not started."""


@dataclass
class Export:
    """What an export wrote: its lines, and a note for each round left out."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def jsonl(self) -> bytes:
        return b"".join(
            json.dumps(line, ensure_ascii=False).encode("utf-8") + b"\n" for line in self.lines
        )


# ----------------------------------------------------------------------------- stories


def chosen_states(
    home: Path,
    keys: Sequence[str],
    statuses: Iterable[str] = (),
    *,
    notes: list[str] | None = None,
) -> list[RunState]:
    """The run records of the stories ``keys`` names (all of them when empty), in that
    order, those in ``statuses`` only when it is given. An unknown key, or an unreadable
    record of a story named, is an error (exit 2); of all stories, an unreadable record
    is left out with a line in ``notes``."""
    wanted = set(statuses)
    refs = [_known_ref(home, key) for key in dict.fromkeys(keys)] if keys else all_refs(home)
    states = []
    for ref in refs:
        try:
            state = load_state(home, ref)
        except StateError as exc:
            if keys or notes is None:
                raise
            notes.append(f"{ref.key} left out: {exc}")
            continue
        if state is None:
            if keys:
                raise ExportError(f"story '{ref.key}' has no run record in {home}")
            continue
        if not wanted or str(state.status) in wanted:
            states.append(state)
    return states


def all_refs(home: Path) -> list[StoryRef]:
    """Every story with a run record in ``runs/state`` (loose ones, then each plan's)."""
    states = Path(home) / "runs" / "state"
    found = [StoryRef("", p.stem) for p in sorted(states.glob("*.json"))]
    for folder in sorted(states.glob("plans/*")):
        found += [StoryRef(folder.name, p.stem) for p in sorted(folder.glob("*.json"))]
    return [ref for ref in found if ref.valid()]


def _known_ref(home: Path, key: str) -> StoryRef:
    ref = story_ref(key)
    if ref is None:
        raise ExportError(
            f"no story '{key}' in {home}: expected a story id, or <plan>/<id> for a story of a plan"
        )
    if not ref.state_path(home).exists():
        raise ExportError(f"no story '{key}' in {home}: runs/state/{ref.rel}.json does not exist")
    return ref


# ----------------------------------------------------------------------------- traces


def trace_files(home: Path, ref: StoryRef) -> list[tuple[int, Path]]:
    """``(n, path)`` of the entries named ``round-N.jsonl`` in the story's run directory,
    in round order, whatever they are (:func:`read_events` reads regular files only)."""
    found = []
    try:
        entries = list(os.scandir(ref.run_dir(home)))
    except OSError:
        return []
    for entry in entries:
        name = entry.name
        if name.startswith("round-") and name.endswith(".jsonl") and name[6:-6].isdigit():
            found.append((int(name[6:-6]), Path(entry.path)))
    return sorted(found)


def linked(home: Path, path: Path) -> bool:
    """Whether ``path`` is reached through a symlink below ``runs/`` (never followed: a run
    directory or trace swapped for a link could lead anywhere)."""
    return not _no_link_below(Path(home) / "runs", path)


def _no_link_below(root: Path, path: Path) -> bool:
    """Whether no part of ``path`` below ``root`` is a symlink (``root`` itself is the
    user's and may be one)."""
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            return False
    return True


@dataclass(frozen=True)
class TraceRead:
    events: list[dict[str, Any]]
    unreadable: int  # lines that were not a JSON object (a torn last line among them)


def read_events(path: Path) -> TraceRead:
    """The events of one trace, read with a size limit; ValueProblem or OSError when it
    cannot be read at all."""
    raw = read_file(path, limit=MAX_TRACE_BYTES, what="trace")
    events: list[dict[str, Any]] = []
    unreadable = 0
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            unreadable += 1
            continue
        if isinstance(event, dict):
            events.append(event)
        else:
            unreadable += 1
    return TraceRead(events, unreadable)


# ----------------------------------------------------------------------------- the export


def _external_tools(read: TraceRead) -> list[dict[str, Any]]:
    """The MCP servers' tools the round's model was given (the trace's ``mcp`` events)."""
    found: dict[str, dict[str, Any]] = {}
    for event in read.events:
        if event.get("event") != Event.MCP or not isinstance(event.get("tools"), list):
            continue
        if event.get("by"):  # another role's (the reviewer's): not the worker's tools
            continue
        for tool in event["tools"]:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                found.setdefault(fn["name"], tool)
    return list(found.values())


def export(
    home: Path,
    states: Sequence[RunState],
    *,
    redactor: Redactor,
    history: str = "full",
    model: str = "",
) -> Export:
    """The lines of every round of ``states``, redacted with ``redactor``."""
    if history not in HISTORIES:
        raise ExportError(f"history: expected one of {', '.join(HISTORIES)}; found {history!r}")
    out = Export()
    tools = tool_schemas()
    for state in states:
        records = {r.round: r for r in state.rounds}
        if linked(home, state.ref.run_dir(home)):
            out.notes.append(f"{state.ref.key} left out: its run directory is a symlink")
            continue
        for n, path in trace_files(home, state.ref):
            where = f"{state.ref.key} round {n}"
            if linked(home, path):
                out.notes.append(f"{where} left out: its trace is a symlink")
                continue
            try:
                read = read_events(path)
                line = round_line(state, n, read, records.get(n), history=history, model=model)
            except (OSError, ValueProblem, Unreplayable) as exc:
                out.notes.append(f"{where} left out: {_why(exc)}")
                continue
            if line is None:
                out.notes.append(f"{where} left out: its trace holds no conversation")
                continue
            line["tools"] = tools + _external_tools(read)
            if redactor:
                line = redactor.redact_value(line)
            problem = chat_problem(line)
            if problem is not None:  # never a line a chat endpoint would refuse
                out.notes.append(f"{where} left out: {problem}")
                continue
            out.lines.append(line)
    return out


def _why(exc: Exception) -> str:
    if isinstance(exc, ValueProblem):
        return exc.message
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def round_line(
    state: RunState,
    n: int,
    read: TraceRead,
    record: Round | None,
    *,
    history: str,
    model: str,
) -> dict[str, Any] | None:
    """Round ``n``'s line (without its tools), or None when its trace holds no message.
    Raises Unreplayable for events that make no conversation."""
    name = f"round-{n}.jsonl"
    walked = conversation(read.events, name, condensed=history == "seen")
    if not walked.messages:
        return None
    messages: list[dict[str, Any]] = []
    reasoning: dict[str, str] = {}
    for i, m in enumerate(walked.messages):
        m = dict(m)
        # reasoning_content is no chat key: it goes beside the message, in the metadata
        thought = m.pop("reasoning_content", None)
        if isinstance(thought, str) and thought:
            reasoning[str(i)] = thought
        messages.append(m)
    for lost in walked.lost:  # a round cut mid-way: each dangling call closed
        content = LOST_RUNNING if lost.started else LOST_NOT_RUN
        messages.append({"role": "tool", "tool_call_id": lost.id, "content": content})
    attempt = _last_attempt(read.events)
    condenses = [e for e in attempt if e.get("event") == Event.CONDENSE]
    usage = Usage()
    usage.add(walked.usage)
    if history == "full":  # the summaries' own model calls are only in the condense events
        for e in condenses:
            summary = e.get("summary")
            if isinstance(summary, dict):
                usage.add(call_usage(summary))
    ended = walked.ended or {}
    metadata: dict[str, Any] = {
        "story": state.ref.key,
        "id": state.id,
        "plan": state.plan or None,
        "title": state.title,
        "round": n,
        "status": str(state.status),
        "branch": state.branch,
        "history": history,
        # the worker's model as the run recorded it (hero.llm.models), else the config's today
        "model": (state.models.get("worker") or {}).get("model") or model or None,
        "models": state.models or None,
        "verify": _verify(record),
        "verdict": record.review.verdict or None if record else None,
        "verdict_summary": record.review.summary if record else "",
        "turns": walked.turns,
        "tool_calls": walked.tool_calls,
        "stop_reason": ended.get("stop_reason") or (record.worker.stop_reason if record else None),
        "complete": walked.ended is not None,
        "parts": walked.parts,
        "wall_s": round(walked.wall_s, 3),
        "usage": usage.to_dict(),
        "condensed": _condensed(read.events, messages, walked.head, condenses, history),
        "closed_calls": [
            {"id": c.id, "name": c.name, "was_running": c.started} for c in walked.lost
        ],
        "reasoning": reasoning,
        "unreadable_lines": read.unreadable,
    }
    return {"messages": messages, "metadata": metadata}


def _last_attempt(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i in range(len(events) - 1, -1, -1):
        e = events[i]
        if e.get("event") == Event.ROUND_START and not e.get("resumed"):
            return events[i:]
    return events


def _verify(record: Round | None) -> dict[str, Any] | None:
    """The round's checks, in short: passed, and the commands that failed."""
    if record is None or not isinstance(record.verify, dict) or not record.verify:
        return None
    commands = [c for c in record.verify.get("commands") or () if isinstance(c, dict)]
    return {
        "passed": record.verify.get("passed") is True,
        "checks": len(commands),
        "failed": [str(c.get("command", "")) for c in commands if c.get("exit_code") != 0],
    }


def _condensed(
    events: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    head: int,
    condenses: list[dict[str, Any]],
    history: str,
) -> dict[str, Any] | None:
    """None when the round's history was never condensed; else how often, and (in the
    ``seen`` history) which messages of the line hero elided, cut or summarized."""
    if not condenses:
        return None
    elided: list[int] = []
    summaries: list[int] = []
    if history == "seen":
        original = {
            str(e.get("id")): e.get("content")
            for e in _last_attempt(events)
            if e.get("event") == Event.TOOL_RESULT
        }
        for i, m in enumerate(messages):
            content = str(m.get("content") or "")
            if m["role"] == "tool" and (
                content != original.get(str(m.get("tool_call_id")), content)
                or content.startswith(ELIDED)
            ):
                elided.append(i)
            elif m["role"] == "user" and i >= head and content.startswith(SUMMARY_MARK):
                summaries.append(i)
    return {"times": len(condenses), "elided": elided, "summaries": summaries}
