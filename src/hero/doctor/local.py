"""The checks that ask no one: git, the target repository, the sandbox, ripgrep, disk, memory,
the budgets' prices."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from hero.config.home import Config
from hero.config.schema import ROLES_FILE
from hero.doctor.finding import FAIL, OK, WARN, Finding, one_line
from hero.git.ops import GitError, commit_of, git

#: The oldest git hero supports: merging a plan's branches needs `git merge-tree
#: --write-tree` (git 2.38, see hero.git.ops).
MIN_GIT = (2, 38)


def git_version() -> Finding:
    """git is installed and at least MIN_GIT."""
    need = ".".join(map(str, MIN_GIT))
    fix = f"install git {need} or newer"
    try:
        said = git(Path("/"), "--version", timeout_s=30)  # anywhere: the cwd may be gone
    except GitError as exc:
        return Finding(FAIL, "git", str(exc), fix)
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", said)
    if match is None:
        return Finding(WARN, "git", f"cannot read its version from {said.strip()!r}", fix)
    found = match.group(0)
    if (int(match.group(1)), int(match.group(2))) < MIN_GIT:
        return Finding(FAIL, "git", f"{found} is older than {need}, hero's minimum", fix)
    return Finding(OK, "git", found)


def target_repository(config: Config) -> Finding:
    """The target repository is a git repository hero can read, and the base ref names a
    commit in it."""
    repo = config.target_repo
    what = "target repository"
    worker_clone = config.home / "worker" / "repo"
    if config.engine.remote and repo == worker_clone and not (repo / ".git").exists():
        # a `hero worker` home: no target_repo, its clone is made as the worker starts
        return Finding(OK, what, f"none: `hero worker` clones target_remote to {repo}")
    if not repo.is_dir():
        return Finding(FAIL, what, f"{repo} does not exist", f"set target_repo in {ROLES_FILE}")
    try:
        top = git(repo, "rev-parse", "--show-toplevel", timeout_s=30).strip()
    except GitError as exc:
        return Finding(FAIL, what, f"{repo} is no git repository ({one_line(exc)})", _repo_fix())
    ref = config.target_base_ref or "HEAD"
    sha = commit_of(repo, ref)
    if not sha:
        if config.target_base_ref:
            fix = f"set target_base_ref in {ROLES_FILE} to a branch, tag or commit of {top}"
            return Finding(FAIL, what, f"base ref {ref!r} names no commit in {top}", fix)
        return Finding(FAIL, what, f"{top} has no commit yet", "commit something there first")
    return Finding(OK, what, f"{top}, base {ref} at {sha[:12]}")


def sandbox(config: Config) -> Finding:
    """bubblewrap runs a sandboxed ``true`` here, when the sandbox is on."""
    from hero.sandbox.bwrap import bwrap_problem

    mode = config.safety.sandbox
    if mode == "none":
        return Finding(OK, "sandbox", "off (sandbox: none): commands run with your user's rights")
    bwrap = shutil.which("bwrap")
    problem = "bwrap is not installed (not on PATH)" if bwrap is None else bwrap_problem(bwrap)
    if problem is None:
        return Finding(OK, "sandbox", f"bubblewrap works ({bwrap})")
    fix = (
        "install bubblewrap (e.g. apt-get install bubblewrap; it needs unprivileged user "
        f"namespaces, or hero run as root), or set sandbox: none in {ROLES_FILE}"
    )
    if mode == "bwrap":
        return Finding(FAIL, "sandbox", f"sandbox: bwrap is set, but {problem}", fix)
    return Finding(
        WARN, "sandbox", f"sandbox: auto, and {problem}: commands run WITHOUT a sandbox", fix
    )


def limits(config: Config) -> Finding:
    """Which mechanism holds a sandboxed command's processes and memory here
    (``hero.sandbox.limits.holds``): a warning for root with neither a pids cgroup nor a
    way to run commands as an unprivileged uid."""
    from hero.sandbox.limits import HOLDS_WEAK, holds, mechanism

    cgroups = config.safety.sandbox_cgroups != "off"
    found = holds(cgroups=cgroups)
    off = "" if cgroups else f" (sandbox_cgroups: off in {ROLES_FILE})"
    if found == HOLDS_WEAK:
        return Finding(
            WARN,
            "limits",
            f"{found}{off}: {mechanism(cgroups=cgroups)}",
            "make a pids cgroup writable for hero (cgroup v2 with the pids controller "
            "delegated, or cgroup v1), install setpriv (util-linux), or run hero as a user",
        )
    return Finding(OK, "limits", f"{found}{off}")


def home_tools(config: Config) -> Finding:
    """The tools on PATH that live under a home and are therefore not shown to sandboxed
    commands (``hero.sandbox.bwrap.hidden_path_dirs``): a warning naming some, and the
    setting that shows a toolchain."""
    import os

    from hero.sandbox.bwrap import hidden_path_dirs

    hidden = hidden_path_dirs(config.safety.toolchain_dirs)
    tools: list[str] = []
    for d in hidden:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        tools += [
            f"{n} ({d})"
            for n in names
            if os.path.isfile(os.path.join(d, n)) and os.access(os.path.join(d, n), os.X_OK)
        ]
    if not tools:
        return Finding(OK, "tools under home", "none on PATH hidden from commands")
    shown = ", ".join(tools[:6]) + (f" and {len(tools) - 6} more" if len(tools) > 6 else "")
    return Finding(
        WARN,
        "tools under home",
        f"{len(tools)} tools on PATH live under a home and are hidden from sandboxed "
        f"commands: {shown}",
        f"name the toolchains commands need in toolchain_dirs in {ROLES_FILE} (e.g. "
        "~/.cargo), or install them outside the home",
    )


def ripgrep() -> Finding:
    """``rg`` for the worker's grep tool."""
    from hero.agent.tools.search import find_rg

    return rg_finding(find_rg())


