"""What `hero init` proposes from a repository's files: each ecosystem on small real files in
real git repositories (read at HEAD) or plain folders (read in the working tree), and hostile
files that are left out without an error and never followed out of the repository."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import git

from hero.config.detect import (
    MAX_FILE_BYTES,
    Proposal,
    WorkingTree,
    detect,
    head_commit,
    propose,
)
from hero.yamlio import ValueProblem, read_file

PYPROJECT_TEST_EXTRA = """\
[project]
name = "calc"
version = "0.1"
dependencies = ["requests>=2"]

[project.optional-dependencies]
docs = ["sphinx"]
test = ["pytest>=7", "pytest-cov"]
"""
PACKAGE_JSON = {
    "name": "web",
    "scripts": {"test": "vitest run", "lint": "eslint .", "build": "vite build"},
    "devDependencies": {"vitest": "^1"},
}


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def committed(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    """A git repository on `main` holding ``files`` in its one commit."""
    repo = write(tmp_path / "repo", files)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "initial")
    return repo


def commands(proposal: Proposal) -> tuple[list[str], list[str]]:
    return [s.command for s in proposal.setup], [s.command for s in proposal.checks]


def reasons(proposal: Proposal) -> dict[str, str]:
    return {s.command: s.reason for s in (*proposal.setup, *proposal.checks)}


# -- Python ----------------------------------------------------------------------------------


def test_a_pyproject_with_a_test_extra_is_installed_with_it_and_tested_with_pytest(
    tmp_path: Path,
) -> None:
    repo = committed(tmp_path, {"pyproject.toml": PYPROJECT_TEST_EXTRA, "calc/__init__.py": ""})
    proposal = detect(repo)
    assert commands(proposal) == (
        ["python3 -m venv .venv", ".venv/bin/pip install -e '.[test]'"],
        [".venv/bin/python -m pytest -q"],
    )
    why = reasons(proposal)
    assert why[".venv/bin/pip install -e '.[test]'"] == "pyproject.toml has a `test` extra"
    assert "`test` extra" in why[".venv/bin/python -m pytest -q"]
    assert proposal.source.startswith("its HEAD commit ")
    assert proposal.notes == ()


@pytest.mark.parametrize(
    ("extras", "installed"),
    [
        ({"tests": ["pytest"], "dev": ["pytest", "ruff"]}, "-e '.[tests]'"),
        ({"docs": ["sphinx"], "dev": ["pytest"]}, "-e '.[dev]'"),
        ({"testing": ["pytest"]}, "-e '.[testing]'"),
    ],
)
def test_the_test_extra_is_chosen_in_a_fixed_order(
    tmp_path: Path, extras: dict[str, list[str]], installed: str
) -> None:
    lines = "\n".join(f"{name} = {json.dumps(deps)}" for name, deps in extras.items())
    text = f'[project]\nname = "x"\nversion = "0"\n[project.optional-dependencies]\n{lines}\n'
    setup, checks = commands(detect(committed(tmp_path, {"pyproject.toml": text})))
    assert setup == ["python3 -m venv .venv", f".venv/bin/pip install {installed}"]
    assert checks == [".venv/bin/python -m pytest -q"]


def test_without_pytest_or_tests_a_python_project_is_installed_and_not_tested(
    tmp_path: Path,
) -> None:
    text = '[project]\nname = "x"\nversion = "0"\ndependencies = ["click"]\n'
    proposal = detect(committed(tmp_path, {"pyproject.toml": text}))
    assert commands(proposal) == (["python3 -m venv .venv", ".venv/bin/pip install -e ."], [])
    assert reasons(proposal)[".venv/bin/pip install -e ."] == (
        "pyproject.toml has a [project] table"
    )


def test_a_tests_folder_without_pytest_among_the_dependencies_installs_pytest(
    tmp_path: Path,
) -> None:
    repo = committed(
        tmp_path,
        {
            "setup.py": "from setuptools import setup\nsetup()\n",
            "tests/test_a.py": "def test_a():\n    pass\n",
        },
    )
    proposal = detect(repo)
    assert commands(proposal) == (
        ["python3 -m venv .venv", ".venv/bin/pip install -e .", ".venv/bin/pip install pytest"],
        [".venv/bin/python -m pytest -q"],
    )
    assert reasons(proposal)[".venv/bin/pip install -e ."] == "setup.py is there"
    assert "tests/" in reasons(proposal)[".venv/bin/pip install pytest"]


def test_requirement_files_the_dev_one_after_the_main_one(tmp_path: Path) -> None:
    repo = committed(
        tmp_path,
        {
            "requirements.txt": "flask==3.0\n",
            "requirements-docs.txt": "sphinx\n",
            "requirements-dev.txt": "-r requirements.txt\n# the tests\npytest==8.0  # pinned\n",
            "requirements-test.txt": "nose\n",
        },
    )
    proposal = detect(repo)
    install = ".venv/bin/pip install -r requirements.txt -r requirements-dev.txt"
    assert commands(proposal) == (
        ["python3 -m venv .venv", install],
        [".venv/bin/python -m pytest -q"],
    )
    assert reasons(proposal)[install] == "requirements.txt and requirements-dev.txt are there"
    assert "requirements-dev.txt" in reasons(proposal)[".venv/bin/python -m pytest -q"]


def test_only_a_docs_requirement_file_or_a_tool_only_pyproject_proposes_nothing(
    tmp_path: Path,
) -> None:
    repo = committed(
        tmp_path,
        {"requirements-docs.txt": "sphinx\n", "pyproject.toml": "[tool.ruff]\nline-length = 99\n"},
    )
    proposal = detect(repo)
    assert not proposal and commands(proposal) == ([], [])


def test_a_tox_ini_is_a_note_beside_the_proposal(tmp_path: Path) -> None:
    repo = committed(
        tmp_path,
        {"pyproject.toml": PYPROJECT_TEST_EXTRA, "tox.ini": "[testenv]\ncommands = pytest\n"},
    )
    proposal = detect(repo)
    assert commands(proposal)[1] == [".venv/bin/python -m pytest -q"]
    assert len(proposal.notes) == 1 and proposal.notes[0].startswith("tox.ini is there")


# -- JavaScript, Go, Rust, make --------------------------------------------------------------


@pytest.mark.parametrize(
    ("lock", "install", "manager"),
    [
        ("package-lock.json", "npm ci", "npm"),
        ("yarn.lock", "yarn install --frozen-lockfile", "yarn"),
        ("pnpm-lock.yaml", "pnpm install --frozen-lockfile", "pnpm"),
        (None, "npm install", "npm"),
    ],
)
def test_package_json_installs_from_its_lock_file_and_runs_its_scripts(
    tmp_path: Path, lock: str | None, install: str, manager: str
) -> None:
    files: dict[str, str | bytes] = {"package.json": json.dumps(PACKAGE_JSON)}
    if lock:
        files[lock] = "{}\n"
    proposal = detect(committed(tmp_path, files))
    assert commands(proposal) == ([install], [f"{manager} test", f"{manager} run lint"])
    why = reasons(proposal)
    assert why[f"{manager} test"] == "package.json has a `test` script"
    assert why[install] == (
        f"{lock} is there" if lock else "package.json is there, without a lock file"
    )


def test_npm_inits_placeholder_test_script_is_no_check(tmp_path: Path) -> None:
    package = {"scripts": {"test": 'echo "Error: no test specified" && exit 1'}}
    files: dict[str, str | bytes] = {
        "package.json": json.dumps(package),
        "package-lock.json": "{}",
    }
    proposal = detect(committed(tmp_path, files))
    assert commands(proposal) == (["npm ci"], [])
    assert any("no test specified" in note for note in proposal.notes)


def test_go_and_rust(tmp_path: Path) -> None:
    go = detect(committed(tmp_path / "go", {"go.mod": "module example.com/x\n\ngo 1.22\n"}))
    assert commands(go) == (["go mod download"], ["go test ./..."])
    cargo = '[package]\nname = "x"\nversion = "0.1.0"\nedition = "2021"\n'
    rust = detect(committed(tmp_path / "rust", {"Cargo.toml": cargo}))
    assert commands(rust) == (["cargo fetch"], ["cargo test"])
    assert reasons(rust)["cargo fetch"] == "Cargo.toml has a [package] table"
    workspace = detect(committed(tmp_path / "ws", {"Cargo.toml": '[workspace]\nmembers = ["a"]\n'}))
    assert commands(workspace) == (["cargo fetch"], ["cargo test"])


@pytest.mark.parametrize(
    ("makefile", "found"),
    [
        ("all: build\n\ntest: build\n\tpytest\n", True),
        (".PHONY: lint test\nlint test::\n\t./check\n", True),
        (".PHONY: test\ntest := pytest\ncheck:\n\ttest -f x\n", False),
        ("# test: nothing\nunit-test:\n\tx\n", False),
    ],
)
def test_a_makefiles_test_target(tmp_path: Path, makefile: str, found: bool) -> None:
    proposal = detect(committed(tmp_path, {"Makefile": makefile}))
    assert commands(proposal) == ([], ["make test"] if found else [])


def test_make_test_is_a_note_when_another_check_runs_the_tests(tmp_path: Path) -> None:
    repo = committed(tmp_path, {"go.mod": "module x\n", "Makefile": "test:\n\tgo test ./...\n"})
    proposal = detect(repo)
    assert commands(proposal) == (["go mod download"], ["go test ./..."])
    assert proposal.notes == (
        "Makefile has a `test` target: `make test` may be the check you want instead",
    )


def test_several_ecosystems_are_proposed_in_a_fixed_order(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {
        "Cargo.toml": '[package]\nname = "x"\nversion = "0.1.0"\n',
        "go.mod": "module x\n",
        "package.json": json.dumps(PACKAGE_JSON),
        "package-lock.json": "{}",
        "pyproject.toml": PYPROJECT_TEST_EXTRA,
    }
    first = detect(committed(tmp_path / "a", files))
    again = detect(committed(tmp_path / "b", dict(reversed(files.items()))))
    assert (
        commands(first)
        == commands(again)
        == (
            [
                "python3 -m venv .venv",
                ".venv/bin/pip install -e '.[test]'",
                "npm ci",
                "go mod download",
                "cargo fetch",
            ],
            [
                ".venv/bin/python -m pytest -q",
                "npm test",
                "npm run lint",
                "go test ./...",
                "cargo test",
            ],
        )
    )


# -- where it reads --------------------------------------------------------------------------


def test_the_head_commit_is_read_not_the_working_tree(tmp_path: Path) -> None:
    repo = committed(tmp_path, {"go.mod": "module x\n"})
    (repo / "go.mod").unlink()  # uncommitted changes are not what a story starts from
    write(repo, {"package.json": json.dumps(PACKAGE_JSON)})
    proposal = detect(repo)
    head = git(repo, "rev-parse", "--short=7", "HEAD").strip()
    assert proposal.source == f"its HEAD commit {head}"
    assert commands(proposal) == (["go mod download"], ["go test ./..."])


def test_without_a_commit_the_working_tree_is_read(tmp_path: Path) -> None:
    plain = write(tmp_path / "plain", {"go.mod": "module x\n"})  # not a git repository
    assert detect(plain).source == "its working tree"
    assert commands(detect(plain)) == (["go mod download"], ["go test ./..."])
    fresh = write(tmp_path / "fresh", {"go.mod": "module x\n"})
    git(fresh, "init", "-q")  # no commit yet
    assert head_commit(fresh) is None
    assert commands(detect(fresh)) == (["go mod download"], ["go test ./..."])


def test_nothing_there_proposes_nothing(tmp_path: Path) -> None:
    assert detect(tmp_path / "missing") == Proposal()
    empty = committed(tmp_path, {})
    assert not detect(empty) and detect(empty).notes == ()


# -- hostile files ---------------------------------------------------------------------------

#: Each file broken in its own way; go.mod, good, shows the rest is still read.
HOSTILE: dict[str, str | bytes] = {
    "go.mod": "module x\n",
    "pyproject.toml": '[project\nname = "x"\n',  # broken TOML
    "Cargo.toml": b'[package]\nname = "\xff\xfe"\n',  # not UTF-8
    "package.json": '{"scripts": {"test": "jest"',  # broken JSON
    "package-lock.json": "{}",
    "requirements.txt": b"pytest\0\0\0\x89PNG",  # binary
    "Makefile": "test:\n\t" + "x" * MAX_FILE_BYTES + "\n",  # over the size read
}


PIP_E = ["python3 -m venv .venv", ".venv/bin/pip install -e ."]
#: Files of the right name whose content is of the wrong shape, and what is proposed then.
WRONG_SHAPES: list[tuple[dict[str, str | bytes], list[str]]] = [
    ({"package.json": "[1, 2, 3]"}, []),
    ({"package.json": json.dumps({"scripts": ["test"]})}, ["npm install"]),
    ({"package.json": json.dumps({"scripts": {"test": 3, "lint": None}})}, ["npm install"]),
    ({"package.json": "[" * 100_000 + "]" * 100_000}, []),  # nested past the recursion limit
    ({"pyproject.toml": "a = " + "[" * 100_000 + "]" * 100_000 + "\n"}, []),
    (
        {
            "pyproject.toml": '[project]\nname = "x"\noptional-dependencies = ["test"]\n'
            "dependencies = 'pytest'\n"
        },
        PIP_E,
    ),
    (
        {
            "pyproject.toml": '[project]\nname = "x"\n[project.optional-dependencies]\ntest = "pytest"\n'
        },
        PIP_E,
    ),
    ({"Cargo.toml": 'package = "not a table"\n'}, []),
    ({"go.mod": "// no module line\n"}, []),
]


def test_hostile_files_are_left_out_at_head_and_in_the_working_tree(tmp_path: Path) -> None:
    repo = committed(tmp_path, HOSTILE)
    for proposal in (detect(repo), propose(WorkingTree(repo))):
        assert commands(proposal) == (["go mod download"], ["go test ./..."])
        assert proposal.notes == ()  # the Makefile too large to read: no `make test` note


@pytest.mark.parametrize(("files", "setup"), WRONG_SHAPES)
def test_files_of_the_wrong_shape_propose_no_more_than_their_name_says(
    tmp_path: Path, files: dict[str, str | bytes], setup: list[str]
) -> None:
    assert commands(detect(committed(tmp_path, files))) == (setup, [])


def test_symlinks_are_never_followed(tmp_path: Path) -> None:
    outside = write(
        tmp_path / "outside", {"go.mod": "module evil\n", "package.json": json.dumps(PACKAGE_JSON)}
    )
    repo = tmp_path / "repo"
    repo.mkdir()
    os.symlink(outside / "go.mod", repo / "go.mod")  # out of the repository
    write(repo, {"real.json": json.dumps(PACKAGE_JSON)})
    os.symlink("real.json", repo / "package.json")  # inside it: not followed either
    os.symlink(outside, repo / "tests")
    assert WorkingTree(repo).kind("go.mod") == "link"
    assert WorkingTree(repo).text("go.mod") is None
    with pytest.raises(ValueProblem, match="found a symlink"):  # the reader it uses
        read_file(repo / "package.json", limit=MAX_FILE_BYTES, follow_link=False)
    assert not detect(repo)  # the working tree
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "links")
    head = head_commit(repo)
    assert head is not None and head.kind("go.mod") == "link" and head.text("go.mod") is None
    assert not detect(repo)  # at HEAD


def test_a_fifo_or_a_folder_of_a_files_name_is_never_opened(tmp_path: Path) -> None:
    repo = write(tmp_path / "repo", {"go.mod/inside": "module x\n"})
    os.mkfifo(repo / "package.json")  # opening it for reading would block: it is not opened
    tree = WorkingTree(repo)
    assert (tree.kind("go.mod"), tree.kind("package.json")) == ("dir", "other")
    assert tree.text("package.json") is None and tree.text("go.mod") is None
    assert not detect(repo)


def test_a_submodule_is_no_file(tmp_path: Path) -> None:
    sub = committed(tmp_path / "sub", {"go.mod": "module sub\n"})
    repo = committed(tmp_path / "main", {"README": "x\n"})
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "go.mod")
    git(repo, "commit", "-q", "-m", "a submodule named go.mod")
    head = head_commit(repo)
    assert head is not None and head.kind("go.mod") == "other"
    assert not detect(repo)
