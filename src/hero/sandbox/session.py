"""One sandbox per worker round: the round's bash commands run inside it, each as isolated as
in a sandbox of its own, for a fraction of the cost.

A fresh bubblewrap per command (``hero.runner.run_command`` with a ``hero.sandbox.bwrap.Sandbox``)
spends several milliseconds making namespaces, mounts and a network namespace, against about
one for the command. A ``SandboxSession`` makes that sandbox once, at the round's first
command, with hero's agent (``hero.sandbox.pid1``) as its init (PID 1): hero hands it each
command over a Unix socket (argv, cwd, environment, and the write end of the output pipe),
the agent starts it in a session of its own and, when it exits, is timed out or cancelled,
ends every other process of the sandbox before it answers. hero reads the output pipe with
the runner's ``Capture``, so output limits, redaction and timeouts are as before.

What is the same per command as with a sandbox of its own: the mounts (the one ``Sandbox``
builds), no network unless allowed, the limits, a private PID namespace in which nothing the
command started (``setsid``, ``nohup``, double forks, ``sleep 100 &``) outlives it, an
environment of exactly what hero passes (the agent's own is nearly empty, and unreadable to a
command), no file descriptor of hero's or the agent's. What a round's commands share, as
the worker's own: ``/tmp`` (and ``HOME``, ``/tmp/home``, inside it), ``/var/tmp`` and
``/dev/shm``, which start empty at the round's first command and go at its end; a command's
System V IPC objects are removed when it ends. Nothing of hero's is ever in them.

Limits: the cgroups (processes, memory) and the rlimits of ``hero.sandbox.limits.confine`` are put on
the agent before it starts, so every command inherits the rlimits (CPU seconds, file size,
open files: per process, as before) and runs in the sandbox's cgroups. As only one command
runs at a time and nothing outlives it, the pids cgroup counts one command's processes (and
the agent); the memory cgroup counts the command's memory and what the round's files hold in
the RAM-backed ``/tmp``, ``/var/tmp`` and ``/dev/shm``. A limit hit is told from the growth
of the cgroups' counters during the command.

The sandbox is made at the first command, or before it: ``start`` makes it in a thread of
its own while hero does something else (the round's first model request), and the first
command waits for it. What goes wrong there is as at the first command: a sandbox that cannot
be made gives each command one of its own; any other error is raised by the first command.

When the sandbox itself fails (the agent or bwrap dies, or does not answer), hero ends it
from outside (SIGKILL to its init ends every process in it), says so in the command's result,
and the next command starts a fresh one. When it cannot start at all (no Python in the
sandbox, an old bwrap), the round's commands each get a sandbox of their own, as before.
"""

from __future__ import annotations

import errno
import functools
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hero.errors import HeroError
from hero.runner import (
    CANCEL_EXIT_CODE,
    TERM_GRACE_S,
    TIMEOUT_EXIT_CODE,
    Capture,
    CommandHost,
    CommandResult,
    NamespaceInit,
    namespace_init,
    run_command,
)
from hero.sandbox import pid1
from hero.sandbox.bwrap import Sandbox, sandbox_python
from hero.sandbox.limits import Confinement, confine, explain

#: Seconds a sandbox may take to start and say it is ready (a loaded machine is slow).
START_TIMEOUT_S = 30.0
#: Seconds the agent may take, beyond the grace, to end a command it was asked to kill.
KILL_ANSWER_S = pid1.END_WAIT_S + 5.0
#: Seconds hero waits for the output pipe to close once the command and all it started
#: are gone (nothing should hold it then).
DRAIN_S = 2.0
#: Seconds hero waits for a sandbox it ended to be gone.
END_WAIT_S = 5.0
#: The agent's own environment: nothing of hero's.
AGENT_ENV = {"PATH": os.defpath}
#: What a command's result says when the sandbox ended under it.
LOST_NOTE = (
    "the sandbox ended while the command ran, and every process in it with it; the next "
    "command starts in a fresh sandbox (with an empty /tmp)"
)
_READ_CHUNK = 65536
_POLL_MAX_S = 0.05
_MAX_ANSWER = 1 << 16


