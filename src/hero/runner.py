"""The one place that runs child processes, and the one rule for their environment.

``run_command`` runs ``sh -c COMMAND`` (the worker's and the verifier's commands) with
stdout+stderr through one pipe; ``run_process`` runs a program with its arguments (hero's own
git) with stdout and stderr apart. Either way the child runs in its own process group
(session) with stdin from /dev/null, and the whole group is killed on timeout, on cancel, on
KeyboardInterrupt, and after the child exits (so background children neither outlive it nor
keep its pipes open).

A command whose environment carries a story's marker (``RUN_MARKER``) may leave processes
outside its group (``setsid``, ``nohup``, a daemonizing server): when it returns, however it
returns, ``run_command`` ends every process started since it began that carries the same
marker (``kill_marked``), so nothing a story started outlives the command that started it.

``run_command`` may run the command inside a sandbox (``hero.sandbox.bwrap``): the sandbox's
``wrap`` turns ``sh -c COMMAND`` into the argv that confines it. There the command has its own
PID namespace, so every process it started ends with it: ``run_command`` holds the namespace's
init (PID 1, ``NamespaceInit``) from before the command starts, and when the command returns it
kills the init and waits until the namespace is empty. ``kill_marked`` is a second net.
A sandbox that carries ``limits`` (``hero.sandbox.limits.Limits``) has them put on that init, so on
everything the command starts, before the command starts (``hero.sandbox.limits.confine``); a limit
the command hit is said in ``CommandResult.limit_note``. A ``CommandHost`` (the worker's
round sandbox, ``hero.sandbox.session``) runs the command itself, under the same contract;
it reads the output with ``Capture`` too.

``child_env`` is the environment every child gets: no secrets, nothing that waits on a person.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from hero.leftovers import KILL_WAIT_S, RUN_MARKER, kill_marked, running_pids, stat_fields
from hero.sandbox.limits import Confinement, Limits, confine

TIMEOUT_EXIT_CODE = 124
CANCEL_EXIT_CODE = 130
TERM_GRACE_S = 1.0
_READ_CHUNK = 65536
_READER_JOIN_S = 2.0
_POLL_MAX_S = 0.05
_UNBOUNDED = 1 << 62  # a capture budget that is never reached

#: Set for every child: nothing may page, open an editor, or prompt for a password.
_SAFE_ENV = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "CI": "1",
    "GIT_EDITOR": "true",
    "EDITOR": "true",
}

#: What a command inherits of hero's environment by name (``child_env(allow=...)``), beside
#: ``LC_*`` and the names a user adds (``pass_env`` in config/roles.yaml): where programs are,
#: whose they are, the language, the time zone, the certificates, the toolchains' homes.
#: Nothing else: not a token, a broker URL, a proxy with a password, nor any ``HERO_*``.
SAFE_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TERM",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "JAVA_HOME",
        "GOPATH",
        "GOROOT",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "PYENV_ROOT",
        "NVM_DIR",
    }
)
SAFE_PREFIXES = ("LC_",)
#: Names hero keeps for itself: never passed on from its environment, whatever a user allows.
OWN_PREFIX = "HERO_"

#: Where every push of a child's git goes instead (``url.<this>.pushInsteadOf`` with an empty
#: prefix, which every push URL starts with): a path that is no repository, so `git push`
#: fails, and git's error names this text. Not a sandbox: a command that drops the
#: ``GIT_CONFIG_*`` variables, or overrides the setting with ``git -c``, can still push.
PUSH_REFUSED_URL = "/dev/null/hero: git push is disabled for the worker and the checks/"
#: Git settings every child gets, through ``GIT_CONFIG_COUNT`` (after any it already has).
_GIT_CONFIG = ((f"url.{PUSH_REFUSED_URL}.pushInsteadOf", ""),)


class Wrapper(Protocol):
    """What confines a command (``hero.sandbox.bwrap.Sandbox``): the argv that runs ``argv`` in
    ``cwd`` inside it, in a PID namespace of its own. It writes to ``info_fd``, as JSON, the
    ``child-pid`` of the namespace's init (PID 1), then closes it; it starts the command
    only once ``block_fd`` reads something or end of file."""

    def wrap(
        self,
        argv: Sequence[str],
        cwd: Path,
        *,
        info_fd: int | None = None,
        block_fd: int | None = None,
    ) -> list[str]: ...


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int  # 124 on timeout; 128+N if killed by signal N; 130 if cancelled
    output: str  # stdout+stderr interleaved, utf-8 errors="replace"
    duration_s: float
    timed_out: bool = False
    cancelled: bool = False
    output_truncated_bytes: int = 0  # bytes dropped beyond max_output_bytes (middle cut)
    limit_note: str | None = None  # the sandbox limit the command hit (hero.sandbox.limits.explain)
    sandbox_note: str | None = None  # what happened to the sandbox itself (it ended, ...)


class CommandHost:
    """A sandbox that outlives its commands and runs them itself
    (``hero.sandbox.session.SandboxSession``): ``run_command`` hands a command to it. A base
    class, not a Protocol: ``run_command`` asks on every command, and isinstance of a plain
    class costs nothing."""

    def run_command(
        self,
        command: str,
        cwd: Path,
        *,
        timeout_s: float,
        env: Mapping[str, str] | None,
        cancel: threading.Event | None,
        max_output_bytes: int,
    ) -> CommandResult:
        raise NotImplementedError


@dataclass(frozen=True)
class ProcessResult:
    argv: tuple[str, ...]
    exit_code: int  # 124 on timeout; 128+N if killed by signal N
    stdout: str  # utf-8, errors="replace"
    stderr: str
    duration_s: float
    timed_out: bool = False
    cut_bytes: int = 0  # bytes of stdout left out (from its middle) to keep within max_output


def child_env(
    base: Mapping[str, str] | None = None,
    *,
    drop_names: Iterable[str] = (),
    secret_values: Iterable[str] = (),
    extra: Mapping[str, str] | None = None,
    git_config: Iterable[tuple[str, str]] = (),
    allow: Iterable[str] | None = None,
) -> dict[str, str]:
    """Environment for child processes: base minus dropped names and secret-valued variables,
    plus non-interactive defaults (pagers, editors, git prompts), then ``extra``; and git
    settings that refuse every push (see ``PUSH_REFUSED_URL``) plus ``git_config``, added
    after the ``GIT_CONFIG_COUNT`` entries the environment already has.

    The one rule for every child hero starts: the worker's and the verifier's commands (base:
    hero's environment, ``allow``: the names of it they may see, see ``SAFE_NAMES``) and
    hero's own git (base: the few variables git needs; see ``hero.git.ops``). A variable whose
    value holds any of ``secret_values`` (compared trimmed, as a substring) is never passed on,
    nor, with ``allow``, one whose name starts with ``HERO_``."""
    source = os.environ if base is None else base
    drop = set(drop_names)
    secrets = [s.strip() for s in secret_values if s and s.strip()]
    env = {
        k: v
        for k, v in source.items()
        if k not in drop and not any(secret in v for secret in secrets)
    }
    if allow is not None:  # an allowlist: the safe names and the ones the user adds
        allowed = SAFE_NAMES | set(allow)
        env = {
            k: v
            for k, v in env.items()
            if not k.startswith(OWN_PREFIX) and (k in allowed or k.startswith(SAFE_PREFIXES))
        }
    env.update(_SAFE_ENV)
    if extra:
        env.update(extra)
    _add_git_config(env, (*_GIT_CONFIG, *git_config))
    return env


def _add_git_config(env: dict[str, str], settings: Iterable[tuple[str, str]]) -> None:
    """Append ``settings`` to the ``GIT_CONFIG_COUNT``/``_KEY_n``/``_VALUE_n`` list in ``env``."""
    try:
        n = max(0, int(env.get("GIT_CONFIG_COUNT", "0")))
    except ValueError:
        n = 0  # git refuses such a count anyway; start a list of hero's own
    for key, value in settings:
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
        n += 1
    env["GIT_CONFIG_COUNT"] = str(n)


def truncate_middle(text: str, max_chars: int) -> str:
    """Keep ~40% head and ~60% tail of ``text`` when it is longer than ``max_chars``,
    joined by a line saying how many characters were cut."""
    if len(text) <= max_chars:
        return text
    marker_len = len(f"\n[... {len(text)} characters cut from the middle ...]\n")
    budget = max(0, max_chars - marker_len)
    head_n = budget * 2 // 5
    tail_n = budget - head_n
    head_end = head_n
    tail_start = len(text) - tail_n
    # Prefer cutting at line boundaries when one is close by.
    nl = text.rfind("\n", 0, head_end)
    if nl >= 0 and head_end - nl <= max(1, head_n // 5):
        head_end = nl + 1
    nl = text.find("\n", tail_start, len(text))
    if nl >= 0 and nl + 1 - tail_start <= max(1, tail_n // 5):
        tail_start = nl + 1
    cut = tail_start - head_end
    head = text[:head_end]
    if head and not head.endswith("\n"):
        head += "\n"
    return f"{head}[... {cut} characters cut from the middle ...]\n{text[tail_start:]}"


class Capture:
    """Drains a pipe, keeping the first and last bytes within a budget."""

    def __init__(self, max_bytes: int) -> None:
        max_bytes = max(0, max_bytes)
        self.head_limit = max_bytes * 2 // 5
        self.tail_limit = max_bytes - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.lock = threading.Lock()

    def feed(self, chunk: bytes) -> None:
        with self.lock:
            self.total += len(chunk)
            room = self.head_limit - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk and self.tail_limit > 0:
                self.tail += chunk
                if len(self.tail) > 2 * self.tail_limit + _READ_CHUNK:
                    del self.tail[: len(self.tail) - self.tail_limit]

    def result(self) -> tuple[str, int]:
        with self.lock:
            head = bytes(self.head)
            tail = bytes(self.tail[-self.tail_limit :]) if self.tail_limit > 0 else b""
            total = self.total
        dropped = total - len(head) - len(tail)
        if dropped <= 0:
            return (head + tail).decode("utf-8", errors="replace"), 0
        # Do not start the tail in the middle of a UTF-8 sequence.
        skip = 0
        while skip < 3 and skip < len(tail) and 0x80 <= tail[skip] <= 0xBF:
            skip += 1
        tail = tail[skip:]
        dropped += skip
        text = (
            head.decode("utf-8", errors="replace")
            + f"\n[... {dropped} bytes cut from the middle ...]\n"
            + tail.decode("utf-8", errors="replace")
        )
        return text, dropped


def _drain(stream: object, capture: Capture) -> None:
    fd = stream.fileno()  # type: ignore[attr-defined]
    try:
        while True:
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except InterruptedError:
                continue
            except OSError:
                break
            if not chunk:
                break
            capture.feed(chunk)
    finally:
        try:
            stream.close()  # type: ignore[attr-defined]
        except OSError:
            pass


def _killpg(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    """True while a non-zombie process is left in the group. Zombies count as gone: an
    orphan is only reaped by init, and some container inits never reap."""
    if not _killpg(pgid, 0):
        return False
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # fields after "(comm)": state ppid pgrp ...
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


class _ExitWatcher:
    """Waits for a child to exit WITHOUT reaping it (so its pid, which is also the process
    group id, cannot be reused while we still signal the group)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.pidfd: int | None = None
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def exited(self) -> bool:
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def wait(self, timeout_s: float) -> bool:
        """True once the child has exited; False after timeout_s."""
        if self.exited():
            return True
        if timeout_s <= 0:
            return False
        if self.pidfd is not None:
            poller = select.poll()
            poller.register(self.pidfd, select.POLLIN)
            # ceil to whole milliseconds so a short wait never becomes a busy loop
            ready = poller.poll(max(1, int(timeout_s * 1000 + 0.999)))
            return bool(ready) or self.exited()
        deadline = time.monotonic() + timeout_s
        delay = 0.0005
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self.exited()
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, _POLL_MAX_S)
            if self.exited():
                return True

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def _terminate_group(proc: subprocess.Popen[bytes], watcher: _ExitWatcher) -> None:
    """SIGTERM the group, give it TERM_GRACE_S, then SIGKILL whatever is left; reap the shell."""
    pgid = proc.pid
    _killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    if watcher.wait(TERM_GRACE_S):
        proc.wait()
        # The shell is gone; let the rest of the group finish its grace period.
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.02)
    _killpg(pgid, signal.SIGKILL)
    proc.wait()


