"""The celery engine's test harness: a real ``redis-server`` on loopback, a bare remote, and
hero's coordinator (``hero watch``) and workers (``hero worker``) as child processes, each
worker in a folder of its own standing in for a machine.

    def test_something(cluster, scripted, write_story):
        model = scripted(Policy())
        home = cluster.home(model)                     # the coordinator's home
        backlog(write_story(home, "s1", verify=["true"]))
        w1 = cluster.start_worker()                    # waits until it is ready
        coordinator = cluster.start_coordinator("--exit-when-idle")
        assert coordinator.wait_exit() == 0

Every process the harness starts carries ``HERO_TEST_CLUSTER=<token>`` in its environment,
and so does everything it starts (a worker's bash commands too, which hero runs in sessions
of their own): teardown ends them all, whatever the test did or however it failed.

A plugin (``pytest_plugins`` in tests/conftest.py): its fixtures are ``redis_server``,
``remote`` and ``cluster``. Nothing here imports celery or redis but when asked
(``RedisServer.client``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import HomeFactory, git
from helpers import (
    alive,
    commit_once,
    is_review,
    review_round,
    step_of,
    story_of,
    verdict,
    worker_round,
)

from hero.llm.scripted import Reply, ScriptedModel, call, text

# Generous "did not hang" bounds, not speed checks: the tests run on small machines, beside
# other work.
REDIS_START_TIMEOUT_S = 20.0
WORKER_READY_TIMEOUT_S = 90.0
RUN_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0

#: The knobs every coordinator and worker home of the harness gets (a test adds its own).
#: ``lease_s`` is short so that a dead worker's story comes back in seconds; the sandbox is
#: off so that a command's pid file holds a pid this process can see and kill.
ENGINE_KNOBS: dict[str, object] = {
    "engine": "celery",
    "lease_s": 3,
    "max_parallel": 8,
    "sandbox": "none",
}

#: The environment variable that marks every process of one test's cluster.
CLUSTER_MARK = "HERO_TEST_CLUSTER"

#: The engine key every home of the harness shares (config.local.yaml ``engine_key``).
ENGINE_KEY = "test-engine-key-" + "5" * 48


# --------------------------------------------------------------------------- waiting


def wait_for(
    cond: Callable[[], Any],
    what: str,
    *,
    timeout: float = RUN_TIMEOUT_S,
    step: float = 0.1,
    procs: tuple[Proc, ...] | list[Proc] = (),
) -> Any:
    """Poll ``cond`` until it returns something truthy and return that; fail naming ``what``
    (with the output of ``procs``) if it never does, or if one of ``procs`` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        for proc in procs:
            if proc.proc.poll() is not None:
                value = cond()  # a last look: it may have done it on its way out
                if value:
                    return value
                pytest.fail(
                    f"{proc.name} exited {proc.proc.returncode} before {what}:\n"
                    + dump_outputs(procs)
                )
        if time.monotonic() >= deadline:
            pytest.fail(f"never saw {what} within {timeout} s:\n" + dump_outputs(procs))
        time.sleep(step)


def dump_outputs(procs: tuple[Proc, ...] | list[Proc], tail: int = 6000) -> str:
    """The end of each process's output, for a failure's message (without the model
    client's one line per request)."""

    def lines(p: Proc) -> str:
        text = "\n".join(x for x in p.output().splitlines() if "HTTP Request:" not in x)
        return text[-tail:]

    return "\n".join(f"----- {p.name} -----\n{lines(p)}" for p in procs)


def free_port() -> int:
    """A TCP port free on loopback right now (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- redis-server


def redis_pid(port: int, timeout: float = 1.0, ca: Path | None = None) -> int | None:
    """The process id of the Redis server answering on 127.0.0.1:``port`` (``INFO server``,
    RESP by hand: no client; over TLS, checking the server against ``ca``, when given), None
    when none answers. A pid, not a PONG: a restart on the same port must not take another
    test's redis-server, which took the port meanwhile, for its own."""
    import ssl

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
            sock = raw
            if ca is not None:
                sock = ssl.create_default_context(cafile=str(ca)).wrap_socket(
                    raw, server_hostname="127.0.0.1"
                )
            sock.sendall(b"INFO server\r\n")
            data = b""
            while b"process_id:" not in data or not data.endswith(b"\r\n"):
                chunk = sock.recv(4096)
                if not chunk or data.startswith(b"-") or len(data) > 1 << 16:
                    break
                data += chunk
    except OSError:
        return None
    found = re.search(rb"process_id:(\d+)", data)
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class TlsFiles:
    """A throwaway certificate authority and a server certificate it signed, for 127.0.0.1."""

    ca: Path
    cert: Path
    key: Path


