"""`hero plan PLAN.md` and `hero plan show NAME`: a markdown plan becomes a DAG of stories.

``hero plan PLAN.md [--name NAME] [--force] [--dry-run]`` asks the planner (its role in
``config/roles.yaml``) for stories, shows it the target repository's files and rules, checks
its answer (see :mod:`hero.roles.planner`), and writes ``inbox/<name>/<id>.md`` and
``inbox/<name>/_manifest.yaml`` all at once: everything goes into a dot-folder the inbox
watcher ignores, renamed into place when complete. A name already planned is refused unless
``--force``, and never replaced once one of its stories has a run record. It ends by
drawing the DAG and saying what to run next.

``hero plan show NAME [--format text|mermaid|dot]`` draws a plan's DAG again, each story
with its status from its run record.

Exit codes: 0 done; 1 the planner's answer stayed invalid, or the model could not be
reached (nothing is written); 2 usage or configuration error, an unreadable plan file, a
name that exists without --force, a plan whose stories have started, an unknown plan.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hero.dag import problems as dag_problems
from hero.dag import render_dot, render_mermaid, render_text
from hero.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from hero.names import MANIFEST, StoryRef, plan_branch, plan_name_problem
from hero.plan import Manifest, ManifestStory, PlanError, dump_manifest, read_plan, utc_now
from hero.story import Story
from hero.yamlio import ValueProblem, decode_text, read_file

if TYPE_CHECKING:
    from hero.config import Safety
    from hero.roles.planner import Draft

#: The largest plan file hero reads.
MAX_PLAN_BYTES = 1 << 20
NOT_STARTED = "not started"
UNREADABLE = "unreadable"


class Refusal(Exception):
    """A plan hero will not write or show; the message says why and what to do (exit 2)."""


def cmd_plan(args: argparse.Namespace, home: Path) -> int:
    """Both forms of `hero plan`; returns the exit code."""
    try:
        if args.target == "show":
            if args.name or args.force or args.dry_run:
                raise Refusal("--name, --force and --dry-run are for `hero plan PLAN.md`")
            if not args.show_name:
                raise Refusal("`hero plan show` needs the plan's name: hero plan show NAME")
            return show_plan(home, args.show_name, fmt=args.format)
        if args.show_name:
            raise Refusal(
                f"unexpected argument {args.show_name!r}: hero plan PLAN.md [--name NAME] "
                "[--force] [--dry-run], or hero plan show NAME"
            )
        return make_plan(
            home, Path(args.target), name=args.name, force=args.force, dry_run=args.dry_run
        )
    except Refusal as exc:
        _err(str(exc))
        return EXIT_USAGE


# ----------------------------------------------------------------------------- hero plan


def make_plan(home: Path, plan_file: Path, *, name: str | None, force: bool, dry_run: bool) -> int:
    """`hero plan PLAN.md`: ask the planner, check, write (unless ``dry_run``), draw."""
    from hero.config import ConfigError, load_config
    from hero.git.ops import GitError
    from hero.llm import LlmClient, LlmError
    from hero.prompting import PromptError
    from hero.redact import RedactingModel, Redactor
    from hero.roles.planner import PlanInvalid, plan_stories
    from hero.roles.repo import repo_layout, repo_rules

    data, text = _read_plan_file(plan_file)
    if name is not None:
        problem = plan_name_problem(name)
        if problem:
            raise Refusal(f"--name: {problem}")
        if not dry_run:
            _check_free(home, name, force=force)  # before a model call is spent on it
    try:
        config = load_config(home, roles=("planner",))
    except ConfigError as exc:
        raise Refusal(f"configuration error: {exc}") from None
    try:
        layout = repo_layout(config.target_repo)
    except GitError as exc:
        raise Refusal(f"cannot list the target repository's files: {exc}") from None
    try:
        # the plan, the layout and the rules files are the user's: no key of theirs goes out
        client = RedactingModel(
            LlmClient(config.role("planner"), config.llm), Redactor(config.secrets)
        )
        draft = plan_stories(
            client,
            text,
            plan_file=plan_file.name,
            layout=layout,
            rules=repo_rules(config.target_repo),
            home=config.home,
            check=lambda d: _policy_problems(config.safety, d),
        )
    except ConfigError as exc:
        raise Refusal(f"configuration error: {exc}") from None
    except PromptError as exc:
        raise Refusal(str(exc)) from None
    except LlmError as exc:
        _err(f"the planner could not answer: {exc}; nothing written")
        return EXIT_FAILED
    except PlanInvalid as exc:
        _err("the planner's answer was still invalid after a second try; nothing written:")
        for error in exc.errors:
            print(error, file=sys.stderr)
        return EXIT_FAILED

    if draft.answers > 1:
        _err("the planner's first answer was invalid; its corrected answer is used")
    chosen = _plan_name(name, draft.plan, plan_file)
    nodes, titles = draft.deps(), draft.titles()
    if dry_run:
        print(f"plan {chosen} (dry run: nothing written): {len(draft.stories)} stories\n")
        _describe_stories(config.safety, draft)
        print(render_text(nodes, titles), end="")
        if _existing(home, chosen) or _started(home, chosen):
            print(f"\nnote: a plan named {chosen} exists; writing this one needs --force")
        return EXIT_OK

    _check_free(home, chosen, force=force)
    source = plan_file.resolve()
    manifest = Manifest(
        name=chosen,
        source=str(source),
        source_sha256=hashlib.sha256(data).hexdigest(),
        created_at=utc_now(),
        stories=tuple(ManifestStory(s.id, s.title, s.depends_on) for s in draft.stories),
    )
    folder = _write_plan(home, manifest, [(s.metadata, s.body) for s in draft.stories])
    print(f"plan {chosen}: {len(draft.stories)} stories written to {_shown(home, folder)}/")
    print(f"from {source}; branch when every story passed: {plan_branch(chosen)}\n")
    _describe_stories(config.safety, draft)
    print(render_text(nodes, titles, dict.fromkeys(nodes, NOT_STARTED)), end="")
    print(f"\nnext: hero run-plan {chosen}   (or `hero watch`)")
    return EXIT_OK


def _read_plan_file(path: Path) -> tuple[bytes, str]:
    """The plan file's bytes and text; Refusal naming the file for anything unusable."""
    try:
        data = read_file(path, limit=MAX_PLAN_BYTES, what="plan file")
        text = decode_text(data, what="plan file")
    except FileNotFoundError:
        raise Refusal(f"{path}: no such plan file") from None
    except ValueProblem as exc:
        raise Refusal(f"{path}: {exc.message}") from None
    except OSError as exc:
        raise Refusal(f"{path}: cannot read the plan file: {exc.strerror or exc}") from None
    if not text.strip():
        raise Refusal(f"{path}: the plan file is empty; write the plan in it first")
    return data, text


