"""The data behind ``hero serve``'s pages and its JSON API: plain dicts, every string redacted.

Read-only, like ``hero status`` (whose :func:`~hero.views.status.collect_status` makes the
board) and ``hero logs``: the run records, the round traces, the checks' logs, the inbox and
``done/``, and the target repository's commits (``git diff``, bounded). It takes no lock.

Everything a story's run wrote (titles, summaries, tool calls, logs, diffs) was shaped by
the worker or the model, and is hostile: keys and plan names pass the one naming rule
(:func:`hero.views.logs.story_ref`) before a path is made of them; a commit is given to
git only when it is a full object id; files are read without following a symlink out of
``runs/``, never blocking on a FIFO, and bounded.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hero.git.ops import GitError, diff_since, is_oid
from hero.llm.usage import Usage
from hero.locks import daemon_lock_path, is_held
from hero.names import MANIFEST, StoryRef, plan_name_problem
from hero.plans.dag import partial_layers
from hero.plans.manifest import PlanError, read_plan
from hero.redact import Redactor
from hero.state import RunState, StateError, Status, load_state
from hero.trace import Event
from hero.views.logs import story_ref
from hero.views.status import collect_status, estimated_text, overlap_of
from hero.web.memory import facts as memory_facts
from hero.web.memory import path_of as memory_path_of
from hero.web.overview import dependency_order

#: A trace read for a page: its first this many bytes (the raw link has the rest).
TRACE_READ_BYTES = 16 << 20
#: What a raw link sends of a trace or a log at most.
RAW_MAX_BYTES = 32 << 20
#: The end of a check's log shown under its round.
LOG_TAIL_BYTES = 16 << 10
LOG_TAIL_LINES = 60
#: A round's diff on its page, in characters (the files left out are named).
DIFF_MAX_CHARS = 100_000
#: A tool call's arguments and result on a page, in characters each.
TOOL_TEXT_CHARS = 4_000
TOOL_CALLS_SHOWN = 400
#: Diffs kept in memory by commit pair (a pair's diff never changes).
DIFF_CACHE = 64
#: Trace summaries kept in memory, by file, size and mtime.
TRACE_CACHE = 256


@dataclass
class Site:
    """What the pages are read from: the home, the target repository (None: not read), the
    redactor of every secret the configuration knows, and the daemon's slot count."""

    home: Path
    repo: Path | None
    redactor: Redactor
    max_parallel: int = 1
    _diffs: OrderedDict[tuple[str, str], dict[str, Any]] = field(
        default_factory=OrderedDict, repr=False
    )
    _traces: OrderedDict[tuple[str, int, int], TraceSummary] = field(
        default_factory=OrderedDict, repr=False
    )
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def clean(self, value: Any) -> Any:
        return self.redactor.redact_value(value) if self.redactor else value


# ----------------------------------------------------------------------------- signatures


def signature(*parts: Iterable[Path] | Path | str) -> str:
    """A short hash of the size, mtime and inode of every path (and the strings) given: the ETag
    of a page, computed without reading or rendering anything, so an idle page costs a
    few ``stat`` calls and a 304."""
    digest = hashlib.blake2b(digest_size=12)
    for part in parts:
        items = [part] if isinstance(part, Path | str) else part
        for item in items:
            if isinstance(item, str):
                digest.update(b"s" + item.encode("utf-8", "replace") + b"\0")
                continue
            try:
                st = item.stat(follow_symlinks=False)
                # the inode too: a file replaced (hero writes its records to a new file, then
                # renames it) within the clock's tick, at the same size, is still new
                stamp = f"{item}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}\0"
                digest.update(stamp.encode("utf-8", "replace"))
            except OSError:
                digest.update(f"{item}|-\0".encode("utf-8", "replace"))
    return digest.hexdigest()


def _listing(directory: Path, depth: int = 1) -> list[Path]:
    """The entries of ``directory`` (and of its folders, ``depth`` levels down), sorted."""
    found: list[Path] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                found.append(Path(entry.path))
                if depth > 1 and entry.is_dir(follow_symlinks=False):
                    found += _listing(Path(entry.path), depth - 1)
    except OSError:
        return found
    return sorted(found)


def board_signature(site: Site) -> str:
    home = site.home
    held = is_held(daemon_lock_path(home))
    memory = memory_path_of(site.home, site.repo)
    return signature(
        [memory] if memory is not None else [],
        [home / "runs" / "state"],
        _listing(home / "runs" / "state"),
        _listing(home / "runs" / "state" / "plans", depth=2),
        [home / "inbox"],
        _listing(home / "inbox", depth=2),
        _listing(home / "done"),
        [daemon_lock_path(home), home / "runs" / "breakers.json"],
        [home / "runs" / "github" / "reported.json"],  # the pull requests the board links
        f"daemon={held}",
    )


