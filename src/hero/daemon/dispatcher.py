"""`hero watch`: take stories from the inbox and run them, at most max_parallel at once.

The dispatcher decides what runs next by the queue rule (:mod:`hero.daemon.queue`: priority,
then age), refuses what cannot run (an invalid story, a duplicate id) with a reason the user
can read, and stops cleanly. At start-up it looks at the whole backlog before it starts
anything, so a restart takes the stories in the same order a fresh start would. It does
not run rounds itself: each story runs in a thread through ``pipeline.StoryRun``, which
saves its state after every step. That state is what makes a restart after ``kill -9``
safe: a story found ``running`` or ``interrupted`` is resumed from its last finished round.

No input stops the daemon. Whatever goes wrong with one file or one story (it cannot be
read, it is no story, it cannot start, its run raises) ends with that file refused or that
story in ``error``, logged in one line; it is not tried again until its file changes or
``hero retry``. Only an unexpected exception (a bug) also writes a traceback, once, to
``runs/<id>/error.log`` (or ``runs/rejected/<file>.error.log`` when there is no id).

A model provider that fails every story alike is no story's failure: a story that met the
outage comes back ``interrupted`` with its record's ``outage`` set (on the Celery engine,
in the record its worker published), goes back to the queue, and the provider's breaker
(:mod:`hero.llm.breaker`) holds the stories that use it until one story, its probe, gets an
answer again. A provider that refuses every request (a bad key) is stopped, said once.
"""

from __future__ import annotations

import functools
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hero.config.home import Config
from hero.daemon.inbox import Inbox, Signature, plan_of, signature, start_watching
from hero.daemon.overlap import blockers, repo_key, running_on, scoped, wait_reason
from hero.daemon.queue import Admit, Entry, admit, comes_first, duplicate_reason
from hero.errors import Interrupted
from hero.git.ops import TargetRepo
from hero.leftovers import kill_marked
from hero.llm.breaker import PERMANENT, TRANSIENT, Backoff, Breakers, breakers_path
from hero.llm.client import Model
from hero.llm.models import providers_of, story_config
from hero.locks import DaemonLock as DaemonLock  # re-exported: `hero watch` and tests
from hero.locks import DaemonRunning as DaemonRunning
from hero.locks import StoryBusy
from hero.names import StoryRef
from hero.plans.finish import finish_plan, mark_skipped
from hero.plans.gate import Gate, Rule
from hero.redact import Redactor
from hero.roles.verifier import MODEL_VERIFY_HINT, policy_problems
from hero.run.events import EventSink, StoryEvents
from hero.run.housekeeping import Housekeeper, Rules
from hero.run.notify import Notifier
from hero.run.pipeline import RunHooks, StoryRun
from hero.run.record import finish_done_move
from hero.run.revision import waits_for
from hero.state import RunState, StateError, Status, file_digest, load_state, state_dir
from hero.story.format import parse_story
from hero.story.overlap import Scoped
from hero.story.record import MAX_STORY_BYTES, Story, StoryError

if TYPE_CHECKING:
    from hero.engine.remote import RemoteRun

#: Seconds a clean stop waits for running stories before recording them as interrupted.
STOP_GRACE_S = 6.0
#: Seconds a stop waits, after the stories, for alerts still being sent (a clean stop
#: ends within 10 s, whatever a webhook does).
NOTIFY_WAIT_S = 2.0
#: Seconds between rescans of the inbox, a safety net under the event stream.
RESCAN_S = 10.0
#: At start-up nothing is launched while backlog files still settle (so the whole backlog
#: is ordered by priority first), for at most this many settle delays.
STARTUP_HOLD_SETTLES = 3

#: A story's worker and reviewer, from the story's configuration (hero.llm.models.story_config:
#: its roles carry its models), each cancelled by the event.
ModelFactory = Callable[[threading.Event, Config], tuple[Model, Model]]


class _Run(Protocol):
    """A story's run: ``pipeline.StoryRun`` here, or ``engine.remote.RemoteRun`` on a worker."""

    def run(self) -> RunState: ...

    def force_interrupted(self) -> None: ...


@dataclass
class _Running:
    story: Story
    path: Path
    run: _Run
    cancel: threading.Event
    thread: threading.Thread
    started: float = field(default_factory=time.monotonic)
    calls_before: int = 0  # the story's answered model calls when it started (its record)


