"""What `hero run` has imported when its first model request leaves: the model client's SDK
and what a run needs, none of the optional stacks (web, MCP, Celery) nor libraries hero
does not use on that path. An import put back on that path shows here by name; how long it
takes is bench/run.py's and bench/mini.py's business, not a test's."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers import is_review, verdict

from hero.llm.scripted import ScriptedModel, text

#: Loaded by nothing on `hero run`'s way to its first request (top-level package names).
NOT_BEFORE_FIRST_REQUEST = (
    "mcp",  # MCP servers' SDK: a role with MCP servers starts them, this one has none
    "celery",
    "kombu",
    "redis",
    "starlette",
    "uvicorn",
    "jinja2",
    "jsonschema",
    "structlog",
    "httpx",  # the SDK's transport is httpx2
    "rich",
    "numpy",
    "bm25s",
)

#: hero's own modules that only matter after the first request (or for other commands).
HERO_NOT_BEFORE_FIRST_REQUEST = (
    "hero.web",
    "hero.engine",
    "hero.evals",
    "hero.doctor",
    "hero.roles.learner",
    "hero.roles.planner",
    "hero.run.notify",
    "hero.run.dryrun",
    "hero.run.demo",
    "hero.daemon.watch",
)

# `hero run` in a fresh interpreter; the first LlmClient.complete writes sys.modules' names
# to argv[1] (instrumentation in the child only), then the run goes on to its end.
_CHILD = r"""
import json, sys
import hero.llm.client as client
_complete = client.LlmClient.complete
def complete(self, *a, **k):
    if not getattr(complete, "seen", False):
        complete.seen = True
        with open(sys.argv[1], "w") as f:
            json.dump(sorted(sys.modules), f)
    return _complete(self, *a, **k)
client.LlmClient.complete = complete
import hero.cli
raise SystemExit(hero.cli.main(sys.argv[2:]))
"""


def _quick_pass(body: dict[str, Any]) -> Any:
    return verdict("APPROVED") if is_review(body) else text("Nothing to change; done.")


def test_hero_run_reaches_its_first_request_without_the_optional_stacks(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    tmp_path: Path,
) -> None:
    model = scripted(_quick_pass)
    home = make_home(model)
    story = write_story(home, "s1", verify=["true"], allow_empty=True)
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(out), "--home", str(home), "run", str(story)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = set(json.loads(out.read_text()))
    assert "openai" in modules  # the probe did see the first request, through the SDK
    assert sorted({m.split(".")[0] for m in modules} & set(NOT_BEFORE_FIRST_REQUEST)) == []
    early = sorted(
        m for m in modules for h in HERO_NOT_BEFORE_FIRST_REQUEST if m == h or m.startswith(h + ".")
    )
    assert early == []
