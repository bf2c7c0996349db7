"""The board's day of work: totals, filters, links, charts, plan order and coloured diffs.

Plain functions over the rows :func:`hero.views.status.collect_status` makes (one row per
run record): the totals sum each row's ``tokens`` and ``cost_usd``, which are the record's
``usage`` as ``hero status`` reads it, so the page, ``hero status`` and the budgets count
one spend. The charts are inline SVG made here (no script, no other origin), every text
in them escaped; the filters are the query string's (``/?status=passed&label=ui&q=login``),
applied on the server, so they work without JavaScript (and on ``/api/stories`` alike).
"""

from __future__ import annotations

import heapq
import html
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hero.names import StoryRef
from hero.state import StateError, load_state
from hero.story.format import parse_story
from hero.story.record import StoryError
from hero.yamlio import ValueProblem, read_file

DAY_S = 86_400.0
HOUR_S = 3_600.0
#: The statuses counted as failed in the per-hour chart.
FAILED = frozenset({"gave_up", "error", "budget_exceeded"})
#: The longest filter value read from the query string.
FILTER_CHARS = 200
#: A GitHub repository's name as ``owner/name``: anything else makes no link.
_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,38}/[A-Za-z0-9._-]{1,100}$")
_PULL_RE = re.compile(r"^https://github\.com/[A-Za-z0-9._/-]+/pull/[0-9]{1,12}$")
_FILE_RE = re.compile(r"^diff --git a/(.*) b/(.*)$")


# ----------------------------------------------------------------------------- totals


