"""What every tool shares: the context it runs in, the outcome it returns, the error it raises."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hero.errors import HeroError

if TYPE_CHECKING:
    from hero.agent.tools.policy import Policy
    from hero.sandbox.bwrap import Sandbox
    from hero.sandbox.session import SandboxSession


class ToolError(HeroError):
    """A tool failed in a way the model should read about (bad path, bad argument, ...)."""


@dataclass
class ToolContext:
    root: Path  # the worktree; resolved once in __post_init__
    env: Mapping[str, str]  # environment for bash (already built with child_env)
    bash_timeout_s: float = 300.0  # default per-call timeout; the model's timeout_s is capped
    max_bash_timeout_s: float = 1800.0
    cancel: threading.Event | None = None
    max_result_chars: int = 20_000  # tool result text cap (truncate_middle)
    # grep engine. None: rg when found (search.find_rg), else the pure-Python grep;
    # True: rg, or an error when it is missing; False: the pure-Python grep.
    use_ripgrep: bool | None = None
    # -- safety: what a worker's command may touch and run ------------------------------
    # how bash commands are confined: a sandbox per command, the worker's one sandbox for
    # the round, or None for none
    sandbox: Sandbox | SandboxSession | None = None
    # the command policy bash commands are checked against, or None
    policy: Policy | None = None
    # the story's scope globs (empty: the whole worktree) and the files never written
    scope: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    # the story's base commit: after each bash command, changes since it outside the scope
    # or to protected files are put back (hero.agent.tools.scope); "": not checked
    base_sha: str = ""
    # every secret value hero knows: redacted from what a tool returns to the model
    secrets: tuple[str, ...] = field(default=(), repr=False)
    # run before hero's own git looks at the worktree during the turn (the scope check):
    # puts back what hero owns of the story's git directory (StoryRepo.make_safe); its note
    # goes to the tool result
    before_git: Callable[[], str] | None = None
    # (until when, on time.monotonic_ns) and the worktree as the last clean scope check found
    # it (hero.agent.tools.scope.stamp): while a command leaves it so, the next check is
    # skipped; None: the next check is full
    scope_stamp: tuple[int, tuple[object, ...]] | None = field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()


@dataclass(frozen=True)
class ToolOutcome:
    content: str  # text sent back to the model as the tool message
    is_error: bool
    command_s: float = 0.0  # time spent in a subprocess (bash), for the benchmark


def os_reason(exc: BaseException) -> str:
    """The short reason an OS error gives ("Permission denied"), for a ToolError message."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
