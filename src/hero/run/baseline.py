"""The baseline: the story's checks run on its starting commit, before any change.

A check that already fails there is not the worker's doing: the worker is told so before its
first turn, the verifier's report says which failures were there before and which the story
brought, and ``hero status``, ``--json``, the events and the status page show the baseline.
A story that exists to fix a failing check still works: the baseline only informs.

The checks run as in a round (a red tier skips the later ones: theirs are recorded as not
run, ``passed: null``), in the project's environment and sandbox, under the guard of a round's
checks (what they do to the branch or the refs is undone). The result is kept per starting commit, environment and check text
(``envs/baselines/<key>.json``): a story that starts where another started runs none again.
What the checks changed, committed or left untracked is undone before round 1.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hero.fsio import atomic_write
from hero.git.ops import git
from hero.redact import Redactor
from hero.roles.verifier import CommandCheck, run_verify
from hero.run.environment import envs_dir
from hero.sandbox.bwrap import Sandbox
from hero.story.record import VerifyTier

#: The end of a failing check's output kept in the record and told to the worker.
TAIL_CHARS = 600


def baseline_key(commit: str, env_key: str, tiers: tuple[VerifyTier, ...], sandboxed: bool) -> str:
    data = {
        "commit": commit,
        "env": env_key,
        "tiers": [[t.name, list(t.commands)] for t in tiers],
        "sandboxed": sandboxed,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


def run_baseline(
    tiers: tuple[VerifyTier, ...],
    worktree: Path,
    *,
    home: Path,
    branch: str,
    commit: str,
    env_key: str,
    env: Mapping[str, str],
    timeout_s: float,
    log_path: Path,
    sandbox: Sandbox | None,
    redact: Redactor,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """The baseline record: ``{commit, cached, checks: [{tier, command, passed, exit_code,
    tail}], log}``; from the cache when this commit, environment and checks ran before."""
    key = baseline_key(commit, env_key, tiers, sandbox is not None)
    cache = envs_dir(home) / "baselines" / f"{key}.json"
    found = _cached(cache, commit)
    if found is not None:
        return {**found, "cached": True}
    result = run_verify(
        tiers,
        worktree,
        timeout_s=timeout_s,
        env=env,
        log_path=log_path,
        cancel=cancel,
        redact=redact,
        sandbox=sandbox,
    )
    _put_back(worktree, branch, commit)
    ran = {c.command for c in result.commands}
    skipped = [  # a tier after a red one: not run, as in a round
        {"tier": t.name, "command": c, "passed": None, "exit_code": None, "timed_out": False}
        for t in tiers
        for c in t.commands
        if t.name in result.skipped_tiers and c not in ran
    ]
    record = {
        "commit": commit,
        "checks": [*(_check(c, c.tier) for c in result.commands), *skipped],
        "log": str(log_path),
    }
    if not (cancel is not None and cancel.is_set()):
        cache.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(cache, json.dumps(record).encode())
    return {**record, "cached": False}


def _check(check: CommandCheck, tier: str) -> dict[str, Any]:
    passed = check.exit_code == 0
    return {
        "tier": tier,
        "command": check.command,
        "passed": passed,
        "exit_code": check.exit_code,
        "timed_out": check.timed_out,
        "tail": "" if passed else check.tail[-TAIL_CHARS:],
    }


def _cached(path: Path, commit: str) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("commit") != commit:
        return None
    checks = data.get("checks")
    if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
        return None
    return data


def _put_back(worktree: Path, branch: str, commit: str) -> None:
    """The worktree back on ``branch`` at ``commit`` as the story starts there: what the
    checks committed, changed or left untracked is gone (what git ignores is left: a
    ``git add -A`` of the worker's would not take it either)."""
    git(worktree, "checkout", "-q", "--force", "-B", branch, commit)
    git(worktree, "clean", "-ffdq")


def failing(baseline: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """command -> its check, for each check that failed on the starting commit."""
    checks = (baseline or {}).get("checks") or []
    return {
        str(c.get("command")): c
        for c in checks
        if isinstance(c, Mapping) and c.get("passed") is False
    }


def worker_note(baseline: Mapping[str, Any] | None) -> str:
    """What the worker is told of the checks that fail before any change ("" for none)."""
    failed = failing(baseline)
    if not failed:
        return ""
    lines = [
        "\n## Checks that already fail before any change (on the commit you start from)",
        "These failures are not yours. Fix them if the story asks for it; otherwise do not "
        "chase them, and do not make them worse.",
    ]
    for command, check in failed.items():
        tail = str(check.get("tail") or "").strip()
        lines.append(f"- `{command}` exited {check.get('exit_code')}")
        if tail:
            lines.append("  ```\n  " + "\n  ".join(tail.splitlines()[-8:]) + "\n  ```")
    return "\n".join(lines) + "\n"


def summary(baseline: Mapping[str, Any] | None) -> str:
    """One line for `hero status`: how many checks passed on the starting commit."""
    checks = [c for c in (baseline or {}).get("checks") or [] if c.get("passed") is not None]
    if not checks:
        return ""
    failed = len(failing(baseline))
    return f"{len(checks) - failed}/{len(checks)} checks passed before any change" + (
        f" ({failed} already failing)" if failed else ""
    )
