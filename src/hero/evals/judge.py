"""Judging one bench task-run: the hidden tests on the worker's final tree.

The worker's final tree (its story branch's tip, else the task's base) is checked out in a
folder of its own; every file the task's ``test_patch`` touches is first put back as it was
at the base (deleted when the base has no such file), so that whatever the worker did to
those tests (deleted them, weakened them) counts for nothing; then the test patch is applied
(``git apply``) and the ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` tests run by their pytest node
ids, once, in hero's sandbox (as the verifier runs a story's checks: the ``sandbox``,
``verify_network`` and ``limit_*`` settings of the configuration), within a time limit.
The task is resolved when every ``FAIL_TO_PASS`` test and every ``PASS_TO_PASS`` test
passed. A test patch that does not apply even so, or a sandbox that cannot be had, is a
judge error (the task-run could not be judged), never a resolve.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from hero.config.home import Config
from hero.errors import HeroError
from hero.evals.tasks import Task
from hero.git.ops import GitError, git

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
    for path in patch_paths(test_patch):
        target = tree / path
        exists_at_base = bool(
            git(tree, "ls-tree", "--name-only", base, "--", path, check=False).strip()
        )
        if exists_at_base:
            git(tree, "checkout", "-q", base, "--", path)
        elif target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
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


def run_tests(
    tree: Path,
    tests: list[str],
    config: Config,
    *,
    test_command: str,
    timeout_s: float,
    log_path: Path,
) -> tuple[dict[str, str], str]:
    """Run ``tests`` (node ids) in ``tree`` in the configuration's sandbox; their outcomes
    and the output."""
    from hero.runner import child_env, run_command
    from hero.sandbox.bwrap import resolve

    safety = config.safety
    warnings: list[str] = []
    try:
        sandbox = resolve(
            safety.sandbox,
            worktree=tree,
            objects=None,
            hide=(config.home, config.target_repo),
            limits=safety.limits,
            toolchains=safety.toolchain_dirs,
            cgroups=safety.sandbox_cgroups != "off",
            warn=warnings.append,
        )
    except HeroError as exc:
        raise JudgeError(f"no sandbox for the hidden tests: {exc}") from None
    if sandbox is not None:
        sandbox = sandbox.with_network(safety.verify_network)
    env = child_env(
        allow=safety.pass_env, drop_names=config.key_env_names, secret_values=config.secrets
    )
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
        apply_test_patch(tree, task.base_commit, task.test_patch)
    except GitError as exc:
        raise JudgeError(f"git: {exc}") from None
    outcomes, output = run_tests(
        tree,
        tests,
        config,
        test_command=test_command,
        timeout_s=timeout_s,
        log_path=work / "judge.log",
    )
    passed = frozenset(t for t in tests if outcomes.get(t) in ("PASSED", "XPASS"))
    failed = {t: outcomes.get(t, "missing") for t in tests if t not in passed}
    return Judged(resolved=not failed, passed=passed, failed=failed, output=output)
