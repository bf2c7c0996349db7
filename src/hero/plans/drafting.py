"""`hero plan PLAN.md` and `hero plan show NAME`: a markdown plan becomes a DAG of stories.

:func:`draft_plan` asks the planner (its role in ``config/roles.yaml``) for stories, shows
it the target repository's files and rules, and checks its answer (see
:mod:`hero.roles.planner`); :func:`write_plan` writes ``inbox/<name>/<id>.md`` and
``inbox/<name>/_manifest.yaml`` all at once: everything goes into a dot-folder the inbox
watcher ignores, renamed into place when complete. A name already planned is refused unless
``force``, and never replaced once one of its stories has a run record.
:func:`plan_statuses` reads a plan back with each story's status.

The command (its arguments, what it prints, its exit codes) is :mod:`hero.commands.plan`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hero.errors import UsageError
from hero.names import MANIFEST, StoryRef, plan_name_problem
from hero.plans.manifest import (
    Manifest,
    ManifestStory,
    Plan,
    PlanError,
    dump_manifest,
    read_plan,
    utc_now,
)
from hero.yamlio import ValueProblem, decode_text, read_file

if TYPE_CHECKING:
    from hero.config.home import Config
    from hero.config.sections import Safety
    from hero.roles.planner import Draft
    from hero.roles.reviewer import Looking

#: The largest plan file hero reads.
MAX_PLAN_BYTES = 1 << 20
NOT_STARTED = "not started"
UNREADABLE = "unreadable"


class Refusal(UsageError):
    """A plan hero will not write or show; the message says why and what to do (exit 2)."""


@dataclass(frozen=True)
class Drafted:
    """The planner's checked answer for a plan file, not yet written."""

    name: str
    """The plan's name: the one asked for, else the planner's, else the file's."""
    draft: Draft
    config: Config
    source: Path
    """The plan file, resolved."""
    sha256: str
    """Of the plan file's bytes, for the manifest."""


# ----------------------------------------------------------------------------- hero plan


def draft_plan(
    home: Path, plan_file: Path, *, name: str | None, force: bool, dry_run: bool
) -> Drafted:
    """Ask the planner for the stories of ``plan_file`` and check its answer.

    Refusal for an unusable plan file or name (unless ``dry_run``, a ``name`` that may not
    be written, see :func:`check_free`: said before a model call is spent on it),
    ConfigError, LlmError when the model could not answer, PlanInvalid when its answer
    stayed invalid."""
    from hero.config.loader import load_config
    from hero.git.ops import GitError
    from hero.llm.client import make_client
    from hero.redact import RedactingModel, Redactor
    from hero.roles.planner import plan_stories
    from hero.roles.prompting import PromptError
    from hero.roles.repo import repo_layout, repo_rules

    data, text = _read_plan_file(plan_file)
    if name is not None:
        problem = plan_name_problem(name)
        if problem:
            raise Refusal(f"--name: {problem}")
        if not dry_run:
            check_free(home, name, force=force)  # before a model call is spent on it
    config = load_config(home, roles=("planner",))
    try:
        layout = repo_layout(config.target_repo)
    except GitError as exc:
        raise Refusal(f"cannot list the target repository's files: {exc}") from None
    try:
        # the plan, the layout and the rules files are the user's: no key of theirs goes out
        client = RedactingModel(make_client(config, "planner"), Redactor(config.secrets))
        with planner_looking(config) as looking:
            draft = plan_stories(
                client,
                text,
                plan_file=plan_file.name,
                layout=layout,
                rules=repo_rules(config.target_repo),
                home=config.home,
                check=lambda d: _policy_problems(config.safety, d),
                recap=plan_recap(config),
                looking=looking,
            )
    except PromptError as exc:
        raise Refusal(str(exc)) from None
    return Drafted(
        name=_plan_name(name, draft.plan, plan_file),
        draft=draft,
        config=config,
        source=plan_file.resolve(),
        sha256=hashlib.sha256(data).hexdigest(),
    )


