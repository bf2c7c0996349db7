"""Alerts: a command and/or a webhook told when a story ends or a provider's breaker opens.

The settings are roles.yaml's ``notify_*`` keys (:class:`hero.config.sections.NotifySettings`). An
event is one JSON object with ``"event"`` and ``"version"`` fields (:func:`story_end_event`,
:func:`breaker_open_event`; docs/watch.md#alerts lists the fields); the command gets it on
its stdin, with the event's name as its last argument, and the webhook as a POST body.

Sending never holds up what sent it: each target (the command, the webhook) has a thread
of its own that takes events from a short queue, one attempt each, within
``notify_timeout_s``. A failure is one log line; a full queue drops the event with one log
line (a dead receiver must not grow memory, nor get a storm of retries once it is back).
:meth:`Notifier.close` waits a bounded time for what is queued, so that ``hero run`` does
not exit before its one alert is sent.

What is sent is hostile-proof in both directions: the event has every secret hero knows
redacted (``config.secrets``) and its long strings cut; the command runs with the safe
environment of the Worker's commands (``runner.child_env``: no key, no HERO_* variable but
the marker its leftovers are ended by) and reads the event from a file, never from its
argument list (what it leaves running is ended, even after a ``kill -9`` of hero: coreutils'
``timeout`` holds it); the webhook URL is never shown beyond its scheme and host (its path or
query may be the token).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hero import __version__
from hero.config.home import Config
from hero.config.sections import NotifySettings
from hero.leftovers import RUN_MARKER, kill_marked
from hero.names import StoryRef
from hero.redact import Redactor
from hero.runner import child_env, run_process, truncate_middle
from hero.state import TERMINAL, RunState, StateError, Status, load_state

#: The shape of the events' JSON; raised only when a field changes meaning or goes away
#: (fields may be added without it).
EVENT_VERSION = 1
STORY_END = "story_end"
BREAKER_OPEN = "breaker_open"
#: The events a queue holds before it drops new ones (one line in the log each).
QUEUE_SIZE = 100
#: The longest text of one field sent (an error may quote a whole command's output).
MAX_FIELD_CHARS = 4000
#: The command's stdout and stderr kept in runs/notify.log, each.
MAX_OUTPUT_BYTES = 64 * 1024
#: runs/notify.log is moved to notify.log.1 once it is larger than this.
MAX_LOG_BYTES = 8 * 1024 * 1024
#: The most of a webhook's answer read (its status is what counts).
MAX_ANSWER_BYTES = 64 * 1024

Log = Any
"""A structlog-like logger: ``info(event, **fields)`` and ``warning(event, **fields)``."""


def shown_url(url: str) -> str:
    """What hero shows of a webhook URL: its scheme and host (and port), never its user,
    password, path or query, any of which may be the token."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(a webhook URL)"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}/..."


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def story_end_event(
    state: RunState, home: Path, *, duration_s: float | None = None
) -> dict[str, Any]:
    """The event of a story's end, version 1: the run record in the shape users' scripts
    read (the fields are documented in docs/watch.md#alerts)."""
    ref = state.ref
    usage = state.usage if isinstance(state.usage, dict) else {}
    return {
        "event": STORY_END,
        "version": EVENT_VERSION,
        "time": utc_now(),
        "home": str(home),
        "id": state.id,
        "key": ref.key,
        "plan": state.plan or None,
        "title": state.title,
        "status": state.status.value,
        "rounds": len(state.rounds),
        "verdicts": [r.review.verdict for r in state.rounds],
        "branch": state.branch or None,
        "base_sha": state.base_sha or None,
        "head_sha": state.head_sha or None,
        "error": state.error or None,
        "usage": {
            "tokens_in": usage.get("tokens_in", 0),
            "tokens_out": usage.get("tokens_out", 0),
            "llm_calls": usage.get("llm_calls", 0),
            "cost_usd": usage.get("cost_usd", 0.0),
        },
        "duration_s": None if duration_s is None else round(duration_s, 3),
        "state": str(ref.state_path(home)),
        "story": state.story_path or None,
    }


def breaker_open_event(info: Mapping[str, Any], home: Path) -> dict[str, Any]:
    """The event of a provider's circuit breaker opening, version 1: ``provider``, ``kind``,
    ``reason``, ``retry_at`` and whatever else the breaker says."""
    plain = {  # a value JSON has no type for (a datetime, say) is sent as its text
        str(k): v if isinstance(v, str | int | float | bool | type(None)) else str(v)
        for k, v in info.items()
        if k not in ("event", "version", "time", "home")
    }
    return {
        "event": BREAKER_OPEN,
        "version": EVENT_VERSION,
        "time": utc_now(),
        "home": str(home),
        "provider": None,
        "kind": None,
        "reason": None,
        "retry_at": None,
        **plain,
    }


