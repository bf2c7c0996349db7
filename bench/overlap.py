#!/usr/bin/env python
"""hero benchmark: what flagging overlapping stories costs.

    python bench/overlap.py            # about 30 s on 2 cores
    python bench/overlap.py --quick    # fewer runs

Rows: the overlap rule over every pair of N queued stories (``hero.story.overlap.overlapping``,
what ``hero status`` and the status page compute; mixed scopes: anchored globs, a few names
at any depth, a few unscoped), per call and per pair; finding the stories running on a
repository (``hero.daemon.overlap.running_on``, what ``hero watch`` asks before it starts a
story) among the emptied lock files of 0, 1000 and 5000 finished stories, two held; and
``collect_status`` on a home with 100 queued stories, the overlap flags included. A plain
Python loop of 10^6 additions is the first row, so that a noisy neighbour shows.

A report, not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from report import Report, median, print_report, run_sections

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from hero.daemon.overlap import running_on
from hero.git.ops import TargetRepo
from hero.locks import repo_story_lock
from hero.story.overlap import Scoped, overlapping
from hero.views.status import _flag_overlaps, collect_status


def timed(fn: Callable[[], object], runs: int) -> float:
    """The median seconds of ``runs`` calls."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return median(times)


def scopes(n: int) -> list[Scoped]:
    """``n`` stories as a busy queue has them: most anchored, every 10th a name at any depth,
    every 25th unscoped."""
    out = []
    for i in range(n):
        if i % 25 == 0:
            scope: tuple[str, ...] = ()
        elif i % 10 == 0:
            scope = (f"mod{i}.py",)
        else:
            scope = (f"src/pkg{i % 40}/**", f"tests/test_{i}.py", f"docs/{i}/*.md")
        out.append(Scoped(f"s{i}", "repo", scope))
    return out


def baseline(report: Report, runs: int) -> None:
    def loop() -> None:
        x = 0
        for i in range(1_000_000):
            x += i

    report.add(
        "a Python loop of 10^6 additions (the machine's pace)", f"{timed(loop, runs) * 1e3:.0f} ms"
    )


def rule(report: Report, runs: int) -> None:
    for n in (50, 200):
        items = scopes(n)
        took = timed(lambda items=items: overlapping(items), runs)
        pairs = n * (n - 1) // 2
        report.add(f"overlapping() over {n} queued stories", f"{took * 1e3:.1f} ms")
        report.add(f"  per pair of stories ({pairs} pairs)", f"{took / pairs * 1e6:.2f} us")


def locks(report: Report, runs: int, base: Path) -> None:
    repo = base / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    common = repo / ".git"
    folder = common / "hero" / "locks"
    folder.mkdir(parents=True)
    home = base / "home"
    home.mkdir()
    target = TargetRepo(repo)
    made = 0
    with contextlib.ExitStack() as held:
        for sid in ("run-a", "run-b"):
            held.enter_context(repo_story_lock(common, sid, home))
        for count in (0, 1000, 5000):
            while made < count:
                (folder / f"done-{made}.lock").write_text("")  # a finished story's: emptied
                made += 1
            assert len(running_on(target, home)) == 2
            took = timed(lambda: running_on(target, home), runs)
            report.add(
                f"running_on(): 2 held among {count} finished stories' locks",
                f"{took * 1e3:.2f} ms",
            )


def status(report: Report, runs: int, base: Path) -> None:
    home = base / "status-home"
    (home / "config" / "providers").mkdir(parents=True)
    (home / "inbox").mkdir()
    (home / "config" / "providers" / "local.yaml").write_text(
        "name: local\nbase_url: http://127.0.0.1:9/v1\ndefault_model: m\n"
    )
    (home / "config" / "roles.yaml").write_text(
        f"target_repo: {str(base / 'repo')!r}\noverlap: serial\n"
        "worker:\n  provider: local\nreviewer:\n  provider: local\n"
    )
    for item in scopes(100):
        scope = "[" + ", ".join(f'"{g}"' for g in item.scope) + "]"
        (home / "inbox" / f"{item.key}.md").write_text(
            f"---\nid: {item.key}\ntitle: t\nscope: {scope}\n---\n\n## Goal\nx\n"
        )
    took = timed(lambda: collect_status(home), max(3, runs // 4))
    report.add(
        "collect_status(): 100 queued stories, overlap flags included", f"{took * 1e3:.0f} ms"
    )
    shown = collect_status(home)
    target = TargetRepo(base / "repo")
    flags = timed(
        lambda: _flag_overlaps(target, home, "serial", shown["stories"], shown["queue"]),
        max(3, runs // 4),
    )
    report.add("  of it, the overlap flags (_flag_overlaps)", f"{flags * 1e3:.0f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    args = parser.parse_args()
    runs = 5 if args.quick else 20
    started = time.monotonic()
    report = Report()
    with tempfile.TemporaryDirectory(prefix="hero-bench-overlap-") as tmp:
        base = Path(tmp)
        run_sections(
            report,
            [
                ("baseline", lambda: baseline(report, runs)),
                ("the rule", lambda: rule(report, runs)),
                ("what runs", lambda: locks(report, runs, base)),
                ("status", lambda: status(report, runs, base)),
            ],
        )
    print_report(report, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
