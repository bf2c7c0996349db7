"""The frontmatter's fields, each declared once (:data:`FIELDS`: name, type, doc, reader), and
their checks: the id, priority, dependencies, the checks (``verify:``, flat or in tiers), the
scope, a story's models, its source. Every problem is a StoryError naming the file and field."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

from hero.names import (
    ID_RE,
    MAX_ID_CHARS,
    RESERVED_IDS,
    is_story_id,
    story_id_problem,
)
from hero.story.record import (
    EFFORT_NOT_SENT,
    FLAT_VERIFY_TIER,
    MAX_MODEL_CHARS,
    MODEL_ROLES,
    PRIORITIES,
    SOURCE_KEYS,
    Story,
    StoryError,
    VerifyTier,
)
from hero.yamlio import (
    ValueProblem,
    describe,
    did_you_mean,
    quote,
    string_list,
)

#: A reasoning effort as providers spell them (minimal, low, medium, high, xhigh, ...).
_EFFORT_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")

#: GitHub's own limit on a label's name; and how many labels a story may have.
MAX_LABEL_CHARS = 50
MAX_LABELS = 20


# ----------------------------------------------------------------------------- fields


@dataclass(frozen=True)
class StoryField:
    """One field of a story's frontmatter, declared once: the reference page
    (docs/story-fields.md) shows it, and parsing reads it with ``read``."""

    name: str
    type: str
    """The type as the reference shows it."""
    doc: str
    """What the field does, in a line or two."""
    read: Callable[[Any, Path, Mapping[str, Any]], Any]
    """The Story's value from the YAML value (None: absent), given the fields read before
    it; raises StoryError naming the field."""
    default: str = ""
    """The default as the reference shows it; "" for a required field."""

    @property
    def required(self) -> bool:
        return not self.default


def _read_id(value: Any, path: Path, fields: Mapping[str, Any]) -> str:
    story_id = _required_str(value, "id", path)
    problem = story_id_problem(story_id)
    if problem is not None:
        raise StoryError(path, "id", problem)
    return story_id


def _read_title(value: Any, path: Path, fields: Mapping[str, Any]) -> str:
    return _required_str(value, "title", path)


def _read_priority(value: Any, path: Path, fields: Mapping[str, Any]) -> str:
    if value is None:
        return "normal"
    if value not in PRIORITIES:
        raise StoryError(
            path, "priority", f"expected one of {', '.join(PRIORITIES)}; found {describe(value)}"
        )
    return str(value)


def _read_max_retries(value: Any, path: Path, fields: Mapping[str, Any]) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise StoryError(
            path, "max_retries", f"expected a whole number >= 1; found {describe(value)}"
        )
    return value


def _read_depends_on(value: Any, path: Path, fields: Mapping[str, Any]) -> tuple[str, ...]:
    depends_on = _str_list(value, "depends_on", path)
    for dep in depends_on:
        if not is_story_id(dep):
            raise StoryError(
                path, "depends_on", f"expected story ids (pattern {ID_RE}); found {quote(dep)}"
            )
        if dep == fields["id"]:
            raise StoryError(
                path,
                "depends_on",
                f"expected ids of other stories; found the story's own id {quote(dep)}",
            )
    return depends_on


def _read_base_ref(value: Any, path: Path, fields: Mapping[str, Any]) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise StoryError(
            path, "base_ref", f"expected a git ref as a string (e.g. main); found {describe(value)}"
        )
    return value.strip() if isinstance(value, str) else None


def _read_revises(value: Any, path: Path, fields: Mapping[str, Any]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not is_story_id(value.strip()):
        raise StoryError(
            path,
            "revises",
            f"expected the id of a finished story (pattern {ID_RE}); found {describe(value)}",
        )
    target = value.strip()
    if target == fields["id"]:
        raise StoryError(
            path,
            "revises",
            f"expected the id of another story; found the story's own id {quote(target)}",
        )
    for other in ("depends_on", "base_ref"):
        if fields.get(other):
            raise StoryError(
                path,
                "revises",
                f"a revision starts from the tip of the branch of {quote(target)}; found "
                f"{other} as well: remove one of them",
            )
    return target


def _read_allow_empty(value: Any, path: Path, fields: Mapping[str, Any]) -> bool:
    if value is not None and not isinstance(value, bool):
        raise StoryError(path, "allow_empty", f"expected true or false; found {describe(value)}")
    return bool(value)


def _read_memory(value: Any, path: Path, fields: Mapping[str, Any]) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise StoryError(path, "memory", f"expected true or false; found {describe(value)}")
    return value if isinstance(value, bool) else None


def _per_role(
    value: Any, path: Path, name: str, check: Callable[[str], str | None], what: str
) -> str | dict[str, str] | None:
    """``model:`` / ``reasoning_effort:``: one string for both roles, or a mapping of
    :data:`MODEL_ROLES` to strings; each string stripped and checked by ``check`` (None:
    fine, else what is wrong with it)."""
    if value is None:
        return None
    expected = f"expected {what}, or a mapping like `{{worker: ..., reviewer: ...}}`"
    if isinstance(value, str):
        return _role_value(value, path, name, check, what)
    if not isinstance(value, dict):
        raise StoryError(path, name, f"{expected}; found {describe(value)}")
    if not value:
        raise StoryError(path, name, f"{expected}; found an empty mapping")
    out: dict[str, str] = {}
    for role, item in value.items():
        if role not in MODEL_ROLES:
            raise StoryError(
                path,
                name,
                f"unknown role {quote(str(role))}; expected {' or '.join(MODEL_ROLES)}",
            )
        if not isinstance(item, str):
            raise StoryError(path, f"{name}.{role}", f"expected {what}; found {describe(item)}")
        out[role] = _role_value(item, path, f"{name}.{role}", check, what)
    return out


def _role_value(
    text: str, path: Path, where: str, check: Callable[[str], str | None], what: str
) -> str:
    stripped = text.strip()
    problem = f"expected {what}; found an empty string" if not stripped else check(stripped)
    if problem:
        raise StoryError(path, where, problem)
    return stripped


def model_problem(text: str) -> str | None:
    if len(text) > MAX_MODEL_CHARS:
        return f"expected at most {MAX_MODEL_CHARS} characters; found {len(text)}"
    if any(c.isspace() or not c.isprintable() for c in text):
        return f"expected a model name without spaces or control characters; found {quote(text)}"
    return None


def effort_problem(text: str) -> str | None:
    if _EFFORT_RE.match(text):
        return None
    return (
        "expected a word like minimal, low, medium or high (letters, digits, '_', '-'; at "
        f"most 32 characters), or {EFFORT_NOT_SENT} (not sent); found {quote(text)}"
    )


def role_value(value: str | Mapping[str, str] | None, role: str) -> str | None:
    """The value a story's ``model:`` or ``reasoning_effort:`` gives ``role``; None: none."""
    if value is None or isinstance(value, str):
        return value
    return value.get(role)