def make_tls_files(folder: Path) -> TlsFiles:
    """A CA and a server certificate for 127.0.0.1 (openssl's command line), in ``folder``;
    skips the test when there is no openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: it makes the TLS test's certificates")
    folder.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(folder / "ca.pem", folder / "server.pem", folder / "server-key.pem")
    ext = folder / "san.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=hero test CA", "-keyout", str(folder / "ca-key.pem"), "-out", str(files.ca)],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
         "-keyout", str(files.key), "-out", str(folder / "server.csr")],
        ["x509", "-req", "-in", str(folder / "server.csr"), "-CA", str(files.ca),
         "-CAkey", str(folder / "ca-key.pem"), "-CAcreateserial", "-days", "1",
         "-extfile", str(ext), "-out", str(files.cert)],
    ]  # fmt: skip
    for step in steps:
        done = subprocess.run(
            [openssl, *step], capture_output=True, text=True, timeout=60, cwd=folder
        )
        assert done.returncode == 0, f"openssl {step[0]}: {done.stderr}"
    return files


class RedisServer:
    """A real ``redis-server`` on 127.0.0.1, no persistence: ``stop()`` then ``start()`` is a
    broker restart on the same port with every key lost. With ``tls``, it speaks TLS only
    (``rediss://``), its certificate signed by ``tls.ca``."""

    def __init__(self, binary: str, workdir: Path, tls: TlsFiles | None = None) -> None:
        self.binary = binary
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "redis.log"
        self.port = 0
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None
        self._client: Any = None

    @property
    def url(self) -> str:
        if self.tls is not None:
            return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis://127.0.0.1:{self.port}/0"

    def user_url(self, user: str, password: str) -> str:
        """``url`` as ACL user ``user``."""
        scheme, rest = self.url.split("://", 1)
        return f"{scheme}://{user}:{password}@{rest}"

    def _listen(self, port: int) -> list[str]:
        if self.tls is None:
            return ["--port", str(port)]
        return [
            "--port", "0", "--tls-port", str(port),
            "--tls-cert-file", str(self.tls.cert), "--tls-key-file", str(self.tls.key),
            "--tls-ca-cert-file", str(self.tls.ca), "--tls-auth-clients", "no",
        ]  # fmt: skip

    def start(self) -> RedisServer:
        """Start it (the first time on a free port, later on the same one); returns when it
        answers PING."""
        attempts = 1 if self.port else 5  # a fresh free port may be taken in between
        for _ in range(attempts):
            port = self.port or free_port()
            with open(self.log, "ab") as log:
                proc = subprocess.Popen(
                    [
                        self.binary,
                        *self._listen(port),
                        "--bind",
                        "127.0.0.1",
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                        "--dir",
                        str(self.dir),
                        "--daemonize",
                        "no",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.dir,
                    start_new_session=True,
                )
            deadline = time.monotonic() + REDIS_START_TIMEOUT_S
            ca = self.tls.ca if self.tls is not None else None
            while proc.poll() is None and time.monotonic() < deadline:
                if redis_pid(port, ca=ca) == proc.pid:
                    self.port, self.proc = port, proc
                    return self
                time.sleep(0.05)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        pytest.fail(f"redis-server did not start:\n{self.log.read_text(errors='replace')[-4000:]}")

    def stop(self) -> None:
        """Kill it (SIGKILL: a broker gone at once, nothing saved); idempotent."""
        proc, self.proc = self.proc, None
        client, self._client = self._client, None
        if client is not None:
            client.close()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)

    def restart(self) -> None:
        """A broker restart: the same port, every key lost."""
        self.stop()
        self.start()

    def client(self) -> Any:
        """A redis-py client on the server (strings decoded), to look at hero's keys."""
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(self.url, decode_responses=True)
        return self._client


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A started redis-server on loopback (a free port), killed at teardown."""
    server = RedisServer(redis_binary(), tmp_path / "redis")
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def tls_redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A started redis-server speaking TLS only, with a throwaway CA (``rediss://`` URLs
    name it: ``?ssl_ca_certs=...``); skipped when openssl, or TLS in redis-server, is
    missing."""
    binary = redis_binary()
    server = RedisServer(binary, tmp_path / "redis-tls", make_tls_files(tmp_path / "tls"))
    try:
        try:
            server.start()
        except pytest.fail.Exception:
            log = server.log.read_text(errors="replace")
            if "tls" in log.lower() and "not supported" in log.lower():
                pytest.skip(f"{binary} was built without TLS: {log.strip()[-300:]}")
            raise
        yield server
    finally:
        server.stop()


def redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip(
            "redis-server is not installed: the celery engine's tests need a real one "
            "(.ci/run installs it with apt-get, package redis-server)"
        )
    return binary


@pytest.fixture
def remote(tmp_path: Path, target_repo: Path) -> Path:
    """A bare clone of ``target_repo``: the ``target_remote`` every worker pushes to."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(target_repo), str(bare))
    return bare


# --------------------------------------------------------------------------- processes


class Proc:
    """A hero child process, its stdout and stderr in files under ``log_dir``."""

    def __init__(self, argv: list[str], log_dir: Path, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.argv = argv
        self.out = log_dir / f"{name}.out"
        self.err = log_dir / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=log_dir,
                env=env,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return read_text(self.out) + read_text(self.err)

    def wait_output(self, pattern: str, *, timeout: float = RUN_TIMEOUT_S) -> re.Match[str]:
        """The first match of the regex ``pattern`` in the output; fails if it exits first."""
        rx = re.compile(pattern)
        return wait_for(
            lambda: rx.search(self.output()),
            f"{pattern!r} from {self.name}",
            timeout=timeout,
            procs=(self,),
        )

    def kill9(self) -> None:
        """SIGKILL the process alone (what it started is left, as a crash leaves it)."""
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then wait for it to exit; SIGKILL (and fail) if it does not in ``timeout``."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            pytest.fail(f"{self.name} did not stop within {timeout} s of SIGTERM:\n{self.output()}")

    def wait_exit(self, timeout: float = RUN_TIMEOUT_S) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_group()
            pytest.fail(f"{self.name} did not exit within {timeout} s:\n{self.output()}")

    def kill_group(self) -> None:
        """SIGKILL its whole process group (it leads one of its own); idempotent."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


class Worker(Proc):
    """``python -m hero worker --home HOME --workdir WORKDIR --concurrency N --hostname
    NAME@%h``: one machine of the cluster. Its hero home of its own (runs/, worktrees/) is
    ``<workdir>/home``, its clone of the remote ``<workdir>/repo`` (the design's layout)."""

    def __init__(
        self,
        name: str,
        home: Path,
        workdir: Path,
        log_dir: Path,
        env: dict[str, str],
        *,
        concurrency: int = 1,
        args: tuple[str, ...] = (),
    ) -> None:
        self.home = home
        self.workdir = workdir
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
            str(concurrency),
            "--hostname",
            f"{name}@%h",
            "--loglevel",
            "info",
            *args,
        ]
        super().__init__(argv, log_dir, name, env)

    def wait_ready(self, timeout: float = WORKER_READY_TIMEOUT_S) -> Worker:
        """Until celery says it is ready (``NAME@HOST ready.``, once connected to the broker
        and consuming; hero's own ``hero worker ready`` comes before that)."""
        self.wait_output(r"\S+@\S+ ready\.", timeout=timeout)
        return self

    def received(self) -> list[str]:
        """The ids of the story tasks it received, in order (celery's INFO lines)."""
        return re.findall(r"Task hero\.run_story\[(\S+)\] received", self.output())

    def results(self) -> list[dict[str, str]]:
        """What its story tasks returned, in order (celery's ``succeeded`` lines)."""
        import ast

        found = re.findall(r"Task hero\.run_story\[\S+\] succeeded in \S+: (\{.*\})", self.output())
        return [ast.literal_eval(r) for r in found]

    @property
    def run_home(self) -> Path:
        """The hero home the worker runs stories in."""
        return self.workdir / "home"

    def worktree(self, key: str) -> Path:
        return self.run_home / "worktrees" / key

    def state(self, key: str) -> dict[str, Any] | None:
        """The worker's own record of story ``key`` (``<run home>/runs/state/<key>.json``)."""
        return read_json(self.run_home / "runs" / "state" / f"{key}.json")

    def ran(self, key: str) -> bool:
        """Whether this worker ran (some of) story ``key``."""
        return self.state(key) is not None or self.worktree(key).exists()


