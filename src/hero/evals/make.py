"""`hero bench make`: tasks in SWE-bench's format from the target repository's own history.

Usage::

    hero bench make [--last N | --range A..B] [--test-command CMD] [--timeout S] [-o TASKS.jsonl]

- **Which commits.** The home's ``target_repo``, its first-parent history: the last ``N``
  commits up to HEAD (``--last N``, 50 by default) or the commits of ``A..B`` (``--range``).
  Merges and the root commit are skipped.
- **A candidate** is a commit that changes both code and tests. A *test file* is a path under
  a ``tests/`` or ``test/`` directory, or named ``test_*.py``, ``*_test.py``, ``*.test.*`` or
  ``*_spec.*``; a *code file* is any other file with a source extension (``.py``, ``.js``,
  ``.ts``, ``.go``, ``.rs``, ``.java``, ``.c``, ...). A commit that changes only docs, only
  code or only tests is no candidate.
- **The task.** ``base_commit`` (and ``environment_setup_commit``) is the commit's first
  parent; ``patch`` is the diff of its non-test files (the reference fix: docs and settings
  it changed too); ``test_patch`` the diff of its test files (the hidden tests);
  ``problem_statement`` its commit message, followed by the title and text of the issues it
  names (``#N``, ``Fixes #N``; at most three) when the home has a ``github:`` block whose API
  answers (else the message alone, with one note on stderr); ``created_at`` its commit date
  (ISO 8601); ``repo`` the ``github.repo`` setting, else the repository directory's name;
  ``instance_id`` ``<repo with / as __>-<10-digit sha>``; ``version`` empty.
- **FAIL_TO_PASS and PASS_TO_PASS** come from running the tests twice on each side: at the
  base with the test patch applied ("before") and at the commit ("after"). They run in a
  scratch clone in a temporary directory (it borrows the repository's objects; the
  repository, its refs and worktrees are not touched), with the test command: ``--test-command``,
  default ``python -m pytest``, to which hero adds ``-rA -p no:cacheprovider`` and whose
  summary lines (``PASSED id``, ``FAILED id - ...``, ``ERROR id``) give the test ids. A
  command that is not pytest must print those lines. The tests run as ``hero doctor`` runs a
  project's checks: in the home's sandbox (``sandbox``, the network as ``verify_network``
  says), in the project's environment (the home's ``setup``, found or made once, at the
  first candidate's base; docs/environment.md), each run limited to ``--timeout`` seconds
  (default: ``verify_timeout_ms``). ``FAIL_TO_PASS``: the tests that failed, errored or did
  not run before and pass after; ``PASS_TO_PASS``: those that pass on both sides.
- **Dropped**, each with one line ``dropped <sha> <reason>`` on stderr:
  ``no test fails before the fix`` (FAIL_TO_PASS empty); ``no test outcome at the commit
  from ...`` (the test command printed no summary line: not pytest, not found, or it
  failed before collecting; the line names the command, its exit code and last words);
  ``flaky: <test ids>`` (the two runs of one side disagree on them); ``the test patch
  does not apply at its base``; ``the tests timed out``; ``git: ...`` (a diff or checkout
  git could not make).
- **Output.** The tasks as JSON lines (``-o FILE``, written atomically; else stdout), then
  ``N candidates, K tasks, D dropped`` on stderr.

Errors (exit 2): a ``target_repo`` that is not a git repository, a range that is not
``A..B``, names no commit, or holds no commit, ``--last`` under 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from hero.errors import UsageError
from hero.evals.tasks import Task, task_lines, write_tasks
from hero.git.ops import GitError, git

if TYPE_CHECKING:
    from hero.config.home import Config

#: The window when neither --last nor --range is given.
DEFAULT_LAST = 50
#: The test command when --test-command is not given (a pytest command: hero adds its options).
DEFAULT_TEST_COMMAND = "python -m pytest"
#: What hero adds to the test command: every test's outcome in the summary, no cache left.
PYTEST_OPTIONS = "-rA -p no:cacheprovider"
#: The extensions of source files: a commit must change one of these outside the tests.
CODE_SUFFIXES = frozenset(
    ".py .pyx .pyi .js .jsx .mjs .cjs .ts .tsx .go .rs .java .kt .kts .scala .c .h .cc .cpp "
    ".cxx .hpp .hh .cs .rb .php .swift .m .mm .ex .exs .erl .hs .ml .lua .pl .pm .r .jl .dart "
    ".clj .sh .sql .vue .svelte".split()
)
#: The statuses of pytest's short summary, as hero reads them.
_STATUS = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(.+?)\s*$")
#: pytest's header of its short summary, after which the outcomes are.
_SUMMARY = re.compile(r"^=+ short test summary info =+$")
#: A test id at the start of a summary line: ``path::name`` and its ``[parameters]``.
_TEST_ID = re.compile(r"^(\S+?(?:\[.*?\])?)(?= - |$)")
_PASSING = frozenset({"PASSED", "XFAIL", "XPASS"})


class MakeError(UsageError):
    """`hero bench make` cannot read what it was given: names the repository or the range."""


@dataclass(frozen=True)
class Candidate:
    """A first-parent commit that changes both code and tests."""

    sha: str
    base: str
    created_at: str
    message: str
    code_files: tuple[str, ...]
    test_files: tuple[str, ...]
    other_files: tuple[str, ...]


@dataclass(frozen=True)
class Dropped:
    sha: str
    reason: str


# ----------------------------------------------------------------------------- file kinds


def is_test_path(path: str) -> bool:
    """Whether a repository path is a test file (see the module docstring)."""
    pure = PurePosixPath(path)
    if any(part in ("tests", "test") for part in pure.parts[:-1]):
        return True
    name = pure.name
    return (
        (name.startswith("test_") and name.endswith(".py"))
        or name.endswith("_test.py")
        or ".test." in name
        or re.search(r"_spec\.[^.]+$", name) is not None
    )


def is_code_path(path: str) -> bool:
    """Whether a repository path is a source file outside the tests."""
    return not is_test_path(path) and PurePosixPath(path).suffix.lower() in CODE_SUFFIXES


# ----------------------------------------------------------------------------- history


def first_parent_commits(repo: Path, *, last: int | None, span: str | None) -> list[str]:
    """The first-parent commits of the window, oldest first; MakeError for a bad or empty one."""
    if span is not None:
        left, dots, right = span.partition("..")
        if not dots or right.startswith(".") or not left or not right:
            raise MakeError(f"--range {span!r}: expected A..B (two commits, e.g. v1.0..main)")
        for side in (left, right):
            if side.startswith("-"):
                raise MakeError(f"--range {span!r}: {side!r} is no commit name")
            if git(repo, "rev-parse", "--verify", "-q", f"{side}^{{commit}}", check=False) == "":
                raise MakeError(f"--range {span!r}: {side!r} is no commit of {repo}")
        shas = git(repo, "rev-list", "--first-parent", "--reverse", f"{left}..{right}").split()
        if not shas:
            raise MakeError(f"--range {span!r}: no commits in {repo} (is A after B?)")
        return shas
    count = DEFAULT_LAST if last is None else last
    if count < 1:
        raise MakeError(f"--last {count}: expected a number of commits, 1 or more")
    if git(repo, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False) == "":
        raise MakeError(f"{repo}: the repository has no commit yet")
    return git(repo, "rev-list", "--first-parent", "--reverse", "-n", str(count), "HEAD").split()


def candidate_of(repo: Path, sha: str) -> Candidate | None:
    """The commit as a candidate, or None (a merge, the root, or not code and tests both)."""
    fields = git(repo, "show", "-s", "--format=%P%x00%cI%x00%B", sha).split("\x00", 2)
    parents = fields[0].split()
    if len(parents) != 1:
        return None
    changed = [p for p in git(repo, *_DIFF, "--name-only", "-z", parents[0], sha).split("\0") if p]
    tests = tuple(p for p in changed if is_test_path(p))
    code = tuple(p for p in changed if is_code_path(p))
    if not tests or not code:
        return None
    others = tuple(p for p in changed if not is_test_path(p) and not is_code_path(p))
    return Candidate(sha, parents[0], fields[1].strip(), fields[2].strip(), code, tests, others)


_DIFF = ("diff", "--no-color", "--no-ext-diff", "--no-renames", "--no-textconv")


def diff_of(repo: Path, base: str, sha: str, paths: Iterable[str]) -> str:
    """The diff of ``paths`` from ``base`` to ``sha`` (binary files too)."""
    specs = [f":(literal){p}" for p in paths]
    return git(repo, *_DIFF, "--binary", "--full-index", base, sha, "--", *specs)


# ----------------------------------------------------------------------------- the tests


def parse_pytest(output: str) -> dict[str, str]:
    """Each test id of pytest's ``-rA`` summary and its status (PASSED, FAILED, ERROR, ...)."""
    found: dict[str, str] = {}
    lines = output.splitlines()
    summary = [i for i, line in enumerate(lines) if _SUMMARY.match(line)]
    if summary:  # what tests printed comes before it (-rA shows it): not read as outcomes
        lines = lines[summary[-1] + 1 :]
    for line in lines:
        matched = _STATUS.match(line)
        if matched is None:
            continue
        status, rest = matched.groups()
        if status == "SKIPPED":
            continue  # "[1] file:line: reason": no test id
        test_id = _TEST_ID.match(rest)  # "id - message": the id, brackets and all
        found[test_id.group(1) if test_id else rest] = status
    return found


