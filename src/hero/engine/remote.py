"""The coordinator's side of one story on the Celery engine: send it, mirror what the
worker publishes into this home, send it again when it is lost.

:class:`RemoteRun` stands where ``pipeline.StoryRun`` stands with the local engine (the
dispatcher runs either in a thread): ``run()`` returns the story's record once it has
ended, and until then the coordinator's home holds, as with the local engine, the story's
record (``runs/state``), traces and verify logs (``runs/<id>/``), its file with the
feedback hero appends, and the progress lines in the log. ``hero status`` and
``hero logs -f`` read them as they always do.

A story is lost when, for ``lease_s``, it has no lease (no worker runs it), no pending
mark (it waits in no queue) and no end for the dispatch that sent it: a worker killed with
``kill -9``, a machine gone, a broker restarted without its data. It is then sent again,
with the record and current trace as mirrored here, and resumes from its last saved step
on whichever worker takes it. A coordinator that restarts finds the story's lease or
pending mark and waits for that dispatch rather than sending a second one.

Every task it sends is signed with the engine key (hero.engine.seal), and everything it
reads back from Redis is hostile input (hero.engine.trust): a value is used only when its
seal holds, it comes from a dispatch of this story this run sent or followed, and it fits
(a record is this story's, a file has a plain name, sizes are bounded). Paths are made from
the story this coordinator sent, never from what Redis says. A value refused is said once
in the log, with what and where, and the last good copy here stays as it was.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hero import __version__
from hero.config.home import Config
from hero.engine.app import broker_keys
from hero.engine.seal import Seal
from hero.engine.store import Store
from hero.engine.trust import (
    DISPATCH_RE,
    MAX_FILE_BYTES,
    Untrusted,
    file_name_problem,
    record_for,
)
from hero.errors import Interrupted
from hero.fsio import atomic_write
from hero.git.ops import GitError, TargetRepo, git
from hero.locks import story_lock
from hero.redact import Redactor
from hero.run.record import done_path_for, move_story_file
from hero.run.start import write_error_log
from hero.state import TERMINAL, RunState, StateError, Status, load_state, save_state
from hero.story.record import Story

#: How often the coordinator looks at a running story in Redis.
POLL_S = 0.2
#: The longest wait before it looks again after a failure it did not foresee.
HICCUP_MAX_S = 30.0


class RemoteRun:
    """One story, run by some ``hero worker``, watched from here."""

    def __init__(
        self,
        story: Story,
        path: Path,
        config: Config,
        store: Store,
        app: Any,
        repo: TargetRepo,
        log: Any,
        cancel: threading.Event,
        send_lock: threading.Lock | None = None,
    ) -> None:
        self.story = story
        self.path = path  # the story file in this home's inbox
        self.config = config
        self.home = config.home
        self.seal = Seal(config.engine.key)
        self.store = store.sealed_with(self.seal)
        self.app = app
        self.repo = repo
        self.log = log
        self.cancel = cancel
        self.ref = story.ref
        self.key = self.ref.key
        self.dispatch = ""
        self._state_text: str | None = None
        self._story_text: str | None = None
        self._log_index = 0
        self._lost_since: float | None = None
        self._sent: set[str] = set()  # every dispatch of the story this run made or followed
        self._file_macs: dict[str, tuple[int, Any]] = {}  # name -> (length, its HMAC so far)
        self._refused: set[tuple[str, str]] = set()  # (where, why) said in the log
        self._hiccups = 0  # unforeseen failures in a row while watching (see _hiccup)
        # a pending mark without a lease (see _dropped): since when, last looked, found gone
        self._broker_keys = broker_keys(config.engine)
        self._unleased_since: float | None = None
        self._looked_at = 0.0
        self._gone = False
        self._hiccups_said: set[str] = set()
        #: one send at a time across the coordinator's stories: a Celery app is not
        #: thread-safe (its producer pool and channels), and stories lost together (a
        #: dead worker's) are sent again in the same instant
        self.send_lock = send_lock or threading.Lock()
        #: called with each record mirrored here (the dispatcher sees a probe answered)
        self.on_record: Callable[[RunState], None] | None = None
        #: what the payload carries besides the story (`hero bench`: its ``bench`` part,
        #: hero.engine.checkout), and where the story's branch is fetched from at its end
        self.extra: dict[str, Any] = {}
        self.remote = config.engine.target_remote

    # -- the StoryRun interface ------------------------------------------------------------

    def force_interrupted(self) -> None:
        """Nothing to record here: the story runs on, on its worker, and this home picks
        it up again when the coordinator restarts."""

    def run(self) -> RunState:
        # the story's lock in this home, as a local run holds it: `hero status` then shows
        # the story as running (not stale), and `hero run` of it here is refused
        with story_lock(self.home, self.ref):
            self._adopt_or_send()
            return self._wait()

    def _wait(self) -> RunState:
        """Mirror the dispatch sent until it ends; send it again if it is lost."""
        # a worker whose lease vanished (a broker that lost its data) takes it again within
        # a third of it: a lease, then, is grace enough
        grace = self.config.engine.lease_s
        while True:
            if self.cancel.wait(POLL_S):
                raise Interrupted("the coordinator stopped; the story runs on its worker")
            try:
                self._mirror()
                done = self._done()
                if done.get("dispatch") in self._sent and done.get("status"):
                    state = self._ended(done)
                    if state is not None:
                        return state
                    continue  # stopped on its worker, and sent on to another
                if self._lost():
                    self._lost_since = self._lost_since or time.monotonic()
                    if time.monotonic() - self._lost_since >= grace:
                        self._worker_refused()
                        self.log.warning(
                            "sent again", reason="no worker holds it and no queue has it"
                        )
                        self._send()
                else:
                    self._lost_since = None
            except Untrusted as exc:  # a key of hero's planted with another type
                self._refuse("a key", "redis", str(exc))
            except (Interrupted, StateError):
                raise
            except Exception as exc:  # noqa: BLE001 - the story runs on: keep watching it
                if _broker_error(exc):
                    self._wait_for_broker(exc)
                else:
                    self._hiccup(exc)
            else:
                self._hiccups = 0

    # -- sending -----------------------------------------------------------------------------

    def _adopt_or_send(self) -> None:
        """A dispatch of this story that is alive (a lease, a pending mark) is waited for,
        after a coordinator restart; otherwise the story is sent."""
        while True:
            try:
                try:
                    current = self.store.short("dispatch", self.key) or ""
                    alive = self.store.holder(self.key) or self.store.pending(self.key)
                except Untrusted as exc:  # planted with another type: send afresh
                    self._refuse("a key", "redis", str(exc))
                    current, alive = "", None
                if not DISPATCH_RE.fullmatch(current):
                    current = ""  # not one this coordinator could have sent
                # a dispatch that still runs, or that ended while this coordinator was down
                ended = bool(current) and self._done().get("dispatch") == current
                if current and (alive or ended):
                    self.dispatch = current
                    self._sent.add(current)
                    self._log_index = self.store.log_length(self.key)
                    self.log.info("following", dispatch=self.dispatch, worker=alive)
                    return
                self._send()
                return
            except (Interrupted, StateError):
                raise
            except Exception as exc:  # see _wait: look again, never give up
                if self.cancel.is_set():
                    raise Interrupted("the coordinator stopped") from exc
                if _broker_error(exc):
                    self._wait_for_broker(exc)
                else:
                    self._hiccup(exc)

    def _send(self) -> None:
        """Send the story (a new dispatch), with what this home knows of it."""
        self.dispatch = uuid.uuid4().hex
        self._sent.add(self.dispatch)
        store, key = self.store, self.key
        store.redis.set(store.key("dispatch", key), self.dispatch)
        store.redis.delete(store.key("done", key), store.key("log", key))
        self._log_index = 0
        store.mark_pending(key, self.dispatch)
        task = self.task()
        with self.send_lock:
            self.app.send_task(
                "hero.run_story",
                args=[task],
                queue=self.config.engine.queue,
                task_id=self._task_id(self.dispatch),
            )
        self._lost_since = self._unleased_since = None
        self.log.info("sent", dispatch=self.dispatch, queue=self.config.engine.queue)

    def task(self) -> dict[str, Any]:
        """The payload, signed (hero.engine.seal): what a worker is sent."""
        return self.seal.sign_task(self.payload())

    def payload(self) -> dict[str, Any]:
        """What a worker needs of the story: its file, this home's record of it and its
        current round's trace, its dependencies' records."""
        ref, home = self.ref, self.home
        state = load_state(home, ref)  # StateError for a record that cannot be read
        record = json.dumps(state.to_dict(), indent=2) if state is not None else None
        files: dict[str, str] = {}
        if state is not None:
            if state.status != Status.PASSED:
                trace = ref.run_dir(home) / f"round-{len(state.rounds) + 1}.jsonl"
                text = _read_text(trace)
                if text is not None:
                    files[trace.name] = text
        deps: dict[str, str] = {}
        for dep in self.story.depends_on:
            from hero.names import StoryRef

            dep_ref = StoryRef(self.story.plan, dep)
            text = _read_text(dep_ref.state_path(home))
            if text:
                deps[dep_ref.key] = text
        return {
            "key": self.key,
            "plan": ref.plan,
            "id": ref.id,
            "file_name": self.path.name,
            "story_text": _read_text(self.path) or "",
            "version": __version__,
            "state": record,
            "files": files,
            "deps": deps,
            "base_ref": self.story.base_ref
            or self.config.target_base_ref
            or _current_branch(self.repo),
            "dispatch": self.dispatch,
            "memory": self._recalled(),
            **self.extra,
        }

    def _recalled(self) -> dict[str, str]:
        """What the repository's memory tells the story, recalled here, where the memory
        is (hero.memory.recall): the worker is sent it, it never reads a memory of its own."""
        from hero.llm.usage import estimate_text
        from hero.memory.recall import recall_for

        recalled = recall_for(
            self.config,
            self.story,
            estimate=estimate_text,
            say=lambda why: self.log.warning("memory", detail=why),
        )
        return {"section": recalled.section, "recap": recalled.recap}

    def _lost(self) -> bool:
        """Nobody runs the story and no queue holds it (read in this order: a worker takes
        the lease before it clears the pending mark)."""
        store, key = self.store, self.key
        pending = store.pending(key)
        if pending is None:
            self._unleased_since = None
            return store.holder(key) is None
        if store.holder(key) is not None:
            self._unleased_since = None
            return False
        return self._dropped(pending)

    def _dropped(self, pending: str) -> bool:
        """A pending mark and no lease: the story waits in the broker's queue, or a worker
        took its task (Celery acknowledges a task as a worker starts it) and died before it
        took the lease (a ``kill -9`` in between): then no queue holds it, no worker will
        ever clear the mark, and without this the story would wait for ever. The broker is
        looked at only once the mark has been there a lease without a lease taken, then
        once a lease."""
        if self._broker_keys is None or not DISPATCH_RE.fullmatch(pending):
            return False
        now, every = time.monotonic(), self.config.engine.lease_s
        if self._unleased_since is None:
            self._unleased_since, self._looked_at, self._gone = now, 0.0, False
            return False
        if now - self._unleased_since >= every and now - self._looked_at >= every:
            self._looked_at = now
            queues, unacked = self._broker_keys
            self._gone = not self.store.in_broker(queues, unacked, self._task_id(pending))
        return self._gone

    def _task_id(self, dispatch: str) -> str:
        return f"{self.key.replace('/', '.')}-{dispatch}"

    def _wait_for_broker(self, exc: BaseException) -> None:
        self.log.warning("broker unreachable", error=" ".join(str(exc).split())[:200])
        self.cancel.wait(1.0)

    def _hiccup(self, exc: BaseException) -> None:
        """An exception hero did not foresee while it watched the story (a bug, or a
        client library failing in a way it does not name as a broker error). The story
        runs on, on its worker, whatever happens here: giving up would end it in this home
        (the dispatcher refuses its file, and ``--exit-when-idle`` exits) while a worker
        still runs it. So: its traceback to ``runs/<id>/error.log`` and the log, once per
        kind, then look again, less often each time (at most every HICCUP_MAX_S)."""
        said = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        if said not in self._hiccups_said:
            self._hiccups_said.add(said)
            write_error_log(self.ref.run_dir(self.home), Redactor(self.config.secrets))
            self.log.warning(
                "watching failed; looking again",
                error=said,
                log=f"runs/{self.ref.rel}/error.log",
            )
        self._hiccups += 1
        self.cancel.wait(min(HICCUP_MAX_S, POLL_S * 2**self._hiccups))

    # -- mirroring ----------------------------------------------------------------------------

    def _mirror(self) -> None:
        """What the worker published, into this home: the story file, the traces and logs,
        then the record (whose digest is the file's), then the progress lines. Each value
        is checked first; one refused leaves this home's copy as it was."""
        self._mirror_story()
        self._mirror_files()
        self._mirror_record()
        self._mirror_log()

    def _mirror_story(self) -> None:
        sealed = self._checked("the story file", "story", self.store.story_text)
        if sealed is None or sealed.dispatch not in self._sent:
            return
        story_text = sealed.value
        if story_text != self._story_text:
            if self.path.exists() and _read_text(self.path) != story_text:
                try:  # never through a link swapped in for the story file
                    atomic_write(self.path, story_text.encode("utf-8"), follow_link=False)
                except OSError as exc:
                    self.log.warning("story file not updated", path=str(self.path), error=str(exc))
            self._story_text = story_text

    def _mirror_record(self) -> None:
        sealed = self._checked("the run record", "state", self.store.state)
        if sealed is None or sealed.dispatch not in self._sent or sealed.value == self._state_text:
            return
        self._state_text = sealed.value
        try:
            state = record_for(self.ref, sealed.value)
        except Untrusted as exc:
            self._refuse("the run record", self.store.key("state", self.key), str(exc))
            return
        self._save_record(state)

    def _mirror_log(self) -> None:
        lines = self.store.log_lines(self.key, self._log_index)
        for line in lines:
            if isinstance(line, Untrusted):
                self._refuse("a progress line", self.store.key("log", self.key), str(line))
            elif line.dispatch in self._sent:
                self.log.info(line.value)
        self._log_index += len(lines)

    def _mirror_files(self) -> None:
        try:
            names = self.store.file_names(self.key)
        except Untrusted as exc:
            self._refuse("the published files", self.store.key("files", self.key), str(exc))
            return
        for name in names:
            where = self.store.key("file", self.key, name[:200])
            problem = file_name_problem(name)
            try:
                if problem:
                    raise Untrusted(problem)
                self._mirror_file(name)
            except Untrusted as exc:
                self._refuse("a published file", where, str(exc))
            except OSError as exc:  # this home's copy cannot be written (a link put there)
                self._refuse("a published file", where, f"not mirrored: {exc}")

    def _mirror_file(self, name: str) -> None:
        """``runs/<id>/<name>`` as the worker published it: the part it has grown by
        appended, or the whole when it was written anew; either only when the seal of the
        whole (what is here and the new part) holds."""
        store, key = self.store, self.key
        local = self.ref.run_dir(self.home) / name
        have = local.stat().st_size if local.is_file() and not local.is_symlink() else 0
        length = store.file_length(key, name)
        if length == have:
            return
        if length > have and have:  # grown (traces only grow): the new part
            data, seal = store.file_part(key, name, have)
            mac = self._file_mac(name, local, have).copy()
            mac.update(data)
            if Seal.matches(mac, seal):
                with open(local, "ab") as fh:
                    fh.write(data)
                self._file_macs[name] = (have + len(data), mac)
                return
        # written anew (a verify log of a round run again), or new here: the whole
        data, seal = store.file_part(key, name, 0)
        mac = self.seal.file_mac(key, name)
        mac.update(data)
        if not Seal.matches(mac, seal):
            raise Untrusted("its seal does not match (not published by a hero worker)")
        local.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(local, data, follow_link=False)
        self._file_macs[name] = (len(data), mac)

    def _file_mac(self, name: str, local: Path, have: int) -> Any:
        """The HMAC of the first ``have`` bytes of this home's copy of file ``name``."""
        known = self._file_macs.get(name)
        if known is not None and known[0] == have:
            return known[1]
        mac = self.seal.file_mac(self.key, name)
        with open(local, "rb") as fh:
            mac.update(fh.read(min(have, MAX_FILE_BYTES)))
        return mac

    def _checked(self, what: str, kind: str, read: Any) -> Any:
        """``read(key)``, or None (said once in the log) when it is refused."""
        try:
            return read(self.key)
        except Untrusted as exc:
            self._refuse(what, self.store.key(kind, self.key), str(exc))
            return None

    def _done(self) -> dict[str, str]:
        """How the story's last dispatch ended ({} while none has, or when what Redis says
        is not sealed by a worker)."""
        try:
            return self.store.done(self.key)
        except Untrusted as exc:
            self._refuse("the end of a dispatch", self.store.key("done", self.key), str(exc))
            return {}

    def _refuse(self, what: str, where: str, why: str) -> None:
        """A value from Redis that is not used: said once (what, where, why)."""
        if (where, why) in self._refused:
            return
        self._refused.add((where, why))
        self.log.warning("refused from redis", what=what, where=where, reason=why[:300])

    def _worker_refused(self) -> None:
        """What a worker said when it refused the task of the current dispatch (it cannot
        be trusted, so it is only shown: the story is sent again)."""
        try:
            note = json.loads(self.store.refusal(self.key) or "{}")
        except (ValueError, Untrusted):
            return
        if not isinstance(note, dict) or note.get("dispatch") not in self._sent:
            return
        self.log.warning(
            "a worker refused the story",
            worker=" ".join(str(note.get("worker"))[:100].split()),
            reason=" ".join(str(note.get("reason"))[:500].split()),
        )

    def _save_record(self, state: RunState) -> None:
        """The record a worker published, checked to be this story's (record_for): saved
        under this story's own paths, and the story file moved to done/ when it passed."""
        state.story_path = str(self.path)
        if state.status == Status.PASSED:  # as the pipeline does: record first, then move
            state.story_path = str(done_path_for(self.home, self.path, self.ref))
            save_state(self.home, state)
            move_story_file(self.path, Path(state.story_path))
            self.path = Path(state.story_path)
        else:
            save_state(self.home, state)
        if self.on_record is not None:
            self.on_record(state)

    def _ended(self, done: dict[str, str]) -> RunState | None:
        """The story's record once a dispatch of it is over; None when it only stopped on
        its worker (a worker shutting down) and was sent on to another one."""
        self._mirror()
        try:
            state = load_state(self.home, self.ref)
        except StateError:
            state = None
        if state is None:
            state = RunState(id=self.ref.id, plan=self.ref.plan, status=Status.ERROR)
            state.error = f"worker {done.get('worker')} ended the story ({done.get('status')})"
        # the ending is here now: its worker, which kept it published (a broker restart
        # would have lost it, and the story seemed lost), may let go
        self.store.mark_mirrored(self.key, done["dispatch"])
        if state.status == Status.INTERRUPTED and state.outage:
            # paused on its model's provider: the dispatcher holds it until the provider
            # is back (hero.llm.breaker), then sends it again; no other worker would do better
            self.log.info("paused on its worker", provider=state.outage.get("provider", "")[:100])
            self._fetch_branch(state)
            self.store.forget(self.key)
            # its next run is a new dispatch: the one that paused is not to be followed
            # again (it would end at once, paused, without asking the model anything)
            self.store.redis.delete(self.store.key("dispatch", self.key))
            return state
        if state.status not in TERMINAL:
            # stopped on its worker (a worker shutting down): send it on to another one
            self.log.info("stopped on its worker", status=state.status.value)
            self._send()
            return None
        self._fetch_branch(state)
        self.store.forget(self.key)
        self._learn(state)
        return state

    def _learn(self, state: RunState) -> None:
        """The memory lives with the coordinator: it learns from the record the worker
        published, once the story has ended (the branch fetched: the recap's files)."""
        from hero.roles.learner import learn_story

        if state.finished_at is None:
            return  # a record made up here has no ending of a run's own
        learn_story(
            state,
            self.story,
            self.config,
            cancel=self.cancel,
            say=lambda m: self.log.warning(m[:500]),
            note=lambda m: self.log.info(m[:500]),
        )

    def _fetch_branch(self, state: RunState) -> None:
        """The story branch from the remote into this home's repository, as with the local
        engine (its plan's branch and `git log` need it here)."""
        if not state.head_sha:
            return
        branch = self.ref.branch
        remote = self.remote
        try:
            git(
                self.repo.path,
                "fetch",
                "--quiet",
                "--",
                remote,
                f"+refs/heads/{branch}:refs/heads/{branch}",
                timeout_s=600,
            )
        except GitError as exc:
            self.log.warning("branch not fetched", branch=branch, error=str(exc)[:300])


#: The client libraries between hero and the broker.
BROKER_CLIENTS = ("kombu", "amqp", "celery", "redis", "vine")


def _broker_error(exc: BaseException) -> bool:
    """Whether ``exc`` says Redis or the broker is away, or came from inside the broker's
    client libraries (then wait and look again). Those also fail with Python's own
    exceptions (an AttributeError, a KeyError from a connection torn down under another
    thread): where it was raised says whose it is, not its type."""
    import redis.exceptions

    if isinstance(exc, ConnectionError | TimeoutError | redis.exceptions.RedisError):
        return True
    if type(exc).__module__.split(".")[0] in BROKER_CLIENTS:
        return True
    innermost = None
    tb = exc.__traceback__
    while tb is not None:
        innermost, tb = tb.tb_frame, tb.tb_next
    if innermost is None:
        return False
    module = str(innermost.f_globals.get("__name__", ""))
    return module.split(".")[0] in BROKER_CLIENTS


def _current_branch(repo: TargetRepo) -> str:
    try:
        return repo.current_branch()
    except GitError:
        return ""


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None
