"""``hero logs``: a readable view of a story's traces, and ``-f`` to follow them live.

A story is named by its key: ``<id>``, or ``<plan>/<id>`` for a story of a plan (see
:mod:`hero.names`). Anything else is refused before a path is made of it, so no key reaches
outside ``runs/``.

The traces are ``runs/<id>/round-N.jsonl``, or ``runs/plans/<plan>/<id>/round-N.jsonl``
(see :mod:`hero.trace`). Each round gets a
header, then one line per event with its time offset in the round: the prompts' first
lines, the assistant's reasoning and text, each tool call as ``name(args)``, each tool
result's first lines (``[ERROR]`` when the tool failed, ``[LOST]`` or ``[NOT RUN]`` when hero
stopped), a note under a model answer whose tokens hero estimated (it carried no counts), each
condensation of the worker's history, the checks, the reviewer's answer and
the verdict. A round resumed after hero was restarted says so. Long texts are cut with a
note saying how much was left out; ``tool_start`` events are not shown (each is followed
by its call's result). An event kind this module
does not know is shown generically; a line that is not JSON is noted and skipped; a torn
last line (a crash mid-write, or a line still being written) is skipped.

:func:`follow` of a story that is queued (in the inbox, loose or a plan's) but has not
started yet says so once and waits for it to start; a story neither started nor queued is
an error, as for :func:`show`. Then it prints what exists, and polls for new lines and new
round files until the story's state is terminal (``passed``, ``gave_up``, ``error``,
``skipped``) and everything is printed. ``hero logs -f`` exits 0 then, and 130 (quietly)
on Ctrl-C, like ``hero run``.
"""

from __future__ import annotations

import json
import re
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from hero.errors import UsageError
from hero.names import StoryRef
from hero.state import TERMINAL, StateError, Status, load_state
from hero.trace import Event
from hero.views.text import WIDTH as WIDTH  # a rendered line is cut to this many characters
from hero.views.text import cut

PROMPT_LINES = 3  # system/user prompts and the reviewer's request
TEXT_LINES = 8  # assistant text, the reviewer's answer, a verdict's summary
RESULT_LINES = 4  # a tool result
TAIL_LINES = 3  # end of a failed check's output (the full output is in verify-rN.log)
LIST_ITEMS = 6  # verdict comments and unmet criteria
LABEL_WIDTH = 9
_PREFIX = 9 + 1 + LABEL_WIDTH + 1  # offset, space, label, space

