#!/usr/bin/env python
"""hero engine benchmark: stories on `hero worker` processes through Celery.

    python bench/engine.py              # the report (about 3 min on 2 cores)
    python bench/engine.py --workers 1,4 --runs 3    # shorter
    python bench/engine.py --keep       # keep the temporary homes, logs and request records

1. Scale-out: 16 stories (4 bash turns, a final answer, one review: 6 model calls at 0.5 s)
   with 1, 2 and 4 single-slot workers (`hero worker --concurrency 1`, each in a folder of
   its own standing in for a machine), a real `redis-server` on a free loopback port (no
   persistence), a bare git remote, and one coordinator `hero watch --exit-when-idle`
   (`engine: celery`, `max_parallel: 16`): wall time from the 16 stories renamed into the
   inbox until the coordinator exits, and the speed-up over one worker (target: 4 workers
   >= 3.5x one).
2. Engine latency per story: the same story dropped into a warm `hero watch`, engine local
   vs engine celery with one idle worker: file renamed into inbox/ -> the coordinator's
   `runs/state/<id>.json` says passed; the difference is what the engine adds.

The model is hero's scripted one in a separate process (`python -m hero.llm.scripted
--handler daemon:handler --latency 0.5`, bench/daemon.py's stateless policy). No key, no
network. A report, not a test: it prints a table and exits 0 even when a target is missed
(a measurement it could not take shows FAILED, with the reason below the table). Every
process it starts carries a marker in its environment, and whatever still carries it at
the end is killed. See bench/README.md for what each row means.
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
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon import ScriptedServer, ms, sec
from daemon import cleanup as daemon_cleanup
from report import (
    GIT_ISOLATION,
    Report,
    env_line,
    hero_env,
    make_home,
    median,
    print_report,
    run_sections,
    story_text,
)

STORIES = 16  # section 1: stories in the batch
WORKER_COUNTS = (1, 2, 4)  # section 1: single-slot workers per configuration
TURNS = 4  # bash turns, then a final answer: 5 worker turns, then one review
CALLS = TURNS + 2  # model calls per story
CALL_LATENCY_S = 0.5  # the scripted model's latency per call
SPEEDUP_TARGET = 3.5  # 4 workers over 1
FIRST_STORY_SLACK_S = 0.5  # a worker's first story: task -> first request, over its later ones
MAX_PARALLEL = 16
LEASE_S = 5  # short: renewed every 1.7 s; a lost story would come back in 10 s
LATENCY_RUNS = 5  # section 2: measured drops per engine (after one warm-up drop)
PAUSE_S = 0.6  # section 2: after a story passed, before the next drop

WORKER_READY_TIMEOUT_S = 90.0
BATCH_TIMEOUT_S = 600.0
STORY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0

#: Every process the bench starts (and everything those start) has MARK_ENV=<token> in its
#: environment: whatever still has it at the end is killed.
MARK_ENV = "HERO_BENCH_ENGINE"
TOKEN = uuid.uuid4().hex
BENCH_DIR = Path(__file__).resolve().parent


# --------------------------------------------------------------------------- processes


class Proc:
    """A child process in a session of its own, stdout and stderr into ``log`` (one file)."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = log
        self.launched = time.time()
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=log.parent,
                env=env,
                start_new_session=True,
            )
        _PROCS.append(self)

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, chars: int = 1500) -> str:
        return self.output()[-chars:]

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_output(self, pattern: str, timeout: float) -> re.Match[str]:
        rx = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout
        while True:
            found = rx.search(self.output())
            if found:
                return found
            if not self.running():
                raise RuntimeError(
                    f"{self.name} exited {self.proc.returncode} before printing {pattern!r}:\n"
                    f"{self.tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name}: no {pattern!r} within {timeout:g} s:\n{self.tail()}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, then SIGKILL to its whole session if it does not exit in ``timeout``."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
                return
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


_PROCS: list[Proc] = []


def marked_env() -> dict[str, str]:
    """hero_env (no HERO_HOME, no user git config), unbuffered, with the bench's marker, and
    no broker URL from the environment (the homes' config names the bench's redis-server);
    the engine key the coordinator and its workers share (engine: celery needs one)."""
    env = hero_env()
    env.pop("HERO_BROKER_URL", None)
    env.pop("HERO_STATE_URL", None)
    env["HERO_ENGINE_KEY"] = "bench-engine-key-" + TOKEN
    env["PYTHONUNBUFFERED"] = "1"
    env[MARK_ENV] = TOKEN
    return env


def kill_leftovers() -> int:
    """SIGKILL every process that still carries the bench's marker; how many."""
    needle = f"\0{MARK_ENV}={TOKEN}\0".encode()
    killed = 0
    for _ in range(3):  # one killed mid-fork may have left a child the pass missed
        found = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    environ = b"\0" + fh.read() + b"\0"
            except OSError:
                continue
            if needle in environ:
                with contextlib.suppress(OSError):
                    os.kill(int(entry), signal.SIGKILL)
                    found += 1
        killed += found
        if not found:
            break
        time.sleep(0.1)
    return killed


def stop_all() -> None:
    for proc in reversed(_PROCS):
        with contextlib.suppress(Exception):
            proc.stop()
    _PROCS.clear()


# --------------------------------------------------------------------------- redis-server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def redis_binary() -> str:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )
    if found is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    return found


def redis_version() -> str:
    try:
        out = subprocess.run(
            [redis_binary(), "--version"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, RuntimeError, subprocess.TimeoutExpired):
        return "?"
    found = re.search(r"v=(\S+)", out)
    return found.group(1) if found else "?"


def start_redis(base: Path) -> tuple[Proc, str]:
    """A redis-server on a free loopback port, no persistence; returns (process, URL)."""
    data = base / "redis"
    data.mkdir()
    for attempt in range(5):  # a free port may be taken between the look and the bind
        port = free_port()
        argv = [
            redis_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(data),
            "--daemonize",
            "no",
        ]
        proc = Proc("redis-server", argv, base / f"redis-{attempt}.log", marked_env())
        deadline = time.monotonic() + 20
        while proc.running() and time.monotonic() < deadline:
            if redis_ping(port):
                return proc, f"redis://127.0.0.1:{port}/0"
            time.sleep(0.05)
        proc.stop()
    raise RuntimeError(f"redis-server did not start:\n{proc.tail()}")


# --------------------------------------------------------------------------- homes


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={**os.environ, **GIT_ISOLATION},
        timeout=60,
    )


def knobs(broker: str = "", remote: Path | None = None) -> str:
    """roles.yaml knobs: with a broker, the celery engine's; the local engine's otherwise."""
    lines = [f"max_parallel: {MAX_PARALLEL}", "max_retries: 1", "sandbox: none"]
    if broker:
        lines += [
            "engine: celery",
            f"broker_url: {json.dumps(broker)}",
            f"target_remote: {json.dumps(str(remote))}",
            f"lease_s: {LEASE_S}",
        ]
    return "\n".join(lines) + "\n"


def coordinator_home(base: Path, base_url: str, broker: str = "") -> tuple[Path, Path | None]:
    """report.make_home (target repo ``base/repo``) with ``knobs``; with a broker, the bare
    remote ``base/remote.git`` is cloned from the target repo. Returns (home, remote)."""
    remote = base / "remote.git" if broker else None
    home = make_home(base, base_url, knobs(broker, remote))
    if remote is not None:
        git(base, "clone", "-q", "--bare", str(base / "repo"), str(remote))
    (home / "staging").mkdir()
    return home, remote


def start_worker(base: Path, name: str, base_url: str, broker: str, remote: Path) -> Proc:
    """`hero worker --concurrency 1` on "machine" ``base/name``: a hero home of its own
    (``hero/``, the coordinator's knobs and model), its work folder ``work/`` (the clone of
    the remote, the runs). config.load_config wants a target_repo in every home: the worker
    gets an empty repository of its own, which it does not use."""
    machine = base / name
    home = machine / "hero"
    (home / "config" / "providers").mkdir(parents=True)
    (home / "config" / "providers" / "scripted.yaml").write_text(
        f"name: scripted\nbase_url: {base_url}\ndefault_model: scripted-bench\n"
    )
    unused = machine / "unused-target"
    unused.mkdir()
    git(unused, "init", "-q")
    (home / "config" / "roles.yaml").write_text(
        f"target_repo: {json.dumps(str(unused))}\nllm_max_attempts: 1\n{knobs(broker, remote)}"
        "worker:\n  provider: scripted\nreviewer:\n  provider: scripted\n"
    )
    workdir = machine / "work"
    workdir.mkdir()
    argv = [
        sys.executable,
        "-m",
        "hero",
        "worker",
        "--home",
        str(home),
        "--workdir",
        str(workdir),
        "--concurrency",
        "1",
        "--hostname",
        f"{name}@%h",
        "--loglevel",
        "info",
    ]
    return Proc(name, argv, machine / "worker.log", marked_env())


def wait_ready(workers: Sequence[Proc]) -> None:
    """Every worker printed `hero worker ready` and celery's `<name>@<host> ready.`."""
    for w in workers:
        w.wait_output(r"hero worker ready", WORKER_READY_TIMEOUT_S)
        w.wait_output(r"\S+@\S+ ready\.", WORKER_READY_TIMEOUT_S)


def start_coordinator(home: Path, *args: str) -> Proc:
    argv = [
        sys.executable,
        "-m",
        "hero",
        "watch",
        "--home",
        str(home),
        "--log-format",
        "json",
        *args,
    ]
    return Proc("coordinator", argv, home.parent / "coordinator.log", marked_env())


def events(proc: Proc, name: str) -> list[dict[str, Any]]:
    """The coordinator's JSON log lines named ``name``, each with ``_t`` (its timestamp)."""
    found = []
    for line in proc.output().splitlines():
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("event") == name:
            try:
                ev["_t"] = datetime.fromisoformat(str(ev.get("timestamp"))).timestamp()
            except ValueError:
                ev["_t"] = float("nan")
            found.append(ev)
    return found


def wait_event(proc: Proc, name: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = events(proc, name)
        if found:
            return found[0]
        if not proc.running():
            raise RuntimeError(f"hero watch exited before {name!r}:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {name!r} from hero watch within {timeout:g} s:\n{proc.tail()}")
        time.sleep(0.02)


_CELERY_LINE = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): \w+/[^\]]*\] "
    r"Task hero\.run_story\[(\S+)\] (received|succeeded)",
    re.MULTILINE,
)


