"""Alerts (hero.run.notify): a command and a webhook told of each story's end and of a breaker
opening, without ever holding up a story or the daemon, and without a secret in what goes out.

The daemon and `hero run` run as child processes against the scripted model on loopback; the
webhook is a real HTTP server on loopback in this process (``Receiver``), the command a real
shell command appending its stdin to a file. The in-process tests drive ``Notifier`` itself
with a configuration loaded from a real home.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import (
    Hero,
    commit_once,
    is_review,
    step_of,
    task_text,
    verdict,
    watch_command,
    worker_round,
)
from plan_support import write_plan

from hero.config.loader import load_config
from hero.config.schema import ConfigError
from hero.llm.scripted import Reply, call, text
from hero.run.notify import BREAKER_OPEN, EVENT_VERSION, STORY_END, Notifier, shown_url
from hero.state import RunState, Status

RUN_TIMEOUT_S = 120.0  # generous "did not hang" bounds, not speed checks
API_KEY = "sk-notify-test-0123456789abcdef"
HOOK_TOKEN = "T0KEN-in-the-path-9f8e7d6c5b4a"


# --------------------------------------------------------------------------- the receiver


@dataclass
class Receiver:
    """A webhook on loopback: records each POST (headers, JSON body); ``mode`` "ok" answers
    200, "fail" 500, "hang" holds every request until ``release`` is set."""

    mode: str = "ok"
    posts: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.raw.append(body)
                receiver.headers.append(dict(self.headers))
                receiver.posts.append(json.loads(body))
                receiver.arrived.set()
                if receiver.mode == "hang":
                    receiver.release.wait(RUN_TIMEOUT_S)
                status = 500 if receiver.mode == "fail" else 200
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:  # the client gave up waiting
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook/{HOOK_TOKEN}"

    def stop(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Callable[..., Receiver]]:
    started: list[Receiver] = []

    def start(mode: str = "ok") -> Receiver:
        r = Receiver(mode).start()
        started.append(r)
        return r

    yield start
    for r in started:
        r.stop()


def refused_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook/{HOOK_TOKEN}"


def wait_for(cond: Callable[[], Any], timeout: float = RUN_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.05)


# --------------------------------------------------------------------------- homes


def add_settings(home: Path, *, local: dict[str, Any] | None = None, **roles: Any) -> None:
    """Append ``roles`` to config/roles.yaml; write ``local`` as config.local.yaml."""
    if roles:
        with open(home / "config" / "roles.yaml", "a", encoding="utf-8") as fh:
            fh.write(yaml.safe_dump(roles, sort_keys=False))
    if local is not None:
        (home / "config.local.yaml").write_text(yaml.safe_dump(local), encoding="utf-8")


def appending_command(out: Path) -> str:
    """A shell command that appends its stdin (one JSON line), and its $1, to files."""
    return f'{{ cat; echo; }} >> {out} && printf "%s\\n" "$1" >> {out}.names && env > {out}.env'


def handler(give_up: set[str]) -> Callable[[dict[str, Any]], Reply]:
    """Every story commits a file and finishes; the reviewer approves, except for the
    stories in ``give_up``."""

    def answer(body: dict[str, Any]) -> Reply:
        sid = (
            task_text(body).split("# Story ", 1)[1].split(":", 1)[0] if not is_review(body) else ""
        )
        if is_review(body):
            review_of = str(body["messages"][1]["content"])
            if any(f"# Story {s}:" in review_of for s in give_up):
                return verdict("CHANGES_REQUESTED", "Not yet.")
            return verdict("APPROVED", "Good.")
        n = worker_round(body)
        plan = [call("bash", command=commit_once(sid)), text(f"Round {n} done.")]
        return plan[min(step_of(body), 1)]

    return answer


def events_in(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def log_events(err: Path, name: str) -> list[dict[str, Any]]:
    found = []
    for line in err.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == name:
                found.append(event)
    return found


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    err: Path

    def output(self) -> str:
        return self.err.read_text(errors="replace")

    def wait_exit(self) -> int:
        try:
            return self.proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"hero watch did not exit:\n{self.output()}")


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def start(home: Path, *args: str) -> Daemon:
        err = tmp_path / f"watch-{len(started)}.err"
        with open(err, "wb") as fh:
            proc = subprocess.Popen(
                watch_command("--home", str(home), "--log-format", "json", *args),
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=fh,
                cwd=tmp_path,
            )
        started.append(Daemon(proc, err))
        return started[-1]

    yield start
    for d in started:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


# --------------------------------------------------------------------------- hero watch


@pytest.mark.slow
def test_watch_sends_one_event_per_story_end_to_the_command_and_the_webhook(
    scripted, make_home, write_story, receiver, daemons, tmp_path: Path, monkeypatch
) -> None:
    model = scripted(handler(give_up={"s2"}))
    home = make_home(model, max_parallel=1)
    hook = receiver()
    out = tmp_path / "events.jsonl"
    add_settings(
        home,
        notify_command=appending_command(out),
        local={"keys": {"scripted": API_KEY}, "notify_webhook": hook.url},
    )
    write_story(home, "s1", title=f"Passes (the key {API_KEY} pasted by mistake)")
    write_story(home, "s2", max_retries=1)
    monkeypatch.setenv("HERO_SHOULD_NOT_PASS", "1")
    monkeypatch.setenv("MY_TOKEN", API_KEY)

    daemon = daemons(home, "--exit-when-idle")

    assert daemon.wait_exit() == 0, daemon.output()
    by_key = {e["key"]: e for e in hook.posts}
    assert len(hook.posts) == 2 and set(by_key) == {"s1", "s2"}, hook.posts
    assert by_key["s1"]["status"] == "passed" and by_key["s2"]["status"] == "gave_up"
    from_command = events_in(out)
    assert sorted(e["key"] for e in from_command) == ["s1", "s2"]
    assert {e["key"]: e["status"] for e in from_command} == {"s1": "passed", "s2": "gave_up"}
    assert (tmp_path / "events.jsonl.names").read_text().split() == [STORY_END, STORY_END]
    for event in hook.posts:
        assert event["event"] == STORY_END and event["version"] == EVENT_VERSION
    assert all(h["Content-Type"] == "application/json" for h in hook.headers)
    # no secret anywhere: the key in the title, the webhook's token, the environment
    everything = out.read_text() + b"".join(hook.raw).decode() + daemon.output()
    assert API_KEY not in everything and HOOK_TOKEN not in everything
    assert "[redacted]" in by_key["s1"]["title"]
    env = (tmp_path / "events.jsonl.env").read_text()
    # hero's variables stay with hero; only the marker its leftovers are ended by is set
    names = [line.split("=", 1)[0] for line in env.splitlines() if "=" in line]
    assert [n for n in names if n.startswith("HERO_")] == ["HERO_RUN_MARKER"]
    assert API_KEY not in env and "MY_TOKEN" not in names
    notified = log_events(daemon.err, "notified")
    assert len(notified) == 4, daemon.output()  # two stories, two targets each


@pytest.mark.slow
def test_a_hanging_webhook_holds_up_neither_the_stories_nor_a_stop(
    scripted, make_home, write_story, receiver, daemons
) -> None:
    """The first story's webhook never answers (timeout 600 s): the second story still runs
    to its end, and SIGTERM still stops the daemon, whose last words say what was not sent."""
    model = scripted(handler(give_up=set()))
    home = make_home(model, max_parallel=1)
    hook = receiver("hang")
    add_settings(home, notify_webhook=hook.url.split("/hook/")[0], notify_timeout_s=600)
    write_story(home, "s1", priority="high")
    write_story(home, "s2")

    daemon = daemons(home)

    assert hook.arrived.wait(RUN_TIMEOUT_S), daemon.output()
    assert wait_for(lambda: len(log_events(daemon.err, "finished")) == 2), daemon.output()
    assert not hook.release.is_set()  # the first alert still hangs
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.wait_exit() in (0, 130), daemon.output()
    assert log_events(daemon.err, "notify unfinished"), daemon.output()


@pytest.mark.slow
def test_a_refused_webhook_and_a_failing_command_are_logged_and_the_daemon_carries_on(
    scripted, make_home, write_story, daemons
) -> None:
    model = scripted(handler(give_up=set()))
    home = make_home(model)
    add_settings(
        home,
        notify_command="echo 'no way' >&2; exit 3",
        local={"notify_webhook": refused_url()},
    )
    write_story(home, "s1")

    daemon = daemons(home, "--exit-when-idle")

    assert daemon.wait_exit() == 0, daemon.output()
    failed = {e["target"]: e for e in log_events(daemon.err, "notify failed")}
    assert set(failed) == {"command", "webhook"}, daemon.output()
    assert failed["command"]["error"] == "exit 3"
    assert "refused" in failed["webhook"]["error"].lower()
    assert failed["webhook"]["url"].startswith("http://127.0.0.1:")
    assert HOOK_TOKEN not in daemon.output()
    assert "no way" in (home / "runs" / "notify.log").read_text()
    assert json.loads((home / "runs" / "state" / "s1.json").read_text())["status"] == "passed"


@pytest.mark.slow
def test_run_plan_sends_each_story_s_end_a_skip_too(
    scripted, make_home, receiver, tmp_path: Path
) -> None:
    pass

    model = scripted(handler(give_up={"a"}))
    home = make_home(model, max_retries=1)
    hook = receiver()
    add_settings(home, notify_webhook=hook.url)
    write_plan(home, "p", {"a": [], "b": ["a"], "c": []})

    done = subprocess.run(
        [sys.executable, "-m", "hero", "run-plan", "p", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )

    assert done.returncode == 1, done.stdout + done.stderr
    got = {e["key"]: (e["status"], e["plan"]) for e in hook.posts}
    assert len(hook.posts) == 3, hook.posts
    assert got == {"p/a": ("gave_up", "p"), "p/b": ("skipped", "p"), "p/c": ("passed", "p")}
    skipped = next(e for e in hook.posts if e["key"] == "p/b")
    assert "a" in skipped["error"] and skipped["duration_s"] is None


# --------------------------------------------------------------------------- hero run


@pytest.mark.slow
def test_hero_run_sends_its_story_end(
    scripted, make_home, write_story, receiver, tmp_path: Path
) -> None:
    model = scripted(handler(give_up=set()))
    home = make_home(model)
    hook = receiver()
    out = tmp_path / "events.jsonl"
    add_settings(
        home,
        notify_command=["sh", "-c", f'cat >> {out}; echo >> {out}; echo "$0" >> {out}.names'],
        notify_webhook=hook.url,
    )
    story = write_story(home, "s1")

    done = subprocess.run(
        [sys.executable, "-m", "hero", "run", str(story), "--home", str(home), "--json"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # the alerts wrote nothing to stdout
    assert len(hook.posts) == 1
    event = hook.posts[0]
    assert events_in(out) == [event]
    assert (tmp_path / "events.jsonl.names").read_text().split() == [STORY_END]  # the last arg
    assert {k: event[k] for k in ("event", "version", "id", "key", "plan", "status")} == {
        "event": STORY_END,
        "version": EVENT_VERSION,
        "id": "s1",
        "key": "s1",
        "plan": None,
        "status": "passed",
    }
    assert event["rounds"] == 1 and event["verdicts"] == ["APPROVED"]
    assert event["branch"] == result["branch"] == "hero/s1"
    assert event["head_sha"] == result["head_sha"] and event["error"] is None
    assert set(event["usage"]) == {"tokens_in", "tokens_out", "llm_calls", "cost_usd"}
    assert event["usage"]["llm_calls"] >= 2
    assert event["duration_s"] > 0 and Path(event["state"]).is_file()
    assert event["story"] == str(story.resolve()) or Path(event["story"]).name == "s1.md"


@pytest.mark.slow
def test_hero_run_with_a_refused_webhook_still_exits_with_the_story_s_code(
    scripted, make_home, write_story
) -> None:
    model = scripted(handler(give_up={"s1"}))
    home = make_home(model)
    add_settings(home, notify_webhook=refused_url())
    story = write_story(home, "s1", max_retries=1)

    done = subprocess.run(
        [sys.executable, "-m", "hero", "run", str(story), "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )

    assert done.returncode == 1, done.stderr  # gave up, as without the alert
    assert "hero: notify failed: " in done.stderr and "target=webhook" in done.stderr
    assert HOOK_TOKEN not in done.stderr and HOOK_TOKEN not in done.stdout


# --------------------------------------------------------------------------- the notifier


@dataclass
class Lines:
    """A structlog-like logger that keeps what it is told."""

    seen: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def info(self, event: str, **fields: Any) -> None:
        self.seen.append((event, fields))

    def warning(self, event: str, **fields: Any) -> None:
        self.seen.append((event, fields))

    def named(self, event: str) -> list[dict[str, Any]]:
        return [f for e, f in self.seen if e == event]


@pytest.fixture
def home_of(make_home, scripted) -> Callable[..., Path]:
    model = scripted([])

    def make(*, local: dict[str, Any] | None = None, **roles: Any) -> Path:
        home = make_home(model)
        add_settings(home, local=local, **roles)
        return home

    return make


def ended(status: Status = Status.PASSED, **more: Any) -> RunState:
    return RunState(id="s1", status=status, title="A story", **more)


@pytest.mark.slow
def test_breaker_opened_is_sent_unless_left_out_of_notify_events(home_of, receiver) -> None:
    hook = receiver()
    info = {"provider": "openai", "kind": "outage", "reason": "5 failures", "retry_at": 1.5e9}
    more = {"since": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC), "event": "forged"}
    notifier = Notifier(load_config(home_of(notify_webhook=hook.url)), Lines())

    notifier.breaker_opened({**info, **more})
    notifier.close(RUN_TIMEOUT_S)

    assert len(hook.posts) == 1 and hook.posts[0]["since"] == "2026-01-02 00:00:00+00:00"
    assert {k: hook.posts[0][k] for k in ("event", "version", *info)} == {
        "event": BREAKER_OPEN,
        "version": EVENT_VERSION,
        **info,
    }
    only_ends = receiver()
    config = load_config(home_of(notify_webhook=only_ends.url, notify_events=["story_end"]))
    notifier = Notifier(config, Lines())
    notifier.breaker_opened(info)
    notifier.story_ended(ended())
    notifier.story_ended(ended(Status.INTERRUPTED))  # not an end: it resumes
    notifier.close(RUN_TIMEOUT_S)
    assert [p["event"] for p in only_ends.posts] == [STORY_END]


@pytest.mark.slow
def test_a_command_that_outlives_its_timeout_is_ended_and_logged(home_of, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    home = home_of(notify_command=f"echo $$ > {pid_file}; exec sleep 300", notify_timeout_s=0.5)
    log = Lines()
    notifier = Notifier(load_config(home), log)

    notifier.story_ended(ended())
    notifier.close(RUN_TIMEOUT_S)

    assert log.named("notify failed") == [
        {
            "notify_event": STORY_END,
            "target": "command",
            "error": "timed out after 0.5 s",
            "log": str(home / "runs" / "notify.log"),
        }
    ]
    pid = int(pid_file.read_text())
    assert wait_for(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), 20)


def test_what_a_command_leaves_running_is_ended_with_it(home_of, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    home = home_of(notify_command=f"setsid sleep 300 > /dev/null 2>&1 & echo $! > {pid_file}")
    log = Lines()
    notifier = Notifier(load_config(home), log)

    notifier.story_ended(ended())
    notifier.close(RUN_TIMEOUT_S)

    assert log.named("notified")
    pid = int(pid_file.read_text())
    assert wait_for(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), 20)


@pytest.mark.slow
def test_kill_9_of_hero_run_mid_alert_leaves_no_command_behind(
    scripted, make_home, write_story, tmp_path: Path
) -> None:
    """hero dies while its alert command runs: the command still ends within its timeout."""
    model = scripted(handler(give_up=set()))
    home = make_home(model)
    pid_file = tmp_path / "pid"
    add_settings(
        home,
        notify_command=f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; sleep 300",
        notify_timeout_s=2,
    )
    story = write_story(home, "s1")
    hero = Hero(home, story, tmp_path, "run")

    pid = hero.wait_for_file(pid_file)
    hero.proc.kill()
    hero.proc.wait()

    assert wait_for(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), RUN_TIMEOUT_S)
    assert json.loads((home / "runs" / "state" / "s1.json").read_text())["status"] == "passed"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] == "Z"
    except (OSError, IndexError):
        return True


def test_what_a_worker_wrote_reaches_the_command_only_as_json_on_stdin(
    home_of, tmp_path: Path
) -> None:
    """A title or error full of shell is data: it is never run, and no secret gets out."""
    out = tmp_path / "got.json"
    home = home_of(
        notify_command=f"cat > {out}",
        local={"keys": {"scripted": API_KEY}},
    )
    hostile = f'"; touch {tmp_path}/pwned; $(touch {tmp_path}/pwned2) `id` {API_KEY}\n' * 2000
    log = Lines()
    notifier = Notifier(load_config(home), log)

    notifier.story_ended(ended(Status.ERROR, error=hostile), duration_s=1.25)
    notifier.close(RUN_TIMEOUT_S)

    got = json.loads(out.read_text())
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    assert API_KEY not in out.read_text()
    assert got["status"] == "error" and "[redacted]" in got["error"]
    assert len(got["error"]) < 5000  # cut: an alert is no place for a whole log
    assert got["duration_s"] == 1.25
    assert log.named("notified") == [{"notify_event": STORY_END, "target": "command"}]


def test_a_crashed_story_is_sent_as_an_error_from_its_record(home_of, tmp_path: Path) -> None:
    """The dispatcher's last resort (a run that raised): the record as saved, as an error."""
    from hero.names import StoryRef
    from hero.state import save_state

    out = tmp_path / "got.jsonl"
    home = home_of(notify_command=f"{{ cat; echo; }} >> {out}")
    save_state(home, RunState(id="s1", status=Status.RUNNING, title="Saved", branch="hero/s1"))
    notifier = Notifier(load_config(home), Lines())

    notifier.story_recorded(StoryRef("", "s1"), error="story 's1' crashed: KeyError: 'x'")
    notifier.story_recorded(StoryRef("", "gone"), error="story 'gone' crashed: OSError")
    notifier.story_recorded(StoryRef("", "s1"))  # still running by its record: not an end
    notifier.close(RUN_TIMEOUT_S)

    got = events_in(out)
    assert [(e["key"], e["status"], e["title"], e["branch"]) for e in got] == [
        ("s1", "error", "Saved", "hero/s1"),
        ("gone", "error", "", None),
    ]
    assert got[0]["error"] == "story 's1' crashed: KeyError: 'x'"