_ROUND_FILE = re.compile(r"^round-(\d+)\.jsonl$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_RECORD_START = '{"t": '
#: Seconds between two looks at the inbox while ``follow`` waits for a queued story to start.
QUEUE_LOOK_S = 2.0


class LogsError(UsageError):
    """The story or round asked for does not exist (exit 2)."""


# ----------------------------------------------------------------------------- entry points


def show(home: Path, story_id: str, out: TextIO, *, round_no: int | None = None) -> None:
    """Write the story's traces (or only round ``round_no``) to ``out`` once."""
    home = Path(home)
    if not _started(home, _checked_ref(home, story_id)) and _queued(home, story_id):
        raise LogsError(
            f"story '{story_id}' is queued and has not started yet: "
            f"`hero logs {story_id} -f` waits for it"
        )
    _check_known(home, story_id)
    rounds = [n for n, _ in round_files(home, story_id)]
    if round_no is not None and round_no not in rounds:
        raise LogsError(_no_round(story_id, round_no, rounds))
    view = _View(home, story_id, out, round_no)
    view.story_header()
    view.drain()
    if not rounds:
        out.write("(no rounds yet)\n")
    out.flush()


def follow(
    home: Path,
    story_id: str,
    out: TextIO,
    *,
    poll_s: float = 0.2,
    stop: threading.Event | None = None,
    round_no: int | None = None,
) -> str | None:
    """Write the story's traces to ``out`` and keep writing new events as they come.

    Returns the story's final status once it is terminal and every event is written (with
    ``round_no``: once that round is over), or None when ``stop`` is set first.
    """
    home = Path(home)
    if not _wait_for_start(home, story_id, out, poll_s=poll_s, stop=stop):
        return None
    first = _status(home, story_id)
    if first in TERMINAL:  # nothing more will come: the same as show(), errors included
        show(home, story_id, out, round_no=round_no)
        out.write(f"--- {story_id}: {first}\n")
        out.flush()
        return first
    view = _View(home, story_id, out, round_no)
    view.story_header()
    noted: str | None = None
    while True:
        # The state is read before the traces: a round's trace is closed before its state
        # becomes terminal, so a terminal status seen here means the drain gets all of it.
        status = _status(home, story_id)
        rounds = view.drain()
        round_over = round_no is not None and any(n > round_no for n in rounds)
        if status in TERMINAL or round_over:
            if round_no is not None and round_no not in rounds:
                out.write(f"(story {story_id} has no round {round_no})\n")
            out.write(f"--- {story_id}: {status}\n")
            out.flush()
            return status
        if status != noted:
            noted = status
            if status == Status.INTERRUPTED:
                out.write("--- interrupted; waiting for a run to resume it (Ctrl-C to stop)\n")
        out.flush()
        if stop is not None:
            if stop.wait(poll_s):
                return None
        else:
            time.sleep(poll_s)


def round_files(home: Path, story_id: str) -> list[tuple[int, Path]]:
    """``(n, path)`` of the story's ``round-N.jsonl`` files, in round order (``story_id``: a
    key :func:`story_ref` accepted)."""
    directory = StoryRef.of(story_id).run_dir(home)
    found = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    for path in entries:
        m = _ROUND_FILE.match(path.name)
        if m and path.is_file():
            found.append((int(m.group(1)), path))
    return sorted(found)


def story_ref(key: str) -> StoryRef | None:
    """The story ``key`` names (``<id>`` or ``<plan>/<id>``, written just so), or None."""
    ref = StoryRef.of(key)
    return ref if ref.valid() and ref.key == key else None


def _wait_for_start(
    home: Path, story_id: str, out: TextIO, *, poll_s: float, stop: threading.Event | None
) -> bool:
    """Return once the story has started (True), at once if it has; for a queued story
    that has not, say so once and wait for it; False when ``stop`` is set first. A story
    neither started nor queued (unknown, or gone from the queue unrun) is a LogsError."""
    ref = _checked_ref(home, story_id)
    if _started(home, ref):
        return True
    if not _queued(home, story_id):
        _check_known(home, story_id)  # raises: nothing is known of it
    out.write(f"--- {story_id}: queued, not started yet; waiting for it (Ctrl-C to stop)\n")
    out.flush()
    # Whether it is still queued means reading the inbox: looked at every few polls only.
    next_look = time.monotonic() + QUEUE_LOOK_S
    while not _started(home, ref):
        if stop is not None:
            if stop.wait(poll_s):
                return False
        else:
            time.sleep(poll_s)
        if time.monotonic() >= next_look:
            # started between the two looks: the state file is written before the story
            # leaves the inbox, so a story gone from the queue unstarted is gone for good
            if not _queued(home, story_id) and not _started(home, ref):
                raise LogsError(f"story '{story_id}' left the queue without starting")
            next_look = time.monotonic() + QUEUE_LOOK_S
    return True


def _started(home: Path, ref: StoryRef) -> bool:
    """Whether the story has a run record or traces: it has started at least once."""
    return ref.state_path(home).exists() or ref.run_dir(home).is_dir()


def _queued(home: Path, story_id: str) -> bool:
    from hero.views.status import queued_keys  # reads the inbox: only for a story not started

    return story_id in queued_keys(home)


def _checked_ref(home: Path, story_id: str) -> StoryRef:
    """The story ``story_id`` names; a LogsError when it is no story key at all."""
    ref = story_ref(story_id)
    if ref is None:
        raise LogsError(
            f"no story '{story_id}' in {home}: expected a story id, or <plan>/<id> for a "
            "story of a plan (an id: letters, digits, '.', '_' or '-'; a plan: no dots)"
        )
    return ref


def _check_known(home: Path, story_id: str) -> None:
    ref = _checked_ref(home, story_id)
    if not _started(home, ref):
        raise LogsError(
            f"no story '{story_id}' in {home}: "
            f"neither runs/state/{ref.rel}.json nor runs/{ref.rel}/ exists"
        )


def _no_round(story_id: str, round_no: int, rounds: list[int]) -> str:
    have = ", ".join(map(str, rounds)) if rounds else "none yet"
    return f"story '{story_id}' has no round {round_no} (rounds: {have})"


def _status(home: Path, story_id: str) -> str | None:
    try:
        state = load_state(home, story_id)
    except StateError:
        return "unreadable"
    return None if state is None else str(state.status)


# ----------------------------------------------------------------------------- reading


class _File:
    """One round file read incrementally: only whole lines are handed out."""

    def __init__(self, n: int, path: Path) -> None:
        self.n = n
        self.path = path
        self.offset = 0
        self.pending = b""
        self.started = False

    def new_lines(self) -> Iterator[str]:
        try:
            with open(self.path, "rb") as fh:
                size = fh.seek(0, 2)
                if size < self.offset:  # rewritten from scratch: read it again
                    self.offset, self.pending = 0, b""
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        self.offset += len(data)
        chunks = (self.pending + data).split(b"\n")
        self.pending = chunks.pop()  # b"" after a newline, else a line not finished yet
        for chunk in chunks:
            if chunk.strip():
                yield chunk.decode("utf-8", errors="replace")


class _View:
    def __init__(self, home: Path, story_id: str, out: TextIO, round_no: int | None) -> None:
        self.home = home
        self.story_id = story_id
        self.out = out
        self.round_no = round_no
        self.files: dict[int, _File] = {}

    def story_header(self) -> None:
        try:
            state = load_state(self.home, self.story_id)
        except StateError as exc:
            self.out.write(f"story {self.story_id}: {exc}\n")
            return
        if state is None:
            self.out.write(f"story {self.story_id}: no state file\n")
            return
        title = f' "{state.title}"' if state.title else ""
        parts = [str(state.status)]
        if state.phase:
            parts.append(f"phase {state.phase}")
        if state.current_round:
            parts.append(f"round {state.current_round}, {len(state.rounds)} finished")
        if state.branch:
            parts.append(f"branch {state.branch}")
        line = f"story {self.story_id}{title}: " + "; ".join(parts)
        self.out.write(cut(_clean(line), WIDTH) + "\n")
        if state.error:
            self.out.write(cut(_clean(f"error: {state.error}"), WIDTH) + "\n")

    def drain(self) -> list[int]:
        """Write every whole line not written yet; returns the rounds listed on disk."""
        listed = round_files(self.home, self.story_id)
        for n, path in listed:
            if self.round_no is not None and n != self.round_no:
                continue
            f = self.files.get(n)
            if f is None:
                f = self.files[n] = _File(n, path)
            for line in f.new_lines():
                if not f.started:
                    self._round_header(f)
                for text in format_line(line):
                    self.out.write(text + "\n")
        return [n for n, _ in listed]

    def _round_header(self, f: _File) -> None:
        f.started = True
        if any(g.started for g in self.files.values() if g is not f):
            self.out.write("\n")
        rel = f.path.relative_to(self.home) if f.path.is_relative_to(self.home) else f.path
        self.out.write(f"=== round {f.n} === {rel}\n")


# ----------------------------------------------------------------------------- formatting


def format_line(line: str) -> list[str]:
    """The display lines for one trace line (a JSON object, or something unreadable)."""
    try:
        event = json.loads(line)
    except ValueError:
        # A torn line (crash mid-write) followed, on the same line, by the record a resumed
        # run appended: skip the torn part, keep the record.
        start = line.rfind(_RECORD_START)
        if start > 0:
            return [*_note(f"torn trace line skipped ({start} chars)"), *format_line(line[start:])]
        return _note(f"unreadable trace line skipped ({len(line)} chars)")
    if not isinstance(event, dict):
        return _lines(None, "?", _one_line(event))
    return format_event(event)


def format_event(event: dict[str, Any]) -> list[str]:
    """The display lines for one trace event; never raises on odd or unknown content."""
    kind = str(event.get("event", "?"))
    try:
        formatter = _FORMATTERS.get(kind, _generic)
        return formatter(event)
    except Exception:  # noqa: BLE001 - a field of an unexpected type: show it raw
        return _generic(event)


def _round_start(e: dict[str, Any]) -> list[str]:
    parts = [f"round {e.get('round', '?')}"]
    if e.get("resumed") and _count(e.get("part")):
        parts.append(f"part {e['part']}")
    if e.get("run") is not None:
        parts.append(f"run {e['run']}")
    if e.get("branch"):
        parts.append(f"on {e['branch']}")
    if isinstance(e.get("ts"), int | float):
        parts.append("at " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["ts"])))
    # resumed: the round goes on after hero was restarted (see hero.agent.replay)
    return _lines(e, "resumed" if e.get("resumed") else "start", " ".join(parts))


