"""The agent inside a worker's sandbox: PID 1 of one round's bubblewrap, it runs the round's
commands one at a time and ends every process a command started when the command ends.

hero (``hero.sandbox.session``) starts it as ``python -I -S -X utf8 -c BOOT FD``, this file's
text on its stdin: hero's package is not in the sandbox, so this module imports only the
standard library, and importing it does nothing but define things (hero imports it for the
message format and its own source). FD is its end of a Unix socket pair; on it, hero sends
requests and the agent answers, each a ``message``: a 4-byte length, then JSON.

- ``{"op": "run", "argv", "cwd", "env"}`` with one file descriptor (``SCM_RIGHTS``): the write
  end of the pipe that takes the command's stdout and stderr. The agent starts ``argv`` in
  ``cwd``, in a session of its own, stdin from /dev/null, the signals Python ignores (SIGPIPE,
  SIGXFSZ) back to their defaults, no other file descriptor, and exactly ``env``: the agent's
  own environment is nearly empty and no command sees it. Then it waits for the command's exit or
  for a ``{"op": "kill", "grace": s}`` (a timeout, a cancel): SIGTERM to the command's process
  group, up to ``grace`` seconds for it to go. Either way it then SIGKILLs every other process
  of the PID namespace (``kill(-1)``, which spares only the caller, here also the init) and
  reaps until it has no child left: as every process of a PID namespace descends from its
  init (an orphan is handed to the init), no child left means no process left. It removes the
  System V IPC objects the command made, and answers ``{"op": "exit", "status", "clean",
  "retire"}`` (``status`` as ``subprocess`` gives it: negative for a signal; ``clean``:
  everything is gone; ``retire``: the agent is not as hero made it any more, see below).
- It answers ``{"op": "ready"}`` once it is set up, and ``{"op": "error", "message"}`` to a
  request it cannot read.

Why a command cannot get past it: as PID 1 it gets no signal from inside its namespace but
those it handles, and it handles none (``kill -9 -1``, ``kill -9 1`` leave it be); it makes
itself not dumpable (``PR_SET_DUMPABLE`` 0), so a command of the same user cannot ptrace it,
read its memory, environment or file descriptors through /proc, nor take its socket
(``pidfd_getfd``). Its own file descriptors are close-on-exec. The one thing a command of the
same user can still do to it is change what its children inherit: lower its rlimits
(``prlimit(2)``; raising a hard limit needs a capability no command has), raise its nice
value, pin it to fewer CPUs. It looks after each command, and if any of that changed it asks
hero to retire the sandbox (``retire``): the next command gets a fresh one, as hero made it.
When hero closes the socket (or goes away) the agent ends every process and exits, which ends
the sandbox.
"""

from __future__ import annotations

import array
import ctypes
import json
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any

