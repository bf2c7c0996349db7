"""A follow-up's run: more rounds for a finished story, on its branch (``revises: <id>``).

A story with ``revises: X`` (hero.story.followup writes one; `hero revise` too) is run like
any other, with its own id, run record and story repository, but:

- on the branch of the story it revises, ``hero/<root>``: ``root`` is X, or, when X is a
  follow-up itself, the story X's chain of ``revises`` (kept in the run records) ends at;
  its rounds start from that branch's tip, and its new commits land on it;
- its worker is shown the revised story's own text (the root's story file) and this
  story's text as the findings of the round before, where a reviewer's feedback goes; the
  reviewer sees both;
- the checks are its own ``verify:``, else the root story's; so are ``setup:`` and ``scope:``;
- its rounds are ``max_retries`` else ``followup_max_rounds``, its tokens held to
  ``max_followup_tokens`` as well as ``max_story_tokens``;
- it holds the root's locks (this home's and the repository's) besides its own while it
  runs: two follow-ups of one story, or a follow-up and its story, never write the branch
  at once (the second is refused with StoryBusy; `hero watch` keeps it queued meanwhile).

A follow-up whose story is unknown, has not finished, or whose branch is gone does not
start: it ends in ``error`` saying so (:meth:`Revision.check`), and nothing is touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from hero.config.home import Config
from hero.config.sections import Budgets
from hero.errors import UsageError
from hero.git.ops import TargetRepo
from hero.locks import StoryBusy, is_held, story_lock, story_lock_path
from hero.names import StoryRef
from hero.state import TERMINAL, RunState, StateError, Status, load_state, save_state
from hero.story.format import parse_story
from hero.story.record import Story, StoryError

#: A chain of follow-ups (a follow-up of a follow-up ...) is followed this deep at most.
MAX_CHAIN = 50


class RevisionError(UsageError):
    """A follow-up that cannot start: its story is unknown, running, or has no branch."""


@dataclass(frozen=True)
class Revision:
    """What a story with ``revises:`` runs on: the story it revises and whose branch."""

    of: str
    """The id the story's ``revises:`` names."""
    root: StoryRef
    """The story whose branch the follow-up works on (``of``, or the end of its chain)."""
    findings: str
    """The follow-up's own text: what its worker addresses."""
    story: Story
    """The story as the run sees it (see :func:`revision_of`)."""

    @property
    def branch(self) -> str:
        return self.root.branch

    def check(self, home: Path, repo: TargetRepo) -> str:
        """The tip of the branch to work on; RevisionError when the follow-up cannot start
        (what and where in its words)."""
        if self.story.plan:
            raise RevisionError(
                f"revises '{self.of}': a story of plan '{self.story.plan}' cannot be a "
                "follow-up; put the follow-up straight in inbox/"
            )
        return revisable(home, self.of, repo)

    def worker_feedback(self, last: str) -> dict[str, str]:
        """``build_messages``' feedback for a round: the findings in round 1, then the
        reviewer's last feedback with the findings below it."""
        if not last:
            return {
                "feedback": self.findings,
                "feedback_title": f"Findings on the work of {self.of} (address every point)",
            }
        return {
            "feedback": f"{last.strip()}\n\n### The findings this follow-up addresses\n"
            f"{self.findings}"
        }

    def for_review(self, story: Story) -> Story:
        """The story the reviewer reads: the revised story's text, then the findings."""
        body = (
            f"{story.body.strip()}\n\n## Follow-up of {self.of}: findings to address\n"
            f"{self.findings}"
        )
        return replace(story, body=body)


def revisable(home: Path, story_id: str, repo: TargetRepo, *, busy: bool = False) -> str:
    """The tip of the branch a follow-up of ``story_id`` works on; RevisionError naming
    what is wrong and where: no such story, not finished, its branch gone. ``busy``: also
    when another process runs it (a probe of its lock; never from within a run, which holds
    that lock itself)."""
    of = StoryRef("", story_id)
    try:
        state = load_state(home, of)
    except StateError as exc:
        raise RevisionError(f"revises '{story_id}': its run record cannot be read: {exc}") from None
    if state is None:
        raise RevisionError(
            f"revises '{story_id}': no story by that id has run in this home (no "
            f"runs/state/{of.rel}.json); `hero status` lists the stories"
        )
    if busy and state.status == Status.RUNNING and is_held(story_lock_path(home, of)):
        raise StoryBusy(
            f"story '{story_id}' is still running; revise it once it has finished "
            f"(follow it with `hero logs {story_id} -f`)"
        )
    if state.status not in TERMINAL:
        raise RevisionError(
            f"revises '{story_id}', which has not finished ({state.status}); run the "
            "follow-up once it has"
        )
    branch = root_of(home, story_id).branch
    tip = repo.branch_sha(branch)
    if tip is None:
        raise RevisionError(
            f"revises '{story_id}', whose branch {branch} is gone from {repo.path}; "
            "nothing to add rounds to"
        )
    return tip


