"""`hero revise ID "instruction"`: more rounds for a finished story, on its branch, with the
instruction as the reviewer's finding (a follow-up story, hero.story.followup and
hero.run.revision). In the foreground like `hero run`, or ``--queue``: into the inbox for
`hero watch`.

Exit codes as `hero run`'s (0 passed, 1 did not pass, 124, 75, 130); ``--queue`` exits 0 once
the follow-up is in the inbox. 2 for an empty instruction, an id that is no story of this
home, a story still running, not finished, or whose branch is gone: nothing written then.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

from hero.commands import Subparsers, home, home_option, say, say_notices
from hero.errors import EXIT_INTERRUPTED, EXIT_OK, UsageError


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "revise",
        parents=[home_option()],
        help="add rounds to a finished story on its branch, with an instruction",
        description="Add rounds to a finished story (passed, or ended with its branch kept) on "
        "its branch hero/<id>, starting from its tip: the instruction is what the worker "
        "addresses, shown as a reviewer's finding; the story's checks and the review run as "
        "always, and the new commits land on the same branch. It is written as a follow-up "
        "story inbox/<id>-rev-<n>.md (`revises: <id>`) and run now, or with --queue left for "
        "`hero watch`. Exit codes as `hero run`'s; --queue: 0; 2 for an unknown, running or "
        "unfinished story, one whose branch is gone, or an empty instruction.",
    )
    parser.add_argument("id", metavar="ID", help="the story to revise: its id")
    parser.add_argument("instruction", help="what to change, as a reviewer would say it")
    parser.add_argument(
        "--queue",
        action="store_true",
        help="write the follow-up into the inbox for `hero watch` instead of running it now",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object with the result")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show progress even off a terminal"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.commands.run import _notify, _sigterm_as_interrupt, _summary_line, summarize
    from hero.config.loader import load_config
    from hero.errors import Interrupted
    from hero.git.ops import TargetRepo
    from hero.locks import StoryBusy, is_held, story_lock_path
    from hero.names import story_id_problem
    from hero.run.adhoc import run_or_follow
    from hero.run.launch import run_with_config
    from hero.run.revision import revisable
    from hero.state import exit_code
    from hero.story.followup import write_followup

    problem = story_id_problem(args.id)
    if problem is not None:
        raise UsageError(f"ID: {problem}")
    if not args.instruction.strip():
        raise UsageError(
            f'instruction: is empty; say what to change, e.g. hero revise {args.id} "rename '
            'the helper"'
        )
    started = time.monotonic()
    config = load_config(home(args), roles=("worker", "reviewer", "memory"))
    say_notices(config)
    revisable(config.home, args.id, TargetRepo(config.target_repo), busy=True)
    path = write_followup(config.home, args.id, [args.instruction])
    rel = path.relative_to(config.home)
    if args.queue:
        print(f"{path.stem}: follow-up of {args.id} queued as {rel}; `hero watch` runs it")
        return EXIT_OK
    show = args.verbose or sys.stderr.isatty()
    progress = (lambda msg: print(f"hero: {msg}", file=sys.stderr, flush=True)) if show else None
    _sigterm_as_interrupt()
    run_it = functools.partial(run_with_config, path.resolve(), config, progress=progress)
    try:
        try:
            state, followed = run_it(), False
        except StoryBusy as exc:
            if not is_held(story_lock_path(config.home, path.stem)):
                # the revised story's branch is in use (the story, another follow-up)
                raise StoryBusy(
                    f"{exc}; the follow-up waits in {rel}: `hero watch` runs it once the "
                    f"branch is free, or run `hero run {rel}` then"
                ) from None
            # a `hero watch` took the follow-up first: waited for
            state, followed = run_or_follow(run_it, config.home, path.stem, say)
    except (KeyboardInterrupt, Interrupted):
        say(f"interrupted; run `hero run {rel}` to resume")
        return EXIT_INTERRUPTED
    duration = time.monotonic() - started
    result = summarize(state, config.home, duration)
    import json

    print(json.dumps(result, indent=2) if args.json else _summary_line(result), flush=True)
    if not followed:
        _notify(config, state, duration)
    return exit_code(state)
