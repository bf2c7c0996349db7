"""``hero report KEY``: one self-contained Markdown report of a story, to paste into a pull
request or a chat.

What it holds: the title and status, the branch and its base..head, a table of the rounds
(the worker's turns and tool calls, the checks and those that failed, the verdict and its
summary), the final verdict's criteria and comments, the final diff stat (``git diff
--stat`` in the target repository, read-only; a branch that is gone is said), and the
usage (tokens, calls, cost, wall time; how much of it is hero's estimate, for answers that
carried no token counts).

Much of it came from the model (summaries, comments, file names, the worker's commits),
so every such text is escaped before it is written: HTML is shown, not rendered
(``<``, ``>``, ``&`` as entities), the punctuation of inline Markdown is backslash-escaped
(no link, image, emphasis or code can be made), @mentions and closing keywords are made
inert (``hero.github.defang``), newlines are folded (a table row stays one row,
``|`` is escaped) and control characters are shown as ``\\xNN``. The diff stat goes in a
fence longer than any run of backticks in it. The report is redacted with the current
configuration's secrets, as ``hero export`` is.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hero.git.ops import GitError, TargetRepo, git
from hero.github.defang import defang
from hero.llm.usage import Usage
from hero.redact import Redactor
from hero.run.budget import story_spend
from hero.state import Round, RunState

#: The diff stat's lines shown at most (a huge change is summed up by its last line).
DIFF_STAT_LINES = 60
#: A text from the model is cut to this many characters in a table cell.
CELL_CHARS = 300

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: What could make markup inline: emphasis, code, links and images, tables, strikethrough.
_PUNCTUATION = re.compile(r"([\\`*_\[\]|~])")


def md(text: object, *, limit: int | None = None) -> str:
    """``text`` as inert Markdown on one line: no HTML, no markup, no table break."""
    value = " ".join(str(text).split())  # newlines, tabs and runs of spaces: one space
    if limit is not None and len(value) > limit:
        value = value[: limit - 1] + "…"
    value = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    # @mentions and closing keywords made inert too: a report pasted in a pull request
    # must not notify anyone or close an issue
    return defang(_PUNCTUATION.sub(r"\\\1", value))


def fenced(text: str) -> str:
    """``text`` in a code block no line of it can end."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r", ""))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip()}\n{fence}"


def build_report(
    state: RunState, *, repo: Path | None, redactor: Redactor, now: float | None = None
) -> str:
    """The report of ``state``; ``repo``: the target repository the diff stat is read in
    (None: not read)."""
    lines = [f"# {md(state.title or state.id)}", ""]
    lines += _summary_table(state, now)
    if state.error:
        lines += ["", f"**Error:** {md(state.error, limit=2000)}"]
    lines += ["", "## Rounds", ""]
    lines += _rounds_table(state.rounds)
    if state.current_round and state.current_round not in {r.round for r in state.rounds}:
        lines += [
            "",
            f"Round {state.current_round} has no record yet: it is in progress, or was cut "
            f"short ({md(state.status)}); `hero logs {state.ref.key}` shows its trace.",
        ]
    final = state.rounds[-1] if state.rounds else None
    if final is not None:
        lines += ["", f"## Final verdict (round {final.round})", ""]
        lines += _verdict(final)
    lines += ["", "## Changes", ""]
    lines += _diff_stat(state, repo)
    lines += ["", f"_Written by hero report at {_when(time.time())}._", ""]
    text = "\n".join(lines)
    return redactor.redact(text) if redactor else text


def _summary_table(state: RunState, now: float | None) -> list[str]:
    usage = Usage.from_dict(state.usage)
    spend = story_spend(state, now=now)
    base = state.base_sha[:12] or "?"
    head = state.head_sha[:12] or "?"
    rows = [
        ("story", md(state.ref.key)),
        ("status", f"**{md(state.status)}**"),
        ("branch", md(state.branch or "(none)")),
        (
            "base..head",
            f"{md(base)}..{md(head)}" + (f" (on {md(state.base_ref)})" if state.base_ref else ""),
        ),
        ("rounds", str(len(state.rounds))),
        ("runs", str(state.runs)),
        ("started", _when(state.started_at)),
        ("finished", _when(state.finished_at) if state.finished_at else "not yet"),
        ("wall time", f"{spend.wall_s:.1f} s"),
        (
            "tokens",
            f"{usage.tokens_in:,} in ({usage.tokens_cached:,} cached), {usage.tokens_out:,} out"
            + (
                f"; ~{usage.estimated_tokens:,} of them estimated by hero (no counts in "
                "the answers)"
                if usage.estimated
                else ""
            ),
        ),
        (
            "model calls",
            f"{usage.llm_calls:,}"
            + (f" ({usage.estimated_calls:,} without token counts)" if usage.estimated else ""),
        ),
        ("cost", f"${usage.cost_usd:.4f}" if usage.cost_usd else "not known"),
    ]
    return ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]