@pytest.mark.slow
def test_a_full_queue_drops_events_with_a_line_instead_of_growing(
    home_of, receiver, monkeypatch
) -> None:
    import hero.run.notify

    monkeypatch.setattr(hero.run.notify, "QUEUE_SIZE", 2)
    hook = receiver("hang")
    log = Lines()
    notifier = Notifier(load_config(home_of(notify_webhook=hook.url, notify_timeout_s=600)), log)

    notifier.story_ended(ended())
    assert hook.arrived.wait(RUN_TIMEOUT_S)  # the first is being sent, and hangs
    for _ in range(4):
        notifier.story_ended(ended())

    assert len(log.named("notify dropped")) == 2
    hook.release.set()
    notifier.close(RUN_TIMEOUT_S)
    assert len(hook.posts) == 3 and not log.named("notify unfinished")


@pytest.mark.slow
def test_a_redirect_is_not_followed(home_of, receiver) -> None:
    hook = receiver()

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(307)
            self.send_header("Location", hook.url)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        log = Lines()
        notifier = Notifier(load_config(home_of(notify_webhook=url)), log)
        notifier.story_ended(ended())
        notifier.close(RUN_TIMEOUT_S)
    finally:
        server.shutdown()
        server.server_close()

    assert [f["error"] for f in log.named("notify failed")] == ["HTTP 307"]
    assert hook.posts == []