def _plan_name(given: str | None, suggested: str, plan_file: Path) -> str:
    """--name, else the planner's name if it is a valid one, else the file's name as a slug."""
    if given:
        return given
    if suggested and plan_name_problem(suggested) is None:
        return suggested
    slug = re.sub(r"[^a-z0-9_-]+", "-", plan_file.stem.lower()).strip("-_")[:64].strip("-_")
    return slug or "plan"


def _existing(home: Path, name: str) -> list[Path]:
    """The folders a plan of that name has now (inbox/<name>, done/<name>)."""
    found = []
    for where in ("inbox", "done"):
        folder = home / where / name
        if folder.exists() or folder.is_symlink():
            found.append(folder)
    return found


def _started(home: Path, name: str) -> list[str]:
    """The stories of plan ``name`` that have a run record (any file under
    ``runs/state/plans/<name>/``): a plan with any is one hero must not replace."""
    records = StoryRef(name, "x").state_path(home).parent  # names.py's rule for the folder
    if not records.is_dir():
        return []
    names = {
        p.relative_to(records).with_suffix("").as_posix() if p.suffix == ".json" else p.name
        for p in records.rglob("*")
        if not p.is_dir()
    }
    return sorted(names)


def _check_free(home: Path, name: str, *, force: bool) -> None:
    """Refusal unless a plan called ``name`` may be written: no such plan, or ``force`` and
    none of its stories has started."""
    started = _started(home, name)
    if started:
        raise Refusal(
            f"plan {name} has started: run records exist for {', '.join(started)} (under "
            f"runs/state/plans/{name}/), so it is not replaced, not even with --force; plan "
            "under another name (--name NAME)"
        )
    existing = _existing(home, name)
    if existing and not force:
        where = " and ".join(f"{_shown(home, p)}/" for p in existing)
        raise Refusal(
            f"a plan named {name} exists ({where}); use --force to replace it, or --name to "
            "plan under another name"
        )