def _rounds_table(rounds: Sequence[Round]) -> list[str]:
    if not rounds:
        return ["No round has finished yet."]
    out = ["| round | worker | checks | verdict |", "|---|---|---|---|"]
    for r in rounds:
        worker = f"{r.worker.turns} turns, {r.worker.tool_calls} tool calls"
        if r.worker.stop_reason:
            worker += f" ({md(r.worker.stop_reason, limit=40)})"
        verdict = f"**{md(r.review.verdict or '?')}**"
        if r.review.short_circuited:
            verdict += " (without the reviewer)"
        if r.review.summary:
            verdict += ": " + md(r.review.summary, limit=CELL_CHARS)
        out.append(f"| {r.round} | {worker} | {_checks(r.verify)} | {verdict} |")
    return out


def _checks(verify: dict[str, Any]) -> str:
    if not isinstance(verify, dict) or not verify:
        return "not run"
    commands = [c for c in verify.get("commands") or () if isinstance(c, dict)]
    if verify.get("passed") is True:
        return f"passed ({len(commands)})" if commands else "passed (no checks)"
    failed = [c for c in commands if c.get("exit_code") != 0]
    said = "; ".join(
        md(c.get("command", "?"), limit=120) + f" (exit {md(c.get('exit_code', '?'))})"
        for c in failed
    )
    return f"**failed**: {said}" if said else "**failed**"


def _verdict(r: Round) -> list[str]:
    out = [
        f"**{md(r.review.verdict or '?')}**"
        + (f": {md(r.review.summary)}" if r.review.summary else "")
    ]
    criteria = [a for a in r.review.ac_check if isinstance(a, dict)]
    if criteria:
        out += ["", "Acceptance criteria:", ""]
        out += [
            f"- [{'x' if a.get('satisfied') else ' '}] {md(a.get('ac', '?'), limit=500)}"
            for a in criteria
        ]
    comments = [c for c in r.review.comments if isinstance(c, dict)]
    if comments:
        out += ["", "Comments:", ""]
        for c in comments:
            where = str(c.get("file") or "")
            if where and c.get("line"):
                where += f":{c['line']}"
            where = f"{md(where)}: " if where else ""
            severity = md(c.get("severity") or "note", limit=20)
            out.append(f"- \\[{severity}\\] {where}{md(c.get('comment', ''), limit=2000)}")
    return out


def _diff_stat(state: RunState, repo: Path | None) -> list[str]:
    if repo is None:
        return ["The target repository was not read."]
    if not state.branch or not state.base_sha:
        return ["No branch yet."]
    try:
        head = TargetRepo(repo).branch_sha(state.branch)
        if head is None:
            return [f"The branch {md(state.branch)} is gone (merged and deleted, or removed)."]
        stat = git(repo, "diff", "--stat=100", f"{state.base_sha}..{head}", cut_ok=True)
    except GitError as exc:
        return [f"The diff stat could not be read: {md(exc, limit=500)}"]
    shown = stat.rstrip("\n").split("\n") if stat.strip() else []
    if not shown:
        return [f"No changes between {md(state.base_sha[:12])} and {md(head[:12])}."]
    if len(shown) > DIFF_STAT_LINES:
        left = len(shown) - DIFF_STAT_LINES
        shown = [*shown[: DIFF_STAT_LINES - 1], f" ... {left} more files", shown[-1]]
    return [
        f"`git diff --stat {state.base_sha[:12]}..{head[:12]}` ({md(state.branch)}):",
        "",
        fenced("\n".join(shown)),
    ]


def _when(ts: float | None) -> str:
    if not ts:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
