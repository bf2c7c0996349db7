"""A new user's first screens: `hero init` says only what is left to do and writes a sample
story the daemon leaves alone, and the README's first run on your own repository works as
written (its commands are taken from README.md and run in a real shell, against hero's
scripted model; the `$EDITOR` step is a script that edits as a user would)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import git
from helpers import REPO_ROOT, is_review, step_of, uncomment_proposal, verdict

from hero import cli
from hero.config.loader import load_config
from hero.config.scaffold import PROPOSAL_TITLE
from hero.llm.scripted import ScriptedModel, call, text
from hero.story.format import parse_story
from hero.views.status import collect_status

ROOT = REPO_ROOT
WAIT_S = 300  # a generous "did not hang" bound for a whole story run, not a speed check


def hero_on_path(tmp_path: Path) -> Path:
    """A folder holding a `hero` that runs this tree's hero (PYTHONPATH is inherited)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "hero"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m hero "$@"\n')
    shim.chmod(0o755)
    return bin_dir


def hero(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hero", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=WAIT_S,
        env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null"},
    )


def next_steps(out: str) -> list[str]:
    """The numbered steps after `next:`."""
    return re.findall(r"^  \d+\. (.+)$", out.split("next:", 1)[1], flags=re.MULTILINE)


@pytest.mark.slow
def test_init_with_a_target_repo_says_only_what_is_left(tmp_path: Path, target_repo: Path) -> None:
    home = tmp_path / "home"
    made = hero(tmp_path, "init", "--home", str(home), "--target-repo", str(target_repo))
    assert made.returncode == 0, made.stderr
    steps = next_steps(made.stdout)
    assert not any("set target_repo" in step for step in steps)  # the option did it
    assert any(step.startswith("config/roles.yaml: pick the worker's") for step in steps)
    assert any(step.startswith("cp config.local.yaml.example") for step in steps)
    # the steps end with hero doctor, which checks them, then the first run
    assert steps[-1].startswith("hero doctor ") and "then `hero run my-story.md`" in steps[-1]

    # without the option, the repository is the first thing left to do
    bare = hero(tmp_path, "init", "--home", str(tmp_path / "bare"))
    assert next_steps(bare.stdout)[0].startswith("config/roles.yaml: set target_repo")