class Coordinator(Proc):
    """``python -m hero watch --home HOME --log-format json [ARGS]``: the JSON log lines go
    to stderr, read back by ``events``."""

    def __init__(
        self,
        name: str,
        home: Path,
        log_dir: Path,
        env: dict[str, str],
        args: tuple[str, ...],
        prelude: str = "",
    ) -> None:
        self.home = home
        hero = ["-m", "hero"]
        if prelude:  # run before hero's CLI, in its process (an older hero, say)
            hero = ["-c", f"{prelude}\nimport sys\nfrom hero.cli import main\nsys.exit(main())"]
        argv = [
            sys.executable,
            *hero,
            "watch",
            "--home",
            str(home),
            "--log-format",
            "json",
            *args,
        ]
        super().__init__(argv, log_dir, name, env)

    def events(self, name: str | None = None, **match: Any) -> list[dict[str, Any]]:
        found = []
        for line in read_text(self.err).splitlines():
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
        """The ``count``-th event ``name`` matching ``match``; fails if it exits first."""
        events = wait_for(
            lambda: (found := self.events(name, **match)) and len(found) >= count and found,
            f"{count}x {name} {match}",
            timeout=timeout,
            procs=(self,),
        )
        return events[count - 1]

    def state(self, key: str) -> dict[str, Any] | None:
        return read_json(self.home / "runs" / "state" / f"{key}.json")

    def wait_status(
        self,
        key: str,
        *statuses: str,
        timeout: float = RUN_TIMEOUT_S,
        others: tuple[Proc, ...] = (),
    ) -> dict[str, Any]:
        """The coordinator's record of ``key`` once its status is one of ``statuses``."""
        return wait_status(self.home, key, *statuses, timeout=timeout, procs=(self, *others))


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file's object; None if it is not there (hero writes its records atomically)."""
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except FileNotFoundError:
        return None


