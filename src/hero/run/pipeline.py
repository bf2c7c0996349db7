"""The round loop for one story: Worker -> rescue commit -> Verifier -> Reviewer, until done.

State is saved after every step, so a crash or Ctrl-C at any point leaves a record the
next run resumes from: the finished rounds are kept, the unfinished one is run again, and
the branch's commits are never thrown away. Where a run starts (resumed, or afresh on its
base) is hero.run.start's; the story's own repository and its sandboxes are
hero.run.workspace's; hero's git at the end of each phase is hero.git.phases'.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from hero.agent.loop import AgentResult, run_agent
from hero.agent.replay import Replayed, Unreplayable, replay_round, round_start_fields
from hero.agent.window import Context, ContextOverflow, window_for
from hero.config.home import Config
from hero.errors import Interrupted
from hero.git.guard import Guard
from hero.git.ops import GitError, TargetRepo
from hero.git.phases import PhaseEnd
from hero.llm.client import LlmError, Model, ModelOutage
from hero.llm.models import models_record
from hero.llm.usage import estimate_text
from hero.locks import StoryBusy as StoryBusy  # re-exported: callers catch it from here
from hero.memory.recall import Recalled, recall_for
from hero.redact import RedactingModel, Redactor
from hero.roles.prompting import PromptError
from hero.roles.reviewer import APPROVED, Looking, Verdict, review_commits, short_circuit
from hero.roles.verifier import VerifyResult, run_verify
from hero.roles.worker import build_messages, condense_prompt
from hero.run.baseline import worker_note
from hero.run.budget import BudgetExceeded, Meter
from hero.run.cancel import StoryCancelled, cancel_at_start
from hero.run.cancel import check as check_cancelled
from hero.run.environment import SetupFailed
from hero.run.events import EventSink, StopReason, StoryEvents, run_result
from hero.run.keepup import UPDATED, KeepUp, update_rounds
from hero.run.record import RunRecord, finish_done_move
from hero.run.revision import landed, revision_of, run_limits, run_locks
from hero.run.start import RunStart, write_error_log
from hero.run.workspace import Progress as Progress  # re-exported: hero.run.launch
from hero.run.workspace import Workspace
from hero.sandbox.bwrap import SandboxUnavailable
from hero.state import (
    ReviewRecord,
    Round,
    RunState,
    StateError,
    Status,
    WorkerOutcome,
)
from hero.story.format import parse_story
from hero.story.record import Story, VerifyTier
from hero.trace import Trace

#: The errors that end a story in ``error``, and what its record says before the message.
FAILURES: tuple[tuple[type[Exception], str], ...] = (
    (ContextOverflow, "context window: "),  # a model error, said as the window's
    (LlmError, "model error: "),
    (GitError, "git error: "),
    (PromptError, "prompt template error: "),
    (SandboxUnavailable, ""),
    (SetupFailed, ""),
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
    with ``outage`` set when its model's provider failed (hero.llm.client.ModelOutage); raises
    Interrupted/KeyboardInterrupt when stopped (after saving state ``interrupted``),
    StoryError for an invalid story. ``events``: the stream its events go to (hero.run.events)."""
    story = parse_story(story_path)
    run = StoryRun(
        story, config, worker_model, reviewer_model, repo, progress, cancel, events=events
    )
    return run.run()


