"""`hero bench report DIR [--json] [--html FILE] [--swebench FILE ...]` (docs/bench.md).

Reads every ``results-NAME.jsonl`` in DIR (configuration NAME) and the SWE-bench harness's
outputs found there or given with ``--swebench``, and reports per configuration the resolve
rate with a 95% Wilson interval, cost, time, tokens and rounds per task, and for every two
configurations a paired comparison on the tasks both ran, with an exact McNemar test.

A task run more than once (``hero bench run --runs N``) counts as resolved when a strict
majority of its runs resolved it (a tie does not): the interval and the paired comparison
need one yes or no per task. The share of all task-runs resolved is reported beside it.
Cost, time, tokens and rounds are means over task-runs; "per resolved task" is the total
over all runs divided by the task-runs resolved.

SWE-bench's harness writes a run's report as ``<model>.<run_id>.json`` (``resolved_ids``,
``unresolved_ids``, ``error_ids``, ``empty_patch_ids``, ...) and one ``report.json`` per
instance (``{instance_id: {"resolved": bool, ...}}``, under
``logs/run_evaluation/<run_id>/<model>/<instance_id>/``). Both become configurations named
``swebench:<model>.<run_id>`` with one run per task and unknown cost, time, tokens and rounds.
Found in DIR: its top-level ``*.json`` files, and ``report.json`` files below it in a folder
named as their one instance (not under ``homes/`` and ``work/``, `hero bench run`'s own,
where workers write); given with ``--swebench``: any file of either shape.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations
from pathlib import Path
from typing import Any

from hero.errors import UsageError
from hero.evals.results import Result, read_results
from hero.evals.stats import ALPHA, mcnemar_exact, wilson

#: Task names shown per side of a paired comparison in the text report (JSON has them all).
TEXT_NAMES = 10
#: A SWE-bench JSON file larger than this is not read (it is read whole).
MAX_JSON_BYTES = 256 * 1024 * 1024
#: Folders of a `hero bench run` output that are hero's own (the worker writes in work/).
HERO_FOLDERS = ("homes", "work")
#: The harness report's id lists that hold a task's outcome, and the status each gives.
SWEBENCH_LISTS = (
    ("resolved_ids", "resolved"),
    ("unresolved_ids", "unresolved"),
    ("error_ids", "error"),
    ("empty_patch_ids", "empty_patch"),
)


class ReportError(UsageError):
    """What `hero bench report` cannot read: names the folder or file, and the line or key."""


@dataclass(frozen=True)
class Configuration:
    """One configuration's results, from hero's results file or SWE-bench's outputs."""

    name: str
    source: str
    """``hero`` (a results file: cost, time, tokens and rounds known) or ``swebench``."""
    files: tuple[str, ...]
    results: tuple[Result, ...]

    @property
    def measured(self) -> bool:
        return self.source == "hero"

    def outcomes(self) -> dict[str, bool]:
        """Each task's outcome: resolved by a strict majority of its runs."""
        return dict(self._outcomes)

    @cached_property
    def _outcomes(self) -> dict[str, bool]:
        # made once: every paired comparison of this configuration asks for it
        runs: dict[str, list[bool]] = {}
        for result in self.results:
            runs.setdefault(result.instance_id, []).append(result.resolved)
        return {task: 2 * sum(seen) > len(seen) for task, seen in runs.items()}


@dataclass(frozen=True)
class Summary:
    name: str
    source: str
    tasks: int
    runs: int
    """The most runs any task had."""
    task_runs: int
    resolved: int
    """Tasks resolved (by a majority of their runs)."""
    resolve_rate: float
    ci95: tuple[float, float]
    runs_resolved: int
    run_resolve_rate: float
    cost_per_task: float | None
    cost_per_resolved: float | None
    wall_s_per_task: float | None
    wall_s_per_resolved: float | None
    tokens_per_task: float | None
    rounds_per_task: float | None
    statuses: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "tasks": self.tasks,
            "runs": self.runs,
            "task_runs": self.task_runs,
            "resolved": self.resolved,
            "resolve_rate": self.resolve_rate,
            "ci95": list(self.ci95),
            "runs_resolved": self.runs_resolved,
            "run_resolve_rate": self.run_resolve_rate,
            "cost_per_task": self.cost_per_task,
            "cost_per_resolved": self.cost_per_resolved,
            "wall_s_per_task": self.wall_s_per_task,
            "wall_s_per_resolved": self.wall_s_per_resolved,
            "tokens_per_task": self.tokens_per_task,
            "rounds_per_task": self.rounds_per_task,
            "statuses": dict(self.statuses),
        }


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    tasks: int
    """Tasks both configurations ran."""
    both: int
    neither: int
    a_only: tuple[str, ...]
    b_only: tuple[str, ...]
    p_value: float
    significant: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "tasks": self.tasks,
            "both": self.both,
            "neither": self.neither,
            "a_only": list(self.a_only),
            "b_only": list(self.b_only),
            "p_value": self.p_value,
            "significant": self.significant,
        }


