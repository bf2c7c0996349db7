"""The repositories a ``hero worker`` runs stories on, and a `hero bench` task-run's own.

- A story of ``hero watch``: the worker's clone of ``target_remote`` (``<workdir>/repo``),
  fetched before each story; the story's repository borrows its objects.
- A bench task-run (its payload carries ``bench``, sealed with the rest of the task): the
  repository the bench made for that task-run alone (``remote``: the task's history up to
  its base, nothing after), cloned fresh into ``<workdir>/bench/<story>/repo`` with no
  object of the shared clone (``--no-local``: no hard links to the bench's repository
  either), and the configuration's ``overrides`` applied over this worker's home's settings
  for that story only (hero.config.overrides, as `hero bench run` applies them locally). The
  story's branch is pushed back there, where the bench judges it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hero.config.home import Config
from hero.engine.trust import Untrusted
from hero.errors import UsageError
from hero.git.ops import git
from hero.git.refs import Change, read_refs, update_refs

#: Where a worker's clone keeps the remote's branches (``refs/hero/`` is hero's own).
REMOTE_REFS = "refs/hero/origin/"
REMOTE_REFSPEC = f"+refs/heads/*:{REMOTE_REFS}*"
#: The longest repository URL or path a bench task may name.
MAX_REMOTE_CHARS = 4096


@dataclass(frozen=True)
class BenchRun:
    """What a bench task-run's payload adds: its repository, its configuration's overrides."""

    remote: str
    overrides: dict[str, Any]


def bench_of(payload: dict[str, Any]) -> BenchRun | None:
    """The ``bench`` part of an authenticated payload, checked; None for a story of `hero
    watch`."""
    value = payload.get("bench")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Untrusted("bench: expected an object")
    remote, overrides = value.get("remote"), value.get("overrides") or {}
    if (
        not isinstance(remote, str)
        or not remote
        or len(remote) > MAX_REMOTE_CHARS
        or remote.startswith("-")
        or not remote.isprintable()
    ):
        raise Untrusted("bench.remote: expected a repository's URL or path")
    if not isinstance(overrides, dict):
        raise Untrusted("bench.overrides: expected an object")
    return BenchRun(remote, overrides)


def sync_clone(remote: str, path: Path, *, fresh: bool = False) -> bool:
    """``path`` a clone of ``remote``, fetched now (every branch, under REMOTE_REFS); with
    ``fresh``, cloned anew (``--no-local``: objects copied, never linked or borrowed).
    Whether it was cloned now (False: an existing clone, fetched)."""
    if fresh and path.exists():
        shutil.rmtree(path)
    cloned = not (path / ".git").exists()
    if cloned:
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # afresh: objects copied, never hard links to the remote's files (a shared clone of
        # target_remote is made as it always was)
        local = ["--no-local"] if fresh else []
        git(path.parent, "clone", "--quiet", *local, "--", remote, str(path), timeout_s=600)
        # the remote's branches under refs/hero/origin/: hero's own namespace, which the ref
        # guard of the stories running here leaves alone (a fetch or a push for one story
        # must not look like another story's worker moving refs)
        git(path, "config", "--replace-all", "remote.origin.fetch", REMOTE_REFSPEC)
        update_refs(path, [Change(ref) for ref in read_refs(path, "refs/remotes")])
    git(path, "fetch", "--quiet", "--prune", "origin", timeout_s=600)
    return cloned


def worker_kept_keys() -> frozenset[str]:
    """The settings a bench configuration's overrides may not change on a worker: what keeps
    the worker's machine safe is the worker's own choice, not the sender's."""
    from hero.config.sections import Safety
    from hero.config.settings import settings_of
    from hero.sandbox.limits import Limits

    keys = {s.key for s in (*settings_of(Safety), *settings_of(Limits))}
    return frozenset({*keys, "mcp_servers"})


def bench_config(config: Config, bench: BenchRun, derived: Path, key: str) -> Config:
    """The worker's ``config`` with the bench configuration's overrides applied (its own
    home, engine and secrets kept); UsageError naming the story and key when they cannot be
    applied."""
    from dataclasses import replace

    from hero.config.overrides import check_overrides, derived_home, merged_roles

    where = f"the overrides sent with bench story {key}"
    over = check_overrides(bench.overrides, where)
    kept = sorted(set(over) & worker_kept_keys())
    if kept:
        raise UsageError(
            f"{where}: {kept[0]}: a worker keeps its own safety settings (the sandbox, its "
            "limits and network, the environment passed, the command rules, MCP servers); "
            "a bench configuration may not change them on a worker"
        )
    merged = merged_roles(config.home, over)
    merged.pop("target_repo", None)  # the worker has the remote only
    loaded = derived_home(config.home, merged, derived, where, worker=True)
    return replace(loaded, home=config.home, engine=config.engine)
