"""``hero status``: what each story is doing, what waits in the inbox, whether a daemon runs.

Read-only: it reads ``runs/state/*.json`` and ``runs/state/plans/<plan>/*.json``,
``inbox/*.md`` and ``inbox/<plan>/*.md`` and ``runs/watch.lock``, and creates, changes or
keeps locked nothing. A home without ``runs/`` or ``inbox/`` just has empty lists; a state
file that cannot be read is a row with status ``unreadable``. No file makes it fail or hang:
files are read as the daemon reads them (regular files only, with a size limit, never
blocking on a FIFO), and whatever one file raises makes that file a row of its own
(``unreadable``, or ``rejected`` in the inbox) with the reason. A folder under
``runs/state/plans/`` whose name is no plan name is not looked at, nor is a folder of
``inbox/`` without a ``_manifest.yaml`` (see :mod:`hero.names`).

Rows are ordered loose stories first, then plan by plan (by name); within each, running
first, then by last update (newest first). Each row has its ``plan`` ("" for a loose story)
and ``key`` (what ``hero logs`` and ``hero retry`` take). The queue is what ``hero watch``
would run, in the order it would take it, by the one rule in :mod:`hero.daemon.queue`
(priority high > normal > low, then the oldest file first); the files it would refuse are
listed as rejected, with its reason. What a queued story waits for is said by the one
dependency rule, :mod:`hero.plans.gate`.

Overlap: ``overlap`` is the home's setting (``parallel`` or ``serial``; null when the
configuration cannot be read, and then nothing is flagged). Each running story's row and each
queued story has ``overlaps``, the keys of the stories queued or running whose scopes overlap
its own (:mod:`hero.story.overlap`; the stories running on the repository are those whose
repository lock a hero process holds, :mod:`hero.daemon.overlap`, so another home's are
named too, ``<key> (hero home <path>)``); a queued story has ``scope`` and, with ``overlap:
serial``, ``overlap_waits_for`` (the running stories it waits for) and ``overlap_reason``.

Spend against budget: each row has ``wall_s`` (the story's wall time as its budget counts
it, :func:`hero.run.budget.story_spend`) and ``budget``, the six budgets of config/roles.yaml
under their names (``max_story_tokens``, ...; null: no limit), or null when the
configuration cannot be read (status still shows everything else). The table shows a story
budget after the spend (``12.3k/50k``, ``$0.1200/$1.00``, a WALL column ``3m12s/1h00m``)
and the budgets above the table.

Model providers: ``breakers`` lists each provider's circuit breaker from
``runs/breakers.json`` (:mod:`hero.llm.breaker`): its state, why it opened, when it lets a story
try next; a story paused on its provider has the row's ``outage`` (provider, kind, reason).

Models: each row has ``models``, the models its last run used, ``{worker: {provider,
model, reasoning_effort}, reviewer: {...}}`` ({} for a record from before they were
recorded); the text says them once above a table whose stories all used the same, else
under each story's row.

Cached input: each row has ``tokens_cached``, the part of ``tokens_in`` the provider read
from its prompt cache (0 when it reports none); the TOKENS cell then ends with
``(8.1k cached)``.

Estimated usage: each row has ``llm_calls``, ``estimated_calls`` (of them, the calls whose
answer carried no token counts) and ``estimated_tokens`` (of ``tokens``, hero's estimate from
the request's and the answer's sizes: hero.llm.client); when a story has any, its TOKENS
(and a priced COST) start with ``~`` and a line under its row says how much is estimated.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hero.config.home import Config
from hero.config.loader import load_config
from hero.config.schema import ConfigError, UnknownKeyError
from hero.daemon.inbox import is_plan_dir
from hero.daemon.overlap import blockers, repo_key, running_on, wait_reason
from hero.daemon.queue import Admit, Entry, admit, arrange, duplicate_reason
from hero.git.ops import TargetRepo
from hero.llm.usage import Usage
from hero.locks import daemon_lock_path, is_held, read_pid, story_lock_path
from hero.names import StoryRef, plan_name_problem
from hero.plans.gate import Decision, Gate, Rule
from hero.run.budget import settings, story_spend
from hero.state import StateError, Status, load_state, state_dir
from hero.story.format import parse_story
from hero.story.overlap import Scoped, overlapping
from hero.story.record import Story, StoryError
from hero.views.text import WIDTH as WIDTH
from hero.views.text import cut

UNREADABLE = "unreadable"
_MIN_CUT_WIDTH = 12


# ----------------------------------------------------------------------------- collect


def collect_status(
    home: Path, *, now: float | None = None, strict_keys: bool = False
) -> dict[str, Any]:
    """The status of the home as plain data (what ``hero status --json`` prints).
    ``strict_keys``: an unknown key in a config file raises its UnknownKeyError (`hero
    status`) rather than being shown without the configuration (the status page, whose
    `hero serve` checked the files as it started)."""
    home = Path(home)
    now = time.time() if now is None else now
    config = _config(home, strict_keys=strict_keys)
    stories = _story_rows(home, now, settings(config.budgets) if config else None)
    queue, rejected = _inbox(home, now)
    mode = config.overlap if config else None
    if config is not None:
        _flag_overlaps(TargetRepo(config.target_repo), home, mode, stories, queue)
    return {
        "daemon": daemon_status(home),
        "breakers": breaker_rows(home),
        "overlap": mode,
        "stories": stories,
        "queue": queue,
        "rejected": rejected,
    }


def overlap_of(home: Path, key: str) -> dict[str, Any]:
    """What the overlap rule says of the story ``key`` now: ``overlaps`` (the keys of the
    stories queued or running whose scopes overlap its own; [] when it is neither queued nor
    running) and ``overlap_reason`` (why ``overlap: serial`` holds it back; "" when not)."""
    report = collect_status(home)
    for item in report["queue"]:
        if item["key"] == key:
            return {"overlaps": item["overlaps"], "overlap_reason": item["overlap_reason"]}
    for row in report["stories"]:
        if row["key"] == key:
            return {"overlaps": row["overlaps"], "overlap_reason": ""}
    return {"overlaps": [], "overlap_reason": ""}


def _flag_overlaps(
    repo: TargetRepo,
    home: Path,
    mode: str | None,
    stories: list[dict[str, Any]],
    queue: list[dict[str, Any]],
) -> None:
    """Each running story's row and each queued story gets ``overlaps``: the keys of the
    stories queued or running whose scopes overlap its own (hero.story.overlap; a story
    another home runs on the repository is named with that home). A queued story gets
    ``overlap_waits_for`` and ``overlap_reason`` too: with ``overlap: serial``, the running
    stories it waits for, and why ([] and "" when it does not wait for any)."""
    running = running_on(repo, home)
    key = repo_key(repo)
    queued = [Scoped(str(q["key"]), key, tuple(q["scope"])) for q in queue]
    found = overlapping([*running, *queued])
    live = {r.key for r in running}
    for row in stories:
        mine = row["status"] == Status.RUNNING and row["key"] in live
        row["overlaps"] = list(found.get(row["key"], ())) if mine else []
    for item, story in zip(queue, queued, strict=True):
        item["overlaps"] = list(found.get(story.key, ()))
        waits = blockers(story, running) if mode == "serial" else []
        item["overlap_waits_for"] = waits
        item["overlap_reason"] = wait_reason(waits) if waits else ""


def breaker_rows(home: Path) -> list[dict[str, Any]]:
    """The breakers of ``runs/breakers.json`` as rows, by provider; one row with state
    ``unreadable`` and the reason when the file cannot be read."""
    from hero.llm.breaker import breakers_path, read_breakers

    try:
        found = read_breakers(breakers_path(home))
    except ValueError as exc:
        return [{"provider": "?", "state": UNREADABLE, "reason": str(exc), "retry_at": None}]
    return [dataclasses.asdict(b) for _name, b in sorted(found.items())]


def queued_keys(home: Path) -> set[str]:
    """The keys of the stories in the queue ``hero watch`` would take (see :func:`_inbox`):
    stories that will run, though they may not have started yet."""
    queue, _ = _inbox(Path(home), time.time())
    return {str(item["key"]) for item in queue}


def daemon_status(home: Path) -> dict[str, Any]:
    """Whether a ``hero watch`` holds ``runs/watch.lock``, and its pid (from the file).

    Creates, changes and keeps locked nothing (see ``hero.locks.is_held``).
    """
    path = daemon_lock_path(home)
    if not is_held(path):
        return {"running": False, "pid": None}
    return {"running": True, "pid": read_pid(path)}


def _plan_folders(directory: Path) -> list[tuple[str, Path]]:
    """``(name, folder)`` of the folders in ``directory`` named as a plan may be, by name;
    nothing else in it is looked at."""
    try:
        entries = sorted(directory.iterdir())
    except OSError:  # none, or not a folder
        return []
    found = []
    for path in entries:
        try:
            if plan_name_problem(path.name) is None and path.is_dir():
                found.append((path.name, path))
        except OSError:
            continue
    return found


def _config(home: Path, *, strict_keys: bool) -> Config | None:
    """The home's configuration (its budgets, its overlap setting, its repository); None when
    it cannot be read (status still shows everything else), save for an unknown key with
    ``strict_keys``."""
    try:
        return load_config(home, roles=())
    except UnknownKeyError:
        if strict_keys:
            raise
        return None
    except (ConfigError, OSError):
        return None


def _story_rows(
    home: Path, now: float, budgets: dict[str, float | None] | None
) -> list[dict[str, Any]]:
    rows = _rows_in(home, "", state_dir(home), now, budgets)
    for plan, folder in _plan_folders(state_dir(home) / "plans"):
        rows += _rows_in(home, plan, folder, now, budgets)
    return rows


def _rows_in(
    home: Path, plan: str, directory: Path, now: float, budgets: dict[str, float | None] | None
) -> list[dict[str, Any]]:
    """The rows of the records in one folder: the loose stories', or one plan's."""
    try:
        paths = sorted(p for p in directory.glob("*.json") if not p.name.startswith("."))
    except OSError:
        return []
    rows = []
    for path in paths:
        ref = StoryRef(plan, path.stem)
        try:
            state = load_state(home, ref)
            if state is None:  # removed since the listing
                continue
            live = state.status == Status.RUNNING and is_held(story_lock_path(home, ref))
            row = _row(state, ref, now, live)
            if row["status"] == Status.RUNNING:
                row["stale"] = not live
            rows.append(row)
        except StateError as exc:
            rows.append(_unreadable(ref, path, str(exc.__cause__ or exc), home))
        except (TypeError, ValueError, AttributeError, ArithmeticError) as exc:  # wrong types
            rows.append(_unreadable(ref, path, f"unexpected field value: {exc}", home))
        except Exception as exc:  # noqa: BLE001 - one bad file must not stop `hero status`
            reason = f"cannot be shown: {type(exc).__name__}: {exc}"
            rows.append(_unreadable(ref, path, reason, home))
    for row in rows:
        row["budget"] = budgets
    running = [r for r in rows if r["status"] == Status.RUNNING]
    rest = [r for r in rows if r["status"] != Status.RUNNING]
    rest.sort(key=lambda r: (-(r["updated_at"] or 0.0), r["id"]))
    running.sort(key=lambda r: r["id"])
    return running + rest


def _row(state: Any, ref: StoryRef, now: float, live: bool = False) -> dict[str, Any]:
    usage = state.usage if isinstance(state.usage, dict) else {}
    tokens_in = int(usage.get("tokens_in") or 0)
    tokens_out = int(usage.get("tokens_out") or 0)
    tokens_cached = int(usage.get("tokens_cached") or 0)
    counted = Usage.from_dict(usage)  # the new fields, as the budgets count them
    started = float(state.started_at or 0.0)
    finished = float(state.finished_at) if state.finished_at else None
    updated = float(state.updated_at or 0.0)
    if started <= 0:
        elapsed = None
    elif state.status == Status.RUNNING:
        elapsed = now - started
    elif finished is not None:
        elapsed = finished - started
    else:  # interrupted, or queued again: up to the last recorded step
        elapsed = (updated or started) - started
    return {
        "id": state.id,
        "plan": ref.plan,
        "key": ref.key,
        "status": str(state.status),
        "title": str(state.title),
        # the story's labels as its last run read them (the board's label filter)
        "labels": _labels(state.labels),
        "current_round": int(state.current_round or 0),
        "rounds_done": len(state.rounds) if isinstance(state.rounds, list) else 0,
        "phase": str(state.phase or ""),
        "elapsed_s": None if elapsed is None else round(max(elapsed, 0.0), 3),
        "tokens": tokens_in + tokens_out,
        "tokens_in": tokens_in,
        "tokens_cached": tokens_cached,  # of tokens_in, read from the provider's prompt cache
        "tokens_out": tokens_out,
        "cost_usd": float(usage.get("cost_usd") or 0.0),
        "llm_calls": counted.llm_calls,
        # the calls whose answer carried no token counts, and their tokens: hero's estimate
        "estimated_calls": counted.estimated_calls,
        "estimated_tokens": counted.estimated_tokens,
        # what max_story_wall_s counts: the rounds' time, the live round's up to now
        "wall_s": round(story_spend(state, now=now if live else None).wall_s, 3),
        "branch": str(state.branch),
        # a follow-up: the story it revises, on whose branch it works; "" for any other
        "revises": str(state.revises or ""),
        "error": str(state.error or ""),
        "outage": dict(state.outage) if isinstance(state.outage, dict) else {},
        "models": _models(state.models),
        # the project's environment ({key, reused, seconds, log}) and the checks on the
        # starting commit ({commit, cached, checks: [...]}); {} when there are none
        "setup": dict(state.setup) if isinstance(state.setup, dict) else {},
        "baseline": dict(state.baseline) if isinstance(state.baseline, dict) else {},
        "started_at": started or None,
        "finished_at": finished,
        "updated_at": updated or None,
        "overlaps": [],  # running: the stories whose scopes overlap (_flag_overlaps)
    }


def _labels(labels: Any) -> list[str]:
    """A record's ``labels`` as text (a hand-edited file may hold anything)."""
    return [str(x) for x in labels if isinstance(x, str)] if isinstance(labels, list) else []


