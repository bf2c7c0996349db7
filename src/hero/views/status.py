"""``hero status``: what each story is doing, what waits in the inbox, whether a daemon runs.

Read-only: it reads ``runs/state/*.json``, ``inbox/*.md`` and ``runs/watch.lock`` and
creates, changes or keeps locked nothing. A home without ``runs/`` or ``inbox/`` just has
empty lists; a state file that cannot be read is a row with status ``unreadable``.

Rows are ordered running first, then by last update (newest first). The queue is in the
order a scheduler takes it: priority high > normal > low, then the oldest file first.
"""

from __future__ import annotations

import fcntl
import math
import time
from pathlib import Path
from typing import Any

from hero.state import StateError, load_state, state_dir
from hero.story import PRIORITIES, StoryError, parse_story

WIDTH = 100
#: Statuses after which nothing more happens to a story unless it is run again.
TERMINAL = ("passed", "gave_up", "error", "skipped")
UNREADABLE = "unreadable"
_PRIORITY_RANK = {p: -i for i, p in enumerate(PRIORITIES)}  # high first
_MIN_CUT_WIDTH = 12


# ----------------------------------------------------------------------------- collect


def collect_status(home: Path, *, now: float | None = None) -> dict[str, Any]:
    """The status of the home as plain data (what ``hero status --json`` prints)."""
    home = Path(home)
    now = time.time() if now is None else now
    stories = _story_rows(home, now)
    known = {row["id"]: row["status"] for row in stories}
    queue, rejected = _inbox(home, known, now)
    return {"daemon": daemon_status(home), "stories": stories, "queue": queue, "rejected": rejected}


def daemon_status(home: Path) -> dict[str, Any]:
    """Whether a ``hero watch`` holds ``runs/watch.lock``, and its pid (from the file).

    Tests the lock with a shared non-blocking flock that is let go at once; the file is
    only opened for reading, never created.
    """
    path = Path(home) / "runs" / "watch.lock"
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return {"running": False, "pid": None}
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            held = True
        except OSError:  # a file system without flock: cannot tell, say not running
            held = False
        else:
            fcntl.flock(fh, fcntl.LOCK_UN)
            held = False
        if not held:
            return {"running": False, "pid": None}
        text = fh.read(64).decode("ascii", errors="replace").strip()
    return {"running": True, "pid": int(text) if text.isdigit() else None}


def _story_rows(home: Path, now: float) -> list[dict[str, Any]]:
    directory = state_dir(home)
    try:
        paths = sorted(p for p in directory.glob("*.json") if not p.name.startswith("."))
    except OSError:
        return []
    rows = []
    for path in paths:
        story_id = path.stem
        try:
            state = load_state(home, story_id)
            if state is None:  # removed since the listing
                continue
            row = _row(state, now)
            if row["status"] == "running":
                row["stale"] = not _story_lock_held(home, story_id)
            rows.append(row)
        except StateError as exc:
            rows.append(_unreadable(story_id, path, str(exc.__cause__ or exc), home))
        except (TypeError, ValueError, AttributeError) as exc:  # fields of the wrong type
            rows.append(_unreadable(story_id, path, f"unexpected field value: {exc}", home))
    running = [r for r in rows if r["status"] == "running"]
    rest = [r for r in rows if r["status"] != "running"]
    rest.sort(key=lambda r: (-(r["updated_at"] or 0.0), r["id"]))
    running.sort(key=lambda r: r["id"])
    return running + rest


def _story_lock_held(home: Path, story_id: str) -> bool:
    """Whether some hero process is running the story now (it holds runs/locks/<id>.lock).

    A state that says `running` with nobody holding the lock was left by a run that died;
    the next `hero run` or `hero watch` resumes it."""
    import fcntl

    try:
        fh = open(home / "runs" / "locks" / f"{story_id}.lock")  # noqa: SIM115
    except OSError:
        return False
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