def test_inits_steps_end_with_hero_doctor(
    tmp_path: Path, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever is left to do, the last step is `hero doctor`, which checks it."""
    for home, args in (("a", ["--target-repo", str(target_repo)]), ("b", [])):
        assert cli.main(["init", "--home", str(tmp_path / home), *args]) == 0
        steps = next_steps(capsys.readouterr().out)
        assert steps[-1].startswith("hero doctor ")
        assert not [s for s in steps[:-1] if "doctor" in s]


@pytest.mark.slow
def test_init_says_when_its_target_repo_did_not_reach_an_existing_file(
    tmp_path: Path, target_repo: Path
) -> None:
    home = tmp_path / "home"
    assert hero(tmp_path, "init", "--home", str(home)).returncode == 0
    again = hero(tmp_path, "init", "--home", str(home), "--target-repo", str(target_repo))
    assert again.returncode == 0
    assert "nothing to do" not in again.stdout
    assert f"left as it is: set target_repo in it to {target_repo} yourself" in again.stdout
    # the same repository written the first time: nothing is left
    other = tmp_path / "other"
    hero(tmp_path, "init", "--home", str(other), "--target-repo", str(target_repo))
    same = hero(tmp_path, "init", "--home", str(other), "--target-repo", str(target_repo))
    assert "nothing to do" in same.stdout and "next" not in same.stdout
    # a repository that is not there is left to do
    gone = hero(tmp_path, "init", "--home", str(tmp_path / "h3"), "--target-repo", "nowhere")
    assert any("target_repo nowhere names no folder" in s for s in next_steps(gone.stdout))


def test_the_sample_story_is_valid_and_the_daemon_leaves_it_alone(tmp_path: Path) -> None:
    assert hero(tmp_path, "init").returncode == 0
    story = parse_story(tmp_path / "my-story.md")
    assert story.id == "my-story" and story.scope == ("HERO-NOTES.md",)
    assert not list((tmp_path / "inbox").glob("*.md"))
    assert collect_status(tmp_path)["queue"] == []  # `hero watch` would run nothing


def first_run_commands() -> str:
    """The README's first run on your own repository: its first shell block, as written."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## A first run on your own repository", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    assert block, "no ```sh block under the README's first run"
    return block.group(1)


def sample_story_model(body: dict[str, Any]) -> Any:
    """A worker that writes HERO-NOTES.md and commits it; a reviewer that approves."""
    if is_review(body):
        return verdict("APPROVED", "HERO-NOTES.md maps the repository.")
    if step_of(body) == 0:
        notes = "# calc\\n\\n- calc/: the add() function\\n- tests/: python -m unittest\\n"
        return call(
            "bash",
            command=f"printf '{notes}' > HERO-NOTES.md && git add HERO-NOTES.md "
            "&& git commit -q -m 'HERO-NOTES.md: a map of the repository'",
        )
    return text("Wrote HERO-NOTES.md.")


@pytest.mark.slow
def test_the_readmes_first_run_works_as_written(tmp_path: Path, target_repo: Path) -> None:
    commands = first_run_commands()
    assert "/path/to/your/repo" in commands and "hero run my-story.md" in commands
    getting_started = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert f"```sh\n{commands}```" in getting_started  # the docs show the same run
    commands = commands.replace("/path/to/your/repo", shlex.quote(str(target_repo)))
    work = tmp_path / "user"  # the README's `~`
    work.mkdir()
    with ScriptedModel(sample_story_model) as model:
        # `$EDITOR config/roles.yaml`: the user points the roles at a provider of their own
        editor = tmp_path / "editor"
        editor.write_text(
            "#!/bin/sh\n"
            'config=$(dirname "$1")\n'
            "printf 'name: mine\\nbase_url: %s\\ndefault_model: m\\n' "
            f'{shlex.quote(model.base_url)} > "$config/providers/mine.yaml"\n'
            "sed -i 's/^  provider: local$/  provider: mine/' \"$1\"\n"
        )
        editor.chmod(0o755)
        env = {
            **os.environ,
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "EDITOR": str(editor),
            "HOME": str(work),
            "PATH": f"{hero_on_path(tmp_path)}{os.pathsep}{os.environ['PATH']}",
        }
        env.pop("HERO_HOME", None)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", commands],
            cwd=work,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=WAIT_S,
            env=env,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    home = work / "my-hero"
    state = json.loads((home / "runs" / "state" / "my-story.json").read_text())
    assert state["status"] == "passed"
    assert (home / "done" / "my-story.md").is_file()
    assert "# calc" in git(target_repo, "show", "hero/my-story:HERO-NOTES.md")
    changed = git(target_repo, "diff", "--name-only", "main", "hero/my-story")
    assert changed.strip() == "HERO-NOTES.md"


@pytest.mark.slow
def test_init_proposes_the_target_repositorys_setup_and_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "web-app"
    (repo / "app").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "app"\nversion = "0.1"\n\n'
        '[project.optional-dependencies]\ntest = ["pytest>=8"]\n'
    )
    scripts = {"test": "vitest run", "lint": "eslint ."}
    (repo / "package.json").write_text(json.dumps({"name": "app", "scripts": scripts}))
    (repo / "package-lock.json").write_text("{}\n")
    (repo / "Makefile").write_text("test:\n\tpytest\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    home = tmp_path / "home"
    init = ["init", "--home", str(home), "--target-repo", "../web-app"]

    assert cli.main(init) == 0
    out = capsys.readouterr().out
    assert (
        "proposed 3 setup commands and 3 checks for ../web-app at the top of config/roles.yaml, "
        "commented out: uncomment what fits\n" in out
    )
    roles = home / "config" / "roles.yaml"
    text = roles.read_text(encoding="utf-8")
    assert "# pyproject.toml has a `test` extra" in text
    assert load_config(home, env={}).project.setup == ()  # off until the user says so
    roles.write_text(uncomment_proposal(text), encoding="utf-8")
    config = load_config(home, env={})
    assert config.project.setup == (
        "python3 -m venv .venv",
        ".venv/bin/pip install -e '.[test]'",
        "npm ci",
    )
    assert config.default_verify == (".venv/bin/python -m pytest -q", "npm test", "npm run lint")

    # config/roles.yaml is there now: it is not rewritten, and nothing is proposed
    assert cli.main(init) == 0
    assert "proposed" not in capsys.readouterr().out


def test_init_proposes_nothing_for_a_repository_it_does_not_recognise(
    tmp_path: Path, target_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    assert cli.main(["init", "--home", str(home), "--target-repo", str(target_repo)]) == 0
    assert "proposed" not in capsys.readouterr().out
    roles = (home / "config" / "roles.yaml").read_text(encoding="utf-8")
    assert PROPOSAL_TITLE not in roles and "\nsetup: []\n" in roles
