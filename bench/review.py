#!/usr/bin/env python
"""hero benchmark: what a reviewer that can look costs, in tokens per review.

    python bench/review.py          # about 10 s on 2 cores
    python bench/review.py --runs 1 # shorter

A generated repository (a package of 40 modules, about 60 lines each) and a change to three
of its modules: the reviewer's diff. Each review is hero's own ``review`` (hero.roles.reviewer)
with a real LlmClient over real HTTP to hero's scripted model, in one of these ways:

- ``tools: []``: one request, from the diff (hero before the reviewer could look);
- tools, no look: the default read-only tools sent, the verdict given at once (what the tool
  schemas and the task's note cost alone);
- tools, 3 looks: it reads two modules outside the diff and greps for a name, then answers
  (a typical careful review);
- tools, all 12: it uses every call ``reviewer_max_tool_calls`` allows (reads and git_show),
  then is asked for its verdict without tools (the worst a review can cost).

Tokens in are the request's size (its messages and tools as JSON) / 4, as the scripted
server counts them; tokens out its estimate of the answer. The wall time is the whole review
with the model on loopback (answering at once): hero's own work (tools, git) and HTTP.

A report, not a test: it prints the table and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from report import GIT_ISOLATION, Report, env_line, median, print_report

from hero.agent.tools import READ_ONLY_TOOLS, ToolContext
from hero.agent.tools.toolset import select_tools
from hero.config.providers import Provider, RoleConfig
from hero.config.sections import LlmSettings
from hero.git.ops import DEFAULT_IDENTITY, diff_since, git, log_since
from hero.llm.client import LlmClient
from hero.llm.scripted import Reply, ScriptedModel, ToolCall
from hero.roles.reviewer import Looking, review
from hero.story.format import parse_story_text
from hero.trace import Trace

MODULES = 40
CHANGED = 3
VERDICT = json.dumps(
    {
        "verdict": "APPROVED",
        "summary": "The change does what the story asks; the callers outside the diff agree.",
        "ac_check": [{"ac": "every parser rejects empty input", "satisfied": True, "commit": ""}],
        "comments": [],
    }
)


def module_text(n: int, changed: bool = False) -> str:
    lines = [f'"""Module {n} of the generated package: parsing and checking records."""', ""]
    for k in range(12):
        lines += [
            f"def parse_{n}_{k}(text):",
            f'    """Parse record kind {k} of module {n}."""',
            "    if not text:" if changed else "    text = text or ''",
            "        raise ValueError('empty input')" if changed else "    text = text.strip()",
            f"    return [part.strip() for part in text.split(',')][:{k + 3}]",
        ]
    return "\n".join(lines) + "\n"


def make_repo(root: Path) -> tuple[str, str]:
    """The repository, and (base, tip) of the change under review."""
    env = {**GIT_ISOLATION, **DEFAULT_IDENTITY}
    (root / "pkg").mkdir(parents=True)
    for n in range(MODULES):
        (root / "pkg" / f"m{n}.py").write_text(module_text(n))
    git(root, "init", "-q", "-b", "main", env=env)
    git(root, "add", "-A", env=env)
    git(root, "commit", "-q", "-m", "the package", env=env)
    base = git(root, "rev-parse", "HEAD").strip()
    for n in range(CHANGED):
        (root / "pkg" / f"m{n}.py").write_text(module_text(n, changed=True))
    git(root, "commit", "-q", "-am", "reject empty input", env=env)
    return base, git(root, "rev-parse", "HEAD").strip()


def counted(reply: Reply, body: dict[str, Any]) -> Reply:
    size = len(json.dumps({"messages": body["messages"], "tools": body.get("tools", [])}))
    return Reply(content=reply.content, tool_calls=reply.tool_calls, prompt_tokens=size // 4)


def looks(n: int) -> list[ToolCall]:
    """``n`` calls of a careful reviewer: modules outside the diff, a grep, a git_show."""
    out: list[ToolCall] = []
    for k in range(n):
        if k % 4 == 2:
            out.append(ToolCall("grep", {"pattern": "parse_0_", "path": "pkg"}, id=f"c{k}"))
        elif k % 4 == 3:
            out.append(ToolCall("git_show", {"rev": "HEAD", "path": "pkg/m0.py"}, id=f"c{k}"))
        else:
            path = f"pkg/m{CHANGED + k}.py"
            out.append(ToolCall("read_file", {"path": path}, id=f"c{k}"))
    return out


def handler_for(calls: list[ToolCall]) -> Callable[[dict[str, Any]], Reply]:
    """One call per turn from ``calls``, then the verdict (also when asked without tools)."""

    def handler(body: dict[str, Any]) -> Reply:
        turn = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        if "tools" in body and turn < len(calls):
            return counted(Reply(tool_calls=(calls[turn],)), body)
        return counted(Reply(content=VERDICT), body)

    return handler


def one_review(
    root: Path, base: str, tip: str, tools: tuple[str, ...], n_calls: int, tmp: Path
) -> dict[str, float]:
    with ScriptedModel(handler_for(looks(n_calls))) as model:
        provider = Provider(name="scripted", base_url=model.base_url, default_model="m")
        client = LlmClient(RoleConfig("reviewer", provider, "judge", None), LlmSettings())
        story = parse_story_text(
            "---\nid: b1\ntitle: Reject empty input\n---\n## Goal\nEvery parser rejects "
            "empty input.\n\n## Acceptance Criteria\n- every parser rejects empty input\n",
            tmp / "b1.md",
        )
        log = log_since(root, base, tip=tip)
        diff, stat = diff_since(root, base, tip=tip)
        looking = Looking(
            select_tools(tools, role="reviewer"), ToolContext(root=root, env={}), max_tool_calls=12
        )
        started = time.perf_counter()
        with Trace(None) as trace:
            verdict = review(
                client,
                story,
                round_no=1,
                branch="hero/b1",
                base_sha=base,
                verify_summary="- [PASS] verify: `pytest` exit 0",
                git_log=log.text,
                diff_stat=stat,
                diff=diff.text,
                home=None,
                trace=trace,
                looking=looking,
            )
        wall = time.perf_counter() - started
        assert verdict.approved, verdict.summary
        usage = client.usage
        return {
            "requests": len(model.requests),
            "tokens_in": usage.tokens_in,
            "tokens_out": usage.tokens_out,
            "wall_ms": wall * 1000,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--runs", type=int, default=3, help="reviews of each kind (median)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    print(env_line("openai"))
    report = Report()
    kinds = (
        ("tools: []", (), 0),
        ("tools, no look", READ_ONLY_TOOLS, 0),
        ("tools, 3 looks", READ_ONLY_TOOLS, 3),
        ("tools, all 12", READ_ONLY_TOOLS, 12),
    )
    with tempfile.TemporaryDirectory(prefix="hero-bench-review-") as tmp:
        root = Path(tmp) / "repo"
        base, tip = make_repo(root)
        plain_in = 0.0
        for name, tools, n_calls in kinds:
            runs = [
                one_review(root, base, tip, tools, n_calls, Path(tmp)) for _ in range(args.runs)
            ]
            tokens_in = median([r["tokens_in"] for r in runs])
            tokens_out = median([r["tokens_out"] for r in runs])
            plain_in = plain_in or tokens_in
            report.section(name)
            report.add(f"{name}: requests", f"{median([r['requests'] for r in runs]):.0f}")
            report.add(f"{name}: tokens in", f"{tokens_in:,.0f}")
            report.add(f"{name}: tokens out", f"{tokens_out:,.0f}")
            report.add(f"{name}: tokens in vs tools: []", f"{tokens_in / plain_in:.2f}x")
            report.add(
                f"{name}: review wall time", f"{median([r['wall_ms'] for r in runs]):.0f} ms"
            )
    report.notes.append(
        "tokens in: each request's messages and tools as JSON / 4, summed over the review's "
        "requests; a review with tools resends its history with every call, so its cost grows "
        "with the number of calls, not only with what they read. Every result is cut to 8000 "
        "characters (about 2,000 tokens)."
    )
    print_report(report, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
