"""What tests of a whole `hero run` share: a stateless scripted model (:func:`policy`) picking the
worker's reply by round and step and the reviewer's by round, a worker that adds ``calc.sub``
(:func:`good_worker`), and the requests each role made."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from helpers import (
    COMMIT,
    SUB_AC,
    SUB_IMPL,
    is_review,
    review_round,
    step_of,
    story_of,
    verdict,
    worker_round,
)

from hero.cli import main
from hero.llm.scripted import (
    Drop,
    HttpError,
    Reply,
    ScriptedModel,
    call,
    text,
)

Answer = Reply | HttpError | Drop


APPROVE = verdict(ac=SUB_AC)


PlanSpec = Sequence[Answer] | Mapping[int, Sequence[Answer]]


ReviewSpec = Answer | Mapping[int, Answer]


def policy(
    worker: PlanSpec | Mapping[str, PlanSpec],
    reviewer: ReviewSpec | Callable[[int], Answer] = APPROVE,
) -> Callable[[dict], Answer]:
    """A stateless handler: the worker's reply is picked by (round, step), or by story and
    then (round, step); the reviewer's by round (a mapping, or a function of the round). A
    plan that runs out repeats its last reply."""

    def handler(body: dict) -> Answer:
        if is_review(body):
            n = review_round(body)
            if isinstance(reviewer, Mapping):
                return reviewer[n]
            return reviewer(n) if callable(reviewer) else reviewer
        plan: Any = worker
        if isinstance(plan, Mapping) and plan and all(isinstance(k, str) for k in plan):
            plan = plan[story_of(body)]
        if isinstance(plan, Mapping):
            plan = plan[worker_round(body)]
        return plan[min(step_of(body), len(plan) - 1)]

    return handler


def sub_work(msg: str = "add-sub") -> list[Reply]:
    """The worker adds ``calc.sub`` and commits it (and says nothing more)."""
    return [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command=COMMIT.format(msg=msg)),
    ]


def good_worker(msg: str = "add-sub") -> list[Answer]:
    return [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command=COMMIT.format(msg=msg)),
        text("Added calc.sub."),
    ]


def run_hero(home: Path, story: Path, *extra: str) -> int:
    return main(["run", str(story), "--home", str(home), *extra])


def worker_requests(model: ScriptedModel) -> list[dict]:
    return [r.body for r in model.requests if not is_review(r.body)]


def review_requests(model: ScriptedModel) -> list[dict]:
    return [r.body for r in model.requests if is_review(r.body)]
