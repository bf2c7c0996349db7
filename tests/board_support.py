"""A home with a day of work for the board's tests: run records with known usage (some
today, some earlier this week, one a month ago), two models, a GitHub issue's story with its
source, a plan whose file order is not its dependency order, and a story with a diff-like
round, labels on three. Records are written as hero writes them (runs/state/<id>.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DAY = 86_400.0
#: Thursday 2026-12-03 15:30 UTC: Monday of its week is 2026-11-30.
NOW = 1_796_311_800.0
GH_REPO = "octo/widgets"

#: id -> (status, title, tokens_in, tokens_out, cost, updated_at offset from NOW, model)
STORIES: dict[str, tuple[str, str, int, int, float, float, str]] = {
    "login-form": ("passed", "Login form accepts e-mail", 1000, 200, 0.25, -3600, "model-a"),
    "login-rate": ("gave_up", "Rate-limit the login", 3000, 500, 0.75, -7200, "model-b"),
    "gh-42": ("passed", "Fix the widget <b>bold</b>", 400, 100, 0.125, -1800, "model-a"),
    "report-csv": ("error", "Export the report as CSV", 2000, 300, 0.5, -2 * DAY, "model-a"),
    "old-story": ("passed", "A month-old story", 5000, 1000, 2.0, -30 * DAY, "model-b"),
}


#: id -> the labels its record holds (as a run of its story file records them)
LABELS: dict[str, list[str]] = {
    "login-form": ["ui", "auth"],
    "login-rate": ["auth", "needs design review"],
    "gh-42": ["bug"],
}


def usage_of(story_id: str) -> tuple[int, float]:
    _, _, tin, tout, cost, _, _ = STORIES[story_id]
    return tin + tout, cost


def record(story_id: str, **extra: Any) -> dict[str, Any]:
    status, title, tin, tout, cost, offset, model = STORIES[story_id]
    when = NOW + offset
    data: dict[str, Any] = {
        "id": story_id,
        "status": status,
        "title": title,
        "branch": f"hero/{story_id}",
        "usage": {"tokens_in": tin, "tokens_out": tout, "llm_calls": 3, "cost_usd": cost},
        "models": {
            "worker": {"provider": "p", "model": model, "reasoning_effort": None},
            "reviewer": {"provider": "p", "model": model, "reasoning_effort": None},
        },
        "started_at": when - 600,
        "updated_at": when,
        "finished_at": when,
        "current_round": 2,
        "rounds": [
            {"round": 1, "started_at": when - 600, "duration_s": 240.0},
            {"round": 2, "started_at": when - 300, "duration_s": 300.0},
        ],
    }
    if story_id in LABELS:
        data["labels"] = LABELS[story_id]
    data.update(extra)
    return data


def write_day(home: Path) -> None:
    """The records, the GitHub story's file and the plan ``pl`` (c, then a, then b in the
    manifest; b needs c, a needs b: the order is c, b, a)."""
    states = home / "runs" / "state"
    states.mkdir(parents=True, exist_ok=True)
    (home / "done").mkdir(exist_ok=True)
    gh_file = home / "done" / "gh-42.md"
    gh_file.write_text(
        "---\nid: gh-42\ntitle: Fix the widget\nsource:\n"
        f"  repo: {GH_REPO}\n  issue: 42\n  url: https://github.com/{GH_REPO}/issues/42\n"
        "  author: someone\n---\n\n## Goal\nx\n\n## Acceptance Criteria\n- [ ] y\n"
    )
    for story_id in STORIES:
        extra: dict[str, Any] = {}
        if story_id == "gh-42":
            extra["story_path"] = str(gh_file)
        (states / f"{story_id}.json").write_text(json.dumps(record(story_id, **extra)))
    folder = home / "inbox" / "pl"
    folder.mkdir(parents=True, exist_ok=True)
    stories = [("c", "Third by name, first to run", []), ("a", "Needs b", ["b"])]
    stories.append(("b", "Needs c", ["c"]))
    manifest = {
        "name": "pl",
        "source": "/nowhere/plan.md",
        "source_sha256": "0" * 64,
        "created_at": "2026-01-01T00:00:00Z",
        "stories": [{"id": i, "title": t, "depends_on": d} for i, t, d in stories],
    }
    (folder / "_manifest.yaml").write_text(json.dumps(manifest))
    for story_id, title, deps in stories:
        (folder / f"{story_id}.md").write_text(
            f"---\nid: {story_id}\ntitle: {json.dumps(title)}\ndepends_on: {json.dumps(deps)}\n"
            "---\n\n## Goal\nx\n\n## Acceptance Criteria\n- [ ] y\n"
        )
