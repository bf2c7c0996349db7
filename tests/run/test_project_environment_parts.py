"""The project environment's parts that need no sandbox: its key, the globs of setup_inputs,
where a bind may land, and the sandbox's view of an environment (hero.run.environment,
hero.sandbox.bwrap)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hero.run.environment import Environment, environment_key, glob_regex, mount_point
from hero.sandbox.bwrap import PROJECT_PATH, ProjectMounts, build, hero_python_dirs


def commit(repo: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"],
        cwd=repo,
        check=True,
    )
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("requirements*.txt", "requirements-dev.txt", True),
        ("requirements*.txt", "sub/requirements.txt", False),  # from the root only
        ("requirements/*.txt", "requirements/base.txt", True),
        ("**/package.json", "a/b/package.json", True),
        ("**/package.json", "package.json", True),
        ("go.?um", "go.sum", True),
        ("a.b", "axb", False),  # a dot is a dot
    ],
)
def test_setup_inputs_globs(glob: str, path: str, matches: bool) -> None:
    assert bool(glob_regex(glob).match(path)) is matches


def test_the_key_follows_the_commands_and_the_input_files_only(target_repo: Path) -> None:
    def key(sha: str, commands: tuple[str, ...] = ("pip install .",)) -> str:
        return environment_key(target_repo, sha, commands, ["pyproject.toml"], sandboxed=True)

    first = commit(target_repo, {"pyproject.toml": "[project]\nname='a'\n"})
    other = commit(target_repo, {"calc/more.py": "x = 1\n"})  # not an input
    assert key(first) == key(other)
    assert key(first) != key(first, ("pip install -e .",))
    changed = commit(target_repo, {"pyproject.toml": "[project]\nname='b'\n"})
    assert key(changed) != key(first)
    assert environment_key(target_repo, first, ("x",), [], sandboxed=True) != environment_key(
        target_repo, first, ("x",), [], sandboxed=False
    )


def test_a_bind_never_lands_through_a_link_or_a_file(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    assert mount_point(repo, "src/pkg.egg-info") and (repo / "src" / "pkg.egg-info").is_dir()
    os.symlink("/etc", repo / ".venv")  # a worker put a link where the environment goes
    assert not mount_point(repo, ".venv")
    os.symlink("/", repo / "lib")
    assert not mount_point(repo, "lib/x")
    (repo / "node_modules").write_text("a file")
    assert not mount_point(repo, "node_modules")
    assert not mount_point(repo, "../outside")


def test_an_environments_mounts_skip_what_a_worker_replaced(tmp_path: Path) -> None:
    env = Environment(
        key="k", path=tmp_path / "envs" / "k", dirs=(".venv", "node_modules"), bins=("/x/bin",)
    )
    story = tmp_path / "story"
    story.mkdir()
    os.symlink("/root", story / "node_modules")
    mounts = env.mounts(story)
    assert mounts.read_only == ((str(tmp_path / "envs/k/tree/.venv"), f"{PROJECT_PATH}/.venv"),)
    assert mounts.path == ("/x/bin",)


def test_the_sandbox_of_a_project_shows_the_repository_at_its_path_and_hides_heros_python(
    tmp_path: Path,
) -> None:
    worktree = tmp_path / "story"
    worktree.mkdir()
    box = build(
        worktree,
        None,
        tool_dirs=None,
        identity=False,
        project=ProjectMounts(
            read_only=(("/env/.venv", f"{PROJECT_PATH}/.venv"),),
            path=(f"{PROJECT_PATH}/.venv/bin",),
        ),
    )
    argv = box.wrap(["true"], worktree / "sub")
    assert argv[argv.index("--chdir") + 1] == f"{PROJECT_PATH}/sub"
    joined = " ".join(box.prefix)
    assert f"--bind {worktree} {PROJECT_PATH}" in joined
    assert f"--ro-bind /env/.venv {PROJECT_PATH}/.venv" in joined
    env = box.env_for({"PATH": os.environ["PATH"], "VIRTUAL_ENV": sys.prefix})
    assert env["PATH"].startswith(f"{PROJECT_PATH}/.venv/bin:")
    assert "VIRTUAL_ENV" not in env
    for hidden in hero_python_dirs():  # hero's own virtualenv: neither bound nor on PATH
        assert f"--ro-bind {hidden} " not in joined
        assert not any(p.startswith(hidden) for p in env["PATH"].split(":"))


def test_only_real_directories_the_setup_made_are_kept(target_repo: Path, tmp_path: Path) -> None:
    from hero.run.environment import _move_made

    (target_repo / ".venv" / "bin").mkdir(parents=True)
    os.symlink("/root", target_repo / "home-link")  # a setup that links out: never bound
    (target_repo / "notes.txt").write_text("a file: nothing to bind")
    tree = tmp_path / "tree"
    assert _move_made(target_repo, tree) == [".venv"]
    assert (tree / ".venv" / "bin").is_dir() and os.path.islink(target_repo / "home-link")
