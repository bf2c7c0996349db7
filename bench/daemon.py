#!/usr/bin/env python
"""hero daemon benchmark: inbox latency, throughput at max_parallel, resident memory.

    python bench/daemon.py              # the report (about 1 min on 2 cores)
    python bench/daemon.py --drops 8    # shorter
    python bench/daemon.py --keep       # keep the temporary homes, logs and request records

Everything runs against a real `hero watch` subprocess (`python -m hero watch --home H
--log-format json`) and hero's scripted model in a separate process (`python -m
hero.llm.scripted --handler daemon:handler --latency S`, with this file's directory on
PYTHONPATH, so `handler` below is its policy), so neither shares the bench's GIL. No key,
no network. A report, not a test: it prints a table of metric | value | target | ok? and
exits 0 even when a target is missed (a measurement it could not take shows FAILED, with the
reason below the table). See bench/README.md for what each row means.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from report import (
    Report,
    env_line,
    hero_env,
    make_home,
    median,
    print_report,
    run_sections,
    story_text,
)

LATENCY_TARGET_MS = 300.0
THROUGHPUT_TARGET = 1.25  # wall time / ideal
DROPS = 20  # section 1: stories dropped one at a time
SIDE_DROPS = 4  # section 1: drops for each of the two info variants
SINGLES = 2  # section 2: single-story runs that define the ideal
STORIES = 16  # section 2: stories in the batch
PARALLEL = 8  # section 2 and 3: max_parallel
TURNS = 5  # section 2 and 3: worker turns with a bash call (then one final text turn)
CALL_LATENCY_S = 0.5  # section 2: the scripted model's latency per call
MEMORY_LATENCY_S = 2.0  # section 3: slow model, so 8 stories stay running while sampled
PAUSE_S = 0.6  # section 1 and 2: after a story passed, before the next drop (daemon idle)

RECORD_ENV = "HERO_BENCH_RECORD"  # server process: file that gets one line per request
TURNS_ENV = "HERO_BENCH_TURNS"  # server process: worker turns with a bash call
BENCH_DIR = Path(__file__).resolve().parent
PROFILE_DIR: Path | None = None  # --profile: where each daemon's merged cProfile stats go

# --------------------------------------------------------------------------- the model's policy
# This part runs in the scripted server's process: `python -m hero.llm.scripted --handler
# daemon:handler` imports this file as the module `daemon`. Keep the module's top level light.

_record_lock = threading.Lock()
_STORY_RE = re.compile(r"^# Story (\S+?):", re.MULTILINE)


def handler(body: dict) -> Any:
    """Stateless policy: the worker makes $HERO_BENCH_TURNS bash calls (`echo turn N`, all
    different, so the loop guard stays quiet), then ends its turn; the reviewer approves.
    Every request is recorded first, with the server's time.time() (the clock the bench and
    the daemon's logs use), as `<time> <role> <story id> <assistant messages so far>`."""
    from hero.llm.scripted import call, text

    now = time.time()
    messages = body.get("messages") or []
    system = str(messages[0].get("content") or "") if messages else ""
    role = "reviewer" if "reviewer" in system.split(":", 1)[0] else "worker"
    task = str(messages[1].get("content") or "") if len(messages) > 1 else ""
    found = _STORY_RE.search(task)
    story = found.group(1) if found else "?"
    step = sum(1 for m in messages if m.get("role") == "assistant")
    path = os.environ.get(RECORD_ENV)
    if path:
        with _record_lock, open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{now:.6f} {role} {story} {step}\n")
    if role == "reviewer":
        return text(
            json.dumps({"verdict": "APPROVED", "summary": "ok", "ac_check": [], "comments": []})
        )
    if step < int(os.environ.get(TURNS_ENV, "0")):
        return call("bash", command=f"echo turn {step + 1}")
    return text("Done.")


# --------------------------------------------------------------------------- formatting


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if abs(seconds) >= 0.1 else f"{seconds * 1e3:.1f} ms"


def sec(seconds: float) -> str:
    return f"{seconds:.2f} s"


