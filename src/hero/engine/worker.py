"""``hero worker``: a Celery worker that runs stories sent by a coordinator (``hero watch``
with ``engine: celery``).

A worker keeps, in its work folder, a clone of ``target_remote`` (``repo/``) and a hero
home of its own (``home/``: worktrees, run records, traces). For each story it is sent:

1. it checks the task's authentication (hero.engine.seal) before anything else, and
   refuses a task that is not a coordinator's (no valid HMAC with the engine key, or sent
   more than a day ago): no model call, no git, no file; the reason is in the worker's log
   and, for the coordinator's, in ``P:refused:<story>``. A task it cannot trust cannot end
   a story either: the coordinator sends the story again;
2. it takes the story's lease in Redis (one run per story at a time; a second delivery
   of a story that runs elsewhere returns at once), and renews it while it runs;
3. it runs no dispatch the coordinator has replaced since (``P:dispatch:K`` names another)
   or whose story has ended since it was sent (``P:done:K``): a task delivered twice, or
   replayed, does not run the story twice;
4. it refuses a story sent by another hero version, or when it cannot fetch the remote:
   the story ends in ``error`` naming why, in the coordinator's record and log;
5. it lays the story out as the coordinator's record (or, newer, the last worker's
   published one) has it: the record, the current round's trace (so a round stopped
   mid-conversation goes on, see hero.agent.replay), the branch as the remote holds it.
   A `hero bench` task-run names a repository of its own instead of target_remote, and
   its configuration's overrides (hero.engine.checkout).
   Everything read from the task or from Redis is checked first (hero.engine.trust): the
   story's key by the story-id rule, records against the story they claim to be,
   dependencies' keys, file names, sizes;
6. it runs the story with the same pipeline as ``hero run``; after each save whose head
   moved it pushes the story branch to the remote, then publishes the record, traces,
   story file and progress lines, sealed, for the coordinator to mirror (hero.engine.store).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hero import __version__
from hero.config.home import Config
from hero.engine.app import TASK_NAME
from hero.engine.checkout import REMOTE_REFS, BenchRun, bench_config, bench_of, sync_clone
from hero.engine.seal import Seal
from hero.engine.store import LeaseLost, Store
from hero.engine.trust import (
    Contents,
    Task,
    Untrusted,
    contents,
    dispatch_of,
    file_name_problem,
    record_for,
    story_ref,
    task_of,
)
from hero.engine.warm import Warmed, adopt_staged, warm_up
from hero.engine.wip import WipKeeper
from hero.errors import HeroError, Interrupted
from hero.fsio import atomic_write
from hero.git.ops import GitError, TargetRepo, branch_tip, commit_of, git
from hero.git.remote import push_env
from hero.git.storyrepo import StoryRepo
from hero.llm.models import story_config
from hero.redact import Redactor
from hero.run.housekeeping import Housekeeper, Rules
from hero.state import RunState, Status, load_state, save_state
from hero.story.format import parse_story
from hero.story.record import StoryError

LOG = logging.getLogger("hero.worker")
#: How often a running story's files are looked at for publishing.
PUBLISH_S = 0.25
#: How often its branch is looked at: a commit the worker made reaches the remote within it.
TIP_CHECK_S = 1.0
#: Statuses after which a second delivery has nothing to do.
_ENDED = frozenset({Status.PASSED, Status.SKIPPED})
#: How soon a lease renewal that failed (Redis away) is tried again.
RENEW_RETRY_S = 0.2
#: How often a run that has ended looks whether the coordinator has mirrored its ending.
MIRRORED_POLL_S = 0.1
#: For how many leases at most it waits for that (a coordinator that is down never says).
MIRRORED_WAIT_LEASES = 2


@dataclass
class Fleet:
    """What every story on this worker shares: its config, work folder and Redis."""

    config: Config  # the worker's own home's config
    workdir: Path
    store: Store  # sealing and checking with ``seal``
    name: str  # the worker's name, in leases and refusals
    seal: Seal
    cancels: set[threading.Event] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    repo_lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    # held while housekeeping runs, which only starts when no story runs here (``active``):
    # it takes finished stories' locks, which a story sent again must find free
    housekeeping: threading.Lock = field(default_factory=threading.Lock)
    active: int = 0  # stories running on this worker now (under ``lock``)

    @property
    def repo_path(self) -> Path:
        return self.workdir / "repo"

    @property
    def home(self) -> Path:
        return self.workdir / "home"

    def stop_all(self) -> None:
        """The worker shuts down: every story it runs stops (recorded as interrupted, its
        lease released), for the coordinator to send it elsewhere."""
        self.stopping.set()
        with self.lock:
            for cancel in self.cancels:
                cancel.set()


def make_fleet(config: Config, workdir: Path, name: str) -> Fleet:
    engine = config.engine
    workdir = workdir.expanduser().resolve()
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    prompts = config.home / "prompts"
    if prompts.is_dir():  # the home's prompt overrides serve the stories run here
        shutil.copytree(prompts, workdir / "home" / "prompts", dirs_exist_ok=True)
    seal = Seal(engine.key)
    store = Store(engine.state_url, engine.queue, engine.lease_s, seal)
    return Fleet(config, workdir, store, name, seal)


def run_story_task(fleet: Fleet, body: object, task_id: str = "") -> dict[str, str]:
    """The task: run the story ``body`` describes (see hero.engine.remote.payload), once its
    authentication is checked: before any model call, git command or file written."""
    try:
        task = task_of(fleet.seal.check_task(body))
    except Untrusted as exc:
        return refuse_task(fleet, body, task_id, str(exc))
    key = task.key
    owner = f"{fleet.name}:{os.getpid()}:{threading.get_ident()}"
    store = fleet.store
    if not store.take(key, owner):
        # this delivery will not run: its pending mark goes (if it is still this one's),
        # so the coordinator sees the story as held, or lost, not as waiting in a queue
        store.clear_pending(key, task.dispatch)
        return {"key": key, "status": "busy", "reason": f"runs on {store.holder(key)}"}
    run = _Run(fleet, task, owner)
    keeper = threading.Thread(target=run.keep, name=f"lease-{key}", daemon=True)
    keeper.start()  # from the lease on: a slow clone or fetch must not let it lapse
    with fleet.housekeeping:  # a housekeeping under way ends first
        with fleet.lock:
            fleet.active += 1
    try:
        return run.go()
    except Exception as exc:  # noqa: BLE001 - any failure ends the story once, recorded
        # a bug, or a failure hero could not foresee: the story ends in error here, once,
        # rather than coming back to some worker every lease for ever
        reason = f"worker {fleet.name} failed: {type(exc).__name__}: {exc}"
        LOG.error("%s: %s", key, run.redactor.redact(reason))
        return {"key": key, "status": run.fail(reason)}
    finally:
        run.stop_keeping()
        store.release(key, owner)
        with fleet.lock:
            fleet.active -= 1
        housekeep(fleet)


def housekeep(fleet: Fleet) -> None:
    """After the last story running here ends: the housekeeping settings applied to this
    worker's home (see hero.run.housekeeping); never raises. A story's repository here holds
    nothing to keep: its branch was pushed, and each run lays it out anew from the
    remote."""
    if not fleet.repo_path.is_dir() or not fleet.housekeeping.acquire(blocking=False):
        return
    try:
        with fleet.lock:
            if fleet.active:  # another story runs here: the last one to end housekeeps
                return
        config = replace(fleet.config, home=fleet.home, target_repo=fleet.repo_path)
        keeper = Housekeeper(config, TargetRepo(fleet.repo_path), keep_work=False)
        outcome = keeper.run(Rules.automatic(config.housekeeping))
        if outcome.removed:
            LOG.info(
                "housekeeping: removed %d item(s), %d bytes freed",
                len(outcome.removed),
                outcome.freed,
            )
    except Exception as exc:  # noqa: BLE001 - housekeeping must not stop the worker
        LOG.error("housekeeping failed: %s: %s", type(exc).__name__, exc)
    finally:
        fleet.housekeeping.release()


def refuse_task(fleet: Fleet, body: object, task_id: str, reason: str) -> dict[str, str]:
    """A task that is not to be trusted: said in the worker's log, and, for the story it
    claims (when that is a story's name at all), in a note the coordinator reads and by
    dropping its pending mark, so the coordinator sends the story again. Nothing else: its
    payload names no path, no record, no story this worker acts on."""
    claimed = body.get("key") if isinstance(body, dict) else None
    dispatch = body.get("dispatch") if isinstance(body, dict) else None
    shown = repr(claimed)[:120]
    LOG.warning("refused task %s (story %s): %s", task_id[:100] or "?", shown, reason)
    try:
        ref = story_ref(claimed)
        dispatch = dispatch_of(dispatch)
    except Untrusted:
        return {"status": "refused", "reason": reason}
    note = {"dispatch": dispatch, "worker": fleet.name, "task": task_id[:100], "reason": reason}
    try:
        fleet.store.clear_pending(ref.key, dispatch)
        fleet.store.note_refusal(ref.key, json.dumps(note))
    except Exception as exc:  # noqa: BLE001 - Redis away: the worker's log has said it
        LOG.warning("%s: could not note the refusal: %s", ref.key, type(exc).__name__)
    return {"key": ref.key, "status": "refused", "reason": reason}


class _Run:
    def __init__(self, fleet: Fleet, task: Task, owner: str) -> None:
        self.fleet = fleet
        self.task = task
        self.ref = task.ref
        self.key = task.key
        self.owner = owner
        self.store = fleet.store
        self.dispatch = task.dispatch
        self.record: RunState | None = None  # the story's record as sent or last published
        self.cancel = threading.Event()
        self.lost = threading.Event()
        self.home = fleet.home
        self._published: dict[str, int] = {}  # file name -> length published
        self._state_text = ""
        self._story_text = ""
        self._pushed_head = ""
        self._tip_checked = 0.0
        self._publish_lock = threading.Lock()
        self._last_problem = ""
        self._stop_keeping = threading.Event()
        self._publishing_on = threading.Event()
        self._laid_out = False
        self._last_state = ""  # the record as last published
        self.redactor = Redactor(fleet.config.secrets)  # errors may quote a remote's URL
        #: a bench task-run's own repository and overrides (hero.engine.checkout), checked in go
        self.bench: BenchRun | None = None
        self.repo_path = fleet.repo_path
        if task.payload.get("bench") is not None:
            self.repo_path = fleet.workdir / "bench" / self.key.replace("/", "--") / "repo"
        #: the worktree's uncommitted work, kept on the remote after each turn
        self.wip = WipKeeper(
            fleet.store,
            self.key,
            self.ref.branch,
            owner,
            self.dispatch,
            self.repo_path,
            fleet.repo_lock,
            self.redactor,
        )

    def go(self) -> dict[str, str]:
        store, key = self.store, self.key
        stale = self._superseded()
        if stale:
            # not run, and nothing written but its own pending mark dropped: the dispatch
            # the coordinator follows now is another one
            store.clear_pending(key, self.dispatch)
            LOG.info("%s: dispatch %s not run: %s", key, self.dispatch, stale)
            return {"key": key, "status": "superseded", "reason": stale}
        store.clear_pending(key)
        self.record = self._published_record() or self._sent_record()
        if self.record is not None and self.record.status in _ENDED:
            self._done(self.record.status.value)
            return {"key": key, "status": self.record.status.value}
        if self.task.version != __version__:
            return self._refuse(
                f"worker {self.fleet.name} runs hero {__version__}, the coordinator sent this "
                f"story from hero {self.task.version[:40]}; run the same hero version on both",
            )
        try:
            sent = contents(self.task)
            self.bench = bench_of(self.task.payload)
        except Untrusted as exc:
            return self._refuse(f"worker {self.fleet.name} refused the task: {exc}")
        try:
            repo = self._sync_repo()
        except GitError as exc:
            return self._refuse(
                f"worker {self.fleet.name} cannot reach {self._remote_name()}: {exc}",
            )
        story_path = self._lay_out(sent, repo)
        self._laid_out = True
        with self.fleet.lock:
            self.fleet.cancels.add(self.cancel)
        try:
            state = self._run(story_path, repo, sent)
        finally:
            with self.fleet.lock:
                self.fleet.cancels.discard(self.cancel)
        status = state.status.value if state is not None else Status.INTERRUPTED.value
        if self.lost.is_set():
            return {"key": key, "status": "lost"}
        try:
            self._publish(final=True)
        except GitError as exc:  # the branch did not reach the remote: not an ending to trust
            status = self._record_error(f"could not push {self.ref.branch} to target_remote: {exc}")
        if self.lost.is_set():  # another worker has the story now: its ending is its own
            return {"key": key, "status": "lost"}
        if status in _ENDED:  # no round of it will go on: its snapshot is of no use
            self.wip.drop()
        self._done(status)
        return {"key": key, "status": status}

    def _superseded(self) -> str | None:
        """Why this dispatch is not to run, or None: the coordinator has sent the story
        again since (``P:dispatch:K`` names another one), or a dispatch of it ended after
        this one was sent (the coordinator clears ``P:done:K`` as it sends: an end there is
        one it takes). Read under the lease: a run that ends sets its end before it lets
        the lease go."""
        try:
            current = self.store.short("dispatch", self.key)
        except Untrusted as exc:  # planted with another type: no word from the coordinator
            LOG.warning("%s: refused %s", self.key, exc)
            current = None
        if current and current != self.dispatch:
            return f"the coordinator has sent the story again since (dispatch {current[:40]})"
        try:
            done = self.store.done(self.key)
        except Untrusted as exc:
            LOG.warning("%s: refused %s: %s", self.key, self.store.key("done", self.key), exc)
            return None
        if not done:
            return None
        if done["dispatch"] == self.dispatch:
            return f"this dispatch has already run to its end ({done.get('status')})"
        return f"dispatch {done['dispatch']} of the story ended ({done.get('status')}) since"

    def _published_record(self) -> RunState | None:
        """The record the last worker of the story published (newer than the one sent),
        when it is sealed and the story's; None otherwise, said in the log."""
        where = self.store.key("state", self.key)
        try:
            sealed = self.store.state(self.key)
            return None if sealed is None else record_for(self.ref, sealed.value)
        except Untrusted as exc:
            LOG.warning("%s: refused %s (the record sent is used): %s", self.key, where, exc)
            return None

    def _sent_record(self) -> RunState | None:
        """The record the coordinator sent, when it is one of this story (a task of another
        hero version may carry another shape: then none)."""
        try:
            state = self.task.payload.get("state")
            return None if state is None else record_for(self.ref, state, "state")
        except Untrusted:
            return None

    def fail(self, reason: str) -> str:
        """End the story in error with ``reason`` and say the dispatch is over."""
        if self.lost.is_set():
            return "lost"
        status = Status.ERROR.value
        try:
            status = self._record_error(reason)
        except Exception:  # nothing more can be recorded: the ending still is
            LOG.exception("%s: could not record the failure", self.key)
        self._done(status)
        return status

    def _record_error(self, reason: str) -> str:
        """End the story in error with ``reason`` (its record here and published)."""
        state = load_state(self.home, self.ref) if self._laid_out else None
        if state is None:  # before the story was laid out here: the record as sent
            state = self.record or RunState(id=self.ref.id, plan=self.ref.plan)
        state.status = Status.ERROR
        state.phase = ""
        state.error = self.redactor.redact(" ".join(reason.split()))
        state.finished_at = time.time()
        save_state(self.home, state, self.redactor)
        try:
            self._put_state(json.dumps(state.to_dict(), indent=2))
            self._push_log(f"{self.key}: error: {state.error}")
        except LeaseLost:
            self._lose()
        return Status.ERROR.value

    # -- refusing ------------------------------------------------------------------------

    def _refuse(self, reason: str) -> dict[str, str]:
        """The story ends in error with ``reason``, on the coordinator's record and log."""
        state = self.record or RunState(id=self.ref.id, plan=self.ref.plan)
        state.status = Status.ERROR
        state.phase = ""
        state.error = reason = self.redactor.redact(reason)
        state.finished_at = time.time()
        try:
            self._push_log(f"{self.key}: refused: {reason}")
            self._put_state(json.dumps(state.to_dict(), indent=2))
        except LeaseLost:
            pass
        self._done(Status.ERROR.value)
        return {"key": self.key, "status": "refused", "reason": reason}

    def _done(self, status: str) -> None:
        """The dispatch is over (``status``), said in Redis; then kept so, lease and all,
        until the coordinator has mirrored it."""
        if self.lost.is_set():
            return
        try:
            self.store.set_done(self.key, self.owner, self.dispatch, status, self.fleet.name)
        except LeaseLost:
            self._lose()
            return
        self._until_mirrored(status)

    def _until_mirrored(self, status: str) -> None:
        """Hold the lease, and the run's ending published, until the coordinator says it has
        mirrored that ending (``P:mirrored:K`` names this dispatch), or for
        MIRRORED_WAIT_LEASES leases at most (a coordinator that is down says nothing; the
        next one finds the ending in Redis).

        Why: the ending lives only in Redis until the coordinator's next look. A broker
        that lost its data in between (a restart) would leave the story with no lease, no
        pending mark and no end: lost, to the coordinator, which would send it again, and
        the next worker would redo its last step (the checks, the review: model calls).
        Held, the lease is taken again at its next renewal, and the ending published again
        here, before the coordinator's grace runs out."""
        deadline = time.monotonic() + MIRRORED_WAIT_LEASES * self.store.lease_ms / 1000
        while not self.lost.is_set() and not self.fleet.stopping.is_set():
            try:
                if self.store.short("mirrored", self.key) == self.dispatch:
                    return
                if not self._ending_published():
                    LOG.info("%s: the run's ending vanished from Redis: published again", self.key)
                    self._republish(status)
            except LeaseLost:
                self._lose()
                return
            except Exception as exc:  # noqa: BLE001 - Redis away: look again, until the deadline
                LOG.debug("%s: waiting for the coordinator: %s", self.key, type(exc).__name__)
            if time.monotonic() >= deadline:
                LOG.info("%s: the coordinator has not mirrored the ending yet: let go", self.key)
                return
            time.sleep(MIRRORED_POLL_S)

    def _ending_published(self) -> bool:
        try:
            return self.store.done(self.key).get("dispatch") == self.dispatch
        except Untrusted:
            return False

    def _republish(self, status: str) -> None:
        """The record, story file and files, then the ending, published again whole (a
        broker that lost its data lost them too)."""
        with self._publish_lock:
            self._published = dict.fromkeys(self._published, 0)
            self._state_text = self._story_text = ""
        if self._laid_out:
            self._publish(final=True)
        elif self._last_state:
            self._put_state(self._last_state)
        self.store.set_done(self.key, self.owner, self.dispatch, status, self.fleet.name)

    def _put_state(self, text: str) -> None:
        self.store.put_state(self.key, self.owner, self.dispatch, text)
        self._last_state = text

    def _push_log(self, line: str) -> None:
        self.store.push_log(self.key, self.owner, self.dispatch, line)

    # -- laying the story out --------------------------------------------------------------

    def _remote_name(self) -> str:
        if self.bench is not None:
            return f"the bench's repository {self.bench.remote}"
        return f"target_remote {self.fleet.config.engine.target_remote}"

    def _sync_repo(self) -> TargetRepo:
        """The clone of target_remote, fetched now (every branch, as the remote's); for a
        bench task-run, its own repository cloned fresh (hero.engine.checkout)."""
        if self.bench is not None:
            with self.fleet.repo_lock:
                sync_clone(self.bench.remote, self.repo_path, fresh=True)
            return TargetRepo(self.repo_path)
        with self.fleet.repo_lock:
            adopt_staged(self.fleet)  # the warm-up's clone, now that a story is trusted
            if sync_clone(self.fleet.config.engine.target_remote, self.repo_path):
                LOG.info("%s: cloned target_remote (the warm-up had not)", self.key)
        return TargetRepo(self.repo_path)

    def _lay_out(self, sent: Contents, repo: TargetRepo) -> Path:
        """The story's file, record, current round's trace, its dependencies' records and
        its branch, as the coordinator (or the last worker) left them; returns the file.
        Every name here was checked (hero.engine.trust) before it became a path."""
        home, ref = self.home, self.ref
        inbox = home / "inbox" / ref.plan if ref.plan else home / "inbox"
        inbox.mkdir(parents=True, exist_ok=True)
        story_path = inbox / sent.file_name
        text = self._published_story() or sent.story_text
        if story_path.is_symlink():  # a link left here is never written through
            story_path.unlink()
        atomic_write(story_path, text.encode("utf-8"), follow_link=False)
        for dep in sent.deps:  # each checked against the key it was sent under
            save_state(home, dep)
        run_dir = ref.run_dir(home)
        if run_dir.exists():  # an earlier run of it here: the record decides, not leftovers
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        files = dict(sent.files)
        published = self._published_files()
        files.update(published)  # what the last worker published is newer than the payload
        for fname, data in files.items():
            (run_dir / fname).write_bytes(data)
            # a file the coordinator sent is published whole on the first pass
            self._published[fname] = len(data) if fname in published else 0
        state_file = ref.state_path(home)
        if self.record is not None:
            state = self.record
            state.story_path = str(story_path)
            state.worktree = str(ref.worktree(home))
            save_state(home, state)
        elif state_file.exists():
            state_file.unlink()
        self._branch_from_remote(repo)
        return story_path

    def _published_story(self) -> str | None:
        """The story file the last worker published, when it is sealed; None otherwise."""
        try:
            sealed = self.store.story_text(self.key)
        except Untrusted as exc:
            LOG.warning(
                "%s: refused the published story file (the one sent is used): %s", self.key, exc
            )
            return None
        return None if sealed is None else sealed.value

    def _published_files(self) -> dict[str, bytes]:
        """The files the last worker published, each sealed and of a plain name; any other
        is left out, said in the log."""
        store, key = self.store, self.key
        found: dict[str, bytes] = {}
        try:
            names = store.file_names(key)
        except Untrusted as exc:
            LOG.warning("%s: refused the published files: %s", key, exc)
            return found
        for name in names:
            where = store.key("file", key, name[:200])
            problem = file_name_problem(name)
            try:
                if problem:
                    raise Untrusted(problem)
                data, seal = store.file_part(key, name, 0)
                mac = self.fleet.seal.file_mac(key, name)
                mac.update(data)
                if not Seal.matches(mac, seal):
                    raise Untrusted("its seal does not match (not published by a hero worker)")
            except Untrusted as exc:
                LOG.warning("%s: refused %s (the copy sent, if any, is used): %s", key, where, exc)
                continue
            found[name] = data
        return found

    def _branch_from_remote(self, repo: TargetRepo) -> None:
        """The story branch here is the remote's: a story repository or branch an earlier
        run left on this worker is dropped first (the pipeline lays the story's repository
        out anew from the branch, as the local engine does)."""
        branch = self.ref.branch
        worktree = self.ref.worktree(self.home)
        with self.fleet.repo_lock:
            if os.path.lexists(worktree):
                StoryRepo(repo, worktree, branch).remove()
            remote_sha = commit_of(repo.path, f"{REMOTE_REFS}{branch}")
            self._pushed_head = remote_sha  # what a push of this run may replace
            if remote_sha:
                git(repo.path, "branch", "--force", "--no-track", branch, remote_sha)
            else:
                git(repo.path, "branch", "--delete", "--force", branch, check=False)

    # -- running ----------------------------------------------------------------------------

    def _run(self, story_path: Path, repo: TargetRepo, sent: Contents) -> RunState | None:
        from hero.llm.client import story_clients
        from hero.memory.recall import Recalled
        from hero.run.pipeline import RunHooks, StoryRun

        base = sent.base_ref
        story = replace(parse_story(story_path), plan=self.ref.plan)
        if story.id != self.ref.id:  # the file sent (or published) is another story's
            raise Untrusted(f"the story file is story {story.id!r}'s, not {self.ref.key}'s")
        # a base named as the coordinator's repository names it, as the remote has it now
        target_base = self.fleet.config.target_base_ref
        if base and commit_of(repo.path, f"{REMOTE_REFS}{base}"):
            target_base = f"{REMOTE_REFS}{base}"
            if story.base_ref:
                story = replace(story, base_ref=target_base)
        config = self.fleet.config
        if self.bench is not None:  # the bench configuration's settings, for this story only
            try:
                derived = self.repo_path.parent / "settings"
                config = bench_config(config, self.bench, derived, self.key)
            except HeroError as exc:
                self._record_error(f"worker {self.fleet.name}: {exc}")
                return load_state(self.home, self.ref)
        config = replace(config, home=self.home, target_repo=repo.path, target_base_ref=target_base)
        # the story's own model: fields, against this worker's providers (hero.llm.models); a
        # `hero run --model` override never comes here: it is not in the story file
        try:
            config = story_config(config, story)
        except StoryError as exc:  # say, a provider it names has no key on this worker
            self._record_error(f"worker {self.fleet.name}: {exc}")
            return load_state(self.home, self.ref)

        def progress(message: str) -> None:
            try:
                self._push_log(message)
            except LeaseLost:
                self._lose()
            except Exception:  # noqa: BLE001 - a broker hiccup must not end the story
                pass

        worker, reviewer = story_clients(config, cancel=self.cancel)
        hooks = RunHooks(
            on_save=lambda _state: self._saved(),
            on_turn_end=self.wip.take,
            on_resume=self.wip.restore,
            # the memory is the coordinator's: what it recalled travels in the task, and this
            # worker's own home (which keeps no memory of the repository) is never read for it
            recalled=Recalled(sent.memory_section, sent.memory_recap),
            learns=False,  # the coordinator keeps the memory and learns from the record
        )
        run = StoryRun(story, config, worker, reviewer, repo, progress, self.cancel, hooks=hooks)
        publisher = threading.Thread(
            target=self._publishing, name=f"publish-{self.key}", daemon=True
        )
        publisher.start()
        try:
            return run.run()
        except (Interrupted, KeyboardInterrupt):
            # stopped mid-turn: the round's commits were brought back (the tip moved), so
            # the work left is snapshotted again, on the new tip, for the next worker
            self.wip.take(run)
            return load_state(self.home, self.ref)
        finally:
            self._publishing_on.set()
            publisher.join(30)

    def keep(self) -> None:
        """Renew the lease every third of it (taking it again if a broker that lost its
        data dropped it). Stop the story if another worker holds it, or if no renewal
        got through for a whole lease: the coordinator may have sent it elsewhere.

        A renewal that fails (Redis away) is tried again within RENEW_RETRY_S, not a third
        of a lease later: a broker back from a restart without its data gets the lease
        again at once, well within the lease the coordinator waits before it takes the
        story for lost and sends it again."""
        every = self.store.lease_ms / 3000
        wait = every
        renewed = time.monotonic()
        while not self._stop_keeping.wait(wait):
            try:
                outcome = self.store.renew(self.key, self.owner)
            except Exception:  # noqa: BLE001 - Redis away: try again, for a lease at most
                if time.monotonic() - renewed >= self.store.lease_ms / 1000:
                    LOG.warning("%s: no lease renewal for a whole lease: stopping", self.key)
                    self._lose()
                    return
                wait = min(every, RENEW_RETRY_S)
                continue
            renewed, wait = time.monotonic(), every
            if outcome == "retaken":
                LOG.info("%s: the lease had vanished from Redis: taken again", self.key)
            if outcome == "lost":
                self._lose()
                return

    def stop_keeping(self) -> None:
        self._stop_keeping.set()

    def _lose(self) -> None:
        """Another worker holds the story now: stop, and write nothing more of it."""
        self.lost.set()
        self.cancel.set()

    def _saved(self) -> None:
        """The pipeline saved the record: publish it (and push the branch) before it goes
        on, so that a step it finished is never done again by the next worker."""
        try:
            self._publish(final=False)
        except Exception as exc:  # noqa: BLE001 - the publisher thread tries again
            LOG.warning("%s: could not publish yet: %s", self.key, self.redactor.redact(str(exc)))

    def _publishing(self) -> None:
        while not self._publishing_on.wait(PUBLISH_S):
            try:
                self._publish(final=False)
            except LeaseLost:
                self._lose()
                return
            except Exception as exc:  # noqa: BLE001 - Redis or git away: the next pass tries again
                said = self.redactor.redact(
                    f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                )
                if said != self._last_problem:
                    self._last_problem = said
                    LOG.warning("%s: could not publish yet: %s", self.key, said)
                continue

    def _publish(self, *, final: bool) -> None:
        """Push the branch if its head moved, then the record, the story file, the files
        (one caller at a time: the publishing thread, the pipeline's saves)."""
        with self._publish_lock:
            self._publish_locked(final=final)

    def _publish_locked(self, *, final: bool) -> None:
        if self.lost.is_set():
            return
        home, ref, store, key = self.home, self.ref, self.store, self.key
        state_file = ref.state_path(home)
        try:
            text = state_file.read_text(encoding="utf-8")
        except OSError:
            text = ""
        files = sorted(p for p in ref.run_dir(home).glob("*") if p.is_file())
        try:
            self._publish_files(files)
            now = time.monotonic()
            if final or now - self._tip_checked >= TIP_CHECK_S:
                # the worker's own commits, mid-turn: on the remote before anything else
                self._tip_checked = now
                tip = self._branch_tip()
                if tip and tip != self._pushed_head:
                    self._push(tip)
            self.wip.publish(self._pushed_head)  # the worktree's snapshot, on the tip pushed
            if text and text != self._state_text:
                state = RunState.from_dict(json.loads(text))
                tip = self._branch_tip()
                if tip and tip != self._pushed_head:
                    self._push(tip)
                story_text = _read(Path(state.story_path)) if state.story_path else None
                if story_text is not None and story_text != self._story_text:
                    store.put_story(key, self.owner, self.dispatch, story_text)
                    self._story_text = story_text
                self._put_state(text)
                self._state_text = text
            elif final and text:
                self._put_state(text)
        except LeaseLost:
            self._lose()

    def _publish_files(self, files: list[Path]) -> None:
        for path in files:
            name = path.name
            if file_name_problem(name):  # not one a reader would take
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            done = self._published.get(name, 0)
            if len(data) == done:
                continue
            seal = self.fleet.seal.seal_file(self.key, name, data)
            if len(data) > done and self.store.append_file(
                self.key, self.owner, name, data[done:], done, seal
            ):
                self._published[name] = len(data)
                continue
            self.store.set_file(self.key, self.owner, name, data, seal)  # rewritten, or lost
            self._published[name] = len(data)

    def _branch_tip(self) -> str:
        return branch_tip(self.repo_path, self.ref.branch)

    def _push(self, head: str) -> None:
        """The story branch to the remote, at ``head`` (forced: the branch is hero's)."""
        branch = self.ref.branch
        repo = self.repo_path
        # forced (the branch is hero's), but only over what this run last saw there: a
        # run that lost its story cannot push over the commits of the run that took it
        try:
            git(
                repo,
                "push",
                "--quiet",
                f"--force-with-lease=refs/heads/{branch}:{self._pushed_head}",
                "origin",
                f"{head}:refs/heads/{branch}",
                env=push_env(repo, "origin"),  # hero's own push, past the workers' refusal
                timeout_s=600,
            )
        except GitError as exc:
            if "stale info" in str(exc) or "rejected" in str(exc):
                self._lose()  # someone else moved the branch: another run has the story
                raise LeaseLost(self.key) from exc
            raise
        self._pushed_head = head


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def worker_name(hostname: str | None) -> str:
    """The worker's name as Celery gives it (``-n w1@%h`` -> ``w1@<host>``)."""
    from celery.utils.nodenames import default_nodename, host_format

    return str(host_format(default_nodename(hostname or None)))


def register(app: Any, fleet_of: Callable[[], Fleet]) -> None:
    """The task on ``app``, running stories on the fleet ``fleet_of`` returns."""

    def run_story(task: Any, *args: Any, **kwargs: Any) -> dict[str, str]:
        task_id = str(getattr(task.request, "id", "") or "")
        if len(args) != 1 or kwargs:  # a task of another shape: not a coordinator's
            reason = "not a story task: expected one argument, the story's payload"
            return refuse_task(fleet_of(), None, task_id, reason)
        return run_story_task(fleet_of(), args[0], task_id)

    app.task(name=TASK_NAME, bind=True)(run_story)


def run_worker(
    config: Config,
    workdir: Path,
    *,
    concurrency: int = 1,
    queues: str | None = None,
    hostname: str | None = None,
    loglevel: str = "INFO",
    celery_args: Sequence[str] = (),
    on_ready: Callable[[Fleet], None] = lambda fleet: None,
    on_warm: Callable[[Warmed], None] = lambda warmed: None,
) -> None:
    """Run a Celery worker for ``config``'s engine until it is stopped: ``concurrency``
    stories at once, taken from ``queues`` (default the engine's queue), its clone and home
    in ``workdir``. ``on_ready`` is called once Celery is ready; at shutdown the stories it
    runs are recorded as interrupted (the coordinator sends them to another worker).
    ``celery_args`` go to ``celery worker`` as they are. Before Celery starts, the worker
    warms up (hero.engine.warm), each step said to ``on_warm``."""
    from celery.signals import worker_ready, worker_shutting_down

    from hero.engine.app import make_app, wake_after_tasks

    app = make_app(config.engine)
    wake_after_tasks()
    fleet = make_fleet(config, workdir, worker_name(hostname))
    register(app, lambda: fleet)
    if not warm_up(fleet, on_warm):
        return  # stopped while it warmed up

    def ready(**_: Any) -> None:
        on_ready(fleet)

    def shutting_down(**_: Any) -> None:
        fleet.stop_all()

    worker_ready.connect(ready, weak=False)
    worker_shutting_down.connect(shutting_down, weak=False)
    argv = [
        "worker",
        "--pool",
        "threads",
        "--concurrency",
        str(concurrency),
        "--queues",
        queues or config.engine.queue,
        "--loglevel",
        loglevel,
        "--prefetch-multiplier",
        "1",
        "--without-gossip",
        "--without-mingle",
    ]
    if hostname:
        argv += ["--hostname", hostname]
    argv += list(celery_args)
    app.worker_main(argv)
