"""Helpers shared by the tests that script hero's model and watch real processes."""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import git

from hero.config.providers import Provider, RoleConfig
from hero.config.sections import LlmSettings
from hero.llm.client import LlmClient
from hero.llm.scripted import Reply

#: This interpreter, quoted for a shell command (a check, a worker's bash call).
PY = shlex.quote(sys.executable)
#: calc with ``sub`` added: what the worker writes for the story ``write_story`` writes.
SUB_IMPL = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
#: The worker's commit, ``{msg}`` its message.
COMMIT = "git add -A && git commit -q -m {msg}"
#: The checks of a story that adds ``calc.sub``.
VERIFY_SUB = [f"{PY} -m unittest -q", f"{PY} -c 'from calc import sub; assert sub(5, 3) == 2'"]

#: The root of hero's checkout: README.md, docs/, src/.
REPO_ROOT = Path(__file__).resolve().parents[1]


def uncomment_proposal(roles_yaml: str) -> str:
    """A config/roles.yaml `hero init` wrote with its proposal for the target repository
    taken on, as the block says: "# " off each line from its first key (``# setup:`` or
    ``# default_verify:``, the first in the file) to the blank line that ends it."""
    lines = roles_yaml.split("\n")
    start = next(i for i, line in enumerate(lines) if line in ("# setup:", "# default_verify:"))
    end = lines.index("", start)
    lines[start:end] = [line.removeprefix("# ") for line in lines[start:end]]
    return "\n".join(lines)


def is_review(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith("You are hero's reviewer")


def task_text(body: dict[str, Any]) -> str:
    return str(body["messages"][1]["content"])


def worker_round(body: dict[str, Any]) -> int:
    m = re.search(r"This is round (\d+) of at most", task_text(body))
    assert m
    return int(m.group(1))


def review_round(body: dict[str, Any]) -> int:
    m = re.search(r"## Verifier summary \(round (\d+)\)", task_text(body))
    assert m
    return int(m.group(1))


def story_of(body: dict[str, Any]) -> str:
    """The story a request is about: the "# Story <id>:" line of its task."""
    m = re.search(r"^# Story (\S+?):", task_text(body), re.M)
    assert m, "a task without its story line"
    return m.group(1)


def step_of(body: dict[str, Any]) -> int:
    """How many answers the model already gave in this conversation."""
    return sum(1 for m in body["messages"] if m.get("role") == "assistant")


#: The acceptance criterion of the story ``write_story`` writes (tests/conftest.py).
SUB_AC = "`calc.sub(5, 3) == 2`"


def verdict(
    v: str = "APPROVED",
    summary: str = "Reviewed.",
    *,
    ac: str | None = None,
    satisfied: bool = True,
    comments: Sequence[Mapping[str, Any]] = (),
    cached_tokens: int | None = None,
) -> Reply:
    """A reviewer's answer: verdict ``v`` with ``summary``, the criterion ``ac`` checked
    (``satisfied``) when given, and ``comments``."""
    checked = [{"ac": ac, "satisfied": satisfied, "commit": ""}] if ac is not None else []
    answer = {"verdict": v, "summary": summary, "ac_check": checked, "comments": list(comments)}
    return Reply(content=json.dumps(answer), cached_tokens=cached_tokens)


def commit_once(name: str) -> str:
    """A command that commits ``name``.txt, once, however often it is run."""
    return (
        f"test -f {name}.txt || "
        f"{{ echo {name} > {name}.txt && git add -A && git commit -q -m {name}; }}"
    )


def long_command(pid_file: Path | str) -> str:
    """Sleep in a background child (pid in ``pid_file``) unless an earlier run already did."""
    return (
        f"test -f {pid_file} || "
        f"{{ sleep 30 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait; }}"
    )


def alive(pid: int) -> bool:
    """Running, and not a zombie (nothing reaps orphans on some machines)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):  # gone, or going (ProcessLookupError mid-read)
        return False


def wait_dead(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


#: The inbox rescan interval of a daemon started with ``watch_command(..., rescan_s=...)``.
FAST_RESCAN_S = 0.1

#: Prepended to a ``python -c`` daemon: it rescans its inbox every ``sys.argv[1]`` seconds
#: (popped) instead of every RESCAN_S (10 s: hero has no setting for it), and logs each
#: rescan as a "rescanned" event, so a test waits for rescans, not for a clock.
RESCAN_PROBE = """
import sys

import structlog

import hero.daemon.dispatcher

hero.daemon.dispatcher.RESCAN_S = float(sys.argv.pop(1))
real_rescan = hero.daemon.dispatcher.Inbox.rescan


def rescan(self):
    real_rescan(self)
    structlog.get_logger("hero").info("rescanned")


hero.daemon.dispatcher.Inbox.rescan = rescan
"""


def watch_command(*args: str, rescan_s: float | None = None) -> list[str]:
    """`python -m hero watch ARGS`; with ``rescan_s``, hero's own CLI behind ``RESCAN_PROBE``."""
    if rescan_s is None:
        return [sys.executable, "-m", "hero", "watch", *args]
    main = "from hero.cli import main\n\nsys.exit(main(sys.argv[1:]))\n"
    return [sys.executable, "-c", RESCAN_PROBE + main, str(rescan_s), "watch", *args]


def rescans_done(count_now: int, n: int) -> int:
    """How many "rescanned" events to wait for so that ``n`` rescans after the
    ``count_now``-th have been handled, whatever they found. A rescan's files are
    considered (queued, refused, started) by the main loop before the one after next is
    logged: one more may come first (the burst rescan in ``Inbox.due``). That holds for
    files older than the settle delay (see ``backlog``): a fresh one is due only later."""
    return count_now + n + 2


def backlog(*paths: Path) -> Path:
    """Make story files look written a minute ago, long before the daemon starts: due at
    start-up at once, without the settle wait (1 s) that a fresh file gets, which tests not
    about it need not sit out (test_watch's duplicate-ids-in-the-backlog test keeps its
    files fresh). Returns the first path."""
    t = time.time() - 60
    for path in paths:
        os.utime(path, (t, t))
    return paths[0]


def load_state(home: Path, story_id: str = "s1") -> dict[str, Any]:
    return json.loads((home / "runs" / "state" / f"{story_id}.json").read_text())


def is_ancestor(repo: Path, sha: str, ref: str) -> bool:
    return (
        subprocess.run(["git", "merge-base", "--is-ancestor", sha, ref], cwd=repo).returncode == 0
    )


def sha_of(repo: Path, subject: str, ref: str = "hero/s1") -> str:
    for line in git(repo, "log", "--format=%H %s", f"main..{ref}").splitlines():
        sha, _, subj = line.partition(" ")
        if subj == subject:
            return sha
    raise AssertionError(f"no commit '{subject}' on {ref}")


# --------------------------------------------------------------------------- hero run as a child

HERO_START_TIMEOUT_S = 60.0  # generous "did not hang" bounds, not speed checks
HERO_RUN_TIMEOUT_S = 120.0


class Hero:
    """`python -m hero run STORY --home HOME -v` as a child process, output to files."""

    def __init__(self, home: Path, story: Path, log_dir: Path, name: str) -> None:
        self.out = log_dir / f"{name}.out"
        self.err = log_dir / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hero", "run", str(story), "--home", str(home), "-v"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=log_dir,
            )

    def output(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def wait(self, timeout_s: float = HERO_RUN_TIMEOUT_S) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"hero did not finish within {timeout_s} s:\n{self.output()}")

    def wait_for_file(self, path: Path) -> int:
        """Wait until ``path`` holds a pid; fail early if hero exits first."""
        deadline = time.monotonic() + HERO_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if path.is_file():
                content = path.read_text().strip()
                if content.isdigit():
                    return int(content)
            if self.proc.poll() is not None:
                pytest.fail(f"hero exited {self.proc.returncode} early:\n{self.output()}")
            time.sleep(0.05)
        self.proc.kill()
        self.proc.wait()
        pytest.fail(f"{path} never appeared:\n{self.output()}")

    def wait_until(self, cond: Callable[[], Any], what: str) -> Any:
        """Poll ``cond`` until truthy; fail if hero exits first or it never comes."""
        deadline = time.monotonic() + HERO_START_TIMEOUT_S
        while time.monotonic() < deadline:
            value = cond()
            if value:
                return value
            if self.proc.poll() is not None:
                pytest.fail(f"hero exited {self.proc.returncode} before {what}:\n{self.output()}")
            time.sleep(0.05)
        pytest.fail(f"never saw {what}:\n{self.output()}")


