"""`hero run STORY --dry-run`: what a run of the story would do, without doing any of it.

It says the worker's first request as it would go out (system prompt, task, tool schemas,
and the request's other fields, built by the client's own :func:`hero.llm.client.request_params`)
with its size in tokens as the context window estimates it, where the run would work (branch,
base commit, story repository; afresh or resumed), the verify plan, the model of each role
and the budgets.

It changes nothing: no model is called, and nothing is written in the home or the target
repository (no run record, lock, log, worktree, git object or ref). Only read-only git
commands are run; the repository's rules files of a commit that has no checkout yet are
read from git into a temporary directory outside both, removed at the end. Which story may
run is asked of :func:`hero.run.launch.admit_run`, as the real run asks it, and where it starts
of :class:`hero.run.start.RunStart`'s read-only parts.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hero.config.home import Config
from hero.config.providers import RoleConfig
from hero.errors import UsageError
from hero.git.ops import NO_PROGRAMS, GitError, TargetRepo, commit_of, git, git_env
from hero.redact import Redactor
from hero.roles.repo import MAX_RULE_DIR_ENTRIES
from hero.state import RunState, Status, load_state
from hero.story.record import Story, VerifyTier

if TYPE_CHECKING:
    from hero.llm.models import Override
    from hero.run.start import RunStart

#: The roles of a story's run, in the order they are shown.
RUN_ROLES = ("worker", "reviewer")


class WouldNotStart(UsageError):
    """The story would not start as it stands (say, its base_ref names no commit)."""


def roles_for_run(
    config: Config, story: Story, models: Override | None = None
) -> tuple[Config, dict[str, RoleConfig]]:
    """The config a run of ``story`` uses, its roles with the story's ``model:`` /
    ``reasoning_effort:`` and `hero run --model` applied (hero.llm.models, as the run does),
    and the model of each role."""
    from hero.llm.models import story_config

    config = story_config(config, story, models)
    return config, {name: config.role(name) for name in RUN_ROLES}


def dry_run(story_path: Path, config: Config, models: Override | None = None) -> dict[str, Any]:
    """What `hero run story_path` would do, as one JSON-ready mapping, every secret the
    config knows redacted. Refused (from hero.run.launch) or StoryError when `hero run` would
    refuse the story; WouldNotStart when it would end in error before any model call."""
    from hero.daemon.queue import Admit
    from hero.memory import enabled as memory_on
    from hero.run.launch import admit_run
    from hero.run.revision import RevisionError, revision_of
    from hero.run.start import RunStart, StartError
    from hero.run.workspace import Workspace

    story, decision = admit_run(story_path, config)
    revision = revision_of(story, config)  # a follow-up: the story as its run sees it
    story = revision.story if revision is not None else story
    if decision.admit == Admit.BUSY:
        raise WouldNotStart(f"{story_path}: {decision.reason}")
    redactor = Redactor(config.secrets)
    config, roles = roles_for_run(config, story, models)
    result: dict[str, Any] = {
        "dry_run": True,
        "story": {
            "id": story.id,
            "key": story.ref.key,
            "title": story.title,
            "path": str(story_path),
            "plan": story.plan or None,
        },
    }
    try:
        repo = TargetRepo(config.target_repo)
        # Made only to ask them: neither writes anything until asked to start or lay out.
        branch = revision.branch if revision is not None else ""
        workspace = Workspace(story, config, repo, redactor, lambda _msg: None, branch=branch)
        start = RunStart(story, config, repo, workspace, redactor, lambda _msg: None, revision)
        where = _where(story, config, repo, start, workspace.path)
        if where["action"] != "passed":
            start.check_model_verify()
            start.check_prices()
        tiers = start.tiers()
        result["start"] = where
        if where["action"] == "passed":
            result["request"] = None
        else:
            result["request"] = _first_request(
                story, config, roles["worker"], start, tiers, where, repo, workspace.path
            )
    except (StartError, RevisionError, GitError) as exc:  # it would end in error before a call
        raise WouldNotStart(f"{story_path}: would not start: {exc}") from exc
    result["verify"] = _verify_plan(config, tiers)
    result["setup"] = _setup_plan(config, story, repo, where)
    result["roles"] = {name: _role(role) for name, role in roles.items()}
    if "memory" in config.roles and memory_on(config, story):
        # one request after the story ends, to distill what it learned (hero.roles.learner)
        result["roles"]["memory"] = _role(config.role("memory"))
    result["budgets"] = _budgets(config, where)
    redacted: dict[str, Any] = redactor.redact_value(result)
    return redacted


# -- where the run would work --------------------------------------------------------------


def _where(
    story: Story, config: Config, repo: TargetRepo, start: RunStart, worktree: Path
) -> dict[str, Any]:
    """Branch, base, afresh or resumed, and the story's repository; read-only git only."""
    from hero.run.revision import run_limits

    ref = story.ref
    old = load_state(config.home, ref)
    budget = run_limits(story, config)[0]
    branch = start.branch  # a follow-up's: the revised story's
    branch_sha = repo.branch_sha(branch)
    notes: list[str] = []
    where: dict[str, Any] = {
        "action": "fresh",
        "branch": branch,
        "branch_exists": branch_sha is not None,
        "base_ref": "",
        "base_sha": "",
        "worktree": str(worktree),
        "worktree_exists": worktree.is_dir(),
        "state": str(ref.state_path(config.home)),
        "round": 1,
        "rounds_done": 0,
        "max_rounds": budget,
        "replay": None,
        "notes": notes,
    }
    if old is not None and old.status == Status.PASSED:
        where.update(action="passed", base_ref=old.base_ref, base_sha=old.base_sha)
        where.update(rounds_done=len(old.rounds), round=None, max_rounds=None)
        notes.append(f"already passed on {old.branch}: nothing to do")
        return where
    revision = start.revision
    if revision is not None:
        tip = revision.check(config.home, repo)  # RevisionError: it would not start
        notes.append(f"a follow-up of {revision.of}: would add rounds on {branch}")
    resumed = (
        old is not None
        and start.resumable(old)
        and (branch_sha is not None or start.recoverable(old))
    )
    if resumed:
        assert old is not None
        if old.status == Status.GAVE_UP:
            old.grant_fresh_budget()  # in memory only, as the start would
            notes.append(f"gave up before: would continue {branch} with new rounds")
        if branch_sha is None:
            notes.append(f"{branch} was deleted: would recreate it at {old.head_sha[:12]}")
        where.update(
            action="resume",
            base_ref=old.base_ref,
            base_sha=old.base_sha,
            rounds_done=len(old.rounds),
            round=len(old.rounds) + 1,
            max_rounds=old.max_rounds(budget),
            spent=_spent(old),
        )
        return where
    heads = start.dependency_heads()
    if revision is not None:
        where.update(base_ref=branch, base_sha=tip)
        if where["worktree_exists"]:
            notes.append(f"{worktree} exists: would be removed (its commits are on {branch})")
    elif len(heads) == 1:
        where.update(base_ref=heads[0][0], base_sha=heads[0][1])
    elif heads:
        names = ", ".join(branch for branch, _ in heads)
        # the merge is a new commit: made by the start, not here (its rules files are
        # shown as the first dependency's head has them)
        where.update(base_ref=f"merge of {names}", base_sha="", rules_from=heads[0][1])
        notes.append(
            f"would make a merge commit of {names} to start from (the request's rules "
            f"files are {heads[0][0]}'s)"
        )
    else:
        base_ref = start.base_ref()
        where.update(base_ref=base_ref, base_sha=start.base_sha(base_ref))
    if revision is None and branch_sha is not None:
        notes.append(f"{branch} exists: would be kept aside and the story started afresh")
    elif revision is None and where["worktree_exists"]:
        notes.append(f"{worktree} exists: would be set aside and the story started afresh")
    if old is not None:
        notes.append(f"its run record ({old.status}) would be started afresh, its spend kept")
        where["spent"] = _spent(old)
    return where