def _poll_ms(timeout_s: float) -> int:
    """``timeout_s`` as a poll timeout: whole milliseconds, rounded up, never negative."""
    return max(0, int(timeout_s * 1000 + 0.999))


class NamespaceInit:
    """The init (PID 1) of a sandboxed command's PID namespace, held by a pidfd.

    bwrap returns as soon as the command exits, and its init, in a session of its own (not
    in the command's process group), is killed only then (``--die-with-parent``). When the
    init dies the kernel kills every other process in its namespace, and the init is seen to
    exit (its pidfd polls readable) only once they are all gone and reaped: its exit is the
    end of the namespace."""

    def __init__(self, pidfd: int, pid: int) -> None:
        self.pidfd = pidfd
        self.pid = pid

    def end(self, timeout_s: float) -> bool:
        """SIGKILL the init, then wait until it, and so every process in its namespace, is
        gone, at most ``timeout_s``; True once they are."""
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except OSError:
            pass  # it has exited already
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        return bool(poller.poll(_poll_ms(timeout_s)))

    def close(self) -> None:
        os.close(self.pidfd)


def namespace_init(
    wrapper: subprocess.Popen[bytes], info_fd: int, deadline: float
) -> NamespaceInit | None:
    """The init of the PID namespace of ``wrapper`` (bwrap, started with ``--info-fd`` and
    ``--block-fd``, whose command has not been let start yet), from what it writes to
    ``info_fd``. None when it made no namespace (it failed first), when it says nothing by
    ``deadline``, or where pidfds are not available."""
    data = b""
    poller = select.poll()
    poller.register(info_fd, select.POLLIN)
    while True:
        if not poller.poll(_poll_ms(deadline - time.monotonic())):
            return None
        chunk = os.read(info_fd, _READ_CHUNK)
        if not chunk:
            break
        data += chunk
    try:
        pid = int(json.loads(data)["child-pid"])
        pidfd = os.pidfd_open(pid)
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return None
    # The init waits on the block fd, so it is there unless bwrap failed before it was
    # done; then its pid may have been reused: the pidfd must be of wrapper's child.
    fields = stat_fields(pid)
    if len(fields) < 2 or int(fields[1]) != wrapper.pid:
        os.close(pidfd)
        return None
    return NamespaceInit(pidfd, pid)


