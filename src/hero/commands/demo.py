"""`hero demo`: one example story end to end, against hero's scripted model.

The example home and repository and the scripted model's part are in :mod:`hero.run.demo`;
this module runs them and tells the user what happened. The demo's temporary folder is
removed at the end, whatever the end (a failure, Ctrl-C, SIGTERM), so trying hero leaves
nothing in /tmp; ``--keep`` keeps it and says where to look, and a ``--dir`` is kept.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from hero.commands import Subparsers
from hero.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run an example story end to end against a scripted model",
        description="Run an example story end to end against hero's scripted model, in a new "
        "temporary folder that is removed at the end (also on failure or Ctrl-C) unless --keep "
        "asks to keep it, or in --dir, which is kept.",
    )
    parser.add_argument(
        "--dir", help="where to create the demo (default: a new temporary folder); it is kept"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the temporary folder to look around in it (its path is printed)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import tempfile

    if args.dir:
        root = Path(args.dir).resolve()
        if root.exists() and any(root.iterdir()):
            print(f"hero demo: {root} is not empty; pass an empty or new --dir", file=sys.stderr)
            return EXIT_USAGE
        root.mkdir(parents=True, exist_ok=True)
        return _demo(root, kept=True)
    root = Path(tempfile.mkdtemp(prefix="hero-demo-"))
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill`: cleaned up as after Ctrl-C
    try:
        return _demo(root, kept=args.keep)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not args.keep:
            _remove(root)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _remove(root: Path) -> None:
    """Remove the demo's temporary folder; say so when something is left."""
    import shutil

    # A child the interrupt reached may still be writing in it for a moment: try again.
    for _ in range(5):
        shutil.rmtree(root, ignore_errors=True)
        if not root.exists():
            return
    print(f"hero demo: could not remove {root} entirely; remove it by hand", file=sys.stderr)


def _demo(root: Path, *, kept: bool) -> int:
    import subprocess

    from hero.config.loader import load_config
    from hero.llm.scripted import ScriptedModel
    from hero.run.demo import demo_policy, make_demo_home
    from hero.run.launch import run_with_config
    from hero.state import Status

    with ScriptedModel(demo_policy) as model:
        print("hero demo", flush=True)
        print(f"  The model is SCRIPTED: hero's built-in fake model at {model.base_url}.")
        print("  It plays a worker and a reviewer from a fixed script; no key, no network.")
        home, story = make_demo_home(root, model.base_url)
        print(f"  home:   {home}")
        print(f"  repo:   {root / 'textkit'}")
        print(f"  story:  {story.relative_to(home)}\n")
        config = load_config(home, roles=("worker", "reviewer"))
        state = run_with_config(story, config, progress=lambda m: print(f"  {m}", flush=True))
    print()
    print(f"result:   {state.status} after {len(state.rounds)} rounds")
    for r in state.rounds:
        print(f"  round {r.round}: {r.review.verdict}: {r.review.summary}")
    print(f"branch:   {state.branch} in {config.target_repo}")
    log = subprocess.run(
        ["git", "log", "--oneline", f"{state.base_sha}..{state.branch}"],
        cwd=config.target_repo,
        capture_output=True,
        text=True,
    ).stdout
    for line in log.splitlines():
        print(f"            {line}")
    if kept:
        print(f"worktree: {state.worktree}")
        print(f"state:    {home / 'runs' / 'state' / (state.id + '.json')}")
        print(f"traces:   {home / 'runs' / state.id}/round-N.jsonl, verify-rN.log")
        print(f"story:    {state.story_path}")
        print(f"kept:     {root}")
    else:
        print(f"\n{root} is removed now: `hero demo --keep` keeps it, to look around in it")
    return EXIT_OK if state.status == Status.PASSED else EXIT_FAILED