def revision_of(story: Story, config: Config) -> Revision | None:
    """The follow-up ``story`` is (None: not one). Never raises: what cannot be read here
    makes the start fail later (:meth:`Revision.check`).

    The run's story is the follow-up with the root story's text as its body (the findings go
    where feedback goes), and the root's checks, setup and scope where it has none."""
    if not story.revises:
        return None
    root = root_of(config.home, story.revises)
    findings = story.body.strip()
    view = story
    original = _root_story(config.home, root)
    if original is not None:
        view = replace(
            story,
            body=original.body,
            goal=original.goal,
            acceptance_criteria=original.acceptance_criteria,
            verify=story.verify or original.verify,
            setup=story.setup or original.setup,
            scope=story.scope or original.scope,
        )
    else:
        view = replace(story, body=f"Revise the work of story {story.revises} (on its branch).")
    return Revision(story.revises, root, findings, view)


def root_of(home: Path, story_id: str) -> StoryRef:
    """The story whose branch a follow-up of ``story_id`` works on: ``story_id``, or where
    the chain of ``revises`` in the run records ends."""
    ref = StoryRef("", story_id)
    seen = {ref}
    for _ in range(MAX_CHAIN):
        try:
            state = load_state(home, ref)
        except StateError:
            return ref
        if state is None or not state.revises:
            return ref
        nxt = StoryRef("", state.revises)
        if not nxt.valid() or nxt in seen:
            return ref
        seen.add(nxt)
        ref = nxt
    return ref


def _root_story(home: Path, root: StoryRef) -> Story | None:
    """The root story's file as its run record names it, if it can still be read."""
    try:
        state = load_state(home, root)
    except StateError:
        return None
    candidates = []
    if state is not None and state.story_path:
        candidates.append(Path(state.story_path))
    candidates += [home / "done" / f"{root.id}.md", home / "inbox" / f"{root.id}.md"]
    for path in candidates:
        try:
            found = parse_story(path)
        except (StoryError, OSError):
            continue
        if found.id == root.id:
            return found
    return None


@contextmanager
def run_locks(
    home: Path, repo: TargetRepo, ref: StoryRef, revision: Revision | None
) -> Iterator[None]:
    """The locks a run of the story ``ref`` holds: its own, this home's and the
    repository's (hero.locks), and for a follow-up the same two of the story whose branch
    it works on. StoryBusy, before anything is touched, when another process holds one."""
    with ExitStack() as stack:
        for held in (ref, *((revision.root,) if revision is not None else ())):
            stack.enter_context(story_lock(home, held))
            stack.enter_context(repo.story_lock(held, home))
        yield


def landed(revision: Revision | None, home: Path, state: RunState) -> RunState:
    """``state``, once a run ended; a follow-up that passed makes the run record of the
    story whose branch it worked on say where that branch is now (the head a story
    depending on it starts from). Called under that story's locks."""
    if revision is None or state.status != Status.PASSED or not state.head_sha:
        return state
    try:
        root = load_state(home, revision.root)
    except StateError:
        return state
    if root is not None and root.head_sha != state.head_sha:
        root.head_sha = state.head_sha
        save_state(home, root)
    return state


def run_limits(story: Story, config: Config) -> tuple[int, Budgets]:
    """A run's rounds and budgets: the story's ``max_retries`` else ``max_retries``, and
    the budgets; for a follow-up, ``followup_max_rounds`` and ``max_story_tokens`` lowered to
    ``max_followup_tokens``."""
    if not story.revises:
        return story.max_retries or config.max_retries, config.budgets
    rounds = story.max_retries or config.followup_max_rounds
    cap = config.max_followup_tokens
    budgets = config.budgets
    if cap is not None and (budgets.story_tokens is None or cap < budgets.story_tokens):
        budgets = replace(budgets, story_tokens=cap)
    return rounds, budgets


def waits_for(home: Path, story: Story, running: list[Story], queued: list[Story]) -> str:
    """Why a follow-up waits, or "": the story whose branch it works on, or another
    follow-up on that branch, is running (``running``), or queued before it (``queued``:
    the story itself first, then the follow-ups in order of id)."""
    if not story.revises:
        return ""
    root = root_of(home, story.revises)

    def on_branch(other: Story) -> bool:
        if other.ref == story.ref or other.plan:
            return False
        return other.ref == root or bool(other.revises and root_of(home, other.revises) == root)

    for other in running:
        if on_branch(other):
            return f"waits for '{other.ref.key}', which is running on {root.branch}"
    for other in queued:
        if on_branch(other) and (other.ref == root or other.ref.id < story.ref.id):
            return f"waits for '{other.ref.key}', queued before it on {root.branch}"
    return ""
