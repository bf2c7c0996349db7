"""The round loop for one story: Worker -> rescue commit -> Verifier -> Reviewer, until done.

State is saved after every step, so a crash or Ctrl-C at any point leaves a record the
next run resumes from: the finished rounds are kept, the unfinished one is run again, and
the branch's commits are never thrown away. Where a run starts (resumed, or afresh on its
base) is hero.run_start's; the story's own repository and its sandboxes are
hero.workspace's; hero's git at the end of each phase is hero.git.phases'.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from hero.agent.loop import AgentResult, run_agent
from hero.agent.replay import Replayed, Unreplayable, replay_round, round_start_fields
from hero.agent.tools import tool_schemas
from hero.agent.window import Context, ContextOverflow, estimate_text, window_for
from hero.budget import BudgetExceeded, Meter
from hero.cancel import StoryCancelled, cancel_at_start, mark_cancelled
from hero.cancel import check as check_cancelled
from hero.config import Config
from hero.errors import Interrupted
from hero.events import EventSink, StopReason, StoryEvents, run_result
from hero.git.guard import Guard
from hero.git.ops import GitError, TargetRepo
from hero.git.phases import PhaseEnd
from hero.llm import LlmError, Model, ModelOutage
from hero.locks import StoryBusy as StoryBusy  # re-exported: callers catch it from here
from hero.locks import story_lock as _story_lock
from hero.memory.recall import Recalled, recall_for
from hero.models import models_record
from hero.names import StoryRef
from hero.prompting import PromptError
from hero.redact import RedactingModel, Redactor
from hero.roles.reviewer import APPROVED, Verdict, review_commits, short_circuit
from hero.roles.verifier import VerifyResult, run_verify
from hero.roles.worker import build_messages, condense_prompt
from hero.run_start import RunStart, write_error_log
from hero.sandbox import SandboxUnavailable
from hero.state import (
    ReviewRecord,
    Round,
    RunState,
    StateError,
    Status,
    WorkerOutcome,
    file_digest,
    load_state,
    save_state,
)
from hero.story import Story, StoryFileChanged, VerifyTier, parse_story, write_feedback
from hero.trace import Trace
from hero.workspace import Progress as Progress  # re-exported: hero.app
from hero.workspace import Workspace

#: During the worker's turn the run record (and its usage) is saved at most this often.
USAGE_SAVE_S = 1.0
#: The errors that end a story in ``error``, and what its record says before the message.
FAILURES: tuple[tuple[type[Exception], str], ...] = (
    (ContextOverflow, "context window: "),  # a model error, said as the window's
    (LlmError, "model error: "),
    (GitError, "git error: "),
    (PromptError, "prompt template error: "),
    (SandboxUnavailable, ""),
)


def run_story(
    story_path: Path,
    config: Config,
    worker_model: Model,
    reviewer_model: Model,
    *,
    repo: TargetRepo | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    events: EventSink | None = None,
) -> RunState:
    """Run one story to passed, gave_up, budget_exceeded or error, or to ``interrupted``
    with ``outage`` set when its model's provider failed (hero.llm.ModelOutage); raises
    Interrupted/KeyboardInterrupt when stopped (after saving state ``interrupted``),
    StoryError for an invalid story. ``events``: the stream its events go to (hero.events)."""
    story = parse_story(story_path)
    run = StoryRun(
        story, config, worker_model, reviewer_model, repo, progress, cancel, events=events
    )
    return run.run()


class StoryRun:
    """One run of one story. ``run()`` does the work; ``force_interrupted()`` lets a daemon
    that is shutting down record the story as interrupted while a model call is still
    in flight (later saves by the run are then ignored)."""

    def __init__(
        self,
        story: Story,
        config: Config,
        worker_model: Model,
        reviewer_model: Model,
        repo: TargetRepo | None,
        progress: Progress | None,
        cancel: threading.Event | None,
        *,
        events: EventSink | None = None,
    ) -> None:
        self.story = story
        self.config = config
        self.home = config.home
        self.worker_model = worker_model
        self.reviewer_model = reviewer_model
        self.repo = repo or TargetRepo(config.target_repo)
        # every secret hero knows, out of all it writes and sends (see hero.redact)
        self.redactor = redactor = Redactor(config.secrets)
        say = progress or (lambda _msg: None)
        self.say: Progress = (lambda msg: say(redactor.redact(msg))) if redactor else say
        self.cancel = cancel
        self.ref = story.ref
        self.key = self.ref.key  # what the user reads: the id, or <plan>/<id>
        self.branch = self.ref.branch
        self.run_dir = self.ref.run_dir(self.home)
        #: the story's events (`--events`), redacted as all it writes; none without a sink
        self.events = StoryEvents(events, self.key, redactor)
        #: the story's own repository at worktrees/<id>, its sandboxes, hero's git in it
        self.workspace = Workspace(story, config, self.repo, redactor, self.say)
        self.start = RunStart(story, config, self.repo, self.workspace, redactor, self.say)
        self.state = RunState(id=story.id, plan=story.plan)
        self.meter = Meter(config.budgets, self.state)  # remade once the record is loaded
        self._story_file_id = story.file_id  # the story file as hero read it
        self._save_lock = threading.Lock()
        self._saved_at = 0.0  # time.monotonic() of the last save
        #: called after each save of the record (the Celery engine publishes it then, so
        #: that a step is done, for any other machine, before the next one starts)
        self.on_save: Callable[[], None] | None = None
        #: called after each worker turn, between two of its commands (the Celery engine
        #: snapshots the worktree then: hero.engine.wip)
        self.on_turn_end: Callable[[], None] | None = None
        #: called before a round stopped mid-conversation goes on (``n``): may put work
        #: back into the worktree; returns what the restart note says of the worktree
        #: ("": the default, the worktree as the stop left it)
        self.on_resume: Callable[[int], str] | None = None
        #: what the repository's memory tells this story, when it was recalled elsewhere
        #: (the Celery engine's coordinator, which keeps the memory, sends it); None: read
        #: from this home's memory at each round's start (hero.memory.recall)
        self.recalled: Recalled | None = None
        self._frozen = False
        #: whether the story's end teaches the home's memory: not on a `hero worker`,
        #: whose coordinator learns from the record it publishes (hero.engine.remote)
        self.learns = True
        #: this run ended the story (passed, gave up, error, budget): it may teach the memory
        self._story_ended = False

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> RunState:
        started = time.monotonic()
        self.events.run_start(
            story_id=self.story.id, plan=self.story.plan, file=self.story.path, branch=self.branch
        )
        shown: RunState | None = None  # what the result says, when not this run's record
        try:
            # The home's lock (one process per home), then the repository's (one home per
            # repository): either refuses with StoryBusy, before anything is touched.
            with _story_lock(self.home, self.ref), self.repo.story_lock(self.ref, self.home):
                state = self._run()
                if (
                    self._story_ended and self.learns
                ):  # learned under the story's locks: its record is final
                    self._learn(state)
                return state
        except StoryBusy as exc:
            self.events.error(str(exc))
            if self.events:
                shown = self._busy_record(str(exc))
            raise
        finally:  # the last event of the story, whatever ended it
            if self.events:
                took = time.monotonic() - started
                self.events.result(run_result(shown or self.state, self.home, took))

    def _busy_record(self, why: str) -> RunState:
        """What the result of a run refused by another's lock says: the story's record as
        the process running it keeps it (never touched here), with why this run did nothing."""
        try:
            record = load_state(self.home, self.ref) or self.state
        except StateError:
            record = self.state
        return replace(record, error=why)

    def force_interrupted(self) -> None:
        with self._save_lock:
            if self._frozen or self.state.status != Status.RUNNING:
                return
            self.state.status = Status.INTERRUPTED
            self.state.phase = ""
            self.state.close_open_round(time.time())  # its time counts (see hero.budget)
            save_state(self.home, self.state, self.redactor)
            self._frozen = True

    def _run(self) -> RunState:
        try:
            self.workspace.end_leftovers()  # before any git call on the story
            check_cancelled(self.home, self.ref)  # cancelled meanwhile: not started at all
            state = self._start()
        except StoryCancelled as exc:
            self.state = cancel_at_start(self.home, self.ref, self.story.path, str(exc))
            self.events.stop(StopReason.CANCELLED, str(exc))
            self.say(f"{self.key}: {self.state.error or self.state.status}")
            return self.state
        except (KeyboardInterrupt, Interrupted, StateError):
            raise  # a run record hero cannot read is the user's to move aside: never overwritten
        except Exception as exc:  # noqa: BLE001 - a story that cannot start ends in error, once
            return self._start_failed(exc)
        max_rounds = state.max_rounds(self.story.max_retries or self.config.max_retries)
        tiers = self.start.tiers()
        try:
            if state.status == Status.PASSED:
                self.say(f"{self.key}: already passed on {state.branch}; nothing to do")
                return state
            env = self.workspace.prepare(state)
            while len(state.rounds) < max_rounds:
                record = self._round(len(state.rounds) + 1, max_rounds, tiers, env)
                state.rounds.append(record)
                self.events.round_end(asdict(record))
                if record.review.verdict == APPROVED:
                    self._pass(record.round)
                    return state
                self._leave_feedback(record)
            self._finish(Status.GAVE_UP)
            self.events.stop(
                StopReason.GAVE_UP,
                f"no round passed in {len(state.rounds)} round(s)",
                setting="max_retries",
            )
            self.say(f"{self.key}: gave up after {len(state.rounds)} round(s)")
        except ModelOutage as exc:
            self._pause(exc)
        except (LlmError, GitError, PromptError, SandboxUnavailable) as exc:
            self._fail(_failure(exc))
        except BudgetExceeded as exc:
            self._stop_at_budget(exc)
        except StoryCancelled as exc:
            self._stop_cancelled(exc)
        except (KeyboardInterrupt, Interrupted):
            state.status = Status.INTERRUPTED
            state.phase = ""
            self._save()
            self.events.stop(StopReason.INTERRUPTED, "stopped; run again to resume")
            self.say(f"{self.key}: interrupted in round {state.current_round}; run again to resume")
            raise
        except Exception as exc:  # noqa: BLE001 - record, keep the trace, never lose state
            write_error_log(self.run_dir, self.redactor)
            self._fail(
                f"internal error: {type(exc).__name__}: {exc} (see runs/{self.ref.rel}/error.log)"
            )
        self._save()
        return state

    def _start(self) -> RunState:
        """The run record to go on with (see hero.run_start), saved; a story that passed
        is left as it is, its file moved to done/ if a crash kept it in the inbox."""
        state = self._take(self.start.state())
        state.outage = {}  # a pause on an outage is over once the story runs again
        if state.status != Status.PASSED:  # the models this run uses (the story's, if any)
            state.models = models_record(self.config)
        state.budget = ""  # so is a stop on a budget: the run says again if one is used up
        if state.status == Status.PASSED:
            finish_done_move(state, self.story.path)
        else:
            self._save()
        return state

    def _start_failed(self, exc: Exception) -> RunState:
        """A story that cannot start ends in ``error``, once (see RunStart.failed)."""
        state = self._take(self.start.failed(exc))
        self._save()
        self.events.error(state.error)
        self.say(f"{self.key}: error: {state.error}")
        return state

    def _take(self, state: RunState) -> RunState:
        """Run with ``state``: what it spent before counts against the budgets, a round a
        killed run left open too (up to that run's last save)."""
        state.close_open_round(float(state.updated_at or 0.0))
        self.state, self.meter = state, Meter(self.config.budgets, state)
        return state

    # -- one round: work -> rescue -> check (verify, review) -> record --------------------

    def _round(
        self, n: int, max_rounds: int, tiers: tuple[VerifyTier, ...], env: dict[str, str]
    ) -> Round:
        started = time.time()
        self.meter.start_round(n, started)
        self.state.round_started_at = started
        self.state.current_round = n
        self._phase("worker", f"round {n}/{max_rounds}: worker")
        trace_path = self.run_dir / f"round-{n}.jsonl"
        messages, replayed, unreplayable = self._conversation(n, max_rounds, tiers, trace_path)
        part = replayed.parts + 1 if replayed is not None else 1
        self.events.round_start(n, max_rounds=max_rounds, part=part)
        tap = self.events.tap if self.events else None
        with Trace(trace_path, redact=self.redactor, tap=tap) as trace:
            trace.round_start(
                n,
                story=self.key,
                run=self.state.runs,
                branch=self.branch,
                part=part,
                **round_start_fields(self.state.base_sha, self.state.started_at),
            )
            if unreplayable:
                trace.resume_failed(unreplayable)
            if replayed is not None and not replayed.done and self.on_resume is not None:
                replayed.worktree = self.on_resume(n)  # before the guard: its start is the tip
            guard = self.workspace.git.watch(self.state.built_on)
            if replayed is not None and replayed.done:
                result = AgentResult.from_replay(replayed)
                if replayed.ended is None:
                    trace.agent_end(result.end_event())
                self.say(f"round {n}: the worker had finished before the stop; checking its work")
            else:
                result = self._work(messages, env, trace, guard, replayed)
            problems = self._rescue_round(n, result, guard)
            verify, verdict = self._check(n, result, problems, tiers, env, trace, guard)
            trace.verdict(verdict.to_dict())
        self.say(f"round {n}: {verdict.verdict}: {verdict.summary}")
        self.state.head_sha = self.repo.branch_sha(self.branch) or self.state.head_sha
        feedback = self.redactor.redact(_feedback_text(verdict, verify))
        return _round_record(n, started, result, verify, verdict, self.state.head_sha, feedback)

    def _conversation(
        self, n: int, max_rounds: int, tiers: tuple[VerifyTier, ...], trace_path: Path
    ) -> tuple[list[dict[str, Any]], Replayed | None, str]:
        """The worker's history: the round's conversation so far when an earlier run
        stopped in its middle (see hero.agent.replay), else its first messages; and why a
        trace that was there could not be replayed (the round then starts over)."""
        why = ""
        try:
            replayed = replay_round(
                trace_path, base_sha=self.state.base_sha, started_at=self.state.started_at
            )
        except Unreplayable as exc:
            self.say(f"round {n}: starts over: its trace cannot be replayed ({exc})")
            replayed, why = None, str(exc)
        if replayed is not None:
            if not replayed.done:
                self.say(
                    f"round {n}: resumes at turn {replayed.turns + 1}, its conversation "
                    f"replayed from the trace ({replayed.turns} turns, "
                    f"{replayed.tool_calls} tool calls)"
                )
            return replayed.messages, replayed, why
        rounds = self.state.rounds
        first = build_messages(
            self.story,
            tiers,
            self.workspace.path,
            round_no=n,
            max_rounds=max_rounds,
            feedback=rounds[-1].feedback if rounds else "",
            home=self.home,
            builds_on=self.start.builds_on(),
            # once, at the round's start: every turn of the round sends these same first
            # messages (a resumed round replays them from its trace, above)
            memory=self._recall().section,
        )
        return first, None, why

    def _recall(self, *, facts: bool = True) -> Recalled:
        """What the repository's memory tells the story now (see hero.memory.recall);
        ``facts=False``: its recap alone."""
        if self.recalled is not None:
            return self.recalled
        return recall_for(
            self.config, self.story, estimate=estimate_text, say=self.say, facts=facts
        )

    def _work(
        self,
        messages: list[dict[str, Any]],
        env: dict[str, str],
        trace: Trace,
        guard: Guard,
        replayed: Replayed | None,
    ) -> AgentResult:
        """The worker's turn, watched by ``guard``. A turn stopped midway still has the
        user's refs put back; the rest waits for the round to go on (from its trace)."""
        context = Context(
            window_for(self.config, "worker"),
            tool_schemas(),
            head=replayed.head if replayed is not None else len(messages),
            render_summary_prompt=condense_prompt(self.home),
        )
        ctx = self.workspace.tool_context(env, self.cancel)
        try:
            try:
                return run_agent(
                    self.meter.wrap(self.worker_model),
                    messages,
                    ctx,
                    self.config.worker_limits,
                    trace,
                    context=context,
                    resume=replayed,
                    on_condense=lambda what: self.say(f"{self.key}: {what}"),
                    on_turn=self._turn_done,
                )
            finally:
                self.workspace.end_sandbox(ctx)
        except BaseException:
            try:
                for line in self.workspace.git.after_stop(guard).problems:
                    self.say(f"{self.key}: {line}")
            except GitError as exc:
                self.say(f"{self.key}: could not check the repository after the stop: {exc}")
            raise

    def _turn_done(self, _result: AgentResult) -> None:
        """Save the record (its usage) now and then during a long worker turn: a run killed
        with SIGKILL then leaves its spend on record for the budgets, give or take the
        last ``USAGE_SAVE_S`` seconds of it."""
        if self.on_turn_end is not None:
            self.on_turn_end()
        if time.monotonic() - self._saved_at >= USAGE_SAVE_S:
            self._save()
        check_cancelled(self.home, self.ref)  # before the next model call

    def _rescue_round(self, n: int, result: AgentResult, guard: Guard) -> list[str]:
        """Commit what the worker left, put the worktree back on the branch, and undo what
        the worker did to history or to the refs; returns why the round fails (the reviewer
        is not asked then), or nothing."""
        message = f"hero: commit work left uncommitted in round {n} ({self.key})"
        problems = self._ended(n, self.workspace.git.end_work(guard, message, self.state.base_sha))
        self.say(
            f"round {n}: worker {result.stop_reason}: {result.turns} turns, "
            f"{result.tool_calls} tool calls"
        )
        base = self.state.base_sha
        if self.state.head_sha == base and not self.story.allow_empty:
            problems.append(
                f"no commit was made: {self.branch} has no commit since the base ({base[:12]}), "
                "and this story passes only with a change. Make the change and commit it."
            )
        return problems

    def _ended(self, n: int, end: PhaseEnd) -> list[str]:
        """Take in a phase's end (see hero.git.phases): the branch's tip, what hero tidied
        said; returns why the round fails, or nothing."""
        self.state.head_sha = end.head or self.state.head_sha
        for note in end.notes:
            self.say(f"round {n}: {note}")
        return list(end.problems)

    def _check(
        self,
        n: int,
        result: AgentResult,
        problems: list[str],
        tiers: tuple[VerifyTier, ...],
        env: dict[str, str],
        trace: Trace,
        guard: Guard,
    ) -> tuple[VerifyResult, Verdict]:
        """Verify, then review. A stopped worker, the ``problems`` found after its turn, a
        red verifier and checks that changed the repository are answered without asking
        the reviewer."""
        if result.guardrail:
            problems = [f"the worker was stopped: {result.detail}", *problems]
        if problems:
            return VerifyResult(passed=False), short_circuit(_reasons(problems))
        self._phase("verify", f"round {n}: verify")
        guard.watch(self.state.head_sha)  # the checks may not move refs either
        verify = run_verify(
            tiers,
            self.workspace.path,
            timeout_s=self.config.verify_timeout_ms / 1000,
            env=env,
            log_path=self.run_dir / f"verify-r{n}.log",
            cancel=self.cancel,
            redact=self.redactor,
            sandbox=self.workspace.verify_sandbox,
            on_command=lambda check: self.events.verify_command(asdict(check)),
        )
        trace.verify(verify.to_dict())
        self.say(f"round {n}: verify {'passed' if verify.passed else 'FAILED'}")
        problems = self._ended(n, self.workspace.git.end_checks(guard))
        if problems:
            return verify, short_circuit(_reasons(problems))
        if not verify.passed:
            failed = [c.command for c in verify.commands if c.exit_code != 0]
            return verify, short_circuit("verification failed: " + "; ".join(failed))
        self._phase("review", f"round {n}: review")
        verdict = review_commits(
            RedactingModel(self.meter.wrap(self.reviewer_model), self.redactor),
            self.story,
            repo=self.repo.path,  # the user's repository, where hero brought the commits
            base_sha=self.state.base_sha,
            tip=self.state.head_sha,
            round_no=n,
            branch=self.branch,
            verify_summary=verify.summary(),
            home=self.home,
            trace=trace,
            recap=self._recall(facts=False).recap,
        )
        return verify, verdict

    # -- the record --------------------------------------------------------------------

    def _phase(self, phase: str, message: str) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Interrupted(f"stopped before the {phase} step")
        check_cancelled(self.home, self.ref)
        self.state.phase = phase
        self._save()
        self.say(message)

    def _finish(self, status: Status) -> None:
        self._story_ended = True
        self.state.status = status
        self.state.phase = ""
        self.state.finished_at = time.time()
        self.state.story_digest = file_digest(Path(self.state.story_path))

    def _learn(self, state: RunState) -> None:
        """Teach the repository's memory what the story learned (hero.roles.learner), when
        memory is on for the home and the story; a failure is said and the result stands."""
        from hero.roles.learner import learn_story

        learn_story(state, self.story, self.config, cancel=self.cancel, say=self.say)

    def _fail(self, message: str) -> None:
        self._finish(Status.ERROR)
        self.state.error = message
        self.events.error(message)
        self.say(f"{self.key}: error: {message}")

    def _pause(self, exc: ModelOutage) -> None:
        """The model's provider is down or refuses every request (not this story's
        fault): the story is left ``interrupted``, as after a stop, its rounds, trace and
        spend kept, and its record says which provider and why; the next run resumes it
        mid-round. The daemon holds the provider's stories back meanwhile (hero.breaker)."""
        state = self.state
        state.status = Status.INTERRUPTED
        state.phase = ""
        state.outage = {
            "provider": exc.provider,
            "kind": exc.kind,
            "reason": exc.reason,
            "error": str(exc),
        }
        what = "refuses hero's requests" if exc.kind == "permanent" else "is unavailable"
        self.events.stop(StopReason.OUTAGE, str(exc), provider=exc.provider, kind=exc.kind)
        self.say(
            f"{self.key}: paused in round {state.current_round}: model provider "
            f"'{exc.provider}' {what}: {exc}"
        )

    def _save(self) -> None:
        """Write the run record, its usage the story's so far (see hero.budget.Meter)."""
        with self._save_lock:
            if self._frozen:
                return
            if self.state.status != Status.RUNNING:  # stopped: a round cut short counts
                self.state.close_open_round(time.time())
            self.state.record_usage(self.meter.spent())
            save_state(self.home, self.state, self.redactor)
            self._saved_at = time.monotonic()
        if self.on_save is not None:
            self.on_save()

    def _stop_at_budget(self, exc: BudgetExceeded) -> None:
        """A budget is used up (checked before each model call): the story ends
        ``budget_exceeded`` naming it, with the worker's uncommitted work committed."""
        try:
            self.workspace.keep_leftovers(self.state, "left when a budget ran out")
        except GitError as err:  # the next run keeps what is left, as after any stop
            self.say(f"{self.key}: could not commit the work left: {err}")
        self._finish(Status.BUDGET_EXCEEDED)
        self.state.error = str(exc)
        self.events.stop(StopReason.BUDGET, str(exc), setting=exc.key)
        self.state.budget = exc.key
        self.say(
            f"{self.key}: {exc}; its commits are kept on {self.branch}. Raise {exc.key} in "
            f"config/roles.yaml and run `hero retry {self.key}` to continue"
        )

    def _stop_cancelled(self, exc: StoryCancelled) -> None:
        """Cancelled from outside (see hero.cancel): the story ends ``cancelled`` with the
        reason, the worker's uncommitted work committed, its file out of the inbox."""
        try:
            self.workspace.keep_leftovers(self.state, "left when the story was cancelled")
        except GitError as err:
            self.say(f"{self.key}: could not commit the work left: {err}")
        mark_cancelled(self.home, self.state, None, str(exc))
        self.events.stop(StopReason.CANCELLED, str(exc))
        self.say(f"{self.key}: {exc}; its commits are kept on {self.branch}")

    def _pass(self, n: int) -> None:
        state = self.state
        self._finish(Status.PASSED)
        # Record first, then move: a crash in between leaves a passed state whose file is
        # still in the inbox, which finish_done_move() completes.
        src = Path(state.story_path)
        swapped = _swapped(src, self.story.path, self._story_file_id)
        if swapped:  # not the file hero read: it stays where it is, unread, unmoved
            self.say(f"{self.key}: {src} {swapped}; left where it is")
        else:
            state.story_path = str(done_path_for(self.home, src, self.ref))
        self._save()
        if not swapped:
            move_story_file(src, Path(state.story_path))
        self.say(f"{self.key}: passed in round {n}; branch {self.branch}")

    def _leave_feedback(self, record: Round) -> None:
        """Append the round's feedback to the story file, for the user and the next round."""
        story_file = Path(self.state.story_path)
        if story_file.exists():  # the user may have taken it away meanwhile
            # only into the very file hero read: never through a link swapped in for it
            expect = self._story_file_id if story_file == self.story.path else None
            try:
                written = write_feedback(story_file, record.round, record.feedback, expect=expect)
            except StoryFileChanged as exc:
                self.say(f"{self.key}: feedback of round {record.round} not written: {exc}")
            else:
                self._story_file_id = written.file_id
                self.state.story_digest = file_digest(story_file)
        self._save()


def _failure(exc: Exception) -> str:
    """What the run record says of an error in FAILURES."""
    return next(say + str(exc) for kind, say in FAILURES if isinstance(exc, kind))


def _swapped(path: Path, read: Path, file_id: tuple[int, int] | None) -> str:
    """How the story file at ``path`` is no longer the one hero read at ``read`` (its
    ``file_id``): "" if it is, or if hero cannot tell (a file it read through a link, or
    another path)."""
    if file_id is None or path != read:
        return ""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    if stat.S_ISLNK(st.st_mode):
        return "is now a symlink"
    if (st.st_dev, st.st_ino) != file_id:
        return "is a different file than the one hero read"
    return ""


def _round_record(
    n: int,
    started: float,
    result: AgentResult,
    verify: VerifyResult,
    verdict: Verdict,
    head_sha: str,
    feedback: str,
) -> Round:
    """Round ``n`` as the run record keeps it."""
    return Round(
        round=n,
        started_at=started,
        duration_s=round(time.time() - started, 3),
        worker=WorkerOutcome(
            turns=result.turns,
            tool_calls=result.tool_calls,
            tokens_in=result.tokens_in,
            tokens_out=result.tokens_out,
            stop_reason=result.stop_reason,
            detail=result.detail,
            summary=result.final_message[-2000:],
        ),
        verify=verify.to_dict(),
        review=ReviewRecord(
            verdict=verdict.verdict,
            summary=verdict.summary,
            short_circuited=verdict.short_circuited,
            malformed=verdict.malformed,
            ac_check=verdict.ac_check,
            comments=verdict.comments,
        ),
        head_sha=head_sha,
        feedback=feedback,
    )


def _reasons(problems: list[str]) -> str:
    """Why a round fails, as one verdict summary."""
    if len(problems) == 1:
        return problems[0]
    return "the round failed for these reasons:\n" + "\n".join(f"- {p}" for p in problems)


def _feedback_text(verdict: Verdict, verify: VerifyResult) -> str:
    text = verdict.feedback()
    failures = verify.failures()
    if failures:
        text += "\n\nVerifier failures:\n\n" + failures
    return text


def done_path_for(home: Path, src: Path, ref: StoryRef | None = None) -> Path:
    """Where a passed story's file goes: ``done/<name>`` (``done/<plan>/<name>`` for a
    plan's story), numbered if the name is taken."""
    done = ref.done_dir(home) if ref is not None else home / "done"
    if src.parent.resolve() == done.resolve():
        return src
    dest = done / src.name
    n = 1
    while dest.exists():
        n += 1
        dest = done / f"{src.stem}.{n}{src.suffix}"
    return dest


def move_story_file(src: Path, dest: Path) -> None:
    if src == dest or not src.exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        # link + unlink, not rename: a rename out of a watched inbox is an unpaired move
        # that watchdog holds back for half a second, delaying every event behind it.
        os.link(src, dest)
        os.unlink(src)
    except OSError:  # another filesystem, or no hard links
        shutil.move(str(src), dest)


def finish_done_move(state: RunState, path: Path) -> bool:
    """A crash between recording `passed` and moving the story file leaves the file in the
    inbox. If ``path`` is that very file (same content as when it passed), move it now."""
    dest = Path(state.story_path)
    if (
        state.status != Status.PASSED
        or not state.story_digest
        or path.resolve() == dest.resolve()
        or dest.exists()
        or file_digest(path) != state.story_digest
    ):
        return False
    move_story_file(path, dest)
    return True