@dataclass
class Task:
    """One story task on a worker, from celery's INFO lines (local time, ms resolution)."""

    story: str
    received: float
    succeeded: float = float("nan")


def worker_tasks(proc: Proc) -> list[Task]:
    """The story tasks ``proc`` received, in order, with when each succeeded."""
    tasks: dict[str, Task] = {}
    for stamp, task_id, what in _CELERY_LINE.findall(proc.output()):
        t = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if what == "received":
            tasks[task_id] = Task(task_id.rsplit("-", 1)[0], t)
        elif task_id in tasks:
            tasks[task_id].succeeded = t
    return sorted(tasks.values(), key=lambda x: x.received)


# --------------------------------------------------------------------------- stories


def stage(home: Path, story_id: str, *, settled: bool = False) -> tuple[Path, Path]:
    """Write the story in ``staging/`` (same filesystem, not watched); returns (staged file,
    its name in inbox/). ``settled``: its mtime set 10 s back, so a coordinator that finds
    it in inbox/ at start-up takes it at once instead of letting it settle."""
    src = home / "staging" / f"{story_id}.md"
    src.write_text(
        story_text(story_id, f"Bench story {story_id}", "Nothing to change; bench/engine.py."),
        encoding="utf-8",
    )
    if settled:
        back = time.time() - 10
        os.utime(src, (back, back))
    return src, home / "inbox" / src.name