def _resume_failed(e: dict[str, Any]) -> list[str]:
    reason = _text(e.get("reason")).strip() or "no reason given"
    text = f"the trace could not be replayed ({reason}): the round starts over"
    return _lines(e, "resume", *_block(text, PROMPT_LINES, wrap=True))


def _message(e: dict[str, Any]) -> list[str]:
    role = str(e.get("role") or "message")
    limit = TEXT_LINES if role == "assistant" else PROMPT_LINES
    label = "restart" if e.get("restart") else role  # the note telling the model hero restarted
    return _lines(e, label, *_block(_text(e.get("content")), limit, wrap=True))


def _assistant(e: dict[str, Any]) -> list[str]:
    out: list[str] = []
    reasoning = _text(e.get("reasoning"))
    if reasoning.strip():
        out += _lines(e, "reasoning", *_block(reasoning, PROMPT_LINES, wrap=True))
    said = False
    text = _text(e.get("content"))
    if text.strip():
        said = True
        out += _lines(None if out else e, "assistant", *_block(text, TEXT_LINES, wrap=True))
    calls = e.get("tool_calls") or []
    for call in calls:
        said = True
        if isinstance(call, dict):
            shown = f"{call.get('name', '?')}({_args(call.get('arguments'))})"
        else:
            shown = _one_line(call)
        out += _lines(None if out else e, "call", shown)
    cut_off = e.get("finish_reason") == "length"
    if not said and not cut_off:
        out += _lines(None if out else e, "assistant", "(empty answer)")
    if cut_off:  # hero tells the model so and goes on: this was no final answer
        note = "(reply cut off by the model's output limit: finish_reason length)"
        out += _lines(None if out else e, "assistant" if not said else "", note)
    cached = e.get("tokens_cached")
    if _count(cached):
        of = f" of {e['tokens_in']:,}" if _count(e.get("tokens_in")) else ""
        out += _lines(None, "", f"({cached:,}{of} input tokens read from the prompt cache)")
    return out + _estimated(e)


