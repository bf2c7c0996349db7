"""A fact learned in story A reaches story B's first request: two real `hero run`s on one
home against hero's scripted model over real HTTP, real git, real checks.

Story A's reviewer asks for the same thing in rounds 1 and 2 and round 3 satisfies it, so A
teaches a convention with evidence (a reviewer's text: trust model, never always-on); story
B, on the same subject, is told it in its worker's first request under the memory heading,
in the lower-trust group. With the home's memory off, B's first request has no such
section. (tests/e2e/test_memory_trust.py: what a story on another subject is told.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import is_review
from memory_support import (
    CONVENTION,
    VERIFY,
    asks,
    handler,
    run,
    status,
    story_requests,
    worker_task,
)
from run_support import APPROVE

from hero.llm.scripted import ScriptedModel
from hero.memory.recall import FACTS_HEADING

#: the convention as the store keeps it and recall renders it: `<` `>` made inert
TOLD = "test_‹unit›_‹behaviour›"


@pytest.mark.slow
@pytest.mark.parametrize("memory_on", [True, False])
def test_a_convention_learned_in_story_a_reaches_story_bs_first_request(
    memory_on: bool,
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
) -> None:
    # the reviewer insists in rounds 1 and 2 of A, approves round 3; B passes in round 1
    reviews = {1: asks(CONVENTION), 2: asks(CONVENTION), 3: APPROVE}
    answer_a = handler(reviews)

    def answer(body: dict[str, Any]) -> Any:
        if is_review(body) and "Story b" in worker_task(body):
            return APPROVE
        return answer_a(body)

    model = scripted(answer)
    knobs: dict[str, Any] = {"max_retries": 3}
    if not memory_on:
        knobs["memory_enabled"] = False
    home = make_home(model, **knobs)

    story_a = write_story(home, "a", verify=VERIFY)
    assert run(home, story_a) == 0
    assert status(home, "a") == "passed"
    # A's own first request was told nothing: the memory was empty
    assert FACTS_HEADING not in worker_task(story_requests(model, "Story a")[0])

    story_b = write_story(
        home, "b", verify=VERIFY, body="## Goal\nName the test functions of the suite alike.\n"
    )
    assert run(home, story_b) == 0
    assert status(home, "b") == "passed"
    first_b = worker_task(story_requests(model, "Story b")[0])
    if memory_on:
        assert FACTS_HEADING in first_b
        section = first_b[first_b.index(FACTS_HEADING) :]
        assert TOLD in section  # under the memory heading, not elsewhere in the task
        assert TOLD not in first_b[: first_b.index(FACTS_HEADING)]
        # as a machine's words: the lower-trust group, not the repository's conventions
        assert "Conventions of this repository" not in section
        lower = section.index("machine-written, not confirmed by a person")
        assert section.index(TOLD) > lower
    else:
        assert FACTS_HEADING not in first_b
        assert TOLD not in first_b