def _spent(state: RunState) -> dict[str, Any]:
    from hero.run.budget import story_spend

    spend = story_spend(state)
    return {"tokens": spend.tokens, "cost_usd": spend.cost_usd, "wall_s": round(spend.wall_s, 3)}


# -- the worker's first request -------------------------------------------------------------


def _first_request(
    story: Story,
    config: Config,
    role: RoleConfig,
    start: RunStart,
    tiers: tuple[VerifyTier, ...],
    where: dict[str, Any],
    repo: TargetRepo,
    worktree: Path,
) -> dict[str, Any]:
    """The worker's first request of the next round, as the client would send it."""
    from hero.agent.replay import Unreplayable, replay_round
    from hero.agent.tools import tool_schemas
    from hero.agent.window import Context, window_for
    from hero.llm.client import request_params
    from hero.llm.usage import estimate_text
    from hero.memory.recall import recall_for
    from hero.roles.worker import build_messages

    n = int(where["round"])
    replay: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = None
    if where["action"] == "resume":
        old = load_state(config.home, story.ref)
        assert old is not None
        trace = story.ref.run_dir(config.home) / f"round-{n}.jsonl"
        try:
            replayed = replay_round(trace, base_sha=old.base_sha, started_at=old.started_at)
        except Unreplayable as exc:
            replayed = None
            where["notes"].append(
                f"round {n} would start over: its trace cannot be replayed ({exc})"
            )
        if replayed is not None and not replayed.done:
            messages = replayed.messages
            replay = {"turns": replayed.turns, "tool_calls": replayed.tool_calls}
            where["notes"].append(
                f"round {n} would resume at turn {replayed.turns + 1}, its conversation "
                "replayed from the trace (then a note that hero restarted is added)"
            )
        elif replayed is not None:
            where["notes"].append(f"round {n}: the worker had finished; its work is checked")
        feedback = old.rounds[-1].feedback if old.rounds else ""
    else:
        feedback = ""
    where["replay"] = replay
    revision = start.revision
    said = revision.worker_feedback(feedback) if revision is not None else {"feedback": feedback}
    if messages is None:
        # as the round would recall it at its start (hero.memory.recall)
        recalled = recall_for(config, story, estimate=estimate_text, say=where["notes"].append)
        if recalled.facts:
            # each with its trust: a machine-written or outside fact is told as lower-trust data
            ids = ", ".join(f"{f.id} (trust {f.trust.value})" for f in recalled.facts)
            where["notes"].append(
                f"memory: the worker would be told {len(recalled.facts)} fact(s): {ids}"
            )
        with _rules_checkout(repo, worktree, where) as rules_root:
            messages = build_messages(
                story,
                tiers,
                rules_root,
                round_no=n,
                max_rounds=int(where["max_rounds"]),
                **said,
                home=config.home,
                builds_on=start.builds_on(),
                memory=recalled.section,
            )
    # as the worker's loop takes them in (hero.agent.loop.Agent.begin): redacted
    redactor = Redactor(config.secrets)
    for message in messages:
        if redactor and isinstance(message.get("content"), str):
            message["content"] = redactor.redact(message["content"])
    tools = tool_schemas()
    window = window_for(config, "worker")
    tokens = Context(window, tools, head=len(messages)).estimate(messages)
    return {
        "url": role.provider.base_url.rstrip("/") + "/chat/completions",
        "headers": sorted(role.provider.headers),  # names only: values may be secrets
        "body": request_params(role, messages, tools),
        "tokens_estimate": tokens,
        "window": {"tokens": window.window, "limit": window.limit, "condense_at": window.trigger},
        "messages": len(messages),
        "tools": len(tools),
    }