@dataclass(frozen=True)
class RunHooks:
    """What an engine adds to a story's run, given when the run is made."""

    on_save: Callable[[RunState], None] | None = None
    """Called with the record after each save of it (the Celery engine publishes it then,
    so that a step is done, for any other machine, before the next one starts; the daemon
    shows the progress)."""
    on_start: Callable[[StoryEvents], None] | None = None
    """Called with the story's events right after ``run_start`` (`hero watch` says there
    which running stories' scopes overlap the story's: hero.daemon.overlap)."""
    on_turn_end: Callable[[StoryRun], None] | None = None
    """Called after each worker turn, between two of its commands (the Celery engine
    snapshots the worktree then: hero.engine.wip)."""
    on_resume: Callable[[StoryRun, int], str] | None = None
    """Called before round ``n``, stopped mid-conversation, goes on: may put work back into
    the worktree; returns what the restart note says of the worktree ("": the default, the
    worktree as the stop left it)."""
    recalled: Recalled | None = None
    """What the repository's memory tells this story, when it was recalled elsewhere (the
    Celery engine's coordinator, which keeps the memory, sends it); None: read from this
    home's memory at each round's start (hero.memory.recall)."""
    learns: bool = True
    """Whether the story's end teaches the home's memory: not on a `hero worker`, whose
    coordinator learns from the record it publishes (hero.engine.remote)."""


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
        hooks: RunHooks = RunHooks(),
    ) -> None:
        #: what a follow-up revises (hero.run.revision); None for any other story
        self.revision = revision_of(story, config)
        self.story = story = self.revision.story if self.revision is not None else story
        self.max_retries, budgets = run_limits(story, config)
        self.config = config
        self.home = config.home
        self.worker_model = worker_model
        self.reviewer_model = reviewer_model
        self.repo = repo or TargetRepo(config.target_repo)
        self.hooks = hooks
        # every secret hero knows, out of all it writes and sends (see hero.redact)
        self.redactor = redactor = Redactor(config.secrets)
        say = progress or (lambda _msg: None)
        self.say: Progress = (lambda msg: say(redactor.redact(msg))) if redactor else say
        self.cancel = cancel
        self.ref = story.ref
        self.key = self.ref.key  # what the user reads: the id, or <plan>/<id>
        self.branch = self.revision.branch if self.revision is not None else self.ref.branch
        self.run_dir = self.ref.run_dir(self.home)
        #: the story's events (`--events`), redacted as all it writes; none without a sink
        self.events = StoryEvents(events, self.key, redactor)
        #: the story's own repository at worktrees/<id>, its sandboxes, hero's git in it
        self.workspace = Workspace(story, config, self.repo, redactor, self.say, branch=self.branch)
        self.start = RunStart(
            story, config, self.repo, self.workspace, redactor, self.say, self.revision
        )
        #: the run record, saved after every step, and the meter of the story's spend
        self.record = RunRecord(
            story,
            self.home,
            lambda state, counted: Meter(budgets, state, on_count=counted),
            self.events,
            redactor,
            self.say,
            hooks.on_save,
        )
        #: the branch brought up to date with its target before the story passes
        self.keep_up = KeepUp(config, self.workspace, self.start, self.events, self.say)

    @property
    def state(self) -> RunState:
        return self.record.state

    @property
    def meter(self) -> Meter:
        return self.record.meter

    def force_interrupted(self) -> None:
        self.record.force_interrupted()

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> RunState:
        started = time.monotonic()
        self.events.run_start(
            story_id=self.story.id, plan=self.story.plan, file=self.story.path, branch=self.branch
        )
        if self.hooks.on_start is not None:
            self.hooks.on_start(self.events)
        shown: RunState | None = None  # what the result says, when not this run's record
        try:
            # The home's lock (one process per home), then the repository's (one home per
            # repository): either refuses with StoryBusy, before anything is touched.
            with run_locks(self.home, self.repo, self.ref, self.revision):
                state = landed(self.revision, self.home, self._run())
                if self.record.ended and self.hooks.learns:  # under the story's locks: final
                    from hero.roles.learner import learn_story  # what the story taught

                    learn_story(state, self.story, self.config, cancel=self.cancel, say=self.say)
                return state
        except StoryBusy as exc:
            self.events.error(str(exc))
            if self.events:
                shown = self.record.as_refused(str(exc))
            raise
        finally:  # the last event of the story, whatever ended it
            if self.events:
                took = time.monotonic() - started
                self.events.result(run_result(shown or self.state, self.home, took))

    def _run(self) -> RunState:
        try:
            self.workspace.end_leftovers()  # before any git call on the story
            check_cancelled(self.home, self.ref)  # cancelled meanwhile: not started at all
            state = self._start()
        except StoryCancelled as exc:
            self.record.state = cancel_at_start(self.home, self.ref, self.story.path, str(exc))
            self.events.stop(StopReason.CANCELLED, str(exc))
            self.say(f"{self.key}: {self.state.error or self.state.status}")
            return self.state
        except (KeyboardInterrupt, Interrupted, StateError):
            raise  # a run record hero cannot read is the user's to move aside: never overwritten
        except Exception as exc:  # noqa: BLE001 - a story that cannot start ends in error, once
            return self.record.start_failed(self.start.failed(exc))
        max_rounds = state.max_rounds(self.max_retries)
        tiers = self.start.tiers()
        try:
            if state.status == Status.PASSED:
                self.say(f"{self.key}: already passed on {state.branch}; nothing to do")
                return state
            env = self.workspace.prepare(state)
            _before_round_1(self, state, env, tiers)
            passed = self.keep_up.retried(state)  # the last round passed its review
            while True:
                update: dict[str, Any] = {}  # the round after a pass: the branch updated
                if passed:
                    update = self.keep_up.next(state) or {}
                    if not update:
                        self.record.passed(state.rounds[-1].round)
                        return state
                elif len(state.rounds) >= max_rounds + update_rounds(state):
                    break  # rounds that check an update are not counted (hero.run.keepup)
                record = self._round(len(state.rounds) + 1, max_rounds, tiers, env, update)
                state.rounds.append(record)
                self.events.round_end(asdict(record))
                if update.get("conflict") and (why := self.keep_up.unresolved(state, record)):
                    self.record.conflict(why)
                    return state
                passed = record.review.verdict == APPROVED
                if not passed:
                    self.record.leave_feedback(record)
            self.record.finish(Status.GAVE_UP)
            self.events.stop(
                StopReason.GAVE_UP,
                f"no round passed in {len(state.rounds)} round(s)",
                setting="max_retries",
            )
            self.say(f"{self.key}: gave up after {len(state.rounds)} round(s)")
        except ModelOutage as exc:
            self.record.pause(exc)
        except (LlmError, GitError, PromptError, SandboxUnavailable, SetupFailed) as exc:
            self.record.fail(_failure(exc))
        except BudgetExceeded as exc:
            self._keep_leftovers("left when a budget ran out")
            self.record.at_budget(exc)
        except StoryCancelled as exc:
            self._keep_leftovers("left when the story was cancelled")
            self.record.cancelled(exc)
        except (KeyboardInterrupt, Interrupted):
            self.record.interrupted()
            raise
        except Exception as exc:  # noqa: BLE001 - record, keep the trace, never lose state
            write_error_log(self.run_dir, self.redactor)
            self.record.fail(
                f"internal error: {type(exc).__name__}: {exc} (see runs/{self.ref.rel}/error.log)"
            )
        self.record.save()
        return state

    def _start(self) -> RunState:
        """The run record to go on with (see hero.run.start), saved; a story that passed
        is left as it is, its file moved to done/ if a crash kept it in the inbox."""
        state = self.record.take(self.start.state())
        state.outage = {}  # a pause on an outage is over once the story runs again
        if state.status != Status.PASSED:  # the models this run uses (the story's, if any)
            state.models = models_record(self.config)
        state.budget = ""  # so is a stop on a budget: the run says again if one is used up
        if state.status == Status.PASSED:
            finish_done_move(state, self.story.path)
        else:
            self.record.save()
        return state

    # -- one round: work -> rescue -> check (verify, review) -> record --------------------

    def _round(
        self,
        n: int,
        max_rounds: int,
        tiers: tuple[VerifyTier, ...],
        env: dict[str, str],
        update: dict[str, Any],
    ) -> Round:
        started = time.time()
        self.meter.start_round(n, started)
        self.state.round_started_at = started
        self.state.current_round = n
        self.record.phase("worker", f"round {n}/{max_rounds}: worker", self.cancel)
        trace_path = self.run_dir / f"round-{n}.jsonl"
        messages, replayed, unreplayable = (
            ([], None, "")  # a round that checks an update: no worker, no conversation
            if update and not update.get("conflict")
            else self._conversation(n, max_rounds, tiers, trace_path)
        )
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
            if replayed is not None and not replayed.done and self.hooks.on_resume is not None:
                # before the guard: its start is the tip
                replayed.worktree = self.hooks.on_resume(self, n)
            guard = self.workspace.git.watch(self.state.head_sha if update else self.state.built_on)
            if update and not update.get("conflict"):  # the update to check: no worker
                result = AgentResult(stop_reason=UPDATED)
            elif replayed is not None and replayed.done:
                result = AgentResult.from_replay(replayed)
                if replayed.ended is None:
                    trace.agent_end(result.end_event())
                self.say(f"round {n}: the worker had finished before the stop; checking its work")
            else:
                result = _work(self, messages, env, trace, guard, replayed)
            problems = self._rescue_round(n, result, guard)
            verify, verdict = self._check(n, result, problems, tiers, env, trace, guard)
            trace.verdict(verdict.to_dict())
        self.say(f"round {n}: {verdict.verdict}: {verdict.summary}")
        self.state.head_sha = self.repo.branch_sha(self.branch) or self.state.head_sha
        feedback = self.redactor.redact(_feedback_text(verdict, verify))
        record = _round_record(n, started, result, verify, verdict, self.state.head_sha, feedback)
        return replace(record, update=update)

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
        last = rounds[-1].feedback if rounds else ""
        first = build_messages(
            self.story,
            tiers,
            self.workspace.path,
            round_no=n,
            max_rounds=max_rounds,
            **(self.revision.worker_feedback(last) if self.revision else {"feedback": last}),
            home=self.home,
            builds_on=self.start.builds_on(),
            # once, at the round's start: every turn of the round sends these same first
            # messages (a resumed round replays them from its trace, above)
            memory=self._recall().section,
            baseline=worker_note(self.state.baseline),
        )
        return first, None, why

    def _recall(self, *, facts: bool = True) -> Recalled:
        """What the repository's memory tells the story now (see hero.memory.recall);
        ``facts=False``: its recap alone."""
        if self.hooks.recalled is not None:
            return self.hooks.recalled
        return recall_for(
            self.config, self.story, estimate=estimate_text, say=self.say, facts=facts
        )

    def _turn_done(self, _result: AgentResult) -> None:
        """Between two turns: the engine's hook, the record (its round's time) saved now
        and then, and a cancellation seen before the next model call."""
        if self.hooks.on_turn_end is not None:
            self.hooks.on_turn_end(self)
        self.record.save_now_and_then()
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
        self.record.phase("verify", f"round {n}: verify", self.cancel)
        guard.watch(self.state.head_sha)  # the checks may not move refs either
        verify = run_verify(
            tiers,
            self.workspace.path,
            timeout_s=self.config.verify_timeout_ms / 1000,
            env=env,
            log_path=self.run_dir / f"verify-r{n}.log",
            cancel=self.cancel,
            redact=self.redactor,
            sandbox=self.workspace.verify_refit(),
            on_command=lambda check: self.events.verify_command(asdict(check)),
            baseline=_before(self.state.baseline),
        )
        trace.verify(verify.to_dict())
        self.say(f"round {n}: verify {'passed' if verify.passed else 'FAILED'}")
        problems = self._ended(n, self.workspace.git.end_checks(guard))
        if problems:
            return verify, short_circuit(_reasons(problems))
        if not verify.passed:
            failed = [c.command for c in verify.commands if c.exit_code != 0]
            return verify, short_circuit("verification failed: " + "; ".join(failed))
        self.record.phase("review", f"round {n}: review", self.cancel)
        with self.workspace.own_git():  # the reviewer's git_log / git_show: in the sandbox
            verdict = self._review(n, verify, env, trace)
        return verify, verdict

    def _review(self, n: int, verify: VerifyResult, env: dict[str, str], trace: Trace) -> Verdict:
        """The reviewer's verdict; the MCP servers its tools name run for the review only."""
        with self.workspace.looking(env, self.cancel, trace=trace, say=self.say) as looking:
            return self._verdict(n, verify, trace, looking)

    def _verdict(
        self, n: int, verify: VerifyResult, trace: Trace, looking: Looking | None
    ) -> Verdict:
        return review_commits(
            RedactingModel(self.meter.wrap(self.reviewer_model), self.redactor),
            self.revision.for_review(self.story) if self.revision else self.story,
            repo=self.repo.path,  # the user's repository, where hero brought the commits
            base_sha=self.state.base_sha,
            tip=self.state.head_sha,
            round_no=n,
            branch=self.branch,
            verify_summary=verify.summary(),
            home=self.home,
            trace=trace,
            recap=self._recall(facts=False).recap,
            build_output=self.config.project.build_output,
            looking=looking,
        )

    # -- the end -----------------------------------------------------------------------

    def _keep_leftovers(self, why: str) -> None:
        """Commit the worker's uncommitted work, as a run that stops for good does."""
        try:
            self.workspace.keep_leftovers(self.state, why)
        except GitError as err:  # the next run keeps what is left, as after any stop
            self.say(f"{self.key}: could not commit the work left: {err}")