def test_without_settings_nothing_is_sent_and_no_thread_starts(home_of) -> None:
    before = threading.active_count()
    notifier = Notifier(load_config(home_of()), Lines())

    notifier.story_ended(ended())
    notifier.close(1.0)

    assert not notifier.enabled and threading.active_count() == before


def test_shown_url_keeps_only_scheme_and_host() -> None:
    assert shown_url(f"https://user:pw@hooks.example.com:8443/x/{HOOK_TOKEN}?t=1") == (
        "https://hooks.example.com:8443/..."
    )
    assert shown_url("http://[::1]/a") == "http://[::1]/..."


# --------------------------------------------------------------------------- bad settings


@pytest.mark.parametrize(
    ("roles", "local", "file", "key", "words"),
    [
        ({"notify_webhook": "ftp://host/x"}, None, "config/roles.yaml", "notify_webhook", "http"),
        ({"notify_webhook": "hooks.example.com"}, None, "config/roles.yaml", "notify_webhook", ""),
        ({"notify_webhook": 3}, None, "config/roles.yaml", "notify_webhook", "string"),
        ({"notify_command": ""}, None, "config/roles.yaml", "notify_command", "empty"),
        ({"notify_command": "   "}, None, "config/roles.yaml", "notify_command", "empty"),
        ({"notify_command": []}, None, "config/roles.yaml", "notify_command", "non-empty list"),
        ({"notify_command": ["", "x"]}, None, "config/roles.yaml", "notify_command", "item 1"),
        ({"notify_command": ["x", 3]}, None, "config/roles.yaml", "notify_command", "item 2"),
        ({"notify_command": {"a": 1}}, None, "config/roles.yaml", "notify_command", "mapping"),
        (
            {"notify_events": ["story_ends"]},
            None,
            "config/roles.yaml",
            "notify_events",
            "story_end",
        ),
        ({"notify_timeout_s": 0}, None, "config/roles.yaml", "notify_timeout_s", "> 0"),
        ({}, {"notify_webhook": "file:///etc/passwd"}, "config.local.yaml", "notify_webhook", ""),
        ({}, {"notify_webhook": ["x"]}, "config.local.yaml", "notify_webhook", "string"),
    ],
)
def test_bad_settings_are_a_config_error_naming_file_and_key(
    home_of, roles: dict[str, Any], local: dict[str, Any] | None, file: str, key: str, words: str
) -> None:
    home = home_of(local=local, **roles)

    with pytest.raises(ConfigError) as caught:
        load_config(home)

    assert (caught.value.file, caught.value.key) == (file, key), str(caught.value)
    assert words in caught.value.message


