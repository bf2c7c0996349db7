"""The reference pages made from hero's declarations: docs/settings.md and docs/story-fields.md.

    python -m hero.config.settings_doc                   # docs/settings.md on stdout
    python -m hero.config.settings_doc --story-fields    # docs/story-fields.md on stdout
    python -m hero.config.settings_doc --write docs      # both, into docs/
    python -m hero.config.settings_doc --config .        # the repository's config/ as hero init writes it

Every setting is declared once, in :mod:`hero.config.loader` (each on the field that holds it), and
every story field once, in :data:`hero.story.fields.FIELDS`; these pages list them, one section per
group, as hero's own ``hero init`` template does. A test fails when a page in docs/ is not what
this module makes, or the repository's own config/ not what ``hero init`` writes (see
:mod:`hero.config.scaffold`): change the declaration, then run ``--write docs --config .``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from hero.config import scaffold
from hero.config.home import (
    github_label_settings,
    github_settings,
    local_settings,
    provider_settings,
    roles_sections,
)
from hero.config.providers import ROLE_SETTINGS
from hero.config.schema import LOCAL_FILE, PROVIDERS_DIR, ROLE_NAMES, ROLES_FILE
from hero.config.settings import Section, Setting
from hero.story.fields import FIELDS

SETTINGS_PAGE = "settings.md"
STORY_FIELDS_PAGE = "story-fields.md"
_NOTE = (
    "<!-- Made by `python -m hero.config.settings_doc --write docs` from the declarations in {source}; "
    "edit those, not this page (a test fails when they differ). -->"
)


def settings_reference() -> str:
    """docs/settings.md: every key of config/roles.yaml, the provider files and
    config.local.yaml, with its type, default and doc."""
    out = [
        "# Settings reference",
        "",
        _NOTE.format(source="`hero.config.loader`"),
        "",
        "A hero home holds three kinds of configuration file. `hero init` writes each of them "
        "with every setting commented, its default and what it does; this page says the same. "
        "An unknown key, or a value of the wrong type or out of bounds, stops hero with an "
        "error naming the file and the key (and the closest known key).",
        "",
        "**Unknown keys.** Every command that reads the configuration (`hero run`, `watch`, "
        "`worker`, `status`, `doctor`, `plan`, `serve`, `bench`, `retry`, ...) refuses a key "
        "no file knows, with exit 2 and one line: the file, the key with its path, and the "
        "nearest known key, e.g. `config/roles.yaml: github.labels.in_progres: unknown key "
        "(did you mean 'in_progress'?)`. A key that belongs in another config file says "
        "which. `hero status`, which shows the stories even when the configuration does not "
        "load, refuses an unknown key all the same. The known keys are the settings declared "
        "below (each on the field of the record that holds it, in `hero.config.sections`, "
        "`hero.config.providers` and `hero.config.home`), the role names, and the keys of the "
        "nested blocks (a role's, `github`'s, `github.labels`'s): a setting declared there is "
        "known in every file that reads it, with no list to edit. Inside a free-form map the "
        "keys are yours, never checked against the settings: a provider's `headers`, "
        f"`keys` in `{LOCAL_FILE}` (provider names).",
        "",
        "| file | holds |",
        "|---|---|",
        f"| `{ROLES_FILE}` | the roles and every setting below |",
        f"| `{PROVIDERS_DIR}/<name>.yaml` | one OpenAI-compatible endpoint per file |",
        f"| `{LOCAL_FILE}` | secrets: API keys, tokens, passwords; git-ignored |",
        "",
        f"## {ROLES_FILE}",
        "",
        "### Roles",
        "",
        f"Each role, `{'`, `'.join(ROLE_NAMES)}`, is a block naming a provider, like "
        "`worker: {provider: local, model: qwen2.5-coder:32b}`; the planner is needed only by "
        "the planning commands, and `memory` (a cheap model that distills what a story "
        "learned, [memory](memory.md#the-memory-model)) is off unless its block is there. "
        "Its keys:",
        "",
        *_table(ROLE_SETTINGS),
    ]
    for section, settings in roles_sections():
        out += ["", *_heading(section)]
        plain = [s for s in settings if not s.secret and s.key != "github"]
        out += _table(plain) if plain else []
        for block in (s for s in settings if s.key == "github"):
            out += ["", *_github(block)] if plain else _github(block)
        for s in settings:
            if s.secret:
                out += ["", f"`{s.key}` is a secret: it goes in `{LOCAL_FILE}` (below)."]
    out += [
        "",
        f"## {PROVIDERS_DIR}/&lt;name&gt;.yaml",
        "",
        "One OpenAI-compatible Chat Completions endpoint per file; the file name without "
        "`.yaml` is the provider's name, which the roles refer to. `hero init` writes "
        "`openai.yaml` and `local.yaml` (Ollama, vLLM, llama.cpp, LM Studio).",
        "",
        *_table(provider_settings()),
        "",
        f"## {LOCAL_FILE}",
        "",
        "Secrets, never committed (`hero init` puts it in `.gitignore` and writes "
        f"`{LOCAL_FILE}.example`). Where a setting names an environment variable, "
        "the variable wins over the file.",
        "",
        *_table(local_settings(), local_page=True),
    ]
    return "\n".join(out) + "\n"


def story_fields_reference() -> str:
    """docs/story-fields.md: every field of a story's frontmatter."""
    out = [
        "# Story fields",
        "",
        _NOTE.format(source="`hero.story.fields.FIELDS`"),
        "",
        "A story is a markdown file whose YAML frontmatter holds these fields. Any other "
        "field, or a value of the wrong type, is refused with an error naming the file and the "
        "field (and the closest known field).",
        "",
        "| field | type | default | what it does |",
        "|---|---|---|---|",
    ]
    for f in FIELDS:
        default = "required" if f.required else _code_or_text(f.default)
        out.append(f"| `{f.name}` | {_cell(f.type)} | {default} | {_cell(f.doc)} |")
    return "\n".join(out) + "\n"