def _write_plan(
    home: Path, manifest: Manifest, stories: Sequence[tuple[dict[str, object], str]]
) -> Path:
    """Write the plan's folder whole: into ``inbox/.<name>.tmp-<pid>/`` (a dot-name the inbox
    watcher ignores), then renamed to ``inbox/<name>/``. An old plan of that name (--force)
    is first renamed aside to a dot-name, then deleted, so no story of it is left behind."""
    from hero.fsio import atomic_write
    from hero.story import write_story

    name, pid = manifest.name, os.getpid()
    inbox = home / "inbox"
    target = inbox / name
    tmp = inbox / f".{name}.tmp-{pid}"
    _clear_leftovers(inbox, name)
    if tmp.exists():
        shutil.rmtree(tmp)  # left by a dead process that had our pid
    tmp.mkdir(parents=True)
    aside: list[tuple[Path, Path]] = []
    try:
        for metadata, body in stories:
            write_story(tmp / f"{metadata['id']}.md", metadata, body, exist_ok=False)
        atomic_write(tmp / MANIFEST, dump_manifest(manifest).encode("utf-8"))
        for folder in _existing(home, name):
            moved = folder.parent / f".{name}.old-{pid}"
            if moved.exists():
                shutil.rmtree(moved)
            os.rename(folder, moved)
            aside.append((folder, moved))
        try:
            os.rename(tmp, target)
        except OSError as exc:
            raise Refusal(
                f"{_shown(home, target)}/ appeared while the plan was being written "
                f"({exc.strerror or exc}); nothing written"
            ) from None
    except BaseException:
        for folder, moved in reversed(aside):  # put an old plan back as it was
            if not folder.exists():
                os.rename(moved, folder)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for _, moved in aside:
        shutil.rmtree(moved, ignore_errors=True)
    return target


def _clear_leftovers(inbox: Path, name: str) -> None:
    """Remove the dot-folders a ``hero plan`` of this name left when it was killed midway
    (``.<name>.tmp-<pid>``, ``.<name>.old-<pid>`` of a process that is gone)."""
    for kind in ("tmp", "old"):
        for path in inbox.glob(f".{name}.{kind}-*"):
            pid = path.name.rsplit("-", 1)[-1]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _policy_problems(safety: Safety, draft: Draft) -> list[str]:
    """The draft's verify commands the command policy refuses, one line each naming the
    story: sent back to the planner, which must answer without them."""
    from hero.roles.verifier import policy_problems

    return [
        f"story {s.id!r}: {problem}"
        for s in draft.stories
        for problem in policy_problems(safety, s.story.verify)
    ]


def _describe_stories(safety: Safety, draft: Draft) -> None:
    """Every story of the plan with the verify commands the planner wrote, for the user to
    read before they run (or that default_verify replaces, with model_verify off)."""
    print(
        "verify commands below were written by the planner model: read them before you run the plan"
        if safety.model_verify
        else "model_verify is off: the planner's verify commands below never run; "
        "default_verify runs in their place"
    )
    print()
    for story in draft.stories:
        print(_describe_story(story.story))


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


def show_plan(home: Path, name: str, *, fmt: str = "text") -> int:
    """`hero plan show NAME`: the plan's DAG with each story's status, its branch and folder."""
    from hero.state import StateError, load_state

    problem = plan_name_problem(name)
    if problem:
        raise Refusal(f"plan show: {problem}")
    try:
        plan = read_plan(home, name)
    except PlanError as exc:
        raise Refusal(
            f"{exc}; `hero plan PLAN.md --name {name}` makes one"
            if exc.field == "plan"
            else str(exc)
        ) from None
    statuses: dict[str, str] = {}
    for story_id in plan.stories:
        try:
            state = load_state(home, StoryRef(name, story_id))
        except StateError:
            statuses[story_id] = UNREADABLE
            continue
        statuses[story_id] = state.status.value if state is not None else NOT_STARTED
    nodes, titles = plan.deps(), plan.titles()
    folder = _shown(home, plan.folder)
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
    for line in plan.problems + dag_problems(nodes):
        _err(f"warning: {line}")
    return EXIT_OK


# ----------------------------------------------------------------------------- helpers


def _shown(home: Path, path: Path) -> str:
    """``path`` relative to the home when it is inside it."""
    try:
        return str(path.relative_to(home))
    except ValueError:
        return str(path)


def _err(message: str) -> None:
    print(f"hero: {message}", file=sys.stderr)