#: What hero runs with ``python -c``: the agent's source is on stdin, its socket in argv[1].
BOOT = "import sys; exec(compile(sys.stdin.read(), 'hero-sandbox-agent', 'exec'))"
#: A message's length, before its JSON.
HEADER = struct.Struct(">I")
#: The largest message either side reads (a request carries a command and its environment).
MAX_MESSAGE = 64 << 20
#: Seconds the agent keeps killing and reaping before it says it could not end everything.
END_WAIT_S = 10.0
_PR_SET_DUMPABLE = 4
_IPC_RMID = 0
#: System V IPC objects a command can leave in the sandbox's IPC namespace, and the call
#: that removes each (its id is the second column of /proc/sysvipc/<kind>).
_IPC_KINDS = (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl"))
#: The rlimits the agent holds for every command (``hero.sandbox.limits.confine`` sets them).
_RLIMITS = (
    resource.RLIMIT_FSIZE,
    resource.RLIMIT_CPU,
    resource.RLIMIT_NOFILE,
    resource.RLIMIT_CORE,
    resource.RLIMIT_NPROC,
    resource.RLIMIT_DATA,
    resource.RLIMIT_AS,
    resource.RLIMIT_STACK,
    resource.RLIMIT_MEMLOCK,
    resource.RLIMIT_MSGQUEUE,
)
_FD = array.array("i")
#: Room for the file descriptors one message may bring (hero sends one; more are closed).
_FDS_SPACE = socket.CMSG_SPACE(4 * _FD.itemsize)


# ----------------------------------------------------------------------------- messages


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode("utf-8")
    return HEADER.pack(len(body)) + body


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """Send ``message``, with ``fds`` attached to its first byte."""
    data = encode(message)
    if fds:
        sent = socket.send_fds(sock, [data], fds)
        data = data[sent:]
    if data:
        sock.sendall(data)


def receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """The next message and the file descriptors that came with it (close-on-exec); None at
    end of file. Raises ValueError for what is not a message."""
    head, fds = _read(sock, HEADER.size, with_fds=True)
    if not head:
        return None
    try:
        (size,) = HEADER.unpack(head)
        if size > MAX_MESSAGE:
            raise ValueError(f"a message of {size} bytes")
        body, _ = _read(sock, size)
        message = json.loads(body)
        if not isinstance(message, dict):
            raise ValueError("a message that is not an object")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return message, fds


def _read(sock: socket.socket, size: int, *, with_fds: bool = False) -> tuple[bytes, list[int]]:
    """Exactly ``size`` bytes (b"" at end of file before the first); the fds sent with them."""
    data = b""
    fds: list[int] = []
    while len(data) < size:
        if with_fds:  # not socket.recv_fds: it drops its flags (MSG_CMSG_CLOEXEC)
            chunk, ancillary, _flags, _addr = sock.recvmsg(
                size - len(data), _FDS_SPACE, socket.MSG_CMSG_CLOEXEC
            )
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    usable = len(payload) - len(payload) % _FD.itemsize
                    fds += array.array("i", payload[:usable]).tolist()
        else:
            chunk = sock.recv(size - len(data))
        if not chunk:
            if data:
                for fd in fds:
                    os.close(fd)
                raise ValueError("end of file inside a message")
            return b"", fds
        data += chunk
    return data, fds


# ----------------------------------------------------------------------------- the agent


class Agent:
    """PID 1 of the sandbox: runs one command at a time (see the module docstring)."""

    def __init__(self, sock: socket.socket, libc: ctypes.CDLL) -> None:
        self.sock = sock
        self.libc = libc
        self.null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        """Every command's stdin."""
        self.own = _own_state()
        """What every command inherits from the agent, as hero set it: a command that
        changed it (lowered an rlimit, niced or pinned the agent) retires the sandbox."""

    def serve(self) -> None:
        send(self.sock, {"op": "ready", "pid": os.getpid()})
        while True:
            try:
                got = receive(self.sock)
            except (ValueError, OSError) as exc:
                send(self.sock, {"op": "error", "message": str(exc)})
                return
            if got is None:
                return  # hero closed the sandbox, or is gone
            request, fds = got
            if request.get("op") != "run":  # a late kill: nothing runs
                for fd in fds:
                    os.close(fd)
                continue
            answer = self.run(request, fds)
            if answer is None:
                return
            send(self.sock, answer)

    def run(self, request: dict[str, Any], fds: list[int]) -> dict[str, Any] | None:
        """Run one command, end all it started; the answer (None: hero went away)."""
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return {"op": "error", "message": f"a run request with {len(fds)} fds, not 1"}
        out = fds[0]
        try:
            proc = self._spawn(request, out)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            _write_all(out, f"hero: the sandbox could not start the command: {reason}\n")
            os.close(out)
            status = 127 if isinstance(exc, FileNotFoundError) else 126
            # not found: the command's fault; anything else: the sandbox's, retire it
            return {"op": "exit", "status": status, "clean": True, "retire": status != 127}
        os.close(out)
        pidfd = os.pidfd_open(proc.pid)
        try:
            stop = self._wait(pidfd)
        finally:
            os.close(pidfd)
        status, clean = end_all(proc.pid, grace=stop or 0.0)
        proc.returncode = status  # reaped by end_all: subprocess must not wait for it
        if stop is None:
            return None
        self._remove_ipc()
        retire = _own_state() != self.own
        return {"op": "exit", "status": status, "clean": clean, "retire": retire}

    def _spawn(self, request: dict[str, Any], out: int) -> subprocess.Popen[bytes]:
        """Start the command. subprocess's own fork and exec (vfork where it can), not
        ``posix_spawn``: glibc's leaves its two internal signals ignored in the child, and
        through ``exec`` in the command. As a command in a sandbox of its own would: its
        argv[0] looked up on its PATH, the signals Python ignores back at their default,
        no file descriptor but 0-2."""
        argv = [str(a) for a in request["argv"]]
        env = {str(k): str(v) for k, v in request["env"].items()}
        return subprocess.Popen(
            argv,
            cwd=str(request["cwd"]),
            env=env,
            stdin=self.null,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )

    def _wait(self, pidfd: int) -> float | None:
        """Wait for the command's exit (0.0) or a kill request (its grace); None when hero
        went away."""
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.register(self.sock, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if pidfd in ready:
                return 0.0
            try:
                got = receive(self.sock)
            except (ValueError, OSError):
                return None
            if got is None:
                return None
            message, fds = got
            for fd in fds:
                os.close(fd)
            if message.get("op") == "kill":
                grace = message.get("grace", 0.0)
                return float(grace) if isinstance(grace, int | float) and grace > 0 else 1e-9

    def _remove_ipc(self) -> None:
        """Remove the System V shared memory, message queues and semaphores a command left."""
        for kind, call in _IPC_KINDS:
            try:  # plain os calls: this runs after every command
                fd = os.open(f"/proc/sysvipc/{kind}", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                data = b""
                while chunk := os.read(fd, 65536):
                    data += chunk
            finally:
                os.close(fd)
            lines = data.splitlines()[1:]
            for line in lines:
                fields = line.split()
                if len(fields) > 1 and fields[1].isdigit():
                    if kind == "sem":
                        self.libc.semctl(int(fields[1]), 0, _IPC_RMID)
                    else:
                        getattr(self.libc, call)(int(fields[1]), _IPC_RMID, None)


def end_all(main: int, grace: float = 0.0) -> tuple[int, bool]:
    """End the command ``main`` and every other process of the namespace: with ``grace``
    (a kill request), SIGTERM to its process group and up to ``grace`` seconds for the group
    to go first. Then SIGKILL to all (``kill(-1)``) and reap until no child is left, at most
    ``END_WAIT_S``. Returns ``main``'s status (``subprocess``'s returncode) and whether
    everything is gone."""
    status: int | None = None
    if grace > 0:
        status = _terminate(main, grace)
    deadline = time.monotonic() + END_WAIT_S
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass  # nothing to signal (or only zombies)
        try:
            while True:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid == main:
                    status = os.waitstatus_to_exitcode(wait_status)
        except ChildProcessError:
            return (-signal.SIGKILL if status is None else status), True
        if time.monotonic() >= deadline:
            return (-signal.SIGKILL if status is None else status), False
        time.sleep(0.0005)


def _terminate(main: int, grace: float) -> int | None:
    """SIGTERM the command's process group; up to ``grace`` seconds for the group to exit
    (reaping what exits, orphans included). ``main``'s status once it is reaped here."""
    deadline = time.monotonic() + grace
    try:
        os.killpg(main, signal.SIGTERM)
    except OSError:
        return None
    status: int | None = None
    delay = 0.0005
    while True:
        try:
            while True:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid == main:
                    status = os.waitstatus_to_exitcode(wait_status)
        except ChildProcessError:
            return status
        try:
            os.killpg(main, 0)  # the group's number stays taken while it has members
        except OSError:
            return status
        left = deadline - time.monotonic()
        if left <= 0:
            return status
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.02)


def _own_state() -> tuple[object, ...]:
    """The agent's rlimits, nice value and CPU affinity: what a command inherits from it
    and, being of the same user, could change in it."""
    limits = tuple(resource.getrlimit(r) for r in _RLIMITS)
    return limits, os.getpriority(os.PRIO_PROCESS, 0), frozenset(os.sched_getaffinity(0))


def _write_all(fd: int, text: str) -> None:
    data = text.encode("utf-8", errors="replace")
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass


def _set_up(sock_fd: int) -> ctypes.CDLL:
    """Not dumpable, stdin from /dev/null, cwd /, no file descriptor but 0-2 and the socket,
    SIGINT at its default (which for PID 1 means: not delivered from inside)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.close(null)
    os.chdir("/")  # each command gets its own cwd; the agent holds none of the worktree
    os.closerange(3, sock_fd)
    os.closerange(sock_fd + 1, 1 << 20)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    return libc


def main(argv: list[str]) -> int:
    sock_fd = int(argv[1])
    libc = _set_up(sock_fd)
    sock = socket.socket(fileno=sock_fd)
    sock.set_inheritable(False)
    Agent(sock, libc).serve()
    sock.close()
    end_all(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