def _heading(section: Section) -> list[str]:
    lines = [f"### {section.title[0].upper()}{section.title[1:]}", ""]
    if section.intro:
        lines += [_cell(section.intro), ""]
    return lines


def _table(settings: Iterable[Setting], prefix: str = "", *, local_page: bool = False) -> list[str]:
    """A table of ``settings``: key (after ``prefix``), type, default, what it does."""
    lines = ["| key | type | default | what it does |", "|---|---|---|---|"]
    for s in settings:
        lines.append(
            f"| `{prefix}{s.key}` | {_cell(s.type_text)} | {_default(s)} | "
            f"{_cell(_described(s, local_page))} |"
        )
    return lines


def _github(block: Setting) -> list[str]:
    """The github block's keys, and its labels'."""
    return [
        f"`{block.key}`: {_cell(block.doc)} Its keys:",
        "",
        *_table(github_settings(), "github."),
        *_table(github_label_settings(), "github.labels.")[2:],
    ]


def _described(s: Setting, local_page: bool = False) -> str:
    """The doc, the choices, the note, where else the setting may be given."""
    parts = [s.doc]
    if s.choices:
        choices = (f"`{name}`: {doc}" if doc else f"`{name}`" for name, doc in s.choices)
        parts.append("; ".join(choices) + ".")
    if s.note:
        parts.append(s.note)
    if s.env:
        parts.append(f"The environment variable `{s.env}` wins.")
    if s.local and not s.secret and not local_page:
        parts.append(f"May be given in `{LOCAL_FILE}` too.")
    return " ".join(parts)


def _default(s: Setting) -> str:
    """The default: its YAML value as code, words as words."""
    if s.required:
        return "required"
    literal = s.default_literal
    words = _cell(s.default_text[len(literal) :])
    return f"`{literal}` {words}".strip() if literal else words


def _code_or_text(text: str) -> str:
    return _cell(text) if " " in text else f"`{text}`"


def _cell(text: str) -> str:
    """Text fit for a table cell: one line, no bare ``|``; ``<`` and ``>`` escaped outside
    code (where markdown would take them for a tag)."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    for n in range(0, len(parts), 2):  # outside code: no tags, no emphasis
        text = parts[n].replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
        parts[n] = re.sub(r"(?<!\w)_|_(?!\w)", r"\\_", text)  # not within a word
    return "`".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hero.config.settings_doc", description=__doc__)
    parser.add_argument("--story-fields", action="store_true", help="print story-fields.md")
    parser.add_argument("--write", metavar="DIR", help="write both pages into DIR (docs)")
    parser.add_argument(
        "--config",
        metavar="HOME",
        help="rewrite HOME's commented config files as hero init writes them (the repository's "
        "own: .), overwriting them",
    )
    args = parser.parse_args(argv)
    written = (
        {Path(args.write) / name: text for name, text in pages().items()} if args.write else {}
    )
    if args.config:
        files = scaffold.home_files(target_repo=None)
        written.update({Path(args.config) / rel: text for rel, text in files.items()})
    for path, text in written.items():
        path.write_text(text, encoding="utf-8")
    if not written:
        sys.stdout.write(story_fields_reference() if args.story_fields else settings_reference())
    return 0


def pages() -> dict[str, str]:
    """Each page's file name in docs/ and its text."""
    return {SETTINGS_PAGE: settings_reference(), STORY_FIELDS_PAGE: story_fields_reference()}


if __name__ == "__main__":
    raise SystemExit(main())
