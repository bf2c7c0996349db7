"""`hero plan PLAN.md` and `hero plan show NAME` (:mod:`hero.plans.drafting`).

``hero plan PLAN.md [--name NAME] [--force] [--dry-run]`` asks the planner for stories,
writes them and their manifest to ``inbox/<name>/`` (not with ``--dry-run``), then shows
every story with its verify commands, draws the DAG and says what to run next.
``hero plan show NAME [--format text|mermaid|dot]`` draws a plan's DAG again, each story
with its status from its run record.

Exit codes: 0 done; 1 the planner's answer stayed invalid, or the model could not be
reached (nothing is written); 2 usage or configuration error, an unreadable plan file, a
name that exists without --force, a plan whose stories have started, an unknown plan.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hero.commands import Subparsers, home, home_option, say
from hero.errors import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from hero.config.sections import Safety
    from hero.roles.planner import Draft
    from hero.story.record import Story


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "plan",
        parents=[home_option()],
        help="split a markdown plan into a DAG of stories (inbox/<name>/), or show one",
        usage="hero plan PLAN.md [--name NAME] [--force] [--dry-run]\n"
        "       hero plan show NAME [--format text|mermaid|dot]",
        description="`hero plan PLAN.md`: the planner turns the plan into stories with "
        "dependencies and writes them to inbox/<name>/ with a _manifest.yaml, then draws the "
        "DAG. `hero plan show NAME`: draw a plan's DAG with each story's status. Exit 0; 1 "
        "when the planner's answer stays invalid (nothing is written); 2 for a usage or "
        "configuration error, or a plan name that exists (see --force).",
    )
    parser.add_argument("target", metavar="PLAN.md|show", help="the plan file, or `show`")
    parser.add_argument("show_name", nargs="?", metavar="NAME", help="with `show`: the plan")
    parser.add_argument("--name", help="the plan's name (default: the planner's, else the file's)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a plan of that name whose stories have not started",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the stories and the DAG; write nothing"
    )
    parser.add_argument(
        "--format",
        choices=("text", "mermaid", "dot"),
        default="text",
        help="with `show`: how to draw the DAG (default: text)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Both forms of `hero plan`."""
    from hero.plans.drafting import Refusal

    where = home(args)
    if args.target == "show":
        if args.name or args.force or args.dry_run:
            raise Refusal("--name, --force and --dry-run are for `hero plan PLAN.md`")
        if not args.show_name:
            raise Refusal("`hero plan show` needs the plan's name: hero plan show NAME")
        return show(where, args.show_name, fmt=args.format)
    if args.show_name:
        raise Refusal(
            f"unexpected argument {args.show_name!r}: hero plan PLAN.md [--name NAME] "
            "[--force] [--dry-run], or hero plan show NAME"
        )
    return make(where, Path(args.target), name=args.name, force=args.force, dry_run=args.dry_run)


# ----------------------------------------------------------------------------- hero plan


def make(home: Path, plan_file: Path, *, name: str | None, force: bool, dry_run: bool) -> int:
    """`hero plan PLAN.md`: ask the planner, check, write (unless ``dry_run``), draw."""
    from hero.llm.client import LlmError
    from hero.names import plan_branch
    from hero.plans.dag import render_text
    from hero.plans.drafting import NOT_STARTED, draft_plan, plan_exists, shown, write_plan
    from hero.roles.planner import PlanInvalid

    try:
        drafted = draft_plan(home, plan_file, name=name, force=force, dry_run=dry_run)
    except LlmError as exc:
        say(f"the planner could not answer: {exc}; nothing written")
        return EXIT_FAILED
    except PlanInvalid as exc:
        say("the planner's answer was still invalid after a second try; nothing written:")
        for error in exc.errors:
            print(error, file=sys.stderr)
        return EXIT_FAILED

    draft, chosen, safety = drafted.draft, drafted.name, drafted.config.safety
    if draft.answers > 1:
        say("the planner's first answer was invalid; its corrected answer is used")
    nodes, titles = draft.deps(), draft.titles()
    if dry_run:
        print(f"plan {chosen} (dry run: nothing written): {len(draft.stories)} stories\n")
        print(_describe_stories(safety, draft), end="")
        print(render_text(nodes, titles), end="")
        if plan_exists(home, chosen):
            print(f"\nnote: a plan named {chosen} exists; writing this one needs --force")
        return EXIT_OK

    folder = write_plan(home, drafted, force=force)
    print(f"plan {chosen}: {len(draft.stories)} stories written to {shown(home, folder)}/")
    print(f"from {drafted.source}; branch when every story passed: {plan_branch(chosen)}\n")
    print(_describe_stories(safety, draft), end="")
    print(render_text(nodes, titles, dict.fromkeys(nodes, NOT_STARTED)), end="")
    print(f"\nnext: hero run-plan {chosen}   (or `hero watch`)")
    return EXIT_OK


def _describe_stories(safety: Safety, draft: Draft) -> str:
    """Every story of the plan with the verify commands the planner wrote, for the user to
    read before they run (or that default_verify replaces, with model_verify off)."""
    head = (
        "verify commands below were written by the planner model: read them before you run the plan"
        if safety.model_verify
        else "model_verify is off: the planner's verify commands below never run; "
        "default_verify runs in their place"
    )
    stories = "".join(_describe_story(story.story) + "\n" for story in draft.stories)
    return f"{head}\n\n{stories}"


def _describe_story(story: Story) -> str:
    """One story: id and title, then priority, depends_on, scope and verify."""
    lines = [
        f"{story.id}  {story.title}",
        f"  priority:   {story.priority}",
        f"  depends_on: {', '.join(story.depends_on) or '(none)'}",
        f"  scope:      {', '.join(story.scope) or '(whole repository)'}",
    ]
    if not story.verify:
        lines.append("  verify:     (none: default_verify of config/roles.yaml)")
    else:
        lines.append("  verify:")
        for tier in story.verify:  # in the order the verifier runs them
            lines.extend(f"    {tier.name}: {command}" for command in tier.commands)
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- hero plan show


def show(home: Path, name: str, *, fmt: str = "text") -> int:
    """`hero plan show NAME`: the plan's DAG with each story's status, its branch and folder."""
    from hero.names import plan_branch
    from hero.plans.dag import problems, render_dot, render_mermaid, render_text
    from hero.plans.drafting import plan_statuses, shown

    plan, statuses = plan_statuses(home, name)
    nodes, titles = plan.deps(), plan.titles()
    folder = shown(home, plan.folder)
    branch = plan_branch(name)
    if fmt == "mermaid":
        print(f"%% plan {name}: folder {folder}/, branch {branch}")
        print(render_mermaid(nodes, titles, statuses), end="")
    elif fmt == "dot":
        print(f"// plan {name}: folder {folder}/, branch {branch}")
        print(render_dot(nodes, titles, statuses, name=name), end="")
    else:
        print(f"plan {name}: {len(nodes)} stories in {folder}/")
        print(f"branch: {branch}")
        print(f"from {plan.manifest.source}, planned {plan.manifest.created_at}\n")
        print(render_text(nodes, titles, statuses), end="")
        print("\nverify commands (written by the planner model):")
        for story_id, story in plan.stories.items():
            commands = [f"{t.name}: {c}" for t in story.verify for c in t.commands]
            print(f"- {story_id}: " + ("; ".join(commands) or "(none: default_verify)"))
    for line in plan.problems + problems(nodes):
        say(f"warning: {line}")
    return EXIT_OK
