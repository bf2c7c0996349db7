"""The configuration of a hero home as one record (:class:`Config`), and the settings of each file.

Every setting is declared once, on the field of the record that holds it (``knob(...)``, see
:mod:`hero.config.settings`): its key, type, default, bounds, section and doc. Reading and checking
the files (:mod:`hero.config.loader`), the config/roles.yaml that ``hero init`` writes and
docs/settings.md all derive from that declaration (:func:`roles_settings`,
:func:`provider_settings`, :func:`local_settings`, ``ROLE_SETTINGS``)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hero.config.mcp import SERVER_KEYS_DOC, McpServer
from hero.config.project import ProjectSettings
from hero.config.providers import ROLE_SETTINGS, Provider, RoleConfig
from hero.config.schema import (
    GITHUB_API_URL,
    GITHUB_SECTION,
    KEEP_UP_MODES,
    MCP_SECTION,
    OVERLAP_MODES,
    PROVIDERS_DIR,
    ROLE_NAMES,
    ROLES_FILE,
    ROLES_SECTIONS,
    ROUNDS_SECTION,
    SERVE_SECTION,
    SERVE_TOKEN_MIN_CHARS,
    TARGET_SECTION,
    ConfigError,
    choices_of,
)
from hero.config.sections import (
    Budgets,
    ContextSettings,
    EngineSettings,
    GitHubLabels,
    GitHubSettings,
    Housekeeping,
    LlmSettings,
    MemorySettings,
    NotifySettings,
    Safety,
    WorkerLimits,
)
from hero.config.settings import Section, Setting, declare, knob, settings_of
from hero.sandbox.limits import Limits


@dataclass(frozen=True)
class Config:
    home: Path
    target_repo: Path = field(
        metadata=declare(
            "target_repo",
            "The git repository hero works on: absolute, or relative to this hero home.",
            note="Each story gets its own branch and worktree (in worktrees/) made from it. "
            "`hero worker` (engine: celery) does not read it: its clone of target_remote "
            "stands in, so a worker's home may keep the placeholder or name none.",
            required="expected the path of the git repository hero works on (absolute, or "
            "relative to the hero home)",
            custom=True,
            section=TARGET_SECTION,
        )
    )
    target_base_ref: str | None = knob(
        "target_base_ref",
        None,
        "Branch, tag or commit that story branches start from; null = the repository's "
        "current HEAD.",
        note="A story can override it with `base_ref:` in its frontmatter.",
        section=TARGET_SECTION,
    )
    keep_up: str = knob(
        "keep_up",
        "merge",
        "How a story branch is brought up to date with its target branch (or its plan "
        "dependencies' branches) that moved on, before the story passes and reports:",
        choices=choices_of(
            KEEP_UP_MODES,
            {
                "merge": "the target merged into the story branch",
                "rebase": "the story's commits replayed on the target (a conflict is "
                "resolved as a merge)",
                "off": "the branch reported as it is",
            },
        ),
        note="After an update the story's verify and review run again on the result; a "
        "conflict gets one worker round to resolve it, else the story ends in error naming "
        "the files, with nothing pushed (docs/run.md#keeping-up-with-main).",
        section=TARGET_SECTION,
    )
    max_retries: int = knob(
        "max_retries",
        3,
        "Retry budget per story: how many Worker -> Verifier -> Reviewer rounds hero runs "
        "before giving up on it.",
        note="A story can override it with `max_retries:` in its frontmatter.",
        section=ROUNDS_SECTION,
    )
    followup_max_rounds: int = knob(
        "followup_max_rounds",
        3,
        "Rounds per follow-up (a story with `revises:`, as `hero revise` writes): how many "
        "Worker -> Verifier -> Reviewer rounds it runs on the revised story's branch before "
        "giving up.",
        note="A follow-up can set its own with `max_retries:` in its frontmatter.",
        minimum=1,
        section=ROUNDS_SECTION,
    )
    max_followup_tokens: int | None = knob(
        "max_followup_tokens",
        None,
        "Tokens (prompt + completion) one follow-up may spend in all, its own rounds only "
        "(the story it revises spent its own budget).",
        note="A follow-up is held to max_story_tokens too, and to the lower of the two.",
        minimum=1,
        shown="null (no limit but max_story_tokens)",
        section=ROUNDS_SECTION,
    )
    max_parallel: int = knob(
        "max_parallel",
        2,
        "Stories worked on at the same time, each in its own worktree.",
        note="With engine: celery, stories in flight across all workers: the sum of their "
        "--concurrency.",
        written=False,  # shown commented out: the Celery steps add it (docs/celery.md)
        section=ROUNDS_SECTION,
    )
    overlap: str = knob(
        "overlap",
        "parallel",
        "What `hero watch` does with stories whose scopes overlap:",
        choices=choices_of(
            OVERLAP_MODES,
            {
                "parallel": "run them side by side; `hero status`, the status page and the "
                "events flag them",
                "serial": "one after the other: a story that overlaps a running one stays "
                "queued until it ends",
            },
        ),
        note="Two scopes overlap when some path could match both; a story without `scope:` "
        "overlaps every other. The whole rule: docs/watch.md, Overlapping stories.",
        written=False,
        section=ROUNDS_SECTION,
    )
    verify_timeout_ms: int = knob(
        "verify_timeout_ms",
        120_000,
        "Time limit for each verify command, in milliseconds.",
        shown="120000 (2 minutes)",
        section=ROUNDS_SECTION,
    )
    default_verify: tuple[str, ...] = knob(
        "default_verify",
        (),
        "Checks run after each Worker round for stories without `verify:` in their frontmatter.",
        note="Shell commands run in the worktree; all must exit 0.",
        shown="[] (no checks)",
        example="default_verify:\n  - ruff check .\n  - python -m pytest -q",
        section=ROUNDS_SECTION,
    )
    min_free_disk_mb: int = knob(
        "min_free_disk_mb",
        1024,
        "Free space, in MiB, the hero home's file system must have: `hero doctor` fails "
        "below it, and `hero watch` and `hero worker` do not start.",
        note="Worktrees, traces and checks' output fill it; 0 = not checked.",
        minimum=0,
        section=ROUNDS_SECTION,
    )
    worker_limits: WorkerLimits = WorkerLimits()
    llm: LlmSettings = LlmSettings()
    roles: Mapping[str, RoleConfig] = field(default_factory=dict)
    #: Every provider file of the home by name: a story may choose any of them (hero.llm.models).
    providers: Mapping[str, Provider] = field(default_factory=dict)
    #: What the provider keys are looked up in: config.local.yaml's ``keys`` and the values
    #: of the providers' api_key_env variables (see provider_key); all of them in secrets.
    key_sources: tuple[Mapping[str, str], Mapping[str, str]] = field(default=({}, {}), repr=False)
    secrets: tuple[str, ...] = field(default=(), repr=False)
    key_env_names: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()
    """What loading set aside without failing (a placeholder where a key goes), one line
    each for the command to say once; never a secret."""
    safety: Safety = Safety()
    budgets: Budgets = Budgets()
    housekeeping: Housekeeping = Housekeeping()
    context: ContextSettings = ContextSettings()
    engine: EngineSettings = EngineSettings()
    notify: NotifySettings = NotifySettings()
    memory: MemorySettings = MemorySettings()
    project: ProjectSettings = ProjectSettings()
    github: GitHubSettings | None = knob(
        "github",
        None,
        "GitHub issues as stories: this block turns them on.",
        type_doc="mapping (below)",
        shown="none",
        custom=True,
        written=False,
        section=GITHUB_SECTION,
    )
    github_token: str | None = knob(
        "github_token",
        None,
        "The GitHub token for `hero github watch` and the github block; it needs to read "
        "issues, and the report-back writes issues and pull requests.",
        env="GITHUB_TOKEN",
        local=True,
        secret=True,
        shown="none",
        repr=False,
        section=GITHUB_SECTION,
    )
    github_api_url: str = GITHUB_API_URL
    """env GITHUB_API_URL, else the github block's api_url, else https://api.github.com."""
    serve_token: str | None = knob(
        "serve_token",
        None,
        "The token every request to `hero serve` must carry (`Authorization: Bearer TOKEN`, "
        "or a `?token=TOKEN` link once): required to listen beyond loopback.",
        note=f"At least {SERVE_TOKEN_MIN_CHARS} characters; make one with "
        "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`.",
        env="HERO_SERVE_TOKEN",
        local=True,
        secret=True,
        shown="none",
        repr=False,
        section=SERVE_SECTION,
    )

    mcp_servers: tuple[McpServer, ...] = knob(
        "mcp_servers",
        (),
        "MCP servers whose tools the Worker gets, by name.",
        type_doc="mapping of server name -> server",
        shown="{}",
        note=SERVER_KEYS_DOC,
        example="{docs: {command: [python3, tools/docs_mcp.py], env: {DOCS_DIR: docs}}}",
        custom=True,
        written=False,
        local=True,
        section=MCP_SECTION,
    )

    def role(self, name: str) -> RoleConfig:
        """The loaded role ``name``; ConfigError naming config/roles.yaml when absent."""
        try:
            return self.roles[name]
        except KeyError:
            loaded = ", ".join(self.roles) or "none"
            raise ConfigError(
                ROLES_FILE,
                name,
                f"role not loaded (loaded roles: {loaded}); if config/roles.yaml has no "
                f"`{name}:` block, add one like `{name}: {{provider: local}}`",
            ) from None


