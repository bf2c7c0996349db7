"""`hero init`: scaffold a hero home (config/, inbox/, done/, runs/) in the home folder."""

from __future__ import annotations

import argparse

from hero.commands import Subparsers, home, home_option
from hero.errors import EXIT_OK


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "init", parents=[home_option()], help="scaffold a hero home in the current directory"
    )
    parser.add_argument(
        "--target-repo", help="the git repository stories will change (relative to the home)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.scaffold import init_home

    where = home(args)
    created = init_home(where, target_repo=args.target_repo)
    for path in created:
        print(f"created {path.relative_to(where) if path.is_relative_to(where) else path}")
    if not created:
        print(f"{where} is already a hero home; nothing to do")
    else:
        print(
            "next: set target_repo in config/roles.yaml, pick a provider, then `hero run STORY.md`"
        )
    return EXIT_OK
