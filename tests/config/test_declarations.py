"""One home per setting: every knob, story field and the story-id rule is declared once, and
what `hero init` writes, the repository's own config/ and the reference pages in docs/ are
made from that declaration. A test here fails when any of them drifts from it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO_ROOT

from hero.config import settings_doc
from hero.config.home import (
    KNOB_KEYS,
    github_label_settings,
    github_settings,
    local_settings,
    provider_settings,
    roles_settings,
)
from hero.config.loader import load_config
from hero.config.providers import ROLE_SETTINGS
from hero.config.scaffold import init_home
from hero.config.schema import ROLE_NAMES, ROLES_SECTIONS, ConfigError
from hero.config.sections import (
    Budgets,
    ContextSettings,
    EngineSettings,
    LlmSettings,
    Safety,
    WorkerLimits,
)
from hero.config.settings import Setting
from hero.names import StoryRef, is_story_id, story_id_problem
from hero.plans.manifest import PlanError, read_manifest
from hero.run.budget import Spend, round_over, story_over
from hero.story.fields import FIELDS, KNOWN_FIELDS
from hero.story.format import dumps_story, parse_story_text, story_metadata
from hero.story.record import StoryError
from hero.yamlio import ValueProblem

ROOT = REPO_ROOT
#: The files of a home that `hero init` writes from the declaration; the repository's own
#: copies must be the same bytes.
HOME_FILES = (
    "config/roles.yaml",
    "config/providers/openai.yaml",
    "config/providers/local.yaml",
    "config.local.yaml.example",
)


# --------------------------------------------------------------------------- nothing drifts


@pytest.mark.parametrize("rel", HOME_FILES)
def test_the_repositorys_config_is_what_hero_init_writes(tmp_path: Path, rel: str) -> None:
    init_home(tmp_path)

    written = (tmp_path / rel).read_text(encoding="utf-8")

    assert (ROOT / rel).read_text(encoding="utf-8") == written, (
        f"{rel} differs from what `hero init` writes from the settings' declaration; "
        "regenerate it: python -m hero.config.settings_doc --config ."
    )


@pytest.mark.parametrize("page", sorted(settings_doc.pages()))
def test_the_reference_pages_are_what_the_declaration_makes(page: str) -> None:
    made = settings_doc.pages()[page]

    assert (ROOT / "docs" / page).read_text(encoding="utf-8") == made, (
        f"docs/{page} differs from the declaration; run `python -m hero.config.settings_doc --write docs`"
    )


def test_the_settings_page_and_the_template_name_every_setting(tmp_path: Path) -> None:
    init_home(tmp_path, target_repo="../repo")
    template = (tmp_path / "config" / "roles.yaml").read_text(encoding="utf-8")
    page = settings_doc.settings_reference()
    nested = [
        *((s, f"github.{s.key}") for s in github_settings()),
        *((s, f"github.labels.{s.key}") for s in github_label_settings()),
    ]

    for s, name in (*((s, s.key) for s in (*roles_settings(), *ROLE_SETTINGS)), *nested):
        assert f"`{name}`" in page, name
        if not s.secret:
            assert f"{s.key}:" in template, name
    for s in (*provider_settings(), *local_settings()):
        assert f"`{s.key}`" in page, s.key
    for f in FIELDS:
        assert f"| `{f.name}` |" in settings_doc.story_fields_reference(), f.name


def test_hero_init_writes_each_default_the_records_hold(tmp_path: Path) -> None:
    """The values in the template are the dataclasses' defaults: loading a fresh home gives
    exactly the default records."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    init_home(tmp_path / "home", target_repo=str(repo))
    data = yaml.safe_load((tmp_path / "home" / "config" / "roles.yaml").read_text())

    loaded = load_config(tmp_path / "home", ("worker", "reviewer", "planner"), env={})

    assert loaded.worker_limits == WorkerLimits()
    assert loaded.llm == LlmSettings()
    assert loaded.safety == Safety()
    assert loaded.budgets == Budgets()
    assert loaded.context == ContextSettings()
    assert loaded.engine == EngineSettings()
    assert loaded.github is None
    for s in roles_settings():
        if not s.written or s.secret:
            assert s.key not in data, s.key  # commented out, or only in config.local.yaml
        elif not s.custom:
            expected = s.read(yaml.safe_load(s.value)) if s.value else s.default
            assert s.read(data[s.key]) == expected, s.key


# --------------------------------------------------------------------------- the declaration


def every_setting() -> list[Setting]:
    return [
        *roles_settings(),
        *ROLE_SETTINGS,
        *github_settings(),
        *github_label_settings(),
        *provider_settings(),
        *local_settings(),
    ]


@pytest.mark.parametrize("s", every_setting(), ids=lambda s: s.key)
def test_each_setting_is_declared_whole(s: Setting) -> None:
    """A one-line doc, a type the reference can name, a default its own check accepts."""
    assert s.doc and "\n" not in s.doc and s.doc.rstrip()[-1] in ".:", s.key
    assert s.type_text and "[" not in s.type_text and "|" not in s.type_text, s.type_text
    if s.custom or s.required or s.secret:
        return
    assert s.read(None) == s.default  # absent: the default
    if s.default not in (None, "", ()):
        as_yaml = list(s.default) if isinstance(s.default, tuple) else s.default
        assert s.read(as_yaml) == (s.check(s.default) if s.check else s.default)


def test_each_roles_setting_has_a_known_section_and_a_unique_key() -> None:
    keys = [s.key for s in roles_settings()]
    titles = [section.title for section in ROLES_SECTIONS]

    assert len(keys) == len(set(keys))
    assert all(s.section in titles for s in roles_settings())
    assert KNOB_KEYS == tuple(keys)
    assert not set(keys) & set(ROLE_NAMES)


