"""The verifier: the story's checks, tier by tier, in the worktree.

Fail-fast between tiers (a red unit tier makes the slow tiers pointless) but every command
within a tier runs, so the worker sees all of that tier's failures at once.

Verify commands a planner model wrote (a plan's stories) are the model's, not the user's:
:func:`model_verify_tiers` decides whether they run at all (``model_verify``), and
:func:`policy_problems` checks them against the command policy, so a plan text that talks
the planner into ``curl ... $(git config ...)`` is refused before anything runs.

A verification of ``ONE_SANDBOX_FROM`` checks or more runs them in one sandbox (a
``hero.sandbox.session.SandboxSession`` made for it and ended with it), not one each: each
check is as isolated from the next as the round's commands are from each other (its own
timeout, cancel, output cap, environment, exit code and limits; nothing it started outlives
it). What they share is ``/tmp`` (with ``HOME``), ``/var/tmp`` and ``/dev/shm``, empty at the
first check. It is never the worker's round's sandbox: what the worker left running or in its
``/tmp`` must not reach a check. Fewer checks get a sandbox each, as that costs less there.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hero.agent.tools.policy import Policy
from hero.config.sections import Safety
from hero.errors import Interrupted
from hero.redact import Redactor
from hero.runner import CommandHost, CommandResult, run_command
from hero.sandbox.bwrap import Sandbox
from hero.sandbox.session import SandboxSession
from hero.story.record import VerifyTier

TAIL_CHARS = 2_000
#: From how many checks a verification runs them in one sandbox. Its start (the sandbox's
#: agent is a Python: about 50 ms of CPU, 40-50 ms of wall time) pays from here on against
#: a sandbox each (about 4 ms of CPU a check as getrusage counts it, 9-40 ms of wall time,
#: much of it in the kernel's namespace set-up): bench/safety.py, section 4.
ONE_SANDBOX_FROM = 5


#: What to do about a model-written verify command the policy refuses (said with it).
MODEL_VERIFY_HINT = (
    "a planner model wrote it: edit the story's verify, or set model_verify: false in "
    "config/roles.yaml to run default_verify instead"
)


def model_verify_tiers(
    safety: Safety, tiers: tuple[VerifyTier, ...], default: tuple[str, ...]
) -> tuple[VerifyTier, ...]:
    """The tiers that run for a plan's story whose ``tiers`` a planner model wrote: those,
    unless ``model_verify`` is off; then ``default`` (default_verify) as one tier, or none."""
    if safety.model_verify:
        return tiers
    return (VerifyTier("default", default),) if default else ()


def policy_problems(safety: Safety, tiers: tuple[VerifyTier, ...]) -> list[str]:
    """The commands of ``tiers`` (a planner model wrote them) that the command policy
    (allow_commands, deny_commands) refuses, one line each naming the command and the rule.
    None when ``model_verify`` is off (they never run) or there is no policy."""
    if not safety.model_verify:
        return []
    policy = Policy.from_rules(allow=safety.allow_commands, deny=safety.deny_commands)
    if policy is None:
        return []
    found = []
    for tier in tiers:
        for command in tier.commands:
            why = policy.refusal(command)
            if why:
                found.append(
                    f"verify command `{command}` breaks the command policy "
                    f"(allow_commands/deny_commands of config/roles.yaml): {' '.join(why.split())}"
                )
    return found


@dataclass(frozen=True)
class CommandCheck:
    tier: str
    command: str
    exit_code: int
    duration_s: float
    timed_out: bool
    tail: str
    #: how it did on the story's starting commit, before any change (hero.run.baseline):
    #: "passed", "failed", or "" (not known)
    baseline: str = ""


@dataclass(frozen=True)
class VerifyResult:
    passed: bool
    commands: tuple[CommandCheck, ...] = ()
    skipped_tiers: tuple[str, ...] = ()
    log_path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "commands": [asdict(c) for c in self.commands],
            "skipped_tiers": list(self.skipped_tiers),
            "log": self.log_path,
        }

    def summary(self) -> str:
        """A short text for the reviewer and for the worker's next round."""
        if not self.commands:
            return "No verify commands are configured for this story."
        lines = []
        for c in self.commands:
            mark = "PASS" if c.exit_code == 0 else "FAIL"
            extra = " (timed out)" if c.timed_out else ""
            if c.exit_code != 0 and c.baseline:
                extra += (
                    " (already failing before any change)"
                    if c.baseline == "failed"
                    else " (passed before the story's changes: the story broke it)"
                )
            lines.append(f"- [{mark}] {c.tier}: `{c.command}` exit {c.exit_code}{extra}")
        if self.skipped_tiers:
            lines.append("- not run (an earlier tier failed): " + ", ".join(self.skipped_tiers))
        return "\n".join(lines)

    def failures(self) -> str:
        parts = []
        for c in self.commands:
            if c.exit_code != 0:
                before = " (it failed before any change too)" if c.baseline == "failed" else ""
                parts.append(
                    f"`{c.command}` exited {c.exit_code}{before}; end of its output:\n```\n"
                    f"{c.tail}\n```"
                )
        return "\n\n".join(parts)


