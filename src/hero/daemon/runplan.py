"""`hero run-plan NAME`: the daemon's dispatcher restricted to one plan folder, run until
nothing more can run (:class:`hero.daemon.dispatcher.Dispatcher` with ``only_plan``): the
same queue rule, dependency rule and code along the edges as ``hero watch``. It ends with a
table of every story and the plan's branch (:func:`hero.plans.finish.finish_plan`).

The command (arguments, logging, what it prints, its exit code) is
:mod:`hero.commands.run_plan`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hero.config.home import Config
from hero.errors import EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, UsageError
from hero.names import StoryRef, plan_branch
from hero.plans.dag import layers, problems
from hero.plans.finish import PlanOutcome, finish_plan
from hero.plans.manifest import Plan, PlanError, read_plan
from hero.state import TERMINAL, StateError, Status, exit_code, load_state


@dataclass(frozen=True)
class PlanRun:
    """How a ``hero run-plan`` ended."""

    interrupted: bool
    """A signal stopped it: running again continues."""
    outcome: PlanOutcome | None
    """The plan's branch, or why it was not made; None when not every story passed (or
    the run was interrupted)."""

    @property
    def passed(self) -> bool:
        return self.outcome is not None and not self.outcome.error


def check_plan(config: Config, name: str) -> Plan:
    """The plan ``name`` if it may run now. PlanError for a missing or broken plan;
    UsageError naming every problem (a broken DAG, a verify command the policy refuses), or
    when `hero watch` runs on the home (it runs plan folders itself)."""
    from hero.locks import daemon_lock_path, is_held

    plan = read_plan(config.home, name)
    found = [*plan.problems, *problems(plan.deps()), *_policy_problems(config, plan)]
    if found:
        raise UsageError(
            f"plan '{name}' ({plan.folder}) cannot run:\n" + "\n".join(f"  - {p}" for p in found)
        )
    if is_held(daemon_lock_path(config.home)):
        raise UsageError(
            f"`hero watch` runs on {config.home}, and it runs plan folders itself; follow "
            f"plan '{name}' with `hero plan show {name}` or `hero status`"
        )
    return plan


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


def run_plan(config: Config, name: str, log: Any) -> PlanRun:
    """Hold the plan's lock (PlanBusy when another ``hero run-plan`` runs it), run its
    stories until nothing more can run, then make the plan's branch when every one passed."""
    from hero.daemon.dispatcher import Dispatcher
    from hero.daemon.watch import model_factory, serve
    from hero.locks import plan_lock

    with plan_lock(config.home, name):
        dispatcher = Dispatcher(
            config, model_factory(config, log), log=log, settle_s=0.25, only_plan=name
        )
        if serve(dispatcher, log, exit_when_idle=True):
            return PlanRun(interrupted=True, outcome=None)
        return PlanRun(interrupted=False, outcome=finish_plan(config, dispatcher.repo, name))


def plan_exit_code(home: Path, name: str, ended: PlanRun) -> int:
    """What `hero run-plan` exits with once it ran (not interrupted): 0 when the plan's
    branch was made; 124 when the stories that failed all stopped on a time budget (their
    descendants skipped), as `hero run` of each would have exited; 1 otherwise."""
    if ended.passed:
        return EXIT_OK
    try:
        plan = read_plan(home, name)
    except PlanError:
        return EXIT_FAILED
    codes: set[int] = set()
    for story_id in plan.stories:
        try:
            state = load_state(home, StoryRef(name, story_id))
        except StateError:
            return EXIT_FAILED
        if state is not None and state.status in TERMINAL - {Status.PASSED, Status.SKIPPED}:
            codes.add(exit_code(state))
    return EXIT_TIMEOUT if codes == {EXIT_TIMEOUT} else EXIT_FAILED


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
