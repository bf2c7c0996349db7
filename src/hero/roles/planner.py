"""The planner: turns a markdown plan into a DAG of stories, answering one JSON object.

The answer's shape is a contract::

    {"plan": "<name>",
     "stories": [{"id", "title", "priority", "verify", "scope", "depends_on", "body"}]}

with ``verify`` a mapping of tier -> commands (the tiers' order kept) or a flat list. Code
fences and prose around the object are tolerated. hero checks the answer (see
:func:`check_answer`) and, when it is not usable, sends it back once with the exact list
of problems; an answer still unusable raises :class:`PlanInvalid` with that list.

With tools (its ``tools:`` in config/roles.yaml, by default the read-only set) the planner
first looks around the target repository, read-only and with at most
``planner_max_tool_calls`` calls (hero.roles.looking, the reviewer's loop), then gives the
same answer; the corrected answer is asked for without tools. ``tools: []``: one request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hero.errors import HeroError
from hero.llm.client import Completion, Model
from hero.names import ID_RE, is_story_id
from hero.plans.dag import problems as dag_problems
from hero.roles.answers import FENCE, find_object
from hero.roles.prompting import render, render_added
from hero.story.format import dumps_story, parse_story_text
from hero.story.record import Story, StoryError
from hero.yamlio import ValueProblem, describe, string_list

if TYPE_CHECKING:
    from hero.roles.reviewer import Looking
    from hero.trace import Trace

#: What the task says, at its end, to a planner with tools (hero.roles.looking).
LOOKING = (
    "\n\n## Looking at the repository\n"
    "You may look at the target repository before you answer: your tools ({tools}) read it "
    "read-only, at most {calls} calls. Read the files the plan touches, search for what it "
    "names, look at its history, so that each story's scope and verify commands fit the code "
    "as it is. Then answer with the JSON object alone."
)
#: The keys of one story in the planner's answer (``body`` is the markdown; the rest are
#: the story file's frontmatter fields).
STORY_KEYS = ("id", "title", "priority", "verify", "scope", "depends_on", "body")
#: How many answers the planner gives at most: the first, and one corrected after hero
#: listed its problems.
MAX_ANSWERS = 2
NO_RULES = "(none: the repository has no AGENTS.md, CLAUDE.md or .roo/rules/)"


class PlanInvalid(HeroError):
    """The planner's answer stayed unusable; ``errors`` lists every problem, one line each."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


@dataclass(frozen=True)
class DraftStory:
    """One story of a checked answer: frontmatter fields and markdown body, ready for
    :func:`hero.story.format.write_story`, and the Story they make (as hero will read it)."""

    metadata: dict[str, Any]
    body: str
    story: Story

    @property
    def id(self) -> str:
        return str(self.metadata["id"])

    @property
    def title(self) -> str:
        return " ".join(str(self.metadata["title"]).split())

    @property
    def depends_on(self) -> tuple[str, ...]:
        return tuple(self.metadata.get("depends_on", ()))


@dataclass(frozen=True)
class Draft:
    """A checked plan: the planner's name for it ("" if it gave none) and its stories."""

    plan: str
    stories: tuple[DraftStory, ...]
    answers: int = 1  # how many answers it took
    tokens_in: int = 0  # over every request of the planner's (its looking too)
    tokens_out: int = 0
    requests: int = 0  # the planner's model requests, its looking's included

    def deps(self) -> dict[str, tuple[str, ...]]:
        return {s.id: s.depends_on for s in self.stories}

    def titles(self) -> dict[str, str]:
        return {s.id: s.title for s in self.stories}


# ----------------------------------------------------------------------------- the call


def planner_messages(
    plan_text: str,
    *,
    plan_file: str,
    layout: str,
    rules: str,
    home: Path | None,
    recap: str = "",
    looking: str = "",
) -> list[dict[str, Any]]:
    """The system and task messages; PromptError for a template that does not fit.
    ``recap``: the last stories on the repository (hero.memory.recall.render_recap), ""
    for none; ``looking``: the note telling a planner with tools it may look, "" for none."""
    task = render_added(
        "planner_task.md",
        home,
        {"recap": recap},
        plan_file=plan_file,
        plan=plan_text.strip(),
        layout=layout.strip() or "(no tracked files)",
        rules=rules.strip() or NO_RULES,
    )
    return [
        {"role": "system", "content": render("planner_system.md", home)},
        {"role": "user", "content": task + looking},
    ]