@dataclass(frozen=True)
class Outcome:
    """What two runs of one side said: each test's status, or the ids the runs disagree on."""

    statuses: Mapping[str, str]
    disagree: tuple[str, ...] = ()
    timed_out: bool = False
    said: str = ""
    """How the last run ended: its exit code and its output's last words."""


class Bench:
    """A scratch clone of the repository in which candidates' tests run."""

    def __init__(
        self,
        repo: Path,
        clone: Path,
        test_command: str,
        timeout_s: float,
        env: dict[str, str],
    ) -> None:
        self.repo = repo
        self.clone = clone
        self.command = f"{test_command} {PYTEST_OPTIONS}"
        self.timeout_s = timeout_s
        self.env = env
        self.kept: tuple[str, ...] = ()  # the environment's directories, kept by `git clean`
        self.box: Any = None  # the sandbox the tests run in (None: none)
        git(repo.parent, "clone", "-q", "--shared", "--no-checkout", str(repo), str(clone))

    def checkout(self, sha: str) -> None:
        git(self.clone, "checkout", "-q", "--detach", "-f", sha)
        excludes = [f"--exclude=/{d}/" for d in self.kept]
        git(self.clone, "clean", "-q", "-ffdx", *excludes)

    def apply(self, patch: str) -> bool:
        if not patch:
            return True
        return _applies(self.clone, patch)

    def twice(self) -> Outcome:
        from hero.runner import run_command

        runs = []
        said = ""
        for _ in range(2):
            result = run_command(
                self.command, self.clone, timeout_s=self.timeout_s, env=self.env, sandbox=self.box
            )
            if result.timed_out:
                return Outcome({}, timed_out=True)
            runs.append(parse_pytest(result.output))
            tail = " ".join(result.output.split()[-30:])
            said = f"exit {result.exit_code}" + (f": {tail}" if tail else "")
        first, second = runs
        disagree = sorted(t for t in first.keys() | second.keys() if first.get(t) != second.get(t))
        return Outcome(first, tuple(disagree), said=said)


