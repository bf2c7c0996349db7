"""One error base, one place that turns errors into exit codes.

Every exception class hero defines derives from ``HeroError`` (the two stop signals, which
are BaseExceptions on purpose, aside), and ``hero.cli.main`` says an error that ends a
command once: ``hero: [<kind>: ]<message>`` on stderr, and the error's exit code.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil

import pytest

import hero
from hero import cli
from hero.commands import CommandLineError
from hero.errors import (
    EXIT_FAILED,
    EXIT_USAGE,
    ConfigurationError,
    HeroError,
    Interrupted,
    UsageError,
)

#: Stop signals, not errors: BaseExceptions so that no ``except Exception`` swallows them.
SIGNALS = {"hero.errors.Interrupted", "hero.github.watch.Stopped"}


def hero_exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(hero.__path__, "hero."):
        if info.name == "hero.__main__":  # importing it runs hero
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == info.name:
                found[f"{info.name}.{cls.__qualname__}"] = cls
    return found


def test_every_hero_exception_is_a_hero_error() -> None:
    classes = hero_exception_classes()
    assert {"hero.config.schema.ConfigError", "hero.git.ops.GitError", *SIGNALS} <= set(classes)
    outside = sorted(
        n for n, c in classes.items() if n not in SIGNALS and not issubclass(c, HeroError)
    )
    assert not outside, f"derive these from hero.errors.HeroError (or a subclass): {outside}"


def test_the_exit_codes_users_see() -> None:
    from hero.config.schema import ConfigError
    from hero.git.ops import GitError
    from hero.llm.client import LlmError
    from hero.locks import DaemonRunning, PlanBusy, StoryBusy
    from hero.plans.manifest import PlanError
    from hero.run.launch import Refused
    from hero.state import StateError
    from hero.story.record import StoryError
    from hero.views.logs import LogsError

    for usage in (ConfigError, StoryError, StateError, GitError, Refused, StoryBusy):
        assert usage.exit_code == EXIT_USAGE, usage
    for usage in (DaemonRunning, PlanBusy, LogsError, PlanError):
        assert usage.exit_code == EXIT_USAGE, usage
    assert LlmError.exit_code == EXIT_FAILED
    assert Interrupted.exit_code == 130
    assert ConfigError("config/roles.yaml", "x", "bad").for_user() == (
        "configuration error: config/roles.yaml: x: bad"
    )
    assert StoryError("s.md", "id", "missing").for_user() == "invalid story: s.md: id: missing"


def test_policy_errors_stay_value_errors() -> None:
    from hero.agent.tools.command_args import UncheckedCommand
    from hero.agent.tools.shell_syntax import CommandSyntaxError

    for cls in (CommandSyntaxError, UncheckedCommand):
        assert issubclass(cls, ValueError) and issubclass(cls, HeroError)


@pytest.mark.parametrize(
    ("error", "code", "said"),
    [
        (UsageError("no such thing"), EXIT_USAGE, "hero: no such thing\n"),
        (ConfigurationError("engine: x"), EXIT_USAGE, "hero: configuration error: engine: x\n"),
        (HeroError("the model is gone"), EXIT_FAILED, "hero: the model is gone\n"),
    ],
)
def test_main_says_an_error_once_and_exits_with_its_code(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: HeroError,
    code: int,
    said: str,
) -> None:
    def fails(args: argparse.Namespace) -> int:
        raise error

    monkeypatch.setattr("hero.commands.status.run", fails)
    assert cli.main(["status"]) == code
    out, err = capsys.readouterr()
    assert (out, err) == ("", said)


def test_a_command_line_error_shows_the_usage(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fails(args: argparse.Namespace) -> int:
        raise CommandLineError("status: not like that")

    monkeypatch.setattr("hero.commands.status.run", fails)
    with pytest.raises(SystemExit) as exited:
        cli.main(["status"])
    assert exited.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: hero ") and err.endswith("hero: error: status: not like that\n")


def test_interrupted_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def stopped(args: argparse.Namespace) -> int:
        raise Interrupted

    monkeypatch.setattr("hero.commands.status.run", stopped)
    assert cli.main(["status"]) == 130
    assert capsys.readouterr().err == "hero: interrupted\n"