def mib(kb: float) -> str:
    return f"{kb / 1024:.1f} MiB"


def cpu_times(pid: int) -> tuple[float, float]:
    """(own user+sys, reaped children's user+sys) of a process, in seconds, from
    /proc/PID/stat (fields 14-17). Children count once their parent has waited for them, and
    a child's figure includes its own reaped children: git, bwrap, the sandboxed shell."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(x) / tick for x in fields[11:15])
    return utime + stime, cutime + cstime


def count_execs(trace: Path) -> dict[str, int]:
    """Programs started, from `strace -f -e trace=execve -o trace` output: by basename, git
    by subcommand (`git worktree`, ...); failed execve (PATH lookups) are not counted. With
    -f a call another thread interrupts is split in two lines, `PID execve(...
    <unfinished ...>` and `PID <... execve resumed>) = RESULT`: the result decides."""
    counts: dict[str, int] = {}
    exec_re = re.compile(r'^(\d+)\s+execve\("([^"]+)", \[([^\]]*)\]')
    resumed_re = re.compile(r"^(\d+)\s+<\.\.\. execve resumed>.*= (-?\d+)")
    pending: dict[str, tuple[str, str]] = {}

    def add(path: str, argv: str) -> None:
        name = os.path.basename(path)
        if name == "git":  # `git [-C dir | -c k=v | --flag]... sub`
            args = [a.strip().strip('"') for a in argv.split(", ")]
            i = 1
            while i < len(args) and args[i].startswith("-"):
                i += 2 if args[i] in ("-C", "-c") else 1
            name = f"git {args[i] if i < len(args) else ''}".rstrip()
        counts[name] = counts.get(name, 0) + 1

    for line in trace.read_text(errors="replace").splitlines():
        found = exec_re.search(line)
        if found:
            if line.rstrip().endswith("<unfinished ...>"):
                pending[found.group(1)] = (found.group(2), found.group(3))
            elif "= -1" not in line:
                add(found.group(2), found.group(3))
            continue
        done = resumed_re.search(line)
        if done and done.group(1) in pending:
            path, argv = pending.pop(done.group(1))
            if done.group(2) != "-1":
                add(path, argv)
    return counts


def p90(xs: Sequence[float]) -> float:
    """Nearest rank: the value at rank ceil(0.9 n) of the sorted samples."""
    s = sorted(xs)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)] if s else float("nan")


# --------------------------------------------------------------------------- processes

_PROCS: list[subprocess.Popen] = []


def _spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    proc = subprocess.Popen(argv, **kwargs)
    _PROCS.append(proc)
    return proc


def _end(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


#: HERO_RUN_MARKER of every story the bench dropped: hero marks a story's processes with
#: "<home>/<story id>" (see hero.runner.kill_marked).
_MARKERS: list[str] = []


def cleanup(leftovers: bool) -> int:
    """End the processes the bench started; with ``leftovers``, also SIGKILL any process a
    daemon started for one of the bench's stories that outlived it (there should be none).
    Returns how many leftovers were killed."""
    for proc in reversed(_PROCS):
        try:
            _end(proc)
        except Exception:  # noqa: BLE001 - keep cleaning up
            pass
    if not leftovers:
        return 0
    from hero.leftovers import kill_marked

    return sum(kill_marked(marker) for marker in _MARKERS)


@dataclass(frozen=True)
class Request:
    at: float  # time.time() in the server process
    role: str
    story: str
    step: int  # assistant messages in the request's history


class ScriptedServer:
    """`python -m hero.llm.scripted --handler daemon:handler --latency S` in its own process."""

    def __init__(self, work: Path, name: str, latency_s: float, turns: int) -> None:
        self.record = work / f"{name}-requests.txt"
        self.record.write_text("")
        self.latency_s = latency_s
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(BENCH_DIR), env.get("PYTHONPATH", "")) if p
        )
        env[RECORD_ENV] = str(self.record)
        env[TURNS_ENV] = str(turns)
        self._log = open(work / f"{name}-server.log", "w")  # noqa: SIM115 - closed in stop()
        argv = [sys.executable, "-m", "hero.llm.scripted", "--handler", "daemon:handler"]
        self.proc = _spawn(
            [*argv, "--latency", str(latency_s)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=work,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            _end(self.proc)
            raise RuntimeError(f"the scripted server did not start: {line!r}; see {self._log.name}")
        self.base_url = line.split("listening on ", 1)[1].strip()

    def requests(self) -> list[Request]:
        out = []
        for line in self.record.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) == 4:
                out.append(Request(float(parts[0]), parts[1], parts[2], int(parts[3])))
        return out

    def first_worker_request(self, story: str) -> float | None:
        times = [r.at for r in self.requests() if r.story == story and r.role == "worker"]
        return min(times) if times else None

    def stop(self) -> None:
        _end(self.proc)
        self._log.close()


def _log_time(ev: dict) -> float | None:
    ts = ev.get("timestamp")
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts).timestamp()  # naive local time, like time.time()
    except ValueError:
        return None


class Daemon:
    """`python -m hero watch --home H --log-format json [extra_args]`; its JSON log lines
    are collected as they come, each with the time it was written (its own `timestamp`)."""

    def __init__(self, home: Path, work: Path, extra_args: Sequence[str] = ()) -> None:
        env = hero_env()
        self.home = home
        self.launched = time.time()
        argv = [sys.executable, "-m", "hero", "watch", "--home", str(home), "--log-format", "json"]
        if PROFILE_DIR is not None:  # --profile: the same command under bench/profile_hero.py
            out = PROFILE_DIR / f"{home.parent.name}.prof"
            argv[1:3] = [str(BENCH_DIR / "profile_hero.py"), str(out)]
        self.proc = _spawn(
            [*argv, *extra_args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            cwd=work,
        )
        self.events: list[dict] = []
        self.other: list[str] = []
        self._eof = False
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="daemon-log", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            now = time.time()
            try:
                ev = json.loads(line)
            except ValueError:
                ev = None
            with self._cond:
                if isinstance(ev, dict):
                    ev["_t"] = _log_time(ev) or now
                    self.events.append(ev)
                else:
                    self.other.append(line)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait(self, pred: Callable[[dict], bool], timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for ev in self.events[seen:]:
                    if pred(ev):
                        return ev
                seen = len(self.events)
                if self._eof:
                    raise RuntimeError(
                        f"hero watch exited (rc {self.proc.poll()}) while waiting for {what}; "
                        f"last output: {self.tail()}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"no {what} within {timeout:g} s; last output: {self.tail()}"
                    )
                self._cond.wait(left)

    def first(self, pred: Callable[[dict], bool]) -> dict | None:
        with self._cond:
            return next((ev for ev in self.events if pred(ev)), None)

    def tail(self, n: int = 6) -> str:
        with self._cond:
            lines = [json.dumps({k: v for k, v in e.items() if k != "_t"}) for e in self.events]
            return " | ".join((lines + self.other)[-n:])

    def status(self) -> dict[str, int]:
        """VmRSS, VmHWM (kB) and Threads from /proc/<pid>/status."""
        out = {}
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM", "Threads"):
                    out[key] = int(value.split()[0])
        return out

    def stop(self, timeout: float = 20.0) -> float:
        """SIGTERM (a clean stop), then wait; returns the seconds it took to exit."""
        t = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        elapsed = time.monotonic() - t
        self._reader.join(5)
        return elapsed


# --------------------------------------------------------------------------- homes and stories


def bench_home(base: Path, base_url: str, max_parallel: int) -> Path:
    """report.make_home with `max_parallel`, `max_retries: 1`, and a `staging/` folder (same
    filesystem, not watched) to write stories in."""
    home = make_home(base, base_url, f"max_parallel: {max_parallel}\nmax_retries: 1\n")
    (home / "staging").mkdir()
    return home


@contextlib.contextmanager
def model_and_daemon(
    work: Path,
    name: str,
    latency_s: float,
    turns: int,
    max_parallel: int,
    idle_s: float,
    daemon_args: Sequence[str] = (),
) -> Iterator[tuple[ScriptedServer, Daemon, float]]:
    """A section's scripted server and `hero watch [daemon_args]` on a fresh home under
    work/name, given ``idle_s`` after 'watching' was logged; yields (server, daemon, launch
    -> 'watching' in seconds). Both are stopped on exit (the server's request record stays
    readable)."""
    base = work / name
    base.mkdir()
    server = ScriptedServer(work, name, latency_s, turns)
    try:
        home = bench_home(base, server.base_url, max_parallel)
        daemon = Daemon(home, work, daemon_args)
        try:
            ready = wait_watching(daemon)
            time.sleep(idle_s)
            yield server, daemon, ready
        finally:
            daemon.stop()
    finally:
        server.stop()


#: How a story is dropped: written in staging/ and renamed into inbox/; written as a
#: dot-file in inbox/ (which hero ignores) and renamed; or written in place in inbox/.
STAGED, DOTFILE, IN_PLACE = "staged", "dotfile", "in place"


def stage(home: Path, story_id: str, how: str = STAGED) -> tuple[Path, Path]:
    """Write the story where the daemon does not look yet; returns (written file, its name
    in inbox/). IN_PLACE writes nothing: the caller writes straight to the inbox name."""
    _MARKERS.append(f"{home.resolve()}/{story_id}")
    dst = home / "inbox" / f"{story_id}.md"
    if how == IN_PLACE:
        return dst, dst
    src = home / "inbox" / f".{story_id}.md" if how == DOTFILE else home / "staging" / dst.name
    src.write_text(bench_story(story_id), encoding="utf-8")
    return src, dst


def drop_batch(home: Path, ids: Sequence[str]) -> float:
    """Stage every story, then rename them all into inbox/ back to back; returns the
    time.time() of the first rename."""
    staged = [stage(home, s) for s in ids]
    t0 = time.time()
    for src, dst in staged:
        os.rename(src, dst)
    return t0


def bench_story(story_id: str) -> str:
    return story_text(
        story_id,
        f"Bench story {story_id}",
        "Nothing to change; the daemon benchmark measures hero itself.",
    )


def read_state(home: Path, story_id: str) -> dict:
    return json.loads((home / "runs" / "state" / f"{story_id}.json").read_text())


def is_finished(story_id: str) -> Callable[[dict], bool]:
    return lambda e: e.get("event") == "finished" and e.get("story") == story_id


def wait_watching(daemon: Daemon) -> float:
    """Wait for the daemon's 'watching' line; returns launch -> 'watching' in seconds."""
    ev = daemon.wait(lambda e: e.get("event") == "watching", 60, "'watching' log line")
    return ev["_t"] - daemon.launched


