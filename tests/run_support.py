"""What tests of a whole `hero run` share: a stateless scripted model (:func:`policy`) picking the
worker's reply by round and step and the reviewer's by round, a worker that adds ``calc.sub``
(:func:`good_worker`), and the requests each role made."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from helpers import SUB_AC, is_review, review_round, step_of, verdict, worker_round

from hero.cli import main
from hero.llm.scripted import (
    Drop,
    HttpError,
    Reply,
    ScriptedModel,
    call,
    text,
)

SUB_IMPL = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


COMMIT = "git add -A && git commit -q -m {msg}"


Answer = Reply | HttpError | Drop


APPROVE = verdict(ac=SUB_AC)


PlanSpec = Sequence[Answer] | Mapping[int, Sequence[Answer]]


ReviewSpec = Answer | Mapping[int, Answer]


def policy(worker: PlanSpec, reviewer: ReviewSpec = APPROVE) -> Callable[[dict], Answer]:
    """A stateless handler: the worker's reply is picked by (round, step), the reviewer's by
    round. A plan that runs out repeats its last reply."""

    def handler(body: dict) -> Answer:
        if is_review(body):
            if isinstance(reviewer, Mapping):
                return reviewer[review_round(body)]
            return reviewer
        plan = worker[worker_round(body)] if isinstance(worker, Mapping) else worker
        return plan[min(step_of(body), len(plan) - 1)]

    return handler


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