def _models(models: Any) -> dict[str, dict[str, str | None]]:
    """A record's ``models`` as plain text values (a hand-edited file may hold anything)."""
    if not isinstance(models, dict):
        return {}
    return {
        str(role): {str(k): None if v is None else str(v) for k, v in used.items()}
        for role, used in models.items()
        if isinstance(used, dict)
    }


def models_text(models: dict[str, Any]) -> str:
    """``worker local:gpt-5 (high), reviewer local:gpt-5-mini``: the models a run used."""
    said = []
    for role, used in models.items():
        if not isinstance(used, dict):
            continue
        text = f"{role} {used.get('provider')}:{used.get('model')}"
        if used.get("reasoning_effort"):
            text += f" ({used['reasoning_effort']})"
        said.append(text)
    # what a record holds is shown on one line, whatever it holds (no control characters)
    return "".join(c if c.isprintable() else "?" for c in " ".join(", ".join(said).split()))


def _unreadable(ref: StoryRef, path: Path, reason: str, home: Path) -> dict[str, Any]:
    return {
        "id": ref.id,
        "plan": ref.plan,
        "key": ref.key,
        "status": UNREADABLE,
        "title": "",
        "labels": [],
        "current_round": 0,
        "rounds_done": 0,
        "phase": "",
        "elapsed_s": None,
        "tokens": 0,
        "tokens_in": 0,
        "tokens_cached": 0,
        "tokens_out": 0,
        "cost_usd": 0.0,
        "llm_calls": 0,
        "estimated_calls": 0,
        "estimated_tokens": 0,
        "wall_s": 0.0,
        "branch": "",
        "revises": "",
        "error": f"{_rel(path, home)}: {' '.join(reason.split())}",
        "started_at": None,
        "finished_at": None,
        "updated_at": None,
        "overlaps": [],
    }