#: A story's frontmatter fields, in the order hero writes them.
FIELDS = (
    StoryField(
        "id",
        "story id",
        "The story's name: its branch is hero/<id>, its run record runs/state/<id>.json. "
        f"Letters, digits, '.', '_' or '-', starting with a letter or digit (pattern `{ID_RE}`); "
        f"at most {MAX_ID_CHARS} characters; no '..', not ending in '.' or '.lock'; not "
        f"{' or '.join(RESERVED_IDS)} (reserved for plans' branches and paths).",
        _read_id,
    ),
    StoryField("title", "string", "One line saying what the story is.", _read_title),
    StoryField(
        "priority",
        "one of " + ", ".join(PRIORITIES),
        "Which of the waiting stories runs first.",
        _read_priority,
        "normal",
    ),
    StoryField(
        "max_retries",
        "whole number >= 1",
        "Worker -> Verifier -> Reviewer rounds for this story before hero gives up on it.",
        _read_max_retries,
        "max_retries of config/roles.yaml",
    ),
    StoryField(
        "verify",
        "list of commands, or mapping of tier name -> list of commands",
        "The checks after each Worker round: shell commands run in the worktree, each must "
        "exit 0. Named tiers run in the order written and fail fast: a red tier skips the "
        "later ones; every command within a tier runs.",
        lambda value, path, fields: _verify(value, path),
        "default_verify of config/roles.yaml",
    ),
    StoryField(
        "setup",
        "list of commands",
        "Shell commands that complete the project's environment for this story, run after "
        "the setup of config/roles.yaml (in the story's repository, in the sandbox, before "
        "round 1); they are part of the environment's key.",
        lambda value, path, fields: _str_list(value, "setup", path),
        "none: the setup of config/roles.yaml alone",
    ),
    StoryField(
        "scope",
        "list of paths and globs",
        "What the Worker may change: .gitignore-style globs (`*` within a path component, "
        "`**` across, a glob without `/` at any depth). A write outside is refused, a bash "
        "command's change outside put back; protected files win over scope. Stories whose "
        "scopes overlap are flagged, and run one after the other with `overlap: serial`.",
        lambda value, path, fields: _str_list(value, "scope", path),
        "none: every file",
    ),
    StoryField(
        "depends_on",
        "list of story ids",
        "Stories this one builds on: it waits until each has passed, then starts from their "
        "work (base_ref is then not used).",
        _read_depends_on,
        "[]",
    ),
    StoryField(
        "base_ref",
        "git ref",
        "The branch, tag or commit the story's branch starts from.",
        _read_base_ref,
        "target_base_ref of config/roles.yaml, else the repository's current HEAD",
    ),
    StoryField(
        "revises",
        "story id",
        "Makes this story a follow-up of a finished story (passed, or ended with its branch "
        "kept): its rounds run on that story's branch, starting from its tip, and this "
        "story's text is the findings the worker addresses, shown as a reviewer's feedback. "
        "Verify and review run as always; the new commits land on the same branch. Not with "
        "depends_on or base_ref. `hero revise` writes such a story (docs/revise.md).",
        _read_revises,
        "none",
    ),
    StoryField(
        "allow_empty",
        "true or false",
        "Whether the story may pass without a commit of its own.",
        _read_allow_empty,
        "false",
    ),
    StoryField(
        "memory",
        "true or false",
        "false: the repository's memory (docs/memory.md) is neither shown to this story nor "
        "learns from it; true cannot turn on a memory the home turned off.",
        _read_memory,
        "memory_enabled of config/roles.yaml",
    ),
    StoryField(
        "model",
        "model name, or mapping of worker / reviewer -> model name",
        "The model the story's Worker and Reviewer use: `<model>` on the role's provider, or "
        "`<provider>:<model>` when the part before the first ':' is the name of a file in "
        "config/providers/ (so `qwen2.5:7b` stays a model name). A mapping sets the roles "
        "apart; a role it leaves out keeps its own. `hero run --model` overrides it.",
        lambda value, path, fields: _per_role(
            value, path, "model", model_problem, "a model name as a string"
        ),
        "the role's model in config/roles.yaml",
    ),
    StoryField(
        "reasoning_effort",
        "word, or mapping of worker / reviewer -> word",
        "The reasoning effort sent with the story's requests (minimal, low, medium, high, "
        f"...); `{EFFORT_NOT_SENT}`: not sent. A mapping sets the roles apart.",
        lambda value, path, fields: _per_role(
            value, path, "reasoning_effort", effort_problem, "a word like low or high"
        ),
        "the role's, or the provider's default_reasoning_effort when the model is on "
        "another provider",
    ),
    StoryField(
        "tools",
        "mapping of worker / reviewer -> list of tool names",
        "Narrows the tools a role's model is given, for this story: each list holds names "
        "the role has in config/roles.yaml (hero's tool names, `<server>.<tool>`, "
        "`<server>.*`); `[]`: none. It cannot add a tool the role does not have.",
        lambda value, path, fields: _tools(value, path),
        "the role's tools in config/roles.yaml",
    ),
    StoryField(
        "source",
        "mapping: " + ", ".join(SOURCE_KEYS),
        "Where a story taken from a GitHub issue came from (hero writes it): OWNER/NAME, the "
        "issue's number, its URL and author; repo and issue required.",
        lambda value, path, fields: _source(value, path),
        "none (a story a person wrote)",
    ),
    StoryField(
        "labels",
        "list of strings",
        f"Words to group and filter stories by (the status page's label filter): each one "
        f"line of at most {MAX_LABEL_CHARS} characters, at most {MAX_LABELS} of them. A story "
        "taken from a GitHub issue carries the issue's labels.",
        lambda value, path, fields: _labels(value, path),
        "[]",
    ),
)
KNOWN_FIELDS = tuple(f.name for f in FIELDS)
#: The Story's value of each field when the frontmatter does not give it.
STORY_DEFAULTS = {f.name: f.default for f in dataclass_fields(Story) if f.name in KNOWN_FIELDS}


