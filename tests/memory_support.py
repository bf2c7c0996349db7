"""What the memory tests share: a story's requests and task, and a scripted model that learns a
convention (:data:`CONVENTION`) from a reviewer that asks for it (:func:`handler`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from helpers import COMMIT, PY, SUB_AC, SUB_IMPL, is_review, verdict

from hero.cli import main
from hero.llm.scripted import Reply, ScriptedModel, call, text


def worker_task(body: dict[str, Any]) -> str:
    return str(body["messages"][1]["content"])


def story_requests(model: ScriptedModel, story_title: str) -> list[dict[str, Any]]:
    return [
        r.body
        for r in model.requests
        if not is_review(r.body) and story_title in worker_task(r.body)
    ]


CONVENTION = "Name test functions test_<unit>_<behaviour>, as the rest of the suite does."


def system(body: Mapping[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def is_memory(body: Mapping[str, Any]) -> bool:
    return system(body).startswith("You keep the memory")


def round_of(body: Mapping[str, Any]) -> int:
    import re

    task = str(body["messages"][1]["content"])
    m = re.search(r"## Verifier summary \(round (\d+)\)", task) or re.search(
        r"This is round (\d+) of at most", task
    )
    assert m, "a request without its round"
    return int(m.group(1))


def asks(*comments: str, blocker_on: str = "") -> Reply:
    said = [{"severity": "nit", "comment": c} for c in comments]
    if blocker_on:
        said.append({"severity": "blocker", "file": blocker_on, "comment": "sub must not print"})
    return verdict("CHANGES_REQUESTED", "Not yet.", comments=said, ac=SUB_AC)


def worker_step(body: Mapping[str, Any], plan: Sequence[Reply]) -> Reply:
    step = sum(1 for m in body["messages"] if m.get("role") == "assistant")
    return plan[min(step, len(plan) - 1)]


def commit_reply(path: str, content: str, msg: str) -> list[Reply]:
    return [
        call("write_file", path=path, content=content),
        call("bash", command=COMMIT.format(msg=msg)),
        text("Done."),
    ]


def handler(
    reviews: Mapping[int, Reply],
    *,
    work: Mapping[int, list[Reply]] | None = None,
    memory: Callable[[Mapping[str, Any]], Reply] | None = None,
) -> Callable[[dict], Reply]:
    """Worker: round n's plan (default: a commit of calc that differs per round);
    reviewer: reviews[n]; memory role: ``memory``."""

    def answer(body: dict) -> Reply:
        if is_memory(body):
            assert memory is not None, "the memory role was asked but not configured"
            return memory(body)
        n = round_of(body)
        if is_review(body):
            return reviews[n]
        plan = (work or {}).get(n) or commit_reply(
            "calc/__init__.py", SUB_IMPL + f"\n# round {n}\n", f"r{n}"
        )
        return worker_step(body, plan)

    return answer


def run(home: Path, story: Path) -> int:
    return main(["run", str(story), "--home", str(home)])


def status(home: Path, story_id: str) -> str:
    state = json.loads((home / "runs" / "state" / f"{story_id}.json").read_text())
    return str(state["status"])


VERIFY = [f"{PY} -m unittest -q"]
