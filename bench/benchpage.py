#!/usr/bin/env python
"""hero benchmark: what the status page's bench report costs (``/bench/NAME``).

    python bench/benchpage.py            # about 30 s on 2 cores
    python bench/benchpage.py --quick    # fewer runs, the smaller folders

Rows, for output folders of 2 configurations x 100 tasks, 4 x 1,000 and 8 x 5,000 (results
files as `hero bench run` writes them, one run each, recorded in a home as it records them):
the page rendered afresh (reading the results files, `hero bench report`'s numbers, the
charts), the JSON (``/api/bench/NAME``), and the poll of an unchanged page (its ETag: a 304,
as the page's script asks every 2 s); then ``/bench`` with 500 recorded folders. Through the
real Starlette app in this process (Starlette's TestClient), no server, no network.

A report, not a test: it prints a table and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from report import Report, env_line, median, print_report, run_sections

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from starlette.testclient import TestClient

from hero.evals.folders import record_folder
from hero.evals.results import Result, append_line, results_path
from hero.web.app import create_app

#: Targets: a page a person opens, and a poll that 50 open tabs repeat every 2 s.
PAGE_TARGET_S = {100: 0.2, 1_000: 0.5, 5_000: 2.0}
POLL_TARGET_S = 0.01


def timed(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return median(times)


def folder(base: Path, home: Path, configs: int, tasks: int) -> str:
    out = base / f"out-{configs}x{tasks}"
    out.mkdir()
    for c in range(configs):
        lines = []
        for t in range(tasks):
            resolved = (t * (c + 3)) % 7 < 3
            r = Result(f"repo__task-{t}", 1, resolved, 2, 15_000, 0.03, 45.0, "passed")
            lines.append(r)
        path = results_path(out, f"config-{c}")
        for r in lines:
            append_line(path, r.to_json())
    return record_folder(home, out, [f"config-{c}" for c in range(configs)]).name


def page(report: Report, base: Path, home: Path, configs: int, tasks: int, runs: int) -> None:
    name = folder(base, home, configs, tasks)
    client = TestClient(create_app(home, token=None), base_url="http://127.0.0.1")

    def fresh() -> None:
        # a new app each time: nothing kept from the last answer
        c = TestClient(create_app(home, token=None), base_url="http://127.0.0.1")
        assert c.get(f"/bench/{name}").status_code == 200

    took = timed(fresh, runs)
    target = PAGE_TARGET_S[tasks]
    report.add(
        f"/bench/{name} ({configs} x {tasks:,} task-runs) afresh",
        f"{took * 1e3:.0f} ms",
        f"<= {target * 1e3:.0f} ms",
        took <= target,
    )
    took = timed(lambda: client.get(f"/api/bench/{name}"), runs)
    report.add(f"  /api/bench/{name}", f"{took * 1e3:.0f} ms")
    etag = client.get(f"/bench/{name}").headers["etag"]

    def poll() -> None:
        assert client.get(f"/bench/{name}", headers={"If-None-Match": etag}).status_code == 304

    took = timed(poll, runs * 5)
    report.add(
        "  the poll of the unchanged page (304)",
        f"{took * 1e3:.1f} ms",
        f"<= {POLL_TARGET_S * 1e3:.0f} ms",
        took <= POLL_TARGET_S,
    )


def listing(report: Report, base: Path, runs: int) -> None:
    home = base / "many"
    (home / "runs").mkdir(parents=True)
    for n in range(500):
        out = base / "many-out" / f"f{n}"
        out.mkdir(parents=True)
        record_folder(home, out, ["a", "b"])
    client = TestClient(create_app(home, token=None), base_url="http://127.0.0.1")
    took = timed(lambda: client.get("/bench"), runs)
    report.add("/bench with 500 recorded folders", f"{took * 1e3:.0f} ms", "<= 500 ms", took <= 0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, the smaller folders")
    args = parser.parse_args()
    runs = 3 if args.quick else 7
    sizes = [(2, 100), (4, 1_000)] if args.quick else [(2, 100), (4, 1_000), (8, 5_000)]
    print(env_line("starlette", "jinja2"))
    started = time.monotonic()
    report = Report()
    with tempfile.TemporaryDirectory(prefix="hero-bench-benchpage-") as tmp:
        base = Path(tmp)
        home = base / "home"
        (home / "runs").mkdir(parents=True)
        run_sections(
            report,
            [
                *(
                    (f"{c} x {t}", lambda c=c, t=t: page(report, base, home, c, t, runs))
                    for c, t in sizes
                ),
                ("the list", lambda: listing(report, base, runs)),
            ],
        )
    report.notes.append(
        "afresh: a new app per request (no answer kept); each page reads every results file "
        "of its folder, as `hero bench report` does."
    )
    print_report(report, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
