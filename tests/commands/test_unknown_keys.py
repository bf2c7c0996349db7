"""An unknown key in any config file is an error naming the file, the key (with its path)
and the nearest known key, in every command that reads the configuration (exit 2), through
the CLI's main as a user runs it. Keys of free-form maps (a provider's headers, the local
file's keys) are the user's, never refused; the known keys are the declarations'."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hero.cli import main
from hero.config.home import (
    LOCAL_KEYS,
    PROVIDER_KEYS,
    ROLE_KEYS,
    ROLES_FILE_KEYS,
    github_label_settings,
    github_settings,
    local_settings,
    provider_settings,
    roles_settings,
)
from hero.config.loader import load_config
from hero.config.providers import ROLE_SETTINGS
from hero.config.schema import ConfigError, UnknownKeyError
from hero.llm.scripted import ScriptedModel, text
from hero.state import RunState, Status, save_state

HomeMaker = Callable[..., Path]

#: (file, what is written to it, the key as the error names it, the nearest known key)
TYPOS = [
    ("config/roles.yaml", "max_retrys: 3\n", "max_retrys", "max_retries"),
    ("config/roles.yaml", "worker:\n  provider: scripted\n  modle: x\n", "worker.modle", "model"),
    (
        "config/roles.yaml",
        "github: {repo: octo/app, label: hero, labels: {in_progres: busy}}\n",
        "github.labels.in_progres",
        "in_progress",
    ),
    (
        "config/roles.yaml",
        "github: {repo: octo/app, label: hero, intervl_s: 5}\n",
        "github.intervl_s",
        "interval_s",
    ),
    ("config/providers/scripted.yaml", "defualt_model: m\n", "defualt_model", "default_model"),
    ("config.local.yaml", "github_tokn: x\n", "github_tokn", "github_token"),
]


def write(home: Path, rel: str, added: str) -> None:
    """``added`` appended to the file, a role block replacing the one make_home wrote."""
    path = home / rel
    old = path.read_text() if path.exists() else ""
    if added.startswith("worker:"):
        old = old.replace("worker:\n  provider: scripted\n", "")
    path.write_text(old + added)


@pytest.fixture
def home(make_home: HomeMaker, scripted: Callable[..., ScriptedModel]) -> Path:
    return make_home(scripted([text("unused")]), sandbox="none")  # no command gets that far


@pytest.mark.parametrize(("rel", "added", "key", "nearest"), TYPOS)
def test_hero_status_refuses_an_unknown_key_in_any_config_file(
    home: Path, capsys: pytest.CaptureFixture[str], rel: str, added: str, key: str, nearest: str
) -> None:
    assert main(["status", "--home", str(home)]) == 0  # before: fine
    capsys.readouterr()
    write(home, rel, added)
    assert main(["status", "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert f"{rel}: {key}: unknown key (did you mean '{nearest}'?)" in err


def story(home: Path) -> Path:
    path = home / "inbox" / "s1.md"
    path.write_text("---\nid: s1\ntitle: One\nverify: ['true']\n---\n\nDo it.\n")
    return path


#: Every command that reads the configuration, with the arguments it needs to get there.
COMMANDS: list[tuple[str, ...]] = [
    ("status",),
    ("doctor", "--quick"),
    ("run", "inbox/s1.md"),
    ("watch", "--exit-when-idle"),
    ("plan", "plan.md"),
    ("serve",),
    ("worker",),
    ("retry", "s1"),
    ("revise", "s1", "more"),
    ("clean",),
    ("memory", "list"),
    ("export",),
    ("report", "s1"),
    ("github", "watch", "--once"),
    ("bench", "make", "--last", "1"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_every_command_that_reads_the_config_refuses_an_unknown_key(
    home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: tuple[str, ...],
) -> None:
    story(home)
    (home / "plan.md").write_text("# Plan\n\n## One\nDo one thing.\n")
    save_state(home, RunState(id="s1", status=Status.GAVE_UP, story_path=str(home / "inbox/s1.md")))
    write(home, "config/roles.yaml", "worker:\n  provider: scripted\n  modle: x\n")
    monkeypatch.chdir(home)
    assert main([*command, "--home", str(home)]) == 2
    out = capsys.readouterr()
    said = out.err + out.out  # hero doctor says it as its failed line
    assert "config/roles.yaml: worker.modle: unknown key (did you mean 'model'?)" in said


def test_a_key_of_another_file_says_where_it_belongs(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    roles = (home / "config" / "roles.yaml").read_text()
    write(home, "config/roles.yaml", "base_url: http://127.0.0.1:1/v1\n")
    assert main(["status", "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert "config/roles.yaml: base_url: unknown key; it is a key of config/providers/" in err
    with pytest.raises(UnknownKeyError, match="known keys: worker, reviewer"):
        (home / "config" / "roles.yaml").write_text(roles + "colour: blue\n")
        load_config(home, roles=())


def test_keys_of_free_form_maps_are_the_users(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(home, "config/providers/scripted.yaml", "headers: {X-Any-Header: v, Another: w}\n")
    (home / "config.local.yaml").write_text("keys: {scripted: sk-abcdefgh12345678, anything: k}\n")
    assert main(["status", "--home", str(home)]) == 0
    config = load_config(home)
    assert config.providers["scripted"].headers == {"X-Any-Header": "v", "Another": "w"}


def test_the_known_keys_are_the_declarations(home: Path) -> None:
    """Every key a declaration gives is known where it is read (a setting added to a
    record is known without a list to edit): each may fail for its value, never as
    unknown."""
    assert ROLES_FILE_KEYS[: len(ROLE_KEYS) and 4] == ("worker", "reviewer", "planner", "memory")
    assert set(ROLES_FILE_KEYS) == {"worker", "reviewer", "planner", "memory"} | {
        s.key for s in roles_settings()
    }
    assert set(PROVIDER_KEYS) == {s.key for s in provider_settings()}
    assert set(LOCAL_KEYS) == {s.key for s in local_settings()}
    assert set(ROLE_KEYS) == {s.key for s in ROLE_SETTINGS}
    roles = (home / "config" / "roles.yaml").read_text()
    cases = [("config/roles.yaml", f"{s.key}: {{}}\n") for s in roles_settings() if not s.secret]
    cases += [
        ("config/roles.yaml", f"github: {{repo: o/a, label: l, {s.key}: {{}}}}\n")
        for s in github_settings()
    ]
    cases += [
        ("config/roles.yaml", f"github: {{repo: o/a, label: l, labels: {{{s.key}: {{}}}}}}\n")
        for s in github_label_settings()
    ]
    for rel, added in cases:
        (home / "config" / "roles.yaml").write_text(roles)
        write(home, rel, added)
        try:
            load_config(home, roles=())
        except UnknownKeyError as exc:
            pytest.fail(f"{added.strip()}: {exc}")
        except ConfigError:
            pass  # a value of the wrong kind: the key itself was known


def test_an_unknown_key_of_the_secrets_file_that_may_be_a_secret_is_not_shown(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "sk-proj-Q3x9" + "a1B2c3D4" * 5
    (home / "config.local.yaml").write_text(f"{token}: 1\n")  # a key pasted as a key
    assert main(["status", "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert token not in err and "Q3x9" not in err
    assert f"config.local.yaml: (a key of {len(token)} characters, not shown" in err
    (home / "config.local.yaml").write_text("colour: 1\n")  # a word is shown
    assert main(["status", "--home", str(home)]) == 2
    assert "config.local.yaml: colour: unknown key; known keys: keys, github_token" in (
        capsys.readouterr().err
    )


def test_a_long_unknown_key_is_cut(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(home, "config/roles.yaml", "y" * 1000 + ": 1\n")
    assert main(["status", "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert f"config/roles.yaml: {'y' * 80}...: unknown key" in err and "y" * 81 not in err