@dataclass(frozen=True)
class Report:
    folder: str
    configurations: tuple[Summary, ...]
    comparisons: tuple[Comparison, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "dir": self.folder,
            "alpha": ALPHA,
            "configurations": [s.to_json() for s in self.configurations],
            "comparisons": [c.to_json() for c in self.comparisons],
        }


def main(args: argparse.Namespace) -> int:
    folder = Path(args.out)
    configurations = load(folder, [Path(p) for p in getattr(args, "swebench", None) or []])
    report = build(str(folder), configurations)
    if args.html:
        write_html(Path(args.html), report)
    if args.json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render_text(report))
        if args.html:
            sys.stdout.write(f"\nHTML page: {args.html}\n")
    return 0


# --- reading ---------------------------------------------------------------------------


def load(folder: Path, swebench: Iterable[Path] = ()) -> list[Configuration]:
    """hero's results files in ``folder``, then SWE-bench outputs found in it or given."""
    if not folder.exists():
        raise ReportError(f"{folder}: no such folder (give a `hero bench run --out` folder)")
    if not folder.is_dir():
        raise ReportError(f"{folder}: not a folder (give a `hero bench run --out` folder)")
    configurations: list[Configuration] = []
    for path in sorted(folder.glob("results-*.jsonl")):
        name = path.name[len("results-") : -len(".jsonl")]
        if path.is_symlink() or not path.is_file():  # a FIFO would block its reader
            raise ReportError(f"{path}: not a regular file (a link, a FIFO?); not read")
        results = _last_of_each(read_results(path))
        for r in results:
            for key, value in (("cost_usd", r.cost_usd), ("wall_s", r.wall_s)):
                if not math.isfinite(value) or value < 0:
                    raise ReportError(
                        f"{path}: {r.instance_id} run {r.run}: {key}: expected a number of "
                        f"at least 0; found {value!r}"
                    )
        configurations.append(Configuration(_printable(name), "hero", (str(path),), results))

    found: dict[str, list[tuple[Path, list[Result]]]] = {}
    for path in _swebench_candidates(folder):
        read = read_swebench(path, strict=False)
        if read is not None:
            found.setdefault(read[0], []).append((path, read[1]))
    for path in swebench:
        read = read_swebench(path, strict=True)
        assert read is not None
        found.setdefault(read[0], []).append((path, read[1]))
    for name in sorted(found):
        files = tuple(dict.fromkeys(str(p) for p, _ in found[name]))
        merged = _last_of_each(r for _, results in found[name] for r in results)
        configurations.append(Configuration(_printable(name), "swebench", files, merged))

    if not configurations:
        raise ReportError(
            f"{folder}: no results-NAME.jsonl (from `hero bench run --out {folder}`) and no "
            "SWE-bench report found; give SWE-bench reports with --swebench FILE"
        )
    return configurations


def read_swebench(path: Path, strict: bool) -> tuple[str, list[Result]] | None:
    """A SWE-bench harness report or per-instance ``report.json`` as (name, results). A file
    of neither shape is ReportError when ``strict`` (given by the user), else None."""
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise ReportError(f"{path}: larger than {MAX_JSON_BYTES // 2**20} MB; not read")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: cannot be read: {exc}") from None
    except ValueError as exc:
        if not strict:
            return None
        raise ReportError(f"{path}: not JSON: {exc}") from None
    if isinstance(data, dict) and "resolved_ids" in data:
        return _swebench_name(path, harness=True), _harness_results(path, data)
    if isinstance(data, dict) and data and all(isinstance(v, dict) for v in data.values()):
        # found, not given: only the harness's layout, <instance_id>/report.json of that one
        laid_out = strict or (path.name == "report.json" and list(data) == [path.parent.name])
        if laid_out and all("resolved" in v for v in data.values()):
            return _swebench_name(path, harness=False), _instance_results(path, data)
    if strict:
        raise ReportError(
            f"{path}: neither a SWE-bench harness report (with resolved_ids) nor a per-instance "
            'report.json ({instance_id: {"resolved": ...}})'
        )
    return None