def _row(state: Any, now: float) -> dict[str, Any]:
    usage = state.usage if isinstance(state.usage, dict) else {}
    tokens_in = int(usage.get("tokens_in") or 0)
    tokens_out = int(usage.get("tokens_out") or 0)
    started = float(state.started_at or 0.0)
    finished = float(state.finished_at) if state.finished_at else None
    updated = float(state.updated_at or 0.0)
    if started <= 0:
        elapsed = None
    elif state.status == "running":
        elapsed = now - started
    elif finished is not None:
        elapsed = finished - started
    else:  # interrupted, or queued again: up to the last recorded step
        elapsed = (updated or started) - started
    return {
        "id": state.id,
        "status": str(state.status),
        "title": str(state.title),
        "current_round": int(state.current_round or 0),
        "rounds_done": len(state.rounds) if isinstance(state.rounds, list) else 0,
        "phase": str(state.phase or ""),
        "elapsed_s": None if elapsed is None else round(max(elapsed, 0.0), 3),
        "tokens": tokens_in + tokens_out,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "cost_usd": float(usage.get("cost_usd") or 0.0),
        "branch": str(state.branch),
        "error": str(state.error or ""),
        "started_at": started or None,
        "finished_at": finished,
        "updated_at": updated or None,
    }


def _unreadable(story_id: str, path: Path, reason: str, home: Path) -> dict[str, Any]:
    return {
        "id": story_id,
        "status": UNREADABLE,
        "title": "",
        "current_round": 0,
        "rounds_done": 0,
        "phase": "",
        "elapsed_s": None,
        "tokens": 0,
        "tokens_in": 0,
        "tokens_out": 0,
        "cost_usd": 0.0,
        "branch": "",
        "error": f"{_rel(path, home)}: {' '.join(reason.split())}",
        "started_at": None,
        "finished_at": None,
        "updated_at": None,
    }


