"""`hero github watch`: turn labelled issues into inbox stories and report their endings
(:mod:`hero.github.watch`).

Exit 0 when stopped (or when ``--once`` reached GitHub); 1 when ``--once`` could not; 2 for
a usage or configuration error, or another watcher on the home.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from hero.commands import (
    CommandLineError,
    Subparsers,
    add_log_format,
    home,
    home_option,
    json_logs,
    say_notices,
)
from hero.errors import EXIT_FAILED, EXIT_OK, ConfigurationError


def add_parser(subparsers: Subparsers) -> None:
    github = subparsers.add_parser(
        "github",
        parents=[home_option()],
        help="take stories from GitHub issues and report back on them",
    )
    github.set_defaults(handler=_no_command)
    github_sub = github.add_subparsers(dest="github_command", metavar="COMMAND")
    watch = github_sub.add_parser(
        "watch",
        parents=[home_option()],
        help="turn labelled issues into inbox stories and report their endings",
        description="Every interval: each open issue with the label whose author has write "
        "access (author_association OWNER, MEMBER or COLLABORATOR, by default) and that has no "
        "story yet becomes inbox/gh-<number>.md; then the stories' endings are reported on "
        "their issues, and review comments and failing checks on hero's pull requests become "
        "follow-up stories on the same branch (docs/github.md). The token comes from GITHUB_TOKEN or github_token in config.local.yaml; "
        "GITHUB_API_URL overrides the API's URL. Defaults come from the github: block of "
        "config/roles.yaml. SIGTERM or Ctrl-C stops it. Exit 0; 1 when --once could not reach "
        "GitHub; 2 for a usage or configuration error.",
    )
    watch.add_argument("--repo", metavar="OWNER/NAME", help="the repository whose issues to take")
    watch.add_argument("--label", help="take open issues with this label")
    watch.add_argument(
        "--interval", type=float, metavar="SECONDS", help="seconds between sweeps (default 60)"
    )
    watch.add_argument("--once", action="store_true", help="one sweep, then exit")
    watch.add_argument(
        "--dry-run",
        action="store_true",
        help="say what each sweep would take in, cancel, report and follow up; change nothing "
        "(GET requests only, no file written in the home)",
    )
    watch.add_argument(
        "--max-per-sweep",
        type=int,
        metavar="N",
        help="take at most N new stories per sweep, oldest issue first (default: "
        "github.max_per_sweep, 0 = no cap)",
    )
    add_log_format(watch)
    watch.set_defaults(handler=run)


def _no_command(args: argparse.Namespace) -> NoReturn:
    raise CommandLineError("github: expected a command: hero github watch [--repo ...]")


def run(args: argparse.Namespace) -> int:
    """`hero github watch`."""
    from hero.config.loader import load_config
    from hero.daemon.logsetup import configure
    from hero.github import watch
    from hero.github.settings import require_token, settings_for

    config = load_config(home(args), roles=())
    say_notices(config)
    settings = settings_for(config, repo=args.repo, label=args.label, interval_s=args.interval)
    require_token(settings)
    if args.max_per_sweep is not None and args.max_per_sweep < 0:
        raise CommandLineError(f"--max-per-sweep: expected N >= 0; found {args.max_per_sweep}")
    from dataclasses import replace

    settings = replace(
        settings,
        dry_run=bool(args.dry_run),
        max_per_sweep=settings.max_per_sweep if args.max_per_sweep is None else args.max_per_sweep,
    )
    log = configure(json=json_logs(args), secrets=config.secrets)
    watcher = watch.Watcher(config.home, settings, config, log)
    try:
        watcher.client().close()  # a bad API URL or token is a usage error, said at once
    except ValueError as exc:
        raise ConfigurationError(watcher.scrub(exc)) from None
    ok = watch.run(watcher, once=args.once)
    return EXIT_OK if ok or not args.once else EXIT_FAILED
