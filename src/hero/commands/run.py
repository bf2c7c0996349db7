"""`hero run STORY.md`: run one story to a verdict, in the foreground.

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
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hero.commands import Subparsers, home, home_option, say, say_notices
from hero.errors import EXIT_INTERRUPTED, UsageError

if TYPE_CHECKING:
    from hero.config import Config
    from hero.state import RunState


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "run", parents=[home_option()], help="run one story to a verdict"
    )
    parser.add_argument("story", help="path to the story's markdown file")
    parser.add_argument("--json", action="store_true", help="print one JSON object with the result")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show progress even off a terminal"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hero.app import run_with_config
    from hero.config import load_config
    from hero.errors import Interrupted
    from hero.state import Status, exit_code

    started = time.monotonic()
    story_path = Path(args.story)
    if not story_path.exists():  # a directory or a FIFO: the story's reader says what it is
        raise UsageError(f"{story_path}: no such story file")
    config = load_config(home(args), roles=("worker", "reviewer"))
    say_notices(config)
    show = args.verbose or sys.stderr.isatty()
    progress = (lambda msg: print(f"hero: {msg}", file=sys.stderr, flush=True)) if show else None
    _sigterm_as_interrupt()
    try:
        state = run_with_config(story_path.resolve(), config, progress=progress)
    except (KeyboardInterrupt, Interrupted):
        say("interrupted; run the same command again to resume")
        return EXIT_INTERRUPTED
    duration = time.monotonic() - started
    result = summarize(state, config.home, duration)
    print(json.dumps(result, indent=2) if args.json else _summary_line(result), flush=True)
    if state.status == Status.INTERRUPTED and state.outage:
        # paused, not ended: no alert (the daemon's breaker alerts on an outage)
        say(_outage_line(state.outage, story_path))
        return exit_code(state)
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
    """The result of a run as `hero run --json` prints it."""
    return {
        "id": state.id,
        "status": state.status.value,
        "rounds": len(state.rounds),
        "verdicts": [r.review.verdict for r in state.rounds],
        "branch": state.branch,
        "base_sha": state.base_sha,
        "head_sha": state.head_sha,
        "usage": state.usage,
        "duration": round(duration_s, 3),  # seconds
        "error": state.error or None,
        "outage": state.outage or None,
        "state": str(state.ref.state_path(home)),
        "story": state.story_path,
    }


def _notify(config: Config, state: RunState, duration_s: float) -> None:
    """Tell notify_command / notify_webhook that the story ended, and wait for them (each
    within notify_timeout_s: they run side by side) so that the process outlives them."""
    from hero.notify import Notifier, StderrLog

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