class _Tally:
    """The model, counting the tokens and requests of every answer it gives."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.tokens_in = 0
        self.tokens_out = 0
        self.requests = 0

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> Completion:
        completion = self.model.complete(messages, tools)
        self.tokens_in += completion.tokens_in
        self.tokens_out += completion.tokens_out
        self.requests += 1
        return completion


def plan_stories(
    model: Model,
    plan_text: str,
    *,
    plan_file: str,
    layout: str,
    rules: str,
    home: Path | None,
    check: Callable[[Draft], list[str]] | None = None,
    recap: str = "",
    looking: Looking | None = None,
    trace: Trace | None = None,
) -> Draft:
    """Ask the planner for the plan's stories and check its answer.

    An unusable answer goes back to the planner once, followed by a message listing every
    problem; PlanInvalid (with the last answer's problems) if the second is unusable too.
    ``check`` adds the caller's problems with a well-formed answer (the command policy's
    refusals of its verify commands). LlmError from the model passes through.
    ``looking`` with tools: the first answer comes after a bounded, read-only look around
    (hero.roles.looking), its calls and answers written to ``trace``.
    """
    looks = looking is not None and bool(looking.tools)
    note = ""
    if looking is not None and looks:
        note = LOOKING.format(tools=", ".join(looking.tools.names()), calls=looking.max_tool_calls)
    messages = planner_messages(
        plan_text,
        plan_file=plan_file,
        layout=layout,
        rules=rules,
        home=home,
        recap=recap,
        looking=note,
    )
    tally = _Tally(model)
    errors: list[str] = []
    for answer in range(1, MAX_ANSWERS + 1):
        if answer == 1 and looking is not None and looks:
            text = _look_and_answer(tally, messages, looking, trace)
        else:
            text = tally.complete(messages).content
        try:
            draft = check_answer(text)
            errors = check(draft) if check is not None else []
        except PlanInvalid as exc:
            errors = exc.errors
        if not errors:
            return Draft(
                draft.plan,
                draft.stories,
                answers=answer,
                tokens_in=tally.tokens_in,
                tokens_out=tally.tokens_out,
                requests=tally.requests,
            )
        messages = [
            *messages,
            {"role": "assistant", "content": text},
            {
                "role": "user",
                "content": render(
                    "planner_retry.md", home, errors="\n".join(f"- {e}" for e in errors)
                ),
            },
        ]
    raise PlanInvalid(errors)


def _look_and_answer(
    model: Model, messages: list[dict[str, Any]], looking: Looking, trace: Trace | None
) -> str:
    """The planner's first answer after its look around (hero.roles.looking); ``messages``
    end with that answer as plain text (its tool calls and their results left out, so that
    a corrected answer is asked for on the same footing as without tools)."""
    from hero.roles.looking import look_and_answer
    from hero.trace import BY_PLANNER
    from hero.trace import Trace as TraceFile

    def record(completion: Completion, turn: int | None) -> None:
        """Its answers' tokens are in the Draft (counted by the tally); its calls are traced."""

    return look_and_answer(
        model,
        list(messages),
        looking.ctx,
        looking.tools,
        trace if trace is not None else TraceFile(None),
        max_tool_calls=looking.max_tool_calls,
        by=BY_PLANNER,
        on_answer=record,
    )


# ----------------------------------------------------------------------------- the answer


def find_plan_object(text: str) -> dict[str, Any] | None:
    """The JSON object with a ``stories`` key in the answer: inside a code fence or with
    prose around it; of several objects, the first that has ``stories``."""
    return find_object(text, "stories")