#: config.local.yaml's own key; the others are settings of roles.yaml marked ``local``.
API_KEYS = Setting(
    "keys",
    "API keys by provider name (file names in config/providers/ without .yaml); a key here "
    "takes precedence over the provider's api_key_env.",
    type_doc="mapping of provider name -> API key",
    shown="{}",
    local=True,
    secret=True,
    custom=True,
)


@functools.cache
def roles_settings() -> tuple[Setting, ...]:
    """Every top-level setting of config/roles.yaml, in the order of ROLES_SECTIONS (the
    role blocks' keys are ROLE_SETTINGS, the github block's github_settings())."""
    found = (
        *settings_of(Config),
        *settings_of(WorkerLimits),
        *settings_of(LlmSettings),
        *settings_of(Safety),
        *settings_of(Limits),
        *settings_of(Budgets),
        *settings_of(Housekeeping),
        *settings_of(ContextSettings),
        *settings_of(EngineSettings),
        *settings_of(NotifySettings),
        *settings_of(MemorySettings),
        *settings_of(ProjectSettings),
    )
    order = {section.title: n for n, section in enumerate(ROLES_SECTIONS)}
    return tuple(sorted(found, key=lambda s: order[s.section]))


def roles_sections() -> tuple[tuple[Section, tuple[Setting, ...]], ...]:
    """config/roles.yaml's sections, each with its settings (the template, the reference)."""
    found = roles_settings()
    return tuple(
        (section, tuple(s for s in found if s.section == section.title))
        for section in ROLES_SECTIONS
    )


