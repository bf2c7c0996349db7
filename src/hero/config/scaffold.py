"""`hero init`: create a hero home (config files and folders), never overwriting anything.

The commented files it writes derive from the settings' declaration in :mod:`hero.config.loader`:
config/roles.yaml lists every setting by section with its doc and default
(:func:`roles_yaml`), each provider file documents every provider key
(:func:`provider_yaml`), config.local.yaml.example every key of that file
(:func:`local_example`). The repository's own config/ holds the same files (a test keeps
them equal).
"""

from __future__ import annotations

import dataclasses
import json
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hero.config.home import (
    github_label_settings,
    github_settings,
    local_settings,
    provider_settings,
    roles_sections,
)
from hero.config.providers import ROLE_SETTINGS
from hero.config.schema import TARGET_REPO_PLACEHOLDER
from hero.config.settings import Setting, yaml_value

if TYPE_CHECKING:
    from hero.config.detect import Proposal

GITIGNORE_LINES = ("config.local.yaml", "worktrees/", "runs/")
HOME_DIRS = ("config", "config/providers", "inbox", "done", "runs", "worktrees")
KEEP_DIRS = ("inbox", "done")  # get a .gitkeep so an empty home can be committed
DEFAULT_TARGET_REPO = TARGET_REPO_PLACEHOLDER
#: The sample story ``hero init`` writes, in the home's top folder and not in inbox/, so
#: ``hero watch`` never runs it by itself: ``hero run my-story.md`` is a first run on the
#: user's repository that changes nothing but one new notes file.
SAMPLE_STORY = "my-story.md"
#: The story template after its id line: ``hero init``'s sample story and where
#: ``hero new`` starts (:func:`story_template`).
_TEMPLATE_AFTER_ID = """\
title: Describe the repository in HERO-NOTES.md
scope: ["HERO-NOTES.md"]   # the only file the worker may change
verify:                    # shell checks run in the story's worktree after each round
  - test -s HERO-NOTES.md
---

## Goal
Write `HERO-NOTES.md` at the root of the repository: a short map of it for a newcomer.

## Acceptance Criteria
- [ ] `HERO-NOTES.md` names the top-level folders and files that matter, each with one line
      on what it holds.
- [ ] It says how to run the project's tests, if it has any.
- [ ] No other file changes.
"""
SAMPLE_COMMENT = """\
# A sample story written by `hero init`. `hero run my-story.md` runs it on your repository;
# it is not in inbox/, so `hero watch` leaves it alone. Then write your own (docs/stories.md
# has every field) or edit this one.
"""


def story_template(story_id: str, comment: str = "") -> str:
    """The one story template: frontmatter opened, ``comment`` (YAML comment lines, each
    ending in a newline), the id line, then the sample's fields and sections."""
    return f"---\n{comment}id: {story_id}\n{_TEMPLATE_AFTER_ID}"


SAMPLE_STORY_TEXT = story_template("my-story", SAMPLE_COMMENT)
#: Joins the words of a comment's last sentence, ``Default X.``: it is never wrapped apart.
NBSP = "\u00a0"

#: The role blocks ``hero init`` writes: each role on the local provider, with the OpenAI API
#: as a commented alternative. Their keys are ROLE_SETTINGS, listed above them.
ROLE_BLOCKS = """\
# The Worker edits code in the story's worktree with tools (bash, read/write/edit files, ...).
worker:
  provider: local
  # model: qwen2.5-coder:32b
  # reasoning_effort: high
# Alternative, the OpenAI API (needs OPENAI_API_KEY or keys.openai in config.local.yaml):
# worker:
#   provider: openai
#   model: gpt-5
#   reasoning_effort: medium

# The Reviewer reads the diff and the checks' output and approves or asks for changes. With
# tools (by default the read-only read_file, ls, grep, find, git_log, git_show) it may look
# at the repository outside the diff first; `tools: []` keeps it to one request.
reviewer:
  provider: local
  # model: qwen2.5-coder:32b
  # tools: []
# Alternative:
# reviewer:
#   provider: openai
#   model: gpt-5-mini
#   reasoning_effort: low

# The Planner turns a rough idea into story files (only used by planning commands).
planner:
  provider: local
# Alternative:
# planner:
#   provider: openai
#   model: gpt-5

# Memory (optional): after each story, one request to a cheap model distills a few facts
# for the stories after it (docs/memory.md). Without it, hero learns without a model.
# memory:
#   provider: openai
#   model: gpt-5-mini
#   reasoning_effort: low
"""


