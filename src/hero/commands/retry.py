"""`hero retry KEY`: make a story that gave up or failed eligible again, with new rounds
(:mod:`hero.daemon.retry`). Exit 0; 2 for an unknown story or one that cannot be retried."""

from __future__ import annotations

import argparse

from hero.commands import Subparsers, home, home_option
from hero.errors import EXIT_OK


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "retry",
        parents=[home_option()],
        help="run a story that gave up or failed again, with new rounds",
        description="Make a story that gave up, ended in error, was interrupted, ran out of "
        "budget or was cancelled eligible again, with a fresh budget of rounds (a cancelled "
        "story's file goes back from cancelled/ to the inbox). A story that has used up a "
        "story budget (max_story_*) is refused until that budget is raised in "
        "config/roles.yaml. A skipped story is not retried: it runs by "
        "itself once the story that failed above it passes; `hero retry` that one. Exit 0; 2 "
        "for an unknown story or one that cannot be retried.",
    )
    parser.add_argument("id", metavar="KEY", help="the story: its id, or PLAN/ID for a plan's")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.daemon.retry import retry

    done = retry(home(args), args.id)
    ref, story = done.ref, done.story
    if done.touched:
        again = f"hero run-plan {ref.plan}" if ref.plan else f"hero run {story}"
        print(f"{ref.key}: queued again; `hero watch` picks it up, or run `{again}`")
    else:
        folder = f"inbox/{ref.plan}/" if ref.plan else "inbox/"
        print(
            f"{ref.key}: queued again, but its story file {story} is gone; put it back in {folder}"
        )
    return EXIT_OK