def _supervise(
    proc: subprocess.Popen[bytes],
    pipes: Sequence[tuple[object, Capture]],
    *,
    deadline: float,
    cancel: threading.Event | None,
    end_leftovers: Callable[[], object] | None = None,
) -> tuple[bool, bool]:
    """Drain ``pipes`` until ``proc`` exits, the deadline passes or ``cancel`` is set; end its
    process group either way, then call ``end_leftovers`` (before waiting for the pipes to
    close: a detached process may hold them open). Returns (timed_out, cancelled)."""
    readers = [
        threading.Thread(target=_drain, args=pipe, name="hero-runner-reader", daemon=True)
        for pipe in pipes
    ]
    for reader in readers:
        reader.start()
    watcher = _ExitWatcher(proc.pid)
    timed_out = cancelled = False
    try:
        while True:
            if cancel is not None and cancel.is_set():
                cancelled = True
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = not watcher.exited()
                break
            step = remaining if cancel is None else min(remaining, _POLL_MAX_S)
            if watcher.wait(step):
                break
        if timed_out or cancelled:
            _terminate_group(proc, watcher)
        else:
            # The child has exited but is not reaped yet: kill leftovers in its group.
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if end_leftovers is not None:
            end_leftovers()
    except BaseException:
        _killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait()
            if end_leftovers is not None:
                end_leftovers()
        finally:
            watcher.close()
        for reader in readers:
            reader.join(_READER_JOIN_S)
        raise
    watcher.close()
    for reader in readers:
        reader.join(_READER_JOIN_S)
    return timed_out, cancelled