def _work(
    run: StoryRun,
    messages: list[dict[str, Any]],
    env: dict[str, str],
    trace: Trace,
    guard: Guard,
    replayed: Replayed | None,
) -> AgentResult:
    """The worker's turn, watched by ``guard``. A turn stopped midway still has the
    user's refs put back; the rest waits for the round to go on (from its trace)."""
    ctx = run.workspace.tool_context(env, run.cancel)
    try:
        try:
            with run.workspace.mcp_for("worker", ctx, trace=trace, say=run.say) as external:
                tools = run.workspace.toolset("worker", external)
                context = Context(
                    window_for(run.config, "worker"),
                    tools.schemas(),
                    head=replayed.head if replayed is not None else len(messages),
                    render_summary_prompt=condense_prompt(run.home),
                )
                return run_agent(
                    run.meter.wrap(run.worker_model),
                    messages,
                    ctx,
                    run.config.worker_limits,
                    trace,
                    context=context,
                    resume=replayed,
                    on_condense=lambda what: run.say(f"{run.key}: {what}"),
                    on_turn=run._turn_done,
                    tools=tools,
                )
        finally:
            run.workspace.end_sandbox(ctx)
    except BaseException:
        try:
            for line in run.workspace.git.after_stop(guard).problems:
                run.say(f"{run.key}: {line}")
        except GitError as exc:
            run.say(f"{run.key}: could not check the repository after the stop: {exc}")
        raise