@contextmanager
def planner_looking(config: Config) -> Iterator[Looking | None]:
    """What the planner looks around with (hero.roles.looking) while it plans: its toolset
    (the planner's ``tools``, by default the read-only set), None when they are empty (one
    request, as ever). Its tools read a checkout of the base (``target_base_ref``, else
    HEAD) made for the look and removed after it, never the user's working tree: not their
    uncommitted or untracked files (an ``.env``), not their ``.git/config`` (a credential in
    a remote's URL). The checkout borrows the repository's objects (``clone --shared``), so
    it costs the files' writing, not a copy of the history."""
    from hero.agent.tools.context import ToolContext
    from hero.agent.tools.toolset import select_tools
    from hero.config.tools import configured_servers, role_patterns
    from hero.git.ops import GitError, git
    from hero.roles.reviewer import Looking

    servers = configured_servers(config)
    patterns = role_patterns(config.role("planner").tools, "planner", servers)
    tools = select_tools(patterns, (), role="planner", servers=servers)
    if not tools:
        yield None
        return
    base = config.target_base_ref or "HEAD"
    with tempfile.TemporaryDirectory(prefix="hero-plan-look-") as tmp:
        checkout = Path(tmp) / "repo"
        try:
            commit = git(
                config.target_repo,
                "rev-parse",
                "--verify",
                "--end-of-options",
                f"{base}^{{commit}}",
            ).strip()
            git(
                Path(tmp),
                "clone",
                "-q",
                "--shared",
                "--no-checkout",
                "--",
                str(config.target_repo),
                "repo",
            )
            git(checkout, "-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit)
        except GitError as exc:
            raise Refusal(
                f"cannot check out {base} of the target repository for the planner: {exc}"
            ) from None
        ctx = ToolContext(root=checkout, env={}, secrets=config.secrets)
        yield Looking(tools, ctx, config.worker_limits.plan_tool_calls)


def plan_recap(config: Config) -> str:
    """The recap of the last stories on the repository the planner is told
    (hero.memory.recall); "" when memory is off or holds none. A memory file hero cannot
    read is a Refusal naming it: the person who asked for the plan can fix it."""
    from hero.llm.usage import estimate_text
    from hero.memory import enabled, store_for
    from hero.memory.recall import render_recap
    from hero.memory.store import MemoryFileError

    if not enabled(config):
        return ""
    try:
        recaps = store_for(config).recaps()
    except MemoryFileError as exc:
        raise Refusal(str(exc)) from None
    return render_recap(recaps, budget_tokens=config.memory.recap_tokens, estimate=estimate_text)


def write_plan(home: Path, drafted: Drafted, *, force: bool) -> Path:
    """Write the drafted plan to ``inbox/<name>/``, whole; its folder. Refusal when a plan
    of that name exists (unless ``force``) or has started."""
    check_free(home, drafted.name, force=force)
    stories = drafted.draft.stories
    manifest = Manifest(
        name=drafted.name,
        source=str(drafted.source),
        source_sha256=drafted.sha256,
        created_at=utc_now(),
        stories=tuple(ManifestStory(s.id, s.title, s.depends_on) for s in stories),
    )
    return _write_plan(home, manifest, [(s.metadata, s.body) for s in stories])


def plan_exists(home: Path, name: str) -> bool:
    """Whether a plan called ``name`` has folders or run records."""
    return bool(_existing(home, name) or _started(home, name))


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


def check_free(home: Path, name: str, *, force: bool) -> None:
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
        where = " and ".join(f"{shown(home, p)}/" for p in existing)
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
    from hero.story.format import write_story

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
                f"{shown(home, target)}/ appeared while the plan was being written "
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


# ----------------------------------------------------------------------------- hero plan show


def plan_statuses(home: Path, name: str) -> tuple[Plan, dict[str, str]]:
    """`hero plan show NAME`: the plan, and each story's status from its run record
    (``NOT_STARTED`` without one, ``UNREADABLE`` for one that cannot be read)."""
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
    return plan, statuses


# ----------------------------------------------------------------------------- helpers


def shown(home: Path, path: Path) -> str:
    """``path`` relative to the home when it is inside it."""
    try:
        return str(path.relative_to(home))
    except ValueError:
        return str(path)