def _applies(clone: Path, patch: str) -> bool:
    try:
        git(clone, "apply", "--binary", "--whitespace=nowarn", "-", input=patch.encode())
    except GitError:
        return False
    return True


def judge(before: Mapping[str, str], after: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """FAIL_TO_PASS (failed, errored or absent before, passing after) and PASS_TO_PASS."""
    fail_to_pass = sorted(
        t for t, s in after.items() if s in _PASSING and before.get(t) not in _PASSING
    )
    pass_to_pass = sorted(
        t for t, s in after.items() if s in _PASSING and before.get(t) in _PASSING
    )
    return fail_to_pass, pass_to_pass


def make_task(bench: Bench, candidate: Candidate, repo_name: str) -> Task | Dropped:
    """The candidate's task, or why it is dropped."""
    repo = bench.repo
    patch = diff_of(
        repo, candidate.base, candidate.sha, (*candidate.code_files, *candidate.other_files)
    )
    test_patch = diff_of(repo, candidate.base, candidate.sha, candidate.test_files)
    bench.checkout(candidate.base)
    if not bench.apply(test_patch):
        return Dropped(candidate.sha, "the test patch does not apply at its base")
    before = bench.twice()
    bench.checkout(candidate.sha)
    after = bench.twice()
    if before.timed_out or after.timed_out:
        return Dropped(candidate.sha, f"the tests timed out (over {bench.timeout_s:g} s)")
    if not after.statuses:
        return Dropped(
            candidate.sha, f"no test outcome at the commit from `{bench.command}` ({after.said})"
        )
    flaky = sorted({*before.disagree, *after.disagree})
    if flaky:
        return Dropped(candidate.sha, f"flaky: {' '.join(flaky)}")
    fail_to_pass, pass_to_pass = judge(before.statuses, after.statuses)
    if not fail_to_pass:
        return Dropped(candidate.sha, "no test fails before the fix")
    return Task(
        instance_id=f"{repo_name.replace('/', '__')}-{candidate.sha[:10]}",
        repo=repo_name,
        base_commit=candidate.base,
        patch=patch,
        test_patch=test_patch,
        problem_statement=candidate.message or f"commit {candidate.sha}",
        created_at=candidate.created_at,
        FAIL_TO_PASS=fail_to_pass,
        PASS_TO_PASS=pass_to_pass,
        environment_setup_commit=candidate.base,
    )


# ----------------------------------------------------------------------------- linked issues

#: ``#N`` in a commit message (not ``owner/name#N``, not ``&#N;``): an issue of the repository.
_ISSUE_REF = re.compile(r"(?<![\w/&])#(\d{1,9})\b")
#: The issues read for one commit, at most.
MAX_LINKED_ISSUES = 3


def issue_numbers(message: str) -> list[int]:
    """The issues a commit message names (``#N``, ``Fixes #N``), first ones first, once each."""
    numbers = dict.fromkeys(int(n) for n in _ISSUE_REF.findall(message) if int(n) > 0)
    return list(numbers)[:MAX_LINKED_ISSUES]


class LinkedIssues:
    """The text of the issues commit messages name, read through the github settings' API;
    after one failure no more is asked (one note on stderr), and a task keeps its message."""

    def __init__(self, api_url: str, token: str | None, repo: str) -> None:
        self._args = (api_url, token, repo)
        self._client: object | None = None
        self._texts: dict[int, str] = {}
        self._failed = False

    def statement(self, message: str) -> str:
        texts = [t for t in (self._text(n) for n in issue_numbers(message)) if t]
        return "\n\n".join([message, *texts])

    def _text(self, number: int) -> str:
        from hero.errors import HeroError
        from hero.github.api import GitHub, Retry

        if self._failed:
            return ""
        if number not in self._texts:
            try:
                if self._client is None:
                    api_url, token, repo = self._args
                    self._client = GitHub(
                        api_url,
                        token,
                        repo,
                        retry=Retry(max_attempts=1, max_waits=0),
                        timeout_s=10.0,
                    )
                assert isinstance(self._client, GitHub)
                issue = self._client.issue(number)
            except (HeroError, ValueError, OSError) as exc:
                self._failed = True
                print(f"linked issues left out: {exc}", file=sys.stderr, flush=True)
                return ""
            title = str(issue.get("title") or "").strip()
            body = str(issue.get("body") or "").strip()
            self._texts[number] = f"#{number}: {title}\n\n{body}".strip()
        return self._texts[number]

    def close(self) -> None:
        from hero.github.api import GitHub

        if isinstance(self._client, GitHub):
            self._client.close()


# ----------------------------------------------------------------------------- the command


def main(args: argparse.Namespace) -> int:
    from hero.config.loader import load_config, resolve_home
    from hero.runner import child_env

    config = load_config(resolve_home(getattr(args, "home", None)), roles=())
    repo = Path(config.target_repo)
    top = git(repo, "rev-parse", "--show-toplevel", check=False).strip() if repo.is_dir() else ""
    if not top:
        raise MakeError(f"target_repo {repo}: not a git repository")
    repo = Path(top)
    timeout_s = float(getattr(args, "timeout", None) or config.verify_timeout_ms / 1000)
    if timeout_s <= 0:
        raise MakeError(f"--timeout {timeout_s:g}: expected seconds, more than 0")
    test_command = getattr(args, "test_cmd", None) or DEFAULT_TEST_COMMAND
    shas = first_parent_commits(repo, last=args.last, span=args.range)
    candidates = [c for c in (candidate_of(repo, sha) for sha in shas) if c is not None]
    repo_name = config.github.repo if config.github is not None else repo.name
    env = child_env(
        allow=config.safety.pass_env,
        drop_names=config.key_env_names,
        secret_values=config.secrets,
    )
    tasks: list[Task] = []
    dropped = 0
    scratch = Path(tempfile.mkdtemp(prefix="hero-bench-make-"))
    try:
        if candidates:
            bench = Bench(repo, scratch / "repo", test_command, timeout_s, env)
            _prepare(config, bench, candidates[0].base)
            for candidate in candidates:
                try:
                    made = make_task(bench, candidate, repo_name)
                except GitError as exc:  # a diff too large to read, a checkout that fails
                    made = Dropped(candidate.sha, f"git: {' '.join(str(exc).split())}")
                if isinstance(made, Dropped):
                    dropped += 1
                    print(f"dropped {made.sha[:10]} {made.reason}", file=sys.stderr, flush=True)
                else:
                    tasks.append(made)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if config.github is not None and tasks:
        linked = LinkedIssues(config.github_api_url, config.github_token, config.github.repo)
        try:
            tasks = [
                dataclasses.replace(t, problem_statement=linked.statement(t.problem_statement))
                for t in tasks
            ]
        finally:
            linked.close()
    if args.output:
        write_tasks(args.output, tasks)
    else:
        sys.stdout.writelines(task_lines(tasks))
        sys.stdout.flush()
    print(
        f"{len(candidates)} candidates, {len(tasks)} tasks, {dropped} dropped",
        file=sys.stderr,
        flush=True,
    )
    return 0


def _prepare(config: Config, bench: Bench, base: str) -> None:
    """The project's environment (the home's ``setup``, found or made once, at the first
    candidate's base) and the sandbox the tests run in, as a story's checks run
    (``hero.run.environment.checks_sandbox``): the clone writable, the repository's objects
    read-only, the hero home and the repository hidden."""
    from hero.git.ops import TargetRepo
    from hero.redact import Redactor
    from hero.run.environment import Setup, checks_sandbox

    bench.checkout(base)
    target = TargetRepo(bench.repo)
    environment = None
    if config.project.setup:
        log = config.home / "runs" / "bench-make" / "setup.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        setup = Setup(
            config,
            target,
            base,
            tuple(config.project.setup),
            bench.env,
            log,
            Redactor(config.secrets),
        )
        environment, _ = setup.ensure(bench.clone)
        bench.kept = tuple(environment.excluded)
        environment.tools_first(bench.env)
    bench.box = checks_sandbox(
        config,
        bench.clone,
        environment,
        objects=target.common_dir() / "objects",
        hide=(config.home, bench.repo),
        warn=lambda message: print(message, file=sys.stderr, flush=True),
    )
