"""What `hero init` proposes for a target repository: setup commands and checks, from its files.

It reads a few files at the repository's root (``pyproject.toml``, ``requirements*.txt``,
``tox.ini``, ``package.json`` and its lock file, ``go.mod``, ``Cargo.toml``, a ``Makefile``)
and proposes the ``setup`` commands that make its environment and the ``default_verify``
checks that test it, each with a one-line reason. The user confirms: ``hero init`` writes the
proposal commented out.

The files are read at the repository's HEAD commit, what a story starts from, or, when there
is none (no commit yet, not a git repository), in its working tree. Reading is all it does:
nothing of the repository runs (git runs without hooks or filesystem monitor, and only
``rev-parse``, ``ls-tree`` and ``cat-file``). The files are hostile input: one that is too
large, binary, not UTF-8, malformed TOML or JSON, of an unexpected shape, a directory, a FIFO
or a symlink (inside the repository or out: none is followed) is left out, never an error.

The rules are conservative and deterministic: a command is proposed only where a file says
it applies, in a fixed order (Python, JavaScript, Go, Rust, then a Makefile's test target).
"""

from __future__ import annotations

import json
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hero.git.ops import GitError, git, is_oid
from hero.yamlio import ValueProblem, decode_text, read_file

#: The most bytes of a file read: far more than any project file the rules read needs.
MAX_FILE_BYTES = 1 << 20
#: The most bytes of the root's listing at HEAD (``ls-tree``, ~80 bytes an entry).
MAX_LISTING_BYTES = 8 << 20

#: pyproject.toml's extras that hold what the tests need, the first found is installed.
TEST_EXTRAS = ("test", "tests", "testing", "dev")
#: Requirement files with what the tests need, installed after requirements.txt: the first
#: found. Other requirements-*.txt (docs, prod, ...) are not what the checks need.
DEV_REQUIREMENTS = (
    "requirements-dev.txt",
    "requirements-test.txt",
    "requirements-tests.txt",
    "requirements_dev.txt",
    "requirements_test.txt",
)
#: Lock files and the package manager that installs from each, frozen; the first found wins.
JS_LOCKS = (
    ("package-lock.json", "npm", "npm ci"),
    ("npm-shrinkwrap.json", "npm", "npm ci"),
    ("yarn.lock", "yarn", "yarn install --frozen-lockfile"),
    ("pnpm-lock.yaml", "pnpm", "pnpm install --frozen-lockfile"),
)
#: The Makefile names GNU make looks for, in its order.
MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
#: The test script ``npm init`` writes: it only fails.
NPM_PLACEHOLDER_TEST = "no test specified"

VENV = "python3 -m venv .venv"
PIP = ".venv/bin/pip install"
PYTEST = ".venv/bin/python -m pytest -q"


@dataclass(frozen=True)
class Step:
    """One proposed command and why."""

    command: str
    reason: str
    """One line: what in the repository made it proposed (``pyproject.toml has a `test`
    extra``)."""


@dataclass(frozen=True)
class Proposal:
    """The setup commands and checks proposed for a repository, and what they came from."""

    source: str = ""
    """What was read: ``its HEAD commit 1a2b3c4`` or ``its working tree``."""
    setup: tuple[Step, ...] = ()
    checks: tuple[Step, ...] = ()
    notes: tuple[str, ...] = ()
    """What the user may want to know that is no command (a tox.ini hero does not run)."""

    def __bool__(self) -> bool:
        """Whether anything is proposed: notes alone are not a proposal."""
        return bool(self.setup or self.checks)


class RepoFiles(Protocol):
    """The files at a repository's root, as one source (a commit, a working tree) has them."""

    @property
    def source(self) -> str:
        """What was read, for the user: ``its working tree``."""

    def kind(self, name: str) -> str | None:
        """``file``, ``dir``, ``link``, ``other`` (a submodule, a FIFO, ...), or None: none."""

    def text(self, name: str) -> str | None:
        """The UTF-8 text of the regular file ``name``; None for anything else (not there,
        not a regular file, over MAX_FILE_BYTES, binary, not UTF-8, unreadable)."""


# -- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkingTree:
    """The files at ``root`` on disk. No symlink is followed, not even one that stays inside."""

    root: Path
    source: str = "its working tree"

    def kind(self, name: str) -> str | None:
        try:
            mode = (self.root / name).lstat().st_mode
        except (OSError, ValueError):
            return None
        if stat.S_ISLNK(mode):
            return "link"
        if stat.S_ISDIR(mode):
            return "dir"
        return "file" if stat.S_ISREG(mode) else "other"

    def text(self, name: str) -> str | None:
        if self.kind(name) != "file":
            return None
        try:
            data = read_file(self.root / name, limit=MAX_FILE_BYTES, follow_link=False)
            return decode_text(data)
        except (OSError, ValueProblem):
            return None