def validate_fields(meta: dict[Any, Any], path: Path) -> dict[str, Any]:
    """The frontmatter ``meta`` read field by field (:data:`FIELDS`); an unknown field is
    an error with the closest known one."""
    for key in meta:
        if key not in KNOWN_FIELDS:
            name = str(key)
            hint = did_you_mean(name, KNOWN_FIELDS)
            raise StoryError(
                path, name, f"unknown field{hint}; known fields: {', '.join(KNOWN_FIELDS)}"
            )
    values: dict[str, Any] = {}
    for f in FIELDS:
        values[f.name] = f.read(meta.get(f.name), path, values)
    return values


def _tools(value: Any, path: Path) -> dict[str, tuple[str, ...]] | None:
    """``tools:``: a mapping of :data:`MODEL_ROLES` to lists of tool names (checked against
    the roles' own lists once the configuration is known: hero.llm.models)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        raise StoryError(
            path,
            "tools",
            "expected a mapping like `{worker: [read_file, grep], reviewer: []}`; found "
            f"{describe(value)}",
        )
    out: dict[str, tuple[str, ...]] = {}
    for role, names in value.items():
        if role not in MODEL_ROLES:
            raise StoryError(
                path, "tools", f"unknown role {quote(str(role))}; expected worker or reviewer"
            )
        if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
            raise StoryError(
                path, f"tools.{role}", f"expected a list of tool names; found {describe(names)}"
            )
        out[role] = tuple(dict.fromkeys(n.strip() for n in names))
    return out


def _source(value: Any, path: Path) -> dict[str, Any] | None:
    """``source:``: a GitHub issue, as ``{repo: OWNER/NAME, issue: N, url: ..., author: ...}``
    (repo and issue required)."""
    if value is None:
        return None
    expected = "expected a mapping like `{repo: OWNER/NAME, issue: 12, url: ..., author: ...}`"
    if not isinstance(value, dict):
        raise StoryError(path, "source", f"{expected}; found {describe(value)}")
    for key in value:
        if key not in SOURCE_KEYS:
            name = str(key)
            raise StoryError(
                path,
                f"source.{name}",
                f"unknown key{did_you_mean(name, SOURCE_KEYS)}; known keys: {', '.join(SOURCE_KEYS)}",
            )
    out: dict[str, Any] = {}
    for key in ("repo", "issue"):
        if value.get(key) is None:
            raise StoryError(path, f"source.{key}", f"required; {expected}")
    for key in ("repo", "url", "author"):
        text = value.get(key)
        if text is None:
            continue
        if not isinstance(text, str) or not text.strip() or "\n" in text:
            raise StoryError(
                path, f"source.{key}", f"expected a one-line string; found {describe(text)}"
            )
        out[key] = text.strip()
    if not re.match(r"^[^/\s]+/[^/\s]+$", out["repo"]):
        raise StoryError(path, "source.repo", f"expected OWNER/NAME; found {quote(out['repo'])}")
    issue = value["issue"]
    if isinstance(issue, bool) or not isinstance(issue, int) or issue < 1:
        raise StoryError(
            path, "source.issue", f"expected an issue number >= 1; found {describe(issue)}"
        )
    return {
        "repo": out["repo"],
        "issue": issue,
        **{k: out[k] for k in ("url", "author") if k in out},
    }


def _required_str(value: Any, key: str, path: Path) -> str:
    if value is None:
        raise StoryError(path, key, "required field is missing; expected a non-empty string")
    if not isinstance(value, str):
        raise StoryError(
            path, key, f"expected a string (quote it in the YAML); found {describe(value)}"
        )
    text = " ".join(value.split())
    if not text:
        raise StoryError(path, key, "expected a non-empty string; found an empty string")
    return text


def _labels(value: Any, path: Path) -> tuple[str, ...]:
    """``labels:``: distinct one-line strings, order kept."""
    labels = _str_list(value, "labels", path)
    for label in labels:
        if not label.strip() or len(label) > MAX_LABEL_CHARS or not label.isprintable():
            raise StoryError(
                path,
                "labels",
                f"expected one-line labels of 1 to {MAX_LABEL_CHARS} printable characters; "
                f"found {quote(label)}",
            )
    if len(labels) > MAX_LABELS:
        raise StoryError(path, "labels", f"at most {MAX_LABELS} labels; found {len(labels)}")
    return tuple(dict.fromkeys(labels))


def _str_list(value: Any, key: str, path: Path) -> tuple[str, ...]:
    try:
        return string_list(value)
    except ValueProblem as exc:
        raise StoryError(path, key, exc.message) from None


def _verify(value: Any, path: Path) -> tuple[VerifyTier, ...]:
    if value is None:
        return ()
    expected = "expected a list of shell commands, or a mapping of tier name -> list of commands"
    if isinstance(value, str | list):
        commands = _commands(value, path, "")
        return (VerifyTier(FLAT_VERIFY_TIER, commands),) if commands else ()
    if not isinstance(value, dict):
        raise StoryError(path, "verify", f"{expected}; found {describe(value)}")
    tiers: list[VerifyTier] = []
    for name, commands in value.items():
        if not isinstance(name, str) or not name.strip():
            raise StoryError(
                path,
                "verify",
                f"expected tier names to be non-empty strings; found {describe(name)}",
            )
        if not isinstance(commands, str | list):
            raise StoryError(
                path,
                "verify",
                f"tier '{name}': expected a command or a list of commands; found {describe(commands)}",
            )
        tier_commands = _commands(commands, path, f"tier '{name}': ")
        if not tier_commands:
            raise StoryError(
                path,
                "verify",
                f"tier '{name}': expected at least one command; found an empty list",
            )
        tiers.append(VerifyTier(name.strip(), tier_commands))
    return tuple(tiers)


def _commands(value: str | list[Any], path: Path, where: str) -> tuple[str, ...]:
    try:
        return string_list(value, noun="command strings", item="command")
    except ValueProblem as exc:
        raise StoryError(path, "verify", f"{where}{exc.message}") from None