def test_a_bad_value_is_refused_in_the_declared_wording() -> None:
    """The wording tests/test_config*.py assert, made by the one reader from the bounds."""
    [turns] = [s for s in roles_settings() if s.key == "worker_max_turns"]
    [limit] = [s for s in roles_settings() if s.key == "limit_processes"]
    [sandbox] = [s for s in roles_settings() if s.key == "sandbox"]

    with pytest.raises(ValueProblem, match=r"^expected a whole number >= 1 \(default 100\); "):
        turns.read(0)
    with pytest.raises(ValueProblem, match=r"from 16 to 4194304 \(default 1024\); found"):
        limit.read(8)
    with pytest.raises(ValueProblem, match=r"one of auto, bwrap, none \(did you mean 'bwrap'"):
        sandbox.read("bwarp")


def test_a_secret_in_roles_yaml_is_refused_saying_where_it_belongs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "roles.yaml").write_text("github_token: ghp_abcdefghijklmnop0123\n")

    with pytest.raises(ConfigError) as caught:
        load_config(home, ())

    assert (caught.value.file, caught.value.key) == ("config/roles.yaml", "github_token")
    assert "config.local.yaml" in caught.value.message and "GITHUB_TOKEN" in caught.value.message
    assert "ghp_" not in str(caught.value)


def test_loading_the_configuration_does_not_import_pydantic() -> None:
    """The declaration is a table of records: `hero status` and `hero run` pay no pydantic."""
    code = (
        "import sys, hero.config.loader, hero.story.format, hero.config.scaffold; "
        "assert 'pydantic' not in sys.modules, 'pydantic imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- budgets


def test_budget_names_come_from_one_table() -> None:
    """Each budget's key is its setting's; the budget checks name the same keys."""
    budgets = Budgets(
        story_tokens=1, story_cost_usd=1, story_wall_s=1, round_tokens=1, round_cost_usd=1,
        round_wall_s=1,
    )  # fmt: skip
    table = budgets.each()

    assert [b.key for b in table] == [s.key for s in roles_settings() if s.section == "budgets"]
    assert budgets.named() == {b.key: 1 for b in table}
    for budget in table:
        spent = Spend(**{budget.measure: 5})
        over = (
            story_over(budgets, spent) if budget.scope == "story" else round_over(budgets, spent, 1)
        )
        assert over is not None and over.key == budget.key, budget


# --------------------------------------------------------------------------- story fields


def test_story_fields_are_read_and_written_from_one_declaration() -> None:
    text = (
        "---\nid: s1\ntitle: T\npriority: high\nmax_retries: 2\nverify: [make]\n"
        "setup: [make deps]\nscope: [src/**]\ndepends_on: [s0]\nbase_ref: main\nallow_empty: true\nmemory: false\n"
        "model: {worker: big}\nreasoning_effort: low\ntools: {reviewer: [read_file]}\n"
        "source: {repo: o/r, issue: 3}\nlabels: [ui]\n---\nDo it.\n"
    )
    parsed = parse_story_text(text, Path("s1.md"))

    meta = story_metadata(parsed)
    # revises: goes with neither depends_on nor base_ref: written in its place, in order
    revision = story_metadata(
        dataclasses.replace(parsed, depends_on=(), base_ref=None, revises="s0")
    )

    assert KNOWN_FIELDS == tuple(f.name for f in FIELDS)
    assert tuple(meta) == tuple(f for f in KNOWN_FIELDS if f != "revises")
    assert tuple(revision) == tuple(f for f in KNOWN_FIELDS if f not in ("depends_on", "base_ref"))
    assert parse_story_text(dumps_story(revision, "Do it."), Path("s1.md")).revises == "s0"
    assert story_metadata(dataclasses.replace(parsed, priority="normal", allow_empty=False)) == {
        k: v for k, v in meta.items() if k not in ("priority", "allow_empty")
    }
    assert [f.name for f in FIELDS if f.required] == ["id", "title"]


# --------------------------------------------------------------------------- the story-id rule

IDS = ["a", "us-001", "A.b_c-9", "plan", "plans", "a..b", "a.", "a.lock", "x" * 101, "x" * 100]
IDS += ["-a", ".a", "a b", "a/b", "a\n", ""]


@pytest.mark.parametrize("story_id", IDS)
def test_every_place_that_takes_an_id_applies_the_one_rule(tmp_path: Path, story_id: str) -> None:
    """A story file, a run record's name, a plan's manifest: each accepts exactly the ids
    story_id_problem accepts (each with its own words for a bad one)."""
    good = story_id_problem(story_id) is None

    assert is_story_id(story_id) is good
    assert StoryRef("", story_id).valid() is good
    assert StoryRef("calc", story_id).valid() is good
    text = "---\n" + yaml.safe_dump({"id": story_id, "title": "T"}) + "---\nDo.\n"
    normalized = " ".join(story_id.split())  # a story file's id is read with its blanks folded
    try:
        parse_story_text(text, Path("s.md"))
        parsed = True
    except StoryError as exc:
        parsed = False
        assert exc.field == "id"
    assert parsed is (bool(normalized) and story_id_problem(normalized) is None)
    manifest = tmp_path / "_manifest.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "name": "calc",
                "source": "/plan.md",
                "source_sha256": "0" * 64,
                "created_at": "2025-01-31T12:00:00Z",
                "stories": [{"id": story_id, "title": "T", "depends_on": []}],
            }
        )
    )
    try:
        read_manifest(manifest)
        accepted = True
    except PlanError as exc:
        accepted = False
        assert exc.field.endswith(".id") and "expected a story id" in exc.message
    assert accepted is good
