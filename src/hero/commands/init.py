"""`hero init`: scaffold a hero home (config/, inbox/, done/, runs/) in the home folder."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from hero.commands import Subparsers, home, home_option
from hero.errors import EXIT_OK

if TYPE_CHECKING:
    from hero.config.detect import Proposal


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "init", parents=[home_option()], help="scaffold a hero home in the current directory"
    )
    parser.add_argument(
        "--target-repo", help="the git repository stories will change (relative to the home)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.config.scaffold import init_home

    where = home(args)
    proposal = _proposal(where, args.target_repo)
    created = init_home(where, target_repo=args.target_repo, proposal=proposal)
    for path in created:
        print(f"created {path.relative_to(where) if path.is_relative_to(where) else path}")
    if proposal and where / "config" / "roles.yaml" in created:
        setup, checks = len(proposal.setup), len(proposal.checks)
        print(
            f"proposed {setup} setup command{'s' * (setup != 1)} and {checks} "
            f"check{'s' * (checks != 1)} for {args.target_repo} at the top of "
            "config/roles.yaml, commented out: uncomment what fits"
        )
    unwritten = _unwritten_target_repo(where, created, args.target_repo)
    if not created:
        print(f"{where} is already a hero home" + ("" if unwritten else "; nothing to do"))
        if unwritten:
            print(f"next: {unwritten}")
        return EXIT_OK
    print("next:")
    for n, step in enumerate(still_to_do(where, created, args.target_repo, unwritten), 1):
        print(f"  {n}. {step}")
    return EXIT_OK


def _proposal(where: Path, target_repo: str | None) -> Proposal | None:
    """What to propose for the target repository's setup and checks, from its files; None
    without one, or when config/roles.yaml is there already (it is not rewritten)."""
    if target_repo is None or (where / "config" / "roles.yaml").exists():
        return None
    from hero.config.detect import detect

    # resolved: the home may not be there yet for a path through it (``../repo``)
    return detect((where / target_repo).resolve())


def still_to_do(
    where: Path, created: list[Path], target_repo: str | None, unwritten: str
) -> list[str]:
    """What the user still has to do before a first run, and only that: a step the command
    line or an existing file already took care of is not repeated. The last is always
    ``hero doctor``, which says what the others left wrong, then the first run."""
    from hero.config.scaffold import PROVIDERS, SAMPLE_STORY

    steps = [unwritten] if unwritten else []
    if where / "config" / "roles.yaml" in created:
        if target_repo is None:
            steps.append("config/roles.yaml: set target_repo, the git repository stories change")
        local = PROVIDERS["local"].values["base_url"]
        steps.append(
            "config/roles.yaml: pick the worker's and the reviewer's provider and model "
            f"(now: local, a server at {local})"
        )
    if target_repo is not None and not (where / target_repo).is_dir():
        steps.append(
            f"config/roles.yaml: target_repo {target_repo} names no folder (relative to the "
            f"home: {where / target_repo}); set it to the git repository stories change"
        )
    if not (where / "config.local.yaml").exists():
        steps.append(
            "cp config.local.yaml.example config.local.yaml, and put the key there, if your "
            "provider needs one"
        )
    if (where / SAMPLE_STORY).is_file():
        first_run = f"`hero run {SAMPLE_STORY}`, a first run of the sample story on your repository"
    else:
        first_run = "`hero run STORY.md` (docs/stories.md: how to write a story)"
    # the last step: what the steps above set is checked before anything runs
    steps.append(
        "hero doctor   (checks the configuration, the models, git, the sandbox and disk: fix "
        f"what it names until it passes; then {first_run})"
    )
    return steps


def _unwritten_target_repo(where: Path, created: list[Path], target_repo: str | None) -> str:
    """The step left when --target-repo could not be written: config/roles.yaml was there
    already (never overwritten) and names another repository. "" when there is none."""
    roles = where / "config" / "roles.yaml"
    if target_repo is None or roles in created or _target_repo_in(roles) == target_repo:
        return ""
    return (
        "config/roles.yaml was there already and is left as it is: set target_repo in it to "
        f"{target_repo} yourself"
    )


def _target_repo_in(roles: Path) -> object:
    """The target_repo an existing config/roles.yaml holds (None: none, or unreadable)."""
    import yaml

    try:
        data = yaml.safe_load(roles.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return data.get("target_repo") if isinstance(data, dict) else None
