"""`hero watch --serve`: the status page in a process of its own (hero.web.apart), started
and stopped with the daemon, restarted when it crashes, gone when the daemon is killed, and
a port taken refused before the daemon starts. Real processes: `hero watch` with the
scripted model over loopback HTTP, a real story, real signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from export_support import CHECK_SUB

from hero.cli import main

pytest.importorskip("starlette", reason="the serve extra is not installed")

from serve_support import serve_model, story_file, wait_line

SERVING = r'"event": "serving on http://127\.0\.0\.1:\d+"'
#: A bound, not a timing: how long a process may take to go once it has to.
GONE_WITHIN_S = 60.0


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def _gone(pid: int) -> bool:
    """No such process, or a zombie (ended, not yet reaped by whoever adopted it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + GONE_WITHIN_S
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


class Daemon:
    """`hero watch --serve 127.0.0.1:0 --log-format json` on ``home``; its stderr read by
    a thread into lines, so the test can wait for one while the daemon runs on."""

    def __init__(self, home: Path, *extra: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        argv = [sys.executable, "-m", "hero", "watch", "--home", str(home)]
        self.proc = subprocess.Popen(
            [*argv, "--serve", "127.0.0.1:0", "--log-format", "json", *extra],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.lines: list[str] = []

    def wait(self, pattern: str) -> dict[str, Any]:
        """The first JSON log line from now on that matches ``pattern``, parsed."""
        return json.loads(wait_line(self.proc, self.lines, pattern).string)  # type: ignore[no-any-return]

    def serving(self) -> tuple[str, int]:
        """The server's URL and pid, once the daemon watches its inbox."""
        line = self.wait(SERVING)
        self.wait(r'"event": "watching"')
        return str(line["url"]), int(line["pid"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def daemon_home(make_home: Any, scripted: Any) -> Path:
    return make_home(scripted(serve_model), sandbox="none")  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_page_has_a_process_of_its_own_stopped_with_the_daemon(daemon_home: Path) -> None:
    daemon = Daemon(daemon_home)
    try:
        url, server = daemon.serving()
        assert server != daemon.proc.pid and _parent_of(server) == daemon.proc.pid
        health = _get(url + "/api/health")
        # the daemon's own record, read from its files by another process
        assert health["daemon"]["running"] is True and health["daemon"]["pid"] == daemon.proc.pid
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=120) == 0
        assert _gone(server)  # stopped (and reaped) by the daemon before it exited
    finally:
        daemon.close()
    assert daemon.proc.stderr is not None
    rest = daemon.proc.stderr.read()
    assert "Traceback" not in "".join(daemon.lines) + rest
    assert "starting it again" not in rest  # a stop asked for is not a crash


@pytest.mark.slow
def test_a_server_killed_is_restarted_and_the_daemon_goes_on(daemon_home: Path) -> None:
    daemon = Daemon(daemon_home)
    try:
        url, server = daemon.serving()
        os.kill(server, signal.SIGKILL)
        assert _wait_gone(server)
        story_file(daemon_home, "s1", "Add sub", [CHECK_SUB])  # the daemon's work goes on
        restarted = int(daemon.wait(r'"event": "status page restarted"')["pid"])
        assert restarted != server and _parent_of(restarted) == daemon.proc.pid
        finished = daemon.wait(r'"event": "finished"')
        assert finished["story"] == "s1" and finished["status"] == "passed"
        board = _get(url + "/api/stories")  # the same address, served by the new process
        assert {s["id"]: s["status"] for s in board["stories"]} == {"s1": "passed"}
        assert daemon.proc.poll() is None
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=120) == 0
        assert _gone(restarted)
    finally:
        daemon.close()


@pytest.mark.slow
def test_a_daemon_killed_leaves_no_server_behind(daemon_home: Path) -> None:
    daemon = Daemon(daemon_home)
    try:
        url, server = daemon.serving()
        assert _get(url + "/api/health")["daemon"]["running"] is True
        daemon.proc.kill()  # SIGKILL: no handler, no finally, no stop()
        daemon.proc.wait()
        assert _wait_gone(server), f"the server {server} outlived its daemon"
    finally:
        daemon.close()


def test_a_port_taken_stops_the_daemon_before_it_starts(
    daemon_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    old = signal.getsignal(signal.SIGTERM)
    try:
        argv = ["watch", "--home", str(daemon_home), "--serve", f"127.0.0.1:{port}"]
        assert main([*argv, "--exit-when-idle"]) == 2
    finally:
        signal.signal(signal.SIGTERM, old)
        taken.close()
    err = capsys.readouterr().err
    assert f"--bind 127.0.0.1:{port}: cannot listen there" in err
    assert "watching" not in err and err.count("Traceback") == 0


def test_the_server_process_exits_when_its_pipe_closes(daemon_home: Path) -> None:
    """hero.web.apart's own loop, without a daemon: the read end at EOF ends the process
    (what the kernel does for it when the daemon is killed)."""
    home = daemon_home
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    port = sock.getsockname()[1]
    read_end, write_end = os.pipe()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "hero.web.apart", "--home", str(home)]
    argv += ["--bind", f"127.0.0.1:{port}", "--socket-fd", str(sock.fileno())]
    argv += ["--parent-fd", str(read_end), "--log-format", "json"]
    proc = subprocess.Popen(
        argv,
        pass_fds=(sock.fileno(), read_end),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
    )
    os.close(read_end)
    try:
        box: list[Any] = []
        getter = threading.Thread(
            target=lambda: box.append(_get(f"http://127.0.0.1:{port}/api/health"))
        )
        getter.start()
        getter.join(120)
        assert box and box[0]["daemon"]["running"] is False
        os.close(write_end)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()


class _Log:
    """What hero.web.apart logs, kept: (level, event, fields)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def __getattr__(self, level: str) -> Any:
        def log(event: str, **fields: Any) -> None:
            with self.lock:
                self.events.append((level, event, fields))

        return log


@pytest.mark.slow
def test_a_server_that_keeps_crashing_is_given_up_and_the_socket_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A home without a configuration: each server process exits 2 at start (the error said in one line). It is started
    again RESTARTS times, then left stopped, and the daemon (this test) is none the worse."""
    from hero.web import apart

    monkeypatch.setattr(apart, "RESTARTS", 2)
    monkeypatch.setattr(apart, "RESTART_DELAYS_S", (0.0,))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    log = _Log()
    running = apart.ServerProcess(tmp_path, sock, f"127.0.0.1:{sock.getsockname()[1]}", log, "json")
    running.start()
    assert running._thread is not None
    running._thread.join(GONE_WITHIN_S)
    assert not running._thread.is_alive()
    events = [(level, event) for level, event, _ in log.events]
    assert events == [
        ("warning", "the status page stopped; starting it again"),
        ("info", "status page restarted"),
        ("warning", "the status page stopped; starting it again"),
        ("info", "status page restarted"),
        ("error", "the status page stopped and is not started again"),
    ]
    assert all(f.get("exit_code") == 2 for _, e, f in log.events if "stopped" in e)
    assert running.pid is None and sock.fileno() == -1  # refused, not left waiting
    running.stop()
    assert sock.fileno() == -1  # closed by stop()