def _harness_results(path: Path, data: dict[str, Any]) -> list[Result]:
    out: list[Result] = []
    for key, status in SWEBENCH_LISTS:
        ids = data.get(key, [])
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise ReportError(f"{path}: {key}: expected a list of instance ids")
        out.extend(_unmeasured(i, status == "resolved", status) for i in ids)
    return out


def _instance_results(path: Path, data: dict[str, Any]) -> list[Result]:
    out: list[Result] = []
    for instance_id, entry in data.items():
        resolved = entry["resolved"]
        if not isinstance(resolved, bool) or not instance_id:
            raise ReportError(f"{path}: {instance_id!r}: resolved: expected true or false")
        out.append(_unmeasured(instance_id, resolved, "resolved" if resolved else "unresolved"))
    return out


def _unmeasured(instance_id: str, resolved: bool, status: str) -> Result:
    return Result(instance_id, 1, resolved, 0, 0, 0.0, 0.0, status)


def _swebench_name(path: Path, harness: bool) -> str:
    if harness:
        return f"swebench:{path.stem}"
    # logs/run_evaluation/<run_id>/<model>/<instance_id>/report.json: named as the harness
    # names the run's report, <model>.<run_id>, so both of one run are one configuration.
    parts = path.resolve().parts
    if len(parts) >= 5:
        return f"swebench:{parts[-3]}.{parts[-4]}"
    return f"swebench:{path.parent.name or path.stem}"


def _swebench_candidates(folder: Path) -> list[Path]:
    """The JSON files at the folder's top, and per-instance ``report.json`` files below it.

    Not below ``homes/`` and ``work/`` at the top (`hero bench run`'s own: the task-runs'
    repositories, which a worker writes) nor in any ``.git``; and a per-instance report only
    where the harness puts it, in a folder named as its one instance (checked on reading)."""
    top = [p for p in sorted(folder.glob("*.json")) if p.is_file() and not p.is_symlink()]
    below: list[Path] = []
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        dirs[:] = sorted(
            d for d in dirs if d != ".git" and not (here == folder and d in HERO_FOLDERS)
        )
        if here != folder and "report.json" in files:
            path = here / "report.json"
            if path.is_file() and not path.is_symlink():
                below.append(path)
    return top + below


def _last_of_each(results: Iterable[Result]) -> tuple[Result, ...]:
    """One result per task and run: a later line for the same task and run replaces one before."""
    kept: dict[tuple[str, int], Result] = {}
    for result in results:
        kept[(result.instance_id, result.run)] = result
    return tuple(kept.values())


# --- the numbers -----------------------------------------------------------------------


def build(folder: str, configurations: list[Configuration]) -> Report:
    summaries = tuple(summarise(c) for c in configurations)
    comparisons = tuple(compare(a, b) for a, b in combinations(configurations, 2))
    return Report(folder, summaries, comparisons)


def summarise(config: Configuration) -> Summary:
    results = config.results
    outcomes = config.outcomes()
    tasks, task_runs = len(outcomes), len(results)
    resolved = sum(outcomes.values())
    runs_resolved = sum(r.resolved for r in results)
    per_task: dict[str, int] = {}
    statuses: dict[str, int] = {}
    for r in results:
        per_task[r.instance_id] = per_task.get(r.instance_id, 0) + 1
        statuses[r.status or "?"] = statuses.get(r.status or "?", 0) + 1

    def mean(total: float) -> float | None:
        return total / task_runs if config.measured and task_runs else None

    def per_resolved(total: float) -> float | None:
        return total / runs_resolved if config.measured and runs_resolved else None

    cost = sum(r.cost_usd for r in results)
    wall = sum(r.wall_s for r in results)
    return Summary(
        name=config.name,
        source=config.source,
        tasks=tasks,
        runs=max(per_task.values(), default=0),
        task_runs=task_runs,
        resolved=resolved,
        resolve_rate=resolved / tasks if tasks else 0.0,
        ci95=wilson(resolved, tasks),
        runs_resolved=runs_resolved,
        run_resolve_rate=runs_resolved / task_runs if task_runs else 0.0,
        cost_per_task=mean(cost),
        cost_per_resolved=per_resolved(cost),
        wall_s_per_task=mean(wall),
        wall_s_per_resolved=per_resolved(wall),
        tokens_per_task=mean(sum(r.tokens for r in results)),
        rounds_per_task=mean(sum(r.rounds for r in results)),
        statuses=dict(sorted(statuses.items())),
    )


