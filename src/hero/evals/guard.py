"""The test side of the worker's tree, put back as the task's before the hidden tests run.

The worker writes the code the tests import; it must not write what runs the tests, nor the
tests themselves. Before judging, every path of the worker's final tree that belongs to the
test side and that the worker changed (added, modified or deleted, compared with the task's
base commit) is put back as it is at the base (removed when the base has no such path):

- **test files**: what ``hero bench make`` counts as one (a path under ``tests/`` or
  ``test/``, ``test_*.py``, ``*_test.py``, ``*.test.*``, ``*_spec.*``): a weakened or deleted
  test, a ``pytest_plugins`` line in a test module, a new helper the tests would import;
- **pytest's configuration and its hooks**, at any depth: ``conftest.py``, ``pytest.ini``,
  ``.pytest.ini``, ``pytest.toml``, ``.pytest.toml``; and ``pyproject.toml`` (its
  ``[tool.pytest...]`` tables), ``setup.cfg`` (its ``[tool:pytest]`` section) and ``tox.ini``
  (its ``[pytest]`` section) when that part differs from the base's, or cannot be read (the
  whole file is put back then; the rest of such a file the worker may change freely);
- **what Python runs before the tests**: ``sitecustomize.py``, ``usercustomize.py`` and ``*.pth``
  files anywhere; package metadata (a ``*.dist-info`` or ``*.egg-info`` directory, a
  ``*.egg-link``), through which an entry point would load a pytest plugin from the tree;
- **pytest itself, shadowed**: a top-level ``pytest.py``, ``pytest/``, ``_pytest/``,
  ``pluggy/``, ``py.py`` or ``py/`` (``python -m pytest`` puts the tree first on sys.path).

A link anywhere on the way to such a path is removed first, so that nothing is written
through a link the worker made. The tests then run with ``PYTEST_ADDOPTS`` and
``PYTEST_PLUGINS`` unset (:data:`UNSET_ENV`). pytest's plugin autoload
(``PYTEST_DISABLE_PLUGIN_AUTOLOAD``) is left on: the plugins it loads are those installed in
the project's environment, which ``setup`` made from the base commit (read-only in the
sandbox), and the tree's own metadata is put back as above.

What this does not stop: the code under test runs inside the test process, and code that
patches pytest from within (or a module the tests import that shadows another) can still
forge outcomes. Such a worker's patch is in ``predictions-NAME.jsonl`` for people to read.
"""

from __future__ import annotations

import configparser
import os
import shutil
import stat
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

from hero.evals.make import is_test_path
from hero.git.ops import git

#: pytest's own configuration and hook files, by name, at any depth: always put back.
CONFIG_FILES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "sitecustomize.py",
        "usercustomize.py",
    }
)
#: Files that hold pytest's configuration among other things: put back when that part differs.
SECTIONED = frozenset({"pyproject.toml", "setup.cfg", "tox.ini"})
#: Suffixes of files Python's ``site`` or ``importlib.metadata`` reads.
FILE_SUFFIXES = (".pth", ".egg-link")
#: Suffixes of package-metadata directories (entry points: pytest plugins).
METADATA_SUFFIXES = (".dist-info", ".egg-info")
#: Top-level names that would shadow pytest and what it imports.
SHADOWS = frozenset({"pytest", "pytest.py", "_pytest", "pluggy", "py", "py.py"})
#: Variables taken out of the tests' environment: options and plugins given from outside.
UNSET_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")
#: Paths given to one git call, at most.
_CHUNK = 200
#: git reads the paths given to it as they are (no glob, no magic).
_LITERAL = ("--literal-pathspecs",)
#: A configuration that cannot be read: never equal to another.
_UNREADABLE = object()


def always_guarded(path: str) -> bool:
    """Whether a changed ``path`` is put back whatever the change (see the module's docstring)."""
    pure = PurePosixPath(path)
    if is_test_path(path) or pure.name in CONFIG_FILES or pure.name.endswith(FILE_SUFFIXES):
        return True
    if pure.parts and pure.parts[0] in SHADOWS:
        return True
    return any(part.endswith(METADATA_SUFFIXES) for part in pure.parts[:-1])


