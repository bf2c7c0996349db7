#!/usr/bin/env python
"""hero benchmark: hero's own peak memory while a hostile worker goes too far.

    python bench/isolation.py            # about 5 min on 2 cores (the 4 GB file: 4 of them)
    python bench/isolation.py --no-4g    # without the 4 GB file (about 40 s)

Each row of sections 1 and 2 is one real `hero run` (a child process, ``sandbox: bwrap``) of
a story whose worker, hero's scripted model on loopback, does one thing and then commits a
small change; verify is `true`, the reviewer approves. The worker commits a file in its
scope (``git add``): 0 B, 300 MB of zeros and 4 GB of zeros (sparse, ``truncate -s``), and
300 MB of text (whose diff is 300 MB of lines); or it runs a fork bomb, or fills the
sandbox's tmpfs. The value is hero's peak resident memory: the ``VmHWM`` of the `hero run`
process, which it writes itself when ``main`` returns, so that neither hero's git nor the
worker's commands count. Section 3 runs such stories, and a normal one, in one `hero watch`,
reads its ``VmHWM`` once all have ended, and stops it.

The limits are hero's defaults (``hero.sandbox.limits.Limits()``), but for the 4 GB row, which raises
``limit_file_size_mb`` to 5120 so that the file can be written at all (the row after it shows
what the default does to it). A report, not a test: it prints a table and exits 0. PASS is a
peak under the bound, FAIL one over it; FAILED a row that could not be measured (the reason
is below the table); info rows say how the story ended, how long it took, which limit the
worker's tool results named, and the largest peak of any process hero waited for (its own
git, bubblewrap and the commands in it: the host's memory, not hero's; a child counts the
pages it shared with hero until it ran its program, so this is never below hero's own peak
at the time it started that child).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from report import Report, Row, env_line, hero_env, make_home, print_report, run_sections

#: The bound this bench holds hero's own peak resident memory to, whatever the worker does.
BOUND_MB = 300
#: Free disk the 4 GB row asks for: the file is sparse and its git objects are small, but a
#: file system without holes would write it whole.
DISK_FOR_4G = 5 << 30
#: Generous "did not hang" bound of one story (the 4 GB file is read by git several times).
RUN_TIMEOUT_S = 900.0
#: What `hero run` runs inside: hero's own CLI, then its VmHWM and the largest peak of the
#: processes it waited for (ru_maxrss of RUSAGE_CHILDREN), in kB, to the file named first.
PEAK_PROBE = """
import resource
import sys

from hero.cli import main

out = sys.argv.pop(1)
try:
    code = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as fh:
        peak = next(line.split()[1] for line in fh if line.startswith("VmHWM:"))
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(out, "w") as fh:
        fh.write(f"{peak} {children}")
sys.exit(code)
"""
SMALL_CHANGE = "echo 'def sub(a, b):\n    return a - b' >> calc/__init__.py"
COMMIT = "git add -A && git commit -q -m {msg}"


@dataclass(frozen=True)
class Attack:
    """One row: the worker's commands before its small change, and the roles.yaml it runs
    under (besides ``sandbox: bwrap``)."""

    label: str
    commands: tuple[str, ...]
    roles: str = ""


def committed(size: str, *, text: bool = False) -> tuple[str, ...]:
    """Commit a file of ``size`` (a `truncate -s` / `head -c` size) in the story's scope."""
    if text:
        make = f"yes 'a line of a big file for the diff to show' | head -c {size} > data/big.txt"
    else:
        make = f"truncate -s {size} data/big.bin"
    return (f"mkdir -p data && {make} && {COMMIT.format(msg='big')}",)


FORK_BOMB = (
    "for i in $(seq 5000); do sleep 30 & done; wait",
    "timeout 20 sh -c 'f(){ f|f& }; f 2>/tmp/bomb.err; until read -r said < /tmp/bomb.err; "
    'do :; done; echo "bomb: $said"; exit 3\'',
)
TMPFS_FILLER = tuple(f"yes > {d}/x" for d in ("/tmp", "/dev/shm", "/var/tmp"))
RAISED_FILE_SIZE = "limit_file_size_mb: 5120\n"


# --------------------------------------------------------------------------- the model