def _inbox(home: Path, now: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    inbox = home / "inbox"
    try:
        loose = sorted(p for p in inbox.glob("*.md") if not p.name.startswith("."))
    except OSError:
        return [], []
    files = [("", path) for path in loose]
    for plan, folder in _plan_folders(inbox):
        if not is_plan_dir(folder):  # the folders `hero watch` takes stories from
            continue
        try:
            files += [(plan, p) for p in sorted(folder.glob("*.md")) if not p.name.startswith(".")]
        except OSError:
            continue
    entries: list[Entry] = []  # the files that may run
    found: list[Entry] = []  # every story file, whether it may run or not
    rejected: list[dict[str, Any]] = []
    for plan, path in files:
        try:
            entry, runs, reason = _inbox_file(home, path, plan)
        except Exception as exc:  # noqa: BLE001 - one bad file must not stop `hero status`
            entry, runs, reason = None, False, f"file: cannot be read: {type(exc).__name__}: {exc}"
        if entry is not None:
            found.append(entry)
            if runs:
                entries.append(entry)
        if reason:
            rejected.append({"path": _rel(path, home), "reason": " ".join(reason.split())})
    queue, refused = arrange(entries)
    for entry, keeper in refused:  # a second file with one key, as `hero watch` refuses it
        reason = duplicate_reason(entry.story.ref.key, _rel(keeper.path, home))
        rejected.append({"path": _rel(entry.path, home), "reason": f"id: {reason}"})
    # what the dependency rule knows: every story file, the queued one first of two with a key
    ordered = [*queue, *sorted(found, key=lambda e: (e.arrived, e.path.name))]
    rule = Rule.over(home, (entry.story for entry in ordered))
    items = []
    for entry in queue:
        story = entry.story
        decision = _gate(rule, story)
        items.append(
            {
                "id": story.id,
                "plan": story.plan,
                "key": story.ref.key,
                "title": story.title,
                "priority": story.priority,
                "path": _rel(entry.path, home),
                "mtime": entry.arrived,
                "age_s": round(max(now - entry.arrived, 0.0), 3),
                "depends_on": list(story.depends_on),
                "scope": list(story.scope),  # [] : every file
                # the ids, as this key always held; with what each is in waits_for_detail
                "waits_for": [_dep_id(w) for w in decision.waits_for],
                "waits_for_detail": list(decision.waits_for),
                "gate": str(decision.gate),
                "gate_reason": decision.reason,
                # the overlap rule's (_flag_overlaps), when the configuration can be read
                "overlaps": [],
                "overlap_waits_for": [],
                "overlap_reason": "",
            }
        )
    return items, rejected


def _gate(rule: Rule, story: Story) -> Decision:
    try:
        return rule.gate(story)
    except Exception as exc:  # noqa: BLE001 - status shows the queue whatever one story holds
        return Decision(Gate.UNKNOWN, f"cannot be decided: {type(exc).__name__}: {exc}")


def _dep_id(waits_for: str) -> str:
    """The id in one of the rule's ``waits_for`` entries, ``"<id> (<what it is>)"``."""
    return waits_for.split(" (", 1)[0]


def _inbox_file(home: Path, path: Path, plan: str) -> tuple[Entry | None, bool, str]:
    """An inbox file (loose, or of ``plan``'s folder): its story as an entry (None if it holds
    none), whether the queue would take it, and why it would be refused ("": it is not, e.g.
    it went away since the listing, or waits for an edit)."""
    try:
        if path.is_dir():  # a folder named like a story: not a file the inbox looks at
            return None, False, ""
        mtime_ns = path.stat().st_mtime_ns
        story = parse_story(path)  # a FIFO, a device, a huge file: refused, never read whole
    except FileNotFoundError:  # taken away (run, moved to done/) since the listing
        return None, False, ""
    except StoryError as exc:
        if not path.exists() and not path.is_symlink():
            return None, False, ""
        return None, False, f"{exc.field}: {exc.message}"
    except OSError as exc:
        return None, False, f"file: {exc.strerror or exc}"
    if plan:
        story = dataclasses.replace(story, plan=plan)
    entry = Entry(story, path, mtime_ns / 1e9)
    decision = admit(home, story, path)
    if decision.admit == Admit.REFUSE:
        return entry, False, decision.reason
    return entry, decision.admit == Admit.RUN, ""


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
    for breaker in report.get("breakers") or []:
        lines.extend(cut(line, WIDTH) for line in breaker_lines(breaker, time.time()))
    lines.append("")

    stories = report.get("stories") or []
    budgets = next((r["budget"] for r in stories if r.get("budget")), None)
    if budgets and any(v is not None for v in budgets.values()):
        lines.append(cut(budget_line(budgets), WIDTH))
    if stories:
        lines.extend(_story_sections(stories))
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
            lines.append(cut(f"  {item['path']}: {item['reason']}", WIDTH))
    return "\n".join(lines)


def _story_sections(stories: list[dict[str, Any]]) -> list[str]:
    """The loose stories' table, then one table per plan under ``plan NAME:``."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in stories:
        groups.setdefault(str(row.get("plan") or ""), []).append(row)
    out: list[str] = []
    for plan in sorted(groups):  # "" (the loose stories) first
        if plan:
            if out:
                out.append("")
            out.append(cut(f"plan {plan}:", WIDTH))
        out.extend(_story_table(groups[plan]))
    if any(row.get("stale") for row in stories):
        out.append("stale: says running, but no hero process runs it; the next run resumes it")
    return out


def _story_table(stories: list[dict[str, Any]]) -> list[str]:
    header: tuple[str, ...] = (
        "STORY",
        "STATUS",
        "ROUND",
        "DONE",
        "PHASE",
        "ELAPSED",
        "TOKENS",
        "COST",
        "BRANCH",
    )
    cells: list[tuple[str, ...]] = [
        (
            row["id"],
            "stale" if row.get("stale") else row["status"],
            str(row["current_round"]) if row["current_round"] else "-",
            str(row["rounds_done"]),
            row["phase"] or "-",
            format_duration(row["elapsed_s"]),
            _approx(row)
            + _against(format_tokens(row["tokens"]), _limit(row, "max_story_tokens", _tokens_cap))
            + _cached(row),
            (_approx(row) if row["cost_usd"] > 0 else "")
            + _against(
                format_cost(row["cost_usd"]) if row["cost_usd"] > 0 else "$0",
                _limit(row, "max_story_cost_usd", _cost_cap),
                unlimited=format_cost(row["cost_usd"]),
            ),
            row["branch"] or "-",
        )
        for row in stories
    ]
    if any(_limit(row, "max_story_wall_s", format_duration) for row in stories):
        # the story's wall time as its budget counts it (the rounds' time), not ELAPSED
        header = (*header[:8], "WALL", header[8])
        cells = [
            (
                *line[:8],
                _against(
                    format_duration(row.get("wall_s") or 0.0),
                    _limit(row, "max_story_wall_s", format_duration),
                ),
                line[8],
            )
            for row, line in zip(stories, cells, strict=True)
        ]
    table = _table(header, cells, shrink=(0, len(header) - 1))  # the id and the branch
    used = {models_text(row.get("models") or {}) for row in stories} - {""}
    out = [cut(f"models: {used.pop()}", WIDTH)] if len(used) == 1 else []
    out.append(table[0])
    for row, line in zip(stories, table[1:], strict=True):
        out.append(line)
        if row.get("revises"):
            out.append(cut(f"    follow-up of {row['revises']}", WIDTH))
        if used and row.get("models"):  # the stories used different models: each says its
            out.append(cut("    models: " + models_text(row["models"]), WIDTH))
        if row.get("estimated_calls"):
            out.append(cut("    " + estimated_text(row), WIDTH))
        before = baseline_summary(row.get("baseline"))
        if before:
            out.append(cut("    baseline: " + before, WIDTH))
        if row.get("overlaps"):
            said = ", ".join(row["overlaps"])
            out.append(cut(f"    overlaps: {said} (their scopes overlap)", WIDTH))
        if row["error"]:  # a skipped story's says which ancestor failed
            out.append(cut("    error: " + " ".join(row["error"].split()), WIDTH))
        elif row.get("outage") and row["status"] == Status.INTERRUPTED:
            outage = row["outage"]
            said = f"{outage.get('provider')} {outage.get('kind')}: {outage.get('reason')}"
            out.append(cut("    paused on model provider " + " ".join(said.split()), WIDTH))
    return out


def baseline_summary(baseline: Any) -> str:
    """``1 of 2 checks already failing before any change: `make lint` ``; "" when every
    check passed on the starting commit (or none ran)."""
    checks = baseline.get("checks") if isinstance(baseline, dict) else None
    if not isinstance(checks, list):
        return ""
    ran = [c for c in checks if isinstance(c, dict) and c.get("passed") is not None]
    failed = [c for c in ran if c.get("passed") is False]
    if not failed:
        return ""
    named = ", ".join(f"`{' '.join(str(c.get('command', '')).split())}`" for c in failed)
    return f"{len(failed)} of {len(ran)} checks already failing before any change: {named}"


def breaker_lines(breaker: dict[str, Any], now: float) -> list[str]:
    """One provider's breaker: ``model provider NAME: STATE ...``, then why it opened."""
    name, state = breaker.get("provider"), breaker.get("state")
    head = f"model provider {name}: "
    if state == "closed":
        return [head + "ok"]
    if state == "stopped":
        head += "STOPPED, none of its stories starts; fix it, then restart `hero watch`"
    elif state == "half_open":
        head += f"one story ({breaker.get('probe')}) tries it again"
    elif state == "open":
        at = breaker.get("retry_at")
        wait = max(0.0, at - now) if isinstance(at, int | float) else 0.0
        head += f"unavailable, its stories wait; next try in {format_duration(wait)}"
    else:
        head += str(state)
    why = " ".join(str(breaker.get("reason") or "").split())
    if breaker.get("story"):
        why += f" (story {breaker.get('story')})"
    return [head, f"    why: {why}"] if why else [head]


def budget_line(budgets: dict[str, Any]) -> str:
    """``budgets: per story 50k tokens, $1.00, 1h00m; per round 10k tokens``."""
    parts = []
    for scope in ("story", "round"):
        caps = [
            fmt(value)
            for key, fmt in (
                (f"max_{scope}_tokens", lambda v: f"{_tokens_cap(v)} tokens"),
                (f"max_{scope}_cost_usd", _cost_cap),
                (f"max_{scope}_wall_s", format_duration),
            )
            if (value := budgets.get(key)) is not None
        ]
        if caps:
            parts.append(f"per {scope} {', '.join(caps)}")
    return "budgets: " + "; ".join(parts)


def _limit(row: dict[str, Any], key: str, fmt: Callable[[float], str]) -> str:
    """A row's budget ``key`` formatted, or "" when it has none."""
    value = (row.get("budget") or {}).get(key)
    return "" if value is None else fmt(value)


def _against(spent: str, limit: str, *, unlimited: str | None = None) -> str:
    """``spent/limit``; without a limit, ``unlimited`` (default: ``spent``)."""
    if limit:
        return f"{spent}/{limit}"
    return spent if unlimited is None else unlimited


def _cached(row: dict[str, Any]) -> str:
    """`` (8.1k cached)``: the input tokens read from the provider's prompt cache; "" none."""
    cached = row.get("tokens_cached") or 0
    return f" ({format_tokens(cached)} cached)" if cached > 0 else ""


def _approx(row: dict[str, Any]) -> str:
    """``~`` before a spend that holds hero's estimate (calls whose answer had no counts)."""
    return "~" if row.get("estimated_calls") else ""


def estimated_text(usage: dict[str, Any]) -> str:
    """``estimated: 42 of 42 calls came without token counts; ~76.0k tokens are hero's
    estimate``: what of a story's usage (a status row, a run record's ``usage``) is an
    estimate (from the request's and the answer's sizes, see hero.llm.client)."""
    calls, total = int(usage.get("estimated_calls") or 0), int(usage.get("llm_calls") or 0)
    tokens = format_tokens(int(usage.get("estimated_tokens") or 0))
    return (
        f"estimated: {calls} of {max(calls, total)} calls came without token counts; "
        f"~{tokens} tokens are hero's estimate"
    )


def _tokens_cap(n: float) -> str:
    """A token budget, short: ``9000``, ``50k``, ``12.5k``, ``2M``."""
    return format_tokens(int(n)).replace(".0k", "k").replace(".00M", "M")


def _cost_cap(usd: float) -> str:
    """A dollar budget, short: ``$1.00``, ``$0.50``, ``$0.005``."""
    return f"${usd:,.2f}" if usd >= 0.01 or usd == 0 else f"${usd:g}"


def _queue_table(queue: list[dict[str, Any]]) -> list[str]:
    header = ("#", "PRIORITY", "STORY", "AGE", "FILE", "NOTE")
    cells = [
        (
            str(n),
            item["priority"],
            item.get("key") or item["id"],
            format_duration(item["age_s"]),
            item["path"],
            queue_note(item),
        )
        for n, item in enumerate(queue, 1)
    ]
    return [cut(line, WIDTH) for line in _table(header, cells, shrink=(2, 4, 5))]


def queue_note(item: dict[str, Any]) -> str:
    """What the dependency rule and the overlap rule say of a queued story, in a few words
    ("" when it may run and overlaps nothing)."""
    note = _dependency_note(item)
    if item.get("overlap_reason"):
        return f"{note}; {item['overlap_reason']}" if note else str(item["overlap_reason"])
    if item.get("overlaps"):
        said = f"its scope overlaps {', '.join(item['overlaps'])}"
        return f"{note}; {said}" if note else said
    return note


def _dependency_note(item: dict[str, Any]) -> str:
    gate = item.get("gate")
    detail = item.get("waits_for_detail") or item.get("waits_for") or []
    if gate == Gate.SKIP:
        return f"skipped: {item.get('gate_reason') or 'a dependency failed'}"
    if gate == Gate.UNKNOWN:
        unknown = [_dep_id(w) for w in detail if w.endswith(" (unknown)")]
        if not unknown:  # a cycle of dependencies: the rule's own words
            return str(item.get("gate_reason") or "unknown dependency (fix depends_on)")
        return f"unknown dependency: {', '.join(unknown)} (fix depends_on)"
    return f"waits for {', '.join(detail)}" if detail else ""


def _table(
    header: tuple[str, ...], rows: Sequence[tuple[str, ...]], *, shrink: tuple[int, ...]
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
        parts = [cut(cell, w).ljust(w) for cell, w in zip(row, widths, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return lines


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