@contextmanager
def _rules_checkout(repo: TargetRepo, worktree: Path, where: Mapping[str, Any]) -> Iterator[Path]:
    """A directory holding the repository's rules files as the run would read them: the
    story's repository when it is there and resumed, else the commit the run would lay
    out, its rules files (and the files their symlinks name in it) copied out of git into a
    temporary directory outside the home and the repository, removed after."""
    from hero.roles.repo import MAX_RULES_BYTES, RULE_DIRS, RULE_FILES

    if where["action"] == "resume" and worktree.is_dir():
        yield worktree
        return
    commit = str(where["base_sha"] or where.get("rules_from") or "")
    if where["action"] == "resume":
        commit = repo.branch_sha(str(where["branch"])) or commit
    tmp = Path(tempfile.mkdtemp(prefix="hero-dry-run-"))
    try:
        if commit:
            # a directory's own entries (the trailing "/"), not its subdirectories': what
            # the reader looks at
            wanted = [*RULE_FILES, *(f"{d}/" for d in RULE_DIRS)]
            _copy_out(repo.path, commit, tmp, wanted, MAX_RULES_BYTES + 1)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: How many links deep the copy follows a rules file's symlink to another file of the commit.
MAX_LINK_HOPS = 8
#: The most files copied out: what the reader may look at (its rules files, a rules
#: directory's first MAX_RULE_DIR_ENTRIES entries, one more to say there are more, the
#: files their links name), so that a directory of a million files costs no million reads.
MAX_COPIED = MAX_RULE_DIR_ENTRIES + 64


