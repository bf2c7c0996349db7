"""``hero worker``: a Celery worker that runs stories sent by a coordinator (``hero watch``
with ``engine: celery``).

A worker keeps, in its work folder, a clone of ``target_remote`` (``repo/``) and a hero
home of its own (``home/``: worktrees, run records, traces). For each story it is sent:

1. it refuses a story sent by another hero version, or when it cannot fetch the remote:
   the story ends in ``error`` naming why, in the coordinator's record and log;
2. it takes the story's lease in Redis (one run per story at a time; a second delivery
   of a story that runs elsewhere returns at once), and renews it while it runs;
3. it lays the story out as the coordinator's record (or, newer, the last worker's
   published one) has it: the record, the current round's trace (so a round stopped
   mid-conversation goes on, see hero.agent.replay), the branch as the remote holds it;
4. it runs the story with the same pipeline as ``hero run``; after each save whose head
   moved it pushes the story branch to the remote, then publishes the record, traces,
   story file and progress lines for the coordinator to mirror (hero.engine.store).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hero import __version__
from hero.config import Config
from hero.engine.app import TASK_NAME
from hero.engine.store import LeaseLost, Store
from hero.errors import Interrupted
from hero.fsio import atomic_write
from hero.git.ops import GitError, TargetRepo, git, push_env
from hero.git.storyrepo import StoryRepo
from hero.names import StoryRef
from hero.redact import Redactor
from hero.state import RunState, Status, load_state, save_state
from hero.story import parse_story

LOG = logging.getLogger("hero.worker")
#: How often a running story's files are looked at for publishing.
PUBLISH_S = 0.25
#: How often its branch is looked at: a commit the worker made reaches the remote within it.
TIP_CHECK_S = 1.0
#: Where a worker's clone keeps the remote's branches (``refs/hero/`` is hero's own).
REMOTE_REFS = "refs/hero/origin/"
REMOTE_REFSPEC = f"+refs/heads/*:{REMOTE_REFS}*"
#: Statuses after which a second delivery has nothing to do.
_ENDED = frozenset({Status.PASSED, Status.SKIPPED})


@dataclass
class Fleet:
    """What every story on this worker shares: its config, work folder and Redis."""

    config: Config  # the worker's own home's config
    workdir: Path
    store: Store
    name: str  # the worker's name, in leases and refusals
    cancels: set[threading.Event] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    repo_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def repo_path(self) -> Path:
        return self.workdir / "repo"

    @property
    def home(self) -> Path:
        return self.workdir / "home"

    def stop_all(self) -> None:
        """The worker shuts down: every story it runs stops (recorded as interrupted, its
        lease released), for the coordinator to send it elsewhere."""
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
    return Fleet(config, workdir, Store(engine.state_url, engine.queue, engine.lease_s), name)


def run_story_task(fleet: Fleet, payload: dict[str, Any]) -> dict[str, str]:
    """The task: run the story ``payload`` describes (see hero.engine.remote.payload)."""
    key = str(payload["key"])
    ref = StoryRef(str(payload.get("plan") or ""), str(payload["id"]))
    if ref.key != key or not ref.valid():
        return {"key": key, "status": "refused", "reason": "not a story key"}
    owner = f"{fleet.name}:{os.getpid()}:{threading.get_ident()}"
    store = fleet.store
    if not store.take(key, owner):
        # this delivery will not run: its pending mark goes (if it is still this one's),
        # so the coordinator sees the story as held, or lost, not as waiting in a queue
        store.clear_pending(key, str(payload.get("dispatch") or ""))
        return {"key": key, "status": "busy", "reason": f"runs on {store.holder(key)}"}
    run = _Run(fleet, payload, ref, owner)
    keeper = threading.Thread(target=run.keep, name=f"lease-{key}", daemon=True)
    keeper.start()  # from the lease on: a slow clone or fetch must not let it lapse
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


class _Run:
    def __init__(self, fleet: Fleet, payload: dict[str, Any], ref: StoryRef, owner: str) -> None:
        self.fleet = fleet
        self.payload = payload
        self.ref = ref
        self.key = ref.key
        self.owner = owner
        self.store = fleet.store
        self.dispatch = str(payload.get("dispatch") or "")
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
        self.redactor = Redactor(fleet.config.secrets)  # errors may quote a remote's URL

    def go(self) -> dict[str, str]:
        store, key = self.store, self.key
        store.clear_pending(key)
        record = store.state(key) or self.payload.get("state")
        if record:
            current = RunState.from_dict(json.loads(record))
            if current.status in _ENDED:
                self._done(current.status.value)
                return {"key": key, "status": current.status.value}
        version = str(self.payload.get("version") or "?")
        if version != __version__:
            return self._refuse(
                record,
                f"worker {self.fleet.name} runs hero {__version__}, the coordinator sent this "
                f"story from hero {version}; run the same hero version on both",
            )
        try:
            repo = self._sync_repo()
        except GitError as exc:
            return self._refuse(
                record,
                f"worker {self.fleet.name} cannot reach target_remote "
                f"{self.fleet.config.engine.target_remote}: {exc}",
            )
        story_path = self._lay_out(record, repo)
        self._laid_out = True
        with self.fleet.lock:
            self.fleet.cancels.add(self.cancel)
        try:
            state = self._run(story_path, repo)
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
        self._done(status)
        return {"key": key, "status": status}

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
            record = self.store.state(self.key) or self.payload.get("state")
            state = (
                RunState.from_dict(json.loads(record))
                if record
                else RunState(id=self.ref.id, plan=self.ref.plan)
            )
        state.status = Status.ERROR
        state.phase = ""
        state.error = self.redactor.redact(" ".join(reason.split()))
        state.finished_at = time.time()
        save_state(self.home, state, self.redactor)
        try:
            self.store.put_state(self.key, self.owner, json.dumps(state.to_dict(), indent=2))
            self.store.push_log(self.key, self.owner, f"{self.key}: error: {state.error}")
        except LeaseLost:
            self._lose()
        return Status.ERROR.value

    # -- refusing ------------------------------------------------------------------------

    def _refuse(self, record: str | None, reason: str) -> dict[str, str]:
        """The story ends in error with ``reason``, on the coordinator's record and log."""
        state = (
            RunState.from_dict(json.loads(record))
            if record
            else RunState(id=self.ref.id, plan=self.ref.plan)
        )
        state.status = Status.ERROR
        state.phase = ""
        state.error = reason = self.redactor.redact(reason)
        state.finished_at = time.time()
        try:
            self.store.push_log(self.key, self.owner, f"{self.key}: refused: {reason}")
            self.store.put_state(self.key, self.owner, json.dumps(state.to_dict(), indent=2))
        except LeaseLost:
            pass
        self._done(Status.ERROR.value)
        return {"key": self.key, "status": "refused", "reason": reason}

    def _done(self, status: str) -> None:
        if self.lost.is_set():
            return
        try:
            self.store.set_done(self.key, self.owner, self.dispatch, status, self.fleet.name)
        except LeaseLost:
            self._lose()

    # -- laying the story out --------------------------------------------------------------

    def _sync_repo(self) -> TargetRepo:
        """The clone of target_remote, fetched now (every branch, as the remote's)."""
        remote = self.fleet.config.engine.target_remote
        path = self.fleet.repo_path
        with self.fleet.repo_lock:
            if not (path / ".git").exists():
                if path.exists():
                    shutil.rmtree(path)
                path.parent.mkdir(parents=True, exist_ok=True)
                git(path.parent, "clone", "--quiet", "--", remote, str(path), timeout_s=600)
                # the remote's branches under refs/hero/origin/: hero's own namespace, which
                # the ref guard of the stories running here leaves alone (a fetch or a push
                # for one story must not look like another story's worker moving refs)
                git(path, "config", "--replace-all", "remote.origin.fetch", REMOTE_REFSPEC)
                for ref in git(path, "for-each-ref", "--format=%(refname)", "refs/remotes").split():
                    git(path, "update-ref", "--no-deref", "-d", ref, check=False)
            git(path, "fetch", "--quiet", "--prune", "origin", timeout_s=600)
        return TargetRepo(path)

    def _lay_out(self, record: str | None, repo: TargetRepo) -> Path:
        """The story's file, record, current round's trace, its dependencies' records and
        its branch, as the coordinator (or the last worker) left them; returns the file."""
        home, ref, payload = self.home, self.ref, self.payload
        inbox = home / "inbox" / ref.plan if ref.plan else home / "inbox"
        inbox.mkdir(parents=True, exist_ok=True)
        name = Path(str(payload.get("file_name") or f"{ref.id}.md")).name
        story_path = inbox / name
        text = self.store.story_text(self.key) or str(payload.get("story_text") or "")
        if story_path.is_symlink():  # a link left here is never written through
            story_path.unlink()
        atomic_write(story_path, text.encode("utf-8"), follow_link=False)
        for dep_key, dep_record in (payload.get("deps") or {}).items():
            dep = RunState.from_dict(json.loads(dep_record))
            if StoryRef(dep.plan, dep.id).key == dep_key:
                save_state(home, dep)
        run_dir = ref.run_dir(home)
        if run_dir.exists():  # an earlier run of it here: the record decides, not leftovers
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        files = {str(n): str(c).encode("utf-8") for n, c in (payload.get("files") or {}).items()}
        published = set(self.store.file_names(self.key))
        for fname in published:  # what the last worker published is newer than the payload
            files[fname] = self.store.file_bytes(self.key, fname, 0)
        for fname, data in files.items():
            if "/" in fname or fname.startswith(".") or not fname:
                continue
            (run_dir / fname).write_bytes(data)
            # a file the coordinator sent is published whole on the first pass
            self._published[fname] = len(data) if fname in published else 0
        state_file = ref.state_path(home)
        if record:
            state = RunState.from_dict(json.loads(record))
            state.story_path = str(story_path)
            state.worktree = str(ref.worktree(home))
            save_state(home, state)
        elif state_file.exists():
            state_file.unlink()
        self._branch_from_remote(repo)
        return story_path

    def _branch_from_remote(self, repo: TargetRepo) -> None:
        """The story branch here is the remote's: a story repository or branch an earlier
        run left on this worker is dropped first (the pipeline lays the story's repository
        out anew from the branch, as the local engine does)."""
        branch = self.ref.branch
        worktree = self.ref.worktree(self.home)
        with self.fleet.repo_lock:
            if os.path.lexists(worktree):
                StoryRepo(repo, worktree, branch).remove()
            remote_sha = git(
                repo.path,
                "rev-parse",
                "--verify",
                "--quiet",
                f"{REMOTE_REFS}{branch}",
                check=False,
            ).strip()
            self._pushed_head = remote_sha  # what a push of this run may replace
            if remote_sha:
                git(repo.path, "branch", "--force", "--no-track", branch, remote_sha)
            else:
                git(repo.path, "branch", "--delete", "--force", branch, check=False)

    # -- running ----------------------------------------------------------------------------

    def _run(self, story_path: Path, repo: TargetRepo) -> RunState | None:
        from hero.llm import LlmClient
        from hero.pipeline import StoryRun

        story = replace(parse_story(story_path), plan=self.ref.plan)
        # a base named as the coordinator's repository names it, as the remote has it now
        base = str(self.payload.get("base_ref") or "")
        target_base = self.fleet.config.target_base_ref
        if (
            base
            and git(
                repo.path, "rev-parse", "--verify", "--quiet", f"{REMOTE_REFS}{base}", check=False
            ).strip()
        ):
            target_base = f"{REMOTE_REFS}{base}"
            if story.base_ref:
                story = replace(story, base_ref=target_base)
        config = replace(
            self.fleet.config, home=self.home, target_repo=repo.path, target_base_ref=target_base
        )

        def progress(message: str) -> None:
            try:
                self.store.push_log(self.key, self.owner, message)
            except LeaseLost:
                self._lose()
            except Exception:  # noqa: BLE001 - a broker hiccup must not end the story
                pass

        worker = LlmClient(config.role("worker"), config.llm, cancel=self.cancel)
        reviewer = LlmClient(config.role("reviewer"), config.llm, cancel=self.cancel)
        run = StoryRun(story, config, worker, reviewer, repo, progress, self.cancel)
        run.on_save = self._saved
        publisher = threading.Thread(
            target=self._publishing, name=f"publish-{self.key}", daemon=True
        )
        publisher.start()
        try:
            return run.run()
        except (Interrupted, KeyboardInterrupt):
            return load_state(self.home, self.ref)
        finally:
            self._publishing_on.set()
            publisher.join(30)

    def keep(self) -> None:
        """Renew the lease every third of it (taking it again if a broker that lost its
        data dropped it). Stop the story if another worker holds it, or if no renewal
        got through for a whole lease: the coordinator may have sent it elsewhere."""
        every = self.store.lease_ms / 3000
        renewed = time.monotonic()
        while not self._stop_keeping.wait(every):
            try:
                outcome = self.store.renew(self.key, self.owner)
            except Exception:  # noqa: BLE001 - Redis away: try again, for a lease at most
                if time.monotonic() - renewed >= self.store.lease_ms / 1000:
                    LOG.warning("%s: no lease renewal for a whole lease: stopping", self.key)
                    self._lose()
                    return
                continue
            renewed = time.monotonic()
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
            if text and text != self._state_text:
                state = RunState.from_dict(json.loads(text))
                tip = self._branch_tip()
                if tip and tip != self._pushed_head:
                    self._push(tip)
                story_text = _read(Path(state.story_path)) if state.story_path else None
                if story_text is not None and story_text != self._story_text:
                    store.put_story(key, self.owner, story_text)
                    self._story_text = story_text
                store.put_state(key, self.owner, text)
                self._state_text = text
            elif final and text:
                store.put_state(key, self.owner, text)
        except LeaseLost:
            self._lose()

    def _publish_files(self, files: list[Path]) -> None:
        for path in files:
            name = path.name
            try:
                data = path.read_bytes()
            except OSError:
                continue
            done = self._published.get(name, 0)
            if len(data) == done:
                continue
            if len(data) > done and self.store.append_file(
                self.key, self.owner, name, data[done:], done
            ):
                self._published[name] = len(data)
                continue
            self.store.set_file(self.key, self.owner, name, data)  # rewritten, or lost
            self._published[name] = len(data)

    def _branch_tip(self) -> str:
        return git(
            self.fleet.repo_path,
            "rev-parse",
            "--verify",
            "--quiet",
            f"refs/heads/{self.ref.branch}",
            check=False,
        ).strip()

    def _push(self, head: str) -> None:
        """The story branch to the remote, at ``head`` (forced: the branch is hero's)."""
        branch = self.ref.branch
        repo = self.fleet.repo_path
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

    def run_story(payload: dict[str, Any]) -> dict[str, str]:
        return run_story_task(fleet_of(), payload)

    app.task(name=TASK_NAME)(run_story)
