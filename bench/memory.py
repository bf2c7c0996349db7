#!/usr/bin/env python
"""hero benchmark: what project memory saves, in rounds and model tokens per story.

    python bench/memory.py           # five stories with memory on, then off (about 1-2 min)
    python bench/memory.py --quick   # the first three stories

A generated repository (``calc``) and a sequence of stories where later stories need what
earlier ones learned:

- the repository's package refuses to import unless ``APP_ENV`` is set, so a new test module
  must set ``APP_ENV=test`` before it imports ``calc`` (the check fails otherwise, and says
  why on its last line);
- the reviewer insists on test functions named ``test_<unit>_<behaviour>``;
- ``evaluate(expr)`` is tempting to write with ``eval()``, which the reviewer blocks.

Each story is a real ``hero run`` (a subprocess) on one home, in order, with hero's
scripted model over real HTTP in this process playing a model that USES what its prompt tells
it: it reads the worker's first user message, and what the memory section (or the previous
round's feedback) says, it does right in that round; what nobody told it, it gets wrong
first. Without being told, it needs the naming convention asked twice (its first fix,
``test_sub``, still lacks the behaviour), which is also what makes the learner keep it as a
convention. The same sequence runs with ``memory_enabled: true`` and ``false`` on fresh
homes. Rounds and tokens come from the stories' run records (``runs/state/<id>.json``);
the prefix check compares the recorded requests: within each round, every turn's system
message and first user message must be the same bytes as the round's first turn's.

A report, not a test: it prints the table and exits 0.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from report import GIT_ISOLATION, Report, env_line, hero_env, make_home, print_report

from hero.git.ops import DEFAULT_IDENTITY, git
from hero.llm.scripted import Reply, ScriptedModel, call, text
from hero.memory.recall import FACTS_HEADING

MAX_ROUNDS = 5
CONVENTION = "Name test functions test_<unit>_<behaviour>, as the rest of the suite does."
NO_EVAL = "evaluate must not use eval(): parse the expression instead."
ENV_ERROR = "RuntimeError: APP_ENV is not set: the tests need APP_ENV=test"
ROUND_RE = re.compile(r"This is round (\d+) of at most")
STORY_RE = re.compile(r"^# Story (\S+?):", re.MULTILINE)


@dataclass(frozen=True)
class Story:
    id: str
    title: str
    goal: str
    module: str  # calc/<module>.py and tests/test_<module>.py
    func: str
    behaviour: str  # the <behaviour> of a well-named test
    impl: str  # the right implementation
    tempting: str = ""  # an implementation the reviewer blocks ("" : none)


EVAL_IMPL = "def evaluate(expr):\n    return eval(expr)\n"
PARSE_IMPL = (
    "import ast\nimport operator\n\n"
    "OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}\n\n\n"
    "def _walk(node):\n"
    "    if isinstance(node, ast.Constant):\n        return node.value\n"
    "    if isinstance(node, ast.BinOp):\n"
    "        return OPS[type(node.op)](_walk(node.left), _walk(node.right))\n"
    "    raise ValueError('unsupported expression')\n\n\n"
    "def evaluate(expr):\n    return _walk(ast.parse(expr, mode='eval').body)\n"
)

STORIES = (
    Story("add-sub", "Add sub", "Add `sub(a, b)` to calc", "sub", "sub", "subtracts",
          "def sub(a, b):\n    return a - b\n"),
    Story("add-mul", "Add mul", "Add `mul(a, b)` to calc", "mul", "mul", "multiplies",
          "def mul(a, b):\n    return a * b\n"),
    Story("add-evaluate", "Add evaluate", "Add `evaluate(expr)` to calc: it computes an "
          "arithmetic expression such as `2+3*4`", "evaluate", "evaluate", "computes",
          PARSE_IMPL, tempting=EVAL_IMPL),
    Story("add-div", "Add div", "Add `div(a, b)` to calc", "div", "div", "divides",
          "def div(a, b):\n    return a / b\n"),
    Story("evaluate-minus", "Evaluate with minus", "Make calc's `evaluate(expr)` compute "
          "expressions with a minus, such as `7-2*3`", "evaluate2", "evaluate", "subtracts",
          PARSE_IMPL, tempting=EVAL_IMPL),
)  # fmt: skip


def story_text(s: Story) -> str:
    return (
        f"---\nid: {s.id}\ntitle: {s.title}\nverify:\n"
        f"  - {sys.executable} -m unittest -q tests.test_{s.module}\n---\n\n"
        f"## Goal\n{s.goal}, in `calc/{s.module}.py`, with its unit tests in "
        f"`tests/test_{s.module}.py` (the tests run with python -m unittest).\n\n"
        f"## Acceptance Criteria\n- [ ] `{s.func}` works and its tests pass\n"
    )


def make_repo(path: Path) -> Path:
    """calc, whose package refuses to import without APP_ENV, and one test that sets it."""
    (path / "calc").mkdir(parents=True)
    (path / "tests").mkdir()
    (path / "calc" / "__init__.py").write_text(
        "import os\n\nif not os.environ.get('APP_ENV'):\n"
        f"    raise RuntimeError({ENV_ERROR.split(': ', 1)[1]!r})\n\n\n"
        "def add(a, b):\n    return a + b\n"
    )
    (path / "tests" / "__init__.py").write_text("")
    (path / "tests" / "test_add.py").write_text(
        "import os\nimport unittest\n\nos.environ.setdefault('APP_ENV', 'test')\n\n"
        "import calc  # noqa: E402\n\n\nclass AddTest(unittest.TestCase):\n"
        "    def test_add_sums(self):\n        self.assertEqual(calc.add(2, 3), 5)\n"
    )
    (path / ".gitignore").write_text("__pycache__/\n")
    env = {**GIT_ISOLATION, **DEFAULT_IDENTITY}
    git(path, "init", "-q", "-b", "main", env=env)
    git(path, "add", "-A", env=env)
    git(path, "commit", "-q", "-m", "initial", env=env)
    return path


# --------------------------------------------------------------------------- the model


@dataclass
class Model:
    """The scripted worker and reviewer. The worker decides once per round, from the round's
    first user message (the same bytes on every turn); ``naming_asks`` counts, per story, the
    rounds whose feedback asked for the convention (a model not told it fixes it in two goes),
    and ``learned`` what a story's feedback already taught: the fix stays on the story's
    branch from round to round, as a real model's edit of its own files would."""

    stories: dict[str, Story]
    naming_asks: dict[str, int] = field(default_factory=dict)
    learned: dict[str, set[str]] = field(default_factory=dict)
    plans: dict[tuple[str, int], list[Reply]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Reply:
        system = str(body["messages"][0]["content"])
        task = str(body["messages"][1]["content"])
        m = STORY_RE.search(task)
        assert m, "a request without its story"
        story = self.stories[m.group(1)]
        if system.startswith("You are hero's reviewer"):
            return review(story, task)
        n = int(ROUND_RE.search(task).group(1))  # type: ignore[union-attr]
        with self.lock:
            plan = self.plans.get((story.id, n))
            if plan is None:
                plan = self.plans[(story.id, n)] = self.plan(story, task)
        step = sum(1 for msg in body["messages"] if msg.get("role") == "assistant")
        return plan[min(step, len(plan) - 1)]

    def plan(self, s: Story, task: str) -> list[Reply]:
        memory = task.partition(FACTS_HEADING)[2].partition("\n## ")[0]
        feedback = task.partition("## Feedback on round")[2]
        learned = self.learned.setdefault(s.id, set())
        learned |= {w for w in ("APP_ENV", "eval()") if w in feedback}
        env_known = "APP_ENV" in memory or "APP_ENV" in learned
        if "test_‹unit›_‹behaviour›" in memory or "test_<unit>_<behaviour>" in memory:
            name = f"test_{s.func}_{s.behaviour}"
        elif "test_<unit>_<behaviour>" in feedback or self.naming_asks.get(s.id):
            if "test_<unit>_<behaviour>" in feedback:
                self.naming_asks[s.id] = self.naming_asks.get(s.id, 0) + 1
            half = self.naming_asks[s.id] == 1
            name = f"test_{s.func}" if half else f"test_{s.func}_{s.behaviour}"
        else:
            name = f"test{s.func.capitalize()}"
        avoid_eval = "eval()" in memory or "eval()" in learned
        impl = s.tempting if s.tempting and not avoid_eval else s.impl
        setup = "os.environ.setdefault('APP_ENV', 'test')\n\n" if env_known else ""
        call_src = {
            "sub": "mod.sub(5, 3), 2",
            "mul": "mod.mul(4, 3), 12",
            "div": "mod.div(6, 3), 2",
        }.get(s.func, "mod.evaluate('7-2*3'), 1")
        tests = (
            f"import os\nimport unittest\n\n{setup}"
            f"import calc.{s.module} as mod  # noqa: E402\n\n\n"
            f"class {s.func.capitalize()}Test(unittest.TestCase):\n"
            f"    def {name}(self):\n        self.assertEqual({call_src})\n"
        )
        return [
            call("write_file", path=f"calc/{s.module}.py", content=impl),
            call("write_file", path=f"tests/test_{s.module}.py", content=tests),
            call("bash", command=f"git add -A && git commit -q -m {s.id}"),
            text("Done."),
        ]


def review(s: Story, task: str) -> Reply:
    """The reviewer insists on the naming convention and blocks eval()."""
    diff = task.partition("## Diff against the base")[2]
    comments: list[dict[str, str]] = []
    if "return eval(" in diff:
        comments.append({"severity": "blocker", "file": f"calc/{s.module}.py", "comment": NO_EVAL})
    names = re.findall(r"^\+\s+def (test\w*)\(", diff, re.MULTILINE)
    if any(not re.fullmatch(r"test_[a-z0-9]+_[a-z0-9_]+", n) for n in names):
        comments.append({"severity": "nit", "comment": CONVENTION})
    verdict = "CHANGES_REQUESTED" if comments else "APPROVED"
    return text(
        json.dumps(
            {
                "verdict": verdict,
                "summary": "Not yet." if comments else "Good.",
                "ac_check": [{"ac": f"`{s.func}` works", "satisfied": True, "commit": ""}],
                "comments": comments,
            }
        )
    )


# --------------------------------------------------------------------------- the runs


@dataclass
class Outcome:
    story: str
    status: str
    rounds: int
    tokens: int
    turns: int
    prefix_stable: bool
    told_facts: int


def run_sequence(
    base: Path, stories: Sequence[Story], memory: bool
) -> tuple[list[Outcome], list[str]]:
    """The stories in order on one fresh home; their outcomes and the memory's facts after."""
    model_logic = Model({s.id: s for s in stories})
    model = ScriptedModel(model_logic).start()
    try:
        knobs = f"max_retries: {MAX_ROUNDS}\nmemory_enabled: {str(memory).lower()}\n"
        home = make_home(base, model.base_url, knobs, repo_maker=make_repo)
        out = []
        for s in stories:
            path = home / "inbox" / f"{s.id}.md"
            path.write_text(story_text(s))
            seen = len(model.requests)
            subprocess.run(
                [sys.executable, "-m", "hero", "run", str(path), "--home", str(home)],
                env=hero_env(),
                check=False,
                capture_output=True,
                timeout=600,
            )
            state = json.loads((home / "runs" / "state" / f"{s.id}.json").read_text())
            usage = state.get("usage") or {}
            mine = [
                r.body
                for r in model.requests[seen:]
                if not str(r.body["messages"][0]["content"]).startswith("You are hero's reviewer")
            ]
            out.append(
                Outcome(
                    s.id,
                    str(state["status"]),
                    len(state["rounds"]),
                    int(usage.get("tokens_in", 0)) + int(usage.get("tokens_out", 0)),
                    len(mine),
                    prefix_stable(mine),
                    told(mine),
                )
            )
        from hero.config.loader import load_config
        from hero.memory import store_for

        kept = [f"[{f.kind.value}] {f.text}" for f in store_for(load_config(home, env={})).facts()]
        return out, kept
    finally:
        model.stop()


def prefix_stable(requests: list[dict[str, Any]]) -> bool:
    """Every turn of a round sends its round's first two messages byte for byte."""
    firsts: dict[str, str] = {}
    for body in requests:
        prefix = json.dumps(body["messages"][:2], ensure_ascii=False)
        key = ROUND_RE.search(str(body["messages"][1]["content"]))
        assert key
        if firsts.setdefault(key.group(1), prefix) != prefix:
            return False
    return bool(requests)


def told(requests: list[dict[str, Any]]) -> int:
    """How many facts the story's first request was told."""
    if not requests:
        return 0
    task = str(requests[0]["messages"][1]["content"])
    section = task.partition(FACTS_HEADING)[2].partition("\n## ")[0]
    return sum(1 for line in section.splitlines() if line.startswith("- ["))


def bench(report: Report, stories: Sequence[Story]) -> None:
    results: dict[bool, list[Outcome]] = {}
    kept: dict[bool, list[str]] = {}
    for memory in (True, False):
        with tempfile.TemporaryDirectory(prefix="hero-bench-memory-") as tmp:
            print(f"... memory {'on' if memory else 'off'}", flush=True)
            results[memory], kept[memory] = run_sequence(Path(tmp), stories, memory)
    report.section("per story: rounds, model tokens (in + out), worker turns, status")
    for on, off in zip(results[True], results[False], strict=True):
        for label, o in ((f"on, told {on.told_facts} facts", on), ("off", off)):
            report.add(
                f"{o.story}: memory {label}",
                f"{o.rounds} rounds, {o.tokens} tok, {o.turns} turns, {o.status}",
            )
    tot = {m: (sum(o.rounds for o in r), sum(o.tokens for o in r)) for m, r in results.items()}
    report.section("totals")
    report.add("rounds, memory on / off", f"{tot[True][0]} / {tot[False][0]}", "on < off",
               tot[True][0] < tot[False][0])  # fmt: skip
    report.add("model tokens, memory on / off", f"{tot[True][1]} / {tot[False][1]}", "on < off",
               tot[True][1] < tot[False][1])  # fmt: skip
    saved = 1 - tot[True][1] / tot[False][1] if tot[False][1] else 0.0
    report.add("tokens saved by memory", f"{saved:.0%}")
    passed = all(o.status == "passed" for r in results.values() for o in r)
    report.add("every story passed, both ways", "yes" if passed else "no", "yes", passed)
    report.add(
        "facts in the memory at the end, on / off", f"{len(kept[True])} / {len(kept[False])}"
    )
    report.notes.append("facts learned with memory on:\n" + "\n".join(f"  {f}" for f in kept[True]))
    stable = {m: all(o.prefix_stable for o in r) for m, r in results.items()}
    report.section("prompt prefix (system + first user message) byte-stable across a round's turns")
    report.add("memory on", "yes" if stable[True] else "NO", "yes", stable[True])
    report.add("memory off", "yes" if stable[False] else "NO", "yes", stable[False])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the first three stories only")
    args = ap.parse_args(argv)
    started = time.monotonic()
    print(env_line("openai"), flush=True)
    report = Report()
    stories = STORIES[:3] if args.quick else STORIES
    try:
        bench(report, stories)
    except Exception as exc:  # noqa: BLE001 - a report: say what failed
        report.add("memory benchmark: could not measure", "FAILED", "", False)
        report.notes.append(f"failed: {exc!r}")
    print_report(report, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