@dataclass
class Drop:
    story: str
    dropped: float  # time.time() right before the rename (in place: before the write)
    queued: float
    started: float
    worker_phase: float
    request: float
    passed: float

    @property
    def latency(self) -> float:
        return self.request - self.dropped


def drop_one(daemon: Daemon, server: ScriptedServer, story_id: str, how: str = STAGED) -> Drop:
    """Drop one story into inbox/, wait until it has passed; its timeline."""
    src, dst = stage(daemon.home, story_id, how)
    dropped = time.time()
    if how == IN_PLACE:
        dst.write_text(bench_story(story_id), encoding="utf-8")  # one open-write-close
    else:
        os.rename(src, dst)
    daemon.wait(is_finished(story_id), 120, f"'finished' of {story_id}")
    state = read_state(daemon.home, story_id)
    if state.get("status") != "passed":
        raise RuntimeError(f"{story_id} ended {state.get('status')}: {state.get('error')}")
    request = server.first_worker_request(story_id)
    if request is None:
        raise RuntimeError(f"{story_id} passed but the server recorded no worker request")

    def at(pred: Callable[[dict], bool]) -> float:
        ev = daemon.first(lambda e: e.get("story") == story_id and pred(e))
        return ev["_t"] if ev else float("nan")

    return Drop(
        story=story_id,
        dropped=dropped,
        queued=at(lambda e: e.get("event") == "queued"),
        started=at(lambda e: e.get("event") == "started"),
        worker_phase=at(
            lambda e: (
                str(e.get("event", "")).startswith("round 1/")
                and str(e.get("event", "")).endswith(": worker")
            )
        ),
        request=request,
        passed=float(state.get("finished_at") or float("nan")),
    )


