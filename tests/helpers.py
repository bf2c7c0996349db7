"""Helpers shared by the tests that script hero's model and watch real processes."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from conftest import git

from hero.testing.scripted import Reply, text


def is_review(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith("You are hero's reviewer")


def task_text(body: dict[str, Any]) -> str:
    return str(body["messages"][1]["content"])


def worker_round(body: dict[str, Any]) -> int:
    m = re.search(r"This is round (\d+) of at most", task_text(body))
    assert m
    return int(m.group(1))


def review_round(body: dict[str, Any]) -> int:
    m = re.search(r"## Verifier summary \(round (\d+)\)", task_text(body))
    assert m
    return int(m.group(1))


def step_of(body: dict[str, Any]) -> int:
    """How many answers the model already gave in this conversation."""
    return sum(1 for m in body["messages"] if m.get("role") == "assistant")


def verdict(v: str, summary: str = "Reviewed.") -> Reply:
    return text(json.dumps({"verdict": v, "summary": summary, "ac_check": [], "comments": []}))


def commit_once(name: str) -> str:
    """A command that commits ``name``.txt, once, however often it is run."""
    return (
        f"test -f {name}.txt || "
        f"{{ echo {name} > {name}.txt && git add -A && git commit -q -m {name}; }}"
    )


def long_command(pid_file: Path | str) -> str:
    """Sleep in a background child (pid in ``pid_file``) unless an earlier run already did."""
    return (
        f"test -f {pid_file} || "
        f"{{ sleep 30 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait; }}"
    )


def alive(pid: int) -> bool:
    """Running, and not a zombie (nothing reaps orphans on some machines)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def wait_dead(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def load_state(home: Path, story_id: str = "s1") -> dict[str, Any]:
    return json.loads((home / "runs" / "state" / f"{story_id}.json").read_text())


def is_ancestor(repo: Path, sha: str, ref: str) -> bool:
    return (
        subprocess.run(["git", "merge-base", "--is-ancestor", sha, ref], cwd=repo).returncode == 0
    )


def sha_of(repo: Path, subject: str, ref: str = "hero/s1") -> str:
    for line in git(repo, "log", "--format=%H %s", f"main..{ref}").splitlines():
        sha, _, subj = line.partition(" ")
        if subj == subject:
            return sha
    raise AssertionError(f"no commit '{subject}' on {ref}")
