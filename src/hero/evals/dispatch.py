"""`hero bench run` on the Celery engine: each task-run sent to a ``hero worker``.

A configuration whose ``engine`` is ``celery`` (the home's, or its overrides') runs its
task-runs on the workers of that engine, each as a story of its own, watched from the bench
as `hero watch` watches one (hero.engine.remote.RemoteRun: the record, traces and progress
mirrored into the configuration's home, the story sent again if its worker dies):

- **The worker never sees the future.** The bench makes the task's source as for the local
  engine (``make_source``: the history up to the base, nothing after) and pushes it to a
  bare repository of that task-run alone, ``<remote root>/<story id>.git`` (``--remote-root``,
  default ``DIR/remotes``: a folder the workers reach, on a shared filesystem), as its branch
  ``bench``. The task names that repository; the worker clones it fresh, with no object of
  its clone of ``target_remote`` (hero.engine.checkout), runs the story from ``bench`` and
  pushes the story's branch back there. The bench fetches that branch and judges it.
- **The configuration's settings reach the worker.** Its overrides travel in the task,
  sealed with the rest (hero.engine.seal), and the worker applies them over its own home's
  settings for that story only, as the bench applies them here (hero.config.overrides). A
  worker that cannot apply them ends the story in error, saying why.
- **Resumable, no task-run sent twice.** Before a task-run is sent, a line (``story_id``,
  ``instance_id``, ``run``, ``config``, ``remote``) is appended to
  ``DIR/dispatched-NAME.jsonl`` (flushed to disk). A bench run again with the same
  ``--out`` takes a task-run found there and not in the results under the same story id:
  one that ended while the bench was away is taken from the record mirrored here or from the
  engine's store; one still running is followed, not sent again (its lease or pending mark
  says so); one whose task was never sent (a kill between the line and the send) is sent.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from hero.config.home import Config
from hero.evals.results import append_line, check_name, read_lines
from hero.git.ops import GitError, TargetRepo, git
from hero.state import TERMINAL, RunState

#: The branch the bench's repository of a task-run holds its base on.
BENCH_BRANCH = "bench"


def dispatched_path(out: Path, name: str) -> Path:
    return out / f"dispatched-{check_name(name)}.jsonl"


def read_dispatched(out: Path, name: str) -> dict[tuple[str, int], str]:
    """(instance_id, run) -> the story id each task-run of configuration ``name`` was sent
    under (a torn last line, from a kill, is left out: its task was never sent)."""
    found: dict[tuple[str, int], str] = {}
    for row in read_lines(dispatched_path(out, name)):
        story_id = row.get("story_id")
        if isinstance(story_id, str) and story_id:
            found.setdefault((str(row.get("instance_id")), int(row.get("run") or 1)), story_id)
    return found


class _Log:
    """What RemoteRun says, as the bench's progress: warnings on stderr."""

    def __init__(self, story_id: str) -> None:
        self.story_id = story_id

    def info(self, message: str, **fields: Any) -> None:
        pass

    def warning(self, message: str, **fields: Any) -> None:
        import sys

        detail = " ".join(f"{k}={v}" for k, v in fields.items())
        sys.stderr.write(f"{self.story_id}: {message} {detail}".rstrip() + "\n")
        sys.stderr.flush()


class CeleryBench:
    """The task-runs of the configurations on one Celery engine."""

    def __init__(self, config: Config, out: Path, remote_root: Path) -> None:
        from hero.engine.app import make_app, require_extra
        from hero.engine.store import Store

        engine = config.engine
        require_extra(engine)
        self.out = out
        self.root = remote_root
        self.store = Store(engine.state_url, engine.queue, engine.lease_s)
        self.app = make_app(engine)
        self.send_lock = threading.Lock()
        self.cancel = threading.Event()
        self.lock = threading.Lock()

    def publish(self, source: Path, story_id: str) -> Path:
        """The task-run's own bare repository, holding the source's branch ``bench`` (its
        base and what that reaches, nothing else)."""
        bare = self.root / f"{story_id}.git"
        if not (bare / "HEAD").exists():
            self.root.mkdir(parents=True, exist_ok=True)
            git(self.root, "init", "--quiet", "--bare", str(bare))
        # fetched by the bare repository (a push from here is refused: hero.runner)
        git(
            bare,
            "fetch",
            "--quiet",
            "--no-tags",
            "--",
            str(source),
            f"+refs/heads/{BENCH_BRANCH}:refs/heads/{BENCH_BRANCH}",
        )
        return bare

    def run(
        self,
        name: str,
        overrides: dict[str, Any],
        config: Config,
        story_path: Path,
        source: Path,
        record: dict[str, Any] | None,
    ) -> RunState | None:
        """Run the story of ``story_path`` on a worker (``record``: the line to append
        before it is sent; None when resuming one sent before) and return its record."""
        from hero.engine.remote import RemoteRun
        from hero.state import load_state
        from hero.story.format import parse_story

        story_id = story_path.stem
        bare = self.root / f"{story_id}.git"
        if record is not None:
            bare = self.publish(source, story_id)
            with self.lock:
                append_line(dispatched_path(self.out, name), {**record, "remote": str(bare)})
        state = load_state(config.home, story_id)
        if state is not None and state.status in TERMINAL and state.finished_at is not None:
            # it ended, and was mirrored here, before the bench was stopped
            _fetch_branch(source, bare, state)
            return state
        config = replace(config, target_base_ref=BENCH_BRANCH)
        story = parse_story(story_path)
        remote = RemoteRun(
            story,
            story_path,
            config,
            self.store,
            self.app,
            TargetRepo(source),
            _Log(story_id),
            self.cancel,
            self.send_lock,
        )
        remote.extra = {"bench": {"remote": str(bare), "overrides": overrides}}
        remote.remote = str(bare)
        return remote.run()


def _fetch_branch(source: Path, bare: Path, state: RunState) -> None:
    if not state.head_sha or not state.branch:
        return
    branch = state.branch
    try:
        git(
            source, "fetch", "--quiet", "--", str(bare), f"+refs/heads/{branch}:refs/heads/{branch}"
        )
    except GitError:
        pass  # judged from its base: the branch never reached the bench's repository
