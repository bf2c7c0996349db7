"""Judging one bench task-run: the hidden tests on the worker's final tree.

The worker's final tree (its story branch's tip, else the task's base) is checked out in a
folder of its own; its test side is put back as at the base (:mod:`hero.evals.guard`: the
test files, pytest's configuration and hooks, what Python loads before the tests), so that
whatever the worker did to the tests or to what runs them counts for nothing; then the test
patch is applied (``git apply``), and the ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` tests run by
their pytest node ids, once, as the verifier runs a story's checks: in the project's
environment (the ``setup`` of the configuration, found made by the story, or made now:
:class:`hero.run.environment.Setup`), in hero's sandbox (``sandbox``, ``verify_network``,
``limit_*``: :func:`hero.run.environment.checks_sandbox`), within a time limit.
The task is resolved when every ``FAIL_TO_PASS`` test and every ``PASS_TO_PASS`` test
passed. A test patch that does not apply even so, a setup that fails, or a sandbox that
cannot be had, is a judge error (the task-run could not be judged), never a resolve.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hero.config.home import Config
from hero.errors import HeroError
from hero.evals.guard import clear_way, guard, judge_env, put_back
from hero.evals.tasks import Task
from hero.git.ops import GitError, git

if TYPE_CHECKING:
    from hero.run.environment import Environment

#: The command that runs the tests, before its options and the node ids.
DEFAULT_TEST_COMMAND = "python -m pytest"
#: What a run of the tests says of each test (pytest's ``-rA`` summary).
_SUMMARY_RE = re.compile(r"^(PASSED|FAILED|ERROR|XPASS|XFAIL|SKIPPED) (.+?)(?: - .*)?$")
_DIFF_RE = re.compile(r"^diff --git a/(.+?) b/(.+?)$", re.MULTILINE)


class JudgeError(HeroError):
    """The task-run cannot be judged (the test patch does not apply to the base either, no
    sandbox, git failed); the message says why."""


@dataclass(frozen=True)
class Judged:
    resolved: bool
    passed: frozenset[str] = frozenset()
    failed: dict[str, str] = field(default_factory=dict)
    """test id -> how it did (FAILED, ERROR, missing, ...) for those that did not pass."""
    output: str = ""


def patch_paths(patch: str) -> list[str]:
    """The files a git diff touches (both sides of a rename), in order, once each."""
    found: dict[str, None] = {}
    for a, b in _DIFF_RE.findall(patch):
        found.setdefault(a, None)
        found.setdefault(b, None)
    return list(found)


def checkout_tree(source: Path, commit: str, dest: Path) -> None:
    """A working copy of ``source`` at ``commit`` in ``dest`` (made anew)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    git(dest.parent, "clone", "-q", "--no-local", "--no-checkout", str(source), dest.name)
    git(dest, "-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit)


def apply_test_patch(tree: Path, base: str, test_patch: str) -> None:
    """The test patch's files put back as they were at ``base`` (or removed), then the patch
    applied; JudgeError when it does not apply."""
    put_back(tree, base, patch_paths(test_patch))
    if not test_patch.strip():
        return
    try:
        git(tree, "apply", "--whitespace=nowarn", "-", input=test_patch.encode("utf-8"))
    except GitError as exc:
        raise JudgeError(f"the test patch does not apply to the worker's tree: {exc}") from None


def parse_summary(output: str) -> dict[str, str]:
    """test id -> outcome, from pytest's ``-rA`` short summary."""
    outcomes: dict[str, str] = {}
    for line in output.splitlines():
        m = _SUMMARY_RE.match(line.rstrip())
        if m:
            outcomes[m.group(2).strip()] = m.group(1)
    return outcomes


def project_environment(
    tree: Path, source: Path, base: str, config: Config, env: dict[str, str], log_path: Path
) -> Environment | None:
    """The configuration's project environment for the tests in ``tree`` (None without
    ``setup``), as a story's run takes it (``Setup.ensure``: the one the story made for
    ``base``, else made now); in the tree, whatever the worker put where the environment's
    directories go is removed first, so that each is bound (never a link of the worker's in
    its place). Without a sandbox its tools go first on ``env``'s PATH."""
    from hero.git.ops import TargetRepo
    from hero.redact import Redactor
    from hero.run.environment import Setup, remove

    commands = tuple(config.project.setup)
    if not commands:
        return None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    setup = Setup(
        config, TargetRepo(source), base, commands, env, log_path, Redactor(config.secrets)
    )
    try:
        environment, _ = setup.ensure(tree)
    except HeroError as exc:
        raise JudgeError(f"the project's environment: {exc}") from None
    for directory in environment.dirs:
        clear_way(tree, f"{directory}/-")
        remove(tree / directory)
    environment.tools_first(env)
    return environment


def run_tests(
    tree: Path,
    tests: list[str],
    config: Config,
    *,
    source: Path,
    base: str,
    test_command: str,
    timeout_s: float,
    log_path: Path,
) -> tuple[dict[str, str], str]:
    """Run ``tests`` (node ids) in ``tree`` in the configuration's project environment and
    sandbox; their outcomes and the output."""
    from hero.run.environment import checks_sandbox
    from hero.runner import child_env, run_command

    warnings: list[str] = []
    env = judge_env(
        child_env(
            allow=config.safety.pass_env,
            drop_names=config.key_env_names,
            secret_values=config.secrets,
        )
    )
    environment = project_environment(
        tree, source, base, config, env, log_path.with_name("judge-setup.log")
    )
    try:
        sandbox = checks_sandbox(
            config,
            tree,
            environment,
            objects=None,
            hide=tuple(dict.fromkeys((config.home, config.target_repo, source))),
            warn=warnings.append,
        )
    except HeroError as exc:
        raise JudgeError(f"no sandbox for the hidden tests: {exc}") from None
    command = (
        f"{test_command} -rA -q -p no:cacheprovider --tb=short "
        f"{' '.join(shlex.quote(t) for t in tests)}"
    )
    result = run_command(command, tree, timeout_s=timeout_s, env=env, sandbox=sandbox)
    note = f"\n(timed out after {timeout_s:g} s)" if result.timed_out else ""
    output = "".join(f"{w}\n" for w in warnings) + f"$ {command}\n{result.output}{note}\n"
    output += f"exit {result.exit_code}\n"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(output, encoding="utf-8")
    return parse_summary(result.output), output


def judge(
    task: Task,
    source: Path,
    final: str,
    config: Config,
    work: Path,
    *,
    test_command: str = DEFAULT_TEST_COMMAND,
    timeout_s: float = 600.0,
) -> Judged:
    """Judge the tree of ``final`` (a commit of ``source``); JudgeError when it cannot be."""
    tests = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    if not task.FAIL_TO_PASS:
        raise JudgeError("the task has no FAIL_TO_PASS tests: nothing tells a fix")
    tree = work / "judge"
    try:
        checkout_tree(source, final, tree)
        guard(tree, task.base_commit)
        apply_test_patch(tree, task.base_commit, task.test_patch)
    except GitError as exc:
        raise JudgeError(f"git: {exc}") from None
    outcomes, output = run_tests(
        tree,
        tests,
        config,
        source=source,
        base=task.base_commit,
        test_command=test_command,
        timeout_s=timeout_s,
        log_path=work / "judge.log",
    )
    passed = frozenset(t for t in tests if outcomes.get(t) in ("PASSED", "XPASS"))
    failed = {t: outcomes.get(t, "missing") for t in tests if t not in passed}
    return Judged(resolved=not failed, passed=passed, failed=failed, output=output)
