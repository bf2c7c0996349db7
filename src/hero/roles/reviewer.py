"""The reviewer: judges the diff against the story, answering JSON: one LLM call, or, with
tools, a bounded read-only look around the repository first (hero.roles.looking)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hero.agent.tools.context import ToolContext
from hero.agent.tools.toolset import Toolset
from hero.git.ops import Bounded, diff_since, log_since
from hero.git.output import added_build_output, build_output_line
from hero.llm.client import Model
from hero.roles.answers import find_object
from hero.roles.prompting import render, render_added
from hero.story.record import Story
from hero.trace import Trace

APPROVED = "APPROVED"
CHANGES_REQUESTED = "CHANGES_REQUESTED"
#: What the reviewer's task says in place of an empty log, stat or diff: plainly, so that
#: no reviewer takes an empty change for a small one.
NO_COMMITS = "(none: there is no commit on the branch since the base)"
NO_FILES_CHANGED = "(none: no file differs from the base)"
#: What the task says, after the diff, to a reviewer with tools (hero.roles.looking).
LOOKING = (
    "\n\n## Looking outside the diff\n"
    "You may look beyond the diff before you answer: your tools ({tools}) read the story's "
    "repository as the branch's tip has it, read-only, at most {calls} calls. Check what the "
    "change relies on or what the code outside the diff already does. Then answer with the "
    "JSON verdict alone."
)
EMPTY_DIFF = (
    "THE DIFF IS EMPTY: the branch's files are exactly those of the base; this story's work "
    "changed nothing."
)


@dataclass(frozen=True)
class Looking:
    """What a reviewer that can look is given: its toolset (read-only) and the context its
    tools run in (the story's repository), and the most tool calls it may make."""

    tools: Toolset
    ctx: ToolContext
    max_tool_calls: int = 12


@dataclass(frozen=True)
class Verdict:
    verdict: str
    summary: str
    ac_check: list[dict[str, Any]] = field(default_factory=list)
    comments: list[dict[str, Any]] = field(default_factory=list)
    short_circuited: bool = False
    malformed: bool = False

    @property
    def approved(self) -> bool:
        return self.verdict == APPROVED

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def feedback(self) -> str:
        """The verdict as markdown: what the worker reads next round, and the story file keeps."""
        lines = [f"**{self.verdict}**: {self.summary}"]
        unmet = [a for a in self.ac_check if not a.get("satisfied")]
        if unmet:
            lines.append("\nAcceptance criteria not yet met:")
            lines.extend(f"- {a.get('ac', '?')}" for a in unmet)
        if self.comments:
            lines.append("\nComments:")
            for c in self.comments:
                where = c.get("file") or ""
                if where and c.get("line"):
                    where += f":{c['line']}"
                prefix = f"[{c.get('severity', 'nit')}] " + (f"{where}: " if where else "")
                lines.append(f"- {prefix}{c.get('comment', '')}")
        return "\n".join(lines)


def short_circuit(summary: str) -> Verdict:
    """A verdict given without calling the model: a red verifier, a worker guardrail, or
    what the worker or the checks did to the repository (see ``hero.git.guard``)."""
    return Verdict(CHANGES_REQUESTED, summary, short_circuited=True)


def parse_verdict(text: str) -> Verdict:
    """Read the reviewer's answer; fences and prose around the JSON are tolerated.

    Anything unreadable counts as CHANGES_REQUESTED: approving what nobody could read
    would be a false pass. An APPROVED that lists a blocker or an unmet criterion is
    not an approval either.
    """
    data = find_object(text, "verdict")
    if data is None:
        excerpt = text.strip().replace("\n", " ")[:200]
        return Verdict(
            CHANGES_REQUESTED,
            f"the reviewer's answer was not the JSON verdict asked for: {excerpt!r}",
            malformed=True,
        )
    verdict = str(data.get("verdict", "")).strip().upper().replace(" ", "_")
    summary = str(data.get("summary", "")).strip()
    ac_check = [a for a in _list(data.get("ac_check")) if isinstance(a, dict)]
    comments = [c for c in _list(data.get("comments")) if isinstance(c, dict)]
    for a in ac_check:
        a["satisfied"] = _truthy(a.get("satisfied"))
    for c in comments:
        c["severity"] = "blocker" if str(c.get("severity", "")).lower() == "blocker" else "nit"
    if verdict not in (APPROVED, CHANGES_REQUESTED):
        return Verdict(
            CHANGES_REQUESTED,
            f"the reviewer gave no valid verdict ({data.get('verdict')!r}); {summary}".strip(),
            ac_check,
            comments,
            malformed=True,
        )
    if verdict == APPROVED:
        blockers = sum(1 for c in comments if c["severity"] == "blocker")
        unmet = sum(1 for a in ac_check if not a["satisfied"])
        if blockers or unmet:
            why = []
            if blockers:
                why.append(f"{blockers} blocker comment(s)")
            if unmet:
                why.append(f"{unmet} unmet acceptance criterion(s)")
            summary = (
                f"approved with {' and '.join(why)}, so counted as changes requested. {summary}"
            )
            verdict = CHANGES_REQUESTED
    return Verdict(verdict, summary, ac_check, comments)


def review_commits(
    model: Model,
    story: Story,
    *,
    repo: Path,
    base_sha: str,
    tip: str,
    round_no: int,
    branch: str,
    verify_summary: str,
    home: Path | None,
    trace: Trace,
    recap: str = "",
    build_output: Sequence[str] = (),
    looking: Looking | None = None,
) -> Verdict:
    """Review the story's commits from ``base_sha`` to ``tip``, read in ``repo`` (the user's
    repository, where hero brought them): their log and their diff, cut for size with a
    note saying what was left out, and a line naming the files matching ``build_output``
    (the setting's patterns) that they add: the worker's own commits of build output, which
    hero does not undo, are pointed out rather than left to a diff that may be cut."""
    log = log_since(repo, base_sha, tip=tip)
    diff, stat = diff_since(repo, base_sha, tip=tip)
    committed = build_output_line(added_build_output(repo, base_sha, tip, build_output))
    return review(
        model,
        story,
        round_no=round_no,
        branch=branch,
        base_sha=base_sha,
        verify_summary=verify_summary,
        git_log=log.text + (f"\n[... {log.cut_chars} characters cut]" if log.cut_chars else ""),
        diff_stat=stat,
        diff=_diff_text(diff),
        home=home,
        trace=trace,
        recap=recap,
        build_output=committed,
        looking=looking,
    )


def _diff_text(diff: Bounded) -> str:
    if diff.omitted:
        return diff.text + (
            f"\n\n[diff cut for size: {diff.cut_chars} characters left out, "
            f"covering: {', '.join(diff.omitted)}]"
        )
    if diff.cut_chars:
        return diff.text + f"\n\n[... {diff.cut_chars} characters of diff cut for size]"
    return diff.text


def review(
    model: Model,
    story: Story,
    *,
    round_no: int,
    branch: str,
    base_sha: str,
    verify_summary: str,
    git_log: str,
    diff_stat: str,
    diff: str,
    home: Path | None,
    trace: Trace,
    recap: str = "",
    build_output: str = "",
    looking: Looking | None = None,
) -> Verdict:
    """One model call (with ``looking`` and tools in it: a bounded, read-only tool loop
    first, hero.roles.looking); raises PromptError for a template that does not fit its values.
    ``recap``: the last stories on the repository (hero.memory.recall.render_recap), ""
    for none (the prompt is then as without memory). ``build_output``: the line naming the
    build output the branch adds (hero.git.output.build_output_line), "" for none (the
    prompt is then as before that line existed)."""
    task = render_added(
        "reviewer_task.md",
        home,
        {
            "recap": recap,
            "build_output": f"\n{build_output}\n" if build_output else "",
            "looking": _looking_note(looking),
        },
        id=story.id,
        title=story.title,
        body=story.body.strip(),
        scope=", ".join(story.scope) or "(whole repository)",
        round=round_no,
        verify_summary=verify_summary,
        branch=branch,
        git_log=git_log.strip() or NO_COMMITS,
        diff_stat=diff_stat.strip() or NO_FILES_CHANGED,
        base_sha=base_sha[:12],
        diff=diff.strip() or EMPTY_DIFF,
    )
    messages = [
        {"role": "system", "content": render("reviewer_system.md", home)},
        {"role": "user", "content": task},
    ]
    trace.review_request(task)
    if looking is not None and looking.tools:
        from hero.roles.looking import look_and_answer

        answer = look_and_answer(
            model,
            messages,
            looking.ctx,
            looking.tools,
            trace,
            max_tool_calls=looking.max_tool_calls,
        )
        return parse_verdict(answer)
    completion = model.complete(messages)
    trace.review_answer(completion)
    return parse_verdict(completion.content)


def _looking_note(looking: Looking | None) -> str:
    if looking is None or not looking.tools:
        return ""
    return LOOKING.format(tools=", ".join(looking.tools.names()), calls=looking.max_tool_calls)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "satisfied")
    return bool(value)
