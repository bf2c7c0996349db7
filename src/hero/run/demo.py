"""What `hero demo` runs: an example home and repo, and hero's scripted model's part.

No key, no network: the model is hero's own scripted OpenAI-compatible server on a
loopback port, playing a worker that forgets the tests in round 1 and a reviewer that
sends it back for them. The command itself is :mod:`hero.commands.demo`.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hero.git.ops import DEFAULT_IDENTITY

DEMO_STORY = "add-slugify.md"


def examples_dir() -> Path:
    """The examples shipped with hero: inside the wheel, or the source checkout's folder."""
    here = Path(__file__).resolve().parents[1]  # the hero package
    for candidate in (here / "_examples", here.parent.parent / "examples"):
        if (candidate / "demo-repo").is_dir():
            return candidate
    raise FileNotFoundError("hero's examples are missing from this installation")


def make_demo_home(root: Path, base_url: str, python: str = sys.executable) -> tuple[Path, Path]:
    """Create a hero home with a fresh target repo under ``root``; returns (home, story).
    ``python``: the interpreter the checks run (hero's own: `python` may not be on PATH)."""
    from hero.config.scaffold import init_home

    examples = examples_dir()
    home = root / "home"
    repo = root / "textkit"
    shutil.copytree(examples / "demo-repo", repo)
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", **DEFAULT_IDENTITY}
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["commit", "-q", "-m", "textkit: word_count"],
    ):
        # its output captured: a git still running when the demo is stopped (a signal that
        # came while it started) holds no pipe of whoever runs the demo
        subprocess.run(
            ["git", *args], cwd=repo, check=True, env={**_os_env(), **env}, capture_output=True
        )
    init_home(home, target_repo=str(repo))
    (home / "config" / "providers" / "scripted.yaml").write_text(
        "# hero's built-in scripted model (hero demo). Not a real model.\n"
        "name: scripted\n"
        f"base_url: {base_url}\n"
        "default_model: hero-scripted-demo\n",
        encoding="utf-8",
    )
    (home / "config" / "roles.yaml").write_text(
        "# Written by `hero demo`: both roles use the scripted model.\n"
        f"target_repo: {repo}\n"
        "max_retries: 3\n"
        "verify_timeout_ms: 120000\n"
        "worker:\n  provider: scripted\n"
        "reviewer:\n  provider: scripted\n",
        encoding="utf-8",
    )
    story_text = (examples / "stories" / DEMO_STORY).read_text(encoding="utf-8")
    # Verify with the interpreter hero runs on, each command one YAML string (a JSON one):
    # its path may hold a space or a quote.
    story_text = re.sub(
        r"^(\s*- )python (-.*)$",
        lambda m: m.group(1) + json.dumps(f"{shlex.quote(python)} {m.group(2)}"),
        story_text,
        flags=re.MULTILINE,
    )
    story = home / "inbox" / DEMO_STORY
    story.parent.mkdir(parents=True, exist_ok=True)
    story.write_text(story_text, encoding="utf-8")
    return home, story


# -- the scripted model's part ---------------------------------------------------------

SLUG_PY = '''"""Turning titles into URL slugs."""

import re

_NOT_ALNUM = re.compile(r"[^0-9a-z]+")


def slugify(text: str) -> str:
    """Lower-case ``text`` and join its runs of letters and digits with hyphens."""
    return _NOT_ALNUM.sub("-", text.lower()).strip("-")
'''

TEST_SLUG_PY = """import unittest

from textkit import slugify


class SlugifyTest(unittest.TestCase):
    def test_example(self) -> None:
        self.assertEqual(slugify("Hello, World!"), "hello-world")

    def test_empty(self) -> None:
        self.assertEqual(slugify(""), "")

    def test_punctuation_only(self) -> None:
        self.assertEqual(slugify("?!--..."), "")
"""


def demo_policy(request: dict[str, Any]) -> Any:
    """Decide the scripted model's next answer from the conversation alone (stateless)."""
    from hero.llm.scripted import call, text

    messages = request.get("messages", [])
    system = str(messages[0].get("content", "")) if messages else ""
    if "reviewer" in system.split(".")[0]:
        return _review(str(messages[-1].get("content", "")))
    task = str(messages[1].get("content", "")) if len(messages) > 1 else ""
    step = sum(1 for m in messages if m.get("role") == "assistant")
    verify = re.findall(r"^  - `(.+)`$", task, flags=re.MULTILINE)
    if "## Feedback on round" not in task:
        plan = [
            call("ls"),
            call("read_file", path="textkit/__init__.py"),
            call("write_file", path="textkit/slug.py", content=SLUG_PY),
            call(
                "edit_file",
                path="textkit/__init__.py",
                old_string='from textkit.words import word_count\n\n__all__ = ["word_count"]',
                new_string=(
                    "from textkit.slug import slugify\nfrom textkit.words import word_count\n\n"
                    '__all__ = ["slugify", "word_count"]'
                ),
            ),
            call(
                "bash",
                command="git add -A && git commit -q -m 'Add textkit.slugify' && git log --oneline -1",
            ),
            text("Added textkit.slugify and exported it."),
        ]
    else:
        plan = [
            call("grep", pattern="def slugify", path="textkit"),
            call("write_file", path="tests/test_slug.py", content=TEST_SLUG_PY),
            call("bash", command=" && ".join(verify) if verify else "true"),
            call(
                "bash",
                command="git add -A && git commit -q -m 'Test slugify' && git log --oneline -1",
            ),
            text("Added tests for slugify: the example, an empty string and punctuation only."),
        ]
    return plan[min(step, len(plan) - 1)]


def _review(task: str) -> Any:
    from hero.llm.scripted import text

    has_tests = "+++ b/tests/test_slug.py" in task
    criteria = [
        "textkit.slugify(text) lower-cases, hyphenates and strips",
        "slugify is exported from the textkit package",
        "Unit tests in tests/test_slug.py cover the example, empty and punctuation-only input",
    ]
    verdict = {
        "verdict": "APPROVED" if has_tests else "CHANGES_REQUESTED",
        "summary": (
            "slugify is implemented, exported and tested."
            if has_tests
            else "slugify works, but the tests the story asks for are missing."
        ),
        "ac_check": [
            {"ac": criteria[0], "satisfied": True, "commit": ""},
            {"ac": criteria[1], "satisfied": True, "commit": ""},
            {"ac": criteria[2], "satisfied": has_tests, "commit": ""},
        ],
        "comments": []
        if has_tests
        else [
            {
                "file": "tests/test_slug.py",
                "line": None,
                "severity": "blocker",
                "comment": "Add tests/test_slug.py covering 'Hello, World!', '' and punctuation only.",
            }
        ],
    }
    return text("```json\n" + json.dumps(verdict, indent=2) + "\n```")


def _os_env() -> dict[str, str]:
    import os

    return dict(os.environ)
