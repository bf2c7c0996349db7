"""Stories running on a repository, with their scopes: what the overlap rule
(:mod:`hero.story.overlap`) is asked about by ``hero watch`` (``overlap: serial`` holds a
story back, ``parallel`` says it starts beside one) and by ``hero status``.

Every hero process that runs a story holds the story's lock in the target repository
(``<git common dir>/hero/locks/<id>.lock``, :func:`hero.locks.repo_story_lock`), whichever
home it runs from: ``hero watch``, ``hero run``, another home's daemon on the same
repository. So the held locks are the stories running on the repository now; each lock
names its holder's home, whose run record names the story file, whose ``scope`` is read.
A story whose scope cannot be read (its record or file gone, unreadable, another hero's
home out of reach) counts as unscoped: it overlaps everything, the safe side.

The lock files, the records and the story files are read the way hero reads them anywhere
(regular files, bounded); a name that is no story's is not looked at.
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterable, Iterator
from pathlib import Path

from hero.git.ops import GitError, TargetRepo
from hero.locks import is_held, read_holder
from hero.names import StoryRef, plan_name_problem
from hero.state import StateError, load_state
from hero.story.format import parse_story
from hero.story.overlap import Scoped, stories_overlap
from hero.story.record import Story, StoryError


def repo_key(repo: TargetRepo) -> str:
    """What names the repository for the rule: its git common directory (one for every
    worktree and every home on it); its path when git cannot say."""
    try:
        return str(repo.common_dir())
    except (GitError, OSError):
        return str(Path(repo.path).resolve())


def scoped(story: Story, repo: str) -> Scoped:
    """A story as the rule sees it."""
    return Scoped(story.ref.key, repo, tuple(story.scope))


def running_on(repo: TargetRepo, home: Path, *, skip: Container[str] = ()) -> list[Scoped]:
    """The stories running on ``repo`` now, by any hero process, with their scopes; a story
    whose key is in ``skip`` is left out (the caller runs it: one story runs once on a
    repository, whatever the home). One of another home is named ``<key> (hero home
    <path>)``."""
    try:
        locks = repo.common_dir() / "hero" / "locks"
    except (GitError, OSError):
        return []
    key = repo_key(repo)
    here = _resolved(home)
    found: list[Scoped] = []
    for ref, lock in _held(locks):
        if ref.key in skip:
            continue
        holder = read_holder(lock)
        where = holder.get("home") if isinstance(holder.get("home"), str) else ""
        other = _resolved(Path(where)) if where else None
        name = ref.key if other == here else f"{ref.key} (hero home {where or 'unknown'})"
        found.append(Scoped(name, key, _scope_of(other, ref)))
    return found


def blockers(story: Scoped, running: Iterable[Scoped]) -> list[str]:
    """The keys of the running stories whose scopes overlap ``story``'s."""
    return [r.key for r in running if r.key != story.key and stories_overlap(story, r)]


def wait_reason(waits_for: list[str]) -> str:
    """What a story held back by ``overlap: serial`` waits for, in a few words."""
    return f"waits for {', '.join(waits_for)} to end: their scopes overlap (overlap: serial)"


def _held(locks: Path) -> Iterator[tuple[StoryRef, Path]]:
    """The story locks held under ``locks`` (loose stories, then plans'). A lock's file
    stays when its story ends, emptied (hero.locks.repo_story_lock): only a file that holds
    something is opened to ask whether it is held, so a repository with thousands of
    finished stories costs a directory listing."""
    for plan, folder in [("", locks), *_plan_folders(locks / "plans")]:
        for path in _lock_files(folder):
            ref = StoryRef(plan, path.name[: -len(".lock")])
            if ref.valid() and is_held(path):
                yield ref, path


def _plan_folders(directory: Path) -> list[tuple[str, Path]]:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [(n, directory / n) for n in names if plan_name_problem(n) is None]


def _lock_files(folder: Path) -> list[Path]:
    """The lock files in ``folder`` that hold a holder's line (none: not held)."""
    found = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    if (
                        entry.name.endswith(".lock")
                        and entry.is_file(follow_symlinks=False)
                        and entry.stat(follow_symlinks=False).st_size > 0
                    ):
                        found.append(Path(entry.path))
                except OSError:  # gone meanwhile
                    continue
    except OSError:
        return []
    return sorted(found)


def _scope_of(home: Path | None, ref: StoryRef) -> tuple[str, ...]:
    """The scope of the story ``ref`` runs in ``home``; () (everything) when unknown."""
    if home is None:
        return ()
    try:
        state = load_state(home, ref)
        if state is None or not state.story_path:
            return ()
        return tuple(parse_story(Path(state.story_path)).scope)
    except (StateError, StoryError, OSError, ValueError):
        return ()
    except Exception:  # noqa: BLE001 - another run's files must not stop the daemon
        return ()


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path
