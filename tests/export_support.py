"""What tests/views/test_export.py and tests/views/test_report.py share: a home where story s1 passed
in two rounds (its first round's check failed) and s2 gave up after one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers import PY, is_review, review_round, step_of, verdict, worker_round

from hero.cli import main
from hero.llm.scripted import Reply, ScriptedModel, call, text

Start = Callable[..., ScriptedModel]
WRONG = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
# not the same size as WRONG: a .pyc of WRONG written in the same second must not stand
RIGHT = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b  # fixed\n"
CHECK_SUB = f"{PY} -c 'from calc import sub; assert sub(5, 3) == 2'"
SECRET = "sk-export-test-5f1e9a3c7d2b4e6f8a0c"


def two_rounds(body: dict[str, Any]) -> Reply:
    """Round 1 writes a wrong `sub` (its check fails), round 2 the right one; s2's worker
    only ever writes the wrong one. The worker's text of round 1 holds SECRET."""
    if is_review(body):
        summary = "Fine | <b>bold</b>\nnext line" if review_round(body) > 1 else "Wrong."
        return verdict("APPROVED" if review_round(body) > 1 else "CHANGES_REQUESTED", summary)
    code = (
        RIGHT if worker_round(body) > 1 and "Story s1" in body["messages"][1]["content"] else WRONG
    )
    plan = [
        call("write_file", path="calc/__init__.py", content=code),
        call("bash", command=f"git add -A && git commit -q -m sub-{worker_round(body)}"),
        text(f"Wrote sub. (debug: key was {SECRET})"),
    ]
    return plan[min(step_of(body), len(plan) - 1)]


def run(home: Path, story: Path, *extra: str) -> int:
    return main(["run", str(story), "--home", str(home), *extra])


def two_story_home(scripted: Start, make_home: Any, write_story: Any) -> Path:
    """A home where s1 passed in two rounds and s2 gave up after one."""
    model = scripted(two_rounds)
    home = make_home(model, sandbox="none")
    assert run(home, write_story(home, "s1", verify=[CHECK_SUB])) == 0
    assert run(home, write_story(home, "s2", verify=[CHECK_SUB], max_retries=1)) == 1
    return home