def is_review(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith("You are hero's reviewer")


def story_id(body: dict[str, Any]) -> str:
    task = str(body["messages"][1]["content"])
    return task.split(":", 1)[0].removeprefix("# Story ").strip()


def handler_for(plans: dict[str, tuple[str, ...]]) -> Callable[[dict[str, Any]], Any]:
    """Stateless: the worker of story ``id`` runs ``plans[id]``, one bash call a turn, then
    its small change, then says it is done; the reviewer approves."""
    from hero.llm.scripted import call, text

    approve = json.dumps({"verdict": "APPROVED", "summary": "ok", "ac_check": [], "comments": []})

    def handler(body: dict[str, Any]) -> Any:
        if is_review(body):
            return text(approve)
        steps = [*plans[story_id(body)], f"{SMALL_CHANGE} && {COMMIT.format(msg='sub')}"]
        done = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        return call("bash", command=steps[done]) if done < len(steps) else text("Done.")

    return handler


def tool_results(requests: list[Any], sid: str) -> list[str]:
    """The tool results the worker of ``sid`` saw, from its last request."""
    found: list[str] = []
    for r in requests:
        if not is_review(r.body) and story_id(r.body) == sid:
            found = [str(m["content"]) for m in r.body["messages"] if m.get("role") == "tool"]
    return found


def story(sid: str) -> str:
    return (
        f"---\nid: {sid}\ntitle: Attack {sid}\nscope: ['calc/**', 'data/**']\nverify:\n"
        f"  - 'true'\n---\n\n## Goal\nAdd `sub`.\n\n## Acceptance Criteria\n- [ ] it runs\n"
    )


def roles(extra: str = "") -> str:
    return f"sandbox: bwrap\nmax_retries: 1\n{extra}"


# --------------------------------------------------------------------------- one hero run


@dataclass
class Outcome:
    code: int
    peak_mb: float
    children_mb: float
    status: str
    wall_s: float
    results: list[str]


def run_attack(attack: Attack, sid: str = "attack") -> Outcome:
    """`hero run` of one story doing ``attack`` in a fresh repo and home."""
    from hero.llm.scripted import ScriptedModel

    with (
        tempfile.TemporaryDirectory(prefix="hero-bench-isolation-") as tmp,
        ScriptedModel(handler_for({sid: attack.commands})) as server,
    ):
        base = Path(tmp)
        home = make_home(base, server.base_url, roles(attack.roles))
        path = home / "inbox" / f"{sid}.md"
        path.write_text(story(sid))
        peak_file = base / "peak"
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", PEAK_PROBE, str(peak_file), "run", str(path)]
            + ["--home", str(home)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=hero_env(),
            cwd=base,
            timeout=RUN_TIMEOUT_S,
        )
        wall = time.monotonic() - started
        if not peak_file.is_file():
            raise RuntimeError(f"hero run left no peak (exit {proc.returncode}):\n{proc.stderr}")
        peak_kb, children_kb = (int(x) for x in peak_file.read_text().split())
        state = json.loads((home / "runs" / "state" / f"{sid}.json").read_text())
        return Outcome(
            proc.returncode,
            peak_kb / 1024,
            children_kb / 1024,
            state["status"],
            wall,
            tool_results(server.requests, sid),
        )


def verdict(report: Report, metric: str, peak_mb: float, info: str) -> None:
    """A row of hero's peak against the bound, PASS or FAIL; ``info`` goes in its value."""
    ok = "PASS" if peak_mb < BOUND_MB else "FAIL"
    report.rows.append(Row(metric, f"{peak_mb:.0f} MB ({info})", f"< {BOUND_MB} MB", ok))


def limit_note(results: list[str]) -> str:
    """The settings the sandbox-limit notes in the tool results name ("-" for none), and how
    many results carried one."""
    notes = [r for r in results if "(sandbox limit: " in r]
    named = sorted({m for r in notes for m in re.findall(r"\blimit_[a-z_]+", r)})
    return f"{', '.join(named)} ({len(notes)} of {len(results)} results)" if notes else "-"


def bench_row(report: Report, attack: Attack) -> None:
    out = run_attack(attack)
    verdict(
        report,
        f"{attack.label}: hero's peak RSS",
        out.peak_mb,
        f"{out.status}, exit {out.code}, {out.wall_s:.1f} s",
    )
    report.add("  largest peak of a process hero waited for", f"{out.children_mb:.0f} MB")
    note = limit_note(out.results)
    if note != "-":
        report.add("  the worker was told of a limit: setting named", note)


# --------------------------------------------------------------------------- hero watch


def bench_watch(report: Report) -> None:
    """Three attackers and a normal story in one `hero watch` (max_parallel 2)."""
    from hero.llm.scripted import ScriptedModel

    plans = {
        "big": committed("300M", text=True),
        "bomb": FORK_BOMB,
        "fill": TMPFS_FILLER,
        "normal": (),
    }
    with (
        tempfile.TemporaryDirectory(prefix="hero-bench-isolation-") as tmp,
        ScriptedModel(handler_for(plans)) as server,
    ):
        base = Path(tmp)
        home = make_home(base, server.base_url, roles("max_parallel: 2\n"))
        for sid in plans:
            (home / "inbox" / f"{sid}.md").write_text(story(sid))
        states = home / "runs" / "state"
        started = time.monotonic()
        with open(base / "watch.err", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "hero", "watch", "--home", str(home)]
                + ["--log-format", "json"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=hero_env(),
                cwd=base,
            )
        try:
            ended: dict[str, str] = {}
            deadline = started + RUN_TIMEOUT_S
            while len(ended) < len(plans) and proc.poll() is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the stories did not end within {RUN_TIMEOUT_S:g} s")
                for sid in plans:
                    try:
                        status = json.loads((states / f"{sid}.json").read_text())["status"]
                    except (OSError, ValueError, KeyError):
                        continue
                    if status not in ("queued", "running"):
                        ended[sid] = status
                time.sleep(0.2)
            wall = time.monotonic() - started
            alive = proc.poll() is None
            with open(f"/proc/{proc.pid}/status") as fh:
                peak_kb = next(int(x.split()[1]) for x in fh if x.startswith("VmHWM:"))
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        said = (base / "watch.err").read_text(errors="replace")
    statuses = ", ".join(f"{sid} {ended.get(sid, '?')}" for sid in plans)
    verdict(report, "hero watch, 4 stories: its peak RSS (VmHWM)", peak_kb / 1024, f"{wall:.1f} s")
    report.add("  how they ended", statuses)
    stopped = alive and code == 0 and "Traceback" not in said
    report.rows.append(
        Row(
            "  alive after all of them; exit code on SIGTERM; no traceback",
            f"{'alive' if alive else 'DEAD'}, exit {code}",
            "alive, 0",
            "PASS" if stopped else "FAIL",
        )
    )


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-4g", action="store_true", help="leave out the 4 GB file")
    args = parser.parse_args(argv)

    started = time.monotonic()
    print(env_line("hero"), flush=True)
    report = Report()
    from hero.sandbox.bwrap import bwrap_problem
    from hero.sandbox.limits import mechanism

    bwrap = shutil.which("bwrap")
    problem = bwrap_problem(bwrap) if bwrap else "bwrap is not installed"
    if problem:
        print(f"skipped: every row runs in bubblewrap, which does not work here: {problem}")
        return 0
    report.notes.append(f"bound: {BOUND_MB} MB of hero's own resident memory (VmHWM)")
    report.notes.append(f"limits enforced by: {mechanism()}")

    free = shutil.disk_usage(tempfile.gettempdir()).free
    big4: list[tuple[str, Callable[[], object]]] = []
    if args.no_4g:
        report.notes.append("the 4 GB rows were left out (--no-4g)")
    elif free < DISK_FOR_4G:
        report.notes.append(
            f"the 4 GB rows were left out: {free >> 20} MB free in {tempfile.gettempdir()}, "
            f"{DISK_FOR_4G >> 20} MB asked for"
        )
    else:
        big4 = [
            (
                "4 GB",
                lambda: bench_row(
                    report,
                    Attack(
                        "4 GB of zeros (limit_file_size_mb 5120)",
                        committed("4G"),
                        RAISED_FILE_SIZE,
                    ),
                ),
            ),
            (
                "4 GB, default limits",
                lambda: bench_row(
                    report, Attack("4 GB of zeros, default limits (refused)", committed("4G"))
                ),
            ),
        ]
    sections: list[tuple[str, Callable[[], object]]] = [
        ("section 1", lambda: report.section("1. a file committed in the story's scope")),
        ("0 B", lambda: bench_row(report, Attack("0 B file", committed("0")))),
        ("300 MB", lambda: bench_row(report, Attack("300 MB of zeros", committed("300M")))),
        (
            "300 MB text",
            lambda: bench_row(report, Attack("300 MB of text", committed("300M", text=True))),
        ),
        *big4,
        ("section 2", lambda: report.section("2. a command that goes too far (default limits)")),
        ("fork bomb", lambda: bench_row(report, Attack("fork bomb (2 kinds)", FORK_BOMB))),
        (
            "tmpfs filler",
            lambda: bench_row(
                report, Attack("tmpfs filler (/tmp, /dev/shm, /var/tmp)", TMPFS_FILLER)
            ),
        ),
        (
            "section 3",
            lambda: report.section("3. hero watch: 300 MB text, fork bomb, filler, normal"),
        ),
        ("hero watch", lambda: bench_watch(report)),
    ]
    run_sections(report, sections)
    print_report(report, started)
    return 0  # a report, not a test: FAIL rows say what missed the bound


if __name__ == "__main__":
    raise SystemExit(main())