class Dispatcher:
    def __init__(
        self,
        config: Config,
        make_models: ModelFactory,
        *,
        log: Any,
        settle_s: float = 1.0,
        only_plan: str | None = None,
        notifier: Notifier | None = None,
        events: EventSink | None = None,
    ) -> None:
        self.config = config
        #: where every story's events go (`hero watch --events`): one sink, whole lines
        self.events = events
        self.home = config.home
        self.make_models = make_models
        self.log = log
        self.repo = TargetRepo(config.target_repo)
        self.inbox = Inbox(
            (self.home / "inbox").resolve(),
            settle_s=settle_s,
            complete=self._written_by_hero,
            only_plan=only_plan,
        )
        self.rejected_dir = self.home / "runs" / "rejected"
        self._redactor = Redactor(config.secrets)
        # Re-entrant: stop() runs in a signal handler, which may interrupt the main thread
        # while it holds this lock.
        self._lock = threading.RLock()
        self._ready: dict[Path, Entry] = {}
        self._running: dict[str, _Running] = {}
        self._rejected: dict[Path, Signature] = {}  # path -> signature when refused
        self._stopping = threading.Event()
        # sha256 of every story file as hero last left it (runs/state/*.json story_digest)
        self._hero_digests: set[str] = set()
        self._busy_elsewhere: set[str] = set()  # keys another hero home runs right now
        self._digests_lock = threading.Lock()
        self._said: dict[Path, str] = {}  # what was last logged of a story kept waiting
        self._repo_key: str | None = None  # the repository, as the overlap rule names it
        self._overlap_said: dict[Path, str] = {}  # what a story held back waits for, as logged
        self._plans_lock = threading.Lock()  # one thread finishes a plan at a time
        #: (store, celery app, the lock its sends take) with engine: celery
        self._engine: tuple[Any, Any, threading.Lock] | None = None
        # a story's end, told to notify_command / notify_webhook (hero.run.notify), off this thread
        self.notifier = notifier if notifier is not None else Notifier(config, log)
        # Housekeeping (hero.run.housekeeping) is owed after a story ends and when the timer
        # runs out; one thread pays it, many endings in one pass, never holding a slot.
        self._housekeeping_due = threading.Event()
        self._housekeeping_now = False  # under _lock: a pass is under way (not idle yet)
        self._requeueing = 0  # under _lock: paused stories between running and queued again
        self._served = threading.Event()  # serve() returned: the housekeeper ends too
        self._housekept_at = 0.0  # time.monotonic() of the last timed housekeeping
        # the providers a story's models use when it chooses none (the worker's and the
        # reviewer's); a story's model: field may choose any provider of the home, whose
        # breaker is then its own (see _providers)
        self.providers = tuple(
            sorted({r.provider.name for n, r in config.roles.items() if n in _STORY_ROLES})
        )
        self.known_providers = tuple(sorted({*self.providers, *config.providers}))
        self.breakers = Breakers(
            breakers_path(self.home),
            Backoff(config.llm.outage_backoff_s, config.llm.outage_backoff_max_s),
            say=self._breaker_said,
            on_open=self.notifier.breaker_opened,  # an alert (hero.run.notify) when one opens
        )

    # -- the loop ----------------------------------------------------------------------

    def serve(self, *, exit_when_idle: bool = False) -> None:
        """Run until ``stop()``; with ``exit_when_idle``, until the inbox holds nothing to run."""
        self._load_hero_digests()
        self.breakers.start(self.known_providers if self.providers else None)
        threading.Thread(target=self._housekeeper, name="housekeeping", daemon=True).start()
        stop_watching = start_watching(self.inbox)
        self.log.info(
            "watching", inbox=str(self.inbox.directory), max_parallel=self.config.max_parallel
        )
        self.inbox.rescan()
        last_rescan = time.monotonic()
        # The backlog first, whole: nothing starts while some of it still settles.
        hold_until: float | None = last_rescan + STARTUP_HOLD_SETTLES * self.inbox.settle_s
        try:
            while not self._stopping.is_set():
                ready, next_due = self.inbox.due()
                for path in ready:
                    self._consider_safely(path)
                now = time.monotonic()
                if hold_until is not None and (now >= hold_until or not self.inbox.settling()):
                    hold_until = None
                launchable = self._launch() if hold_until is None else 1
                if exit_when_idle and self._idle(launchable) and next_due is None:
                    break
                if time.monotonic() - last_rescan >= RESCAN_S:
                    self.inbox.rescan()
                    last_rescan = time.monotonic()
                if time.monotonic() - self._housekept_at >= self.config.housekeeping.interval_s:
                    self._housekept_at = time.monotonic()
                    self._housekeeping_due.set()
                timeout = RESCAN_S if next_due is None else max(0.0, min(next_due, RESCAN_S))
                if hold_until is not None:
                    timeout = min(timeout, max(0.0, hold_until - now))
                due = self.breakers.next_due()
                if due is not None:  # an open breaker lets a story try then
                    timeout = min(timeout, due + 0.05)
                self.inbox.wake.wait(timeout)
                self.inbox.wake.clear()
        finally:
            stop_watching()
            self._stop_running()
            self._served.set()
            self._housekeeping_due.set()  # the housekeeper sees it, and ends
            # A signal: a short wait. Out of work (run-plan, --exit-when-idle): the alerts of
            # the last stories are sent before the process exits.
            stopped = self._stopping.is_set()
            self.notifier.close(NOTIFY_WAIT_S if stopped else self.config.notify.timeout_s + 5)

    def stop(self) -> None:
        """Take no new stories; interrupt the running ones (from a signal handler too)."""
        self._stopping.set()
        with self._lock:
            for running in self._running.values():
                running.cancel.set()
        self.inbox.wake.set()

    def kill_now(self) -> None:
        """A second signal: end every story's commands at once (the process exits next)."""
        for running in list(self._running.values()):
            running.run.force_interrupted()
            kill_marked(running.story.ref.marker(self.home))

    def _idle(self, launchable: int) -> bool:
        """Nothing runs, and nothing queued may run (what is left waits for a dependency
        that will not pass without an edit or a retry, or is skipped)."""
        with self._lock:
            return (
                not self._running
                and not self._requeueing
                and launchable == 0
                # housekeeping owed for the stories that ended is paid first
                and not self._housekeeping_due.is_set()
                and not self._housekeeping_now
            )

    # -- hero's own writes -------------------------------------------------------------

    def _load_hero_digests(self) -> None:
        directory = state_dir(self.home)
        try:
            refs = [StoryRef("", p.stem) for p in directory.glob("*.json")]
            refs += [StoryRef(p.parent.name, p.stem) for p in directory.glob("plans/*/*.json")]
        except OSError:
            return
        for ref in refs:
            if ref.valid():  # the one story-id rule: no dot-file, nothing reaching elsewhere
                self._remember_digest(ref)

    def _remember_digest(self, ref: StoryRef) -> None:
        try:
            state = load_state(self.home, ref)
        except StateError:
            return
        if state is not None and state.story_digest:
            with self._digests_lock:
                self._hero_digests.add(state.story_digest)

    def _written_by_hero(self, path: Path) -> bool:
        """Whether ``path`` is, byte for byte, a story file as hero last left it (say, with
        the reviewer's feedback appended): whole, so due at once, whatever its mtime."""
        with self._digests_lock:
            if not self._hero_digests:
                return False
        try:
            if path.stat().st_size > MAX_STORY_BYTES:
                return False
        except OSError:
            return False
        digest = file_digest(path)
        with self._digests_lock:
            return bool(digest) and digest in self._hero_digests

    # -- deciding ----------------------------------------------------------------------

    def _consider_safely(self, path: Path) -> None:
        """``_consider``, and whatever it raises refuses that one file, never the daemon."""
        try:
            self._consider(path)
        except Exception as exc:  # noqa: BLE001 - one file must not stop the daemon
            self._ready.pop(path, None)
            self._refuse_after_bug(path, exc, "while reading it")

    def _consider(self, path: Path) -> None:
        """A settled inbox file: queue it, or refuse it with a reason, or leave it be."""
        with self._lock:
            if any(r.path == path for r in self._running.values()):
                return  # hero's own feedback appends to a running story's file
        sig = signature(path)
        if sig is None:
            self._ready.pop(path, None)
            return
        if self._rejected.get(path) == sig:
            return
        plan = plan_of(path, self.inbox.directory)
        if plan is None:  # its plan folder has gone (or lost its manifest) meanwhile
            self._ready.pop(path, None)
            return
        try:
            story = replace(parse_story(path), plan=plan)
            story_config(self.config, story)  # its model: fields, checked against providers
        except StoryError as exc:
            self._refuse(path, sig, str(exc))
            return
        except (OSError, MemoryError, RecursionError) as exc:
            self._refuse(path, sig, f"{path}: file: cannot read the file: {_one_line(exc)}")
            return
        entry = Entry(story, path, sig[0] / 1e9)
        problem = self._eligibility(entry)
        found = policy_problems(self.config.safety, story.verify) if plan else []
        if problem is None and found:  # a planner model wrote them: refused before it starts
            problem = f"{path}: verify: " + "; ".join(found) + f" ({MODEL_VERIFY_HINT})"
        if problem is None:
            self._clear_refusal(path)
            self._ready[path] = entry
            self.log.info("queued", story=story.ref.key, file=path.name, priority=story.priority)
        elif problem:
            self._refuse(path, sig, problem)
        else:
            self._ready.pop(path, None)

    def _eligibility(self, entry: Entry) -> str | None:
        """None: may run. "": not now, silently. Text: refused, for this reason."""
        story, path = entry.story, entry.path
        key = story.ref.key
        with self._lock:
            running = self._running.get(key)
        if running is not None:
            return f"story id '{key}' is already running from {running.path.name}"
        for other in list(self._ready.values()):
            if other.path == path or other.story.ref != story.ref:
                continue
            if comes_first(other, entry):
                return duplicate_reason(key, other.path.name)
            other_sig = signature(other.path)
            if other_sig is not None:
                self._refuse(
                    other.path,
                    other_sig,
                    f"story id '{key}' is also in {path.name}, which came first",
                )
        decision = admit(self.home, story, path)
        if decision.admit == Admit.RUN:
            elsewhere = self.repo.story_busy(story.ref)  # another home runs it on the repo
            if elsewhere:
                if key not in self._busy_elsewhere:  # said once, not every rescan
                    self._busy_elsewhere.add(key)
                    self.log.warning("busy", story=key, reason=elsewhere)
                self.inbox.forget(path)  # the next rescan looks again
                return ""
            self._busy_elsewhere.discard(key)
            return None
        if decision.admit == Admit.BUSY:
            self.log.info("busy", story=key, reason=decision.reason)
            self.inbox.forget(path)  # the next rescan looks again
            return ""
        if decision.admit == Admit.WAIT:
            status = decision.state.status if decision.state else None
            self.log.info("waiting", story=key, status=status, hint=decision.reason)
            return ""
        if decision.admit == Admit.DONE and decision.state is not None:
            if finish_done_move(decision.state, path):
                self.log.info("moved to done", story=key, note="it had passed before a crash")
                self._finish_plan(story.plan)
                return ""
        return decision.reason

    def _refuse(self, path: Path, sig: Signature | None, reason: str) -> None:
        """Refuse ``path`` as it is now (``sig``): a note in runs/rejected/, one log line.
        It is looked at again only once it changes. Writing the note may fail (a full
        disk): the refusal stands, and the log line says so."""
        reason = self._redactor.redact(" ".join(reason.split()))  # it may quote the file
        with self._lock:
            self._ready.pop(path, None)
            self._rejected[path] = sig if sig is not None else (0, 0)
        note = self._rejected_note(path, ".error.txt")
        try:
            note.parent.mkdir(parents=True, exist_ok=True)
            note.write_text(
                f"{path}\nrefused at {time.strftime('%Y-%m-%d %H:%M:%S')}:\n{reason}\n"
                "Edit the file to have it considered again.\n",
                encoding="utf-8",
            )
        except OSError as exc:
            self.log.warning("rejected", file=path.name, reason=reason, note_error=_one_line(exc))
            return
        self.log.warning("rejected", file=path.name, reason=reason, note=str(note))

    def _refuse_after_bug(self, path: Path, exc: BaseException, doing: str) -> None:
        """An unexpected exception over one file: its traceback to an error log, once; the
        file refused in one line, until it changes."""
        log_file = self._rejected_note(path, ".error.log")
        where = _write_traceback(log_file)
        reason = f"{path}: internal error {doing}: {type(exc).__name__}: {_one_line(exc)}{where}"
        self._refuse(path, signature(path), reason)

    def _rejected_note(self, path: Path, suffix: str) -> Path:
        """``runs/rejected/<file><suffix>``; ``runs/rejected/plans/<plan>/...`` for a plan's."""
        if path.parent == self.inbox.directory:
            return self.rejected_dir / f"{path.name}{suffix}"
        return self.rejected_dir / "plans" / path.parent.name / f"{path.name}{suffix}"

    def _clear_refusal(self, path: Path) -> None:
        self._rejected.pop(path, None)
        for suffix in (".error.txt", ".error.log"):
            try:
                self._rejected_note(path, suffix).unlink()
            except OSError:  # none there, or a name too long to have one
                pass

    # -- running -----------------------------------------------------------------------

    def _launch(self) -> int:
        """Start what may run now, best first, while there is room; returns how many queued
        stories may run now but wait for room. A story whose dependencies have not passed
        stays queued; one under a failed dependency is recorded as skipped."""
        while not self._stopping.is_set():
            with self._lock:
                room = self.config.max_parallel - len(self._running)
                entries = sorted(self._ready.values(), key=lambda e: e.key)
            rule = self._rule(entries)
            with self._lock:
                running = [r.story for r in self._running.values()]
            queued = [e.story for e in entries]
            ready = [e for e in entries if self._gate(e, rule, running, queued)]
            # a stopped provider's stories wait for a restart: nothing to stay up for
            waiting = sum(not self.breakers.stopped(self._providers(e.story)) for e in ready)
            if room <= 0 or not ready:
                return waiting
            beside = self._running_scoped()
            if self.config.overlap == "serial":  # one after the other (hero.daemon.overlap)
                ready = [e for e in ready if self._overlap_free(e, beside)]
                if not ready:
                    return waiting
            with self._lock:
                # the best whose providers' breakers are closed, or open and due (it is then
                # their probe): a story on another provider is not held back by this one's
                entry = next(
                    (
                        e
                        for e in ready
                        if self._ready.get(e.path) is e  # else changed meanwhile: looked at again
                        and self.breakers.admit(self._providers(e.story), e.story.ref.key)
                    ),
                    None,
                )
                if entry is None:
                    return waiting
                del self._ready[entry.path]
            try:
                self._launch_one(entry, blockers(self._scoped(entry.story), beside))
            except Exception as exc:  # noqa: BLE001 - one story must not stop the daemon
                with self._lock:
                    self._running.pop(entry.story.ref.key, None)
                self.breakers.ended(self._providers(entry.story), entry.story.ref.key)  # probe?
                self._refuse_after_bug(entry.path, exc, "while starting it")
        return 0

    def _rule(self, queued: list[Entry]) -> Rule:
        """The dependency rule as things stand: what is queued or running is known."""
        with self._lock:
            running = [r.story for r in self._running.values()]
        return Rule.over(self.home, [*(e.story for e in queued), *running])

    def _gate(self, entry: Entry, rule: Rule, running: list[Story], queued: list[Story]) -> bool:
        """Whether the dependency rule lets ``entry`` run now (:mod:`hero.plans.gate`), and
        a follow-up's branch is free (:func:`hero.run.revision.waits_for`); records a skip,
        and says once in the log what a story waits for."""
        waits = waits_for(self.home, entry.story, running, queued)
        if waits:
            if self._said.get(entry.path) != waits:
                self.log.info("waiting", story=entry.story.ref.key, reason=waits)
            self._said[entry.path] = waits
            return False
        decision = rule.gate(entry.story)
        deps = {StoryRef(entry.story.ref.plan, d) for d in entry.story.depends_on}
        finishing = [s.ref.key for s in running if s.ref in deps]
        if decision.gate == Gate.READY and finishing:
            # passed, but its run has not ended yet (its file to done/, its memory, its
            # "finished"): the daemon wakes again as it ends
            reason = f"{', '.join(finishing)} passed and is finishing its run"
            if self._said.get(entry.path) != reason:
                self.log.info("waiting", story=entry.story.ref.key, reason=reason)
            self._said[entry.path] = reason
            return False
        if decision.gate == Gate.READY:
            self._said.pop(entry.path, None)
            return True
        key = entry.story.ref.key
        if decision.gate == Gate.SKIP:
            if mark_skipped(self.home, entry.story, entry.path, decision.reason):
                self.log.warning("skipped", story=key, reason=decision.reason)
                self._remember_digest(entry.story.ref)
                self.notifier.story_recorded(entry.story.ref)
        elif self._said.get(entry.path) != decision.reason:
            if decision.gate == Gate.UNKNOWN:
                event = "dependency cycle" if decision.cycle else "unknown dependency"
                self.log.warning(event, story=key, reason=decision.reason)
            else:
                self.log.info("waiting", story=key, reason=decision.reason)
        self._said[entry.path] = decision.reason
        return False

    def _scoped(self, story: Story) -> Scoped:
        if self._repo_key is None:
            self._repo_key = repo_key(self.repo)
        return scoped(story, self._repo_key)

    def _running_scoped(self) -> list[Scoped]:
        """The stories running on the repository now, with their scopes: this daemon's,
        then those any other hero process runs there (`hero run`, another home)."""
        with self._lock:
            ours = [r.story for r in self._running.values()]
        mine = [self._scoped(story) for story in ours]
        return mine + running_on(self.repo, self.home, skip={s.key for s in mine})

    def _overlap_free(self, entry: Entry, running: list[Scoped]) -> bool:
        """Whether ``entry`` may start beside what runs (``overlap: serial``); says once in
        the log what it waits for."""
        waits_for = blockers(self._scoped(entry.story), running)
        if not waits_for:
            self._overlap_said.pop(entry.path, None)
            return True
        reason = wait_reason(waits_for)
        if self._overlap_said.get(entry.path) != reason:
            self.log.info("waiting", story=entry.story.ref.key, reason=reason)
        self._overlap_said[entry.path] = reason
        return False

    def _launch_one(self, entry: Entry, overlaps: list[str] | None = None) -> None:
        """Start ``entry``'s story; ``overlaps``: the running stories whose scopes overlap
        its own, said in the log and the events as it starts."""
        story, path = entry.story, entry.path
        with self._lock:
            if not path.exists():
                self.breakers.ended(self._providers(story), story.ref.key)  # a probe never run
                return
            cancel = threading.Event()
            log = self.log.bind(story=story.ref.key)
            key = story.ref.key
            calls_before = _calls(self.home, story.ref)
            run: _Run
            if self.config.engine.remote:
                remote = self._remote_run(story, path, log, cancel)
                remote.on_record = lambda state, k=key: self._progressed(k, state)
                run = remote
            else:
                config = story_config(self.config, story)  # checked as it was queued
                worker, reviewer = self.make_models(cancel, config)

                def progress(msg: str, log: Any = log) -> None:
                    log.info(msg)

                story_run = StoryRun(
                    story,
                    config,
                    worker,
                    reviewer,
                    self.repo,
                    progress=progress,
                    cancel=cancel,
                    events=self.events,
                    hooks=RunHooks(
                        on_save=functools.partial(self._progressed, key),
                        on_start=functools.partial(
                            _say_overlap,
                            others=overlaps,
                            scope=tuple(story.scope),
                            mode=self.config.overlap,
                        )
                        if overlaps
                        else None,
                    ),
                )
                run = story_run
            thread = threading.Thread(
                target=self._run_one, args=(key,), name=f"story-{key}", daemon=True
            )
            self._running[key] = _Running(
                story, path, run, cancel, thread, calls_before=calls_before
            )
        log.info("started", file=path.name)
        if overlaps:
            log.info(
                "overlap",
                overlaps=overlaps,
                scope=list(story.scope),
                note="their scopes overlap: they may change the same files",
            )
        thread.start()

    def _remote_run(self, story: Story, path: Path, log: Any, cancel: threading.Event) -> RemoteRun:
        """The story sent to a ``hero worker`` (engine: celery) and watched from here."""
        from hero.engine.remote import RemoteRun

        if self._engine is None:
            from hero.engine.app import make_app
            from hero.engine.store import Store

            engine = self.config.engine
            store = Store(engine.state_url, engine.queue, engine.lease_s)
            self._engine = (store, make_app(engine), threading.Lock())
        store, app, send_lock = self._engine
        return RemoteRun(story, path, self.config, store, app, self.repo, log, cancel, send_lock)

    def _run_one(self, story_id: str) -> None:
        running = self._running[story_id]
        log = self.log.bind(story=story_id)
        paused = False
        try:
            state = running.run.run()
            if state.status == Status.INTERRUPTED and state.outage:
                self._paused(running, state, log)
                paused = True
            else:
                if _calls_of(state) > running.calls_before:
                    self.breakers.answered(self._providers(running.story), story_id)
                log.info(
                    "finished",
                    status=state.status,
                    rounds=len(state.rounds),
                    error=state.error or None,
                )
                self.notifier.story_ended(state, duration_s=time.monotonic() - running.started)
            if state.status == Status.PASSED:
                self._finish_plan(running.story.plan)
        except (Interrupted, KeyboardInterrupt):
            log.info("interrupted")
        except StoryBusy as exc:
            log.warning("busy", reason=_one_line(exc))
        except StateError as exc:  # the run record cannot be read: the user moves it aside
            self._refuse(running.path, signature(running.path), str(exc))
        except Exception as exc:  # noqa: BLE001 - one story's failure must not stop the daemon
            # The pipeline records what it can foresee as `error`; this is what it could not
            # (a bug, or its state could not even be saved). Not run again until an edit.
            log_file = running.story.ref.run_dir(self.home) / "error.log"
            where = _write_traceback(log_file)
            reason = f"story '{story_id}' crashed: {type(exc).__name__}: {_one_line(exc)}{where}"
            self._refuse(running.path, signature(running.path), reason)
            self.notifier.story_recorded(running.story.ref, error=reason)
        finally:
            if not paused:  # a probe that ended otherwise, answered or not (busy, a bug)
                self.breakers.ended(self._providers(running.story), story_id)
            self._remember_digest(running.story.ref)  # before its file is looked at again
            # owed before the story stops counting as running: an idle daemon has housekept
            self._housekeeping_due.set()
            requeue = paused and not self._stopping.is_set()
            with self._lock:
                self._running.pop(story_id, None)
                self._requeueing += requeue  # not idle: it is on its way back to the queue
            self.inbox.forget(running.path)  # its file may have changed meanwhile
            if requeue:
                try:
                    self._consider_safely(running.path)  # back in the queue now, not at a rescan
                finally:
                    with self._lock:
                        self._requeueing -= 1
            self.inbox.wake.set()

    # -- model outages -----------------------------------------------------------------

    def _paused(self, running: _Running, state: RunState, log: Any) -> None:
        """A story that met its provider's outage: the breaker trips, the story goes back
        to the queue (its record stays ``interrupted``). The record may come from a remote
        worker: only a provider of this home's roles is tripped, its words cut short."""
        outage = state.outage
        named = outage.get("provider", "")
        own = self._providers(running.story) if self.providers else ()
        if named in own or (not self.providers and named):
            providers = [named[:_REASON_CHARS]]
        else:  # a name none of the story's roles has here: the providers it uses here
            providers = list(own)
        kind = PERMANENT if outage.get("kind") == PERMANENT else TRANSIENT
        reason = " ".join(str(outage.get("error") or outage.get("reason") or "").split())
        reason = self._redactor.redact(reason[:_REASON_CHARS])
        log.info("paused", provider=named[:100], kind=kind, round=state.current_round)
        for provider in providers:
            self.breakers.trip(provider, kind, reason, running.story.ref.key)

    def _providers(self, story: Story) -> tuple[str, ...]:
        """The providers ``story``'s models use: its roles', its model: fields applied
        (hero.llm.models); every provider a breaker knows when no role is loaded (models made
        by a test's factory)."""
        if not self.providers:
            return tuple(b.provider for b in self.breakers.snapshot())
        try:
            return providers_of(story_config(self.config, story))
        except StoryError:  # checked as it was queued; should it fail now, the home's
            return self.providers

    def _progressed(self, story_id: str, state: RunState) -> None:
        """The record of a running story was saved: once it has more answered model calls
        than it started with, its providers answer (a probe closes their breakers)."""
        with self._lock:
            running = self._running.get(story_id)
        if running is not None and _calls_of(state) > running.calls_before:
            self.breakers.answered(self._providers(running.story), story_id)

    def _breaker_said(self, event: str, **fields: Any) -> None:
        if event in ("provider stopped", "breakers unreadable", "breakers not saved"):
            self.log.error(event, **fields)
        elif event in (
            "provider unavailable",
            "provider still unavailable",
            "breaker alert failed",
        ):
            self.log.warning(event, **fields)
        else:
            self.log.info(event, **fields)

    def _stop_running(self) -> None:
        with self._lock:
            running = list(self._running.values())
        for r in running:
            r.cancel.set()
        deadline = time.monotonic() + STOP_GRACE_S
        for r in running:
            r.thread.join(max(0.0, deadline - time.monotonic()))
        for r in running:
            if r.thread.is_alive():  # a model call still in flight: record it as interrupted
                r.run.force_interrupted()
                kill_marked(r.story.ref.marker(self.home))
                self.log.info("interrupted", story=r.story.ref.key, note="model call abandoned")

    # -- housekeeping ------------------------------------------------------------------

    def _housekeeper(self) -> None:
        """The housekeeping thread: a pass whenever one is owed, until the daemon stops."""
        while True:
            self._housekeeping_due.wait()
            if self._served.is_set() or self._stopping.is_set():
                return
            with self._lock:  # never seen idle between the two
                self._housekeeping_now = True
                self._housekeeping_due.clear()
            try:
                self._housekeep()
            finally:
                with self._lock:
                    self._housekeeping_now = False
                self.inbox.wake.set()  # an idle daemon may go now

    def _housekeep(self) -> None:
        """Apply the housekeeping settings (see hero.run.housekeeping); never raises."""
        try:
            keeper = Housekeeper(self.config, self.repo, say=lambda msg: self.log.info(msg))
            outcome = keeper.run(Rules.automatic(self.config.housekeeping))
            if outcome.removed:
                self.log.info(
                    "housekeeping", removed=len(outcome.removed), freed_bytes=outcome.freed
                )
        except Exception as exc:  # noqa: BLE001 - housekeeping must not stop the daemon
            self.log.error("housekeeping", error=f"{type(exc).__name__}: {_one_line(exc)}")

    # -- plans -------------------------------------------------------------------------

    def _finish_plan(self, plan: str) -> None:
        """When the last story of ``plan`` has passed: its branch ``hero/plan/<plan>``, the
        merge of its leaves (see ``hero.plans.finish.finish_plan``). Never raises."""
        if not plan:
            return
        try:
            with self._plans_lock:
                outcome = finish_plan(self.config, self.repo, plan)
        except Exception as exc:  # noqa: BLE001 - a plan's ending must not stop the daemon
            where = _write_traceback(self.home / "runs" / "plans" / f"{plan}.error.log")
            self.log.error(
                "plan", plan=plan, error=f"{type(exc).__name__}: {_one_line(exc)}{where}"
            )
            return
        if outcome is not None:
            if outcome.error:
                self.log.error("plan", plan=plan, error=outcome.error)
            else:
                self.log.info("plan passed", plan=plan, branch=outcome.branch, note=outcome.note)


#: The roles whose models a story calls.
_STORY_ROLES = ("worker", "reviewer")
#: An outage's reason as a breaker keeps it (it may come from a remote worker's record).
_REASON_CHARS = 500


def _calls_of(state: RunState) -> int:
    """The answered model calls a record counts (0 when it says nothing usable)."""
    usage = state.usage if isinstance(state.usage, dict) else {}
    calls = usage.get("llm_calls", 0)
    return calls if isinstance(calls, int) and not isinstance(calls, bool) else 0


def _calls(home: Path, ref: StoryRef) -> int:
    """The answered model calls of the story's record now; 0 without a readable one."""
    try:
        state = load_state(home, ref)
    except StateError:
        return 0
    return _calls_of(state) if state is not None else 0


def _say_overlap(
    events: StoryEvents, *, others: list[str], scope: tuple[str, ...], mode: str
) -> None:
    """The ``overlap`` event of a story that starts beside overlapping ones."""
    events.overlap(others=others, scope=scope, mode=mode)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _write_traceback(path: Path) -> str:
    """Append the exception being handled, with its traceback, to ``path``; returns
    `` (see PATH)``, or "" when it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')}\n{traceback.format_exc()}")
    except OSError:
        return ""
    return f" (see {path})"