def changed_paths(tree: Path, base: str) -> list[str]:
    """The paths whose content or kind differs between ``base`` and the tree's HEAD."""
    out = git(tree, "diff", "--no-renames", "--no-ext-diff", "--name-only", "-z", base, "HEAD")
    return [p for p in out.split("\0") if p]


def _blob(tree: Path, commit: str, path: str) -> str | None:
    """The text of ``path`` at ``commit``; None when it has none there."""
    if not git(tree, *_LITERAL, "ls-tree", "--name-only", commit, "--", path, check=False).strip():
        return None
    return git(tree, "cat-file", "blob", f"{commit}:{path}", check=False)


def pytest_part(name: str, text: str | None) -> object:
    """pytest's part of a ``pyproject.toml``, ``setup.cfg`` or ``tox.ini`` (None when the file
    or the part is missing; a marker that equals nothing when the file cannot be read)."""
    if text is None:
        return None
    try:
        if name == "pyproject.toml":
            tool = tomllib.loads(text).get("tool")
            return tool.get("pytest") if isinstance(tool, dict) else None
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.read_string(text)
        section = "tool:pytest" if name == "setup.cfg" else "pytest"
        return dict(parser[section]) if parser.has_section(section) else None
    except (tomllib.TOMLDecodeError, configparser.Error, UnicodeError, ValueError):
        return _UNREADABLE


def to_put_back(tree: Path, base: str) -> list[str]:
    """The test side's paths the worker changed, which go back as at ``base``."""
    found = []
    for path in changed_paths(tree, base):
        name = PurePosixPath(path).name
        if always_guarded(path):
            found.append(path)
        elif name in SECTIONED:
            before = pytest_part(name, _blob(tree, base, path))
            after = pytest_part(name, _blob(tree, "HEAD", path))
            if before is _UNREADABLE or after is _UNREADABLE or before != after:
                found.append(path)
    return found


def _lstat_mode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return None


def clear_way(tree: Path, path: str) -> None:
    """Remove any link (or file) on the way to ``path`` in ``tree``: what is written there
    lands in the tree, nowhere else."""
    current = tree
    for part in PurePosixPath(path).parts[:-1]:
        current = current / part
        mode = _lstat_mode(current)
        if mode is None:
            return
        if not stat.S_ISDIR(mode):
            current.unlink()
            return


def put_back(tree: Path, base: str, paths: Iterable[str]) -> None:
    """Each of ``paths`` in ``tree`` as at ``base``: checked out from it, or removed when the
    base has no such path (a few git calls for many paths)."""
    paths = list(dict.fromkeys(paths))
    at_base: set[str] = set()
    for chunk in _chunks(paths):
        out = git(tree, *_LITERAL, "ls-tree", "-z", "--name-only", base, "--", *chunk, check=False)
        at_base.update(p for p in out.split("\0") if p)
    for path in paths:
        clear_way(tree, path)
        target = tree / path
        mode = _lstat_mode(target)
        if mode is not None and stat.S_ISDIR(mode):
            shutil.rmtree(target)
        elif mode is not None:
            target.unlink()
    for chunk in _chunks([p for p in paths if p in at_base]):
        git(tree, *_LITERAL, "checkout", "-q", base, "--", *chunk)


def _chunks(paths: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(paths), _CHUNK):
        yield paths[i : i + _CHUNK]


def guard(tree: Path, base: str) -> list[str]:
    """Put back the test side of the worker's tree (see the module's docstring); the paths put
    back."""
    paths = to_put_back(tree, base)
    put_back(tree, base, paths)
    return paths


def judge_env(env: dict[str, str]) -> dict[str, str]:
    """The tests' environment without what gives pytest options or plugins from outside."""
    return {k: v for k, v in env.items() if k not in UNSET_ENV}
