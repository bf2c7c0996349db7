"""The bench pages of ``hero serve``: `hero bench run`'s output folders (``/bench``) and one
folder's report (``/bench/NAME``), with their JSON (``/api/bench``, ``/api/bench/NAME``).

The folders are those the home records (:mod:`hero.evals.folders`); a folder's report is
`hero bench report`'s own (:func:`hero.evals.report.load` and :func:`~hero.evals.report.build`,
its table cells :func:`~hero.evals.report.rows`): the page and ``hero bench report DIR
--json`` show the same numbers, computed once. The charts are drawn here as inline SVG from
that report (no script, no other origin).

Everything read is hostile input: the record, a folder that is gone or became a link to
elsewhere, results files that are torn, not JSON, huge or not regular files. Each becomes a
message on the page (never a 500), and every text is escaped and redacted.
"""

from __future__ import annotations

import html
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hero.errors import HeroError
from hero.evals.folders import NAME_RE, Folder, folders_path, read_folders
from hero.evals.report import COLUMNS, Report, build, load, notes, rows
from hero.evals.stats import ALPHA
from hero.web.data import Site, signature

#: The results and reports a page reads from a folder's top, in bytes, at most (`hero bench
#: report` reads more; the page is served from a daemon's process).
MAX_READ_BYTES = 64 << 20
#: Entries of a folder's top looked at for its page's version.
MAX_TOP_ENTRIES = 10_000
CHART_NAME_CHARS = 48


@dataclass(frozen=True)
class Shown:
    """One folder as its page shows it: its report, or why there is none."""

    folder: Folder
    report: Report | None
    problem: str | None


# ----------------------------------------------------------------------------- the list


def listing_signature(site: Site) -> str:
    """The list's version: the record, and each recorded folder's own entry (gone, swapped)."""
    folders = read_folders(site.home).folders
    return signature(folders_path(site.home), [Path(f.path) for f in folders])


def listing(site: Site) -> dict[str, Any]:
    """The recorded folders, newest first, each with what is wrong with it (None: fine)."""
    record = read_folders(site.home)
    folders = [{**f.to_json(), "problem": folder_problem(f)} for f in record.folders]
    return dict(site.clean({"folders": folders, "problems": list(record.problems)}))


def folder_problem(folder: Folder) -> str | None:
    """Why the folder is not read: gone, not a folder, or a link (on its way) to elsewhere."""
    path = folder.path
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return f"{path}: no longer exists"
    except OSError as exc:
        return f"{path}: cannot be read: {exc.strerror or exc}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path}: is a symlink now (to {_link(path)}); not followed"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path}: not a folder"
    real = os.path.realpath(path)
    if real != path:
        return f"{path}: a symlink on its way leads elsewhere ({real}); not followed"
    return None


# ----------------------------------------------------------------------------- one folder


def find(site: Site, name: str) -> Folder | None:
    if not NAME_RE.match(name):
        return None
    return read_folders(site.home).find(name)


def folder_signature(site: Site, folder: Folder) -> str:
    """The page's version: the record, and the size and mtime of the folder's top files."""
    return signature(folders_path(site.home), _top(Path(folder.path)), folder.path)


def show(site: Site, folder: Folder) -> Shown:
    """The folder's report, as `hero bench report` makes it, or the message saying why not."""
    problem = folder_problem(folder)
    if problem is not None:
        return Shown(folder, None, problem)
    path = Path(folder.path)
    problem = _too_large(path)
    if problem is not None:
        return Shown(folder, None, problem)
    try:
        return Shown(folder, build(str(path), load(path)), None)
    except HeroError as exc:
        return Shown(folder, None, str(exc))
    except (OSError, ValueError, RecursionError, MemoryError) as exc:
        # what hero's readers did not foresee in a hostile file is still a message, not a 500
        return Shown(folder, None, f"{path}: cannot be read: {type(exc).__name__}: {exc}")


def api(site: Site, shown: Shown) -> dict[str, Any]:
    """``hero bench report DIR --json``'s data (redacted), or ``{"error": ...}``."""
    if shown.report is None:
        return dict(site.clean({"error": shown.problem or "no report"}))
    return dict(site.clean(shown.report.to_json()))


def page(site: Site, shown: Shown) -> dict[str, Any]:
    """What the folder's page shows: the report's table cells (`hero bench report`'s text),
    its notes, its paired comparisons and its two charts; every text redacted. The charts
    are markup made here, their texts escaped."""
    out: dict[str, Any] = {"folder": shown.folder.to_json(), "problem": shown.problem}
    report = shown.report
    if report is not None:
        cells = [[site.redactor.redact(c) for c in row] for row in rows(report)]
        out.update(
            columns=list(COLUMNS),
            rows=cells,
            notes=[n.strip() for n in notes(report)],
            alpha=ALPHA,
            comparisons=[
                {
                    **c.to_json(),
                    "p": f"{c.p_value:.4g}",
                }
                for c in report.comparisons
            ],
            rate_svg=rate_chart(report, cells),
            cost_svg=cost_chart(report, cells),
        )
    return dict(site.clean(out))


# ----------------------------------------------------------------------------- the charts

_W, _ROW, _TOP = 400, 58, 22
_BAR_Y, _BAR_H = 38, 12
#: A configuration's name in a chart, in characters (the table has it whole).


def _cell(row: list[str], column: str) -> str:
    return row[COLUMNS.index(column)]


