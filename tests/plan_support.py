"""What the plan tests share: writing a plan's folder (its manifest and stories), a stateless
scripted model for a plan's stories (:class:`PlanPolicy`), and reading their branches and records."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from conftest import git
from helpers import (
    Hero,
    is_review,
    step_of,
    task_text,
    verdict,
    worker_round,
)

from hero.llm.scripted import Reply, call, text
from hero.plans.manifest import Manifest, ManifestStory, dump_manifest

#: How long a parallel story's first worker turn waits to see its sibling's.
PARALLEL_WAIT_S = 60.0


APPROVED = verdict("APPROVED", "Good.")


def write_plan(home: Path, name: str, stories: Mapping[str, Sequence[str]]) -> Path:
    """``inbox/<name>/``: one story file per id (title ``<name> <id>``, its ``depends_on``,
    verify ``test -f <id>.txt``) and a manifest that records them; returns the folder."""
    folder = home / "inbox" / name
    folder.mkdir(parents=True)
    for story_id, deps in stories.items():
        write_plan_story(folder, story_id, deps=deps)
    source = home / f"{name}-plan.md"
    source.write_text(f"# Plan {name}\n")
    manifest = Manifest(
        name=name,
        source=str(source),
        source_sha256=hashlib.sha256(source.read_bytes()).hexdigest(),
        created_at="2025-01-31T12:00:00Z",
        stories=tuple(
            ManifestStory(story_id, title_of(name, story_id), tuple(deps))
            for story_id, deps in stories.items()
        ),
    )
    (folder / "_manifest.yaml").write_text(dump_manifest(manifest))
    return folder


def write_plan_story(
    folder: Path, story_id: str, *, deps: Sequence[str] = (), verify: Sequence[str] = ()
) -> Path:
    front: dict[str, Any] = {
        "id": story_id,
        "title": title_of(folder.name, story_id),
        "depends_on": list(deps),
        "verify": list(verify) or [f"test -f {story_id}.txt"],
    }
    path = folder / f"{story_id}.md"
    path.write_text(
        "---\n"
        + yaml.safe_dump(front, sort_keys=False)
        + f"---\n\n## Goal\nAdd {story_id}.txt.\n\n## Acceptance Criteria\n"
        f"- [ ] {story_id}.txt exists\n"
    )
    return path


def title_of(plan: str, story_id: str) -> str:
    return f"{plan} {story_id}"


def story_line(body: dict[str, Any]) -> tuple[str, str]:
    """(id, title) from the task's "# Story <id>: <title>" line (worker and reviewer)."""
    m = re.search(r"^# Story (\S+?): (.*)$", task_text(body), re.M)
    assert m, "a task without its story line"
    return m.group(1), m.group(2).strip()


def commit_file(name: str, content: str) -> str:
    """A command that commits ``name`` holding ``content``, once, however often it is run."""
    return (
        f"test -f {name} || {{ printf '%s\\n' {shlex.quote(content)} > {name} "
        f"&& git add -A && git commit -q -m {shlex.quote('add ' + name)}; }}"
    )


@dataclass
class PlanPolicy:
    """The scripted model for every story of every plan.

    A worker runs ``commands[id]`` (default: commit ``<id>.txt`` holding the story's title),
    one bash call each, then says it is done. The reviewer answers ``reviews[id]``
    (default: approve). Stories in ``meet`` wait, in their first worker turn, until every
    one of them has had its first worker turn (``met`` records who saw all the others).
    """

    commands: dict[str, list[str]] = field(default_factory=dict)
    reviews: dict[str, Reply] = field(default_factory=dict)
    meet: set[str] = field(default_factory=set)
    met: set[str] = field(default_factory=set)
    _arrived: dict[str, threading.Event] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._arrived = {sid: threading.Event() for sid in self.meet}

    def __call__(self, body: dict[str, Any]) -> Reply:
        sid, title = story_line(body)
        if is_review(body):
            return self.reviews.get(sid, APPROVED)
        step = step_of(body)
        if sid in self._arrived and step == 0 and worker_round(body) == 1:
            self._arrived[sid].set()
            if all(e.wait(PARALLEL_WAIT_S) for e in self._arrived.values()):
                self.met.add(sid)
        steps = self.commands.get(sid) or [commit_file(f"{sid}.txt", title)]
        if step < len(steps):
            return call("bash", command=steps[step])
        return text(f"{sid} done.")


def state_of(home: Path, plan: str, sid: str) -> dict[str, Any]:
    path = home / "runs" / "state" / "plans" / plan / f"{sid}.json"
    return json.loads(path.read_text())


def has_branch(repo: Path, branch: str) -> bool:
    found = subprocess.run(
        ["git", "rev-parse", "-q", "--verify", f"refs/heads/{branch}"],
        cwd=repo,
        capture_output=True,
    )
    return found.returncode == 0


def show(repo: Path, ref: str, path: str) -> str:
    return git(repo, "show", f"{ref}:{path}")


#: Generous "did not hang" bounds for a whole plan on a loaded machine, not speed checks.
PLAN_TIMEOUT_S = 300.0


class RunPlan(Hero):
    """`python -m hero run-plan NAME --home HOME -v` as a child process, output to files."""

    rc: int | None = None  # set by the run_plan fixture once it has ended

    def __init__(self, home: Path, name: str, log_dir: Path, tag: str) -> None:
        self.out = log_dir / f"{tag}.out"
        self.err = log_dir / f"{tag}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hero", "run-plan", name, "--home", str(home), "-v"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=log_dir,
            )

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")