def wait_status(
    home: Path,
    key: str,
    *statuses: str,
    timeout: float = RUN_TIMEOUT_S,
    procs: tuple[Proc, ...] = (),
) -> dict[str, Any]:
    """``home``'s record of story ``key`` once its status is one of ``statuses``."""
    path = home / "runs" / "state" / f"{key}.json"

    def reached() -> dict[str, Any] | None:
        state = read_json(path)
        return state if state is not None and state.get("status") in statuses else None

    return wait_for(reached, f"{key} {'/'.join(statuses)} in {path}", timeout=timeout, procs=procs)


def wait_pid_file(path: Path, *, procs: tuple[Proc, ...] = ()) -> int:
    """The pid a command wrote to ``path`` (see helpers.long_command), once it is there."""

    def pid() -> int | None:
        try:
            content = path.read_text().strip()
        except FileNotFoundError:
            return None
        return int(content) if content.isdigit() else None

    return wait_for(pid, f"a pid in {path}", procs=procs)  # type: ignore[no-any-return]


def hero_cli(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m hero --home HOME ARGS`` to the end, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "hero", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def kill_marked(mark: str) -> int:
    """SIGKILL every process whose environment has ``CLUSTER_MARK=mark``; how many."""
    needle = f"\0{CLUSTER_MARK}={mark}\0".encode()
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
            if needle in environ and alive(int(entry)):
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    continue
                found += 1
        killed += found
        if not found:
            break
        time.sleep(0.05)
    return killed


# --------------------------------------------------------------------------- the cluster


def write_local(home: Path, values: dict[str, str]) -> None:
    """``config.local.yaml`` of ``home``: ``values``, quoted."""
    text = "".join(f"{k}: {json.dumps(v)}\n" for k, v in values.items())
    (home / "config.local.yaml").write_text(text, encoding="utf-8")


def roles_yaml(model: ScriptedModel, settings: dict[str, object]) -> str:
    """config/roles.yaml as conftest's make_home writes it: knobs, then both roles on the
    scripted model."""
    lines = [f"{k}: {v!r}" if isinstance(v, str) else f"{k}: {v}" for k, v in settings.items()]
    lines += ["worker:", "  provider: scripted", "reviewer:", "  provider: scripted"]
    return "\n".join(lines) + "\n"


#: The knobs make_home writes besides those given (fast LLM retries), for worker homes too.
TEST_KNOBS: dict[str, object] = {
    "llm_backoff_base_s": 0.01,
    "llm_backoff_max_s": 0.05,
    "llm_max_attempts": 3,
}


@dataclass
class Cluster:
    """A coordinator home, workers and coordinators on one broker and one remote."""

    root: Path
    redis: RedisServer
    remote: Path
    target_repo: Path
    make_home: HomeFactory
    mark: str = field(default_factory=lambda: uuid.uuid4().hex)
    procs: list[Proc] = field(default_factory=list)
    coordinator_home: Path | None = None
    model: ScriptedModel | None = None
    knobs: dict[str, object] = field(default_factory=dict)
    #: config.local.yaml of every home (the engine key; a broker URL with a password)
    local: dict[str, str] = field(default_factory=lambda: {"engine_key": ENGINE_KEY})

    @property
    def env(self) -> dict[str, str]:
        """The environment of every process of the cluster."""
        env = {**os.environ, CLUSTER_MARK: self.mark, "PYTHONUNBUFFERED": "1"}
        for name in ("HERO_BROKER_URL", "HERO_STATE_URL", "HERO_ENGINE_KEY", "HERO_HOME"):
            env.pop(name, None)  # the broker and the key are the ones in the homes' config
        return env

    def engine_knobs(self, **knobs: object) -> dict[str, object]:
        return {
            **ENGINE_KNOBS,
            "broker_url": self.redis.url,
            "target_remote": str(self.remote),
            **knobs,
        }

    def home(self, model: ScriptedModel, **knobs: object) -> Path:
        """The coordinator's home (make_home's, with the engine's knobs and ``knobs``);
        workers started later share its model and knobs."""
        self.model = model
        self.knobs = self.engine_knobs(**knobs)
        self.coordinator_home = self.make_home(model, **self.knobs)
        write_local(self.coordinator_home, self.local)
        return self.coordinator_home

    def worker_home(
        self, name: str, *, local: dict[str, str] | None = None, **knobs: object
    ) -> Path:
        """A hero home on "machine" ``name``: the coordinator's model and knobs, ``knobs``
        over them (None: left out), and no ``target_repo``: a worker has only the remote;
        config.local.yaml the cluster's (``local``: instead)."""
        assert self.model is not None, "call cluster.home(model) first"
        home = self.root / name / "hero"
        (home / "config" / "providers").mkdir(parents=True, exist_ok=True)
        (home / "config" / "providers" / "scripted.yaml").write_text(
            f"name: scripted\nbase_url: {self.model.base_url}\ndefault_model: scripted-test\n"
        )
        shared = {k: v for k, v in self.knobs.items() if k != "target_repo"}
        settings = {**TEST_KNOBS, **shared, **knobs}
        settings = {k: v for k, v in settings.items() if v is not None}  # None: left out
        (home / "config" / "roles.yaml").write_text(roles_yaml(self.model, settings))
        write_local(home, self.local if local is None else local)
        return home

    def start_worker(
        self,
        name: str | None = None,
        *,
        concurrency: int = 1,
        ready: bool = True,
        args: tuple[str, ...] = (),
        local: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        **knobs: object,
    ) -> Worker:
        """``hero worker`` on a new "machine" (``<root>/<name>/``: its home ``hero/``, its
        workdir ``work/``); with ``ready``, returns once it is ready."""
        name = name or f"w{sum(isinstance(p, Worker) for p in self.procs) + 1}"
        home = self.worker_home(name, local=local, **knobs)
        workdir = self.root / name / "work"
        workdir.mkdir(parents=True, exist_ok=True)
        worker = Worker(
            name,
            home,
            workdir,
            self.root,
            {**self.env, **(env or {})},
            concurrency=concurrency,
            args=args,
        )
        self.procs.append(worker)
        return worker.wait_ready() if ready else worker

    def start_coordinator(
        self, *args: str, name: str | None = None, prelude: str = ""
    ) -> Coordinator:
        """``hero watch ARGS`` on the coordinator's home (``prelude``: Python run first in
        its process)."""
        assert self.coordinator_home is not None, "call cluster.home(model) first"
        name = name or f"coordinator-{sum(isinstance(p, Coordinator) for p in self.procs) + 1}"
        coordinator = Coordinator(name, self.coordinator_home, self.root, self.env, args, prelude)
        self.procs.append(coordinator)
        return coordinator

    @property
    def workers(self) -> list[Worker]:
        return [p for p in self.procs if isinstance(p, Worker)]

    def outputs(self) -> str:
        return dump_outputs(self.procs)

    def close(self) -> None:
        """End every process of the cluster and everything they started."""
        for proc in self.procs:
            proc.kill_group()
        kill_marked(self.mark)


@pytest.fixture
def cluster(
    tmp_path: Path,
    redis_server: RedisServer,
    remote: Path,
    target_repo: Path,
    make_home: HomeFactory,
) -> Iterator[Cluster]:
    """A redis-server, a bare remote and the processes a test starts on them, all ended at
    teardown (on failure, the processes' outputs are in ``tmp_path``)."""
    machines = tmp_path / "machines"
    machines.mkdir()
    c = Cluster(machines, redis_server, remote, target_repo, make_home)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def tls_cluster(
    tmp_path: Path,
    tls_redis_server: RedisServer,
    remote: Path,
    target_repo: Path,
    make_home: HomeFactory,
) -> Iterator[Cluster]:
    """``cluster``, its Redis speaking TLS only (``rediss://``)."""
    machines = tmp_path / "machines"
    machines.mkdir()
    c = Cluster(machines, tls_redis_server, remote, target_repo, make_home)
    try:
        yield c
    finally:
        c.close()


# --------------------------------------------------------------------------- the model


APPROVED = verdict("APPROVED", "Good.")


@dataclass
class Policy:
    """A stateless scripted model for many stories on many workers.

    The worker's reply is picked by (story, round, step) from ``plans`` (default: commit
    ``<id>-r<round>.txt``, then finish); the reviewer approves unless ``reviews`` says
    otherwise. A story in ``gates`` waits for its event before every worker turn.
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


def worker_turns(model: ScriptedModel, sid: str) -> list[tuple[int, int]]:
    """(round, step) of every worker request for story ``sid``, in the order received: a
    turn asked twice shows up twice."""
    return [
        (worker_round(r.body), step_of(r.body))
        for r in list(model.requests)
        if not is_review(r.body) and story_of(r.body) == sid
    ]


def reviews_of(model: ScriptedModel, sid: str) -> int:
    return sum(1 for r in list(model.requests) if is_review(r.body) and story_of(r.body) == sid)


def branch_sha(repo: Path, branch: str) -> str | None:
    """The commit ``branch`` points at in ``repo`` (bare or not), None if it has none."""
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def once_per_turn(model, sid: str, rounds: int = 1) -> None:
    """Every worker turn of ``sid`` was asked once and every round reviewed once: the story
    ran once (the default plan: two turns a round)."""
    assert worker_turns(model, sid) == [(r, s) for r in range(1, rounds + 1) for s in (0, 1)]
    assert reviews_of(model, sid) == rounds


def coordinator_side(home: Path, path: Path) -> tuple[Any, Any, Any]:
    """(RemoteRun, Store, Celery app) for the story file ``path`` of ``home``: what the
    coordinator would use, for a test that sends the task itself."""
    from hero.config.loader import load_config
    from hero.engine.app import make_app
    from hero.engine.remote import RemoteRun
    from hero.engine.seal import Seal
    from hero.engine.store import Store
    from hero.git.ops import TargetRepo
    from hero.story.format import parse_story

    config = load_config(home, roles=("worker", "reviewer"))
    engine = config.engine
    store = Store(engine.state_url, engine.queue, engine.lease_s, Seal(engine.key))
    app = make_app(engine)
    repo = TargetRepo(config.target_repo)
    run = RemoteRun(parse_story(path), path, config, store, app, repo, None, threading.Event())
    return run, store, app