def test_a_webhook_with_a_password_is_refused_in_roles_yaml_without_showing_it(home_of) -> None:
    home = home_of(notify_webhook=f"https://hero:{HOOK_TOKEN}@hooks.example.com/x")

    with pytest.raises(ConfigError) as caught:
        load_config(home)

    assert (caught.value.file, caught.value.key) == ("config/roles.yaml", "notify_webhook")
    assert HOOK_TOKEN not in str(caught.value) and "config.local.yaml" in str(caught.value)


def test_a_bad_webhook_error_never_echoes_the_url(home_of) -> None:
    home = home_of(local={"notify_webhook": f"gopher://{HOOK_TOKEN}/x"})

    with pytest.raises(ConfigError) as caught:
        load_config(home)

    assert HOOK_TOKEN not in str(caught.value) and "gopher" in str(caught.value)


def test_a_webhook_from_config_local_is_a_secret_whole(home_of, receiver) -> None:
    url = f"https://hooks.example.com/services/{HOOK_TOKEN}"
    config = load_config(home_of(local={"notify_webhook": url}))

    assert config.notify.webhook == url
    assert url in config.secrets
    assert HOOK_TOKEN not in repr(config.notify)


def test_hero_watch_refuses_bad_settings_at_start(home_of) -> None:
    home = home_of(notify_command="")

    done = subprocess.run(
        watch_command("--home", str(home), "--exit-when-idle"),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )

    assert done.returncode == 2
    assert "config/roles.yaml: notify_command: expected a command" in done.stderr
    assert os.path.exists(home)
