"""Processes of hero for the tests: ``hero watch`` daemons (:class:`Daemon`) with their JSON logs,
a stateless scripted model for many stories at once (:class:`Policy`), and :class:`Procs`, what
the ``procs`` fixture (tests/conftest.py) ends after each test."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import (
    Hero,
    alive,
    commit_once,
    is_review,
    rescans_done,
    review_round,
    step_of,
    story_of,
    verdict,
    watch_command,
    worker_round,
)

from hero.llm.scripted import Reply, ScriptedModel, call, text

RUN_TIMEOUT_S = 120.0  # generous "did not hang" bounds, not speed checks
STOP_SPEC_S = 10.0  # the issue: a clean stop exits within 10 s


# --------------------------------------------------------------------------- helpers


def wait_for(cond: Callable[[], Any], timeout: float = RUN_TIMEOUT_S, step: float = 0.05) -> Any:
    """Poll ``cond`` until it returns something truthy or ``timeout`` passes; returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(step)


APPROVED = verdict("APPROVED", "Good.")
CHANGES = verdict("CHANGES_REQUESTED", "Not yet: more please.")


@dataclass
class Policy:
    """A stateless scripted model for many stories at once.

    The worker's reply is picked by (story, round, step) from ``plans`` (default: commit
    ``<id>-r<round>.txt``, then finish); the reviewer's by (story, round) from ``reviews``
    (default: approve). A story in ``gates`` waits for its event before every worker turn.
    """

    plans: dict[str, dict[int, list[Reply]]] = field(default_factory=dict)
    reviews: dict[str, Callable[[int], Reply]] = field(default_factory=dict)
    gates: dict[str, threading.Event] = field(default_factory=dict)

    def __call__(self, body: dict[str, Any]) -> Reply:
        sid = story_of(body)
        if is_review(body):
            review = self.reviews.get(sid)
            return review(review_round(body)) if review else APPROVED
        gate = self.gates.get(sid)
        if gate is not None:
            gate.wait(RUN_TIMEOUT_S)
        n = worker_round(body)
        plan = self.plans.get(sid, {}).get(n) or [
            call("bash", command=commit_once(f"{sid}-r{n}")),
            text(f"Round {n} of {sid} done."),
        ]
        return plan[min(step_of(body), len(plan) - 1)]


def worker_rounds(model: ScriptedModel, sid: str, since: int = 0) -> list[int]:
    """The round of every worker request for story ``sid``, in order."""
    return [
        worker_round(r.body)
        for r in model.requests[since:]
        if not is_review(r.body) and story_of(r.body) == sid
    ]


def set_age(path: Path, seconds_ago: float) -> None:
    """Make ``path`` look written ``seconds_ago`` (negative: in the future)."""
    t = time.time() - seconds_ago
    os.utime(path, (t, t))


def read_pid(path: Path) -> int | None:
    try:
        content = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(content) if content.isdigit() else None


def subjects(repo: Path, ref: str) -> list[str]:
    return git(repo, "log", "--format=%s", f"main..{ref}").splitlines()


class Daemon:
    """`python -m hero watch --home HOME --log-format json [ARGS]` with its output in files
    (with ``rescan_s``: hero's CLI behind ``helpers.RESCAN_PROBE``)."""

    def __init__(
        self, home: Path, log_dir: Path, name: str, *args: str, rescan_s: float | None = None
    ) -> None:
        self.out = log_dir / f"{name}.out"
        self.err = log_dir / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                watch_command(
                    "--home", str(home), "--log-format", "json", *args, rescan_s=rescan_s
                ),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=log_dir,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def events(self, name: str | None = None, **match: Any) -> list[dict[str, Any]]:
        found = []
        for line in self.err.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line being written
            if name is not None and event.get("event") != name:
                continue
            if all(event.get(k) == v for k, v in match.items()):
                found.append(event)
        return found

    def wait_event(
        self, name: str, *, count: int = 1, timeout: float = RUN_TIMEOUT_S, **match: Any
    ) -> dict[str, Any]:
        """The ``count``-th event ``name`` matching ``match``; fails if the daemon exits first."""

        def seen() -> list[dict[str, Any]] | None:
            events = self.events(name, **match)
            if len(events) >= count:
                return events
            if self.proc.poll() is not None:
                events = self.events(name, **match)  # a last look after its exit
                if len(events) >= count:
                    return events
                pytest.fail(
                    f"hero watch exited {self.proc.returncode} before {count}x {name} {match}:\n"
                    + self.output()
                )
            return None

        events = wait_for(seen, timeout)
        if not events:
            self.proc.kill()
            pytest.fail(f"no {count}x {name} {match} within {timeout} s:\n{self.output()}")
        return events[count - 1]

    def wait_rescans(self, n: int) -> None:
        """Until ``n`` more inbox rescans (started with ``rescan_s``) have been handled."""
        now = len(self.events("rescanned"))
        self.wait_event("rescanned", count=rescans_done(now, n))

    def wait_exit(self, timeout: float = RUN_TIMEOUT_S) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"hero watch did not exit within {timeout} s:\n{self.output()}")

    def wait_file(self, path: Path, timeout: float = RUN_TIMEOUT_S) -> int:
        """Wait until ``path`` holds a pid; fail early if the daemon exits first."""

        def pid() -> int | None:
            found = read_pid(path)
            if found is None and self.proc.poll() is not None:
                pytest.fail(f"hero watch exited {self.proc.returncode}:\n{self.output()}")
            return found

        found = wait_for(pid, timeout)
        if found is None:
            pytest.fail(f"{path} never appeared:\n{self.output()}")
        return found


@dataclass
class Procs:
    """The processes a test starts (``hero watch`` daemons, ``hero run`` children, pids of
    what they start), ended by the ``procs`` fixture whatever the test did."""

    log_dir: Path
    daemons: list[Daemon] = field(default_factory=list)
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)

    def start(
        self, home: Path, *args: str, name: str = "", rescan_s: float | None = None
    ) -> Daemon:
        name = name or f"watch-{len(self.daemons) + 1}"
        d = Daemon(home, self.log_dir, name, *args, rescan_s=rescan_s)
        self.daemons.append(d)
        return d

    def append(self, item: Hero | subprocess.Popen[bytes] | int) -> None:
        """Keep a ``hero run`` child, another child process, or the pid of a process, to end."""
        if isinstance(item, int):
            self.pids.append(item)
        else:
            self.children.append(item.proc if isinstance(item, Hero) else item)

    def end_all(self) -> None:
        for proc in [d.proc for d in self.daemons] + self.children:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in self.pids:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