@dataclass(frozen=True)
class Commit:
    """The files at the root of ``commit`` in the repository at ``repo``, read through git.

    ``entries`` is the root's listing: name -> (mode, object id, size)."""

    repo: Path
    commit: str
    entries: Mapping[str, tuple[str, str, int]] = field(default_factory=dict)
    source: str = ""

    def kind(self, name: str) -> str | None:
        entry = self.entries.get(name)
        if entry is None:
            return None
        mode = entry[0]
        if mode == "040000":
            return "dir"
        if mode == "120000":
            return "link"
        return "file" if mode in ("100644", "100755") else "other"

    def text(self, name: str) -> str | None:
        if self.kind(name) != "file":
            return None
        _mode, oid, size = self.entries[name]
        if size > MAX_FILE_BYTES:
            return None
        try:
            # git decodes what it printed with replacements: one in the text means the blob
            # was not UTF-8 (or binary), as a NUL does
            text = git(self.repo, "cat-file", "blob", oid, max_output=MAX_FILE_BYTES)
        except GitError:
            return None
        if "\0" in text or "\ufffd" in text:
            return None
        return text.removeprefix("\ufeff")


def head_commit(repo: Path) -> Commit | None:
    """The root of ``repo``'s HEAD commit; None when there is none to read (no commit yet, not
    a git repository, git refusing it, a root too large to list)."""
    try:
        sha = git(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
        sha = sha.strip()
        if not is_oid(sha):
            return None
        # paths relative to ``repo``: its own folder of the commit
        listing = git(repo, "ls-tree", "-z", "-l", sha, max_output=MAX_LISTING_BYTES)
    except GitError:
        return None
    entries: dict[str, tuple[str, str, int]] = {}
    for entry in filter(None, listing.split("\0")):
        info, _, name = entry.partition("\t")
        parts = info.split()
        if len(parts) != 4 or not name:
            continue
        mode, _kind, oid, size = parts
        entries[name] = (mode, oid, int(size) if size.isdigit() else 0)
    return Commit(repo, sha, entries, source=f"its HEAD commit {sha[:7]}")


def read_repo(repo: Path) -> RepoFiles:
    """``repo``'s files as a story would start from them: its HEAD commit, else (none there)
    its working tree."""
    return head_commit(repo) or WorkingTree(repo)


def detect(repo: Path) -> Proposal:
    """What to propose for the repository at ``repo`` (nothing when it is not there)."""
    if not repo.is_dir():
        return Proposal()
    return propose(read_repo(repo))


# -- proposing -------------------------------------------------------------------------------


def propose(files: RepoFiles) -> Proposal:
    """The setup commands and checks ``files`` call for, each with its reason."""
    found = _Found()
    _python(files, found)
    _javascript(files, found)
    _go(files, found)
    _rust(files, found)
    _make(files, found)
    if not (found.setup or found.checks):
        return Proposal(source=files.source)
    return Proposal(
        source=files.source,
        setup=tuple(found.setup),
        checks=tuple(found.checks),
        notes=tuple(found.notes),
    )


@dataclass
class _Found:
    setup: list[Step] = field(default_factory=list)
    checks: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tests: bool = False
    """Whether a check that runs the tests is proposed (a Makefile's then is not)."""


def _python(files: RepoFiles, found: _Found) -> None:
    """A virtual environment in .venv, the project installed in it (with its test extra) and
    its requirement files; pytest when the dependencies have it or there is a tests folder."""
    pyproject = _toml(files, "pyproject.toml")
    project = _table(pyproject, "project")
    install = ""  # why the project installs with pip
    if project is not None:
        install = "pyproject.toml has a [project] table"
    elif _table(pyproject, "build-system") is not None:
        install = "pyproject.toml has a [build-system] table"
    elif files.kind("setup.py") == "file":
        install = "setup.py is there"
    requirements = _requirement_files(files)
    if not install and not requirements:
        return
    found.setup.append(Step(VENV, "a Python project: its own virtual environment, .venv"))
    deps: list[tuple[str, str]] = []  # each dependency and where it is, to say why pytest
    if install:
        extras = _table(project, "optional-dependencies") or {}
        extra = next((n for n in TEST_EXTRAS if isinstance(extras.get(n), list)), "")
        if extra:
            why = f"pyproject.toml has a `{extra}` extra"
            found.setup.append(Step(f"{PIP} -e '.[{extra}]'", why))
            deps += [(d, f"the `{extra}` extra's dependencies") for d in _strings(extras[extra])]
        else:
            found.setup.append(Step(f"{PIP} -e .", install))
        project_deps = _strings((project or {}).get("dependencies"))
        deps += [(d, "the project's dependencies") for d in project_deps]
    if requirements:
        listed = " ".join(f"-r {name}" for name in requirements)
        are = "is" if len(requirements) == 1 else "are"
        why = f"{' and '.join(requirements)} {are} there"
        found.setup.append(Step(f"{PIP} {listed}", why))
        for name, text in requirements.items():
            deps += [(d, f"the requirements in {name}") for d in _requirement_lines(text)]
    with_pytest = next((where for dep, where in deps if _is_pytest(dep)), "")
    tests_dir = next((d for d in ("tests", "test") if files.kind(d) == "dir"), "")
    if with_pytest:
        found.checks.append(Step(PYTEST, f"pytest is among {with_pytest}"))
        found.tests = True
    elif tests_dir:
        why = f"{tests_dir}/ is there and no dependency is pytest"
        found.setup.append(Step(f"{PIP} pytest", why))
        found.checks.append(Step(PYTEST, f"{tests_dir}/ holds tests (pytest runs unittest's too)"))
        found.tests = True
    if files.kind("tox.ini") == "file":
        found.notes.append(
            "tox.ini is there: hero runs no tox, so its [testenv] commands are not proposed; "
            "they may be the checks you want"
        )


def _requirement_files(files: RepoFiles) -> dict[str, str]:
    """requirements.txt, then the first of DEV_REQUIREMENTS, by name, with their text: those
    there and readable."""
    chosen: dict[str, str] = {}
    for names in (("requirements.txt",), DEV_REQUIREMENTS):
        for name in names:
            text = files.text(name)
            if text is not None:
                chosen[name] = text
                break
    return chosen


def _javascript(files: RepoFiles, found: _Found) -> None:
    """The package manager's frozen install from the lock file; the test and lint scripts."""
    package = _json_object(files, "package.json")
    if package is None:
        return
    lock = next(((n, m, c) for n, m, c in JS_LOCKS if files.kind(n) == "file"), None)
    if lock is None:
        manager = "npm"
        found.setup.append(Step("npm install", "package.json is there, without a lock file"))
    else:
        name, manager, command = lock
        found.setup.append(Step(command, f"{name} is there"))
    scripts = package.get("scripts")
    scripts = scripts if isinstance(scripts, dict) else {}
    test = scripts.get("test")
    if isinstance(test, str) and test.strip():
        if NPM_PLACEHOLDER_TEST in test:
            found.notes.append(
                "package.json's `test` script is the one npm init writes (no test specified): "
                "no test check is proposed from it"
            )
        else:
            found.checks.append(Step(f"{manager} test", "package.json has a `test` script"))
            found.tests = True
    lint = scripts.get("lint")
    if isinstance(lint, str) and lint.strip():
        found.checks.append(Step(f"{manager} run lint", "package.json has a `lint` script"))


def _go(files: RepoFiles, found: _Found) -> None:
    text = files.text("go.mod")
    if text is None or not re.search(r"^\s*module\s+\S", text, flags=re.MULTILINE):
        return
    found.setup.append(Step("go mod download", "go.mod is there"))
    found.checks.append(Step("go test ./...", "go.mod is there: a Go module's tests"))
    found.tests = True


def _rust(files: RepoFiles, found: _Found) -> None:
    cargo = _toml(files, "Cargo.toml")
    table = next((t for t in ("package", "workspace") if _table(cargo, t) is not None), "")
    if not table:
        return
    found.setup.append(Step("cargo fetch", f"Cargo.toml has a [{table}] table"))
    found.checks.append(Step("cargo test", f"Cargo.toml has a [{table}] table"))
    found.tests = True


def _make(files: RepoFiles, found: _Found) -> None:
    """``make test`` when the Makefile has a test target and nothing else runs the tests: the
    other checks already do, and it may well run them the same way."""
    name = next((n for n in MAKEFILES if files.kind(n) == "file"), "")
    text = files.text(name) if name else None
    if text is None or not _has_target(text, "test"):
        return
    if found.tests:
        found.notes.append(
            f"{name} has a `test` target: `make test` may be the check you want instead"
        )
        return
    found.checks.append(Step("make test", f"{name} has a `test` target"))
    found.tests = True


# -- reading the files' content ---------------------------------------------------------------


def _toml(files: RepoFiles, name: str) -> dict[str, Any] | None:
    text = files.text(name)
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return None


def _json_object(files: RepoFiles, name: str) -> dict[str, Any] | None:
    text = files.text(name)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _table(data: Mapping[str, Any] | None, key: str) -> dict[str, Any] | None:
    value = None if data is None else data.get(key)
    return value if isinstance(value, dict) else None


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _requirement_lines(text: str) -> list[str]:
    """The requirements of a requirements file: no comments, no options (``-r``, ``-e``)."""
    lines = (line.split(" #", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith(("#", "-"))]


def _is_pytest(requirement: str) -> bool:
    """Whether the requirement installs pytest: pytest itself or a plugin (``pytest-cov``),
    which depends on it."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    name = re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else ""
    return name == "pytest" or name.startswith("pytest-")


def _has_target(makefile: str, target: str) -> bool:
    """Whether a rule of ``makefile`` names ``target`` (``test:``, ``check test::``), not a
    variable (``test := x``) nor a recipe line."""
    for line in makefile.splitlines():
        if not line or line[0] in " \t#.":
            continue
        match = re.match(r"([^:=#]+?)\s*::?(?!=)", line)
        if match and target in match.group(1).split():
            return True
    return False
