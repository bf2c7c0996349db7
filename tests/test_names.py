"""The one story-id rule and plan-name rule: what may become a path, a branch or a key."""

from __future__ import annotations

import pytest

from hero.names import StoryRef, plan_name_problem


@pytest.mark.parametrize("story_id", ["a", "us-001", "A.b_c-9", "gh-21"])
def test_ids_hero_accepts(story_id: str) -> None:
    assert StoryRef("", story_id).valid()
    assert StoryRef("calc", story_id).valid()


@pytest.mark.parametrize(
    "story_id",
    ["", "..", "a/../b", "../x", "a/b", "-a", ".a", "a..b", "a\n", "a\nb", "a ", " a", "a\x00"],
)
def test_ids_that_could_reach_elsewhere_are_refused(story_id: str) -> None:
    """A trailing newline too: ``$`` alone would let ``"a\\n"`` through, and a key read
    from Redis with one would name another file than the story's."""
    assert not StoryRef("", story_id).valid()


@pytest.mark.parametrize("name", ["a.b", "../x", "a/b", "p\n", "-p", "p q"])
def test_plan_names_that_are_not_one_are_refused(name: str) -> None:
    assert plan_name_problem(name) is not None
    assert not StoryRef(name, "a").valid()  # "" is no plan: a loose story


def test_a_plain_plan_name_is_one() -> None:
    assert plan_name_problem("calc_2-x") is None