def read_state(home: Path, story_id: str) -> dict[str, Any]:
    try:
        return json.loads((home / "runs" / "state" / f"{story_id}.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_passed(home: Path, story_id: str, proc: Proc, timeout: float) -> float:
    """Poll the coordinator's record of ``story_id`` (every 10 ms) until it says passed;
    returns when that record was written (its mtime at the first look that saw it)."""
    path = home / "runs" / "state" / f"{story_id}.json"
    deadline = time.monotonic() + timeout
    while True:
        try:
            st = path.stat()
            status = json.loads(path.read_text()).get("status")
        except (OSError, ValueError):
            st, status = None, None
        if status == "passed" and st is not None:
            return min(st.st_mtime, time.time())
        if status in ("gave_up", "error", "skipped", "budget_exceeded"):
            raise RuntimeError(f"{story_id} ended {status}: {read_state(home, story_id)}")
        if not proc.running():
            raise RuntimeError(f"hero watch exited before {story_id} passed:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{story_id} not passed within {timeout:g} s:\n{proc.tail()}")
        time.sleep(0.01)


@dataclass
class Calls:
    """A story's model requests (server time.time()), from the scripted server's record."""

    worker: list[float] = field(default_factory=list)
    review: list[float] = field(default_factory=list)


def calls_by_story(server: ScriptedServer) -> dict[str, Calls]:
    out: dict[str, Calls] = {}
    for r in server.requests():
        c = out.setdefault(r.story, Calls())
        (c.review if r.role == "reviewer" else c.worker).append(r.at)
    for c in out.values():
        c.worker.sort()
        c.review.sort()
    return out


@contextlib.contextmanager
def scripted(work: Path, name: str) -> Iterator[ScriptedServer]:
    server = ScriptedServer(work, name, CALL_LATENCY_S, TURNS)
    try:
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------- 1. scale-out


@dataclass
class Batch:
    workers: int
    wall: float  # first rename -> the coordinator exited
    passed: int
    rc: int | None
    per_worker: list[int]
    calls_ok: int  # stories that asked the model exactly CALLS times
    watching: float  # coordinator launch -> 'watching'
    first_request: float  # first rename -> the first worker request at the server
    last_passed: float  # first rename -> the last record written passed
    bad: dict[str, str]
    task_first: list[float]  # per worker: its first task, received -> first model request
    task_later: list[float]  # every later task: received -> first model request
    task_run: list[float]  # every task after a worker's first: received -> succeeded
    idle: list[float]  # a task succeeded -> the same worker received its next one
    first_over_later: list[float]  # per worker: its first story's wait - its later ones' median
    warm: dict[str, list[float]]  # warm-up step -> each worker's seconds for it


def run_batch(work: Path, n_workers: int, stories: int) -> Batch:
    """One configuration: redis-server, remote, coordinator home, ``n_workers`` ready
    workers; then the stories renamed into inbox/ and `hero watch --exit-when-idle`."""
    base = work / f"scale-{n_workers}"
    base.mkdir()
    with scripted(work, f"scale-{n_workers}") as server:
        redis, broker = start_redis(base)
        try:
            home, remote = coordinator_home(base, server.base_url, broker)
            assert remote is not None
            ids = [f"w{n_workers}s{i:02d}" for i in range(stories)]
            staged = [stage(home, s, settled=True) for s in ids]
            workers = [
                start_worker(base, f"w{i + 1}", server.base_url, broker, remote)
                for i in range(n_workers)
            ]
            try:
                wait_ready(workers)
                t0 = time.time()
                for src, dst in staged:
                    os.rename(src, dst)
                coord = start_coordinator(home, "--exit-when-idle")
                try:
                    rc = coord.proc.wait(BATCH_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    raise TimeoutError(
                        f"the coordinator did not exit within {BATCH_TIMEOUT_S:g} s:\n"
                        f"{coord.tail()}"
                    ) from None
                wall = time.time() - t0
                watching = events(coord, "watching")
            finally:
                for w in workers:
                    w.stop()
            tasks = [worker_tasks(w) for w in workers]
            warm = warm_steps(workers)
        finally:
            redis.stop()
    states = {s: read_state(home, s) for s in ids}
    bad = {s: str(st.get("status")) for s, st in states.items() if st.get("status") != "passed"}
    calls = calls_by_story(server)
    calls_ok = sum(
        1 for s in ids if s in calls and len(calls[s].worker) + len(calls[s].review) == CALLS
    )
    per_worker = []
    for i in range(n_workers):
        ran = base / f"w{i + 1}" / "work" / "home" / "runs" / "state"
        per_worker.append(sum(1 for s in ids if (ran / f"{s}.json").exists()))
    firsts = [min(calls[s].worker) for s in ids if s in calls and calls[s].worker]
    first_call = {s: min(c.worker) for s, c in calls.items() if c.worker}
    task_first, task_later, task_run, idle, first_over_later = [], [], [], [], []
    for ts in tasks:
        waits = [first_call.get(task.story, float("nan")) - task.received for task in ts]
        for i, task in enumerate(ts):
            (task_first if i == 0 else task_later).append(waits[i])
            if i > 0:
                task_run.append(task.succeeded - task.received)
        if len(waits) > 1:
            first_over_later.append(waits[0] - median(waits[1:]))
        idle += [b.received - a.succeeded for a, b in zip(ts, ts[1:], strict=False)]
    last_passed = max(
        (
            (home / "runs" / "state" / f"{s}.json").stat().st_mtime
            for s in ids
            if states[s].get("status") == "passed"
        ),
        default=float("nan"),
    )
    return Batch(
        workers=n_workers,
        wall=wall,
        passed=stories - len(bad),
        rc=rc,
        per_worker=per_worker,
        calls_ok=calls_ok,
        watching=(watching[0]["_t"] - coord.launched) if watching else float("nan"),
        first_request=(min(firsts) - t0) if firsts else float("nan"),
        last_passed=last_passed - t0,
        bad=bad,
        task_first=task_first,
        task_later=task_later,
        task_run=task_run,
        idle=idle,
        first_over_later=first_over_later,
        warm=warm,
    )


_WARM_LINE = re.compile(r"^hero worker warm-up: (\w+): .* in ([\d.]+) s$", re.MULTILINE)


def warm_steps(workers: Sequence[Proc]) -> dict[str, list[float]]:
    """Each warm-up step `hero worker` printed before `ready`, with each worker's seconds."""
    steps: dict[str, list[float]] = {}
    for w in workers:
        for step, seconds in _WARM_LINE.findall(w.output()):
            steps.setdefault(step, []).append(float(seconds))
    return steps


def bench_batch(report: Report, work: Path, n_workers: int, stories: int, out: dict) -> None:
    label = f"{n_workers} worker" + ("s" if n_workers > 1 else "")
    b = run_batch(work, n_workers, stories)
    out[n_workers] = b
    waves = math.ceil(stories / n_workers)
    model_sum = CALLS * CALL_LATENCY_S
    report.add(f"{label}: {stories} stories renamed into inbox/ -> coordinator exited", sec(b.wall))
    ok = not b.bad and b.calls_ok == stories and b.rc == 0
    report.add(
        f"  all passed, each asked the model {CALLS} times (none ran twice), exit 0",
        f"{b.passed} / {b.calls_ok} of {stories}, rc {b.rc}",
        f"{stories} / {stories}, rc 0",
        ok,
    )
    if b.bad:
        report.notes.append(f"{label}: stories that did not pass: {b.bad}")
    report.add("  stories run per worker", " / ".join(str(n) for n in b.per_worker))
    report.add(
        f"  / ideal = {waves} waves x model latency sum ({sec(waves * model_sum)})",
        f"{b.wall / (waves * model_sum):.2f}x",
    )
    report.add("  coordinator launch -> 'watching' logged", ms(b.watching))
    report.add("  rename -> first worker request at the model", ms(b.first_request))
    report.add("  rename -> last record written passed", sec(b.last_passed))
    nums = [x for x in b.task_first if not math.isnan(x)]
    report.add(
        "  a worker's first story: task received -> first model request (median)", ms(median(nums))
    )
    nums = [x for x in b.task_later if not math.isnan(x)]
    report.add("  later stories: task received -> first model request (median)", ms(median(nums)))
    gaps = [x for x in b.first_over_later if not math.isnan(x)]
    if gaps:
        report.add(
            "  first story's wait over the same worker's later ones (per worker)",
            " / ".join(ms(x) for x in gaps),
            f"<= {FIRST_STORY_SLACK_S * 1000:.0f} ms",
            max(gaps) <= FIRST_STORY_SLACK_S,
        )
    for step, secs in b.warm.items():
        report.add(
            f"  before 'ready': warm-up {step} (median / max)",
            f"{sec(median(secs))} / {sec(max(secs))}",
        )
    nums = [x for x in b.task_run if not math.isnan(x)]
    report.add("  later stories: task received -> succeeded (median)", sec(median(nums)))
    nums = [x for x in b.idle if not math.isnan(x)]
    if nums:
        report.add(
            "  worker idle between stories: succeeded -> next received (median / max)",
            f"{ms(median(nums))} / {ms(max(nums))}",
        )


def bench_speedup(report: Report, out: dict, counts: Sequence[int]) -> None:
    if 1 not in out:
        raise RuntimeError("the 1-worker configuration has no result to compare with")
    one = out[1].wall
    for n in counts:
        if n == 1:
            continue
        if n not in out:
            report.add(f"speed-up, {n} workers over 1", "FAILED", "", False)
            continue
        target = f">= {SPEEDUP_TARGET:g}x" if n == 4 else "-"
        ok = (one / out[n].wall >= SPEEDUP_TARGET) if n == 4 else None
        report.add(
            f"speed-up, {n} workers over 1 ({sec(one)} / {sec(out[n].wall)})",
            f"{one / out[n].wall:.2f}x",
            target,
            ok,
        )
        report.add(f"  efficiency (speed-up / {n})", f"{one / out[n].wall / n:.0%}")


# --------------------------------------------------------------------------- 2. latency


@dataclass
class Drop:
    story: str
    dropped: float  # time.time() right before the rename into inbox/
    passed: float  # the coordinator's record written passed
    first_worker: float  # the story's first worker request at the server
    review: float  # its review request at the server

    @property
    def total(self) -> float:
        return self.passed - self.dropped


def run_drops(work: Path, engine: str, runs: int) -> list[Drop]:
    """A warm `hero watch` (engine local, or celery with one idle worker); one warm-up drop
    then ``runs`` drops, one at a time. Returns every drop, the warm-up first."""
    base = work / f"latency-{engine}"
    base.mkdir()
    procs: list[Proc] = []
    drops: list[tuple[str, float, float]] = []
    with scripted(work, f"latency-{engine}") as server:
        try:
            broker, remote = "", None
            if engine == "celery":
                redis, broker = start_redis(base)
                procs.append(redis)
            home, remote = coordinator_home(base, server.base_url, broker)
            if engine == "celery":
                assert remote is not None
                worker = start_worker(base, "w1", server.base_url, broker, remote)
                procs.append(worker)
                wait_ready([worker])
            coord = start_coordinator(home)
            procs.append(coord)
            wait_event(coord, "watching", 60)
            time.sleep(1.0)
            for i in range(runs + 1):
                sid = f"{engine[:3]}{i:02d}"
                src, dst = stage(home, sid)
                t = time.time()
                os.rename(src, dst)
                drops.append((sid, t, wait_passed(home, sid, coord, STORY_TIMEOUT_S)))
                time.sleep(PAUSE_S)
        finally:
            for p in reversed(procs):  # the coordinator first, the broker last
                p.stop()
    calls = calls_by_story(server)
    out = []
    for sid, t, passed in drops:
        c = calls.get(sid, Calls())
        out.append(
            Drop(
                sid,
                t,
                passed,
                min(c.worker) if c.worker else float("nan"),
                min(c.review) if c.review else float("nan"),
            )
        )
    return out


def bench_latency(report: Report, work: Path, runs: int) -> None:
    local = run_drops(work, "local", runs)
    celery = run_drops(work, "celery", runs)
    lo, ce = local[1:], celery[1:]

    def med(ds: list[Drop], f: Any) -> float:
        return median([f(d) for d in ds])

    lt, ct = med(lo, lambda d: d.total), med(ce, lambda d: d.total)
    report.add(f"engine local: rename -> passed (median of {len(lo)})", sec(lt))
    report.add(f"engine celery, one idle worker: rename -> passed (median of {len(ce)})", sec(ct))
    report.add("extra latency per story (celery - local)", ms(ct - lt))
    report.add(
        f"  model latency sum ({CALLS} calls x {CALL_LATENCY_S:g} s)", sec(CALLS * CALL_LATENCY_S)
    )
    parts = [
        ("  rename -> first worker request", lambda d: d.first_worker - d.dropped),
        ("  first worker request -> review request", lambda d: d.review - d.first_worker),
        (
            "  review reply -> record written passed",
            lambda d: d.passed - d.review - CALL_LATENCY_S,
        ),
    ]
    for label, f in parts:
        a, b = med(lo, f), med(ce, f)
        report.add(f"{label}: local / celery / difference", f"{ms(a)} / {ms(b)} / {ms(b - a)}")
    report.add(
        "  first drop (not counted): local / celery (its worker warmed up before it)",
        f"{sec(local[0].total)} / {sec(celery[0].total)}",
    )
    report.add(
        "  spread: local min-max / celery min-max",
        f"{sec(min(d.total for d in lo))}-{sec(max(d.total for d in lo))} / "
        f"{sec(min(d.total for d in ce))}-{sec(max(d.total for d in ce))}",
    )


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--stories", type=int, default=STORIES, help=f"section 1 batch (default {STORIES})"
    )
    parser.add_argument(
        "--workers",
        default=",".join(str(n) for n in WORKER_COUNTS),
        help="section 1 worker counts, comma-separated (default 1,2,4)",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=LATENCY_RUNS,
        help=f"section 2 drops per engine (default {LATENCY_RUNS})",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    counts = sorted({int(n) for n in args.workers.split(",") if n.strip()})

    started = time.monotonic()
    print(
        env_line("hero", "celery", "kombu", "redis", "openai")
        + f", redis-server {redis_version()}",
        flush=True,
    )
    report = Report()
    out: dict[int, Batch] = {}
    work = Path(tempfile.mkdtemp(prefix="hero-bench-engine-"))

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    scale_title = (
        f"1. scale-out: {args.stories} stories x ({TURNS} bash turns + 1 final turn + verify "
        f"`true` + 1 review), model latency {CALL_LATENCY_S:g} s/call, single-slot workers, "
        f"max_parallel {MAX_PARALLEL}, lease_s {LEASE_S}"
    )
    latency_title = (
        f"2. engine latency per story: the same story ({CALLS} model calls) into a warm "
        "`hero watch`, engine local vs engine celery with one idle worker"
    )

    def batch(n: int, first: bool) -> None:
        if first:
            report.section(scale_title)
        bench_batch(report, work, n, max(1, args.stories), out)

    def latency() -> None:
        report.section(latency_title)
        bench_latency(report, work, args.runs)

    sections: list[tuple[str, Any]] = [
        (f"{n} worker{'s' if n > 1 else ''}", lambda n=n, i=i: batch(n, i == 0))
        for i, n in enumerate(counts)
    ]
    if len(counts) > 1:
        sections.append(("speed-up", lambda: bench_speedup(report, out, counts)))
    if args.runs > 0:
        sections.append(("engine latency", latency))
    try:
        run_sections(report, sections, after_each=stop_all)
    finally:
        stop_all()
        daemon_cleanup(False)
        leftovers = kill_leftovers()
        signal.signal(signal.SIGTERM, previous)
        if leftovers:
            report.notes.append(f"killed {leftovers} process(es) left over by the bench's ones")
        if args.keep:
            report.notes.append(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print_report(report, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
