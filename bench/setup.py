#!/usr/bin/env python
"""hero benchmark: what a project's environment (``setup``) costs a story, made and reused.

    python bench/setup.py            # about 1 min on 2 cores (bubblewrap needed)
    python bench/setup.py --runs 3   # the reused and no-setup stories three times each

The project of tests/env_support.py: its tests need ``tinydep``, which pip installs from a
wheel kept in the repository (offline), with ``calc`` installed editable. Each story is a real
``hero run`` (a subprocess) against hero's scripted model over real HTTP, whose worker fixes
the planted bug in one round. Side by side:

- the first story with setup: the environment is made (a virtualenv, pip, the editable install);
- a later story with the same setup: the environment is reused, no setup runs;
- a story on a home with no setup declared (tinydep committed in its repository, its check run
  with this machine's Python).

For each: the time from ``hero run`` to the worker's first model request, and to the end.
The target: a reused environment within 1 s of no setup at all, to the first request.

A report, not a test: it prints the table and exits 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from report import Report, env_line, hero_env, make_home, median, print_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from env_support import CHECK, FIXED, SETUP, make_project

from hero.llm.scripted import ScriptedModel, call, text

COMMIT = "git add calc && git commit -q -m fix"


def _project(path: Path) -> Path:
    """bench/report.py's repository, made the project of tests/env_support.py."""
    from report import make_repo

    repo = make_repo(path)
    (repo / "tests").mkdir()
    make_project(repo)
    return repo


def _vendored(path: Path) -> Path:
    """The project with no environment to make: tinydep unpacked into it, committed, so
    that the check finds it with this machine's Python."""
    from hero.git.ops import DEFAULT_IDENTITY, git

    repo = _project(path)
    wheel = next((repo / "wheels").glob("*.whl"))
    shutil.unpack_archive(wheel, repo, "zip")
    git(repo, "add", "-A", env=DEFAULT_IDENTITY)
    git(repo, "commit", "-q", "-m", "vendored", env={**hero_env(), **DEFAULT_IDENTITY})
    return repo


class Model:
    """The scripted model: the worker fixes calc.sub and commits, the reviewer approves; the
    time of each story's first request is kept."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Any:
        system = str(body["messages"][0].get("content", ""))
        if system.startswith("You are hero's reviewer"):
            answer = {"verdict": "APPROVED", "summary": "Fixed.", "ac_check": [], "comments": []}
            return text(json.dumps(answer))
        task = str(body["messages"][1].get("content", ""))
        story = task.split(":", 1)[0].removeprefix("# Story ").strip()
        with self.lock:
            self.first.setdefault(story, time.monotonic())
        tools = sum(1 for m in body["messages"] if m.get("role") == "tool")
        steps = [
            call("write_file", path="calc/__init__.py", content=FIXED),
            call("bash", command=COMMIT),
            text("Fixed."),
        ]
        return steps[min(tools, len(steps) - 1)]


def story(home: Path, story_id: str) -> Path:
    path = home / "inbox" / f"{story_id}.md"
    path.write_text(
        f"---\nid: {story_id}\ntitle: Fix sub\nverify:\n  - {CHECK}\n---\n\n"
        "## Goal\nFix calc.sub.\n\n## Acceptance Criteria\n- [ ] sub(5, 3) == 2\n"
    )
    return path


def run(home: Path, story_id: str, model: Model, env: dict[str, str]) -> tuple[float, float, dict]:
    """(seconds to the first model request, seconds in all, the run record)."""
    path = story(home, story_id)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "hero", "run", str(path), "--home", str(home)],
        env=env,
        capture_output=True,
        text=True,
    )
    took = time.monotonic() - started
    state = json.loads((home / "runs" / "state" / f"{story_id}.json").read_text())
    if done.returncode != 0 or state["status"] != "passed":
        raise RuntimeError(f"{story_id}: {state['status']}: {done.stdout}{done.stderr}")
    return model.first[story_id] - started, took, state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of the reused and bare stories")
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        print("bubblewrap is not installed: the environment is shared only in its sandbox")
        return 0
    began = time.monotonic()
    report = Report()
    model = Model()
    with ScriptedModel(model) as server, tempfile.TemporaryDirectory() as tmp:
        setup = "setup:\n" + "".join(f"  - {json.dumps(c)}\n" for c in SETUP)
        with_setup = make_home(Path(tmp) / "a", server.base_url, setup, repo_maker=_project)
        bare = make_home(Path(tmp) / "b", server.base_url, repo_maker=_vendored)
        env = hero_env()

        first = run(with_setup, "first", model, env)
        reused = [run(with_setup, f"reused{n}", model, env) for n in range(args.runs)]
        none = [run(bare, f"bare{n}", model, env) for n in range(args.runs)]

    made_s = first[2]["setup"]["seconds"]
    report.section("to the worker's first model request (s)")
    report.add("first story with setup (makes the environment)", f"{first[0]:.2f}")
    to_first_reused = median([r[0] for r in reused])
    to_first_bare = median([r[0] for r in none])
    report.add("a later story, environment reused (median)", f"{to_first_reused:.2f}")
    report.add("a story with no setup declared (median)", f"{to_first_bare:.2f}")
    gap = to_first_reused - to_first_bare
    report.add("reused minus no setup", f"{gap:+.2f}", "< 1.00", gap < 1.0)
    report.section("the whole story, one round (s)")
    report.add("first story with setup", f"{first[1]:.2f}")
    report.add(
        "a later story, environment reused (median)", f"{median([r[1] for r in reused]):.2f}"
    )
    report.add("a story with no setup declared (median)", f"{median([r[1] for r in none]):.2f}")
    report.section("the setup")
    report.add("making the environment (venv, pip, editable install)", f"{made_s:.2f} s")
    report.add("reused by every later story", str(all(r[2]["setup"]["reused"] for r in reused)))
    print(env_line("pip"))
    print_report(report, began)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