WAIT_S = 30.0  # generous "did not hang" bound, not a speed check


def read_lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def wait_for_line(lines: queue.Queue[str], needle: str, seen: list[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not any(needle in line for line in seen):
        try:
            seen.append(lines.get(timeout=max(deadline - time.monotonic(), 0.01)))
        except queue.Empty:
            pytest.fail(f"no line with {needle!r}; got {''.join(seen)!r}")


MESSAGES = [
    {"role": "system", "content": "You are a test."},
    {"role": "user", "content": "hello"},
]


def make_client(
    base_url: str,
    *,
    role: str = "worker",
    model: str = "test-model",
    reasoning_effort: str | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    input_price: float | None = None,
    output_price: float | None = None,
    max_attempts: int = 3,
    backoff_base_s: float = 0.01,
    backoff_max_s: float = 0.05,
    timeout_s: float = 10.0,
    retry_after_max_s: float = 120.0,
    max_response_mb: float = 8.0,
    cancel: threading.Event | None = None,
    on_retry: Callable[[str], None] | None = None,
) -> LlmClient:
    provider = Provider(
        name="scripted",
        base_url=base_url,
        default_model="default-model",
        headers=dict(headers or {}),
        input_usd_per_mtok=input_price,
        output_usd_per_mtok=output_price,
    )
    role_config = RoleConfig(
        role=role,
        provider=provider,
        model=model,
        reasoning_effort=reasoning_effort,
        api_key=api_key,
    )
    settings = LlmSettings(
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        backoff_base_s=backoff_base_s,
        backoff_max_s=backoff_max_s,
        retry_after_max_s=retry_after_max_s,
        max_response_mb=max_response_mb,
    )
    return LlmClient(role_config, settings, cancel=cancel, on_retry=on_retry)


class Log:
    """A structlog-shaped logger that keeps every event, with its level and bound context, for
    assertions on what hero said."""

    def __init__(self, events: list[dict[str, Any]] | None = None, **context: Any) -> None:
        self.events = events if events is not None else []
        self.context = context

    def bind(self, **more: Any) -> Log:
        return Log(self.events, **self.context, **more)

    def _add(self, level: str, event: str, **fields: Any) -> None:
        self.events.append({"event": event, "level": level, **self.context, **fields})

    def debug(self, event: str, **fields: Any) -> None:
        self._add("debug", event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self._add("info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._add("warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._add("error", event, **fields)

    def named(self, event: str) -> list[dict[str, Any]]:
        """The events called ``event``."""
        return [e for e in self.events if e["event"] == event]

    def at(self, level: str) -> list[tuple[str, dict[str, Any]]]:
        """``(event, fields)`` of each event said at ``level``."""
        return [
            (e["event"], {k: v for k, v in e.items() if k not in ("event", "level")})
            for e in self.events
            if e["level"] == level
        ]

    def text(self) -> str:
        """Everything said, as one text."""
        return json.dumps(self.events, default=str)