# --------------------------------------------------------------------------- 1. inbox latency


def bench_latency(report: Report, work: Path, drops: int, side: int, extra: dict) -> None:
    report.section(
        "1. inbox latency: story renamed into inbox/ -> worker's first LLM request at the "
        "server (instant model, one story at a time)"
    )
    with model_and_daemon(work, "latency", 0.0, 0, 2, 1.0) as (server, daemon, ready):
        extra["start-up"] = ready
        main_drops = []
        for i in range(drops):
            main_drops.append(drop_one(daemon, server, f"lat{i:02d}"))
            time.sleep(PAUSE_S)
        variants: dict[str, list[Drop]] = {DOTFILE: [], IN_PLACE: []}
        for (how, found), prefix in zip(variants.items(), ("dot", "inplace"), strict=True):
            for i in range(side):
                found.append(drop_one(daemon, server, f"{prefix}{i:02d}", how))
                time.sleep(PAUSE_S)
        rushed = []
        for i in range(side):  # no pause: each right after the previous story passed
            rushed.append(drop_one(daemon, server, f"rush{i:02d}"))
        time.sleep(1.5)
        extra["idle after latency"] = (daemon.status(), drops + 3 * side)

    lat = [d.latency for d in main_drops]
    med = median(lat)
    report.add(
        f"inbox latency, median of {len(lat)} (rename from staging/)",
        ms(med),
        f"< {LATENCY_TARGET_MS:g} ms",
        med * 1e3 < LATENCY_TARGET_MS,
    )
    report.add("  p90 (nearest rank)", ms(p90(lat)))
    report.add("  min / max", f"{ms(min(lat))} / {ms(max(lat))}")
    report.add("  first drop (daemon has run nothing yet)", ms(lat[0]))
    steps = [
        ("  step: rename -> 'queued' logged (inotify, inbox, parse)", "dropped", "queued"),
        ("  step: 'queued' -> 'started' logged (dispatch)", "queued", "started"),
        (
            "  step: 'started' -> round 1 worker phase (lock, state, git worktree)",
            "started",
            "worker_phase",
        ),
        ("  step: worker phase -> request at server (prompt, HTTP)", "worker_phase", "request"),
    ]
    for label, a, b in steps:
        spans = [getattr(d, b) - getattr(d, a) for d in main_drops]
        report.add(label + " (median)", ms(median([x for x in spans if not math.isnan(x)])))
    dot_lat = median([d.latency for d in variants[DOTFILE]])
    report.add(f"  rename from a dot-file inside inbox/ (median of {side})", ms(dot_lat))
    rushed_lat = median([d.latency for d in rushed])
    report.add(
        f"  rename right after the previous story passed (median of {len(rushed)})",
        ms(rushed_lat),
    )
    in_place = median([d.latency for d in variants[IN_PLACE]])
    report.add(f"  written in place in inbox/, write -> request (median of {side})", ms(in_place))
    report.add(
        "  one instant story, rename -> passed (median)",
        ms(median([d.passed - d.dropped for d in main_drops])),
    )
    report.add("  `hero watch` launch -> 'watching' logged", ms(extra["start-up"]))
    # Regression checks, from the numbers (see bench/README.md).
    pickup = median([d.queued - d.dropped for d in main_drops])
    if pickup >= 0.5:
        report.notes.append(
            f"inbox latency: rename -> 'queued' takes {ms(pickup)} (a rename from a dot-file "
            f"inside inbox/: {ms(dot_lat)} in all). A rename from another folder is handled "
            "like a file written in place (settle_s): is the inbox's inotify observer still "
            "built with generate_full_events=True (hero.daemon.inbox.start_watching)?"
        )
    if rushed_lat - med >= 0.3:
        report.notes.append(
            f"inbox latency: a drop right after the previous story passed takes "
            f"{ms(rushed_lat - med)} more. If the passed story left inbox/ by a rename (an "
            "unpaired IN_MOVED_FROM), watchdog holds it 0.5 s and every later event waits "
            "behind it: does it still leave by link + unlink (hero.run.pipeline)?"
        )
    if in_place < 0.9:
        report.notes.append(
            f"inbox latency: a story written in place was taken after {ms(in_place)}, before "
            "the inbox's settle_s (1 s) of quiet: a writer that appends in several "
            "open-write-close steps could be read half-written."
        )