def _estimated(e: dict[str, Any]) -> list[str]:
    """A model call's note that its tokens are hero's estimate (the endpoint sent no counts)."""
    estimated = _count(e.get("tokens_estimated"))
    if not estimated:
        return []
    return _lines(None, "", f"(no token counts in the answer: ~{estimated:,} tokens, estimated)")


#: A result lost when hero stopped (``tool_result``'s ``lost``), said short: the message
#: the model got in its place is in the trace, and long.
_LOST = {
    "running": "hero stopped while it ran: result unknown, not run again",
    "not_run": "not run: hero stopped before it started",
}


def _tool_start(e: dict[str, Any]) -> list[str]:
    # one per tool call, right before its tool_result: shown, it would double every tool
    # line (a call that never got a result is shown by the resumed round's lost result)
    return []


def _tool_result(e: dict[str, Any]) -> list[str]:
    mark = "[ERROR] " if e.get("is_error") else ""
    took = e.get("duration_s")
    took = f" ({_seconds(took)})" if isinstance(took, int | float) and took >= 1 else ""
    lost = e.get("lost")
    if lost:
        mark = "[NOT RUN] " if lost == "not_run" else "[LOST] "
        lines = [_LOST.get(str(lost)) or _one_line(lost)]
    else:
        lines = _block(_text(e.get("content")), RESULT_LINES) or ["(no output)"]
    lines[0] = f"{mark}{e.get('name', '?')}{took}: {lines[0]}"
    return _lines(e, "result", *lines)


