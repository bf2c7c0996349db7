"""The project's environment (roles.yaml's setup keys, see :mod:`hero.run.environment`): how the
target repository's dependencies are installed before a story's commands run, which files make
an environment new, and what hero's own commits leave out as build output."""

from __future__ import annotations

from dataclasses import dataclass

from hero.config.schema import PROJECT_SECTION
from hero.config.settings import knob

#: The files whose content, with the setup commands, keys an environment: the usual lock and
#: project files of Python, JavaScript, Go, Rust, Ruby, PHP and Java projects.
DEFAULT_SETUP_INPUTS = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements*.txt",
    "requirements/*.txt",
    "constraints*.txt",
    "Pipfile",
    "Pipfile.lock",
    "poetry.lock",
    "uv.lock",
    "pdm.lock",
    "tox.ini",
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "go.mod",
    "go.sum",
    "Cargo.toml",
    "Cargo.lock",
    "Gemfile",
    "Gemfile.lock",
    "composer.json",
    "composer.lock",
    "pom.xml",
    "build.gradle",
    "build.gradle.kts",
)
#: Build and cache output, .gitignore-style: what hero's own commits (the rescue of a worker's
#: uncommitted work, a snapshot) leave out, .gitignore or not.
DEFAULT_BUILD_OUTPUT = (
    "__pycache__/",
    "*.pyc",
    "*.pyo",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".tox/",
    ".nox/",
    ".coverage",
    "htmlcov/",
    ".venv/",
    "venv/",
    "node_modules/",
    ".next/",
    "dist/",
    "build/",
    "*.egg-info/",
    "target/",
    ".gradle/",
)


@dataclass(frozen=True)
class ProjectSettings:
    """The project's environment and its build output (roles.yaml)."""

    setup: tuple[str, ...] = knob(
        "setup",
        (),
        "Shell commands that make the target repository's environment (its dependencies), "
        "run in order in a story's repository, in the sandbox, before the story's first round.",
        note="For example `python -m venv .venv && .venv/bin/pip install -e '.[test]'`, `npm "
        "ci` or `go mod download`. The environment is made once per key (these commands and "
        "the content of the setup_inputs files at the story's base commit), kept in this "
        "home's envs/ and reused by every later story with the same key; the Worker's commands "
        "and the checks run with it, its tools (.venv/bin, node_modules/.bin) first on PATH. A "
        "story's own `setup:` runs after these. A setup that fails ends the story before any "
        "model call, its log kept.",
        shown="[] (no setup: commands run with the tools of this machine)",
        example="setup:\n  - python3 -m venv .venv\n  - .venv/bin/pip install -e '.[test]'",
        section=PROJECT_SECTION,
    )
    setup_network: bool = knob(
        "setup_network",
        True,
        "Whether the setup commands may reach the network from the sandbox (installing needs "
        "the package registries); false: setup runs offline.",
        note="Setup is the only sandboxed step with the network by default. No secret hero "
        "knows is in its environment.",
        section=PROJECT_SECTION,
    )
    setup_timeout_s: float = knob(
        "setup_timeout_s",
        1800.0,
        "Time limit of each setup command, in seconds.",
        section=PROJECT_SECTION,
    )
    setup_inputs: tuple[str, ...] = knob(
        "setup_inputs",
        DEFAULT_SETUP_INPUTS,
        "The files (globs, from the repository's root) whose content at the base commit, with "
        "the setup commands, keys an environment: a change to one makes a new environment.",
        shown="the usual lock and project files (pyproject.toml, requirements*.txt, "
        "package-lock.json, go.sum, Cargo.lock, ...)",
        written=False,
        example="setup_inputs:\n  - pyproject.toml\n  - requirements/*.txt",
        section=PROJECT_SECTION,
    )
    baseline: bool = knob(
        "baseline",
        True,
        "Whether a story's checks run once on the commit it starts from, before round 1 (the "
        "baseline): the worker is told which already fail, the verifier reports them apart.",
        note="Tiers fail fast as in a round. The result is kept per starting commit, "
        "environment and checks, so a story that starts where another did runs none again. "
        "false: no check runs before round 1.",
        section=PROJECT_SECTION,
    )
    build_output: tuple[str, ...] = knob(
        "build_output",
        DEFAULT_BUILD_OUTPUT,
        "Build and cache output (.gitignore-style globs) that hero's own commits of a "
        "worker's uncommitted work leave out, whatever the repository's .gitignore says.",
        note="Only files the branch does not have yet (untracked, or staged and never "
        "committed) are left out; they stay in the worktree, untracked. A change to a file the "
        "branch has is committed as ever. A .gitignore that un-ignores them (`!*.pyc`) does "
        "not bring them back. The Worker's own commits of such files stay on the branch, and "
        "the Reviewer's request names them. A list replaces the default; `[]` leaves nothing "
        "out.",
        shown="__pycache__/, *.pyc, .pytest_cache/, .mypy_cache/, node_modules/, .venv/, "
        "dist/, build/, *.egg-info/, target/, ...",
        written=False,
        example='build_output:\n  - __pycache__/\n  - "*.pyc"\n  - node_modules/',
        section=PROJECT_SECTION,
    )
