"""``hero watch --serve``: the status page in a process of its own, beside the daemon.

The daemon binds the listening socket itself (so that a bad address or a port taken stops
``hero watch`` with exit 2 before it starts, as ``hero serve`` does), then starts
``python -m hero.web.apart`` with that socket and the read end of a pipe. The server process
loads the home's configuration, builds the same application as ``hero serve`` and serves
the same pages, API and metrics from the same files (``runs/``, ``inbox/``, ``done/``):
nothing of it lives in the daemon's memory. It runs at a lower CPU priority (:data:`NICE`),
so fifty clients asking back to back take what the daemon leaves, not the daemon's turns.

It stops with the daemon, however the daemon ends:

- the daemon stops (SIGTERM, Ctrl-C, an idle inbox): :meth:`ServerProcess.stop` closes the
  pipe and waits, then kills it;
- the daemon dies (``kill -9``): the kernel closes the pipe's write end, the server reads
  end-of-file and exits at once (:func:`main`);
- a Ctrl-C on the terminal reaches both: the server ignores it and leaves the stop to the
  daemon, so it is not restarted in between.

When the server dies on its own (a crash, ``kill -9``), the daemon starts it again on the
same socket, after a short wait, at most :data:`RESTARTS` times within
:data:`RESTART_WINDOW_S`; then it logs that the page is gone and the daemon goes on without it.
Connections that arrive while it restarts wait in the socket's backlog.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: How much lower the server's CPU priority is than the daemon's (``os.nice``).
NICE = 10
#: How long stopping waits for the server process before it is killed.
STOP_WAIT_S = 10.0
#: Crashes within RESTART_WINDOW_S after which the server is not started again.
RESTARTS = 5
RESTART_WINDOW_S = 300.0
#: The wait before each restart within the window: the first, the second, ... (the last
#: repeats).
RESTART_DELAYS_S = (0.2, 0.5, 1.0, 2.0, 5.0)
#: How long the server process lets open requests finish once the daemon is gone.
EXIT_GRACE_S = 3.0
LOG_FORMATS = {None: "auto", True: "json", False: "console"}


@dataclass
class ServerProcess:
    """The status page's process, supervised from a thread of the daemon."""

    home: Path
    sock: socket.socket
    bind: str  # HOST:PORT as bound (the real port)
    log: Any
    log_format: str = "auto"  # --log-format: auto, json, console
    _proc: subprocess.Popen[bytes] | None = None
    _pipe: int = -1  # the write end; closed: the server exits
    _stopping: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        with self._lock:
            return self._proc.pid if self._proc is not None else None

    def start(self) -> int:
        """Start the server and its supervisor; the server's pid."""
        with self._lock:
            self._spawn()
            assert self._proc is not None
            pid = self._proc.pid
        self._thread = threading.Thread(target=self._supervise, name="hero-serve", daemon=True)
        self._thread.start()
        return pid

    def stop(self) -> None:
        """Stop the server (and never start it again); close the socket."""
        self._stopping.set()
        with self._lock:
            proc = self._proc
            self._close_pipe()
        if proc is not None:
            _end(proc)
        if self._thread is not None:
            self._thread.join(STOP_WAIT_S)
        self.sock.close()

    # -- inside

    def _spawn(self) -> None:
        """Start a server process (under the lock)."""
        self._close_pipe()
        read_end, write_end = os.pipe()  # neither inherited by anything else the daemon starts
        fd = self.sock.fileno()
        argv = [
            sys.executable,
            "-m",
            "hero.web.apart",
            "--home",
            str(self.home),
            "--bind",
            self.bind,
            "--socket-fd",
            str(fd),
            "--parent-fd",
            str(read_end),
            "--log-format",
            self.log_format,
        ]
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # the daemon's stdout may carry --events
                pass_fds=(fd, read_end),
                env=_env(),
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._pipe = write_end

    def _close_pipe(self) -> None:
        if self._pipe >= 0:
            os.close(self._pipe)
            self._pipe = -1

    def _supervise(self) -> None:
        crashes: list[float] = []
        while True:
            with self._lock:
                proc = self._proc
            if proc is None:
                return
            code = proc.wait()
            if self._stopping.is_set():
                return
            now = time.monotonic()
            crashes = [t for t in crashes if now - t < RESTART_WINDOW_S] + [now]
            if len(crashes) > RESTARTS:
                self.log.error(
                    "the status page stopped and is not started again",
                    exit_code=code,
                    crashes=len(crashes),
                    within_s=RESTART_WINDOW_S,
                )
                with self._lock:
                    self._proc = None
                    self._close_pipe()
                self.sock.close()  # connecting is refused now, not left waiting in the queue
                return
            delay = RESTART_DELAYS_S[min(len(crashes), len(RESTART_DELAYS_S)) - 1]
            self.log.warning("the status page stopped; starting it again", exit_code=code)
            if self._stopping.wait(delay):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                try:
                    self._spawn()
                except OSError as exc:
                    self.log.error("the status page could not be started again", error=str(exc))
                    self._proc = None
                    return
                pid = self._proc.pid if self._proc is not None else 0
            self.log.info("status page restarted", pid=pid)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Wait for ``proc`` (its pipe closed: it is on its way out), then kill it."""
    try:
        proc.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _env() -> dict[str, str]:
    """The daemon's environment (the server is hero: it needs the serve token, the
    secrets to redact), with hero's own package first on the path, as it was imported."""
    import hero

    env = dict(os.environ)
    root = str(Path(hero.__file__).resolve().parent.parent)
    rest = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join([root, rest]) if rest else root
    return env


