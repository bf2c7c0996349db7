"""A ``hero worker`` warms up before it takes its first story, so that its first story starts
as fast as its later ones (:func:`warm`):

- **imports**: the modules a story's run loads (the pipeline, the roles, the agent loop, the
  model client and the ``openai`` SDK under it: some 600 modules, most of a second on a small
  machine), loaded in the process that runs the tasks (``hero worker`` runs Celery's threads
  pool: the tasks run in this very process), and a story's model clients made once (the
  SDK's lazy parts, the HTTP client);
- **remote**: the worker's clone of ``target_remote``, cloned (in the worker's home, moved
  into ``<workdir>/repo`` by the first trusted story: :func:`staged_clone`) or fetched now:
  the first story fetches only what the remote got since;
- **environment**: the project's environment (``setup:`` in the worker's home), made now
  for the remote's base branch (``target_base_ref``, else the remote's default branch) when
  it can be kept and reused (with a sandbox: hero.run.environment); a story whose key
  matches reuses it.

Each step is timed and said; a step that fails is said and skipped (the story does it, as
it would have without the warm-up): a warm-up never stops the worker. A `hero bench`
task-run clones its own repository afresh by design: nothing of it is warmed.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hero.engine.checkout import REMOTE_REFS, sync_clone
from hero.errors import Interrupted
from hero.git.ops import TargetRepo, commit_of, git
from hero.redact import Redactor

if TYPE_CHECKING:
    from hero.config.home import Config


class Fleet(Protocol):
    """What the warm-up needs of a worker (hero.engine.worker.Fleet)."""

    @property
    def config(self) -> Config: ...
    @property
    def workdir(self) -> Path: ...
    @property
    def repo_path(self) -> Path: ...
    @property
    def home(self) -> Path: ...
    @property
    def repo_lock(self) -> threading.Lock: ...


#: What a story's run imports on its worker that ``hero worker`` has not loaded by the time
#: Celery starts (found by comparing ``sys.modules`` around a first story).
STORY_MODULES = (
    "hero.run.pipeline",
    "hero.run.keepup",
    "hero.run.record",
    "hero.run.start",
    "hero.run.events",
    "hero.run.cancel",
    "hero.roles.worker",
    "hero.roles.looking",
    "hero.agent.loop",
    "hero.agent.replay",
    "hero.agent.window",
    "hero.llm.client",
    "hero.memory.recall",
    "hero.story.feedback",
    "hero.git.keepup",
)


@dataclass(frozen=True)
class Warmed:
    """One step of the warm-up: what, how long, what came of it (``ok`` False: it failed,
    and the first story does it)."""

    step: str
    seconds: float
    detail: str
    ok: bool = True

    def line(self) -> str:
        if not self.ok:
            return f"{self.step}: not warmed ({self.detail}); the first story does it"
        return f"{self.step}: {self.detail} in {self.seconds:.2f} s"


def warm(
    fleet: Fleet,
    *,
    cancel: threading.Event | None = None,
    say: Callable[[Warmed], None] = lambda w: None,
) -> list[Warmed]:
    """Imports, the remote's objects, the project's environment: each step timed, said with
    ``say`` as it ends, returned; never raises for a step that fails (but for an interrupt:
    ``cancel`` stops a setup under way)."""
    steps: list[tuple[str, Callable[[], str]]] = [
        ("imports", lambda: _imports(fleet)),
        ("remote", lambda: _remote(fleet)),
        ("environment", lambda: _environment(fleet, cancel)),
    ]
    done: list[Warmed] = []
    for step, run in steps:
        if cancel is not None and cancel.is_set():
            break
        started = time.monotonic()
        try:
            detail, ok = run(), True
        except Exception as exc:  # noqa: BLE001 - a warm-up that fails must not stop the worker
            detail, ok = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}", False
            detail = Redactor(fleet.config.secrets).redact(detail)  # a URL's token
        warmed = Warmed(step, time.monotonic() - started, detail, ok)
        done.append(warmed)
        say(warmed)
    return done


def warm_up(fleet: Fleet, say: Callable[[Warmed], None]) -> bool:
    """:func:`warm`, stoppable with SIGTERM or SIGINT (Celery's own handlers are not there
    yet): False when it was stopped (the worker then exits without taking a story)."""
    import signal

    cancel = threading.Event()
    kept: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            kept[signum] = signal.signal(signum, lambda *_: cancel.set())
    try:
        warm(fleet, cancel=cancel, say=say)
    except Interrupted:  # a setup stopped by the signal
        cancel.set()
    finally:
        for signum, handler in kept.items():
            signal.signal(signum, handler)
    return not cancel.is_set()


def _imports(fleet: Fleet) -> str:
    before = len(sys.modules)
    for name in STORY_MODULES:
        importlib.import_module(name)
    from hero.llm.client import story_clients

    clients = ""
    try:
        worker, _reviewer = story_clients(fleet.config)  # the SDK's lazy parts; no request
        worker.http_client.close()  # the reviewer shares it
    except Exception as exc:  # noqa: BLE001 - a role's model the story itself will name
        clients = f" (model clients not made: {type(exc).__name__})"
    return f"{len(sys.modules) - before} modules loaded{clients}"


def staged_clone(fleet: Fleet) -> Path:
    """Where the warm-up clones the remote when the work folder has no clone yet: in the
    worker's own hero home, one per work folder. The first story that is a coordinator's
    (its task authenticated) moves it into the work folder (:func:`adopt_staged`): the work
    folder holds only what trusted stories made, a refused task leaves nothing there."""
    digest = hashlib.sha256(str(fleet.workdir).encode()).hexdigest()[:16]
    return fleet.config.home / "worker-warm" / digest / "repo"


def adopt_staged(fleet: Fleet) -> bool:
    """The warm-up's clone moved to the worker's clone's place when that has none (under
    ``repo_lock``); whether it was. A clone that cannot be moved (another filesystem) is left:
    the story clones the remote as it did before."""
    staged, path = staged_clone(fleet), fleet.repo_path
    if (path / ".git").exists() or not (staged / ".git").is_dir():
        return False
    try:
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staged, path)
    except OSError:
        return False
    return True


def _remote(fleet: Fleet) -> str:
    remote = fleet.config.engine.target_remote
    with fleet.repo_lock:
        if (fleet.repo_path / ".git").exists():
            sync_clone(remote, fleet.repo_path)
            return f"fetched target_remote into {fleet.repo_path}"
        staged = staged_clone(fleet)
        cloned = sync_clone(remote, staged)
    how = "cloned" if cloned else "fetched"
    return f"{how} target_remote into {staged} (the first story moves it into the work folder)"


def base_of(repo: Path, target_base_ref: str) -> str:
    """The remote's branch stories start from, as this clone has it: ``target_base_ref``
    when the remote has that branch, else the remote's default branch (the clone's HEAD);
    "" when neither is there."""
    if target_base_ref and commit_of(repo, f"{REMOTE_REFS}{target_base_ref}"):
        return commit_of(repo, f"{REMOTE_REFS}{target_base_ref}")
    head = git(repo, "symbolic-ref", "--quiet", "HEAD", check=False).strip()
    branch = head.removeprefix("refs/heads/") if head.startswith("refs/heads/") else ""
    return commit_of(repo, f"{REMOTE_REFS}{branch}") if branch else ""


def _environment(fleet: Fleet, cancel: threading.Event | None) -> str:
    from hero.run.environment import Setup, setup_commands
    from hero.runner import child_env

    clone = fleet.repo_path if (fleet.repo_path / ".git").exists() else staged_clone(fleet)
    config = replace(fleet.config, home=fleet.home, target_repo=clone)
    commands = setup_commands(config, ())
    if not commands:
        return "none declared (no setup)"
    repo = TargetRepo(clone)
    base = base_of(repo.path, config.target_base_ref or "")
    if not base:
        raise RuntimeError("the remote's base branch is not in the worker's clone")
    env = child_env(
        allow=config.safety.pass_env,
        drop_names=config.key_env_names,
        secret_values=config.secrets,
        extra=repo.identity_env(),
    )
    log = fleet.workdir / "warm-setup.log"
    redactor = Redactor(config.secrets)
    setup = Setup(config, repo, base, commands, env, log, redactor, cancel)
    if not setup.sandboxed():
        return "not made ahead: without a sandbox each story makes it in its own repository"
    environment, reused = setup.ensure(fleet.workdir)
    how = "found made" if reused else f"made (setup {environment.seconds:.1f} s, log {log})"
    return f"{environment.key} {how}"