def story_signature(site: Site, ref: StoryRef) -> str:
    memory = memory_path_of(site.home, site.repo)
    home = site.home
    return signature(
        [ref.state_path(home)],
        _listing(ref.run_dir(home)),
        [memory] if memory is not None else [],
        # what its overlaps depend on: the stories queued and running (hero.views.status)
        _listing(home / "runs" / "state"),
        _listing(home / "runs" / "state" / "plans", depth=2),
        _listing(home / "inbox", depth=2),
    )


def plan_signature(site: Site, name: str) -> str:
    home = site.home
    return signature(
        _listing(home / "inbox" / name),
        _listing(home / "done" / name),
        _listing(home / "runs" / "state" / "plans" / name),
    )


# ----------------------------------------------------------------------------- the board


def board(site: Site, *, now: float | None = None) -> dict[str, Any]:
    """``hero status --json``'s report, with the daemon's health (pid, since, uptime,
    slots in use) and the stories grouped by plan ("" first: the loose stories)."""
    now = time.time() if now is None else now
    report = collect_status(site.home, now=now)
    daemon = dict(report["daemon"])
    since = None
    if daemon.get("running"):
        try:  # the lock file is written once, by the daemon, when it starts
            since = daemon_lock_path(site.home).stat().st_mtime
        except OSError:
            since = None
    running = sum(1 for row in report["stories"] if row["status"] == Status.RUNNING)
    live = sum(
        1 for row in report["stories"] if row["status"] == Status.RUNNING and not row.get("stale")
    )
    daemon.update(
        since=since,
        uptime_s=None if since is None else round(max(now - since, 0.0), 3),
        slots={"running": live, "max_parallel": site.max_parallel},
    )
    report["daemon"] = daemon
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in report["stories"]:
        groups.setdefault(str(row.get("plan") or ""), []).append(row)
    report["groups"] = [{"plan": plan, "stories": groups[plan]} for plan in sorted(groups)]
    report["plans"] = plan_names(site)
    report["counts"] = _counts(report["stories"])
    report["running"] = running
    report["now"] = now
    # each fact of the repository's memory with its trust (hero.web.memory)
    report["memory"] = memory_facts(site.home, site.repo, site.redactor)
    return dict(site.clean(report))


def plan_names(site: Site) -> list[str]:
    """The plans of the home: the folders of ``inbox/`` and ``done/`` with a manifest."""
    found: set[str] = set()
    for where in ("inbox", "done"):
        for path in _listing(site.home / where):
            if plan_name_problem(path.name) is None and (path / MANIFEST).is_file():
                found.add(path.name)
    return sorted(found)


def _counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return dict(sorted(counts.items()))


# ----------------------------------------------------------------------------- a story


def ref_of(key: str) -> StoryRef | None:
    """The story ``key`` names (``<id>`` or ``<plan>/<id>``), or None for anything else."""
    if len(key) > 200:
        return None
    return story_ref(key)