def start(config: Any, bind: str, log: Any, log_format: str) -> ServerProcess:
    """Check ``bind`` and the token, bind the socket (ServeError: exit 2), log ``serving
    on URL`` and start the server process."""
    from hero.web.server import listen

    sock, address, url = listen(config, bind)
    sock.set_inheritable(False)  # handed to the server alone (pass_fds), never to a worker's
    running = ServerProcess(
        config.home, sock, f"{address.host}:{sock.getsockname()[1]}", log, log_format
    )
    try:
        pid = running.start()
    except BaseException:
        sock.close()
        raise
    log.info(f"serving on {url}", url=url, token=bool(config.serve_token), pid=pid)
    return running


# ----------------------------------------------------------------------------- the process


def main(argv: list[str] | None = None) -> int:
    """The server process: serve on the inherited socket until the daemon is gone."""
    parser = argparse.ArgumentParser(prog="python -m hero.web.apart")
    parser.add_argument("--home", required=True)
    parser.add_argument("--bind", required=True)
    parser.add_argument("--socket-fd", type=int, required=True)
    parser.add_argument("--parent-fd", type=int, required=True)
    parser.add_argument("--log-format", choices=sorted(LOG_FORMATS.values()), default="auto")
    args = parser.parse_args(argv)
    # a Ctrl-C on the terminal reaches the whole process group: the daemon stops this
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.nice(NICE)
    except OSError:
        pass
    from hero.config.loader import load_config
    from hero.daemon.logsetup import configure
    from hero.errors import HeroError
    from hero.web.server import Prepared, make_app, parse_bind, uvicorn_server

    try:
        # read again here: the configuration may have changed since the daemon started
        config = load_config(Path(args.home), roles=())
    except HeroError as exc:  # one line among the daemon's, then the daemon's restart rule
        print(f"hero: the status page: {exc.for_user()}", file=sys.stderr, flush=True)
        return exc.exit_code
    as_json = {v: k for k, v in LOG_FORMATS.items()}[args.log_format]
    log = configure(json=as_json, secrets=config.secrets)
    sock = socket.socket(fileno=args.socket_fd)
    app = make_app(config, parse_bind(args.bind), log, quiet=True)
    server = uvicorn_server(Prepared(app, sock, ""))
    failed: list[BaseException] = []

    def serve() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # noqa: BLE001 - said below, then exit 1
            failed.append(exc)

    # uvicorn in a thread (it installs no signal handler there); this one watches the daemon
    thread = threading.Thread(target=serve, name="uvicorn", daemon=True)
    thread.start()
    parent_gone = _wait_for_parent(args.parent_fd, thread)
    server.should_exit = True
    thread.join(EXIT_GRACE_S)
    if failed:
        error = failed[0]
        log.error("the status page failed", error=f"{type(error).__name__}: {error}")
    # at once: the daemon is gone or the server is; nothing else of this process matters
    os._exit(0 if parent_gone and not failed else 1)


def _wait_for_parent(fd: int, thread: threading.Thread) -> bool:
    """Block until the daemon closes the pipe (True) or the server's thread ends (False)."""
    while thread.is_alive():
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready and not os.read(fd, 64):
            return True
    return False


if __name__ == "__main__":
    raise SystemExit(main())