def _copy_out(repo: Path, commit: str, root: Path, paths: list[str], limit: int) -> None:
    """The files at ``paths`` of ``commit`` (a directory: its files) into ``root``: a
    symlink as a symlink, with the file of the commit it names (hero's reader refuses one
    that leads out), a regular file's first ``limit`` bytes (what the reader reads at most);
    anything else (a submodule) is left out. Read-only git: ``ls-tree`` and ``cat-file``."""
    done: set[str] = set()
    for _hop in range(MAX_LINK_HOPS):
        listing = git(repo, "ls-tree", "-z", "--full-tree", commit, "--", *paths)
        followed: list[str] = []
        for entry in filter(None, listing.split("\0")):
            info, _, path = entry.partition("\t")
            mode, kind, sha = info.split()
            parts = path.split("/")
            if path in done or kind != "blob" or any(p in ("", ".", "..") for p in parts):
                continue
            if len(done) >= MAX_COPIED:
                return
            done.add(path)
            target = root.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = _blob(repo, sha, limit)
            if mode == "120000":  # a symlink
                link = data.decode("utf-8", errors="surrogateescape")
                try:
                    os.symlink(link, target)
                except (OSError, ValueError):  # a name no file system takes: left out
                    continue
                named = posixpath.normpath(posixpath.join(posixpath.dirname(path), link))
                if not link.startswith("/") and not named.startswith(".."):
                    followed.append(named)
            else:
                target.write_bytes(data)
        paths = [p for p in followed if p not in done]
        if not paths:
            return


def _blob(repo: Path, sha: str, limit: int) -> bytes:
    """The first ``limit`` bytes of the blob ``sha``, by git as hero runs it (no hooks, no
    fsmonitor, hero's git environment)."""
    with subprocess.Popen(
        ["git", *NO_PROGRAMS, "cat-file", "blob", sha],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=git_env(),
    ) as proc:
        assert proc.stdout is not None
        data = proc.stdout.read(limit)
        proc.kill()  # the rest is not needed
    return data


# -- the verify plan, the models, the budgets -----------------------------------------------


def _verify_plan(config: Config, tiers: tuple[VerifyTier, ...]) -> dict[str, Any]:
    """Each tier and its commands, their timeout, and the sandbox they would run in
    (bwrap is probed with a sandboxed ``true`` in a temporary directory, as the run does)."""
    from hero.sandbox.bwrap import bwrap_problem

    safety = config.safety
    sandbox: dict[str, Any] = {"mode": safety.sandbox, "sandboxed": False, "network": True}
    if safety.sandbox != "none":
        bwrap = shutil.which("bwrap")
        problem = "bwrap is not installed (not on PATH)" if bwrap is None else bwrap_problem(bwrap)
        if problem:
            sandbox["problem"] = problem
            if safety.sandbox == "bwrap":
                sandbox["problem"] += " (the run would end in error)"
        else:
            sandbox.update(sandboxed=True, network=safety.verify_network)
    return {
        "tiers": [{"name": t.name, "commands": list(t.commands)} for t in tiers],
        "timeout_s": config.verify_timeout_ms / 1000,
        "sandbox": sandbox,
    }


