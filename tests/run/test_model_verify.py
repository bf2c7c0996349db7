"""The last line of defence for model-written verify commands: the pipeline itself.

`hero run-plan` and `hero watch` refuse a plan's story whose verify commands (a planner
model wrote them) break the command policy before it is queued; a Celery worker runs the
stories a coordinator sent under its own config/roles.yaml, so the pipeline checks again
when a plan's story starts: with a stricter policy there, the story ends in ``error``
naming the command, before any model call, git branch or command.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import git
from plan_support import PlanPolicy, write_plan, write_plan_story

from hero.config.home import Config
from hero.config.loader import load_config
from hero.llm.client import LlmClient
from hero.run.pipeline import StoryRun
from hero.state import Status
from hero.story.format import parse_story


def run(story, config: Config):
    """The story run as a Celery worker runs it: real clients over HTTP to the model."""
    worker, reviewer = (LlmClient(config.role(r), config.llm) for r in ("worker", "reviewer"))
    return StoryRun(story, config, worker, reviewer, None, None, None).run()


def test_a_plan_story_whose_verify_breaks_this_machine_s_policy_ends_in_error_unrun(
    scripted, make_home, target_repo: Path
) -> None:
    model = scripted(PlanPolicy())
    home = make_home(model, deny_commands=["rm"])
    folder = write_plan(home, "pol", {"b": []})
    write_plan_story(folder, "b", verify=["rm -f README; true"])
    config = load_config(home)
    story = replace(parse_story(folder / "b.md"), plan="pol")
    branches_before = git(target_repo, "branch", "--format=%(refname:short)")

    state = run(story, config)

    assert state.status == Status.ERROR
    assert "verify command `rm -f README; true` breaks the command policy" in state.error
    assert "model_verify: false" in state.error
    assert model.requests == []
    assert git(target_repo, "branch", "--format=%(refname:short)") == branches_before
    assert not (home / "worktrees" / "plans" / "pol" / "b").exists()


@pytest.mark.slow
def test_a_loose_story_s_verify_is_the_user_s_and_is_not_checked(
    scripted, make_home, write_story
) -> None:
    """Verify commands the user wrote run as written: the policy is the worker's."""
    model = scripted(PlanPolicy())
    home = make_home(model, deny_commands=["rm"])
    path = write_story(home, "mine", verify=["rm -f nothing-here; test -f mine.txt"])
    config = load_config(home)

    state = run(parse_story(path), config)

    assert state.status == Status.PASSED, state.error
