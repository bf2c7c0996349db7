"""The demo's home (hero.run.demo): its story's checks run hero's own interpreter, wherever it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from hero.run.demo import demo_policy, make_demo_home
from hero.story.format import parse_story


@pytest.mark.parametrize(
    "python", ["/usr/bin/python3", "/tmp/a clone with spaces/.venv/bin/python", "/tmp/it's/python"]
)
def test_the_demo_storys_checks_name_the_interpreter_whatever_its_path(
    tmp_path: Path, python: str
) -> None:
    _home, story_path = make_demo_home(tmp_path, "http://127.0.0.1:9/v1", python=python)
    story = parse_story(story_path)  # valid YAML, whatever the path holds
    commands = [c for tier in story.verify for c in tier.commands]
    assert commands and all(c.startswith(("/usr/bin/python3 ", "'/tmp/")) for c in commands)
    assert any("unittest" in c for c in commands) and callable(demo_policy)