def compare(a: Configuration, b: Configuration) -> Comparison:
    """A and B on the tasks both ran: each one's wins and the exact McNemar p-value."""
    outcome_a, outcome_b = a.outcomes(), b.outcomes()
    common = sorted(set(outcome_a) & set(outcome_b))
    a_only = tuple(t for t in common if outcome_a[t] and not outcome_b[t])
    b_only = tuple(t for t in common if outcome_b[t] and not outcome_a[t])
    both = sum(1 for t in common if outcome_a[t] and outcome_b[t])
    p = mcnemar_exact(len(a_only), len(b_only))
    return Comparison(
        a=a.name,
        b=b.name,
        tasks=len(common),
        both=both,
        neither=len(common) - both - len(a_only) - len(b_only),
        a_only=a_only,
        b_only=b_only,
        p_value=p,
        significant=p < ALPHA,
    )


# --- text --------------------------------------------------------------------------------

COLUMNS = (
    "configuration",
    "tasks",
    "runs",
    "resolved",
    "rate",
    "95% interval",
    "cost/task",
    "cost/resolved",
    "time/task",
    "time/resolved",
    "tokens/task",
    "rounds/task",
)


def rows(report: Report) -> list[list[str]]:
    """The table's cells, one row per configuration (text and HTML share them)."""
    out = []
    for s in report.configurations:
        out.append(
            [
                s.name,
                str(s.tasks),
                str(s.runs),
                str(s.resolved),
                _percent(s.resolve_rate),
                f"{_percent(s.ci95[0])} - {_percent(s.ci95[1])}",
                _money(s.cost_per_task),
                _money(s.cost_per_resolved),
                _seconds(s.wall_s_per_task),
                _seconds(s.wall_s_per_resolved),
                _number(s.tokens_per_task, 0),
                _number(s.rounds_per_task, 1),
            ]
        )
    return out


def render_text(report: Report) -> str:
    table = [list(COLUMNS), *rows(report)]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    lines = []
    for number, row in enumerate(table):
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    lines.extend(notes(report))
    if report.comparisons:
        lines.append("")
        lines.append(
            "Paired comparison (tasks both ran; exact McNemar test on the tasks only one resolves):"
        )
        for c in report.comparisons:
            verdict = "significant" if c.significant else "not significant"
            lines.append(
                f"  {c.a} vs {c.b}: {c.tasks} common tasks, both resolve {c.both}, neither "
                f"{c.neither}; p = {c.p_value:.4g}, {verdict} at {ALPHA}"
            )
            lines.append(f"    only {c.a} ({len(c.a_only)}): {_names(c.a_only)}")
            lines.append(f"    only {c.b} ({len(c.b_only)}): {_names(c.b_only)}")
    return "\n".join(lines) + "\n"


def notes(report: Report) -> list[str]:
    """The lines said under the table: how runs and unknown costs were counted."""
    out: list[str] = []
    if any(s.runs > 1 for s in report.configurations):
        out.append(
            "A task run several times counts as resolved when most of its runs resolved it "
            "(a tie does not)."
        )
        for s in report.configurations:
            if s.runs > 1:
                out.append(
                    f"  {s.name}: task-runs resolved {s.runs_resolved} of {s.task_runs} "
                    f"({_percent(s.run_resolve_rate)})"
                )
    if any(s.source == "swebench" for s in report.configurations):
        out.append("swebench:* rows come from SWE-bench's harness: cost, time, tokens unknown (-).")
    out.append(
        "Cost, time, tokens and rounds are means per task-run; per resolved = total / task-runs resolved."
    )
    return out


def _names(names: tuple[str, ...]) -> str:
    if not names:
        return "-"
    shown = ", ".join(_printable(n) for n in names[:TEXT_NAMES])
    more = len(names) - TEXT_NAMES
    return f"{shown} and {more} more" if more > 0 else shown