def story(site: Site, ref: StoryRef, *, now: float | None = None) -> dict[str, Any] | None:
    """A story's page: its record and each of its rounds (the one in progress too, from its
    trace); None when it has no run record. An unreadable record is a page that says so."""
    now = time.time() if now is None else now
    try:
        state = load_state(site.home, ref)
    except StateError as exc:
        state, unreadable = RunState(ref.id, plan=ref.plan), str(exc)
    else:
        unreadable = ""
    if state is None:
        return None
    usage = state.usage if isinstance(state.usage, dict) else {}
    counted = Usage.from_dict(usage)
    started = float(state.started_at or 0.0)
    finished = float(state.finished_at) if state.finished_at else None
    if not started:
        elapsed = None
    elif state.status == Status.RUNNING:
        elapsed = now - started
    else:
        elapsed = (finished or float(state.updated_at or started)) - started
    traces = _round_files(site, ref, "round-", ".jsonl")
    logs = _round_files(site, ref, "verify-r", ".log")
    numbers = sorted({r.round for r in state.rounds} | set(traces))
    records = {r.round: r for r in state.rounds}
    rounds = []
    previous = state.base_sha
    for n in numbers:
        record = records.get(n)
        found = _trace_summary(site, traces[n]) if n in traces else _EMPTY_TRACE
        item = _round(site, n, record, found, logs.get(n), previous)
        item["in_progress"] = (
            record is None and n == state.current_round and (state.status == Status.RUNNING)
        )
        rounds.append(item)
        if record is not None and record.head_sha:
            previous = record.head_sha
    data = {
        "key": ref.key,
        "id": ref.id,
        "plan": ref.plan,
        "title": str(state.title),
        "labels": [str(x) for x in state.labels],
        "status": str(state.status),
        "phase": str(state.phase or ""),
        "current_round": int(state.current_round or 0),
        "rounds_done": len(state.rounds),
        "branch": str(state.branch),
        "revises": str(state.revises or ""),  # a follow-up: the story it revises
        "base_ref": str(state.base_ref),
        "base_sha": str(state.base_sha),
        "head_sha": str(state.head_sha),
        "error": str(state.error or ""),
        "runs": int(state.runs or 0),
        "tokens_in": int(usage.get("tokens_in") or 0),
        "tokens_out": int(usage.get("tokens_out") or 0),
        "tokens_cached": int(usage.get("tokens_cached") or 0),
        "llm_calls": int(usage.get("llm_calls") or 0),
        "cost_usd": float(usage.get("cost_usd") or 0.0),
        # of them, the calls whose answer had no token counts, and hero's estimate of theirs
        "estimated_calls": counted.estimated_calls,
        "estimated_tokens": counted.estimated_tokens,
        "estimated": estimated_text(counted.to_dict()) if counted.estimated else "",
        "elapsed_s": None if elapsed is None else round(max(elapsed, 0.0), 3),
        "models": {k: dict(v) for k, v in state.models.items()},
        "outage": dict(state.outage),
        "setup": dict(state.setup),
        "baseline": dict(state.baseline),
        "started_at": started or None,
        "finished_at": finished,
        "updated_at": float(state.updated_at or 0.0) or None,
        "rounds": rounds,
        # the facts this story taught the repository's memory, each with its trust
        "memory": memory_facts(site.home, site.repo, site.redactor, story=ref.key),
        # the stories queued or running whose scopes overlap its own, and why it waits
        **overlap_of(site.home, ref.key),
    }
    if unreadable:  # the page says so, with what could not be read
        data.update(status="unreadable", error=unreadable)
    return dict(site.clean(data))


@dataclass(frozen=True)
class TraceSummary:
    """What a page shows of a round's trace: its tool calls, and its last checks, verdict
    and worker's end (what a round in progress has before its record)."""

    read: bool
    tools: list[dict[str, Any]]
    verify: dict[str, Any]
    verdict: dict[str, Any]
    worker: dict[str, Any]


_EMPTY_TRACE = TraceSummary(False, [], {}, {}, {})


def _trace_summary(site: Site, path: Path) -> TraceSummary:
    """The summary of a trace, kept while the file's size and mtime stay the same: a page
    of a running story reads only the trace that grew."""
    try:
        st = path.stat(follow_symlinks=False)
        key = (str(path), st.st_size, st.st_mtime_ns)
    except OSError:
        return _EMPTY_TRACE
    with site._lock:
        kept = site._traces.get(key)
    if kept is not None:
        return kept
    events = _trace_events(site, path)
    found = TraceSummary(
        bool(events),
        _tool_calls(events),
        next((e for e in reversed(events) if e.get("event") == Event.VERIFY), {}),
        next((e for e in reversed(events) if e.get("event") == Event.VERDICT), {}),
        next((e for e in reversed(events) if e.get("event") == Event.AGENT_END), {}),
    )
    with site._lock:
        site._traces[key] = found
        while len(site._traces) > TRACE_CACHE:
            site._traces.popitem(last=False)
    return found


def _round(
    site: Site,
    n: int,
    record: Any,
    trace: TraceSummary,
    log: Path | None,
    previous: str,
) -> dict[str, Any]:
    """One round: the worker's summary and tool calls, the checks with their log's tail,
    the verdict and its comments, the diff; from the run record, else from the trace."""
    verify, verdict, worker = trace.verify, trace.verdict, trace.worker
    if record is not None:
        worker = {
            "turns": record.worker.turns,
            "tool_calls": record.worker.tool_calls,
            "stop_reason": record.worker.stop_reason,
            "detail": record.worker.detail,
            "summary": record.worker.summary,
        }
        verify = record.verify
        verdict = {
            "verdict": record.review.verdict,
            "summary": record.review.summary,
            "short_circuited": record.review.short_circuited,
            "comments": record.review.comments,
            "ac_check": record.review.ac_check,
        }
    head = str(record.head_sha) if record is not None else ""
    return {
        "round": n,
        "started_at": float(record.started_at) if record is not None else None,
        "duration_s": float(record.duration_s) if record is not None else None,
        "worker": _plain_worker(worker),
        "tools": trace.tools,
        "verify": _plain_verify(verify),
        "log_tail": _tail(site, log) if log is not None else "",
        "has_log": log is not None,
        "has_trace": trace.read,
        "review": _plain_review(verdict),
        "feedback": str(record.feedback) if record is not None else "",
        "head_sha": head,
        "diff": diff(site, previous, head) if head else _no_diff("no commit recorded yet"),
    }


