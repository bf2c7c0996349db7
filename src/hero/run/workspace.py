"""Where one story's work happens: its own repository, claimed, confined and tidied.

A story works in its own repository at ``worktrees/<id>`` (``hero.git.storyrepo``), on the
story branch, borrowing the user's objects read-only; hero alone brings its commits back.
This module lays that repository out for a run (keeping whatever an earlier run left),
claims the branch for this hero home, sets an earlier run's repository aside before a fresh
start, builds the sandboxes its commands run in (the worker's, the checks', and hero's own
git at each phase's end) and the worker's tool context, and keeps the worktree within the
story's scope before hero commits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from hero.agent.tools import ToolContext
from hero.agent.tools.external import ExternalTool
from hero.agent.tools.policy import Policy
from hero.agent.tools.scope import path_rules, undo_outside, unhide_outside
from hero.agent.tools.toolset import Toolset, select_tools
from hero.config.home import Config
from hero.config.tools import configured_servers, role_patterns
from hero.git.guard import push_refusals
from hero.git.ops import GitError, TargetRepo, clear_stale_locks, confined, git
from hero.git.output import commit_all
from hero.git.phases import StoryGit
from hero.git.storyrepo import BringBackRefused, StoryRepo
from hero.git.wip import (
    Snapshot,
    check_secrets,
    commit_snapshot,
    restore,
    tree_of,
    worktree_tree,
)
from hero.github.defang import commit_message_rule
from hero.leftovers import RUN_MARKER, kill_marked
from hero.redact import Redactor
from hero.roles.reviewer import Looking
from hero.run.baseline import run_baseline
from hero.run.environment import Environment, Setup, setup_commands
from hero.runner import child_env
from hero.sandbox.bwrap import Sandbox
from hero.sandbox.bwrap import resolve as resolve_sandbox
from hero.sandbox.session import SandboxSession
from hero.state import RunState
from hero.story.record import Story, VerifyTier

if TYPE_CHECKING:
    from hero.trace import Trace

Progress = Callable[[str], None]


def user_base(story: Story, config: Config) -> str:
    """The user's ref a story starts from (for a story with dependencies, the one it would
    start from without them): where submodule URLs are read."""
    return story.base_ref or config.target_base_ref or "HEAD"


class Workspace:
    """One story's repository at ``worktrees/<id>`` and the sandboxes of its commands."""

    def __init__(
        self,
        story: Story,
        config: Config,
        repo: TargetRepo,
        redactor: Redactor,
        say: Progress,
        *,
        branch: str = "",
    ) -> None:
        self.story = story
        self.config = config
        self.repo = repo
        self.redactor = redactor
        self.say = say
        self.ref = story.ref
        self.key = self.ref.key
        #: the story's branch: its own, or a follow-up's, the revised story's (hero.run.revision)
        self.branch = branch or self.ref.branch
        self.path = self.ref.worktree(config.home)
        # a story from a GitHub issue: its commits close no other issue and mention no one
        self.story_repo = StoryRepo(
            repo,
            self.path,
            self.branch,
            user_base(story, config),
            messages=commit_message_rule(story.source),
            build_output=config.project.build_output,
        )
        #: hero's git at the end of each phase (see hero.git.phases)
        self.git = StoryGit(repo, self.story_repo, secrets=redactor, tidy=self._tidy)
        #: the story's base commit, once its run record is known (the scope is kept since it)
        self.base_sha = ""
        # where the worker's and the checks' commands run; built by confine()
        self.worker_sandbox: Sandbox | None = None
        self.verify_sandbox: Sandbox | None = None
        #: where hero's own git walks the story's repository at a phase's end
        self.git_sandbox: Sandbox | None = None
        #: the project's environment (hero.run.environment), once set up; None: no setup
        self.environment: Environment | None = None
        self._warned: set[str] = set()  # warnings said in this run
        self._boxes: dict[object, Sandbox | None] = {}  # confine()'s, by what they bind

    # -- before the run ---------------------------------------------------------------

    def end_leftovers(self) -> None:
        """Before any git call on the story: end the processes an earlier run left running
        (a run killed with SIGKILL cannot), then clear the git lock files left by a git that
        died with it (waiting for any that a live process holds)."""
        if kill_marked(self.ref.marker(self.config.home)):
            self.say(f"{self.key}: ended processes left running by an earlier run")
        clear_stale_locks(self.repo, self.branch, self.path, self.say)

    def prepare(self, state: RunState) -> dict[str, str]:
        """Lay out the story's repository (keeping what an earlier run left there) on the
        story branch; returns the children's env."""
        self.base_sha = state.base_sha
        story_repo = self.story_repo
        with self.repo.locked():
            tip = self.repo.branch_sha(self.branch)
            if tip is None:
                tip = state.base_sha
                git(self.repo.path, "update-ref", f"refs/heads/{self.branch}", tip, "")
        existed = story_repo.exists()
        self.claim_branch()
        notes = story_repo.lay_out(tip)
        tip = self.repo.branch_sha(self.branch) or tip  # an earlier layout's work, kept on it
        self.confine()
        if existed:  # a run that crashed: keep what it left
            self.keep_leftovers(state)
            tip = self.repo.branch_sha(self.branch) or tip
        notes += story_repo.catch_up(tip)
        notes += story_repo.init_submodules()
        for note in notes:
            self.say(f"{self.key}: {note}")
        self.confine()  # again: the submodules' git directories are guarded too
        return child_env(
            allow=self.config.safety.pass_env,
            drop_names=self.config.key_env_names,
            secret_values=self.config.secrets,
            extra={**self.repo.identity_env(), RUN_MARKER: self.ref.marker(self.config.home)},
            git_config=push_refusals(self.repo.path),
        )

    def set_up(
        self, state: RunState, env: dict[str, str], cancel: threading.Event | None
    ) -> dict[str, object]:
        """The project's environment (``setup``), found or made, and the sandboxes rebuilt
        with it; returns the run record's ``setup`` ({} when none is declared). SetupFailed
        when a setup command fails. Without a sandbox, its tools go first on ``env``'s PATH."""
        commands = setup_commands(self.config, self.story.setup)
        if not commands:
            return {}
        log = self.ref.run_dir(self.config.home) / "setup.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        setup = Setup(
            self.config, self.repo, state.base_sha, commands, env, log, self.redactor, cancel
        )
        self.say(f"{self.key}: setting up the project's environment")
        environment, reused = setup.ensure(self.path)
        if reused and not log.exists():
            log.write_text(f"reused environment {environment.key}: no setup ran\n")
        self.environment = environment
        # what it made is never committed, by the worker's `git add -A` either
        self.story_repo.excluded = "".join(f"/{_literal(d)}/\n" for d in environment.excluded)
        self.story_repo.make_safe()
        environment.tools_first(env)
        self.confine()
        how = "reused" if reused else f"made in {environment.seconds:.1f} s"
        self.say(f"{self.key}: project environment {environment.key} {how}")
        return environment.record(reused=reused, log=str(log))

    def worker_refit(self) -> Sandbox:
        """The worker's sandbox for a round, refitted as ``verify_refit`` does."""
        if self.environment is not None and self.environment.path is not None:
            self.confine()
        assert self.worker_sandbox is not None
        return self.worker_sandbox

    def verify_refit(self) -> Sandbox | None:
        """The checks' sandbox, its environment's mount points checked again first (the
        worker may have put a link where one goes)."""
        if self.environment is not None and self.environment.path is not None:
            self.confine()
        return self.verify_sandbox

    def baseline(
        self,
        tiers: tuple[VerifyTier, ...],
        env: dict[str, str],
        cancel: threading.Event | None,
    ) -> dict[str, object]:
        """The story's checks on its starting commit (hero.run.baseline)."""
        self.confine()  # the environment's mount points, checked again
        commit = self.repo.branch_sha(self.branch) or self.base_sha
        self.story_repo.make_safe()
        guard = self.git.watch(commit)  # as a round's checks: they may not move refs
        with self._own_git():
            found = run_baseline(
                tiers,
                self.path,
                home=self.config.home,
                branch=self.branch,
                commit=commit,
                env_key=self.environment.key if self.environment else "",
                env=env,
                timeout_s=self.config.verify_timeout_ms / 1000,
                log_path=self.ref.run_dir(self.config.home) / "baseline.log",
                sandbox=self.verify_sandbox,
                redact=self.redactor,
                cancel=cancel,
            )
        for problem in self.git.end_checks(guard).problems:  # undone: said, the story goes on
            self.say(f"{self.key}: before round 1: {problem}")
        return found

    def confine(self) -> None:
        """Build the sandbox of the worker's and of the checks' commands (``sandbox`` in
        config/roles.yaml), once per run: ``auto`` without a working bwrap warns here, once;
        ``bwrap`` without one raises SandboxUnavailable, which ends the story in error."""
        safety = self.config.safety

        def sandbox(environment: Environment | None = None) -> Sandbox | None:
            guarded = tuple(self.story_repo.guarded())
            mounts = environment.mounts(self.path) if environment else None
            key = (guarded, mounts)
            if key not in self._boxes:  # built once per layout: a build asks git
                self._boxes[key] = resolve_sandbox(
                    safety.sandbox,
                    worktree=self.path,
                    objects=self.story_repo.objects_dir(),
                    guarded=guarded,
                    hide=(self.config.home, self.repo.path),
                    limits=safety.limits,
                    project=mounts,
                    toolchains=safety.toolchain_dirs,
                    cgroups=safety.sandbox_cgroups != "off",
                    warn=self.warn_once,
                )
            return self._boxes[key]

        box = sandbox()
        env = self.environment
        with_env = sandbox(env) if box is not None and env is not None and env.path else box
        self.worker_sandbox = with_env and with_env.with_network(safety.sandbox_network)
        self.verify_sandbox = with_env and with_env.with_network(safety.verify_network)
        self.git_sandbox = box and box.with_network(False)
        self.git.sandbox = self.git_sandbox.wrap if self.git_sandbox is not None else None

    def warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.say(f"{self.key}: {message}")

    def keep_leftovers(self, state: RunState, why: str = "found on resume") -> None:
        """After a run that crashed or was stopped: commit what it left (unless it holds
        unresolved conflicts) and put the worktree back on the branch."""
        end = self.git.keep_leftovers(
            state.head_sha, f"hero: keep uncommitted work {why} ({self.key})", state.base_sha
        )
        state.head_sha = end.head or state.head_sha
        for line in (*end.notes, *end.problems):
            self.say(f"{self.key}: {line}")

    # -- the branch -------------------------------------------------------------------

    def claim_branch(self) -> None:
        """Record this home's story repository as the one working on the branch; GitError
        if another one that still exists does (another home's, or a person's work)."""
        # where the user's repository records which story repository works on the branch
        # (a hero home's worktrees/<id>): another home never takes it over
        owner = self.repo.common_dir() / "hero" / "owners" / f"{self.ref.rel}.path"
        try:
            other = Path(owner.read_text(encoding="utf-8").strip())
        except (OSError, UnicodeDecodeError):
            other = None
        if other is not None and other != self.path and other.exists():
            raise GitError(
                f"branch '{self.branch}' is checked out in {other}, a worktree this hero home "
                "did not create: it may hold another hero home's or a person's uncommitted "
                f"work, so hero leaves it alone. Finish the work there, or remove {other}, "
                "then run the story again"
            )
        owner.parent.mkdir(parents=True, exist_ok=True)
        owner.write_text(f"{self.path}\n", encoding="utf-8")

    def set_aside(self) -> str:
        """Before a fresh start: the story's repository's work committed and brought into
        the user's, the story branch renamed aside (returned), the repository removed."""
        story_repo = self.story_repo
        self.claim_branch()
        if story_repo.exists():
            story_repo.lay_out("")
            self.confine()
            with self._own_git():
                commit_all(
                    self.path,
                    f"hero: keep uncommitted work before a fresh start ({self.key})",
                    self.repo.identity_env(),
                    story_repo.build_output,
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
            kept = self.repo.keep_branch_aside(self.branch, self.path)
        story_repo.remove()
        return kept

    def _own_git(self) -> AbstractContextManager[None]:
        """The block within which hero's own git in the story's repository runs in the
        sandbox (see ``hero.git.ops.confined``)."""
        box = self.git_sandbox
        return confined(self.path, box.wrap if box is not None else None)

    def _tidy(self) -> tuple[list[str], list[str]]:
        """Before hero's commit at a phase's end: what appeared outside the scope since the
        last bash check is undone (a new ignore file there first, so that nothing it hid
        stays); returns (what was undone, what could not be: the round fails)."""
        rules = path_rules(self.story.scope, self.config.safety.protected_files)
        tidied = [
            f"removed {path}, a new ignore file outside the scope"
            for path in unhide_outside(self.path, rules)
        ]
        undone = undo_outside(self.path, self.base_sha, rules)
        tidied += [f"undone before hero's commit: {line}" for line in undone.lines()]
        for line in tidied:
            self.say(f"{self.key}: {line}")
        return tidied, [f"a change outside the story's scope: {line}" for line in undone.failures()]

    # -- work in progress (see hero.git.wip) -------------------------------------------

    def snapshot(self, ref: str, last: Snapshot | None = None) -> Snapshot:
        """A commit of the worktree on the story branch's tip as hero last brought it back,
        kept in the target's ``ref`` (none when the worktree is the tip's; ``last`` again
        when nothing changed since it). Between two commands of the worker's; WipRefused
        when a changed file holds a secret value, GitError when git fails."""
        tip = self.repo.branch_sha(self.branch) or ""
        if not tip or not self.story_repo.exists():
            raise GitError(f"{self.branch} has no checkout to snapshot in {self.path}")
        self.story_repo.make_safe()
        with self._own_git():
            tree = worktree_tree(self.path, self.story_repo.gitdir, self.story_repo.build_output)
            if last is not None and (last.tip, last.tree) == (tip, tree):
                return last
            if tree == tree_of(self.path, tip):
                return Snapshot(tip, tree, "")
            check_secrets(self.path, tip, tree, self.base_sha, self.redactor)
            sha = commit_snapshot(self.path, tree, tip, self.repo.identity_env())
        self.story_repo.keep_commit(sha, ref)  # the lock held while the ref moves alone
        return Snapshot(tip, tree, sha)

    def restore(self, sha: str) -> None:
        """The worktree made snapshot ``sha``'s tree (the branch's tip must be its parent),
        the changes uncommitted; before the worker's turn."""
        self.story_repo.make_safe()
        with self._own_git():
            restore(self.path, sha)

    # -- the worker's turn ------------------------------------------------------------

    def tool_context(self, env: dict[str, str], cancel: threading.Event | None) -> ToolContext:
        """What the worker's tools run with: its commands share one sandbox for the round
        (made at the first, ended by :meth:`end_sandbox`), checked against the command
        policy (the worker's only: the checks' commands are the user's own)."""
        limits = self.config.worker_limits
        safety = self.config.safety
        box = self.worker_sandbox
        return ToolContext(
            root=self.path,
            env=env,
            bash_timeout_s=limits.bash_timeout_s,
            max_bash_timeout_s=max(limits.bash_timeout_s, 1800.0),
            cancel=cancel,
            sandbox=None if box is None else SandboxSession(self.worker_refit(), self.path),
            policy=Policy.from_rules(allow=safety.allow_commands, deny=safety.deny_commands),
            scope=self.story.scope,
            protected=safety.protected_files,
            secrets=self.config.secrets,
            base_sha=self.base_sha,
            # puts back what hero owns of the story's git directory before hero's own git
            # looks at the worktree during the turn (the scope check)
            before_git=self.story_repo.make_safe,
        )

    def servers_for(self, role: str) -> tuple[str, ...]:
        """The MCP servers ``role``'s ``tools`` name (``<server>.<tool>`` or ``<server>.*``),
        in the order they are configured: the only ones started for it."""
        servers = configured_servers(self.config)
        patterns = role_patterns(self.config.role(role).tools, role, servers)
        named = {p.partition(".")[0] for p in patterns if "." in p}
        return tuple(name for name in servers if name in named)

    @contextmanager
    def mcp_for(
        self,
        role: str,
        ctx: ToolContext,
        *,
        trace: Trace | None = None,
        say: Callable[[str], None] | None = None,
    ) -> Iterator[tuple[ExternalTool, ...]]:
        """The MCP servers ``role``'s tools name, started for the block (the worker's turn,
        the reviewer's look) and stopped when it ends, also on an error or a cancel: their
        tools (``ExternalTool``, for ``toolset``). A stdio server runs in the worker's
        sandbox (its own network rule) with ``ctx``'s environment. A role that names no
        server starts nothing. A server that did not start is said in ``trace`` and by
        ``say``; the block goes on without its tools."""
        names = self.servers_for(role)
        if not names:
            yield ()
            return
        from hero.agent.mcp.servers import McpServers

        box = self.worker_sandbox
        servers = McpServers(
            [server for server in self.config.mcp_servers if server.name in names],
            cwd=self.path,
            env=ctx.env,
            sandbox=None if box is None else self.worker_refit(),
            max_result_chars=ctx.max_result_chars,
            cancel=ctx.cancel,
            secrets=ctx.secrets,
        )
        try:
            servers.start()
            if trace is not None:
                by = "" if role == "worker" else role
                trace.mcp(servers.report(), [tool.schema() for tool in servers.tools], by=by)
            when = "this round" if role == "worker" else f"for the {role}"
            for name, why in servers.problems.items():
                if say is not None:
                    say(f"{self.key}: MCP server {name}: no tools {when}: {why}")
            yield tuple(servers.tools)
        finally:
            servers.close()

    def toolset(self, role: str, external: Sequence[ExternalTool] = ()) -> Toolset:
        """The tools ``role``'s model is given: its ``tools`` (the story's narrowing
        applied by hero.llm.models.story_config) selected from hero's and ``external``."""
        servers = configured_servers(self.config)
        patterns = role_patterns(self.config.role(role).tools, role, servers)
        tools = select_tools(patterns, external, role=role, servers=servers)
        for note in tools.notes:
            self.warn_once(f"{self.key}: {note}")
        return tools

    @contextmanager
    def looking(
        self,
        env: dict[str, str],
        cancel: threading.Event | None = None,
        *,
        trace: Trace | None = None,
        say: Callable[[str], None] | None = None,
    ) -> Iterator[Looking | None]:
        """What the reviewer looks around with (hero.roles.looking) for the block: its
        toolset, hero's tools read-only in the story's repository, plus the tools of the MCP
        servers its ``tools`` name (started as for the worker, with ``env``, by
        :meth:`mcp_for`, and stopped when the block ends); None when its ``tools`` are empty
        (one call, as ever)."""
        servers = configured_servers(self.config)
        if not role_patterns(self.config.role("reviewer").tools, "reviewer", servers):
            yield None
            return
        ctx = ToolContext(
            root=self.path,
            env={},
            cancel=cancel,
            secrets=self.config.secrets,
            before_git=self.story_repo.make_safe,
        )
        server_ctx = ToolContext(root=self.path, env=env, cancel=cancel, secrets=ctx.secrets)
        with self.mcp_for("reviewer", server_ctx, trace=trace, say=say) as external:
            tools = self.toolset("reviewer", external)
            yield Looking(tools, ctx, self.config.worker_limits.review_tool_calls)

    def own_git(self) -> AbstractContextManager[None]:
        """The block within which hero's git in the story's repository (the reviewer's
        git_log and git_show too) runs in the sandbox of hero's own git."""
        return self._own_git()

    def end_sandbox(self, ctx: ToolContext) -> None:
        """End the round's sandbox (the worker's turn is over, or stopped) and every process
        in it; say once if it could not be made (each command then had one of its own)."""
        session = ctx.sandbox
        if isinstance(session, SandboxSession):
            session.close()
            if session.problem:
                self.warn_once(
                    f"warning: the worker's commands each ran in a sandbox of their own "
                    f"(slower): the round's sandbox could not be made: {session.problem}"
                )


def _literal(path: str) -> str:
    """``path`` as a .gitignore pattern that matches it alone (its glob characters escaped)."""
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in path)
    return "\\" + escaped if escaped.startswith(("#", "!")) else escaped