def check_answer(text: str) -> Draft:
    """The planner's answer as a Draft; PlanInvalid listing every problem found.

    Each story must be one hero would accept as a hand-written story file (checked by
    :func:`hero.story.format.dumps_story`, the story writer itself), with a non-empty
    ``## Acceptance Criteria`` list; ids are unique, every dependency is a story of the
    plan, and the stories form a DAG with at least one root (:func:`hero.plans.dag.problems`).
    """
    data = find_plan_object(text)
    if data is None:
        raise PlanInvalid([_no_object(text)])
    raw = data.get("stories")
    if not isinstance(raw, list) or not raw:
        raise PlanInvalid(
            [f'"stories": expected a non-empty list of story objects; found {describe(raw)}']
        )
    errors: list[str] = []
    drafts: list[DraftStory] = []
    # The DAG is checked over every story with an id, valid or not, so that one answer's
    # cycle is reported beside its bad title rather than only after it is fixed.
    nodes: dict[str, tuple[str, ...]] = {}
    first_of: dict[str, int] = {}
    for n, entry in enumerate(raw, 1):
        draft, story_id, deps = _check_story(n, entry, errors)
        if story_id is None:
            continue
        if story_id in first_of:
            errors.append(
                f"story {n} ({story_id!r}): id: expected unique ids; story {first_of[story_id]} "
                "has this id too"
            )
            continue
        first_of[story_id] = n
        nodes[story_id] = deps
        if draft is not None:
            drafts.append(draft)
    errors.extend(dag_problems(nodes))
    if errors:
        raise PlanInvalid(errors)
    name = data.get("plan")
    return Draft(name.strip() if isinstance(name, str) else "", tuple(drafts))


def _check_story(
    n: int, entry: Any, errors: list[str]
) -> tuple[DraftStory | None, str | None, tuple[str, ...]]:
    """One story of the answer checked: (the story or None, its id if it has a usable one,
    its dependencies); its problems are added to ``errors``."""
    if not isinstance(entry, dict):
        errors.append(f"story {n}: expected a JSON object; found {describe(entry)}")
        return None, None, ()
    raw_id = entry.get("id")
    story_id = raw_id if is_story_id(raw_id) else None
    where = f"story {n} ({raw_id!r})" if isinstance(raw_id, str) else f"story {n}"
    before = len(errors)
    unknown = [str(k) for k in entry if k not in STORY_KEYS]
    if unknown:
        errors.append(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; expected only "
            f"{', '.join(STORY_KEYS)}"
        )
    body = entry.get("body")
    if not isinstance(body, str) or not body.strip():
        errors.append(
            f"{where}: body: expected the story's markdown (## Goal, ## Acceptance Criteria, "
            f"...); found {describe(body)}"
        )
        body = ""
    deps = _depends_on(entry.get("depends_on"), where, errors)
    meta = {
        k: entry[k]
        for k in STORY_KEYS
        if k not in ("body", "depends_on") and entry.get(k) not in (None, [], {})
    }
    # A self-dependency is left to the DAG check of the whole plan, which names it once.
    if others := [d for d in deps if d != raw_id]:
        meta["depends_on"] = others
    if not body:
        return None, story_id, deps
    try:  # through the story writer itself: what it refuses, hero would refuse to read
        story = parse_story_text(dumps_story(meta, body, path=where), Path(where))
    except StoryError as exc:
        errors.append(f"{where}: {exc.field}: {exc.message}")
        return None, story_id, deps
    if not story.acceptance_criteria:
        errors.append(
            f"{where}: body: expected a '## Acceptance Criteria' section listing verifiable "
            "criteria (- [ ] ...); found none"
        )
    if len(errors) > before:
        return None, story_id, deps
    return DraftStory(meta, body.strip(), story), story_id, deps


def _depends_on(value: Any, where: str, errors: list[str]) -> tuple[str, ...]:
    try:
        deps = string_list(value, noun="story ids", item="id")
    except ValueProblem as exc:
        errors.append(f"{where}: depends_on: {exc.message}")
        return ()
    bad = [d for d in deps if not is_story_id(d)]
    if bad:
        errors.append(
            f"{where}: depends_on: expected story ids (pattern {ID_RE}); found "
            f"{', '.join(map(repr, bad))}"
        )
    return tuple(d for d in dict.fromkeys(deps) if d not in bad)


def _no_object(text: str) -> str:
    """What to say of an answer without a usable object: where its JSON broke, if it has any."""
    if not text.strip():
        return 'the answer was empty; expected one JSON object with a "stories" list'
    starts = [m.group(1) for m in FENCE.finditer(text)]
    if not starts and "{" in text:
        starts = [text[text.index("{") : text.rindex("}") + 1 if "}" in text else len(text)]]
    for candidate in starts:
        try:
            value = json.loads(candidate)
        except ValueError as exc:
            return (
                f"the answer's JSON is not valid ({exc}); expected one JSON object with a "
                '"stories" list'
            )
        if isinstance(value, Mapping):
            return 'the answer\'s JSON object has no "stories" key; expected a "stories" list'
    return 'the answer held no JSON object with a "stories" list'
