"""The project's checks in `hero doctor`: its environment (``setup``) made or found, and the
default checks run on the base commit in it, each said passed or failed with why.

They work in a checkout of the base commit of their own (``envs/.doctor-<pid>``, removed after),
sandboxed as a story's commands are. ``quick`` makes nothing and runs nothing: it says whether
the environment of the base commit is made yet.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from hero.config.home import Config
from hero.config.schema import ROLES_FILE
from hero.doctor.finding import FAIL, OK, WARN, Finding, one_line
from hero.errors import HeroError
from hero.git.ops import GitError, TargetRepo, commit_of
from hero.git.storyrepo import StoryRepo
from hero.redact import Redactor
from hero.run.baseline import failing, run_baseline
from hero.run.environment import Environment, Setup, checks_sandbox, envs_dir, load, remove
from hero.runner import child_env
from hero.story.record import VerifyTier

WHAT_SETUP = "project environment"
WHAT_CHECKS = "checks on the base commit"


def project(config: Config, *, quick: bool) -> Iterator[Finding]:
    """The findings on the project's environment and default checks (none when neither
    ``setup`` nor ``default_verify`` is set)."""
    if not config.project.setup and not config.default_verify:
        return
    repo = TargetRepo(config.target_repo)
    base = commit_of(repo.path, config.target_base_ref or "HEAD") if repo.path.is_dir() else ""
    if not base:
        return  # the target repository's own finding says why
    redactor = Redactor(config.secrets)
    env = child_env(
        allow=config.safety.pass_env,
        drop_names=config.key_env_names,
        secret_values=config.secrets,
        extra=repo.identity_env(),
    )
    log_dir = config.home / "runs" / "doctor"
    log_dir.mkdir(parents=True, exist_ok=True)
    setup = Setup(
        config, repo, base, tuple(config.project.setup), env, log_dir / "setup.log", redactor
    )
    if quick:
        yield _quick(config, setup)
        return
    checkout = envs_dir(config.home) / f".doctor-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        story_repo = StoryRepo(repo, checkout, "hero-doctor", base)
        story_repo.lay_out(base)
        environment: Environment | None = None
        if config.project.setup:
            try:
                environment, reused = setup.ensure(checkout)
            except (HeroError, GitError, OSError) as exc:
                yield Finding(FAIL, WHAT_SETUP, one_line(exc), f"fix setup in {ROLES_FILE}")
                return
            how = "found made" if reused else f"made in {environment.seconds:.1f} s"
            yield Finding(OK, WHAT_SETUP, f"{environment.key} {how} (log: {setup.log_path})")
        if config.default_verify:
            yield _checks(config, story_repo, environment, env, redactor, base, log_dir)
    finally:
        remove(checkout)


def _quick(config: Config, setup: Setup) -> Finding:
    try:
        key = setup.key()
    except (HeroError, GitError, OSError) as exc:
        return Finding(FAIL, WHAT_SETUP, one_line(exc))
    if load(envs_dir(config.home) / key) is not None:
        return Finding(OK, WHAT_SETUP, f"{key} made for the base commit")
    return Finding(
        WARN,
        WHAT_SETUP,
        f"{key} not made yet: the first story with setup makes it",
        "run `hero doctor` without --quick to make it now",
    )


def _checks(
    config: Config,
    story_repo: StoryRepo,
    environment: Environment | None,
    env: dict[str, str],
    redactor: Redactor,
    base: str,
    log_dir: Path,
) -> Finding:
    checkout = story_repo.path
    try:
        box = checks_sandbox(
            config,
            checkout,
            environment,
            objects=story_repo.objects_dir(),
            guarded=story_repo.guarded(),
            hide=(config.home, story_repo.target.path),
        )
        if environment is not None:
            env = dict(env)
            environment.tools_first(env)
        found = run_baseline(
            (VerifyTier("default", config.default_verify),),
            checkout,
            home=config.home,
            branch=story_repo.branch,
            commit=base,
            env_key=environment.key if environment else "",
            env=env,
            timeout_s=config.verify_timeout_ms / 1000,
            log_path=log_dir / "checks.log",
            sandbox=box,
            redact=redactor,
        )
    except (HeroError, GitError, OSError) as exc:
        return Finding(FAIL, WHAT_CHECKS, one_line(exc))
    checks = found["checks"]
    failed = failing(found)
    if not failed:
        return Finding(OK, WHAT_CHECKS, f"{len(checks)} of {len(checks)} default checks pass")
    why = "; ".join(
        f"`{command}` exited {check.get('exit_code')}"
        + (f": {' '.join(str(check.get('tail')).split())[-160:]}" if check.get("tail") else "")
        for command, check in failed.items()
    )
    return Finding(
        FAIL,
        WHAT_CHECKS,
        f"{len(failed)} of {len(checks)} default checks fail before any change: {why}",
        f"a story's worker would start with them failing; fix them, or default_verify in "
        f"{ROLES_FILE} (log: {found['log']})",
    )