# --------------------------------------------------------------------------- 2. throughput


def _story_requests(reqs: list[Request], story: str) -> list[Request]:
    return sorted((r for r in reqs if r.story == story), key=lambda r: r.at)


def _turn_client_times(reqs: list[Request], story: str, latency: float) -> list[float]:
    """Between consecutive worker requests of a story: gap - model latency, i.e. the
    client side of a turn (response parsing, the bash call, trace, next request)."""
    w = [r for r in _story_requests(reqs, story) if r.role == "worker"]
    return [b.at - a.at - latency for a, b in zip(w, w[1:], strict=False)]


def trace_execs(pid: int, out: Path) -> subprocess.Popen:
    """`strace -f -qq -e trace=execve -p PID -o out`, attached (returns once it is)."""
    tracer = _spawn(
        ["strace", "-f", "-qq", "-e", "trace=execve", "-p", str(pid), "-o", str(out)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # strace attaches to every thread of the daemon
    return tracer


def bench_throughput(
    report: Report, work: Path, stories: int, singles: int, extra: dict, strace: bool = False
) -> None:
    waves = math.ceil(stories / PARALLEL)
    calls = TURNS + 2  # TURNS bash turns + the final text turn + one review
    report.section(
        f"2. throughput: {stories} stories x ({TURNS} bash turns + 1 final turn + verify `true` "
        f"+ 1 review), model latency {CALL_LATENCY_S:g} s/call, max_parallel {PARALLEL}"
    )
    with model_and_daemon(work, "throughput", CALL_LATENCY_S, TURNS, PARALLEL, 1.0) as (
        server,
        daemon,
        _,
    ):
        home = daemon.home
        alone = []
        for i in range(singles):
            alone.append(drop_one(daemon, server, f"one{i}"))
            time.sleep(PAUSE_S)
        ids = [f"tp{i:02d}" for i in range(stories)]
        tracer = trace_execs(daemon.proc.pid, work / "throughput-execve.txt") if strace else None
        cpu0 = cpu_times(daemon.proc.pid)
        t0 = drop_batch(home, ids)
        for s in ids:
            daemon.wait(is_finished(s), 180, f"'finished' of {s}")
        states = {s: read_state(home, s) for s in ids}
        time.sleep(1.5)
        cpu1 = cpu_times(daemon.proc.pid)
        if tracer is not None:
            _end(tracer)
        extra["idle after throughput"] = (daemon.status(), singles + stories)

    bad = {s: st.get("status") for s, st in states.items() if st.get("status") != "passed"}
    if bad:
        raise RuntimeError(f"stories that did not pass: {bad}")
    reqs = server.requests()
    single = median([d.passed - d.dropped for d in alone])
    passed = {s: float(st["finished_at"]) for s, st in states.items()}
    wall = max(passed.values()) - t0
    ideal = waves * single
    model_sum = calls * CALL_LATENCY_S
    report.add(f"one story alone, rename -> passed (median of {len(alone)})", sec(single))
    report.add(f"  model latency sum, {calls} calls x {CALL_LATENCY_S:g} s", sec(model_sum))
    report.add(f"{stories} stories dropped at once -> all passed", sec(wall))
    report.add(
        f"  / ideal = {waves} waves x measured single story ({sec(ideal)})",
        f"{wall / ideal:.2f}x",
        f"<= {THROUGHPUT_TARGET:g}x",
        wall / ideal <= THROUGHPUT_TARGET,
    )
    report.add(
        f"  / {waves} waves x model latency sum ({sec(waves * model_sum)})",
        f"{wall / (waves * model_sum):.2f}x",
    )
    pickup = median([x.latency for x in alone])
    run_alone = median([x.passed - x.request for x in alone])
    strict = pickup + waves * run_alone
    report.add(
        f"  / (inbox pickup once + {waves} x single story run) ({sec(strict)})",
        f"{wall / strict:.2f}x",
    )

    own, kids = ((b - a) / stories for a, b in zip(cpu0, cpu1, strict=True))
    report.add(
        "  batch: CPU per story, the daemon / its reaped children (git, bwrap, sh) / sum",
        f"{ms(own)} / {ms(kids)} / {ms(own + kids)}",
    )
    if strace:
        execs = count_execs(work / "throughput-execve.txt")
        total = sum(execs.values())
        report.add(
            "  batch: programs started per story (strace; timings above not valid)",
            f"{total / stories:.1f}",
        )
        for name, n in sorted(execs.items(), key=lambda kv: -kv[1]):
            report.add(f"    {name}", f"{n / stories:.2f}")

    # Where one story's time goes, alone.
    d = alone[-1]
    a_reqs = _story_requests(reqs, d.story)
    a_turns = [t for x in alone for t in _turn_client_times(reqs, x.story, CALL_LATENCY_S)]
    a_work = [r for r in a_reqs if r.role == "worker"]
    a_rev = [r for r in a_reqs if r.role == "reviewer"]
    report.add("  alone: rename -> first worker request", ms(median([x.latency for x in alone])))
    report.add(
        "  alone: client side of a worker turn (request gap - latency; median)",
        ms(median(a_turns)),
    )
    if a_work and a_rev:
        report.add(
            "  alone: last worker reply -> review request (commit check, verify, diff)",
            ms(a_rev[0].at - a_work[-1].at - CALL_LATENCY_S),
        )
        report.add(
            "  alone: review reply -> passed (state, move to done/)",
            ms(d.passed - a_rev[-1].at - CALL_LATENCY_S),
        )

    # Where the batch's time goes.
    first_req = {}
    for s in ids:
        w = [r.at for r in reqs if r.story == s and r.role == "worker"]
        first_req[s] = min(w)
    starts = sorted(first_req.values())
    report.add(
        f"  batch: rename -> first request of wave 1 (1st / {PARALLEL}th story)",
        f"{ms(starts[0] - t0)} / {ms(starts[min(PARALLEL, len(starts)) - 1] - t0)}",
    )
    runs = [passed[s] - first_req[s] for s in ids]
    alone_runs = [x.passed - x.request for x in alone]
    report.add(
        "  story run, first request -> passed: alone / batch median / batch max",
        f"{sec(median(alone_runs))} / {sec(median(runs))} / {sec(max(runs))}",
    )
    b_turns = [t for s in ids for t in _turn_client_times(reqs, s, CALL_LATENCY_S)]
    report.add(
        "  batch: client side of a worker turn (median / p90)",
        f"{ms(median(b_turns))} / {ms(p90(b_turns))}",
    )
    # A freed slot -> the next story's first request: pair the k-th pass with the k-th
    # story that started after wave 1.
    ends = sorted(passed.values())
    late = starts[PARALLEL:]
    handover = [st - en for st, en in zip(late, ends, strict=False)]
    if handover:
        report.add(
            "  batch: a story passes -> next story's first request (median / max)",
            f"{ms(median(handover))} / {ms(max(handover))}",
        )
        report.add(
            "  batch: last story of wave 2: first request -> passed",
            sec(max(passed[s] - first_req[s] for s in ids if first_req[s] >= late[0])),
        )


# --------------------------------------------------------------------------- 3. memory


def bench_memory(report: Report, work: Path, extra: dict) -> None:
    report.section(
        f"3. resident memory and threads of `hero watch` (no target; {PARALLEL} stories, "
        f"model latency {MEMORY_LATENCY_S:g} s/call)"
    )
    # 2 s after 'watching': imports done, the shared LlmClient made, the observer running.
    with model_and_daemon(work, "memory", MEMORY_LATENCY_S, TURNS, PARALLEL, 2.0) as (
        server,
        daemon,
        _,
    ):
        home = daemon.home
        idle = []
        for _ in range(5):
            idle.append(daemon.status())
            time.sleep(0.2)
        ids = [f"mem{i}" for i in range(PARALLEL)]
        drop_batch(home, ids)
        deadline = time.monotonic() + 60
        while True:  # every story has sent its first worker request
            started = {r.story for r in server.requests() if r.role == "worker"}
            if all(s in started for s in ids):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {sorted(started)} of {ids} started within 60 s")
            time.sleep(0.05)
        running = []
        t_end = time.monotonic() + 3.0
        while time.monotonic() < t_end:
            running.append(daemon.status())
            time.sleep(0.2)
        hwm = daemon.status()["VmHWM"]
        stop_s = daemon.stop()
    interrupted = sum(1 for s in ids if read_state(home, s).get("status") == "interrupted")

    idle_rss = median([s["VmRSS"] for s in idle])
    idle_threads = max(s["Threads"] for s in idle)
    peak = max(s["VmRSS"] for s in running)
    report.add("idle `hero watch` VmRSS (2 s after 'watching'; median of 5)", mib(idle_rss))
    report.add("  idle threads", str(idle_threads))
    report.add(
        f"{PARALLEL} stories running: VmRSS (peak of {len(running)} samples over 3 s)", mib(peak)
    )
    report.add(
        f"  increase per running story ((peak - idle) / {PARALLEL})",
        mib((peak - idle_rss) / PARALLEL),
    )
    report.add(
        "  threads while running (min / peak)",
        f"{min(s['Threads'] for s in running)} / {max(s['Threads'] for s in running)}",
    )
    report.add("  VmHWM (the daemon's peak RSS so far)", mib(hwm))
    for key, label in (
        ("idle after latency", "section 1's daemon, idle after {n} stories"),
        ("idle after throughput", "section 2's daemon, idle after {n} stories"),
    ):
        if key in extra:
            st, n = extra[key]
            report.add(
                "  " + label.format(n=n) + ": VmRSS, threads",
                f"{mib(st['VmRSS'])}, {st['Threads']}",
            )
    report.add(
        f"SIGTERM with {PARALLEL} running -> daemon exited",
        sec(stop_s),
    )
    report.add("  stories recorded as interrupted", f"{interrupted} of {PARALLEL}")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--drops", type=int, default=DROPS, help=f"section 1 drops (default {DROPS})"
    )
    parser.add_argument(
        "--stories", type=int, default=STORIES, help=f"section 2 batch (default {STORIES})"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--strace",
        action="store_true",
        help="count the programs the daemon starts in section 2 (strace slows it: timings invalid)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="run each daemon under cProfile (all threads); stats to DIR/<section>.prof",
    )
    parser.add_argument("--only", choices=["latency", "throughput", "memory"], help="one section")
    args = parser.parse_args(argv)

    global PROFILE_DIR
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        PROFILE_DIR = args.profile.resolve()
    started = time.monotonic()
    print(env_line("hero", "watchdog", "openai"), flush=True)
    report = Report()
    extra: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="hero-bench-daemon-"))

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    sections: list[tuple[str, Callable[[], None]]] = [
        (
            "inbox latency",
            lambda: bench_latency(report, work, max(2, args.drops), SIDE_DROPS, extra),
        ),
        (
            "throughput",
            lambda: bench_throughput(
                report, work, max(PARALLEL + 1, args.stories), SINGLES, extra, args.strace
            ),
        ),
        ("memory", lambda: bench_memory(report, work, extra)),
    ]
    if args.only:
        sections = [(n, f) for n, f in sections if args.only in n]
    try:
        run_sections(report, sections, after_each=lambda: cleanup(False))
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
