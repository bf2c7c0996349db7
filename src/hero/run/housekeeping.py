"""Housekeeping: what of finished stories may go, and removing it without risk.

A story is *finished* when it has ended and nothing runs it again by itself: its status is
one of ``state.TERMINAL`` (passed, gave_up, error, skipped, budget_exceeded, cancelled). A
queued, running or interrupted story (one paused on a model outage too) is never touched:
the daemon resumes those. A finished story that is retried (``hero retry``, an edit of its
file) runs again from its branch in the user's repository: hero lays its repository out
anew from that branch, as for any story whose repository is gone. So, of a finished story,
hero may remove:

- its repository ``worktrees/<id>`` (node_modules, venvs, build output...). A story that
  did not pass may have stopped in the middle of a phase (an error, a budget): what its
  repository still holds uncommitted is first committed on its branch and brought into
  the user's repository, as a resumed run would (``Workspace.keep_leftovers``); if that
  cannot be done whole, the repository is kept and the reason said;
- its run logs ``runs/<id>/`` (round traces, check output); its run record
  ``runs/state/<id>.json`` is always kept, so ``hero status`` and ``hero retry`` work;
- its branch ``hero/<id>`` in the user's repository, only when asked (``hero clean
  --branches``): of a passed story merged into its base, or of any passed story.

Each story is handled under its locks (the home's and the repository's, non-blocking): a
story that starts at the same moment either finds them held (it is refused with StoryBusy,
as a second run would be, and the dispatcher takes it again at its next rescan) or holds
them first, and then nothing of it is removed. Its record is read again under the locks,
and what to remove worked out again (another clean may have been first). Whatever a worker
wrote in its repository (a link to the home, to ``/``) is removed as a link, never
followed: ``shutil.rmtree`` works from directory descriptors and unlinks links. A
repository is moved into ``worktrees/.trash`` in one step before it is removed there, so
that a clean killed midway never leaves half a repository at the story's path.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

from hero.config.home import Config
from hero.config.sections import Housekeeping
from hero.git.guard import is_ancestor
from hero.git.ops import GitError, TargetRepo, commit_of, git
from hero.github.merged import merged_ids
from hero.leftovers import kill_marked
from hero.locks import StoryBusy, story_lock
from hero.names import StoryRef
from hero.redact import Redactor
from hero.run.environment import (
    ENVS_DIR,
    RECENT_S,
    EnvironmentBusy,
    environments,
    key_lock,
    last_used,
    maker_alive,
    remove,
)
from hero.run.revision import root_of
from hero.run.workspace import Workspace
from hero.state import TERMINAL, RunState, StateError, Status, load_state, state_dir
from hero.story.format import parse_story
from hero.story.record import Story, StoryError

#: The statuses whose story hero may clean up after: ended, and not resumed by itself.
FINISHED = TERMINAL
#: Statuses after which the repository holds nothing the branch lacks: a pass and a skip
#: end with the round's work brought back (or with no round at all). The others may have
#: stopped mid-phase: their leftovers are kept on the branch before the repository goes.
_NOTHING_LEFT = frozenset({Status.PASSED, Status.SKIPPED})
#: hero's own folders in ``runs/``: a loose story of such an id has no run logs there to
#: remove (its ``runs/<id>`` is hero's folder).
_HERO_RUNS = frozenset({"state", "locks", "plans", "rejected", "github"})
#: The folder of worktrees/ a repository is moved to before it is removed: no story id
#: starts with a dot.
TRASH = ".trash"
_DAY_S = 86400.0
_MB = 1 << 20

Say = Callable[[str], None]


@dataclass(frozen=True)
class Rules:
    """What to remove of finished stories; None: that rule is off."""

    repos_after_s: float | None = None
    """A finished story's repository goes this long after it finished (0: at once)."""
    max_worktrees_bytes: int | None = None
    """Over this, worktrees/ sheds repositories of finished stories, oldest first."""
    min_free_bytes: int | None = None
    """Below this free on worktrees/' disk, the same."""
    logs_after_s: float | None = None
    """A finished story's run logs go this long after it finished."""
    branches: str = "none"
    """Which hero branches go: none; merged (a passed story's, once in its base); passed
    (a passed story's, merged or not)."""
    only: frozenset[str] = frozenset()
    """Story keys to look at; empty: every story."""
    after_pr_merged: bool = False
    """A passed gh-story's repository goes once its pull request is known merged (see
    hero.github.merged), whatever its age."""
    environments: bool = False
    """Every project environment (envs/) no story uses goes; else only when worktrees/ and
    envs/ are over their cap, or the disk under its floor, least recently used first."""

    @classmethod
    def automatic(cls, settings: Housekeeping) -> Rules:
        """The policy ``hero watch`` and ``hero worker`` apply by themselves."""

        def days(value: float | None) -> float | None:
            return None if value is None else value * _DAY_S

        def mb(value: float | None) -> int | None:
            return None if value is None else int(value * _MB)

        return cls(
            repos_after_s=days(settings.after_days),
            max_worktrees_bytes=mb(settings.max_worktrees_mb),
            min_free_bytes=mb(settings.min_free_mb),
            logs_after_s=days(settings.logs_after_days),
            after_pr_merged=settings.after_pr_merged,
        )