def _setup_plan(
    config: Config, story: Story, repo: TargetRepo, where: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The project's environment the run would take: its commands, its key and whether it
    is made yet (a run that would make it runs them first, with the network unless
    setup_network is off). None without setup."""
    from hero.run.environment import Setup, envs_dir, load, setup_commands

    commands = setup_commands(config, story.setup)
    if not commands:
        return None
    base = where.get("base_sha") or commit_of(repo.path, where.get("base_ref") or "HEAD")
    setup = Setup(config, repo, base, commands, {}, config.home / "setup.log", Redactor(()))
    key = setup.key() if base else ""
    made = bool(key) and load(envs_dir(config.home) / key) is not None
    return {
        "commands": list(commands),
        "network": config.project.setup_network,
        "key": key,
        "made": made,
        "sandboxed": setup.sandboxed(),
    }


def _role(role: RoleConfig) -> dict[str, Any]:
    """A role's model as the run would use it: never its key, only where the key is from."""
    provider = role.provider
    return {
        "provider": provider.name,
        "model": role.model,
        "base_url": provider.base_url,
        "reasoning_effort": role.reasoning_effort,
        "max_output_tokens": role.max_output_tokens,
        "context_window": role.context_window,
        "key_source": role.key_source or None,
    }


def _budgets(config: Config, where: Mapping[str, Any]) -> dict[str, Any]:
    limits = config.worker_limits
    return {
        "max_rounds": where["max_rounds"],
        "rounds_done": where["rounds_done"],
        "limits": {b.key: b.limit for b in config.budgets.each()},
        "worker": {
            "max_turns": limits.max_turns,
            "max_tool_calls": limits.max_tool_calls,
            "max_wall_s": limits.max_wall_s,
            "bash_timeout_s": limits.bash_timeout_s,
            "loop_repeats": limits.loop_repeats,
        },
        "spent": where.get("spent"),
    }


# -- the text ---------------------------------------------------------------------------------


def render_text(plan: Mapping[str, Any]) -> str:
    """The dry run for people: sections, the request's messages in full."""
    story, where = plan["story"], plan["start"]
    out = [f"dry run of {story['key']}: {story['title']} ({story['path']})", ""]
    out.append("start")
    if where["action"] == "passed":
        out.append(f"  already passed on {where['branch']}: nothing to do")
    elif where["action"] == "resume":
        out.append(
            f"  would resume round {where['round']} of {where['max_rounds']} "
            f"({where['rounds_done']} done) on {where['branch']}"
        )
    else:
        out.append(f"  would start afresh: round 1 of {where['max_rounds']} on {where['branch']}")
    base = where["base_sha"][:12] or "(made at the start)"
    out.append(f"  base:     {where['base_ref']} at {base}")
    exists = "exists" if where["worktree_exists"] else "not made yet"
    out.append(f"  worktree: {where['worktree']} ({exists})")
    out.append(f"  record:   {where['state']}")
    out.extend(f"  note: {note}" for note in where["notes"])
    out.append("")
    out.append("models")
    for name, role in plan["roles"].items():
        effort = (
            f", reasoning_effort {role['reasoning_effort']}" if role["reasoning_effort"] else ""
        )
        key = role["key_source"] or "no key sent"
        after = " (one request after the story ends)" if name == "memory" else ""
        out.append(
            f"  {name}: {role['model']} from {role['provider']} at {role['base_url']}"
            f"{effort}; key: {key}{after}"
        )
    out.append("")
    verify = plan["verify"]
    sandbox = verify["sandbox"]
    if sandbox["sandboxed"]:
        box = f"in the bwrap sandbox, network {'on' if sandbox['network'] else 'off'}"
    else:
        box = "without a sandbox" + (f" ({sandbox['problem']})" if sandbox.get("problem") else "")
    setup = plan.get("setup")
    if setup:
        if not setup["sandboxed"]:
            state = "made in the story's repository (no sandbox: nothing is reused)"
        elif setup["made"]:
            state = f"{setup['key']} made: reused, no setup runs"
        else:
            network = "on" if setup["network"] else "off"
            state = f"{setup['key']} not made yet: these run first, network {network}"
        out.append(f"setup (the project's environment: {state})")
        out.extend(f"  $ {cmd}" for cmd in setup["commands"])
        out.append("")
    out.append(f"verify (each command: timeout {verify['timeout_s']:g} s, {box})")
    if not verify["tiers"]:
        out.append("  (no checks)")
    elif where["action"] == "fresh":
        out.append("  (run once on the starting commit before round 1: the baseline)")
    for tier in verify["tiers"]:
        out.append(f"  {tier['name']}:")
        out.extend(f"    $ {cmd}" for cmd in tier["commands"])
    out.append("")
    budgets = plan["budgets"]
    out.append("budgets")
    out.append(f"  rounds: {budgets['max_rounds']} ({budgets['rounds_done']} done)")
    for key, limit in budgets["limits"].items():
        out.append(f"  {key}: {'no limit' if limit is None else f'{limit:g}'}")
    out.append("  worker: " + ", ".join(f"{k} {v:g}" for k, v in budgets["worker"].items()))
    if budgets["spent"]:
        spent = budgets["spent"]
        out.append(
            f"  spent so far: {spent['tokens']} tokens, ${spent['cost_usd']:.4f}, "
            f"{spent['wall_s']:g} s"
        )
    request = plan["request"]
    if request is not None:
        body = request["body"]
        out.append("")
        out.append(
            f"worker's first request: POST {request['url']}, ~{request['tokens_estimate']} "
            f"tokens (window limit {request['window']['limit']}), {request['messages']} "
            f"messages, {request['tools']} tools"
        )
        extra = {k: v for k, v in body.items() if k not in ("messages", "tools")}
        out.extend(f"  {k}: {v}" for k, v in extra.items())
        tools = ", ".join(t["function"]["name"] for t in body.get("tools", ()))
        out.append(f"  tools: {tools}")
        for message in body["messages"]:
            out.append(f"  --- {message['role']} ---")
            content = message.get("content")
            text = content if isinstance(content, str) else str(content)
            out.extend(f"  {line}" if line else "" for line in text.splitlines())
    return "\n".join(out)


def dry_run_command(
    story_path: Path, config: Config, *, as_json: bool, models: Override | None = None
) -> int:
    """`hero run STORY --dry-run [--json]`: print the plan; 0 (errors raise, exit 2)."""
    import json

    plan = dry_run(story_path, config, models)
    print(json.dumps(plan, indent=2) if as_json else render_text(plan), flush=True)
    return 0