@dataclass(frozen=True)
class ProviderExample:
    """A provider file ``hero init`` writes: its header, and a value for each key."""

    header: str
    values: Mapping[str, str | None]
    """YAML for each key of provider_settings(); None: left out (``more`` says why)."""
    more: Mapping[str, str] = field(default_factory=dict)
    """Comment lines for a key, after its doc: what this endpoint needs."""


PROVIDERS = {
    "openai": ProviderExample(
        header="""\
Provider "openai": the OpenAI API (https://platform.openai.com).

A provider file describes one OpenAI-compatible Chat Completions endpoint. Its file name
(without .yaml) is the provider's name, which config/roles.yaml refers to. Copy this file
to add another endpoint (OpenRouter, Azure, a company gateway, ...).""",
        values={
            "name": "openai",
            "base_url": "https://api.openai.com/v1",
            "default_model": "gpt-5-mini",
            "default_reasoning_effort": "medium",
            "api_key_env": "OPENAI_API_KEY",
            "output_tokens_param": "max_completion_tokens",
        },
    ),
    "local": ProviderExample(
        header="""\
Provider "local": a model served on this machine, no API key needed.

Works with any OpenAI-compatible server:
  Ollama     http://127.0.0.1:11434/v1   (`ollama pull qwen2.5-coder:14b`, then `ollama serve`)
  vLLM       http://127.0.0.1:8000/v1    (`vllm serve <model>`)
  llama.cpp  http://127.0.0.1:8080/v1    (`llama-server -m model.gguf --jinja`)
  LM Studio  http://127.0.0.1:1234/v1
The model must support tool calling (function calling).""",
        values={
            "name": "local",
            "base_url": "http://127.0.0.1:11434/v1",
            "default_model": "qwen2.5-coder:14b",
            "api_key_env": None,
        },
        more={
            "default_model": "As the server names it: `ollama list`, or GET <base_url>/models.",
            "default_reasoning_effort": "Most local models ignore or reject it.",
            "api_key_env": "This endpoint is keyless. If your server wants a key, add\n"
            "  api_key_env: LOCAL_LLM_API_KEY\nor put it in config.local.yaml under keys.local.",
            "context_window": "Set it to what the server runs the model with (Ollama: num_ctx "
            "/ OLLAMA_CONTEXT_LENGTH; llama.cpp: -c; vLLM: --max-model-len), e.g. 32768.",
        },
    ),
}

#: What config.local.yaml.example shows for each key of local_settings(); a key whose
#: example is commented out is shown commented.
#: Every value is commented out and shows only the shape: a copied example leaves every
#: key unset, so the environment's (OPENAI_API_KEY, GITHUB_TOKEN, ...) is used. (A
#: placeholder left in is ignored too, see is_placeholder.)
LOCAL_EXAMPLES = {
    "keys": "keys:\n  # openai: sk-...   # or OPENAI_API_KEY in the environment\n"
    "  # local: only if your local server wants a key",
    "github_token": "# github_token: ghp_...",
    "broker_url": "# broker_url: redis://:PASSWORD@10.0.0.1:6379/0",
    "state_url": "# state_url: redis://:PASSWORD@10.0.0.1:6379/1",
    "engine_key": "# engine_key: <64 hex characters>",
    "notify_webhook": "# notify_webhook: https://hooks.example.com/services/...",
    "serve_token": "# serve_token: <at least 24 characters, e.g. secrets.token_urlsafe(32)>",
    "mcp_servers": "# mcp_servers:   # the secrets of servers named in config/roles.yaml\n"
    "#   docs: {env: {DOCS_TOKEN: ...}}\n"
    "#   tracker: {headers: {Authorization: Bearer ...}}",
}
LOCAL_HEADER = """\
Copy this file to config.local.yaml and fill in your keys (uncomment a line to set it).
config.local.yaml is git-ignored: never commit API keys.

The environment wins over this file where a setting names a variable."""