@functools.cache
def agent_source() -> bytes:
    """The agent's source, as the sandbox's Python reads it from stdin."""
    source = Path(pid1.__file__).read_bytes()
    if len(source) >= 65536:  # written to a pipe before the sandbox starts reading it
        raise RuntimeError("hero.sandbox.pid1 is too large to pass through a pipe")
    return source


class SandboxLost(HeroError):
    """The sandbox did not answer as it should: it is ended, and a fresh one is made."""


@dataclass
class _Box:
    """A running sandbox: bwrap (hero's child), its init (the agent), the socket to it."""

    proc: subprocess.Popen[bytes]
    init: NamespaceInit
    sock: socket.socket
    confinement: Confinement | None
    counted: dict[str, int] = field(default_factory=dict)
    """The cgroups' limit-hit counters after the last command (``Limits`` field names)."""
    ended: bool = False
    last_hits: tuple[set[str], set[str]] | None = None

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        try:
            pid1.send(self.sock, message, fds)
        except OSError as exc:
            raise SandboxLost(f"the sandbox's agent is gone ({exc.strerror or exc})") from exc

    def answer(self) -> dict[str, Any]:
        """The agent's next answer (the socket is readable). Raises SandboxLost."""
        try:
            got = pid1.receive(self.sock)
        except (OSError, ValueError) as exc:
            raise SandboxLost(f"the sandbox's agent did not answer ({exc})") from exc
        if got is None:
            raise SandboxLost("the sandbox's agent is gone")
        message, fds = got
        for fd in fds:
            os.close(fd)
        return message

    def alive(self) -> bool:
        """Whether the agent is still there, waiting: no end of file, nothing unasked on
        its socket, its init has not exited."""
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        poller.register(self.init.pidfd, select.POLLIN)
        return not poller.poll(0)

    def hits(self) -> tuple[set[str], set[str]]:
        """The limits whose cgroup counter grew since the last call, and those counted
        (once the sandbox is ended: those read as it ended)."""
        if self.last_hits is not None:
            return self.last_hits
        hit: set[str] = set()
        counted: set[str] = set()
        if self.confinement is None:
            return hit, counted
        for controller, cgroup in self.confinement.cgroups:
            name = "processes" if controller.name == "pids" else "memory_mb"
            counted.add(name)
            now = controller.hits(cgroup)
            if now > self.counted.get(name, 0):
                hit.add(name)
            self.counted[name] = now
        return hit, counted

    def end(self) -> None:
        """End the sandbox: SIGKILL its init (the kernel then kills every process in it),
        wait until it is gone, reap bwrap, remove its cgroups. Calls after the first do
        nothing."""
        if self.ended:
            return
        self.ended = True
        try:
            self.sock.close()
            self.init.end(END_WAIT_S)
            self.last_hits = self.hits()  # the cgroups go below: their counters first
            try:
                self.proc.wait(END_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        finally:
            self.init.close()
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            if self.confinement is not None:
                self.confinement.end()


class SandboxSession(CommandHost):
    """The worker's sandbox for one round (see the module docstring): made at the first
    command, ended by ``close`` (the round's end, the story's stop). Hand it to
    ``hero.runner.run_command`` as its ``sandbox``; one command at a time."""

    def __init__(self, sandbox: Sandbox, root: Path) -> None:
        self.sandbox = sandbox
        """The mounts, network and limits of every command."""
        self.root = Path(root)
        """Where the sandbox starts (the worktree)."""
        self.started = 0
        """How many sandboxes were made (one, unless one failed)."""
        self.problem: str | None = None
        """Why no sandbox could be made: then each command gets one of its own."""
        self._box: _Box | None = None
        self._lock = threading.Lock()
        self._starting: threading.Thread | None = None
        self._closing = threading.Event()

    @property
    def limits(self) -> Any:
        return self.sandbox.limits

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Make the sandbox now, in a thread of its own (the round begins, its first model
        request is in flight), so that the first command finds it made. The lock is taken
        here and given back by that thread once the sandbox is made (or could not be): a
        command waits for it. The thread then lives until ``close``: bwrap's
        ``--die-with-parent`` ends the sandbox when the thread that started it ends. Does
        nothing when the sandbox is made or being made."""
        self._lock.acquire()
        if self._box is not None or self.problem is not None or self._starting is not None:
            self._lock.release()
            return
        self._closing = threading.Event()
        self._starting = threading.Thread(
            target=self._start_now, args=(self._closing,), name="hero-sandbox-start", daemon=True
        )
        try:
            self._starting.start()
        except BaseException:
            self._starting = None
            self._lock.release()
            raise

    def _start_now(self, closing: threading.Event) -> None:
        """In the thread ``start`` began, the lock held for it."""
        made = None
        try:
            if self._box is None:
                made = self._open()
        except Exception:  # noqa: BLE001 - the first command makes it again, and raises it
            pass
        finally:
            self._lock.release()
        if made is not None:
            closing.wait()  # the sandbox this thread started lives as long as the thread

    def close(self) -> None:
        """End the sandbox and everything in it; the next command would make a new one."""
        with self._lock:
            box, self._box = self._box, None
            if box is not None:
                box.end()
        starting, self._starting = self._starting, None
        if starting is not None:
            self._closing.set()
            starting.join()

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
        """``hero.runner.run_command``'s contract, the command run in the round's sandbox."""
        if not os.path.isdir(cwd):  # as Popen(cwd=...) does
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(cwd))
        began = time.monotonic()  # a sandbox made for it counts in its duration, not its time
        with self._lock:
            for _attempt in range(2):
                box = self._box
                if box is not None and not box.alive():
                    self._drop(box)  # ended between two commands: a fresh one
                    box = None
                if box is None:
                    box = self._open()
                if box is None:
                    break
                try:
                    with self.sandbox.lent():  # its uid's while the command runs (if any)
                        return self._run(
                            box, command, cwd, timeout_s, env, cancel, max_output_bytes, began
                        )
                except _NotStarted:  # the agent went before it had the command
                    self._drop(box)
            # no sandbox of the round: one of its own, as before
            return run_command(
                command,
                cwd,
                timeout_s=timeout_s,
                env=env,
                cancel=cancel,
                max_output_bytes=max_output_bytes,
                sandbox=self.sandbox,
            )

    # -- one command ---------------------------------------------------------------------

    def _run(
        self,
        box: _Box,
        command: str,
        cwd: Path,
        timeout_s: float,
        env: Mapping[str, str] | None,
        cancel: threading.Event | None,
        max_output_bytes: int,
        began: float,
    ) -> CommandResult:
        start = time.monotonic()
        request = {
            "op": "run",
            "argv": self.sandbox.as_user(["sh", "-c", command]),
            "cwd": self.sandbox.inside(cwd),
            "env": self.sandbox.env_for(os.environ if env is None else env),
        }
        read_end, write_end = os.pipe()
        try:
            box.send(request, [write_end])
        except SandboxLost as exc:
            os.close(read_end)
            raise _NotStarted from exc
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        capture = Capture(max_output_bytes)
        try:
            status, timed_out, cancelled, lost, retire = self._supervise(
                box, read_end, capture, deadline=start + timeout_s, cancel=cancel
            )
        except BaseException:
            self._drop(box)  # KeyboardInterrupt and the like: the sandbox goes with it
            raise
        finally:
            os.close(read_end)
        output, dropped = capture.result()
        if timed_out:
            exit_code = TIMEOUT_EXIT_CODE
        elif cancelled:
            exit_code = CANCEL_EXIT_CODE
        else:
            exit_code = 128 - status if status < 0 else status
        hit, counted = box.hits()
        if lost or retire:
            self._drop(box)
        limits = self.sandbox.limits
        return CommandResult(
            command=command,
            exit_code=exit_code,
            output=output,
            duration_s=time.monotonic() - began,
            timed_out=timed_out,
            cancelled=cancelled,
            output_truncated_bytes=dropped,
            limit_note=(
                None
                if limits is None
                else explain(limits, exit_code, output, hit=hit, counted=counted)
            ),
            sandbox_note=LOST_NOTE if lost else None,
        )

    def _supervise(
        self,
        box: _Box,
        out: int,
        capture: Capture,
        *,
        deadline: float,
        cancel: threading.Event | None,
    ) -> tuple[int, bool, bool, bool, bool]:
        """Read the output until the agent has answered and the pipe is closed; ask the
        agent to kill the command at the deadline or on ``cancel``. Returns (status,
        timed_out, cancelled, lost, retire): lost when the sandbox failed, which is then
        ended from outside (every process in it with it, so the pipe closes); retire when
        the agent asks for a fresh sandbox for the next command."""
        poller = select.poll()
        poller.register(out, select.POLLIN)
        sock = box.sock.fileno()
        poller.register(sock, select.POLLIN)
        status: int | None = None
        timed_out = cancelled = lost = retire = False
        answer_by: float | None = None  # after a kill request: when the answer is due
        drain_by = 0.0  # once answered: how long the pipe may stay open still
        reading = True
        while True:
            now = time.monotonic()
            if status is None and not lost:
                if answer_by is None and (
                    now >= deadline or (cancel is not None and cancel.is_set())
                ):
                    cancelled = now < deadline
                    timed_out = not cancelled
                    answer_by = now + TERM_GRACE_S + KILL_ANSWER_S
                    try:
                        box.send({"op": "kill", "grace": TERM_GRACE_S})
                    except SandboxLost:
                        lost = True
                elif answer_by is not None and now >= answer_by:
                    lost = True  # the agent did not end the command in time
            if lost and status is None:
                box.end()
                status, drain_by = -signal.SIGKILL, now + DRAIN_S
                poller.unregister(sock)
            if status is not None:
                if not reading or now >= drain_by:
                    break  # past drain_by something else holds the pipe: not the command
                wait = drain_by - now
            elif answer_by is not None:
                wait = answer_by - now
            else:
                wait = deadline - now
                if cancel is not None:
                    wait = min(wait, _POLL_MAX_S)
            for fd, _event in poller.poll(max(0, int(wait * 1000 + 0.999))):
                if fd == out:
                    chunk = os.read(out, _READ_CHUNK)
                    if chunk:
                        capture.feed(chunk)
                    else:
                        reading = False
                        poller.unregister(out)
                elif status is None and not lost:
                    try:
                        answer = box.answer()
                        status = _status(answer)
                    except SandboxLost:
                        lost = True
                        continue
                    poller.unregister(sock)
                    drain_by = time.monotonic() + DRAIN_S
                    retire = answer.get("retire") is not False
                    if answer.get("clean") is not True:
                        lost = True  # something of the command may live on: end it all
                        box.end()
        status = -signal.SIGKILL if status is None else status
        return status, timed_out, cancelled, lost, retire

    # -- the sandbox ---------------------------------------------------------------------

    def _drop(self, box: _Box) -> None:
        if self._box is box:
            self._box = None
        box.end()

    def _open(self) -> _Box | None:
        """Make the round's sandbox; None (and ``problem`` said) when it cannot be made."""
        if self.problem is not None:
            return None
        try:
            box = _start(self.sandbox, self.root)
        except _StartFailed as exc:
            self.problem = str(exc)
            return None
        self.started += 1
        self._box = box
        return box


class _StartFailed(HeroError):
    """The sandbox could not be made; the message says why."""


class _NotStarted(HeroError):
    """The command could not be handed to the agent: it did not run."""


def _status(answer: dict[str, Any]) -> int:
    status = answer.get("status")
    if answer.get("op") != "exit" or not isinstance(status, int) or isinstance(status, bool):
        raise SandboxLost(f"the sandbox's agent answered {str(answer)[:200]!r}")
    return status


def _start(sandbox: Sandbox, root: Path) -> _Box:
    """Start bwrap with the agent as its init, its limits on it before it runs; wait until
    it says it is ready. Raises _StartFailed saying why."""
    deadline = time.monotonic() + START_TIMEOUT_S
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    source_r, source_w = os.pipe()
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    open_fds = {source_r, source_w, info_r, info_w, block_r, block_w}

    def close(*fds: int) -> None:
        for fd in fds:
            if fd in open_fds:
                open_fds.discard(fd)
                os.close(fd)

    proc: subprocess.Popen[bytes] | None = None
    init: NamespaceInit | None = None
    confinement: Confinement | None = None
    try:
        os.write(source_w, agent_source())  # less than a pipe holds
        close(source_w)
        argv = [
            sandbox_python() if sandbox.project else sys.executable,
            *("-I", "-S", "-X", "utf8", "-c", pid1.BOOT),
            str(theirs.fileno()),
        ]
        try:
            proc = subprocess.Popen(
                sandbox.wrap(
                    argv, root, info_fd=info_w, block_fd=block_r, as_pid_1=True, drop=True
                ),
                cwd=str(root),
                env=AGENT_ENV,
                stdin=source_r,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=(info_w, block_r, theirs.fileno()),
            )
        except OSError as exc:
            raise _StartFailed(f"bwrap could not be started: {exc.strerror or exc}") from exc
        finally:
            close(source_r, info_w, block_r)
            theirs.close()
        if proc.stderr is not None:  # read only once it ended (_said), never waited on
            os.set_blocking(proc.stderr.fileno(), False)
        init = namespace_init(proc, info_r, deadline)
        if init is None:
            raise _StartFailed(_said(proc, "bwrap made no sandbox"))
        if sandbox.limits is not None:
            try:
                confinement = confine(sandbox.limits, init.pid, cgroups=sandbox.cgroups)
            except OSError as exc:  # ProcessLookupError: bwrap failed; it says why
                raise _StartFailed(_said(proc, str(exc))) from exc
        close(block_w)  # the agent starts
        ours.settimeout(KILL_ANSWER_S)  # a message once begun comes whole, or the box is lost
        box = _Box(proc, init, ours, confinement)
        poller = select.poll()
        poller.register(ours, select.POLLIN)
        if not poller.poll(max(0, int((deadline - time.monotonic()) * 1000))):
            raise _StartFailed(f"the sandbox's agent did not start in {START_TIMEOUT_S:g} s")
        try:
            ready = box.answer()
        except SandboxLost as exc:
            raise _StartFailed(_said(proc, str(exc))) from exc
        if ready.get("op") != "ready":
            raise _StartFailed(f"the sandbox's agent said {str(ready)[:200]!r}")
        return box
    except BaseException:
        theirs.close()
        ours.close()
        if init is not None:
            init.end(END_WAIT_S)
            init.close()
        if proc is not None:
            proc.kill()
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
        if confinement is not None:
            confinement.end()
        raise
    finally:
        close(*open_fds)


def _said(proc: subprocess.Popen[bytes], fallback: str) -> str:
    """What bwrap (or the agent) wrote to stderr before it ended, else ``fallback``."""
    try:
        proc.wait(END_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    text = b""
    if proc.stderr is not None:
        try:
            text = os.read(proc.stderr.fileno(), _MAX_ANSWER)
        except OSError:  # nothing written (and the agent holds it still)
            text = b""
    said = " ".join(text.decode("utf-8", errors="replace").split())
    return said[-2000:] or f"{fallback} (exit code {proc.returncode})"
