"""`hero run-plan NAME`: the daemon's dispatcher restricted to one plan folder, run until
nothing more can run (:class:`hero.daemon.dispatcher.Dispatcher` with ``only_plan``): the
same queue rule, dependency rule and code along the edges as ``hero watch``. It ends with a
table of every story and the plan's branch (:func:`hero.daemon.plans.finish_plan`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hero.config import Config
from hero.daemon.plans import PlanOutcome, finish_plan
from hero.dag import layers, problems
from hero.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from hero.names import StoryRef, plan_branch, plan_name_problem
from hero.plan import Plan, PlanError, read_plan
from hero.state import StateError, Status, load_state


def cmd_run_plan(args: argparse.Namespace, home: Path) -> int:
    """``hero run-plan NAME``: see the module's docstring. Exit 0 only if every story passed
    and the plan's branch was made; 1 otherwise; 2 usage or configuration; 130 interrupted."""
    from hero.config import ConfigError, load_config
    from hero.locks import PlanBusy, daemon_lock_path, is_held, plan_lock

    name: str = args.name
    problem = plan_name_problem(name)
    if problem:
        return _usage(f"plan name: {problem}")
    try:
        config = load_config(home, roles=("worker", "reviewer"))
    except ConfigError as exc:
        return _usage(f"configuration error: {exc}")
    if config.engine.remote:
        from hero.engine.app import missing

        lacking = missing()
        if lacking is not None:
            return _usage(f"configuration error: {lacking}")
    try:
        plan = read_plan(config.home, name)
    except PlanError as exc:
        return _usage(str(exc))
    found = [*plan.problems, *problems(plan.deps()), *_policy_problems(config, plan)]
    if found:
        return _usage(
            f"plan '{name}' ({plan.folder}) cannot run:\n" + "\n".join(f"  - {p}" for p in found)
        )
    if is_held(daemon_lock_path(config.home)):
        return _usage(
            f"`hero watch` runs on {config.home}, and it runs plan folders itself; follow "
            f"plan '{name}' with `hero plan show {name}` or `hero status`"
        )
    try:
        with plan_lock(config.home, name):
            return _run(config, name, verbose=bool(args.verbose))
    except PlanBusy as exc:
        return _usage(str(exc))


def _policy_problems(config: Config, plan: Plan) -> list[str]:
    """The plan's verify commands (a planner model wrote them) that the command policy
    (allow_commands, deny_commands) refuses, one line each naming the story and command:
    the plan is refused before any of them runs."""
    from hero.roles.verifier import policy_problems

    return [
        f"{story_id}: {problem}"
        for story_id, story in plan.stories.items()
        for problem in policy_problems(config.safety, story.verify)
    ]


def _usage(message: str) -> int:
    print(f"hero: {message}", file=sys.stderr)
    return EXIT_USAGE


def _run(config: Config, name: str, *, verbose: bool) -> int:
    from hero.daemon.dispatcher import Dispatcher
    from hero.daemon.logsetup import configure
    from hero.daemon.watch import model_factory, serve

    show = verbose or sys.stderr.isatty()
    log = configure(json=False, secrets=config.secrets) if show else _Quiet()
    dispatcher = Dispatcher(
        config, model_factory(config, log), log=log, settle_s=0.25, only_plan=name
    )
    if serve(dispatcher, log, exit_when_idle=True):
        print(f"hero: interrupted; run `hero run-plan {name}` again to continue", file=sys.stderr)
        return EXIT_INTERRUPTED
    outcome = finish_plan(config, dispatcher.repo, name)
    print(plan_table(config.home, name, outcome))
    passed = outcome is not None and not outcome.error
    return EXIT_OK if passed else EXIT_FAILED


class _Quiet:
    """A logger that says nothing (``hero run-plan`` off a terminal, without -v)."""

    def bind(self, **_kw: Any) -> _Quiet:
        return self

    def __getattr__(self, _name: str) -> Any:
        return lambda *_a, **_kw: None


def plan_table(home: Path, name: str, outcome: PlanOutcome | None) -> str:
    """Every story of the plan in dependency order: status, rounds, branch (and why a story
    did not pass), then the plan's branch or why there is none."""
    try:
        plan = read_plan(home, name)
    except PlanError as exc:
        return f"plan {name}: {exc}"
    rows: list[tuple[str, str, str, str]] = []
    notes: dict[str, str] = {}
    counts: dict[str, int] = {}
    for layer in layers(plan.deps()):
        for story_id in layer:
            ref = StoryRef(name, story_id)
            try:
                state = load_state(home, ref)
            except StateError:
                state = None
                status = "unreadable"
            else:
                status = str(state.status) if state is not None else "not run"
            counts[status] = counts.get(status, 0) + 1
            rounds = str(len(state.rounds)) if state is not None else "0"
            branch = state.branch if state is not None and state.branch else "-"
            rows.append((story_id, status, rounds, branch))
            if state is not None and state.error and status != Status.PASSED:
                notes[story_id] = state.error
    header = ("STORY", "STATUS", "ROUNDS", "BRANCH")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [f"plan {name}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
    for row in (header, *rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if row[0] in notes:
            lines.append(f"    {' '.join(notes[row[0]].split())}")
    if outcome is None:
        lines.append(f"plan branch {plan_branch(name)}: not made (not every story passed)")
    elif outcome.error:
        lines.append(f"plan branch {outcome.branch}: not made: {outcome.error}")
    else:
        lines.append(f"plan branch {outcome.branch} at {outcome.sha[:12]} ({outcome.note})")
    return "\n".join(lines)