def github_settings() -> tuple[Setting, ...]:
    """The keys of roles.yaml's ``github:`` block; ``labels`` holds github_label_settings()."""
    return settings_of(GitHubSettings)


def github_label_settings() -> tuple[Setting, ...]:
    return settings_of(GitHubLabels)


def provider_settings() -> tuple[Setting, ...]:
    """The keys of a provider file, config/providers/<name>.yaml."""
    return settings_of(Provider)


@functools.cache
def local_settings() -> tuple[Setting, ...]:
    """The keys of config.local.yaml: API keys, then the settings of roles.yaml that may be
    given there too (the secrets only there)."""
    return (API_KEYS, *(s for s in roles_settings() if s.local))


ROLE_KEYS = tuple(s.key for s in ROLE_SETTINGS)
PROVIDER_KEYS = tuple(s.key for s in provider_settings())
LOCAL_KEYS = tuple(s.key for s in local_settings())
#: The top-level keys of config/roles.yaml beside the role blocks (secrets among them: they
#: are refused there, saying where they belong).
KNOB_KEYS = tuple(s.key for s in roles_settings())
ROLES_FILE_KEYS = ROLE_NAMES + KNOB_KEYS
GITHUB_KEYS = tuple(s.key for s in github_settings())
GITHUB_LABEL_KEYS = tuple(s.key for s in github_label_settings())


def context_limits(config: Config, role: str) -> tuple[int, int]:
    """(window, reserve) in tokens for the loaded role ``role``: the window is its provider's
    context_window, else context_window_default; the reserve (kept free for the answer) is
    its max_output_tokens, else output_reserve_default. ConfigError when the reserve would
    leave less than half the window for the conversation."""
    loaded = config.role(role)
    settings = config.context
    window = loaded.context_window or settings.window_default
    reserve = loaded.max_output_tokens or settings.reserve_default
    if reserve < window / 2:
        return window, reserve
    need = f"below half the context window ({window} / 2 = {window // 2})"
    if loaded.max_output_tokens is not None:
        raise ConfigError(
            ROLES_FILE,
            f"{role}.max_output_tokens",
            f"expected a value {need}, leaving room for the conversation; found {reserve}. "
            "Lower it, or give the provider file a larger context_window",
        )
    if loaded.context_window is not None:
        raise ConfigError(
            f"{PROVIDERS_DIR}/{loaded.provider.name}.yaml",
            "context_window",
            f"expected a window more than twice the output reserve ({reserve} tokens, "
            f"output_reserve_default in {ROLES_FILE}); found {window}. Raise it, or set a "
            f"smaller max_output_tokens on the {role} role",
        )
    raise ConfigError(
        ROLES_FILE,
        "output_reserve_default",
        f"expected a value {need}, the window assumed by context_window_default; found "
        f"{reserve}. Lower it, raise context_window_default, or give the provider file a "
        "context_window",
    )