def _printable(name: str) -> str:
    """A name from a results file as text for a terminal: no control characters (an
    instance id could hold escape sequences)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


# --- HTML --------------------------------------------------------------------------------


def write_html(path: Path, report: Report) -> None:
    try:
        path.write_text(render_html(report), encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"--html {path}: cannot be written: {exc}") from None


def render_html(report: Report) -> str:
    """One self-contained page: inline style, an SVG chart drawn here, no script, no link
    out. Every text from the results (names, ids, statuses) is escaped."""
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in row) + "</tr>" for row in rows(report)
    )
    pairs = "".join(
        "<tr>"
        f"<td>{e(c.a)}</td><td>{e(c.b)}</td><td>{c.tasks}</td><td>{c.both}</td>"
        f'<td>{c.neither}</td><td class="names">{len(c.a_only)}: {e(_all(c.a_only))}</td>'
        f'<td class="names">{len(c.b_only)}: {e(_all(c.b_only))}</td><td>{c.p_value:.4g}</td>'
        f"<td>{'yes' if c.significant else 'no'}</td></tr>"
        for c in report.comparisons
    )
    said = "".join(f"<p>{e(n.strip())}</p>" for n in notes(report))
    pair_table = (
        "<h2>Paired comparison</h2><p>On the tasks both configurations ran; the p-value is the "
        f"exact McNemar test on the tasks only one resolves, significant below {ALPHA}.</p>"
        "<table><tr><th>A</th><th>B</th><th>common tasks</th><th>both</th><th>neither</th>"
        "<th>only A</th><th>only B</th><th>p</th><th>significant</th></tr>"
        f"{pairs}</table>"
        if report.comparisons
        else ""
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>hero bench report: {e(report.folder)}</title><style>"
        "body{font-family:sans-serif;margin:2em;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right;vertical-align:top;"
        "white-space:nowrap}"
        ".names{white-space:normal;text-align:left;min-width:16em;max-width:32em}"
        "td:first-child,th:first-child{text-align:left}"
        "</style></head><body>"
        f"<h1>hero bench report</h1><p>{e(report.folder)}</p>"
        "<h2>Resolve rate (95% Wilson interval)</h2>"
        f"{svg_chart(report)}"
        f"<table><tr>{head}</tr>{body}</table>{said}{pair_table}"
        "</body></html>\n"
    )


def svg_chart(report: Report) -> str:
    """Horizontal bars of the resolve rates, with the 95% interval as whiskers."""
    e = html.escape
    label_w, plot_w, row_h, top = 220, 420, 30, 24
    height = top + row_h * len(report.configurations) + 10
    width = label_w + plot_w + 70
    parts = [
        f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="sans-serif" font-size="12">'
    ]
    for tick in range(0, 101, 25):
        x = label_w + plot_w * tick / 100
        parts.append(
            f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 10}" stroke="#ddd"/>'
            f'<text x="{x:.1f}" y="{top - 8}" text-anchor="middle">{tick}%</text>'
        )
    for i, s in enumerate(report.configurations):
        y = top + i * row_h
        mid = y + row_h / 2
        name = s.name if len(s.name) <= 30 else s.name[:29] + "\u2026"
        low, high = (label_w + plot_w * v for v in s.ci95)
        colour = "#4a7bd0" if s.source == "hero" else "#9a9a9a"
        parts.append(
            f"<g><title>{e(s.name)}: {s.resolved} of {s.tasks}, "
            f"{_percent(s.ci95[0])} - {_percent(s.ci95[1])}</title>"
            f'<text x="{label_w - 8}" y="{mid + 4:.1f}" text-anchor="end">{e(name)}</text>'
            f'<rect x="{label_w}" y="{y + 6}" width="{plot_w * s.resolve_rate:.1f}" '
            f'height="{row_h - 12}" fill="{colour}"/>'
            f'<line x1="{low:.1f}" y1="{mid:.1f}" x2="{high:.1f}" y2="{mid:.1f}" stroke="#222"/>'
            f'<line x1="{low:.1f}" y1="{y + 9}" x2="{low:.1f}" y2="{y + row_h - 9}" stroke="#222"/>'
            f'<line x1="{high:.1f}" y1="{y + 9}" x2="{high:.1f}" y2="{y + row_h - 9}" '
            'stroke="#222"/>'
            f'<text x="{label_w + plot_w + 8}" y="{mid + 4:.1f}">{_percent(s.resolve_rate)}</text>'
            "</g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _all(names: tuple[str, ...]) -> str:
    return ", ".join(names) if names else "-"
