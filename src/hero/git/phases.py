"""hero's git at the end of each of a story's phases: one method per phase.

A phase is the worker's turn or the checks. Before it, ``watch`` records what the phase may
not change (``hero.git.guard.Guard``). After it, with hero's own git in the story's sandbox
(``hero.git.ops.confined``), one method does the whole end (the user's repository locked
only for the moment its refs move, never while the story's own repository is cleaned):
in-progress git state removed, the worktree back on the story branch, what the worker left
uncommitted committed (unless it holds conflicts or a secret; build output left out, see
``hero.git.output``), history kept, the user's
branches put back (in the story's repository, where the worker has copies of them), and the
story's commits brought into the user's repository (``StoryRepo.bring_back``: for a story
from a GitHub issue, the messages of its new commits rewritten so that they close no other
issue and mention no one, which the notes tell). Each returns a
``PhaseEnd``: the branch's tip in the user's repository, why the round fails, and what hero
merely tidied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from hero.git.guard import Guard, Refs, leftovers, uncommit_secrets
from hero.git.ops import TargetRepo, Wrap, confined
from hero.git.output import commit_all
from hero.git.storyrepo import BringBackRefused, StoryRepo
from hero.redact import Redactor

#: What keeps the worktree within the story's scope before hero's commit: returns
#: (what it tidied, what it could not undo). Given by the pipeline (the scope is the agent's).
Tidy = Callable[[], tuple[list[str], list[str]]]


@dataclass
class PhaseEnd:
    """What the end of a phase found and did."""

    head: str
    """The story branch's tip in the user's repository afterwards."""
    problems: list[str] = field(default_factory=list)
    """Why the round fails (the reviewer is not asked then)."""
    notes: list[str] = field(default_factory=list)
    """What hero tidied up, to tell the user."""


class StoryGit:
    """hero's git for one story: its own repository, the user's, and the ends of phases."""

    def __init__(
        self,
        target: TargetRepo,
        repo: StoryRepo,
        *,
        secrets: Redactor,
        tidy: Tidy | None = None,
    ) -> None:
        self.target = target
        self.repo = repo
        self.branch = repo.branch
        self.secrets = secrets
        self.tidy = tidy
        #: where hero's own git in the story's repository runs (its sandbox), once known
        self.sandbox: Wrap | None = None
        #: the protected refs of the last phase's record (first listed by git): the next
        #: phase's, when the ref files still show them (``Guard.watch``)
        self._listed: Refs | None = None

    # -- before a phase -------------------------------------------------------------------

    def watch(self, start: str) -> Guard:
        """The guard of a phase that must build on ``start``, watching from now."""
        guard = Guard(self.repo.path, self.repo.path, self.branch, start, own=True)
        guard.watch(listed=self._listed)
        self._listed = guard.before
        return guard

    # -- after a phase --------------------------------------------------------------------

    def end_work(self, guard: Guard, message: str, base: str) -> PhaseEnd:
        """After the worker's turn: commit what it left (``message``), keep the round's
        history, take off the branch the worker's own commits that add a secret, bring the
        commits into the user's repository."""
        with self.ending():
            notes = self.repo.end_phase()
            guard.before_rescue()
            refused = self._rescue(message, base)
            guard.after_rescue()
            refused += uncommit_secrets(self.repo.path, guard.start, base, self.secrets)
            refused += self._bring_back(guard, notes)
        return self._end(guard, refused, notes)

    def end_checks(self, guard: Guard) -> PhaseEnd:
        """After the checks: what they did to the branch or the refs undone, the branch
        brought back. Problems are said as the checks'."""
        with self.ending():
            notes = self.repo.end_phase()
            guard.before_rescue()
            guard.after_rescue()
            refused = self._bring_back(guard, notes)
        end = self._end(guard, refused, notes)
        end.problems = [f"while the checks ran: {p}" for p in end.problems]
        return end

    def keep_leftovers(self, start: str, message: str, base: str) -> PhaseEnd:
        """After a run that crashed or was stopped (nothing of it runs any more): commit
        what it left (``message``) and put the worktree back on the branch."""
        guard = Guard(self.repo.path, self.repo.path, self.branch, start, own=True)
        with self.ending():
            notes = self.repo.end_phase()
            guard.before_rescue()
            refused = self._rescue(message, base)
            guard.after_rescue()
            refused += self._bring_back(guard, notes)
        return self._end(guard, refused, notes)

    def after_stop(self, guard: Guard) -> PhaseEnd:
        """A worker's turn stopped midway (Ctrl-C, an error): the refs put back and the
        commits made so far brought back; the rest waits for the round to go on."""
        notes: list[str] = []
        with self.ending():
            guard.before_rescue()
            guard.restore_refs()
            refused = self._bring_back(guard, notes)
        return self._end(guard, refused, notes)

    # -- parts ----------------------------------------------------------------------------

    @contextmanager
    def ending(self) -> Iterator[None]:
        """hero's git in the story's repository runs in its sandbox. The user's repository
        is not locked here: only the moments its refs move are (``StoryRepo.bring_back``,
        ``keep_in_target``), so a worker that made 50,000 refs delays no other story."""
        with confined(self.repo.path, self.sandbox):
            yield

    def _end(self, guard: Guard, refused: list[str], notes: list[str]) -> PhaseEnd:
        head = self.target.branch_sha(self.branch) or ""
        return PhaseEnd(head, [*guard.problems, *refused], [*notes, *guard.notes])

    def _rescue(self, message: str, base: str) -> list[str]:
        """Commit what is left uncommitted in the worktree but build output (the story
        repository's ``build_output``, see hero.git.output), unless it holds unresolved
        conflicts or a file with a secret value (then nothing is committed); returns what
        was not committed and why, and what could not be kept within the scope."""
        if not self.repo.exists():
            return []
        stuck: list[str] = []
        if base and self.tidy is not None:
            _tidied, stuck = self.tidy()
        build_output = self.repo.build_output  # left in the worktree, uncommitted
        left = leftovers(self.repo.path, base, self.secrets, build_output)
        if left.committable and not left.conflicted and not left.with_secrets:
            commit_all(self.repo.path, message, self.target.identity_env(), build_output)
        return [*stuck, *left.problems()]

    def _bring_back(self, guard: Guard, notes: list[str]) -> list[str]:
        """The story branch's commits (and any stray branch the guard made) into the
        user's repository, their messages rewritten where the story's rule says (told in
        ``notes``); why the round fails, or nothing."""
        for branch in guard.strays.made:
            self.repo.keep_in_target(branch)
        try:
            self.repo.bring_back(notes)
        except BringBackRefused as exc:
            return [str(exc)]
        return []
