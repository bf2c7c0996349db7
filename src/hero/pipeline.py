"""The round loop for one story: Worker -> rescue commit -> Verifier -> Reviewer, until done.

State is saved after every step, so a crash or Ctrl-C at any point leaves a record the
next run resumes from: the finished rounds are kept, the unfinished one is run again, and
the branch's commits are never thrown away.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hero.agent.context import Context, ContextOverflow, Window
from hero.agent.loop import AgentResult, Model, run_agent
from hero.agent.replay import Replayed, Unreplayable, replay_round, round_start_fields
from hero.agent.tools import ToolContext, tool_schemas
from hero.agent.tools.policy import Policy
from hero.agent.tools.scope import path_rules, undo_outside, unhide_outside
from hero.budget import BudgetExceeded, Meter
from hero.config import Config, context_limits
from hero.errors import HeroError, Interrupted
from hero.git.guard import (
    Guard,
    commit_of,
    push_refusals,
)
from hero.git.ops import (
    GitError,
    MergeConflict,
    TargetRepo,
    clear_stale_locks,
    commit_all,
    confined,
    diff_since,
    git,
    log_since,
    merge_heads,
)
from hero.git.phases import StoryGit
from hero.git.storyrepo import BringBackRefused, StoryRepo
from hero.github.defang import commit_message_rule
from hero.llm import LlmError
from hero.locks import StoryBusy as StoryBusy  # re-exported: callers catch it from here
from hero.locks import story_lock as _story_lock
from hero.names import StoryRef
from hero.prompting import PromptError
from hero.redact import RedactingModel, Redactor
from hero.roles.reviewer import APPROVED, Verdict, review, short_circuit
from hero.roles.verifier import (
    MODEL_VERIFY_HINT,
    VerifyResult,
    model_verify_tiers,
    policy_problems,
    run_verify,
)
from hero.roles.worker import build_messages, condense_prompt
from hero.runner import RUN_MARKER, child_env, kill_marked
from hero.sandbox import Sandbox, SandboxUnavailable
from hero.sandbox import resolve as resolve_sandbox
from hero.sandbox_session import SandboxSession
from hero.state import (
    RESUMABLE,
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

Progress = Callable[[str], None]
#: During the worker's turn the run record (and its usage) is saved at most this often.
USAGE_SAVE_S = 1.0


def run_story(
    story_path: Path,
    config: Config,
    worker_model: Model,
    reviewer_model: Model,
    *,
    repo: TargetRepo | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> RunState:
    """Run one story to passed, gave_up, budget_exceeded or error; raises
    Interrupted/KeyboardInterrupt when stopped (after saving state ``interrupted``),
    StoryError for an invalid story."""
    story = parse_story(story_path)
    run = StoryRun(story, config, worker_model, reviewer_model, repo, progress, cancel)
    return run.run()


class StartError(HeroError):
    """A story that cannot start as it stands (say, its base_ref names no commit)."""


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
        self.worktree = self.ref.worktree(self.home)
        # the story's own repository at worktrees/<id>; its submodules' URLs are the user's
        self._story_file_id = story.file_id  # the story file as hero read it
        # a story from a GitHub issue: its commits close no other issue and mention no one
        self.story_repo = StoryRepo(
            self.repo,
            self.worktree,
            self.branch,
            self._user_base(),
            messages=commit_message_rule(story.source),
        )
        #: hero's git at the end of each phase (see hero.git.phases)
        self.story_git = StoryGit(
            self.repo,
            self.story_repo,
            secrets=self.redactor,
            tidy=self._tidy,
        )
        self.run_dir = self.ref.run_dir(self.home)
        self.state = RunState(id=story.id, plan=story.plan)
        self._usage_base: dict[str, Any] = {}
        self._save_lock = threading.Lock()
        self._saved_at = 0.0  # time.monotonic() of the last save
        #: called after each save of the record (the Celery engine publishes it then, so
        #: that a step is done, for any other machine, before the next one starts)
        self.on_save: Callable[[], None] | None = None
        self._frozen = False
        # where the worker's and the checks' commands run; set by _prepare_worktree
        self.worker_sandbox: Sandbox | None = None
        self.verify_sandbox: Sandbox | None = None
        #: where hero's own git walks the story's repository at a phase's end
        self.git_sandbox: Sandbox | None = None
        self._warned: set[str] = set()  # warnings said in this run
        self.meter = Meter(config.budgets, self.state)  # remade once the record is loaded

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> RunState:
        # The home's lock (one process per home), then the repository's (one home per
        # repository): either refuses with StoryBusy, before anything is touched.
        with _story_lock(self.home, self.ref), self.repo.story_lock(self.ref, self.home):
            return self._run()

    def force_interrupted(self) -> None:
        with self._save_lock:
            if self._frozen or self.state.status != Status.RUNNING:
                return
            self.state.status = Status.INTERRUPTED
            self.state.phase = ""
            save_state(self.home, self.state, self.redactor)
            self._frozen = True

    def _run(self) -> RunState:
        story = self.story
        try:
            self._end_leftovers()  # before any git call on the story
            state = self._start()
        except (KeyboardInterrupt, Interrupted, StateError):
            raise  # a run record hero cannot read is the user's to move aside: never overwritten
        except Exception as exc:  # noqa: BLE001 - a story that cannot start ends in error, once
            return self._start_failed(exc)
        max_rounds = state.max_rounds(story.max_retries or self.config.max_retries)
        tiers = self._tiers()
        self.meter = Meter(self.config.budgets, state)
        try:
            if state.status == Status.PASSED:
                self.say(f"{self.key}: already passed on {state.branch}; nothing to do")
                return state
            env = self._prepare_worktree()
            while len(state.rounds) < max_rounds:
                record = self._round(len(state.rounds) + 1, max_rounds, tiers, env)
                state.rounds.append(record)
                if record.review.verdict == APPROVED:
                    self._pass(record.round)
                    return state
                self._leave_feedback(record)
            self._finish(Status.GAVE_UP)
            self.say(f"{self.key}: gave up after {len(state.rounds)} round(s)")
        except ContextOverflow as exc:
            self._fail(f"context window: {exc}")
        except LlmError as exc:
            self._fail(f"model error: {exc}")
        except GitError as exc:
            self._fail(f"git error: {exc}")
        except PromptError as exc:
            self._fail(f"prompt template error: {exc}")
        except SandboxUnavailable as exc:
            self._fail(str(exc))
        except BudgetExceeded as exc:
            self._stop_at_budget(exc)
        except (KeyboardInterrupt, Interrupted):
            state.status = Status.INTERRUPTED
            state.phase = ""
            self._save()
            self.say(f"{self.key}: interrupted in round {state.current_round}; run again to resume")
            raise
        except Exception as exc:  # noqa: BLE001 - record, keep the trace, never lose state
            self._write_error_log()
            self._fail(
                f"internal error: {type(exc).__name__}: {exc} (see runs/{self.ref.rel}/error.log)"
            )
        self._save()
        return state

    def _start_failed(self, exc: Exception) -> RunState:
        """A story that cannot start ends in ``error`` with a one-line reason, its run record
        (rounds, usage) kept: like any error it waits for an edit of its file or
        `hero retry`, and is never tried again and again. Only an unexpected exception (a
        bug) writes ``runs/<id>/error.log``."""
        story = self.story
        if isinstance(exc, StartError):
            message = str(exc)
        elif isinstance(exc, GitError):
            message = f"git error: {exc}"
        elif isinstance(exc, OSError):
            message = f"could not start: {exc}"
        else:
            self._write_error_log()
            message = (
                f"internal error while starting: {type(exc).__name__}: {exc} "
                f"(see runs/{self.ref.rel}/error.log)"
            )
        state = load_state(self.home, self.ref) or RunState(id=story.id, plan=story.plan)
        if state.status == Status.PASSED:
            raise exc  # a story that passed stays passed
        state.grant_fresh_budget()  # the start that failed was to give it new rounds
        state.status = Status.ERROR
        state.phase = ""
        state.error = " ".join(message.split())
        state.title = story.title
        state.story_path = str(story.path)
        state.finished_at = time.time()
        state.story_digest = file_digest(story.path)
        state.runs += 1
        self.state = state
        self._usage_base = dict(state.usage)
        self._save()
        self.say(f"{self.key}: error: {state.error}")
        return state

    def _user_base(self) -> str:
        """The user's ref this story starts from (for a story with dependencies, the one it
        would start from without them): where submodule URLs are read."""
        return self.story.base_ref or self.config.target_base_ref or "HEAD"

    def _base_sha(self, base_ref: str) -> str:
        """The commit ``base_ref`` names; StartError naming the setting it came from if none."""
        spec = f"{base_ref}^{{commit}}"
        sha = git(self.repo.path, "rev-parse", "--verify", "--quiet", spec, check=False).strip()
        if sha:
            return sha
        if self.story.base_ref:
            where = "base_ref"
        elif self.config.target_base_ref:
            where = "target_base_ref (config/roles.yaml)"
        else:
            where = "the repository's current branch"
        raise StartError(f"{where} '{base_ref}' is not a branch, tag or commit in {self.repo.path}")

    def _dependencies(self) -> list[StoryRef]:
        return [StoryRef(self.story.plan, dep) for dep in self.story.depends_on]

    def _dependency_base(self) -> tuple[str, str] | None:
        """``(base_ref, base_sha)`` for a story with dependencies, else None: code flows along
        the DAG's edges. One dependency: the head it passed with. Several: a merge of those
        (a new commit; no worktree or ref changes). StartError when a dependency has not
        passed, its branch is gone, or the branches conflict (naming the files)."""
        deps = self._dependencies()
        if not deps:
            return None
        heads: list[tuple[str, str]] = []
        for dep in deps:
            try:
                state = load_state(self.home, dep)
            except StateError as exc:
                raise StartError(
                    f"depends on '{dep.key}', whose run record is unreadable: {exc}"
                ) from exc
            if state is None or state.status != Status.PASSED:
                status = state.status if state is not None else "not run yet"
                raise StartError(
                    f"depends on '{dep.key}', which has not passed ({status}); "
                    "it can start once every story it depends on has passed"
                )
            # the head that passed, as hero recorded it: a branch tip can be moved by anyone
            # (another story's worker, say) after the review, the record cannot
            sha = commit_of(self.repo.path, state.head_sha) if state.head_sha else ""
            sha = sha or self.repo.branch_sha(dep.branch) or ""
            if not sha:
                raise StartError(
                    f"depends on '{dep.key}', which passed, but its branch {dep.branch} is "
                    "gone and its recorded head is no commit here"
                )
            heads.append((dep.branch, sha))
        if len(heads) == 1:
            return heads[0]
        names = ", ".join(branch for branch, _ in heads)
        try:
            sha = merge_heads(
                self.repo.path,
                heads,
                f"hero: merge {names} for {self.key}",
                self.repo.identity_env(),
            )
        except MergeConflict as exc:
            raise StartError(f"cannot start from its dependencies: {exc}") from exc
        return f"merge of {names}", sha

    def _builds_on(self) -> str:
        """What the worker is told of the stories whose work its branch starts from."""
        lines = []
        for dep in self._dependencies():
            try:
                state = load_state(self.home, dep)
            except StateError:
                state = None
            title = f": {state.title}" if state is not None and state.title else ""
            lines.append(f"- {dep.key}{title} (branch {dep.branch})")
        return "\n".join(lines)

    def _tiers(self) -> tuple[VerifyTier, ...]:
        """The story's verify tiers, else the config's default commands as one tier. A
        plan's story's tiers a planner model wrote: only when ``model_verify`` is on."""
        default = self.config.default_verify
        if self.story.verify:
            if self.story.plan:
                return model_verify_tiers(self.config.safety, self.story.verify, default)
            return self.story.verify
        return (VerifyTier("default", default),) if default else ()

    def _check_model_verify(self) -> None:
        """A plan's story whose verify commands (a planner model wrote them) break the
        command policy does not start: StartError naming each, before any model call."""
        if not self.story.plan:
            return
        found = policy_problems(self.config.safety, self.story.verify)
        if found:
            raise StartError("; ".join(found) + f" ({MODEL_VERIFY_HINT})")

    def _end_leftovers(self) -> None:
        """Before any git call on the story: end the processes an earlier run left running
        (a run killed with SIGKILL cannot), then clear the git lock files left by a git that
        died with it (waiting for any that a live process holds)."""
        if kill_marked(self._marker()):
            self.say(f"{self.key}: ended processes left running by an earlier run")
        clear_stale_locks(self.repo, self.branch, self.worktree, self.say)

    def _marker(self) -> str:
        """The story's ``RUN_MARKER``: in the environment of every process run for it."""
        return self.ref.marker(self.home)

    def _prepare_worktree(self) -> dict[str, str]:
        """Lay out the story's repository (keeping what an earlier run left there) on the
        story branch; returns the children's env."""
        marker = self._marker()
        story_repo = self.story_repo
        with self.repo.locked():
            tip = self.repo.branch_sha(self.branch)
            if tip is None:
                tip = self.state.base_sha
                git(self.repo.path, "update-ref", f"refs/heads/{self.branch}", tip, "")
        existed = story_repo.exists()
        self._claim_branch()
        notes = story_repo.lay_out(tip)
        tip = self.repo.branch_sha(self.branch) or tip  # an earlier layout's work, kept on it
        self._confine()
        if existed:  # a run that crashed: keep what it left
            self._keep_leftovers()
            tip = self.repo.branch_sha(self.branch) or tip
        notes += story_repo.catch_up(tip)
        notes += story_repo.init_submodules()
        for note in notes:
            self.say(f"{self.key}: {note}")
        self._confine()  # again: the submodules' git directories are guarded too
        return child_env(
            allow=self.config.safety.pass_env,
            drop_names=self.config.key_env_names,
            secret_values=self.config.secrets,
            extra={**self.repo.identity_env(), RUN_MARKER: marker},
            git_config=push_refusals(self.repo.path),
        )

    def _confine(self) -> None:
        """Build the sandbox of the worker's and of the checks' commands (``sandbox`` in
        config/roles.yaml), once per run: ``auto`` without a working bwrap warns here, once;
        ``bwrap`` without one raises SandboxUnavailable, which ends the story in error."""
        safety = self.config.safety
        box = resolve_sandbox(
            safety.sandbox,
            worktree=self.worktree,
            objects=self.story_repo.objects_dir(),
            guarded=self.story_repo.guarded(),
            hide=(self.home, self.repo.path),
            limits=safety.limits,
            warn=self._warn_once,
        )
        self.worker_sandbox = box and box.with_network(safety.sandbox_network)
        self.verify_sandbox = box and box.with_network(safety.verify_network)
        self.git_sandbox = box and box.with_network(False)
        self.story_git.sandbox = self.git_sandbox.wrap if self.git_sandbox is not None else None

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.say(f"{self.key}: {message}")

    def _own_git(self) -> Any:
        """The block within which hero's own git in the story's repository runs in the
        sandbox (see ``hero.git.ops.confined``): at each phase's end."""
        box = self.git_sandbox
        return confined(self.worktree, box.wrap if box is not None else None)

    def _keep_leftovers(self, why: str = "found on resume") -> None:
        """After a run that crashed or was stopped: commit what it left (unless it holds
        unresolved conflicts) and put the worktree back on the branch."""
        end = self.story_git.keep_leftovers(
            self.state.head_sha,
            f"hero: keep uncommitted work {why} ({self.key})",
            self.state.base_sha,
        )
        self.state.head_sha = end.head or self.state.head_sha
        for line in (*end.notes, *end.problems):
            self.say(f"{self.key}: {line}")

    def _stop_at_budget(self, exc: BudgetExceeded) -> None:
        """A budget is used up (checked before each model call): the story ends
        ``budget_exceeded`` naming it, with the worker's uncommitted work committed."""
        try:
            self._keep_leftovers("left when a budget ran out")
        except GitError as err:  # the next run keeps what is left, as after any stop
            self.say(f"{self.key}: could not commit the work left: {err}")
        self._finish(Status.BUDGET_EXCEEDED)
        self.state.error = str(exc)
        self.say(
            f"{self.key}: {exc}; its commits are kept on {self.branch}. Raise {exc.key} in "
            f"config/roles.yaml and run `hero retry {self.key}` to continue"
        )

    def _pass(self, n: int) -> None:
        state = self.state
        self._finish(Status.PASSED)
        # Record first, then move: a crash in between leaves a passed state whose file is
        # still in the inbox, which finish_done_move() completes.
        src = Path(state.story_path)
        swapped = self._swapped(src)
        if swapped:  # not the file hero read: it stays where it is, unread, unmoved
            self.say(f"{self.key}: {src} {swapped}; left where it is")
        else:
            state.story_path = str(done_path_for(self.home, src, self.ref))
        self._save()
        if not swapped:
            move_story_file(src, Path(state.story_path))
        self.say(f"{self.key}: passed in round {n}; branch {self.branch}")

    def _swapped(self, path: Path) -> str:
        """How the story file at ``path`` is no longer the one hero read ("" if it is, or
        if hero cannot tell: a file it read through a link, or another path)."""
        if self._story_file_id is None or path != self.story.path:
            return ""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return ""
        if stat.S_ISLNK(st.st_mode):
            return "is now a symlink"
        if (st.st_dev, st.st_ino) != self._story_file_id:
            return "is a different file than the one hero read"
        return ""

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
        replayed, unreplayable = self._replay(n, trace_path)
        if replayed is not None:
            messages = replayed.messages
        else:
            messages = self._worker_messages(n, max_rounds, tiers)
        ctx = self._tool_context(env)
        with Trace(trace_path, redact=self.redactor) as trace:
            trace.event(
                "round_start",
                story=self.key,
                round=n,
                run=self.state.runs,
                branch=self.branch,
                **round_start_fields(self.state.base_sha, self.state.started_at),
                **({"resumed": True, "part": replayed.parts + 1} if replayed is not None else {}),
            )
            if unreplayable:
                trace.event("resume_failed", reason=unreplayable)
            guard = Guard(
                self.worktree, self.worktree, self.branch, self._built_on()
            )  # watched below
            if replayed is not None and replayed.done:
                result = AgentResult.from_replay(replayed)
                if replayed.ended is None:
                    trace.event("agent_end", **result.end_event())
                self.say(f"round {n}: the worker had finished before the stop; checking its work")
            else:
                result = self._work(messages, ctx, trace, guard, replayed)
            problems = self._rescue_round(n, result, guard)
            verify, verdict = self._check(n, result, problems, tiers, env, trace, guard)
            trace.event("verdict", **verdict.to_dict())
        self.say(f"round {n}: {verdict.verdict}: {verdict.summary}")
        self.state.head_sha = self.repo.branch_sha(self.branch) or self.state.head_sha
        return self._record(n, started, result, verify, verdict)

    def _replay(self, n: int, trace_path: Path) -> tuple[Replayed | None, str]:
        """The round's conversation so far, when an earlier run stopped in its middle
        (see hero.agent.replay); else None, and why a trace that was there could not be
        replayed (the round then starts over, as it always did)."""
        try:
            replayed = replay_round(
                trace_path, base_sha=self.state.base_sha, started_at=self.state.started_at
            )
        except Unreplayable as exc:
            self.say(f"round {n}: starts over: its trace cannot be replayed ({exc})")
            return None, str(exc)
        if replayed is not None and not replayed.done:
            self.say(
                f"round {n}: resumes at turn {replayed.turns + 1}, its conversation replayed "
                f"from the trace ({replayed.turns} turns, {replayed.tool_calls} tool calls)"
            )
        return replayed, ""

    def _context(self, head: int) -> Context:
        """The worker's context window (the provider's ``context_window``, the role's
        ``max_output_tokens``, the ``context_*`` knobs) for one round."""
        knobs = self.config.context
        if "worker" in self.config.roles:
            window, reserve = context_limits(self.config, "worker")
        else:  # a worker model handed in directly (tests, embedding)
            window, reserve = knobs.window_default, knobs.reserve_default
        return Context(
            Window(window, reserve, knobs.condense_at, knobs.keep_turns),
            tool_schemas(),
            head=head,
            render_summary_prompt=condense_prompt(self.home),
        )

    def _worker_messages(
        self, n: int, max_rounds: int, tiers: tuple[VerifyTier, ...]
    ) -> list[dict[str, Any]]:
        rounds = self.state.rounds
        return build_messages(
            self.story,
            tiers,
            self.worktree,
            round_no=n,
            max_rounds=max_rounds,
            feedback=rounds[-1].feedback if rounds else "",
            home=self.home,
            builds_on=self._builds_on(),
        )

    def _tool_context(self, env: dict[str, str]) -> ToolContext:
        limits = self.config.worker_limits
        return ToolContext(
            root=self.worktree,
            env=env,
            bash_timeout_s=limits.bash_timeout_s,
            max_bash_timeout_s=max(limits.bash_timeout_s, 1800.0),
            cancel=self.cancel,
            # safety (issue 9): each is set where its part is built; the round's commands
            # share one sandbox, made at the first and ended with the worker's turn (_work)
            sandbox=(
                None
                if self.worker_sandbox is None
                else SandboxSession(self.worker_sandbox, self.worktree)
            ),
            # the worker's commands only: the verify commands are the user's own
            policy=Policy.from_rules(
                allow=self.config.safety.allow_commands, deny=self.config.safety.deny_commands
            ),
            scope=self.story.scope,
            protected=self.config.safety.protected_files,
            secrets=self.config.secrets,
            base_sha=self.state.base_sha,
        )

    def _built_on(self) -> str:
        """The commit this round must build on: the previous round's head, else the base."""
        rounds = self.state.rounds
        return (rounds[-1].head_sha if rounds else "") or self.state.base_sha

    def _work(
        self,
        messages: list[dict[str, Any]],
        ctx: ToolContext,
        trace: Trace,
        guard: Guard,
        replayed: Replayed | None,
    ) -> AgentResult:
        """The worker's turn, watched by ``guard``. A turn stopped midway still has the
        user's refs put back; the rest waits for the round to go on (from its trace)."""
        context = self._context(replayed.head if replayed is not None else len(messages))
        guard.watch()
        ctx.before_git = self.story_repo.make_safe
        try:
            model = self.meter.wrap(self.worker_model)
            try:
                return run_agent(
                    model,
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
                self._end_sandbox(ctx)
        except BaseException:
            try:
                for line in self.story_git.after_stop(guard).problems:
                    self.say(f"{self.key}: {line}")
            except GitError as exc:
                self.say(f"{self.key}: could not check the repository after the stop: {exc}")
            raise

    def _end_sandbox(self, ctx: ToolContext) -> None:
        """End the round's sandbox (the worker's turn is over, or stopped) and every process
        in it; say once if it could not be made (each command then had one of its own)."""
        session = ctx.sandbox
        if isinstance(session, SandboxSession):
            session.close()
            if session.problem:
                self._warn_once(
                    f"warning: the worker's commands each ran in a sandbox of their own "
                    f"(slower): the round's sandbox could not be made: {session.problem}"
                )

    def _turn_done(self, _result: AgentResult) -> None:
        """Save the record (its usage) now and then during a long worker turn: a run killed
        with SIGKILL then leaves its spend on record for the budgets, give or take the
        last ``USAGE_SAVE_S`` seconds of it."""
        if time.monotonic() - self._saved_at >= USAGE_SAVE_S:
            self._save()

    def _rescue_round(self, n: int, result: AgentResult, guard: Guard) -> list[str]:
        """Commit what the worker left, put the worktree back on the branch, and undo what
        the worker did to history or to the refs; returns why the round fails (the reviewer
        is not asked then), or nothing."""
        end = self.story_git.end_work(
            guard,
            f"hero: commit work left uncommitted in round {n} ({self.key})",
            self.state.base_sha,
        )
        self.state.head_sha = end.head or self.state.head_sha
        for note in end.notes:
            self.say(f"round {n}: {note}")
        self.say(
            f"round {n}: worker {result.stop_reason}: {result.turns} turns, "
            f"{result.tool_calls} tool calls"
        )
        return [*end.problems, *self._no_commit()]

    def _no_commit(self) -> list[str]:
        """Why the round fails if the branch holds no commit since the base (unless the
        story allows that)."""
        base = self.state.base_sha
        if self.state.head_sha != base or self.story.allow_empty:
            return []
        return [
            f"no commit was made: {self.branch} has no commit since the base ({base[:12]}), "
            "and this story passes only with a change. Make the change and commit it."
        ]

    def _after_checks(self, n: int, guard: Guard) -> list[str]:
        """Undo what the story's checks did to the branch or the refs; returns why the round
        fails, or nothing."""
        end = self.story_git.end_checks(guard)
        self.state.head_sha = end.head or self.state.head_sha
        for note in end.notes:
            self.say(f"round {n}: {note}")
        return end.problems

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
            self.worktree,
            timeout_s=self.config.verify_timeout_ms / 1000,
            env=env,
            log_path=self.run_dir / f"verify-r{n}.log",
            cancel=self.cancel,
            redact=self.redactor,
            sandbox=self.verify_sandbox,
        )
        trace.event("verify", **verify.to_dict())
        self.say(f"round {n}: verify {'passed' if verify.passed else 'FAILED'}")
        problems = self._after_checks(n, guard)
        if problems:
            return verify, short_circuit(_reasons(problems))
        if not verify.passed:
            failed = [c.command for c in verify.commands if c.exit_code != 0]
            return verify, short_circuit("verification failed: " + "; ".join(failed))
        self._phase("review", f"round {n}: review")
        return verify, self._review(n, verify, trace)

    def _record(
        self, n: int, started: float, result: AgentResult, verify: VerifyResult, verdict: Verdict
    ) -> Round:
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
            head_sha=self.state.head_sha,
            feedback=self.redactor.redact(_feedback_text(verdict, verify)),
        )

    def _review(self, n: int, verify: VerifyResult, trace: Trace) -> Verdict:
        base, tip = self.state.base_sha, self.state.head_sha
        # read in the user's repository, from the commits hero brought there
        log = log_since(self.repo.path, base, tip=tip)
        diff, stat = diff_since(self.repo.path, base, tip=tip)
        diff_text = diff.text
        if diff.omitted:
            diff_text += (
                f"\n\n[diff cut for size: {diff.cut_chars} characters left out, "
                f"covering: {', '.join(diff.omitted)}]"
            )
        elif diff.cut_chars:
            diff_text += f"\n\n[... {diff.cut_chars} characters of diff cut for size]"
        log_text = log.text + (f"\n[... {log.cut_chars} characters cut]" if log.cut_chars else "")
        return review(
            RedactingModel(self.meter.wrap(self.reviewer_model), self.redactor),
            self.story,
            round_no=n,
            branch=self.branch,
            base_sha=base,
            verify_summary=verify.summary(),
            git_log=log_text,
            diff_stat=stat,
            diff=diff_text,
            home=self.home,
            trace=trace,
        )

    # -- state -------------------------------------------------------------------------

    def _start(self) -> RunState:
        story, repo = self.story, self.repo
        old = load_state(self.home, self.ref)
        resume = (
            old is not None
            and (old.status in RESUMABLE or old.status == Status.GAVE_UP)
            and bool(old.base_sha)
            and (repo.branch_sha(self.branch) is not None or self._recover_branch(old))
        )
        if old is not None and old.status == Status.PASSED:
            finish_done_move(old, story.path)
            self.state = old
            return old
        self._check_model_verify()
        if resume:
            assert old is not None
            state = old
            if state.grant_fresh_budget():
                self.say(f"{self.key}: gave up before; continuing {self.branch} with new rounds")
            else:
                self.say(f"{self.key}: resuming after round {len(state.rounds)} on {self.branch}")
        else:
            built_on = self._dependency_base()
            if built_on is not None:
                base_ref, base_sha = built_on
            else:
                base_ref = story.base_ref or self.config.target_base_ref or repo.current_branch()
                base_sha = self._base_sha(base_ref)
            if repo.branch_sha(self.branch) is not None:
                kept = self._set_aside()
                self.say(f"{self.key}: earlier branch kept as {kept}; starting afresh")
            elif self.story_repo.exists() or self.story_repo.is_linked_worktree():
                self._set_aside()
            state = RunState(
                id=story.id,
                plan=story.plan,
                base_ref=base_ref,
                base_sha=base_sha,
                head_sha=base_sha,
                branch=self.branch,
                worktree=str(self.worktree),
                started_at=time.time(),
            )
            if old is not None:
                state.runs = old.runs
                state.usage = old.usage
        state.status = Status.RUNNING
        state.title = story.title
        state.story_path = str(story.path)
        state.error = ""
        state.finished_at = None
        state.runs += 1
        self.state = state
        self._usage_base = dict(state.usage)
        self._save()
        return state

    def _phase(self, phase: str, message: str) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Interrupted(f"stopped before the {phase} step")
        self.state.phase = phase
        self._save()
        self.say(message)

    def _finish(self, status: Status) -> None:
        self.state.status = status
        self.state.phase = ""
        self.state.finished_at = time.time()
        self.state.story_digest = file_digest(Path(self.state.story_path))

    def _fail(self, message: str) -> None:
        self._finish(Status.ERROR)
        self.state.error = message
        self.say(f"{self.key}: error: {message}")

    def _save(self) -> None:
        usage = dict(self._usage_base) or {
            "tokens_in": 0,
            "tokens_cached": 0,
            "tokens_out": 0,
            "llm_calls": 0,
            "cost_usd": 0.0,
        }
        for model in (self.worker_model, self.reviewer_model):
            part = getattr(model, "usage", None)
            if part is None:
                continue
            usage["tokens_in"] = usage.get("tokens_in", 0) + part.tokens_in
            usage["tokens_cached"] = usage.get("tokens_cached", 0) + getattr(
                part, "tokens_cached", 0
            )
            usage["tokens_out"] = usage.get("tokens_out", 0) + part.tokens_out
            usage["llm_calls"] = usage.get("llm_calls", 0) + part.llm_calls
            usage["cost_usd"] = round(usage.get("cost_usd", 0.0) + part.cost_usd, 6)
            if self.reviewer_model is self.worker_model:
                break
        with self._save_lock:
            if self._frozen:
                return
            self.state.usage = usage
            save_state(self.home, self.state, self.redactor)
            self._saved_at = time.monotonic()
        if self.on_save is not None:
            self.on_save()

    def _recover_branch(self, old: RunState) -> bool:
        """Recreate a deleted story branch at the head on record: the story then resumes on
        it (the commits its own repository holds beyond come back at the next phase's
        end). False if the record's head is no commit here."""
        if not old.head_sha or not commit_of(self.repo.path, old.head_sha):
            return False
        with self.repo.locked():
            if self.repo.branch_sha(self.branch) is None:
                git(self.repo.path, "update-ref", f"refs/heads/{self.branch}", old.head_sha, "")
                self.say(
                    f"{self.key}: {self.branch} had been deleted; hero recreated it at "
                    f"{old.head_sha[:12]}"
                )
        return True

    def _owner_file(self) -> Path:
        """Where the user's repository records which story repository works on the branch
        (a hero home's ``worktrees/<id>``): another home never takes it over."""
        return self.repo.common_dir() / "hero" / "owners" / f"{self.ref.rel}.path"

    def _claim_branch(self) -> None:
        """Record this home's story repository as the one working on the branch; GitError
        if another one that still exists does (another home's, or a person's work)."""
        owner = self._owner_file()
        try:
            other = Path(owner.read_text(encoding="utf-8").strip())
        except (OSError, UnicodeDecodeError):
            other = None
        if other is not None and other != self.worktree and other.exists():
            raise GitError(
                f"branch '{self.branch}' is checked out in {other}, a worktree this hero home "
                "did not create: it may hold another hero home's or a person's uncommitted "
                f"work, so hero leaves it alone. Finish the work there, or remove {other}, "
                "then run the story again"
            )
        owner.parent.mkdir(parents=True, exist_ok=True)
        owner.write_text(f"{self.worktree}\n", encoding="utf-8")

    def _set_aside(self) -> str:
        """Before a fresh start: the story's repository's work committed and brought into
        the user's, the story branch renamed aside (returned), the repository removed."""
        story_repo = self.story_repo
        self._claim_branch()
        if story_repo.exists():
            story_repo.lay_out("")
            self._confine()
            with self._own_git():
                commit_all(
                    self.worktree,
                    f"hero: keep uncommitted work before a fresh start ({self.key})",
                    self.repo.identity_env(),
                )
            with self.repo.locked():
                try:
                    if self.repo.branch_sha(self.branch) is not None:
                        story_repo.bring_back()
                except BringBackRefused:
                    stamp = time.strftime("%Y%m%d-%H%M%S")
                    story_repo.keep_in_target(self.branch, f"{self.branch}-stray-{stamp}")
        kept = ""
        if self.repo.branch_sha(self.branch) is not None:
            kept = self.repo.keep_branch_aside(self.branch, self.worktree)
        story_repo.remove()
        return kept

    def _tidy(self) -> tuple[list[str], list[str]]:
        """Before hero's commit at a phase's end: what appeared outside the scope since the
        last bash check is undone (a new ignore file there first, so that nothing it hid
        stays); returns (what was undone, what could not be: the round fails)."""
        rules = path_rules(self.story.scope, self.config.safety.protected_files)
        tidied = [
            f"removed {path}, a new ignore file outside the scope"
            for path in unhide_outside(self.worktree, rules)
        ]
        undone = undo_outside(self.worktree, self.state.base_sha, rules)
        tidied += [f"undone before hero's commit: {line}" for line in undone.lines()]
        for line in tidied:
            self.say(f"{self.key}: {line}")
        return tidied, [f"a change outside the story's scope: {line}" for line in undone.failures()]

    def _write_error_log(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / "error.log", "a", encoding="utf-8") as fh:
            fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n")
            fh.write(self.redactor.redact(traceback.format_exc()))


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