@dataclass(frozen=True)
class Removal:
    """One thing removed (or, in a dry run, that would be)."""

    key: str
    what: str  # "repository", "logs" or "branch"
    where: str  # a path, or a branch's name
    bytes: int
    why: str


@dataclass
class Outcome:
    removed: list[Removal] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (story key, why)
    dry_run: bool = False

    @property
    def freed(self) -> int:
        return sum(r.bytes for r in self.removed)


class Housekeeper:
    """Cleans up after the finished stories of one home, whose target is ``repo``.

    ``keep_work``: a story that did not pass has its repository's leftovers kept on its
    branch before the repository goes (a ``hero worker``'s home, whose stories are laid
    out anew from the remote each time, needs not)."""

    def __init__(
        self,
        config: Config,
        repo: TargetRepo,
        *,
        keep_work: bool = True,
        say: Say | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.home = config.home
        self.repo = repo
        self.keep_work = keep_work
        self.say: Say = say or (lambda _msg: None)
        self.now = now
        self.worktrees = self.home / "worktrees"
        #: where a repository is moved before it is removed (see remove_tree)
        self.trash = self.worktrees / TRASH
        self._merged: frozenset[str] = frozenset()  # gh-stories whose pull request is merged

    # -- what there is ------------------------------------------------------------------

    def records(self, outcome: Outcome, *, branches: bool = False) -> list[RunState]:
        """Every finished story's record, the longest finished first; an unreadable
        record is told in ``outcome.kept``. Without ``branches``, only the stories that
        still have a repository or run logs (a home of many stories, most of them cleaned
        up already, is not read whole after every story)."""
        found: list[RunState] = []
        for ref in _refs(state_dir(self.home)):
            if not (
                branches
                or os.path.lexists(ref.worktree(self.home))
                or os.path.lexists(ref.run_dir(self.home))
            ):
                continue
            try:
                state = load_state(self.home, ref)
            except StateError as exc:
                outcome.kept.append((ref.key, str(exc)))
                continue
            if state is not None and state.status in FINISHED:
                found.append(state)
        return sorted(found, key=lambda s: (_ended_at(s), s.ref))

    # -- the run ------------------------------------------------------------------------

    def run(self, rules: Rules, *, dry_run: bool = False) -> Outcome:
        """Remove what ``rules`` say of finished stories (nothing, with ``dry_run``: the
        outcome lists what would go); the longest finished first."""
        outcome = Outcome(dry_run=dry_run)
        found = self.records(outcome, branches=rules.branches != "none")
        states = [s for s in found if not rules.only or s.ref.key in rules.only]
        for key in sorted(rules.only - {s.ref.key for s in states}):
            outcome.kept.append((key, self._not_finished(key)))
        if not dry_run:
            self._empty_trash(outcome)
        pressure = _Pressure(self.worktrees, rules)
        self._merged = merged_ids(self.home) if rules.after_pr_merged else frozenset()
        for state in states:
            self._story(state, rules, pressure, outcome, dry_run)
        self._environments(rules, pressure, outcome, dry_run)
        return outcome

    def _story(
        self, state: RunState, rules: Rules, pressure: _Pressure, outcome: Outcome, dry_run: bool
    ) -> None:
        ref = state.ref
        plan = self._plan(state, rules, pressure)
        if not plan:
            return
        if dry_run:
            for what, where, why in plan:
                size = _size(Path(where)) if what != "branch" else 0
                outcome.removed.append(Removal(ref.key, what, where, size, why))
                if what == "repository":
                    pressure.freed += size
            return
        try:
            with self._locked(ref):
                now = load_state(self.home, ref)  # again, under the lock
                if now is None or now.status not in FINISHED:
                    status = now.status if now is not None else "gone"
                    outcome.kept.append((ref.key, f"no longer finished ({status})"))
                    return
                # again too: it may have run again, another clean may have been first
                plan = self._plan(now, rules, pressure)
                for what, where, why in plan:
                    done = self._remove(now, rules, (what, where, why), outcome)
                    if done is not None:
                        outcome.removed.append(done)
                        if what == "repository":
                            pressure.freed += done.bytes
        except StoryBusy:
            outcome.kept.append(
                (
                    ref.key,
                    "another hero process holds its lock (a run, or another clean): untouched",
                )
            )
        except (GitError, OSError, StateError) as exc:
            outcome.kept.append((ref.key, f"not cleaned: {exc}"))

    def _environments(
        self, rules: Rules, pressure: _Pressure, outcome: Outcome, dry_run: bool
    ) -> None:
        """The project environments no story uses (none queued, running or paused has it
        in its record, none took it in the last RECENT_S): all of them with
        ``rules.environments``, else while over the cap or under the floor, least recently
        used first. What a killed setup left (``.make-*``) goes whenever its process is gone."""
        found = sorted(environments(self.home), key=last_used)
        if not found:  # nothing to weigh: no story's record is read (a pass after each story)
            return
        used = self._environments_in_use()
        now = self.now()
        for path in found:
            key = path.name
            if key.startswith("."):
                if key.startswith(".make-") and not maker_alive(path):
                    self._drop_environment(
                        path, "left by a setup that was stopped", outcome, dry_run
                    )
                continue
            if key in used or now - last_used(path) < RECENT_S:
                continue
            why = "no story uses it" if rules.environments else pressure.why()
            if why:
                freed = self._drop_environment(path, why, outcome, dry_run)
                pressure.freed += freed

    def _drop_environment(self, path: Path, why: str, outcome: Outcome, dry_run: bool) -> int:
        size = _size(path)
        name = f"{ENVS_DIR}/{path.name}"
        if not dry_run:
            try:
                with key_lock(self.home, path.name, None, wait=False):
                    remove(path)
            except (OSError, EnvironmentBusy) as exc:
                outcome.kept.append((name, f"not removed: {exc}"))
                return 0
        outcome.removed.append(Removal(name, "environment", str(path), size, why))
        return size

    def _environments_in_use(self) -> set[str]:
        """The environment of every story that may run again by itself."""
        used: set[str] = set()
        for ref in _refs(state_dir(self.home)):
            try:
                state = load_state(self.home, ref)
            except StateError:
                continue
            if state is not None and state.status not in FINISHED and state.setup:
                used.add(str(state.setup.get("key", "")))
        return used

    def _not_finished(self, key: str) -> str:
        """Why a story named to be cleaned is not (it is not a finished story)."""
        try:
            state = load_state(self.home, key)
        except StateError as exc:
            return str(exc)
        if state is None:
            return f"no story '{key}' in {state_dir(self.home)}"
        if state.status in FINISHED:
            return f"is {state.status}: nothing of it left to clean"
        return f"is {state.status}: only a finished story is cleaned; untouched"

    def _empty_trash(self, outcome: Outcome) -> None:
        """What a clean that was killed midway left in the trash goes first; not what
        another live process (a clean beside this one) is removing right now."""
        try:
            entries = os.listdir(self.trash)
        except OSError:
            return
        for name in entries:
            if _removing_elsewhere(name):
                continue
            try:
                remove_tree(self.trash / name, self.trash)
            except OSError as exc:
                outcome.kept.append((TRASH, f"not emptied: {exc}"))

    def _plan(
        self, state: RunState, rules: Rules, pressure: _Pressure
    ) -> list[tuple[str, str, str]]:
        """What of this story the rules remove: (what, where, why)."""
        ref = state.ref
        age = self.now() - _ended_at(state)
        plan: list[tuple[str, str, str]] = []
        worktree = ref.worktree(self.home)
        if os.path.lexists(worktree):
            why = ""
            if state.status == Status.PASSED and ref.key in self._merged:
                why = "its pull request is merged"
            elif rules.repos_after_s is not None and age >= rules.repos_after_s:
                why = f"finished {_age(age)} ago ({state.status})"
            else:
                why = pressure.why()
            if why and self.keep_work and state.status not in _NOTHING_LEFT:
                why += "; what it holds uncommitted is kept on its branch first"
            if why:
                plan.append(("repository", str(worktree), why))
        logs = ref.run_dir(self.home)
        if (
            rules.logs_after_s is not None
            and age >= rules.logs_after_s
            and (ref.plan or ref.id not in _HERO_RUNS)
            and os.path.lexists(logs)
        ):
            plan.append(("logs", str(logs), f"finished {_age(age)} ago"))
        why = self._branch_rule(state, rules.branches)
        if why:
            plan.append(("branch", ref.branch, why))
        return plan

    def _branch_rule(self, state: RunState, policy: str) -> str:
        """Why the story's branch goes under ``policy``, or ""."""
        if policy == "none" or state.status != Status.PASSED:
            return ""
        tip = self.repo.branch_sha(state.ref.branch)
        if tip is None:
            return ""
        if policy == "passed":
            return "the story passed"
        base = state.base_ref
        if not base or base.startswith("-"):  # not a ref, nor ever an option to git
            return ""
        found = commit_of(self.repo.path, base)
        return f"merged into {base}" if found and is_ancestor(self.repo.path, tip, found) else ""

    # -- removing -----------------------------------------------------------------------

    def _locked(self, ref: StoryRef) -> ExitStack:
        """The story's locks, as a run takes them (the home's, then the repository's);
        StoryBusy when a run holds either."""
        stack = ExitStack()
        try:
            stack.enter_context(story_lock(self.home, ref))
            stack.enter_context(self.repo.story_lock(ref, self.home))
        except BaseException:
            stack.close()
            raise
        return stack

    def _remove(
        self, state: RunState, rules: Rules, item: tuple[str, str, str], outcome: Outcome
    ) -> Removal | None:
        ref = state.ref
        what, where, why = item
        if what == "branch":
            return self._remove_branch(state, rules.branches, outcome)
        path = Path(where)
        if not os.path.lexists(path):
            return None
        if what == "repository":
            inside = self.worktrees
            kill_marked(ref.marker(self.home))  # nothing of the story may write there now
            if self.keep_work and state.status not in _NOTHING_LEFT:
                problem = self._keep_work(state)
                if problem:
                    outcome.kept.append((ref.key, f"repository kept: {problem}"))
                    return None
        else:
            inside = self.home / "runs"
        size = _size(path)
        remove_tree(path, inside, trash=self.trash if what == "repository" else None)
        self.say(f"{ref.key}: removed its {what} {path} ({human_bytes(size)}): {why}")
        return Removal(ref.key, what, str(path), size, why)

    def _keep_work(self, state: RunState) -> str:
        """What the story's repository holds that its branch lacks, committed and brought
        into the user's repository; why it could not be (then the repository stays)."""
        story = _story_of(state, self.home)
        if story is None:
            return (
                f"its story file {state.story_path or '(none recorded)'} cannot be read, and "
                "the repository may hold work its branch lacks"
            )
        config = self.config
        # a follow-up's work is on the branch of the story it revises (hero.run.revision)
        branch = root_of(self.home, state.revises).branch if state.revises else ""
        workspace = Workspace(
            story, config, self.repo, Redactor(config.secrets), self.say, branch=branch
        )
        if not workspace.story_repo.exists():
            return ""  # an earlier layout's, or no repository: removed as a folder
        workspace.base_sha = state.base_sha
        workspace.end_leftovers()
        workspace.story_repo.lay_out("")
        workspace.confine()
        end = workspace.git.keep_leftovers(
            state.head_sha,
            f"hero: keep uncommitted work before clean ({state.ref.key})",
            state.base_sha,
        )
        if end.problems:
            return "; ".join(end.problems)
        return ""

    def _remove_branch(self, state: RunState, policy: str, outcome: Outcome) -> Removal | None:
        ref = state.ref
        with self.repo.locked():
            tip = self.repo.branch_sha(ref.branch)
            why = self._branch_rule(state, policy)  # again, under the repository's lock
            if tip is None or not why:
                outcome.kept.append((ref.key, f"branch {ref.branch} kept: it changed meanwhile"))
                return None
            # -D refuses a branch checked out in a worktree of the user's repository
            git(self.repo.path, "branch", "-D", ref.branch)
        self.say(f"{ref.key}: deleted branch {ref.branch} (was {tip[:12]}): {why}")
        return Removal(ref.key, "branch", ref.branch, 0, f"{why}; was {tip[:12]}")


class _Pressure:
    """Whether worktrees/ is over its size cap, or its disk under its free-space floor,
    counting what has been removed so far (measured once, at the start)."""

    def __init__(self, worktrees: Path, rules: Rules) -> None:
        self.rules = rules
        self.freed = 0
        self.used = 0
        if rules.max_worktrees_bytes is not None:  # the project environments count too
            self.used = _size(worktrees) + _size(worktrees.parent / ENVS_DIR)
        self.free = 0
        if rules.min_free_bytes is not None:
            where = worktrees if worktrees.is_dir() else worktrees.parent
            self.free = shutil.disk_usage(where).free

    def why(self) -> str:
        cap, floor = self.rules.max_worktrees_bytes, self.rules.min_free_bytes
        if cap is not None and self.used - self.freed > cap:
            return (
                f"worktrees/ and envs/ take {human_bytes(self.used - self.freed)}, over "
                f"housekeeping_max_worktrees_mb ({human_bytes(cap)})"
            )
        if floor is not None and self.free + self.freed < floor:
            return (
                f"{human_bytes(self.free + self.freed)} free on the disk, under "
                f"housekeeping_min_free_mb ({human_bytes(floor)})"
            )
        return ""


def _refs(states: Path) -> Iterator[StoryRef]:
    """The story of every run record in ``runs/state`` (loose, then each plan's)."""
    found = [StoryRef("", p.stem) for p in sorted(states.glob("*.json"))]
    for folder in sorted(states.glob("plans/*")):
        found += [StoryRef(folder.name, p.stem) for p in sorted(folder.glob("*.json"))]
    yield from (ref for ref in found if ref.valid())


def _ended_at(state: RunState) -> float:
    return state.finished_at or state.updated_at or 0.0


def _story_of(state: RunState, home: Path) -> Story | None:
    """The story as its file says (where the record names it, or in done/), else None."""
    named = Path(state.story_path) if state.story_path else None
    places = [named] if named is not None else []
    if named is not None:
        places.append(state.ref.done_dir(home) / named.name)
    for path in places:
        try:
            story = replace(parse_story(path), plan=state.plan)
        except (StoryError, OSError):
            continue
        if story.id == state.id:
            return story
    return None


def _size(path: Path) -> int:
    """Disk use of ``path`` (as du counts it), links not followed; 0 if it is gone."""
    total = 0
    stack = [str(path)]
    while stack:
        current = stack.pop()
        try:
            st = os.lstat(current)
        except OSError:
            continue
        total += st.st_blocks * 512
        if stat.S_ISDIR(st.st_mode):
            try:
                with os.scandir(current) as entries:
                    stack.extend(entry.path for entry in entries)
            except OSError:
                continue
    return total


def remove_tree(path: Path, inside: Path, *, trash: Path | None = None) -> None:
    """Remove ``path`` (a file, a link, a tree) that lies in ``inside``, no link followed:
    a link is removed as a link, wherever it points. OSError if ``path``'s folder is not
    in ``inside`` once links are resolved (a plan's folder swapped for a link).

    With ``trash``, a folder is first renamed into it, in one step: a clean killed midway
    leaves a folder in the trash (emptied by the next one), never half a repository at the
    story's path, which a retried story's run would take for its work and commit."""
    parent = os.path.realpath(path.parent)
    root = os.path.realpath(inside)
    if parent != root and not parent.startswith(root + os.sep):
        raise OSError(f"{path} is not inside {inside}: not removed")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    if trash is not None:
        path = _to_trash(path, trash)
    try:
        shutil.rmtree(path)
    except OSError:
        _make_ours(path)  # a folder a worker made read-only or unreadable
        shutil.rmtree(path)


def _to_trash(path: Path, trash: Path) -> Path:
    """``path`` renamed into ``trash`` (made if need be, never through a link)."""
    try:
        trash.mkdir(exist_ok=True)
    except FileExistsError:
        pass
    if not stat.S_ISDIR(os.lstat(trash).st_mode):
        raise OSError(f"{trash} is not a folder: nothing moved into it")
    moved = trash / f"{path.name}-{os.getpid()}-{time.monotonic_ns()}"
    os.rename(path, moved)
    return moved


def _removing_elsewhere(name: str) -> bool:
    """Whether the trash entry ``name`` (``<id>-<pid>-<n>``) is another live process's."""
    parts = name.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _make_ours(path: Path) -> None:
    """Every folder under ``path`` (itself too) readable, writable and searchable by us, so
    that its entries can be removed; a link is never changed nor followed. Nothing of the
    story runs meanwhile (its processes were ended, its lock is held)."""
    stack = [str(path)]
    while stack:
        current = stack.pop()
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                continue
            os.chmod(current, 0o700)
            with os.scandir(current) as entries:
                stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"


def _age(seconds: float) -> str:
    if seconds >= _DAY_S:
        return f"{seconds / _DAY_S:.0f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.0f} hours"
    return f"{max(seconds, 0) / 60:.0f} minutes"