#: The width of the comments hero writes in its YAML files.
WIDTH = 92
_RULE = "# " + "-" * 64 + " "


def home_files(target_repo: str | None, proposal: Proposal | None = None) -> dict[str, str]:
    """The commented config files of a new home by path: providers, roles (with
    ``proposal``'s block, see :func:`roles_yaml`), the local file's example."""
    files = {f"config/providers/{name}.yaml": provider_yaml(p) for name, p in PROVIDERS.items()}
    files["config/roles.yaml"] = roles_yaml(target_repo, proposal)
    files["config.local.yaml.example"] = local_example()
    return files


def roles_yaml(target_repo: str | None = None, proposal: Proposal | None = None) -> str:
    """The commented config/roles.yaml ``hero init`` writes: every setting of
    roles_settings() by section, each with its doc and default. ``target_repo``
    is written as given; None writes a placeholder the comment asks to change.

    A ``proposal`` for the target repository (:mod:`hero.config.detect`) comes first after
    the header, commented out (:func:`proposal_block`); the lines of the settings it sets
    are then commented out where they are, so that uncommenting it gives each key once."""
    proposed = _proposed_keys(proposal)
    width = max(len(s.key) for s in ROLE_SETTINGS) + 3
    lines = _comment(
        "hero roles and settings; docs/settings.md describes each of them.\n\n"
        "Roles: each names a provider (a file in config/providers/, without .yaml) and may "
        "override its model and reasoning effort:\n"
        + "\n".join(f"  {s.key + ':':<{width}}{s.doc} {_default(s)}" for s in ROLE_SETTINGS)
        + "\nAPI keys never go here: see config.local.yaml.example."
    )
    if proposal:
        lines += ["", *proposal_block(proposal, target_repo or DEFAULT_TARGET_REPO)]
    lines += ["", *ROLE_BLOCKS.splitlines()]
    for section, settings in roles_sections():
        lines += ["", _RULE + section.title]
        if section.intro:
            lines += ["", *_comment(section.intro)]
        for s in settings:
            if s.secret:
                continue  # only in config.local.yaml: see config.local.yaml.example
            lines.append("")
            if s.key == "github":
                lines += _github_block(s)
            elif s.key == "target_repo":
                change = "" if target_repo else "CHANGE THIS. "
                lines += _comment(f"{change}{s.text} {_default(s)}")
                lines.append(f"target_repo: {_quoted(target_repo or DEFAULT_TARGET_REPO)}")
            elif s.key in proposed:
                more = "Proposed at the top of this file, where it is set once uncommented."
                note = f"{s.note} {more}" if s.note else more
                lines += _setting(dataclasses.replace(s, written=False, note=note))
            else:
                lines += _setting(s)
    return "\n".join(lines) + "\n"


#: The proposal's block in config/roles.yaml: its section title and its first words.
PROPOSAL_TITLE = "Proposed setup and checks"
PROPOSAL_LABEL = "Proposed for {target}: uncomment to use."
#: Each proposed list's key in config/roles.yaml.
PROPOSAL_KEYS = ("setup", "default_verify")