def _agent_end(e: dict[str, Any]) -> list[str]:
    line = (
        f"{e.get('stop_reason', '?')}: {e.get('turns', '?')} turns, "
        f"{e.get('tool_calls', '?')} tool calls"
    )
    condensations, parts = _count(e.get("condensations")), _count(e.get("parts"))
    if condensations:
        line += f", {_plural(condensations, 'condensation')}"
    if parts > 1:  # the round went on after hero was restarted
        line += f", {parts} parts"
    if e.get("wall_s") is not None:
        line += f", {_seconds(e['wall_s'])}"
    return _lines(e, "worker", line, *_block(_text(e.get("detail")), PROMPT_LINES, wrap=True))


def _condense(e: dict[str, Any]) -> list[str]:
    """One condensation of the worker's history (see hero.agent.window)."""
    summary = e.get("summary") if isinstance(e.get("summary"), dict) else None
    done = []
    elided = len(e["elided"]) if isinstance(e.get("elided"), list) else 0
    if elided:
        done.append(f"{_plural(elided, 'result')} elided")
    if summary is not None:
        first, last = _one_line(summary.get("first", "?")), _one_line(summary.get("last", "?"))
        turns = f"turn {first}" if first == last else f"turns {first}-{last}"
        done.append(f"{turns} summarized")
    cut_results = len(e["cut"]) if isinstance(e.get("cut"), list) else 0
    if cut_results:
        done.append(f"{_plural(cut_results, 'result')} cut")
    lines = [f"at turn {_one_line(e.get('turn', '?'))}: {', '.join(done) or 'nothing changed'}"]
    before, after = e.get("tokens_before"), e.get("tokens_after")
    if _count(before) or _count(after):
        tokens = f"~{_count(before):,} -> ~{_count(after):,} tokens"
        if len(lines[0]) + 2 + len(tokens) <= WIDTH - _PREFIX:
            lines[0] += f"; {tokens}"
        else:  # on a line of its own rather than cut or wrapped in its middle
            lines.append(tokens)
    if summary is not None:
        content = _text(summary.get("content"))
        # the summary's first line repeats what the line above says
        head, _, rest = content.partition("\n")
        if head.startswith("[summary by hero"):
            content = rest
        lines += _block(content, PROMPT_LINES, wrap=True)
    return _lines(e, "condensed", *lines)