def _plain_worker(worker: dict[str, Any]) -> dict[str, Any]:
    return {
        "turns": _int(worker.get("turns")),
        "tool_calls": _int(worker.get("tool_calls")),
        "stop_reason": str(worker.get("stop_reason") or ""),
        "detail": str(worker.get("detail") or ""),
        "summary": str(worker.get("summary") or ""),
    }


def _plain_verify(verify: dict[str, Any]) -> dict[str, Any]:
    found = verify.get("commands")
    commands: list[Any] = found if isinstance(found, list) else []
    return {
        "known": bool(verify),
        "passed": bool(verify.get("passed")),
        "commands": [
            {
                "tier": str(c.get("tier") or ""),
                "command": str(c.get("command") or ""),
                "exit_code": _int(c.get("exit_code")),
                "duration_s": _float(c.get("duration_s")),
                "timed_out": bool(c.get("timed_out")),
                "tail": str(c.get("tail") or ""),
            }
            for c in commands
            if isinstance(c, dict)
        ],
    }


def _plain_review(verdict: dict[str, Any]) -> dict[str, Any]:
    def objects(value: Any) -> list[dict[str, Any]]:
        return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []

    return {
        "verdict": str(verdict.get("verdict") or ""),
        "summary": str(verdict.get("summary") or ""),
        "short_circuited": bool(verdict.get("short_circuited")),
        "comments": [
            {
                "file": str(c.get("file") or ""),
                "line": _int(c.get("line")) or None,
                "severity": str(c.get("severity") or ""),
                "comment": str(c.get("comment") or ""),
            }
            for c in objects(verdict.get("comments"))
        ],
        "ac_check": [
            {"ac": str(a.get("ac") or ""), "satisfied": a.get("satisfied") is True}
            for a in objects(verdict.get("ac_check"))
        ],
    }


def _tool_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each tool call of the round's trace, with its result (cut), in order."""
    calls: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    for event in events:
        kind = event.get("event")
        if kind == Event.ASSISTANT and isinstance(event.get("tool_calls"), list):
            for call in event["tool_calls"]:
                if not isinstance(call, dict) or len(calls) >= TOOL_CALLS_SHOWN:
                    continue
                item = {
                    "turn": _int(event.get("turn")),
                    "name": str(call.get("name") or "?"),
                    "arguments": _cut(str(call.get("arguments") or "")),
                    "result": "",
                    "is_error": False,
                    "done": False,
                }
                calls.append(item)
                by_id[str(call.get("id"))] = item
        elif kind == Event.TOOL_RESULT:
            found = by_id.get(str(event.get("id")))
            if found is not None:
                found.update(
                    result=_cut(str(event.get("content") or "")),
                    is_error=bool(event.get("is_error")),
                    done=True,
                )
    return calls


def diff(site: Site, base: str, head: str) -> dict[str, Any]:
    """``git diff base..head`` in the target repository, bounded; a note instead when it
    cannot be read. Only full object ids reach git (a record is hostile input)."""
    if site.repo is None:
        return _no_diff("the target repository is not read")
    if not (is_oid(base) and is_oid(head)):
        return _no_diff("no commits to compare")
    key = (base, head)
    with site._lock:
        if key in site._diffs:
            site._diffs.move_to_end(key)
            return site._diffs[key]
    try:
        bounded, stat_text = diff_since(site.repo, base, DIFF_MAX_CHARS, tip=head)
        found: dict[str, Any] = {
            "note": "",
            "base": base,
            "head": head,
            "stat": stat_text,
            "text": bounded.text,
            "cut_chars": bounded.cut_chars,
            "omitted": list(bounded.omitted),
        }
    except GitError as exc:
        return _no_diff(f"the diff could not be read: {' '.join(str(exc).split())[:500]}")
    with site._lock:
        site._diffs[key] = found
        while len(site._diffs) > DIFF_CACHE:
            site._diffs.popitem(last=False)
    return found


def _no_diff(note: str) -> dict[str, Any]:
    return {
        "note": note,
        "base": "",
        "head": "",
        "stat": "",
        "text": "",
        "cut_chars": 0,
        "omitted": [],
    }


# ----------------------------------------------------------------------------- a plan