def proposal_block(proposal: Proposal, target_repo: str) -> list[str]:
    """``proposal`` as comment lines: a labelled header, its notes, then ``setup:`` and
    ``default_verify:`` with each command's reason above it. Taking ``# `` off every line
    from ``# setup:`` (or ``# default_verify:``) on gives valid YAML."""
    lines = [_RULE + PROPOSAL_TITLE, ""]
    lines += _comment(
        f"{PROPOSAL_LABEL.format(target=target_repo)} hero init read {proposal.source} and "
        "proposes the setup commands and checks below, each after its reason. Check them, "
        'then take "# " off each line from the first key on (setup and default_verify '
        "further down stay commented meanwhile)."
    )
    for note in proposal.notes:
        lines += _comment(f"Also: {note}.")
    for key, steps in zip(PROPOSAL_KEYS, (proposal.setup, proposal.checks), strict=True):
        if steps:
            lines.append(f"# {key}:")
            for step in steps:
                lines += [f"#   # {step.reason}", f"#   - {_list_item(step.command)}"]
    return lines


def _proposed_keys(proposal: Proposal | None) -> frozenset[str]:
    if proposal is None:
        return frozenset()
    lists = zip(PROPOSAL_KEYS, (proposal.setup, proposal.checks), strict=True)
    return frozenset(key for key, steps in lists if steps)


def _list_item(command: str) -> str:
    """``command`` as a YAML list item's value: as it is when YAML reads it back so (a
    command is easier to read unquoted), else double-quoted."""
    import yaml

    try:
        plain = yaml.safe_load(f"- {command}") == [command]
    except yaml.YAMLError:
        plain = False
    return command if plain else _quoted(command)


def provider_yaml(example: ProviderExample) -> str:
    """A commented provider file: ``example``'s header and values, each key's doc from
    provider_settings()."""
    lines = _verbatim(example.header)
    for s in provider_settings():
        value = example.values.get(s.key, "")
        more = example.more.get(s.key, "")
        lines.append("")
        if value is None:  # left out: the doc and why
            lines += _comment(f"{s.doc} {more}")
            continue
        lines += _comment(_described(s, more))
        lines.append(f"{s.key}: {value or s.value or yaml_value(s.default)}")
    return "\n".join(lines) + "\n"


def local_example() -> str:
    """config.local.yaml.example: each key of local_settings() with its doc."""
    lines = _verbatim(LOCAL_HEADER)
    for s in local_settings():
        env = f" {s.env} in the environment wins." if s.env else ""
        lines += ["", *_comment(f"{s.text}{env}"), *LOCAL_EXAMPLES[s.key].splitlines()]
    return "\n".join(lines) + "\n"


def _setting(s: Setting, indent: str = "") -> list[str]:
    """A setting's comment, its line (commented out when hero does not write it) and its
    commented example."""
    lines = _comment(_described(s), indent=indent)
    one_line = s.example if "\n" not in s.example else ""
    line = f"{s.key}: {s.value or (one_line if not s.written else '') or yaml_value(s.default)}"
    lines.append(f"{indent}{line}" if s.written else f"{indent}# {line}")
    if "\n" in s.example:
        lines += [f"{indent}# {x}" for x in s.example.splitlines()]
    return lines


def _described(s: Setting, more: str = "") -> str:
    """A setting's comment: its doc, its choices (one a line), its note, ``more``, and last
    its default."""
    text = s.doc
    if s.choices:
        width = max(len(name) for name in s.names) + 3
        text += "".join(f"\n  {name:<{width}}{doc}".rstrip() for name, doc in s.choices) + "\n"
    else:
        text += " "
    return text + " ".join(part for part in (s.note, more, _default(s)) if part)


def _verbatim(text: str) -> list[str]:
    """``text`` as comment lines, as it is written."""
    return [f"# {line}".rstrip() for line in text.splitlines()]