def _svg_open(label: str, rows_n: int, top: int) -> tuple[list[str], int]:
    height = top + _ROW * rows_n + 6
    return [
        f'<svg class="chart" role="img" aria-label="{html.escape(label)}" '
        f'viewBox="0 0 {_W} {height}" preserveAspectRatio="xMinYMin meet">'
    ], height


def _label(y: float, name: str, value: str) -> str:
    e = html.escape
    shown = name if len(name) <= CHART_NAME_CHARS else name[: CHART_NAME_CHARS - 1] + "\u2026"
    # the name on a line of its own, the value under it: a long name never runs into it
    return (
        f'<text class="name" x="2" y="{y + 14:.0f}">{e(shown)}</text>'
        f'<text class="value" x="2" y="{y + 31:.0f}">{e(value)}</text>'
    )


def rate_chart(report: Report, cells: list[list[str]]) -> str:
    """Each configuration's resolve rate as a bar, its 95% interval as a whisker over it."""
    parts, height = _svg_open(
        "resolve rate per configuration, with 95% intervals", len(cells), _TOP
    )
    plot = _W - 4
    for tick in range(0, 101, 25):
        x = 2 + plot * tick / 100
        anchor = "start" if tick == 0 else "end" if tick == 100 else "middle"
        parts.append(
            f'<line class="grid" x1="{x:.1f}" y1="{_TOP - 4}" x2="{x:.1f}" y2="{height - 4}"/>'
            f'<text class="tick" x="{x:.1f}" y="{_TOP - 8}" text-anchor="{anchor}">{tick}%</text>'
        )
    for i, (summary, row) in enumerate(zip(report.configurations, cells, strict=True)):
        y = _TOP + i * _ROW
        rate = summary.resolve_rate
        interval = _cell(row, "95% interval")
        x_low, x_high = (2 + plot * v for v in summary.ci95)
        mid = y + _BAR_Y + _BAR_H / 2
        name = _cell(row, "configuration")
        parts.append(
            f"<g><title>{html.escape(name)}: {html.escape(_cell(row, 'resolved'))} of "
            f"{html.escape(_cell(row, 'tasks'))} resolved, 95% interval "
            f"{html.escape(interval)}</title>"
            + _label(y, name, f"{_cell(row, 'rate')} ({interval})")
            + f'<rect class="bar" x="2" y="{y + _BAR_Y}" width="{plot * rate:.1f}" '
            f'height="{_BAR_H}"/>'
            f'<line class="ci" x1="{x_low:.1f}" y1="{mid:.1f}" x2="{x_high:.1f}" y2="{mid:.1f}"/>'
            f'<line class="ci" x1="{x_low:.1f}" y1="{y + _BAR_Y - 2}" x2="{x_low:.1f}" '
            f'y2="{y + _BAR_Y + _BAR_H + 2}"/>'
            f'<line class="ci" x1="{x_high:.1f}" y1="{y + _BAR_Y - 2}" x2="{x_high:.1f}" '
            f'y2="{y + _BAR_Y + _BAR_H + 2}"/></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def cost_chart(report: Report, cells: list[list[str]]) -> str:
    """Each configuration's cost per resolved task as a bar (scaled to the largest); a
    configuration with none (no task resolved, or SWE-bench's, whose cost is unknown) says so."""
    costs = [s.cost_per_resolved for s in report.configurations]
    known = [c for c in costs if c is not None]
    if not known:
        return ""
    most = max(known) or 1.0
    parts, _ = _svg_open("cost per resolved task per configuration", len(cells), 4)
    plot = _W - 4
    for i, (summary, row, cost) in enumerate(zip(report.configurations, cells, costs, strict=True)):
        y = 4 + i * _ROW
        name = _cell(row, "configuration")
        if cost is None:
            why = "no task resolved" if summary.source == "hero" else "cost unknown"
            parts.append(f"<g>{_label(y, name, why)}</g>")
            continue
        value = f"{_cell(row, 'cost/resolved')} per resolved ({_cell(row, 'cost/task')} per task)"
        parts.append(
            f"<g><title>{html.escape(name)}: {html.escape(value)}</title>"
            + _label(y, name, value)
            + f'<rect class="bar cost" x="2" y="{y + _BAR_Y}" '
            f'width="{plot * cost / most:.1f}" height="{_BAR_H}"/></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


# ----------------------------------------------------------------------------- helpers


def _top(folder: Path) -> list[Path]:
    """The results and JSON files at the folder's top (bounded), for the page's version."""
    found: list[Path] = []
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_TOP_ENTRIES:
                    break
                if entry.name.endswith((".jsonl", ".json")):
                    found.append(Path(entry.path))
    except OSError:
        return found
    return sorted(found)


def _too_large(folder: Path) -> str | None:
    """Why the folder's results and reports are not read for a page: more than it reads."""
    total = 0
    for path in _top(folder):
        if not (path.name.startswith("results-") or path.name.endswith(".json")):
            continue  # predictions-NAME.jsonl (the patches) are not read
        try:
            total += path.lstat().st_size
        except OSError:
            continue
    if total > MAX_READ_BYTES:
        return (
            f"{folder}: its results and reports are {total // (1 << 20)} MB, more than the "
            f"page reads ({MAX_READ_BYTES // (1 << 20)} MB); run `hero bench report {folder}`"
        )
    return None


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"