def _verify(e: dict[str, Any]) -> list[str]:
    commands = [c for c in e.get("commands") or [] if isinstance(c, dict)]
    head = "PASSED" if e.get("passed") else "FAILED"
    if not commands:
        head += " (no checks configured)"
    lines = [head]
    for c in commands:
        ok = c.get("exit_code") == 0
        extra = ", timed out" if c.get("timed_out") else ""
        took = f", {_seconds(c['duration_s'])}" if c.get("duration_s") is not None else ""
        lines.append(
            f"[{'PASS' if ok else 'FAIL'}] {c.get('tier', '?')}: {_one_line(c.get('command', ''))}"
            f" (exit {c.get('exit_code', '?')}{took}{extra})"
        )
        if not ok:
            tail = [ln for ln in _clean(_text(c.get("tail"))).split("\n") if ln.strip()]
            cut = len(tail) - TAIL_LINES
            if cut > 0:
                lines.append(f"    [... {cut} earlier line(s)]")
            lines += [f"    {ln}" for ln in tail[-TAIL_LINES:]]
    skipped = e.get("skipped_tiers") or []
    if skipped:
        lines.append("not run (an earlier tier failed): " + ", ".join(map(str, skipped)))
    if e.get("log"):
        lines.append(f"full output: {e['log']}")
    return _lines(e, "verify", *lines)


def _review_request(e: dict[str, Any]) -> list[str]:
    return _lines(e, "review", *_block(_text(e.get("content")), PROMPT_LINES, wrap=True))


def _review_answer(e: dict[str, Any]) -> list[str]:
    # the verdict that follows says it all again, parsed: a short look is enough here
    text = _block(_text(e.get("content")), PROMPT_LINES) or ["(empty)"]
    return _lines(e, "answer", *text) + _estimated(e)


def _verdict(e: dict[str, Any]) -> list[str]:
    flags = []
    if e.get("short_circuited"):
        flags.append("without the reviewer")
    if e.get("malformed"):
        flags.append("unreadable answer")
    head = str(e.get("verdict", "?")) + (f" ({', '.join(flags)})" if flags else "")
    summary = _text(e.get("summary")).strip()
    lines = _block(f"{head}: {summary}" if summary else head, TEXT_LINES, wrap=True)
    items = [
        f"- not met: {a.get('ac', '?')}"
        for a in e.get("ac_check") or []
        if isinstance(a, dict) and not a.get("satisfied")
    ]
    for c in e.get("comments") or []:
        if isinstance(c, dict):
            where = str(c.get("file") or "")
            if where and c.get("line"):
                where += f":{c['line']}"
            where = f"{where}: " if where else ""
            items.append(f"- [{c.get('severity', 'nit')}] {where}{c.get('comment', '')}")
    lines += [_one_line(i) for i in items[:LIST_ITEMS]]
    if len(items) > LIST_ITEMS:
        lines.append(f"[... {len(items) - LIST_ITEMS} more]")
    return _lines(e, "verdict", *lines)


def _generic(e: dict[str, Any]) -> list[str]:
    rest = {k: v for k, v in e.items() if k not in ("t", "ts", "event")}
    body = ", ".join(f"{k}={_one_line(v)}" for k, v in rest.items()) or "(no fields)"
    return _lines(e, str(e.get("event", "?")), body)


def _mcp(e: dict[str, Any]) -> list[str]:
    """The round's MCP servers: each one's tools, or why it has none (``by``: the role they
    were started for when not the worker)."""
    by = f"for the {_one_line(e['by'])}: " if e.get("by") else ""
    out: list[str] = []
    for server in e.get("servers") or []:
        if not isinstance(server, dict):
            continue
        name = _one_line(server.get("name"))
        if server.get("problem"):
            shown = f"{name}: no tools: {_one_line(server.get('problem'))}"
        else:
            tools = [str(t) for t in server.get("tools") or []]
            shown = f"{name}: {len(tools)} tools: {', '.join(tools)}"
        out += _lines(None if out else e, "mcp", by + shown)
    return out or _lines(e, "mcp", by + "(no servers)")


_FORMATTERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    Event.ROUND_START: _round_start,
    Event.RESUME_FAILED: _resume_failed,
    Event.MESSAGE: _message,
    Event.ASSISTANT: _assistant,
    Event.TOOL_START: _tool_start,
    Event.TOOL_RESULT: _tool_result,
    Event.CONDENSE: _condense,
    Event.AGENT_END: _agent_end,
    Event.VERIFY: _verify,
    Event.REVIEW_REQUEST: _review_request,
    Event.REVIEW_ANSWER: _review_answer,
    Event.VERDICT: _verdict,
    Event.MCP: _mcp,
}


# ----------------------------------------------------------------------------- helpers


def _lines(event: dict[str, Any] | None, label: str, *body: str) -> list[str]:
    """The first body line behind the offset and label; the others indented under it."""
    offset = _offset(event.get("t")) if event is not None else ""
    label = _clean(label)[:LABEL_WIDTH]
    body = body or ("",)
    out = [cut(f"{offset:>9} {label:<{LABEL_WIDTH}} {body[0]}".rstrip(), WIDTH)]
    out += [cut(" " * _PREFIX + line, WIDTH) for line in body[1:]]
    return out


def _note(text: str) -> list[str]:
    return _lines(None, "!", f"({text})")


def _offset(t: Any) -> str:
    if isinstance(t, bool) or not isinstance(t, int | float) or t != t or t < 0:
        return ""
    if t < 3600:
        return f"+{int(t // 60):02d}:{t % 60:04.1f}"
    s = int(t)
    return f"+{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _count(value: Any) -> int:
    """``value`` when it is a count (an int >= 0, not a bool), else 0."""
    return max(value, 0) if isinstance(value, int) and not isinstance(value, bool) else 0


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _seconds(value: Any) -> str:
    try:
        return f"{float(value):.1f}s"
    except (TypeError, ValueError):
        return f"{value}s"


def _text(content: Any) -> str:
    """Message content as text: a string, None, or a list of parts ({"text": ...})."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                parts.append(_one_line(part))
        return "\n".join(parts)
    return _one_line(content)


def _block(text: str, max_lines: int, *, wrap: bool = False) -> list[str]:
    """The first ``max_lines`` non-blank lines of ``text``, and a note of what was cut.

    With ``wrap``, long lines (prose) are wrapped to the width first; without, they are cut
    when written (output, code).
    """
    lines = [ln.rstrip() for ln in _clean(text).split("\n") if ln.strip()]
    if wrap:
        lines = [part for ln in lines for part in _wrap(ln)]
    if len(lines) <= max_lines + 1:  # a note in place of one line would save nothing
        return lines
    cut = lines[max_lines:]
    chars = sum(len(ln) + 1 for ln in cut)
    return [*lines[:max_lines], f"[... {len(cut)} more lines, {chars} chars]"]


def _wrap(line: str) -> list[str]:
    indent = line[: len(line) - len(line.lstrip())]
    return textwrap.wrap(
        line, WIDTH - _PREFIX, subsequent_indent=indent, break_on_hyphens=False
    ) or [line]


def _args(arguments: Any) -> str:
    """Tool-call arguments (a JSON string) as ``key="value", ...``; raw if not JSON."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):  # the model wrote them: nested past any depth
            return _one_line(arguments)
    else:
        parsed = arguments
    if isinstance(parsed, dict):
        return ", ".join(
            f"{k}={_clean(json.dumps(v, ensure_ascii=False, default=str))}"
            for k, v in parsed.items()
        )
    return _one_line(parsed)


def _one_line(value: Any) -> str:
    """A value on one line: a string as it is (newlines shown as \\n), the rest as JSON."""
    if isinstance(value, str):
        return _clean(value.replace("\r\n", "\n").replace("\n", "\\n"))
    return _clean(json.dumps(value, ensure_ascii=False, default=str))


def _clean(text: str) -> str:
    """No terminal control sequences from traces: CR becomes a newline, tabs spaces, and
    other control characters are shown escaped (``\\x1b``)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").expandtabs(4)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