def _github_block(block: Setting) -> list[str]:
    """The github block, commented out: setting it turns GitHub issues on."""
    lines = [*_comment(f"{block.doc} {_default(block)}"), f"# {block.key}:"]
    inner = "#   "
    for s in github_settings():
        if s.key != "labels":
            lines += _setting(s, inner)
            continue
        lines += [*_comment(s.doc, indent=inner), f"{inner}{s.key}:"]
        for label in github_label_settings():
            lines += _setting(label, inner + "  ")
    return lines


def _default(s: Setting) -> str:
    """``Default X.`` (``Required.``), unbreakable: the line before a key says its default."""
    colon = "" if s.default_literal else ":"
    sentence = "Required." if s.required else f"Default{colon} {s.default_text}."
    return sentence.replace(" ", NBSP)


def _comment(text: str, *, indent: str = "") -> list[str]:
    """``text`` as comment lines of at most WIDTH characters: paragraphs wrapped, blank
    lines kept, a line starting with two spaces kept as an item (``  name   what it
    is``) whose continuation lines are indented to its text."""
    prefix = f"{indent}# "
    lines: list[str] = []
    for raw in text.split("\n"):
        if not raw.strip():
            lines.append(prefix.rstrip())
            continue
        item = re.match(r"^( +\S+ +)", raw) if raw.startswith("  ") else None
        wrapped = textwrap.wrap(
            raw,
            width=WIDTH - len(prefix),
            subsequent_indent=" " * len(item.group(1)) if item else "",
            break_long_words=False,
            break_on_hyphens=False,
        )
        lines += [f"{prefix}{line}".replace(NBSP, " ").rstrip() for line in wrapped]
    return lines


def _quoted(value: str) -> str:
    """A double-quoted YAML scalar (JSON strings are valid YAML)."""
    return json.dumps(value)


def init_home(
    home: Path, *, target_repo: str | None = None, proposal: Proposal | None = None
) -> list[Path]:
    """Create a hero home in ``home``; return the paths created (or appended to).

    Existing files are never overwritten: rerunning creates only what is missing. An
    existing ``.gitignore`` gets the missing hero lines appended. ``target_repo`` is written
    to config/roles.yaml as given (a relative path is relative to the home), and
    ``proposal``, commented out, with it.
    """
    home = Path(home)
    if home.exists() and not home.is_dir():
        raise NotADirectoryError(f"{home}: cannot create a hero home: it is a file")
    created: list[Path] = []
    if not home.exists():
        home.mkdir(parents=True)
        created.append(home)
    for rel in HOME_DIRS:
        directory = home / rel
        if not directory.is_dir():
            directory.mkdir(parents=True)
            created.append(directory)

    files = home_files(target_repo, proposal)
    for rel in KEEP_DIRS:
        files[f"{rel}/.gitkeep"] = ""
    files[SAMPLE_STORY] = SAMPLE_STORY_TEXT
    for rel, content in files.items():
        path = home / rel
        if _create(path, content):
            created.append(path)

    gitignore = home / ".gitignore"
    if _ensure_gitignore(gitignore):
        created.append(gitignore)
    return created


def _create(path: Path, content: str) -> bool:
    """Write a new file; False (and no change) if something is already there."""
    try:
        with path.open("x", encoding="utf-8", newline="\n") as fh:
            fh.write(content)
    except FileExistsError:
        return False
    return True


def _ensure_gitignore(path: Path) -> bool:
    """Create .gitignore or append the missing hero lines; True if the file changed."""
    if not path.exists():
        return _create(path, "".join(line + "\n" for line in GITIGNORE_LINES))
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    present = {line.strip().strip("/") for line in text.splitlines()}
    missing = [line for line in GITIGNORE_LINES if line.strip("/") not in present]
    if not missing:
        return False
    newline = "\r\n" if "\r\n" in text else "\n"
    addition = ""
    if text and not text.endswith("\n"):
        addition += "\n"
    addition += "# hero\n" + "".join(line + "\n" for line in missing)
    with path.open("ab") as fh:
        fh.write(addition.replace("\n", newline).encode("utf-8"))
    return True