def _before(baseline: Mapping[str, bool] | None, command: str) -> str:
    if baseline is None or command not in baseline:
        return ""
    return "passed" if baseline[command] else "failed"


def run_verify(
    tiers: tuple[VerifyTier, ...],
    cwd: Path,
    *,
    timeout_s: float,
    env: Mapping[str, str],
    log_path: Path,
    cancel: threading.Event | None = None,
    redact: Redactor | None = None,
    sandbox: Sandbox | CommandHost | None = None,
    on_command: Callable[[CommandCheck], None] | None = None,
    baseline: Mapping[str, bool] | None = None,
) -> VerifyResult:
    """Run the tiers; every secret in ``redact`` is taken out of each command's output
    before it is logged or kept (the tail that reaches the reviewer and the feedback).
    With a ``Sandbox`` the checks run in one sandbox of its making, or one each when they
    are few (``checks_host``); a ``CommandHost`` is used as it is; ``on_command`` is told of
    each command once it ended (the event stream, hero.run.events). ``baseline``: command ->
    whether it passed on the story's starting commit (hero.run.baseline), said with each."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    checks: list[CommandCheck] = []
    skipped: list[str] = []
    passed = True
    count = sum(len(tier.commands) for tier in tiers)
    with open(log_path, "w", encoding="utf-8") as log, checks_host(sandbox, cwd, count) as host:
        for tier in tiers:
            if not passed:
                skipped.append(tier.name)
                log.write(f"=== tier {tier.name}: skipped, an earlier tier failed\n")
                continue
            for command in tier.commands:
                shown = redact.redact(command) if redact else command
                log.write(f"=== tier {tier.name}: $ {shown}\n")
                log.flush()
                started = time.time()
                result = run_command(
                    command, cwd, timeout_s=timeout_s, env=env, cancel=cancel, sandbox=host
                )
                if result.cancelled:
                    raise Interrupted(f"verify command cancelled: {command}")
                output = _with_notes(result)
                output = redact.redact(output) if redact else output
                log.write(output)
                if output and not output.endswith("\n"):
                    log.write("\n")
                note = f" (timed out after {timeout_s:g} s)" if result.timed_out else ""
                log.write(f"=== exit {result.exit_code}{note} in {time.time() - started:.2f} s\n\n")
                log.flush()
                check = CommandCheck(
                    tier=tier.name,
                    command=command,
                    exit_code=result.exit_code,
                    duration_s=round(result.duration_s, 3),
                    timed_out=result.timed_out,
                    tail=output[-TAIL_CHARS:],
                    baseline=_before(baseline, command),
                )
                checks.append(check)
                if on_command is not None:
                    on_command(check)
                if result.exit_code != 0:
                    passed = False
        if isinstance(host, SandboxSession) and host.problem:
            log.write(
                "=== the checks each ran in a sandbox of their own (slower): the shared one "
                f"could not be made: {host.problem}\n"
            )
    return VerifyResult(passed, tuple(checks), tuple(skipped), str(log_path))


@contextlib.contextmanager
def checks_host(
    sandbox: Sandbox | CommandHost | None, cwd: Path, count: int
) -> Iterator[Sandbox | CommandHost | None]:
    """Where one verification's ``count`` checks run: for a ``Sandbox`` and at least
    ``ONE_SANDBOX_FROM`` checks, one ``SandboxSession`` rooted at ``cwd`` for all of them,
    ended (with everything in it) when the block ends, also on a cancel; anything else as it
    is. A session that cannot be made gives each check a sandbox of its own, as before."""
    if not isinstance(sandbox, Sandbox) or count < ONE_SANDBOX_FROM:
        yield sandbox
        return
    with SandboxSession(sandbox, cwd) as session:
        yield session


def _with_notes(result: CommandResult) -> str:
    """The check's output, then what hero saw of it beside: a sandbox limit it hit, the
    sandbox ending under it (a clear failure, not a bare exit code)."""
    notes = []
    if result.limit_note:
        notes.append(f"hero: sandbox limit: {result.limit_note}")
    if result.sandbox_note:
        notes.append(f"hero: {result.sandbox_note}")
    if not notes:
        return result.output
    sep = "" if not result.output or result.output.endswith("\n") else "\n"
    return result.output + sep + "\n".join(notes) + "\n"