def _spend(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    rows = list(rows)
    return {
        "tokens": sum(int(r.get("tokens") or 0) for r in rows),
        "cost_usd": round(sum(float(r.get("cost_usd") or 0.0) for r in rows), 6),
        "stories": len(rows),
    }


def _when(row: Mapping[str, Any]) -> float:
    """When a story last spent: its record's last save (its start when it has none)."""
    return float(row.get("updated_at") or row.get("started_at") or 0.0)


def day_start(now: float) -> float:
    """Midnight (UTC) of ``now``'s day."""
    return now - now % DAY_S


def week_start(now: float) -> float:
    """Monday 00:00 (UTC) of ``now``'s week (1970-01-01 was a Thursday)."""
    days = int(now // DAY_S)
    return (days - (days + 3) % 7) * DAY_S


def model_of(row: Mapping[str, Any]) -> str:
    """The models a story ran with, as one name (``worker + reviewer`` when they differ)."""
    found = row.get("models")
    models: dict[str, Any] = found if isinstance(found, dict) else {}
    names: list[str] = []
    for role in ("worker", "reviewer", *sorted(models)):
        item = models.get(role)
        name = str(item.get("model") or "") if isinstance(item, dict) else ""
        if name and name not in names:
            names.append(name)
    return " + ".join(names) or "unknown"


def budget_left(row: Mapping[str, Any]) -> list[str]:
    """What the story may still spend under its budgets (``[]``: no limit set)."""
    found = row.get("budget")
    budgets: dict[str, Any] = found if isinstance(found, dict) else {}
    out = []
    tokens = budgets.get("max_story_tokens")
    if tokens is not None:
        out.append(f"{max(int(tokens) - int(row.get('tokens') or 0), 0):,} tokens")
    cost = budgets.get("max_story_cost_usd")
    if cost is not None:
        out.append(f"${max(float(cost) - float(row.get('cost_usd') or 0.0), 0.0):.2f}")
    wall = budgets.get("max_story_wall_s")
    if wall is not None:
        left = max(float(wall) - float(row.get("wall_s") or 0.0), 0.0)
        out.append(f"{left / 60:.0f} min")
    return out


def totals(rows: Sequence[Mapping[str, Any]], now: float | None = None) -> dict[str, Any]:
    """Tokens and cost today, this week, per story and per model. A story's spend counts
    on the day its record was last saved (the records keep a story's total, not a log)."""
    now = time.time() if now is None else now
    per_model: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        per_model.setdefault(model_of(row), []).append(row)
    spent = [r for r in rows if int(r.get("tokens") or 0) or float(r.get("cost_usd") or 0.0)]
    return {
        "all": _spend(rows),
        "today": _spend(r for r in rows if _when(r) >= day_start(now)),
        "week": _spend(r for r in rows if _when(r) >= week_start(now)),
        "per_model": [{"model": m, **_spend(per_model[m])} for m in sorted(per_model)],
        "per_story": [
            {
                "key": r["key"],
                "tokens": int(r.get("tokens") or 0),
                "cost_usd": float(r.get("cost_usd") or 0.0),
                "left": budget_left(r),
            }
            for r in sorted(spent, key=lambda r: (-float(r.get("cost_usd") or 0.0), r["key"]))
        ],
    }


# ----------------------------------------------------------------------------- filters


#: The board's filters, as the query string names them: status, plan, label, text.
FILTERS = ("status", "plan", "label", "q")


def filters(query: Mapping[str, str]) -> dict[str, str]:
    """The board's filters from the query string (each cut to FILTER_CHARS)."""
    return {k: str(query.get(k) or "").strip()[:FILTER_CHARS] for k in FILTERS}


def keep(row: Mapping[str, Any], chosen: Mapping[str, str]) -> bool:
    """Whether a story passes the filters: status and plan exactly, ``label`` one of its
    labels (any case), ``q`` anywhere in its id, key or title (any case)."""
    status = "stale" if row.get("stale") else str(row.get("status") or "")
    if chosen.get("status") and chosen["status"] not in (status, str(row.get("status"))):
        return False
    if chosen.get("plan") and chosen["plan"] != str(row.get("plan") or ""):
        return False
    label = chosen.get("label", "").casefold()
    if label and label not in {str(x).casefold() for x in labels_of(row)}:
        return False
    q = chosen.get("q", "").casefold()
    if q:
        hay = " ".join(str(row.get(k) or "") for k in ("id", "key", "title")).casefold()
        return q in hay
    return True


def labels_of(row: Mapping[str, Any]) -> list[str]:
    """The row's labels (a list of text; anything else is none)."""
    found = row.get("labels")
    return [x for x in found if isinstance(x, str)] if isinstance(found, list) else []


def grouped(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows by plan ("" first: the loose stories), each plan's in the order given."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(row.get("plan") or ""), []).append(row)
    return [{"plan": p, "stories": groups[p]} for p in sorted(groups)]


def narrow(board: dict[str, Any], query: Mapping[str, str]) -> dict[str, Any]:
    """``/api/stories``: the board with only the stories that pass the query's filters (in
    ``stories`` and ``groups``), and the filters it applied."""
    chosen = filters(query)
    shown = [r for r in board["stories"] if keep(r, chosen)]
    return {**board, "stories": shown, "groups": grouped(shown), "filters": chosen}


# ----------------------------------------------------------------------------- links


def source_of(home: Path, row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``source`` block of the story's file (a GitHub issue's story), or {}."""
    ref = StoryRef(str(row.get("plan") or ""), str(row.get("id") or ""))
    try:
        state = load_state(home, ref)
    except (StateError, OSError, ValueError, TypeError):  # the row says it is unreadable
        return {}
    if state is None or not state.story_path:
        return {}
    recorded = Path(state.story_path)
    for path in (recorded, home / "inbox" / recorded.name, home / "done" / recorded.name):
        try:
            if path.is_file():
                story = parse_story(path)
                if story.id == ref.id and story.source:
                    return dict(story.source)
        except (StoryError, OSError, ValueProblem, ValueError):
            continue
    return {}


#: Where `hero watch`'s report-back records, per story, the pull request it opened or found
#: (``hero.github.report.REPORTED_FILE``, a layer above this one), relative to the home.
REPORTED_FILE = Path("runs") / "github" / "reported.json"
MAX_REPORTED_BYTES = 4 * 1024 * 1024


def pulls_of(home: Path) -> dict[str, str]:
    """``{story id: pull request URL}`` from the report-back's record; {} when it is missing,
    unreadable or not hero's."""
    try:
        data = json.loads(read_file(home / REPORTED_FILE, limit=MAX_REPORTED_BYTES))
    except (OSError, ValueProblem, ValueError):
        return {}
    pulls = data.get("pulls") if isinstance(data, dict) else None
    if not isinstance(pulls, dict):
        return {}
    return {str(k): v for k, v in pulls.items() if isinstance(v, str)}


def links(
    row: Mapping[str, Any], source: Mapping[str, Any], pull: str | None = None
) -> dict[str, str]:
    """The story's branch, pull request and issue on GitHub, where its record has them: the
    pull request's own URL when the report-back recorded it, else a search for the branch's
    pull requests (records from before it did). Only an ``https://github.com/`` URL, or one
    made from a well-formed ``owner/name``, is ever a link."""
    repo = str(source.get("repo") or "")
    branch = str(row.get("branch") or "")
    out: dict[str, str] = {}
    if not _REPO_RE.match(repo):
        return out
    base = f"https://github.com/{repo}"
    number = source.get("issue")
    url = str(source.get("url") or "")
    if url.startswith(base + "/issues/"):
        out["issue"] = url
    elif isinstance(number, int) and not isinstance(number, bool) and number > 0:
        out["issue"] = f"{base}/issues/{number}"
    if branch:
        out["branch"] = f"{base}/tree/{quote(branch, safe='/')}"
        out["pull"] = f"{base}/pulls?q={quote('is:pr head:' + branch, safe='')}"
    if pull and _PULL_RE.match(pull) and pull.startswith(base + "/pull/"):
        out["pull"] = pull
    return out


# ----------------------------------------------------------------------------- plans


def dependency_order(deps: Mapping[str, Sequence[str]]) -> list[str]:
    """The stories so that each comes after those it depends on, ties by id; the ones in
    a cycle (or below one) last, by id."""
    waiting = {n: len({d for d in ds if d in deps}) for n, ds in deps.items()}
    below: dict[str, list[str]] = {n: [] for n in deps}
    for n, ds in deps.items():
        for d in set(ds):
            if d in deps:
                below[d].append(n)
    ready = [n for n, w in waiting.items() if w == 0]
    heapq.heapify(ready)
    out: list[str] = []
    while ready:
        n = heapq.heappop(ready)
        out.append(n)
        for child in below[n]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, child)
    return out + sorted(set(deps) - set(out))


# ----------------------------------------------------------------------------- diffs


def diff_view(text: str) -> dict[str, Any]:
    """A diff's lines, each with its class (add, del, hunk, file, or ""), and its files,
    each with the anchor of its first line."""
    lines: list[dict[str, str]] = []
    files: list[dict[str, str]] = []
    for line in text.splitlines():
        anchor = ""
        m = _FILE_RE.match(line)
        if m:
            anchor = f"file-{len(files) + 1}"
            files.append({"name": m.group(2), "anchor": anchor})
            kind = "file"
        elif line.startswith(("+++", "---")):
            kind = "file"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        elif line.startswith("@@"):
            kind = "hunk"
        else:
            kind = ""
        lines.append({"kind": kind, "text": line, "anchor": anchor})
    return {"lines": lines, "files": files}


# ----------------------------------------------------------------------------- charts

NO_DATA = "no data yet"
CHART_W, CHART_H, PAD = 600, 160, 24


def bar_chart(
    title: str,
    bars: Sequence[tuple[str, Sequence[float]]],
    series: Sequence[str],
    fmt: Callable[[float], str],
) -> str:
    """An inline SVG bar chart (stacked ``series``), scaled to its box; NO_DATA when every
    value is 0. Every text in it is escaped."""
    if not bars or not any(sum(v) for _, v in bars):
        return f'<p class="idle chart-empty">{html.escape(title)}: {NO_DATA}</p>'
    top = max(sum(v) for _, v in bars) or 1.0
    step = (CHART_W - 2 * PAD) / len(bars)
    e = html.escape
    parts = [
        f'<svg class="board-chart" viewBox="0 0 {CHART_W} {CHART_H + 2 * PAD}" role="img" '
        f'aria-label="{e(title)}" xmlns="http://www.w3.org/2000/svg"><title>{e(title)}</title>',
        f'<text class="axis" x="{PAD}" y="{PAD - 8}">{e(fmt(top))}</text>',
        f'<line class="base" x1="{PAD}" x2="{CHART_W - PAD}" y1="{PAD + CHART_H}" '
        f'y2="{PAD + CHART_H}"/>',
    ]
    every = max(1, len(bars) // 8)
    for i, (label, values) in enumerate(bars):
        x = PAD + i * step
        y = float(PAD + CHART_H)
        for j, value in enumerate(values):
            h = CHART_H * value / top
            if h > 0:
                y -= h
                name = e(f"{label}: {series[j]} {fmt(value)}")
                parts.append(
                    f'<rect class="s{j}" x="{x + 1:.1f}" y="{y:.1f}" width="{max(step - 2, 1):.1f}" '
                    f'height="{h:.1f}"><title>{name}</title></rect>'
                )
        if i % every == 0:  # of many, every other one is "alt": a narrow chart leaves it out
            alt = " alt" if (i // every) % 2 and len(bars) > 6 else ""
            parts.append(
                f'<text class="axis{alt}" x="{x:.1f}" y="{PAD + CHART_H + 16}">{e(label)}</text>'
            )
    parts.append("</svg>")
    legend = "".join(
        f'<span class="key s{j}">{e(name)}</span>' for j, name in enumerate(series) if name
    )
    return f'<figure class="board-chart"><figcaption>{e(title)} {legend}</figcaption>{"".join(parts)}</figure>'


def charts(rows: Sequence[Mapping[str, Any]], now: float | None = None) -> dict[str, str]:
    """The board's charts: stories finished and failed per hour (last 24 h), spend per day
    (last 14 days)."""
    now = time.time() if now is None else now
    hour0 = now - now % HOUR_S - 23 * HOUR_S
    hours = [[0.0, 0.0] for _ in range(24)]
    for row in rows:
        done = float(row.get("finished_at") or 0.0)
        if done < hour0 or done > now + HOUR_S:
            continue
        i = min(int((done - hour0) // HOUR_S), 23)
        if row.get("status") == "passed":
            hours[i][0] += 1
        elif row.get("status") in FAILED:
            hours[i][1] += 1
    day0 = day_start(now) - 13 * DAY_S
    days = [0.0] * 14
    for row in rows:
        when = _when(row)
        if day0 <= when < day0 + 14 * DAY_S:
            days[int((when - day0) // DAY_S)] += float(row.get("cost_usd") or 0.0)
    return {
        "per_hour": bar_chart(
            "stories finished per hour (last 24 h, UTC)",
            [
                (time.strftime("%H:00", time.gmtime(hour0 + i * HOUR_S)), v)
                for i, v in enumerate(hours)
            ],
            ["passed", "failed"],
            lambda v: f"{v:g}",
        ),
        "per_day": bar_chart(
            "spend per day (last 14 days, UTC)",
            [
                (time.strftime("%m-%d", time.gmtime(day0 + i * DAY_S)), [v])
                for i, v in enumerate(days)
            ],
            [""],
            lambda v: f"${v:.2f}",
        ),
    }


def round_chart(rounds: Sequence[Mapping[str, Any]]) -> str:
    """A story's time per round."""
    return bar_chart(
        "time per round",
        [(f"r{r.get('round')}", [float(r.get("duration_s") or 0.0)]) for r in rounds],
        [""],
        lambda v: f"{v:.0f} s",
    )


# ----------------------------------------------------------------------------- the board


def view(
    board: dict[str, Any], home: Path, query: Mapping[str, str], now: float | None = None
) -> dict[str, Any]:
    """The board with its totals, charts, filters (applied to its groups) and links."""
    rows = board["stories"]
    chosen = filters(query)
    pulls = pulls_of(home)
    for row in rows:
        row["links"] = links(row, source_of(home, row), pulls.get(str(row.get("id") or "")))
        row["left"] = budget_left(row)
    shown = [r for r in rows if keep(r, chosen)]
    return {
        **board,
        "groups": grouped(shown),
        "shown": len(shown),
        "filters": chosen,
        "statuses": sorted({str(r.get("status")) for r in rows}),
        "plan_choices": sorted({str(r.get("plan")) for r in rows if r.get("plan")}),
        "label_choices": sorted({x for r in rows for x in labels_of(r)}, key=str.casefold),
        "totals": totals(rows, now),
        "charts": charts(rows, now),
    }