def rg_finding(found: str | None) -> Finding:
    """The ripgrep line for ``found``, rg's path or None."""
    if found:
        return Finding(OK, "ripgrep", found)
    return Finding(
        WARN,
        "ripgrep",
        "rg not found: the worker's grep tool uses hero's own, slower search",
        "pip install ripgrep, or install the system package ripgrep",
    )


def free_disk(home: Path, min_mb: int) -> Finding:
    """Free space in the home's file system, against ``min_free_disk_mb``."""
    try:
        free_mb = shutil.disk_usage(home).free // (1 << 20)
    except OSError as exc:
        return Finding(FAIL, "free disk", f"cannot read it for {home}: {exc.strerror or exc}")
    if min_mb and free_mb < min_mb:
        return Finding(
            FAIL,
            "free disk",
            f"{free_mb} MiB free in {home}, below min_free_disk_mb ({min_mb} MiB)",
            "free some space (`hero clean` removes old worktrees), or lower min_free_disk_mb "
            f"in {ROLES_FILE}",
        )
    return Finding(OK, "free disk", f"{free_mb} MiB free in {home}")


def _repo_fix() -> str:
    return f"point target_repo in {ROLES_FILE} at a git repository (or run `git init` there)"


def memory(config: Config) -> Finding:
    """The target repository's memory (hero.memory) can be read: a file hero cannot read
    tells stories nothing and learns nothing until it is fixed (a warning: stories still
    run, so it stops no service)."""
    from hero.memory import enabled, store_for
    from hero.memory.facts import Trust
    from hero.memory.store import MemoryFileError

    what = "memory"
    if not enabled(config):
        return Finding(OK, what, f"off (memory_enabled: false in {ROLES_FILE})")
    store = store_for(config)
    try:
        kept = store.read()
    except MemoryFileError as exc:
        fix = "`hero memory edit` and fix the line it names (until then, stories are told nothing)"
        return Finding(WARN, what, one_line(exc), fix)
    if not kept.facts and not kept.recaps:
        return Finding(OK, what, f"empty; {store.path} is written when a story ends")
    always = sum(1 for f in kept.facts if f.always_on)
    outside = sum(1 for f in kept.facts if f.trust is Trust.OUTSIDE)
    return Finding(
        OK,
        what,
        f"{len(kept.facts)} facts ({always} always-on, {outside} from outside stories), "
        f"{len(kept.recaps)} recent stories in {store.path}",
    )


def budgets(config: Config) -> Finding:
    """A USD budget has prices to count by: one set while the worker's or the reviewer's
    model has no prices in its provider file refuses every story at its start (see
    hero.run.budget.unpriced), so it fails here first."""
    from hero.run.budget import unpriced

    what = "budgets"
    found = unpriced(config.budgets, config.roles)
    if found is not None:
        return Finding(FAIL, what, found.problem, found.fix)
    usd = [b.key for b in config.budgets.each() if b.measure == "cost_usd" and b.limit is not None]
    if usd:
        return Finding(OK, what, f"{', '.join(usd)}: the models have prices to count by")
    return Finding(OK, what, "no USD budget set")