@dataclass
class _Channel:
    """One target (the command, the webhook): its queue and the thread that empties it."""

    name: str
    deliver: Callable[[str, bytes, str], None]
    """``deliver(event_name, body, what)``: one attempt; logs its own outcome."""
    # unbounded, so that close()'s end mark always fits; send() keeps it to QUEUE_SIZE
    queue: queue.Queue[tuple[str, bytes, str] | None] = field(default_factory=queue.Queue)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name=f"notify-{self.name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if item is None:
                    return
                self.deliver(*item)
            finally:
                self.queue.task_done()


class Notifier:
    """Sends alerts as the configuration says; does nothing when no target is set.

    Thread-safe: the daemon's story threads call :meth:`story_ended` at once."""

    def __init__(self, config: Config, log: Log) -> None:
        self.settings: NotifySettings = config.notify
        self.home = config.home
        self.log = log
        self._redactor = Redactor(config.secrets)
        self._env = child_env(
            allow=config.safety.pass_env,
            drop_names=config.key_env_names,
            secret_values=config.secrets,
        )
        self._file_lock = threading.Lock()
        self._sent = 0  # commands run (only the command's thread counts them)
        self._closed = False
        self._channels: list[_Channel] = []
        if self.settings.command:
            self._channels.append(_Channel("command", self._run_command))
        if self.settings.webhook:
            self._channels.append(_Channel("webhook", self._post))
        for channel in self._channels:
            channel.start()

    @property
    def enabled(self) -> bool:
        return bool(self._channels) and bool(self.settings.events)

    # -- the events ----------------------------------------------------------------------

    def story_ended(self, state: RunState, *, duration_s: float | None = None) -> None:
        """A story's run returned: sent when it has ended (passed, gave_up, error, ...),
        not when it was only interrupted (it resumes)."""
        if self.enabled and state.status in TERMINAL:
            self.send(story_end_event(state, self.home, duration_s=duration_s))

    def story_recorded(self, ref: StoryRef, *, error: str = "") -> None:
        """A story ended without its run returning a record (skipped under a failed
        dependency; crashed, ``error`` saying how): its run record as saved, sent."""
        if not self.enabled:
            return
        try:
            state = load_state(self.home, ref)
        except StateError:
            state = None
        if state is None:
            state = RunState(id=ref.id, plan=ref.plan)
        if error:
            state = replace(state, status=Status.ERROR, error=error)
        self.story_ended(state)

    def breaker_opened(self, info: Mapping[str, Any]) -> None:
        """A provider's circuit breaker opened (``info``: provider, kind, reason, retry_at)."""
        self.send(breaker_open_event(info, self.home))

    def send(self, event: Mapping[str, Any]) -> None:
        """Queue ``event`` for every target; returns at once. Never raises."""
        name = str(event.get("event", ""))
        if not self.enabled or name not in self.settings.events or self._closed:
            return
        try:
            body = json.dumps(self._clean(event), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError) as exc:  # a value JSON cannot hold: a bug, said once
            self.log.warning("notify failed", notify_event=name, error=f"not JSON: {exc}")
            return
        what = str(event.get("key") or event.get("provider") or "")
        for channel in self._channels:
            if channel.queue.qsize() < QUEUE_SIZE:
                channel.queue.put((name, body, what))
            else:
                self.log.warning(
                    "notify dropped",
                    notify_event=name,
                    target=channel.name,
                    reason=f"{QUEUE_SIZE} events already wait: the target is too slow or down",
                )

    def close(self, wait_s: float) -> None:
        """Send what is queued, waiting at most ``wait_s`` seconds in all; what is not sent
        by then is left to the (daemon) threads and lost when the process exits."""
        self._closed = True
        deadline = time.monotonic() + wait_s
        for channel in self._channels:
            channel.queue.put(None)
        for channel in self._channels:
            if channel.thread is not None:
                channel.thread.join(max(0.0, deadline - time.monotonic()))
        left = [c.name for c in self._channels if c.thread is not None and c.thread.is_alive()]
        if left:
            self.log.warning(
                "notify unfinished", targets=left, note=f"not sent within {wait_s:g} s"
            )

    # -- sending -------------------------------------------------------------------------

    def _clean(self, event: Mapping[str, Any]) -> Any:
        """``event`` with no secret and no endless text in it."""

        def cut(value: Any) -> Any:
            if isinstance(value, str):
                return truncate_middle(value, MAX_FIELD_CHARS)
            if isinstance(value, Mapping):
                return {str(k): cut(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [cut(v) for v in value]
            return value

        return self._redactor.redact_value(cut(dict(event)))

    def _run_command(self, name: str, body: bytes, what: str) -> None:
        command = self.settings.command
        if isinstance(command, str):  # $0 names it in sh's messages; $1 is the event
            argv = ["sh", "-c", command, "hero-notify", name]
        else:
            argv = [*command, name]
        timeout = self.settings.timeout_s
        # coreutils' timeout ends the command's group even when hero is killed (-9) meanwhile
        backstop = shutil.which("timeout")
        wrapped = [backstop, "-s", "KILL", f"{timeout + 2:g}", *argv] if backstop else argv
        self._sent += 1
        # what escapes the group (setsid, a daemon) carries the marker, and is ended with it
        marker = f"{self.home}/runs/notify/{os.getpid()}-{self._sent}"
        try:
            with tempfile.TemporaryFile() as stdin:
                stdin.write(body)
                stdin.seek(0)
                result = run_process(
                    wrapped,
                    self.home,
                    timeout_s=timeout,
                    env={**self._env, RUN_MARKER: marker},
                    max_output=MAX_OUTPUT_BYTES,
                    stdin=stdin,
                )
        except OSError as exc:
            error = f"cannot start {argv[0]}: {exc.strerror or exc}"
            self._record(name, what, error, "")
            self.log.warning("notify failed", notify_event=name, target="command", error=error)
            return
        finally:
            kill_marked(marker)
        outcome = (
            f"timed out after {timeout:g} s" if result.timed_out else f"exit {result.exit_code}"
        )
        output = "".join(
            f"[{label}]\n{text.rstrip()}\n"
            for label, text in (("stdout", result.stdout), ("stderr", result.stderr))
            if text.strip()
        )
        log_path = self._record(name, what, outcome, output)
        if result.exit_code == 0:
            self.log.info("notified", notify_event=name, target="command")
        else:
            self.log.warning(
                "notify failed", notify_event=name, target="command", error=outcome, log=log_path
            )

    def _record(self, name: str, what: str, outcome: str, output: str) -> str:
        """Append the command's outcome and output to runs/notify.log; returns its path
        (or why it could not be written)."""
        path = self.home / "runs" / "notify.log"
        text = self._redactor.redact(f"--- {utc_now()} {name} {what}: {outcome}\n{output}")
        with self._file_lock:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    if path.stat().st_size > MAX_LOG_BYTES:
                        os.replace(path, path.with_name("notify.log.1"))
                except FileNotFoundError:
                    pass
                with open(path, "a", encoding="utf-8", errors="replace") as fh:
                    fh.write(text)
            except OSError as exc:
                return f"{path} (not written: {exc.strerror or exc})"
        return str(path)

    def _post(self, name: str, body: bytes, what: str) -> None:
        url = self.settings.webhook
        shown = shown_url(url)
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": f"hero/{__version__}",
                "X-Hero-Event": name,
            },
        )
        opener = urllib.request.build_opener(_NoRedirects)
        try:
            with opener.open(request, timeout=self.settings.timeout_s) as answer:
                answer.read(MAX_ANSWER_BYTES)
                status = answer.status
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}"
            exc.close()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            error = _why(exc, self.settings.timeout_s)
        else:
            self.log.info("notified", notify_event=name, target="webhook", url=shown, status=status)
            return
        error = self._redactor.redact(error.replace(url, shown))
        self.log.warning(
            "notify failed", notify_event=name, target="webhook", url=shown, error=error
        )


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is a failure: the event goes where the user said, nowhere else."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _why(exc: BaseException, timeout_s: float) -> str:
    """One line for a webhook that could not be reached."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return f"timed out after {timeout_s:g} s"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return " ".join(str(reason).split()) or type(reason).__name__


class StderrLog:
    """The logger of a command without structlog (``hero run``): ``hero: notify failed:
    target=webhook ...`` on stderr, warnings only."""

    def info(self, event: str, **fields: Any) -> None:
        pass

    def warning(self, event: str, **fields: Any) -> None:
        import sys

        detail = " ".join(f"{k}={v}" for k, v in fields.items())
        print(f"hero: {event}: {detail}", file=sys.stderr, flush=True)
