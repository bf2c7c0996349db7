"""Command line: parse arguments, call one function, map the result to an exit code.

Exit codes: 0 passed, 1 did not pass (gave_up, budget_exceeded or error, including a story
that could not start, e.g. its base_ref names no commit), 2 usage or configuration error, an invalid
story, or a story id that already passed from another file; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hero import __version__
from hero.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from hero.errors import EXIT_OK as EXIT_PASSED

if TYPE_CHECKING:
    from hero.state import RunState


def build_parser() -> argparse.ArgumentParser:
    home = argparse.ArgumentParser(add_help=False)
    home.add_argument(
        "--home",
        default=argparse.SUPPRESS,
        help="hero home directory (default: $HERO_HOME, else the current directory)",
    )
    parser = argparse.ArgumentParser(
        prog="hero",
        parents=[home],
        description="Turn user stories into git commits: Worker -> Verifier -> Reviewer rounds.",
    )
    parser.add_argument("--version", action="version", version=f"hero {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", parents=[home], help="run one story to a verdict")
    run.add_argument("story", help="path to the story's markdown file")
    run.add_argument("--json", action="store_true", help="print one JSON object with the result")
    run.add_argument(
        "-v", "--verbose", action="store_true", help="show progress even off a terminal"
    )

    init = sub.add_parser(
        "init", parents=[home], help="scaffold a hero home in the current directory"
    )
    init.add_argument(
        "--target-repo", help="the git repository stories will change (relative to the home)"
    )

    demo = sub.add_parser("demo", help="run an example story end to end against a scripted model")
    demo.add_argument("--dir", help="where to create the demo (default: a new temporary folder)")

    status = sub.add_parser(
        "status", parents=[home], help="show the stories' states, the inbox queue and the daemon"
    )
    status.add_argument("--json", action="store_true", help="print one JSON object")

    logs = sub.add_parser(
        "logs",
        parents=[home],
        help="show a story's traces round by round",
        description="Show a story's traces round by round (runs/ID/, or runs/plans/PLAN/ID/ "
        "for a story of a plan). Exit 0; 2 for an unknown story or round; with -f, 0 once the "
        "story has ended (passed, gave up, error or skipped) and 130 on Ctrl-C.",
    )
    logs.add_argument("id", metavar="KEY", help="the story: its id, or PLAN/ID for a plan's")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing new events until the story passes, gives up, errors or is skipped",
    )
    logs.add_argument("--round", type=int, metavar="N", help="only round N")

    watch = sub.add_parser(
        "watch",
        parents=[home],
        help="run stories dropped into inbox/, as a service",
        description="Take the stories in inbox/, then watch it: at most max_parallel at once, "
        "high priority first, then oldest. SIGTERM or Ctrl-C stops cleanly (running stories "
        "are recorded as interrupted and resumed on the next start); a second signal exits "
        "at once. Logs go to stderr: readable on a terminal, JSON lines otherwise.",
    )
    watch.add_argument(
        "--exit-when-idle",
        action="store_true",
        help="exit once the inbox holds nothing left to run (for scripts and CI)",
    )
    watch.add_argument(
        "--log-format",
        choices=("auto", "console", "json"),
        default="auto",
        help="log format (default: console on a terminal, else json)",
    )

    plan = sub.add_parser(
        "plan",
        parents=[home],
        help="split a markdown plan into a DAG of stories (inbox/<name>/), or show one",
        usage="hero plan PLAN.md [--name NAME] [--force] [--dry-run]\n"
        "       hero plan show NAME [--format text|mermaid|dot]",
        description="`hero plan PLAN.md`: the planner turns the plan into stories with "
        "dependencies and writes them to inbox/<name>/ with a _manifest.yaml, then draws the "
        "DAG. `hero plan show NAME`: draw a plan's DAG with each story's status. Exit 0; 1 "
        "when the planner's answer stays invalid (nothing is written); 2 for a usage or "
        "configuration error, or a plan name that exists (see --force).",
    )
    plan.add_argument("target", metavar="PLAN.md|show", help="the plan file, or `show`")
    plan.add_argument("show_name", nargs="?", metavar="NAME", help="with `show`: the plan")
    plan.add_argument("--name", help="the plan's name (default: the planner's, else the file's)")
    plan.add_argument(
        "--force",
        action="store_true",
        help="replace a plan of that name whose stories have not started",
    )
    plan.add_argument(
        "--dry-run", action="store_true", help="print the stories and the DAG; write nothing"
    )
    plan.add_argument(
        "--format",
        choices=("text", "mermaid", "dot"),
        default="text",
        help="with `show`: how to draw the DAG (default: text)",
    )

    run_plan = sub.add_parser(
        "run-plan",
        parents=[home],
        help="run a plan's stories in dependency order, code flowing along the DAG",
        description="Run the stories of inbox/<NAME>/ in dependency order, independent ones "
        "in parallel up to max_parallel. A story branches from its dependencies' branches "
        "(merged when there are several); a failure skips its descendants. Running it again "
        "continues. When every story passed, hero/plan/<NAME> holds the merge of the plan's "
        "leaves. Exit 0 only if every story passed; 1 otherwise; 2 usage or configuration "
        "error; 130 interrupted.",
    )
    run_plan.add_argument("name", help="the plan's name (its folder in inbox/)")
    run_plan.add_argument(
        "-v", "--verbose", action="store_true", help="show progress even off a terminal"
    )

    retry = sub.add_parser(
        "retry",
        parents=[home],
        help="run a story that gave up or failed again, with new rounds",
        description="Make a story that gave up, ended in error, was interrupted or ran out of "
        "budget eligible again, with a fresh budget of rounds. A story that has used up a "
        "story budget (max_story_*) is refused until that budget is raised in "
        "config/roles.yaml. A skipped story is not retried: it runs by "
        "itself once the story that failed above it passes; `hero retry` that one. Exit 0; 2 "
        "for an unknown story or one that cannot be retried.",
    )
    retry.add_argument("id", metavar="KEY", help="the story: its id, or PLAN/ID for a plan's")

    github = sub.add_parser(
        "github", parents=[home], help="take stories from GitHub issues and report back on them"
    )
    github_sub = github.add_subparsers(dest="github_command", metavar="COMMAND")
    gh_watch = github_sub.add_parser(
        "watch",
        parents=[home],
        help="turn labelled issues into inbox stories and report their endings",
        description="Every interval: each open issue with the label whose author has write "
        "access (author_association OWNER, MEMBER or COLLABORATOR, by default) and that has no "
        "story yet becomes inbox/gh-<number>.md; then the stories' endings are reported on "
        "their issues. The token comes from GITHUB_TOKEN or github_token in config.local.yaml; "
        "GITHUB_API_URL overrides the API's URL. Defaults come from the github: block of "
        "config/roles.yaml. SIGTERM or Ctrl-C stops it. Exit 0; 1 when --once could not reach "
        "GitHub; 2 for a usage or configuration error.",
    )
    gh_watch.add_argument(
        "--repo", metavar="OWNER/NAME", help="the repository whose issues to take"
    )
    gh_watch.add_argument("--label", help="take open issues with this label")
    gh_watch.add_argument(
        "--interval", type=float, metavar="SECONDS", help="seconds between sweeps (default 60)"
    )
    gh_watch.add_argument("--once", action="store_true", help="one sweep, then exit")
    gh_watch.add_argument(
        "--log-format",
        choices=("auto", "console", "json"),
        default="auto",
        help="log format (default: console on a terminal, else json)",
    )

    worker = sub.add_parser(
        "worker",
        parents=[home],
        help="run stories a coordinator sends (engine: celery), as a Celery worker",
        description="A Celery worker that runs the stories `hero watch` sends with engine: "
        "celery in config/roles.yaml. It keeps a clone of target_remote and a home of its own "
        "in --workdir, and pushes each story's branch to the remote. SIGTERM stops it: the "
        "stories it runs are recorded as interrupted and sent to another worker. Arguments "
        "after `--` go to `celery worker` as they are.",
    )
    worker.add_argument(
        "--workdir", metavar="DIR", help="where the clone and the runs live (default HOME/worker)"
    )
    worker.add_argument(
        "--concurrency", "-c", type=int, default=1, metavar="N", help="stories at once (default 1)"
    )
    worker.add_argument(
        "--queues", "-Q", metavar="Q1,Q2", help="queues to take stories from (default engine_queue)"
    )
    worker.add_argument(
        "--hostname", "-n", metavar="NAME", help="the worker's name (celery's -n; default: host)"
    )
    worker.add_argument("--loglevel", "-l", default="INFO", help="celery's log level (INFO)")
    worker.add_argument("celery_args", nargs="*", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()

    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "init":
            return cmd_init(args)
        if args.command == "demo":
            from hero.demo import run_demo

            return run_demo(Path(args.dir) if args.dir else None)
        if args.command == "status":
            return cmd_status(args)
        if args.command == "logs":
            return cmd_logs(args)
        if args.command == "watch":
            from hero.daemon.watch import watch

            fmt = {"auto": None, "console": False, "json": True}[args.log_format]
            return watch(_home(args), exit_when_idle=args.exit_when_idle, json_logs=fmt)
        if args.command == "worker":
            from hero.engine.cli import cmd_worker

            return cmd_worker(args, _home(args))
        if args.command == "plan":
            from hero.planning import cmd_plan

            return cmd_plan(args, _home(args))
        if args.command == "run-plan":
            from hero.daemon.runplan import cmd_run_plan

            return cmd_run_plan(args, _home(args))
        if args.command == "retry":
            from hero.daemon.retry import retry

            return retry(_home(args), args.id)
        if args.command == "github":
            if args.github_command != "watch":
                parser.error("github: expected a command: hero github watch [--repo ...]")
            from hero.github.watch import cmd_github_watch

            return cmd_github_watch(args, _home(args))
    except KeyboardInterrupt:
        print("hero: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    parser.error(f"unknown command {args.command}")  # exits with 2


def _home(args: argparse.Namespace) -> Path:
    from hero.config import resolve_home

    return resolve_home(getattr(args, "home", None))


def cmd_init(args: argparse.Namespace) -> int:
    from hero.scaffold import init_home

    home = _home(args)
    created = init_home(home, target_repo=args.target_repo)
    for path in created:
        print(f"created {path.relative_to(home) if path.is_relative_to(home) else path}")
    if not created:
        print(f"{home} is already a hero home; nothing to do")
    else:
        print(
            "next: set target_repo in config/roles.yaml, pick a provider, then `hero run STORY.md`"
        )
    return EXIT_PASSED


def cmd_status(args: argparse.Namespace) -> int:
    import os

    from hero.views.status import collect_status, format_status

    home = _home(args)
    if not home.is_dir():
        print(f"hero: {home}: no such directory", file=sys.stderr)
        return EXIT_USAGE
    report = collect_status(home)
    try:
        print(json.dumps(report, indent=2) if args.json else format_status(report), flush=True)
    except BrokenPipeError:  # `hero status | head`: the reader has gone, and that is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_PASSED


def cmd_logs(args: argparse.Namespace) -> int:
    import os

    from hero.views.logs import LogsError, follow, show

    if args.round is not None and args.round < 1:
        print(f"hero: --round: expected a round number >= 1; found {args.round}", file=sys.stderr)
        return EXIT_USAGE
    home = _home(args)
    try:
        if args.follow:
            follow(home, args.id, sys.stdout, round_no=args.round)
        else:
            show(home, args.id, sys.stdout, round_no=args.round)
    except LogsError as exc:
        print(f"hero: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED  # quietly: Ctrl-C is how a follow is usually ended
    except BrokenPipeError:  # `hero logs ID | head`: the reader has gone, and that is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_PASSED


def cmd_run(args: argparse.Namespace) -> int:
    from hero.app import Refused, run_with_config
    from hero.config import ConfigError, load_config
    from hero.errors import Interrupted
    from hero.git.ops import GitError
    from hero.state import StateError, Status
    from hero.story import StoryError

    started = time.monotonic()
    story_path = Path(args.story)
    if not story_path.exists():  # a directory or a FIFO: the story's reader says what it is
        print(f"hero: {story_path}: no such story file", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = load_config(_home(args), roles=("worker", "reviewer"))
    except ConfigError as exc:
        print(f"hero: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    show = args.verbose or sys.stderr.isatty()
    progress = (lambda msg: print(f"hero: {msg}", file=sys.stderr, flush=True)) if show else None
    _sigterm_as_interrupt()
    try:
        state = run_with_config(story_path.resolve(), config, progress=progress)
    except StoryError as exc:
        print(f"hero: invalid story: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Refused as exc:
        print(f"hero: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (StateError, GitError) as exc:
        print(f"hero: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (KeyboardInterrupt, Interrupted):
        print("hero: interrupted; run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        from hero.pipeline import StoryBusy

        if isinstance(exc, StoryBusy):
            print(f"hero: {exc}", file=sys.stderr)
            return EXIT_USAGE
        raise
    result = summarize(state, config.home, time.monotonic() - started)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_summary_line(result))
    return EXIT_PASSED if state.status == Status.PASSED else EXIT_FAILED


def summarize(state: RunState, home: Path, duration_s: float) -> dict[str, Any]:
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
        "state": str(state.ref.state_path(home)),
        "story": state.story_path,
    }


def _summary_line(result: dict[str, Any]) -> str:
    head = (result["head_sha"] or "")[:10]
    where = f"branch {result['branch']} at {head}; " if result["branch"] and head else ""
    line = (
        f"{result['id']}: {result['status']} after {result['rounds']} round(s); "
        f"{where}state {result['state']}"
    )
    if result["error"]:
        line += f"\nerror: {result['error']}"
    return line


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (e.g. called from a test's thread)
        pass
