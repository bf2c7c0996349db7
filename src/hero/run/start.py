"""How a run of a story starts: the run record it goes on with.

A story that was stopped, failed or gave up (with its branch still there, or recreated at
the head on record) is resumed: its finished rounds are kept and the next run continues
them on the same branch. Anything else starts afresh on its base commit: the head its one
dependency passed with, a merge of its dependencies' heads, or ``base_ref`` (an earlier
branch and repository of the story are set aside first, never thrown away). A story that
cannot start as it stands (say, a USD budget on a model without prices) ends in ``error`` with
a one-line reason (:meth:`RunStart.failed`).
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

from hero.config.home import Config
from hero.errors import HeroError
from hero.git.ops import GitError, MergeConflict, TargetRepo, commit_of, git, merge_heads
from hero.names import StoryRef
from hero.redact import Redactor
from hero.roles.verifier import MODEL_VERIFY_HINT, model_verify_tiers, policy_problems
from hero.run.budget import story_spend, unpriced
from hero.run.revision import Revision, RevisionError
from hero.run.workspace import Progress, Workspace
from hero.state import RESUMABLE, RunState, StateError, Status, file_digest, load_state
from hero.story.record import Story, VerifyTier


class StartError(HeroError):
    """A story that cannot start as it stands (say, its base_ref names no commit)."""


class RunStart:
    """The start of one run of one story, in its :class:`Workspace`."""

    def __init__(
        self,
        story: Story,
        config: Config,
        repo: TargetRepo,
        workspace: Workspace,
        redactor: Redactor,
        say: Progress,
        revision: Revision | None = None,
    ) -> None:
        self.story = story
        #: what the story revises, for a follow-up (hero.run.revision); None for any other
        self.revision = revision
        self.config = config
        self.home = config.home
        self.repo = repo
        self.workspace = workspace
        self.redactor = redactor
        self.say = say
        self.ref = story.ref
        self.key = self.ref.key
        self.branch = revision.branch if revision is not None else self.ref.branch

    def state(self) -> RunState:
        """The run record this run goes on with, ``running`` (a story that passed: its
        record as it is). Raises StartError, GitError or OSError when it cannot start."""
        story, repo = self.story, self.repo
        old = load_state(self.home, self.ref)
        if old is not None and old.status == Status.PASSED:
            return old
        tip = self.revision.check(self.home, repo) if self.revision is not None else ""
        resume = (
            old is not None
            and self.resumable(old)
            and (repo.branch_sha(self.branch) is not None or self._recover_branch(old))
        )
        self.check_model_verify()
        self.check_prices()
        if resume:
            assert old is not None
            state = old
            if state.grant_fresh_budget():
                self.say(f"{self.key}: gave up before; continuing {self.branch} with new rounds")
            else:
                self.say(f"{self.key}: resuming after round {len(state.rounds)} on {self.branch}")
        else:
            state = self._fresh(old, tip)
        if self.revision is not None:
            state.revises = self.revision.of
        state.status = Status.RUNNING
        state.title = story.title
        state.labels = list(story.labels)
        state.story_path = str(story.path)
        state.error = ""
        state.conflict = {}  # an end on a conflict is over once the story runs again
        state.finished_at = None
        state.runs += 1
        return state

    def failed(self, exc: Exception) -> RunState:
        """A story that cannot start ends in ``error`` with a one-line reason, its run record
        (rounds, usage) kept: like any error it waits for an edit of its file or
        `hero retry`, and is never tried again and again. Only an unexpected exception (a
        bug) writes ``runs/<id>/error.log``. Raises ``exc`` for a story that passed."""
        story = self.story
        if isinstance(exc, StartError | RevisionError):
            message = str(exc)
        elif isinstance(exc, GitError):
            message = f"git error: {exc}"
        elif isinstance(exc, OSError):
            message = f"could not start: {exc}"
        else:
            write_error_log(self.ref.run_dir(self.home), self.redactor)
            message = (
                f"internal error while starting: {type(exc).__name__}: {exc} "
                f"(see runs/{self.ref.rel}/error.log)"
            )
        state = load_state(self.home, self.ref) or RunState(id=story.id, plan=story.plan)
        if state.status == Status.PASSED:
            raise exc  # a story that passed stays passed
        state.grant_fresh_budget()  # the start that failed was to give it new rounds
        state.revises = self.revision.of if self.revision is not None else state.revises
        state.status = Status.ERROR
        state.phase = ""
        state.error = " ".join(message.split())
        state.title = story.title
        state.labels = list(story.labels)
        state.story_path = str(story.path)
        state.finished_at = time.time()
        state.story_digest = file_digest(story.path)
        state.runs += 1
        return state

    def resumable(self, old: RunState) -> bool:
        """Whether the run record ``old`` is resumed, given its branch is there or can be
        recreated (see :meth:`recoverable`), rather than started afresh. Reads only."""
        return (old.status in RESUMABLE or old.status == Status.GAVE_UP) and bool(old.base_sha)

    def recoverable(self, old: RunState) -> bool:
        """Whether a deleted story branch can be recreated at the head on record. Reads only."""
        return bool(old.head_sha) and bool(commit_of(self.repo.path, old.head_sha))

    def base_ref(self) -> str:
        """The ref a fresh start without dependencies starts from: the story's base_ref,
        the config's target_base_ref, else the repository's current branch."""
        return self.story.base_ref or self.config.target_base_ref or self.repo.current_branch()

    def tiers(self) -> tuple[VerifyTier, ...]:
        """The story's verify tiers, else the config's default commands as one tier. A
        plan's story's tiers a planner model wrote: only when ``model_verify`` is on."""
        default = self.config.default_verify
        if self.story.verify:
            if self.story.plan:
                return model_verify_tiers(self.config.safety, self.story.verify, default)
            return self.story.verify
        return (VerifyTier("default", default),) if default else ()

    def builds_on(self) -> str:
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

    def _fresh(self, old: RunState | None, tip: str = "") -> RunState:
        """A new record on the story's base commit, the branch and repository of an
        earlier run set aside; what earlier runs counted (runs, usage) carried over. A
        follow-up starts from ``tip``, its branch's (the revised story's, never set aside)."""
        story, repo = self.story, self.repo
        built_on = self._dependency_base()
        if self.revision is not None:
            base_ref, base_sha = self.branch, tip
        elif built_on is not None:
            base_ref, base_sha = built_on
        else:
            base_ref = self.base_ref()
            base_sha = self.base_sha(base_ref)
        story_repo = self.workspace.story_repo
        if self.revision is not None:
            if story_repo.exists() or story_repo.is_linked_worktree():
                story_repo.remove()  # an earlier run's: its commits are on the branch
        elif repo.branch_sha(self.branch) is not None:
            kept = self.workspace.set_aside()
            self.say(f"{self.key}: earlier branch kept as {kept}; starting afresh")
        elif story_repo.exists() or story_repo.is_linked_worktree():
            self.workspace.set_aside()
        state = RunState(
            id=story.id,
            plan=story.plan,
            base_ref=base_ref,
            base_sha=base_sha,
            head_sha=base_sha,
            branch=self.branch,
            worktree=str(self.workspace.path),
            started_at=time.time(),
        )
        if old is not None:
            state.runs = old.runs
            state.usage = old.usage
            # the time of the rounds set aside still counts towards max_story_wall_s
            state.cut_short_s = round(story_spend(old).wall_s, 3)
        return state

    def check_model_verify(self) -> None:
        """A plan's story whose verify commands (a planner model wrote them) break the
        command policy does not start: StartError naming each, before any model call."""
        if not self.story.plan:
            return
        found = policy_problems(self.config.safety, self.story.verify)
        if found:
            raise StartError("; ".join(found) + f" ({MODEL_VERIFY_HINT})")

    def check_prices(self) -> None:
        """A USD budget with a worker or reviewer model that has no prices in its provider
        file (its dollars could not be counted, so the budget would never trip) does not
        start: StartError naming the budgets, each such role's provider and model, and the
        settings to set, before any model call (see hero.run.budget.unpriced)."""
        found = unpriced(self.config.budgets, self.config.roles)
        if found is not None:
            raise StartError(str(found))

    def base_sha(self, base_ref: str) -> str:
        """The commit ``base_ref`` names; StartError naming the setting it came from if none."""
        sha = commit_of(self.repo.path, base_ref)
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
        heads = self.dependency_heads()
        if not heads:
            return None
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

    def dependency_heads(self) -> list[tuple[str, str]]:
        """``(branch, sha)`` of the head each dependency passed with, in the story's order
        (none without dependencies); StartError when one has not passed or its branch is
        gone. Reads only: several are merged into the base by the start."""
        heads: list[tuple[str, str]] = []
        for dep in self._dependencies():
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
        return heads

    def _recover_branch(self, old: RunState) -> bool:
        """Recreate a deleted story branch at the head on record: the story then resumes on
        it (the commits its own repository holds beyond come back at the next phase's
        end). False if the record's head is no commit here."""
        if not self.recoverable(old):
            return False
        with self.repo.locked():
            if self.repo.branch_sha(self.branch) is None:
                git(self.repo.path, "update-ref", f"refs/heads/{self.branch}", old.head_sha, "")
                self.say(
                    f"{self.key}: {self.branch} had been deleted; hero recreated it at "
                    f"{old.head_sha[:12]}"
                )
        return True


def write_error_log(run_dir: Path, redactor: Redactor) -> None:
    """Append the exception being handled, with its traceback, to ``runs/<id>/error.log``:
    a bug in hero, the one case with a traceback."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "error.log", "a", encoding="utf-8") as fh:
        fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n")
        fh.write(redactor.redact(traceback.format_exc()))