def plan(site: Site, name: str) -> dict[str, Any] | None:
    """A plan's stories (status, title, dependencies) in layers; None for no such plan."""
    if plan_name_problem(name) is not None:
        return None
    try:
        found = read_plan(site.home, name)
    except PlanError:
        return None
    nodes = found.deps()
    ordered, stuck = partial_layers(nodes)
    stories = []
    for story_id, item in found.stories.items():
        try:
            state = load_state(site.home, StoryRef(name, story_id))
            status = str(state.status) if state is not None else "not started"
            rounds = len(state.rounds) if state is not None else 0
        except StateError:
            status, rounds = "unreadable", 0
        stories.append(
            {
                "id": story_id,
                "key": StoryRef(name, story_id).key,
                "title": item.title,
                "status": status,
                "rounds": rounds,
                "priority": item.priority,
                "depends_on": list(item.depends_on),
                "unknown_deps": [d for d in item.depends_on if d not in nodes],
            }
        )
    order = {sid: i for i, sid in enumerate(dependency_order(nodes))}
    stories.sort(key=lambda s: order.get(str(s["id"]), len(order)))  # dependencies first
    data = {
        "name": name,
        "folder": str(found.folder.relative_to(site.home)),
        "stories": stories,
        "layers": ordered,
        "in_cycle": stuck,
        "problems": list(found.problems),
    }
    return dict(site.clean(data))


# ----------------------------------------------------------------------------- files


def _round_files(site: Site, ref: StoryRef, prefix: str, suffix: str) -> dict[int, Path]:
    """``{n: path}`` of the story's ``<prefix>N<suffix>`` files (regular files, not links)."""
    found: dict[int, Path] = {}
    try:
        with os.scandir(ref.run_dir(site.home)) as entries:
            for entry in entries:
                name = entry.name
                middle = (
                    name[len(prefix) : -len(suffix)] if len(name) > len(prefix + suffix) else ""
                )
                if (
                    name.startswith(prefix)
                    and name.endswith(suffix)
                    and middle.isdigit()
                    and len(middle) < 6
                    and entry.is_file(follow_symlinks=False)
                ):
                    found[int(middle)] = Path(entry.path)
    except OSError:
        return {}
    return found


def raw_file(site: Site, ref: StoryRef, name: str) -> Path | None:
    """The file ``name`` (``round-N.jsonl``, ``verify-rN.log``) of the story's run folder,
    or None when there is none or it is not a regular file inside ``runs/``."""
    path = ref.run_dir(site.home) / name
    if not _inside_runs(site, path):
        return None
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    return path


def _inside_runs(site: Site, path: Path) -> bool:
    """Whether the folder holding ``path`` is inside the home's ``runs/``, links resolved
    (a run folder that is a symlink to elsewhere is not read)."""
    try:
        runs = (site.home / "runs").resolve(strict=True)
        parent = path.parent.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    return parent == runs or runs in parent.parents


def read_head(site: Site, path: Path, limit: int) -> tuple[bytes, int]:
    """The first ``limit`` bytes of a run file and how many more it holds; the file opened
    without following a link, non-blocking, checked regular. ``(b"", -1)``: not readable."""
    return _read(site, path, limit, tail=False)


def _read(site: Site, path: Path, limit: int, *, tail: bool) -> tuple[bytes, int]:
    if not _inside_runs(site, path):
        return b"", -1
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        return b"", -1
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return b"", -1
        size = info.st_size
        start = max(size - limit, 0) if tail else 0
        if start:
            os.lseek(fd, start, os.SEEK_SET)
        chunks: list[bytes] = []
        got = 0
        while got < limit:
            chunk = os.read(fd, min(limit - got, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks), max(size - got, 0)
    except OSError:
        return b"", -1
    finally:
        os.close(fd)


def _trace_events(site: Site, path: Path) -> list[dict[str, Any]]:
    import json

    data, _more = read_head(site, path, TRACE_READ_BYTES)
    events = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a torn last line, or one cut at the bound
        if isinstance(event, dict):
            events.append(event)
    return events


def _tail(site: Site, path: Path) -> str:
    data, more = _read(site, path, LOG_TAIL_BYTES, tail=True)
    lines = data.decode("utf-8", "replace").splitlines()
    if more > 0 and lines:
        lines = lines[1:]  # the first line is cut
    shown = lines[-LOG_TAIL_LINES:]
    return "\n".join(shown)


def _cut(text: str) -> str:
    if len(text) <= TOOL_TEXT_CHARS:
        return text
    return text[:TOOL_TEXT_CHARS] + f"\n[... {len(text) - TOOL_TEXT_CHARS} more characters]"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