def _exit_code(proc: subprocess.Popen[bytes], timed_out: bool, cancelled: bool) -> int:
    if timed_out:
        return TIMEOUT_EXIT_CODE
    if cancelled:
        return CANCEL_EXIT_CODE
    rc = proc.returncode
    return 128 - rc if rc < 0 else rc


#: The signals that stop hero (Ctrl-C, and SIGTERM where a command makes it KeyboardInterrupt).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _popen(
    started: list[subprocess.Popen[bytes]], argv: Sequence[str], **kwargs: object
) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **kwargs)``, with Ctrl-C and SIGTERM held off until the child
    is in ``started`` (where the caller's cleanup finds it).

    A KeyboardInterrupt raised inside Popen, after the fork and before it returns, would lose
    the child: nobody would hold its pid to end its group, and it would outlive hero (seen on a
    loaded machine, where the child can run for a while before Popen returns). In the main
    thread (the only one a signal's handler runs in) the signals that arrive meanwhile are
    noted, then raised again once the handlers are back: a handler that raises has the
    child's group killed and reaped first."""
    held: list[int] = []
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for stop in _STOP_SIGNALS:
            if signal.getsignal(stop) is not None:  # None: a handler set outside Python
                previous[stop] = signal.signal(stop, lambda n, _f: held.append(n))
    try:
        proc: subprocess.Popen[bytes] = subprocess.Popen(list(argv), **kwargs)  # type: ignore[call-overload]
        started.append(proc)
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)
    try:
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)  # its handler runs here, and may raise
    except BaseException:
        _killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc


def _end_started(started: list[subprocess.Popen[bytes]]) -> None:
    """Kill the group of a child that was started but is not reaped yet, and reap it (a child
    that ``_supervise`` ended is reaped already: its pid may be another's by now)."""
    for proc in started:
        if proc.returncode is None:
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _start(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str] | None,
    pass_fds: Sequence[int] = (),
    started: list[subprocess.Popen[bytes]] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a command of ``run_command``: own session, stdin from /dev/null, one pipe. The
    child is put in ``started`` as soon as it exists (see ``_popen``)."""
    return _popen(
        [] if started is None else started,
        argv,
        cwd=str(cwd),
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        pass_fds=pass_fds,
    )


def _start_sandboxed(
    sandbox: Wrapper,
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str] | None,
    *,
    deadline: float,
    started: list[subprocess.Popen[bytes]] | None = None,
) -> tuple[subprocess.Popen[bytes], NamespaceInit | None, int, Confinement | None]:
    """Start ``argv`` in ``sandbox``, and the init of its PID namespace, got hold of before
    the sandbox is let start the command (so it cannot have exited, its pid reused). Also
    the read end of bwrap's info pipe, to close once bwrap is gone: when ``deadline`` passed
    first, bwrap may write to it still (and would die of SIGPIPE were it closed). When the
    sandbox has ``limits``, they are put on the init before the command starts: the
    confinement, to end once the namespace is gone."""
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    init: NamespaceInit | None = None
    confinement: Confinement | None = None
    try:
        try:
            # hero.sandbox.bwrap.Sandbox's: a worker's or a check's command, run as the
            # sandbox's unprivileged uid where it has one
            wrap = getattr(sandbox, "wrap_command", sandbox.wrap)
            wrapped = wrap(argv, cwd, info_fd=info_w, block_fd=block_r)
            proc = _start(wrapped, cwd, env, pass_fds=(info_w, block_r), started=started)
        finally:
            os.close(info_w)
            os.close(block_r)
        try:
            init = namespace_init(proc, info_r, deadline)
            limits = getattr(sandbox, "limits", None)  # hero.sandbox.bwrap.Sandbox's
            if init is not None and isinstance(limits, Limits):
                try:
                    cgroups = getattr(sandbox, "cgroups", True)
                    confinement = confine(limits, init.pid, cgroups=cgroups)
                except ProcessLookupError:
                    pass  # the sandbox failed to start: bwrap says why
        except BaseException:
            # The init waits on the block fd still, in bwrap's process group.
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if init is not None:
                init.close()
            raise
    except BaseException:
        os.close(info_r)
        raise
    finally:
        os.close(block_w)  # the sandbox starts the command
    return proc, init, info_r, confinement


def run_command(
    command: str,
    cwd: Path,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cancel: threading.Event | None = None,
    max_output_bytes: int = 8_000_000,
    sandbox: Wrapper | CommandHost | None = None,
) -> CommandResult:
    """Run ``sh -c command`` in ``cwd`` in its own process group, inside ``sandbox`` when
    one is given; see the module docstring. A ``CommandHost`` runs it itself.

    Raises OSError if the command cannot be started (e.g. ``cwd`` does not exist).
    """
    if isinstance(sandbox, CommandHost):
        return sandbox.run_command(
            command,
            cwd,
            timeout_s=timeout_s,
            env=env,
            cancel=cancel,
            max_output_bytes=max_output_bytes,
        )
    lent = getattr(sandbox, "lent", None)  # hero.sandbox.bwrap.Sandbox's
    with lent() if lent is not None else contextlib.nullcontext():
        # what the command writes is its uid's while it runs (where it has one)
        return _run_command(command, cwd, timeout_s, env, cancel, max_output_bytes, sandbox)


def _run_command(
    command: str,
    cwd: Path,
    timeout_s: float,
    env: Mapping[str, str] | None,
    cancel: threading.Event | None,
    max_output_bytes: int,
    sandbox: Wrapper | None,
) -> CommandResult:
    start = time.monotonic()
    marker = None if env is None else env.get(RUN_MARKER)
    before = running_pids() if marker else None
    argv = ["sh", "-c", command]
    init: NamespaceInit | None = None
    confinement: Confinement | None = None
    info = -1
    started: list[subprocess.Popen[bytes]] = []
    try:
        if sandbox is None:
            proc = _start(argv, cwd, env, started=started)
        else:
            proc, init, info, confinement = _start_sandboxed(
                sandbox, argv, cwd, env, deadline=start + timeout_s, started=started
            )
    except BaseException:
        _end_started(started)  # stopped between the child's start and its supervision
        raise
    capture = Capture(max_output_bytes)

    def end_leftovers() -> None:
        # What left the group (setsid, nohup, a daemon) ends with the command too.
        if init is not None:
            # bwrap returns once the command exits, while its PID namespace may still
            # hold processes: end it, and wait until every process in it is gone.
            init.end(KILL_WAIT_S)
        if confinement is not None:
            confinement.end()  # the command's cgroups: read, emptied, removed
        if marker and before is not None:
            kill_marked(marker, spare=before)

    try:
        timed_out, cancelled = _supervise(
            proc,
            [(proc.stdout, capture)],
            deadline=start + timeout_s,
            cancel=cancel,
            end_leftovers=end_leftovers,
        )
    except BaseException:
        _end_started(started)
        raise
    finally:
        if confinement is not None:
            confinement.end()
        if init is not None:
            init.close()
        if info >= 0:
            os.close(info)
    output, dropped = capture.result()
    exit_code = _exit_code(proc, timed_out, cancelled)
    return CommandResult(
        command=command,
        exit_code=exit_code,
        output=output,
        duration_s=time.monotonic() - start,
        timed_out=timed_out,
        cancelled=cancelled,
        output_truncated_bytes=dropped,
        limit_note=None if confinement is None else confinement.note(exit_code, output),
    )


def run_process(
    argv: Sequence[str],
    cwd: Path,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    max_output: int | None = None,
    stdin: IO[bytes] | None = None,
) -> ProcessResult:
    """Run ``argv`` (no shell) in ``cwd`` in its own process group; see the module docstring.

    ``stdin``: a file it reads as its standard input (a file, not a pipe hero writes: a
    program that never reads it cannot block hero); /dev/null when None.

    All of stdout and stderr is kept (callers parse it), up to ``max_output`` bytes of each:
    past that the middle is left out (``ProcessResult.cut_bytes`` says how much of stdout),
    so that a program's output never holds more than that in hero's memory. Raises OSError
    if the program cannot be started (not installed, or ``cwd`` does not exist).
    """
    start = time.monotonic()
    started: list[subprocess.Popen[bytes]] = []
    try:
        proc = _popen(
            started,
            argv,
            cwd=str(cwd),
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL if stdin is None else stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        budget = _UNBOUNDED if max_output is None else max_output
        out, err = Capture(budget), Capture(budget)
        timed_out, _ = _supervise(
            proc, [(proc.stdout, out), (proc.stderr, err)], deadline=start + timeout_s, cancel=None
        )
    except BaseException:
        _end_started(started)  # stopped before its supervision began
        raise
    stdout, cut = out.result()
    return ProcessResult(
        argv=tuple(argv),
        exit_code=_exit_code(proc, timed_out, False),
        stdout=stdout,
        stderr=err.result()[0],
        duration_s=time.monotonic() - start,
        timed_out=timed_out,
        cut_bytes=cut,
    )