def _before_round_1(
    run: StoryRun, state: RunState, env: dict[str, str], tiers: tuple[VerifyTier, ...]
) -> None:
    """The project's environment (``setup``), then, once per story, its checks on the
    commit it starts from (the baseline); each in the run record and the events."""
    if run.config.project.setup or run.story.setup:
        run.record.phase("setup", f"{run.key}: setup", run.cancel)
    state.setup = run.workspace.set_up(state, env, run.cancel) or state.setup
    if state.setup:
        run.events.setup(state.setup)
    if tiers and run.config.project.baseline and not state.rounds and not state.baseline:
        run.record.phase("baseline", f"{run.key}: the checks before any change", run.cancel)
        state.baseline = run.workspace.baseline(tiers, env, run.cancel)
        run.events.baseline(state.baseline)
    run.record.save()


def _before(baseline: dict[str, Any]) -> dict[str, bool]:
    """command -> whether it passed on the starting commit, for the checks that ran."""
    return {
        str(c.get("command")): bool(c["passed"])
        for c in baseline.get("checks", [])
        if c.get("passed") is not None
    }


def _failure(exc: Exception) -> str:
    """What the run record says of an error in FAILURES."""
    return next(say + str(exc) for kind, say in FAILURES if isinstance(exc, kind))


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
