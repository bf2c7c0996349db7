"""`hero run STORY.md`: run one story to a verdict, in the foreground; `hero run --task TEXT`:
the same for a story made on the spot (:mod:`hero.run.adhoc`).

Exit 0 passed; 1 did not pass (gave_up, budget_exceeded on a budget of tokens or cost,
cancelled or error, including a story that could not start); 124 stopped on a time budget
(max_story_wall_s, max_round_wall_s); 2 a usage or configuration error, an invalid story, a
story refused (its id already passed from another file, it belongs to a plan, its
dependencies have not passed), another process running it, or the model's provider refused
every request (a bad key, an unknown model: fix it, then run the same command to resume);
75 the model's provider was unavailable (refused connections, timeouts, 5xx, 429 until the
attempts ran out: run the same command later to resume); 130 interrupted (run the same
command to resume). A story paused on its provider keeps its rounds and spend, status
``interrupted``. The table is docs/run.md's "Exit codes"; ``hero.state.exit_code`` maps.

``--dry-run`` (hero.run.dryrun) runs nothing: 0 when the story would run, 2 when it would not.
``--events`` prints the run's events on stdout, one JSON object a line, the last one the
result (hero.run.events, docs/events.md); the exit codes are the same.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hero.commands import Subparsers, home, home_option, reader_gone, say, say_notices
from hero.commands.model_options import add_options as add_model_options
from hero.commands.run_task import add_task_arguments, task_of
from hero.errors import EXIT_INTERRUPTED, UsageError

if TYPE_CHECKING:
    from hero.config.home import Config
    from hero.state import RunState


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "run", parents=[home_option()], help="run one story to a verdict"
    )
    parser.add_argument("story", nargs="?", help="path to the story's markdown file")
    add_task_arguments(parser)  # --task TEXT: a story made on the spot (hero.run.adhoc)
    parser.add_argument("--json", action="store_true", help="print one JSON object with the result")
    parser.add_argument(
        "--events",
        action="store_true",
        help="print the run's events on stdout as JSON lines, the result last (see docs/events.md)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show progress even off a terminal"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the run would do (the worker's first request, the verify plan, the "
        "models, the budgets) without calling a model or changing anything",
    )
    add_model_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.config.loader import load_config
    from hero.errors import Interrupted
    from hero.llm.models import override_of
    from hero.run.events import EventSink
    from hero.run.launch import run_with_config
    from hero.state import Status, exit_code

    if args.events and args.json:
        raise UsageError(
            "--events and --json: choose one (with --events, the last line is the result "
            "event, and its 'result' is the object --json prints)"
        )
    if args.events and args.dry_run:  # a dry run runs nothing: there is no event to stream
        raise UsageError("--events and --dry-run: a dry run has no events; use --dry-run --json")
    started = time.monotonic()
    task = task_of(args)  # None: a STORY file
    if task is None and not Path(args.story).exists():  # a FIFO: the reader says what it is
        raise UsageError(f"{args.story}: no such story file")
    models = override_of(args)  # a bad --model fails before anything is loaded
    config = load_config(home(args), roles=("worker", "reviewer", "memory"))
    say_notices(config)
    if args.dry_run:
        from hero.run.dryrun import dry_run_command

        if task is not None:  # its story would be written to the inbox: a change on disk
            raise UsageError("--dry-run runs a STORY file, not a --task")
        return dry_run_command(Path(args.story).resolve(), config, as_json=args.json, models=models)
    from hero.run.adhoc import enqueue, run_or_follow  # not on `hero --help`'s path

    story_path = Path(args.story) if task is None else enqueue(task, config.home)
    show = args.verbose or sys.stderr.isatty()
    progress = (lambda msg: print(f"hero: {msg}", file=sys.stderr, flush=True)) if show else None
    _sigterm_as_interrupt()
    sink = EventSink(on_gone=reader_gone) if args.events else None  # stdout: events alone
    run_it = functools.partial(
        run_with_config,
        story_path.resolve(),
        config,
        progress=progress,
        events=sink,
        models=models,
    )
    try:  # --task: a `hero watch` that took the story first is waited for (followed)
        story_id = story_path.stem if task is not None else None
        state, followed = run_or_follow(run_it, config.home, story_id, say)
    except (KeyboardInterrupt, Interrupted):
        say("interrupted; run the same command again to resume")
        return EXIT_INTERRUPTED
    duration = time.monotonic() - started
    result = summarize(state, config.home, duration)
    if sink is None:
        import json

        print(json.dumps(result, indent=2) if args.json else _summary_line(result), flush=True)
    elif followed:  # another process ran it and streamed its events elsewhere: its result here
        from hero.redact import Redactor
        from hero.run.events import StoryEvents

        StoryEvents(sink, state.ref.key, Redactor(config.secrets)).result(result)
    if state.status == Status.INTERRUPTED and state.outage:
        # paused, not ended: no alert (the daemon's breaker alerts on an outage)
        say(_outage_line(state.outage, story_path))
        return exit_code(state)
    if not followed:  # the process that ran it sent its alert
        _notify(config, state, duration)
    return exit_code(state)


def _outage_line(outage: dict[str, str], story_path: Path) -> str:
    """What `hero run` says of a story paused on its model's provider."""
    provider = outage.get("provider", "")
    if outage.get("kind") == "permanent":
        what = (
            f"model provider '{provider}' refuses hero's requests ({outage.get('reason')}); "
            f"fix the key, the model or config/providers/{provider}.yaml"
        )
    else:
        what = f"model provider '{provider}' is unavailable ({outage.get('reason')}); wait"
    return f"paused, not failed: {what}, then run `hero run {story_path}` again to resume"


def summarize(state: RunState, home: Path, duration_s: float) -> dict[str, Any]:
    """The result of a run as `hero run --json` prints it: the object the ``result`` event
    of `--events` holds too (hero.run.events.run_result, its one owner)."""
    from hero.run.events import run_result

    return run_result(state, home, duration_s)


def _notify(config: Config, state: RunState, duration_s: float) -> None:
    """Tell notify_command / notify_webhook that the story ended, and wait for them (each
    within notify_timeout_s: they run side by side) so that the process outlives them."""
    from hero.run.notify import Notifier, StderrLog

    notifier = Notifier(config, StderrLog())
    if notifier.enabled:
        notifier.story_ended(state, duration_s=duration_s)
        try:
            notifier.close(config.notify.timeout_s + 5.0)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the story's result stands, unsent
            say("interrupted; the alert may not have been sent")


def _summary_line(result: dict[str, Any]) -> str:
    head = (result["head_sha"] or "")[:10]
    where = f"branch {result['branch']} at {head}; " if result["branch"] and head else ""
    line = (
        f"{result['id']}: {result['status']} after {result['rounds']} round(s); "
        f"{where}state {result['state']}"
    )
    if result["error"]:
        line += f"\nerror: {result['error']}"
    elif result.get("outage"):
        line += f"\npaused: {result['outage'].get('error', '')}"
    return line


def _sigterm_as_interrupt() -> None:
    """SIGTERM stops the run as Ctrl-C does: the story is recorded as interrupted."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (e.g. called from a test's thread)
        pass
