#!/usr/bin/env python
"""hero watch --serve under load: does a scraper slow the daemon's turns?

    python bench/serve.py            # the report: 3 runs of each kind (about 5 min on 2 cores)
    python bench/serve.py --quick    # two runs of alone and hammer (about 2 min)
    python bench/serve.py --kinds alone,hammer --runs 4   # some kinds only
    python bench/serve.py --keep     # keep the temporary homes and logs

Each run is a real `hero watch` on a fresh home, hero's scripted model in its own process
(bench/daemon.py's ScriptedServer and policy: TURNS bash turns, a final text turn, an
approving review, each answer after a little latency), and 8 stories dropped at once with
`max_parallel: 8`. `hero watch --serve 127.0.0.1:0` serves the status page from a process of
its own (hero.web.apart). While the stories run, the bench's clients ask it for the board:
each client is a thread with one keep-alive `http.client` connection that asks, in turn, for
`/` (as a first visit), `/` with the ETag it got (as the page's script polls),
`/api/stories` with and without its ETag. The kinds of run, interleaved run by run:

- alone: `hero watch` without `--serve`, no client (the daemon as it was);
- browsers: `--serve`, 50 clients that each wait 2 s between two requests, as the page's
  script does;
- hammer: `--serve`, 50 clients back to back, no pause.

The daemon's turn is bench/daemon.py's "client side of a worker turn": the gap between two
worker requests of a story, as the scripted server recorded them, less the model's latency
(the answer's parsing, the bash call, the trace, the next request). The verdict (issue 36):
50 clients back to back change the median turn by less than the run-to-run variation, the
spread of the per-run medians of the alone runs. A report, not a test: it prints the table
and exits 0 even when a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import math
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon import (
    _turn_client_times,
    cleanup,
    drop_batch,
    is_finished,
    model_and_daemon,
    ms,
    read_state,
)
from report import Report, env_line, median, print_report, run_sections

STORIES = 8
PARALLEL = 8
TURNS = 10  # worker turns with a bash call, then one final text turn
CALL_LATENCY_S = 0.3  # the scripted model's latency per call
CLIENTS = 50
#: The clients' CPU priority below the daemon's, as the server's (hero.web.apart.NICE).
CLIENT_NICE = 10
POLL_S = 2.0  # the page's script asks every 2 s (live.js PERIOD_MS)
RUNS = 3  # runs of each kind; --quick: 2 (the variation needs two)
STORY_TIMEOUT_S = 300.0

#: What a client asks for, in turn: (path, send the ETag it has).
PLAN: tuple[tuple[str, bool], ...] = (
    ("/", False),
    ("/", True),
    ("/api/stories", True),
    ("/", True),
    ("/api/stories", False),
)


# --------------------------------------------------------------------------- the clients


@dataclass(frozen=True)
class Sample:
    path: str
    status: int  # 0: no answer
    seconds: float
    error: str = ""


@dataclass
class Clients:
    """``count`` threads, each with one keep-alive connection to ``host:port``, asking for
    PLAN in turn (each starting at another place in it) with ``pause_s`` between two
    requests, until stop()."""

    host: str
    port: int
    count: int
    pause_s: float
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for i in range(self.count):
            t = threading.Thread(target=self._client, args=(i,), name=f"client-{i}", daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self) -> list[Sample]:
        self._stop.set()
        for t in self._threads:
            t.join(120)
        with self._lock:
            return list(self.samples)

    def _client(self, index: int) -> None:
        # The clients stand for browsers and scrapers on other machines: here they share the
        # daemon's two cores, so each thread runs at the server's lower priority, and what
        # is measured is the server's cost to the daemon, not the bench's own.
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), CLIENT_NICE)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        etags: dict[str, str] = {}
        mine: list[Sample] = []
        step = index
        # Spread the first requests of browsers over one period, as tabs opened at
        # different times would be; back-to-back clients start at once.
        if self.pause_s and self._stop.wait(self.pause_s * index / self.count):
            return
        while not self._stop.is_set():
            path, conditional = PLAN[step % len(PLAN)]
            step += 1
            headers = {"If-None-Match": etags[path]} if conditional and path in etags else {}
            t = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers)
                answer = conn.getresponse()
                answer.read()
                took = time.perf_counter() - t
                if answer.status == 200:
                    etags[path] = answer.getheader("ETag") or ""
                ok = answer.status in (200, 304)
                mine.append(
                    Sample(path, answer.status, took, "" if ok else f"HTTP {answer.status}")
                )
            except (OSError, http.client.HTTPException) as exc:
                mine.append(Sample(path, 0, time.perf_counter() - t, f"{type(exc).__name__}"))
                conn.close()
                conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            if self.pause_s and self._stop.wait(self.pause_s):
                break
        conn.close()
        with self._lock:
            self.samples.extend(mine)


def quantile(xs: Sequence[float], q: float) -> float:
    """Nearest rank: the value at rank ceil(q n) of the sorted samples."""
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)] if s else float("nan")


# --------------------------------------------------------------------------- one run


@dataclass
class Run:
    kind: str
    turns: list[float]  # client side of each worker turn, s
    story_runs: list[float]  # first worker request -> passed, s
    wall: float  # drop -> all passed, s
    samples: list[Sample]


ALONE, BROWSERS, HAMMER = "alone", "browsers", "hammer"
KINDS = (ALONE, BROWSERS, HAMMER)
SLUGS = {ALONE: "alone", BROWSERS: "browsers", HAMMER: "hammer"}


def one_run(work: Path, kind: str, index: int) -> Run:
    name = f"{SLUGS[kind]}-{index}"
    args = ["--serve", "127.0.0.1:0"] if kind in (BROWSERS, HAMMER) else []
    with model_and_daemon(work, name, CALL_LATENCY_S, TURNS, PARALLEL, 1.0, args) as (
        server,
        daemon,
        _,
    ):
        home = daemon.home
        url = ""
        if args:
            ev = daemon.wait(
                lambda e: str(e.get("event", "")).startswith("serving on"), 60, "'serving on'"
            )
            url = str(ev["url"])
        clients = None
        if url:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            clients = Clients(host, int(port), CLIENTS, POLL_S if kind == BROWSERS else 0.0)
            clients.start()
        try:
            ids = [f"{name}-s{i}" for i in range(STORIES)]
            t0 = drop_batch(home, ids)
            for s in ids:
                daemon.wait(is_finished(s), STORY_TIMEOUT_S, f"'finished' of {s}")
        finally:
            samples = clients.stop() if clients else []
        states = {s: read_state(home, s) for s in ids}
    bad = {s: st.get("status") for s, st in states.items() if st.get("status") != "passed"}
    if bad:
        raise RuntimeError(f"stories that did not pass: {bad}")
    reqs = server.requests()
    passed = {s: float(st["finished_at"]) for s, st in states.items()}
    first = {s: min(r.at for r in reqs if r.story == s and r.role == "worker") for s in ids}
    return Run(
        kind=kind,
        turns=[t for s in ids for t in _turn_client_times(reqs, s, CALL_LATENCY_S)],
        story_runs=[passed[s] - first[s] for s in ids],
        wall=max(passed.values()) - t0,
        samples=samples,
    )


# --------------------------------------------------------------------------- the report


def report_runs(report: Report, runs: list[Run]) -> None:
    by_kind = {k: [r for r in runs if r.kind == k] for k in KINDS}
    for kind in KINDS:
        done = by_kind[kind]
        if not done:
            continue
        report.section(f"{kind}: {len(done)} run(s)")
        samples = [s for r in done for s in r.samples]
        if samples:
            errors = [s for s in samples if s.error]
            took = [s.seconds for s in samples]
            span = sum(r.wall for r in done)
            report.add(
                "requests (per second over the stories' run)",
                f"{len(samples)} ({len(samples) / span:.0f}/s)",
            )
            report.add("errors", str(len(errors)), "0", not errors)
            if errors:
                kinds = sorted({e.error for e in errors})
                report.notes.append(f"{kind}: errors: {', '.join(kinds)}")
            report.add(
                "latency p50 / p95 / p99 / max",
                " / ".join(ms(quantile(took, q)) for q in (0.5, 0.95, 0.99, 1.0)),
            )
            for path in ("/", "/api/stories"):
                mine = [s.seconds for s in samples if s.path == path and s.status == 200]
                if mine:
                    report.add(
                        f"  {path} answered 200 (rendered or kept): p50 / p95",
                        f"{ms(quantile(mine, 0.5))} / {ms(quantile(mine, 0.95))}",
                    )
            fresh = [s.seconds for s in samples if s.status == 304]
            share = f"{len(fresh) / len(samples):.0%}"
            if fresh:
                share += f" ({ms(quantile(fresh, 0.5))} / {ms(quantile(fresh, 0.95))})"
            report.add("304 share (p50 / p95 of a 304)", share)
        turns = [t for r in done for t in r.turns]
        report.add(
            "daemon: client side of a worker turn, median / p90 (all runs' turns)",
            f"{ms(median(turns))} / {ms(quantile(turns, 0.9))}",
        )
        per_run = [median(r.turns) for r in done]
        report.add(
            "  each run's median turn (min - max: the run-to-run variation)",
            " / ".join(ms(x) for x in per_run)
            + (f" ({ms(max(per_run) - min(per_run))})" if len(per_run) > 1 else ""),
        )
        report.add(
            "story run (first request -> passed), median; all passed after",
            f"{median([x for r in done for x in r.story_runs]):.2f} s; "
            f"{median([r.wall for r in done]):.2f} s",
        )
    verdict(report, by_kind)


def verdict(report: Report, by_kind: dict[str, list[Run]]) -> None:
    """Issue 36's Done-when: the clients change the daemon's median turn by less than the
    run-to-run variation (the spread of the alone runs' medians)."""
    alone = by_kind[ALONE]
    if len(alone) < 2:
        report.notes.append("the verdict needs two alone runs at least (--runs 2)")
        return
    spread = [median(r.turns) for r in alone]
    variation = max(spread) - min(spread)
    base = median([t for r in alone for t in r.turns])
    report.section("verdict: the change in the median turn against the run-to-run variation")
    report.add("run-to-run variation (alone runs' medians, max - min)", ms(variation))
    for kind in (BROWSERS, HAMMER):
        loaded = [t for r in by_kind[kind] for t in r.turns]
        if not loaded:
            continue
        change = median(loaded) - base
        report.add(
            f"{kind}: median turn - alone's ({ms(median(loaded))} - {ms(base)})",
            f"{'+' if change >= 0 else '-'}{ms(abs(change))}",
            "< the variation",
            abs(change) < variation,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two runs of alone and hammer")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs of each kind ({RUNS})")
    parser.add_argument(
        "--kinds",
        default=",".join(SLUGS.values()),
        help="the kinds of run, by name (default all: %(default)s)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else max(1, args.runs)
    if args.quick:
        args.kinds = "alone,hammer"
    by_slug = {slug: kind for kind, slug in SLUGS.items()}
    unknown = [k for k in args.kinds.split(",") if k not in by_slug]
    if unknown:
        parser.error(f"--kinds: unknown {', '.join(unknown)} (known: {', '.join(by_slug)})")
    kinds = [by_slug[k] for k in args.kinds.split(",")]

    started = time.monotonic()
    print(env_line("hero", "starlette", "uvicorn", "openai"), flush=True)
    print(
        f"{STORIES} stories x ({TURNS} bash turns + 1 final turn + verify `true` + 1 review), "
        f"model latency {CALL_LATENCY_S:g} s/call, max_parallel {PARALLEL}, {CLIENTS} clients",
        flush=True,
    )
    report = Report()
    work = Path(tempfile.mkdtemp(prefix="hero-bench-serve-"))
    runs: list[Run] = []

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)

    def section(kind: str, i: int) -> Callable[[], None]:
        return lambda: runs.append(one_run(work, kind, i))

    # Interleaved run by run, so a change in the machine's load falls on every kind alike.
    sections = [(f"{kind} #{i + 1}", section(kind, i)) for i in range(repeats) for kind in kinds]
    try:
        run_sections(report, sections, after_each=lambda: cleanup(False))
        report_runs(report, runs)
    finally:
        leftovers = cleanup(True)
        signal.signal(signal.SIGTERM, previous)
        if leftovers:
            report.notes.append(f"killed {leftovers} process(es) that outlived their daemon")
        if args.keep:
            report.notes.append(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print_report(report, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
