"""Pre-flight checks: what would make stories fail, found before any story runs.

``hero doctor`` runs them all and prints a line each (:class:`Finding`); ``hero watch`` and
``hero worker`` run the cheap ones (:func:`cheap_checks`) at start (:func:`preflight`) and
stop when one fails, since then every story they took would fail the same way.

The checks, in order: the configuration loads; git is new enough; the target repository
and its base ref; the sandbox works when it is on; ripgrep; free disk in the home; the
repository's memory file reads; a USD budget has prices to count by; the project's
environment is made (``setup``, or with ``quick`` found made) and the default checks run on
the base commit in it; each MCP server starts and lists its tools (``quick``: the stdio
ones). Then,
unless ``quick``, the ones that talk to something else: each configured role's model
answers one tiny request with a tool call; the push remote answers ``git ls-remote``; the
GitHub token can reach the repository with the scopes hero needs; Redis answers a PING.
Each of those is one attempt with a short timeout (never the story's retry policy): a
doctor that hangs for minutes on a dead endpoint is no help.

In a `hero worker`'s home (:func:`hero.config.loader.worker_home`, or ``worker``) the
checks are what a worker needs and nothing else (:func:`worker_checks`): no target
repository, project environment, memory, planner or GitHub, which are the coordinator's.

``finding`` holds what a check found, ``local`` the checks that ask no one, ``network``
those that ask something else. Nothing here prints: the command prints the findings. No finding holds a secret: the
details are passed through the configuration's redactor, and a key is named by where it
came from (``RoleConfig.key_source``), never by value.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from hero.config.home import Config
from hero.config.loader import load_config, worker_home
from hero.config.schema import ROLE_NAMES, ROLES_FILE, ConfigError
from hero.doctor.finding import CONFIGURATION, FAIL, OK, WARN, Finding
from hero.doctor.local import (
    budgets,
    free_disk,
    git_version,
    home_tools,
    limits,
    memory,
    ripgrep,
    sandbox,
    target_repository,
)
from hero.doctor.mcp import mcp_servers
from hero.doctor.network import (
    MODEL_TIMEOUT_S,
    github_token,
    models,
    push_remotes,
    redis_servers,
)
from hero.doctor.project import project
from hero.errors import HeroError

__all__ = [
    "CONFIGURATION",
    "FAIL",
    "MODEL_TIMEOUT_S",
    "OK",
    "WARN",
    "Finding",
    "PreflightFailed",
    "cheap_checks",
    "preflight",
    "run_all",
]


class PreflightFailed(HeroError):
    """A cheap check failed at the start of `hero watch` or `hero worker`: every story
    would fail the same way, so none is taken."""


# ----------------------------------------------------------------------------- entry points


def run_all(
    home: Path,
    *,
    quick: bool = False,
    model_timeout_s: float = MODEL_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    worker: bool | None = None,
) -> Iterator[Finding]:
    """Every check for the home, one finding at a time (so the command prints each as it
    comes: a model request may take a while). ``quick``: none of those that send anything
    over the network (the models, the remote, GitHub, Redis). ``worker``: check what a
    `hero worker` needs (:func:`worker_checks`); None: when the home is a worker's
    (:func:`hero.config.loader.worker_home`)."""
    env = os.environ if env is None else env
    if worker is None:
        worker = worker_home(home)
    if worker:
        yield from worker_checks(home, quick=quick, model_timeout_s=model_timeout_s, env=env)
        return
    config, found = load(home, env)
    yield from found
    if config is None:  # what needs no configuration is still worth knowing
        yield git_version()
        yield ripgrep()
        return
    for notice in config.notices:
        yield Finding(WARN, CONFIGURATION, notice)
    yield from cheap_checks(config, repository=True)
    if config.safety.sandbox != "none":  # what holds a command's limits, what it sees
        yield limits(config)
        yield home_tools(config)
    yield from project(config, quick=quick)
    yield from mcp_servers(config, quick=quick)
    if quick:
        return
    yield from models(config, model_timeout_s)
    yield from push_remotes(config)
    if config.github is not None:
        yield github_token(config, env)
    if config.engine.remote:
        yield from redis_servers(config)


def worker_checks(
    home: Path, *, quick: bool, model_timeout_s: float, env: Mapping[str, str]
) -> Iterator[Finding]:
    """What a `hero worker` needs, and nothing else: its configuration as `hero worker`
    loads it (the worker and reviewer roles; no target_repo), Celery installed, the cheap
    checks without a repository (git, the sandbox and its limits, ripgrep, disk, prices);
    then, unless ``quick``, the worker's and reviewer's models, target_remote (fetched from,
    pushed to) and Redis. Not the target repository, its environment or checks, memory, the
    planner or GitHub: the worker clones target_remote and makes each story's environment
    in its clone, and the coordinator plans, keeps the memory and talks to GitHub."""
    fix = "fix what it names, then run again"
    try:
        config = load_config(home, roles=("worker", "reviewer"), env=env, worker=True)
    except ConfigError as exc:
        yield Finding(FAIL, CONFIGURATION, str(exc), fix)
        yield git_version()
        yield ripgrep()
        return
    if not config.engine.remote:
        yield Finding(
            FAIL,
            CONFIGURATION,
            "engine: local; `hero worker` runs stories sent through Celery",
            f"set `engine: celery` (with broker_url and target_remote) in {ROLES_FILE}",
        )
        return
    roles = ", ".join(config.roles)
    yield Finding(
        OK,
        CONFIGURATION,
        f"{ROLES_FILE} loads as a `hero worker`'s home (engine: celery; its clone of "
        f"target_remote stands in for target_repo); roles {roles}",
    )
    for notice in config.notices:
        yield Finding(WARN, CONFIGURATION, notice)
    celery = celery_installed()
    yield celery
    yield from cheap_checks(config, repository=False)
    if config.safety.sandbox != "none":
        yield limits(config)
        yield home_tools(config)
    if quick:
        return
    yield from models(config, model_timeout_s)
    yield from push_remotes(config, github=False)
    if celery.status == OK:  # without redis-py, the celery line said what to install
        yield from redis_servers(config)


def celery_installed() -> Finding:
    """Celery and redis-py import here (the extra `hero worker` runs on)."""
    from hero.engine.app import missing

    problem = missing()
    if problem is not None:
        return Finding(FAIL, "celery", problem)
    return Finding(OK, "celery", "Celery and redis-py are installed")


def cheap_checks(config: Config, *, repository: bool) -> Iterator[Finding]:
    """The checks that cost nothing and ask no one: git, the target repository and its base
    ref (``repository``: a worker's clone is made when it starts, so not there), the
    sandbox, ripgrep, free disk in the home, the repository's memory (not on a worker), a
    USD budget's prices."""
    yield git_version()
    if repository:
        yield target_repository(config)
    yield sandbox(config)
    yield ripgrep()
    yield free_disk(config.home, config.min_free_disk_mb)
    if repository:  # a `hero worker` keeps no memory: the coordinator sends what it recalls
        yield memory(config)
    yield budgets(config)


def preflight(config: Config, warn: Callable[[str], None], *, repository: bool) -> None:
    """The cheap checks at the start of a service: each warning said through ``warn``, and
    PreflightFailed naming every failure (with its fix) when one failed."""
    failures: list[Finding] = []
    for finding in cheap_checks(config, repository=repository):
        if finding.status == WARN:
            warn(finding.line())
        elif finding.status == FAIL:
            failures.append(finding)
    if failures:
        lines = "; ".join(f.line() for f in failures)
        raise PreflightFailed(f"pre-flight check failed, no story taken: {lines}")


# ----------------------------------------------------------------------------- the checks


def load(home: Path, env: Mapping[str, str]) -> tuple[Config | None, list[Finding]]:
    """The home's configuration with every role it configures, and its findings. A planner
    block that is there and wrong fails on its own line, and the worker's and reviewer's
    configuration is still checked."""
    fix = "fix what it names, then run again"
    try:
        config = load_config(home, roles=("worker", "reviewer"), env=env)
    except ConfigError as exc:
        return None, [Finding(FAIL, CONFIGURATION, str(exc), fix)]
    found: list[Finding] = []
    try:
        config = load_config(home, roles=ROLE_NAMES, env=env)
    except ConfigError as exc:  # the planner is optional: not configured is fine
        if not (exc.key == "planner" and exc.message.startswith("role not configured")):
            found.append(Finding(FAIL, CONFIGURATION, str(exc), fix))
    roles = ", ".join(config.roles)
    found.insert(0, Finding(OK, CONFIGURATION, f"{ROLES_FILE} loads; roles {roles}"))
    return config, found