def _inbox(
    home: Path, known: dict[str, str], now: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    inbox = home / "inbox"
    try:
        paths = sorted(p for p in inbox.glob("*.md") if not p.name.startswith("."))
    except OSError:
        return [], []
    queue: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    rejected: list[dict[str, Any]] = []
    for path in paths:
        try:
            if not path.is_file():
                continue
            mtime = path.stat().st_mtime
            story = parse_story(path)
        except FileNotFoundError:  # taken away (run, moved to done/) since the listing
            continue
        except StoryError as exc:
            if not path.exists():
                continue
            rejected.append({"path": _rel(path, home), "reason": f"{exc.field}: {exc.message}"})
            continue
        except OSError as exc:
            rejected.append({"path": _rel(path, home), "reason": f"file: {exc.strerror or exc}"})
            continue
        status = known.get(story.id)
        if status is not None and status not in ("queued", "interrupted"):  # resumable next
            continue
        waits_for = [d for d in story.depends_on if known.get(d) != "passed"]
        item = {
            "id": story.id,
            "title": story.title,
            "priority": story.priority,
            "path": _rel(path, home),
            "mtime": mtime,
            "age_s": round(max(now - mtime, 0.0), 3),
            "depends_on": list(story.depends_on),
            "waits_for": waits_for,
        }
        queue.append(((_PRIORITY_RANK.get(story.priority, 0), mtime, path.name), item))
    queue.sort(key=lambda pair: pair[0])
    ordered: list[dict[str, Any]] = []
    first_with: dict[str, str] = {}
    for _, item in queue:  # a second file with the same id is refused, as `hero watch` does
        if item["id"] in first_with:
            reason = f"id: story id '{item['id']}' is already queued from {first_with[item['id']]}"
            rejected.append({"path": item["path"], "reason": reason})
            continue
        first_with[item["id"]] = item["path"]
        ordered.append(item)
    return ordered, rejected


def _rel(path: Path, home: Path) -> str:
    try:
        return str(path.relative_to(home))
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------- format


def format_status(report: dict[str, Any]) -> str:
    """The report as text for a terminal, at most ``WIDTH`` columns wide."""
    daemon = report.get("daemon") or {}
    if daemon.get("running"):
        pid = daemon.get("pid")
        lines = [f"daemon: running (pid {pid})" if pid else "daemon: running (pid unknown)"]
    else:
        lines = ["daemon: not running"]
    lines.append("")

    stories = report.get("stories") or []
    if stories:
        lines.extend(_story_table(stories))
    else:
        lines.append("stories: none (no runs/state/*.json)")
    lines.append("")

    queue = report.get("queue") or []
    if queue:
        lines.append(f"queue ({len(queue)}), in the order they would run:")
        lines.extend(_queue_table(queue))
    else:
        lines.append("queue: empty")

    rejected = report.get("rejected") or []
    if rejected:
        lines.append("")
        lines.append(f"rejected ({len(rejected)}), not runnable until fixed:")
        for item in rejected:
            lines.append(_cut(f"  {item['path']}: {item['reason']}", WIDTH))
    return "\n".join(lines)


def _story_table(stories: list[dict[str, Any]]) -> list[str]:
    header = ("STORY", "STATUS", "ROUND", "DONE", "PHASE", "ELAPSED", "TOKENS", "COST", "BRANCH")
    cells = [
        (
            row["id"],
            "stale" if row.get("stale") else row["status"],
            str(row["current_round"]) if row["current_round"] else "-",
            str(row["rounds_done"]),
            row["phase"] or "-",
            format_duration(row["elapsed_s"]),
            format_tokens(row["tokens"]),
            format_cost(row["cost_usd"]),
            row["branch"] or "-",
        )
        for row in stories
    ]
    table = _table(header, cells, shrink=(0, 8))  # the id and the branch
    out = [table[0]]
    for row, line in zip(stories, table[1:], strict=True):
        out.append(line)
        if row["error"]:
            out.append(_cut("    error: " + " ".join(row["error"].split()), WIDTH))
    if any(row.get("stale") for row in stories):
        out.append("stale: says running, but no hero process runs it; the next run resumes it")
    return out


def _queue_table(queue: list[dict[str, Any]]) -> list[str]:
    header = ("#", "PRIORITY", "STORY", "AGE", "FILE", "NOTE")
    cells = [
        (
            str(n),
            item["priority"],
            item["id"],
            format_duration(item["age_s"]),
            item["path"],
            f"waits for {', '.join(item['waits_for'])}" if item["waits_for"] else "",
        )
        for n, item in enumerate(queue, 1)
    ]
    return [_cut(line, WIDTH) for line in _table(header, cells, shrink=(2, 4, 5))]


def _table(
    header: tuple[str, ...], rows: list[tuple[str, ...]], *, shrink: tuple[int, ...]
) -> list[str]:
    """Left-aligned columns two spaces apart. While the table is wider than ``WIDTH``, the
    widest of the ``shrink`` columns is cut down (to at least ``_MIN_CUT_WIDTH``)."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    excess = sum(widths) + 2 * (len(widths) - 1) - WIDTH
    while excess > 0:
        can = [c for c in shrink if widths[c] > max(_MIN_CUT_WIDTH, len(header[c]))]
        if not can:
            break
        widest = max(can, key=lambda c: widths[c])
        widths[widest] -= 1
        excess -= 1
    lines = []
    for row in (header, *rows):
        parts = [_cut(cell, w).ljust(w) for cell, w in zip(row, widths, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return lines


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def format_duration(seconds: float | None) -> str:
    """``42s``, ``3m12s``, ``2h05m``, ``3d04h``; ``-`` for unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def format_tokens(n: int) -> str:
    """``0``, ``9876``, ``12.3k``, ``1.23M``."""
    if n < 10_000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


def format_cost(usd: float) -> str:
    """``$0.0123``; ``-`` when nothing was counted (no prices configured, or no calls).

    The state records no prices, so a cost of 0 cannot tell "free" from "unknown".
    """
    if not usd or usd <= 0:
        return "-"
    if usd < 0.0001:
        return "<$0.0001"
    return f"${usd:.4f}" if usd < 100 else f"${usd:,.2f}"
