"""Configuration of a hero home: providers, roles, knobs and API keys.

Layout (relative to the home directory)::

    config/roles.yaml              roles (worker, reviewer, planner) and knobs; target_repo
    config/providers/<name>.yaml   one OpenAI-compatible endpoint per file
    config.local.yaml              optional, git-ignored: keys: {<provider name>: <key>},
                                   github_token: <token>

Every problem raises :class:`ConfigError`, whose text is one line
``<file>: <key>: <message>`` with the file shown relative to the home. Error text never
contains an API key value.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hero.errors import ConfigurationError
from hero.limits import SETTINGS as LIMIT_KEYS
from hero.limits import Limits, bounds, setting
from hero.yamlio import (
    ValueProblem,
    decode_text,
    describe,
    did_you_mean,
    load_yaml,
    read_file,
    string_list,
    type_name,
)

ROLE_NAMES = ("worker", "reviewer", "planner")
ROLES_FILE = "config/roles.yaml"
PROVIDERS_DIR = "config/providers"
LOCAL_FILE = "config.local.yaml"
#: The largest config file hero reads: far more than any hand-written config needs.
MAX_CONFIG_BYTES = 1 << 20

ROLE_KEYS = ("provider", "model", "reasoning_effort", "max_output_tokens")
PROVIDER_KEYS = (
    "name",
    "base_url",
    "default_model",
    "default_reasoning_effort",
    "api_key_env",
    "insecure_tls",
    "headers",
    "input_usd_per_mtok",
    "output_usd_per_mtok",
    # long rounds (issue 11): the window, reasoning sent back, the output cap's field name
    "context_window",
    "send_reasoning",
    "output_tokens_param",
)
#: The request fields a role's output cap may be sent as (OpenAI's reasoning models
#: refuse ``max_tokens``).
OUTPUT_TOKENS_PARAMS = ("max_tokens", "max_completion_tokens")
LOCAL_KEYS = ("keys", "github_token", "broker_url", "state_url", "engine_key")
KNOB_KEYS = (
    "target_repo",
    "target_base_ref",
    "max_retries",
    "max_parallel",
    "verify_timeout_ms",
    "default_verify",
    "worker_max_turns",
    "worker_max_tool_calls",
    "worker_max_wall_s",
    "bash_timeout_s",
    "loop_repeats",
    "llm_timeout_s",
    "llm_max_attempts",
    "llm_backoff_base_s",
    "llm_backoff_max_s",
    "llm_retry_after_max_s",
    # safety (issue 9): sandbox, protected files, command policy, budgets
    "sandbox",
    "sandbox_network",
    "verify_network",
    "pass_env",
    "protected_files",
    "allow_commands",
    "deny_commands",
    "model_verify",
    # limits on every sandboxed command (issue 17): limit_<field> of hero.limits.Limits
    *LIMIT_KEYS,
    "max_story_tokens",
    "max_story_cost_usd",
    "max_story_wall_s",
    "max_round_tokens",
    "max_round_cost_usd",
    "max_round_wall_s",
    # GitHub issues as stories (issue 10): see GitHubSettings
    "github",
    # long rounds (issue 11): see ContextSettings
    "context_condense_at",
    "context_keep_turns",
    "context_window_default",
    "output_reserve_default",
    # many machines (issue 12): see EngineSettings
    "engine",
    "broker_url",
    "state_url",
    "target_remote",
    "lease_s",
    "engine_queue",
    "broker_visibility_timeout_s",
    "engine_key",  # refused here, with where it belongs: config.local.yaml (a secret)
)
ENGINES = ("local", "celery")
ROLES_FILE_KEYS = ROLE_NAMES + KNOB_KEYS
GITHUB_KEYS = (
    "repo",
    "label",
    "interval_s",
    "allowed_associations",
    "labels",
    "remote",
    "api_url",
    "verify",
    "scope",
)
GITHUB_LABEL_KEYS = ("in_progress", "done", "failed")
GITHUB_API_URL = "https://api.github.com"
#: Who may file a story: GitHub's author_association of an issue's author.
GITHUB_ASSOCIATIONS = (
    "OWNER",
    "MEMBER",
    "COLLABORATOR",
    "CONTRIBUTOR",
    "FIRST_TIME_CONTRIBUTOR",
    "FIRST_TIMER",
    "MANNEQUIN",
    "NONE",
)
#: OWNER/NAME of a GitHub repository.
GITHUB_REPO_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SENSITIVE_HEADER_RE = re.compile(r"auth|key|token|secret|cookie", re.IGNORECASE)


class ConfigError(ConfigurationError):
    """A configuration problem; ``str(e) == f"{file}: {key}: {message}"``, never a secret."""

    def __init__(self, file: str, key: str, message: str) -> None:
        self.file = str(file)
        self.key = str(key)
        self.message = " ".join(str(message).split())
        super().__init__(f"{self.file}: {self.key}: {self.message}")


@dataclass(frozen=True)
class Provider:
    name: str
    base_url: str
    default_model: str
    default_reasoning_effort: str | None = None
    api_key_env: str | None = None
    insecure_tls: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    context_window: int | None = None
    """The model's context window in tokens; None: roles.yaml's context_window_default."""
    send_reasoning: bool = False
    """Whether the reasoning text the endpoint returns is sent back in the assistant
    message of later requests (``reasoning_content``; some providers require it)."""
    output_tokens_param: str = "max_tokens"
    """The request field a role's max_output_tokens is sent as (one of OUTPUT_TOKENS_PARAMS)."""


@dataclass(frozen=True)
class RoleConfig:
    role: str
    provider: Provider
    model: str
    reasoning_effort: str | None
    api_key: str | None = field(default=None, repr=False)
    max_output_tokens: int | None = None
    """The cap on one answer's tokens, sent as the provider's output_tokens_param; None:
    not sent (and roles.yaml's output_reserve_default is kept free for the answer)."""

    @property
    def context_window(self) -> int | None:
        """The provider's context window in tokens; None when its file gives none."""
        return self.provider.context_window


@dataclass(frozen=True)
class WorkerLimits:
    """The worker's limits in one round: the agent loop's guardrails and the bash timeout."""

    max_turns: int = 100
    """LLM calls in one round."""
    max_tool_calls: int = 300
    """Tool calls in one round."""
    max_wall_s: float = 3600.0
    """Wall time of one round, checked before each LLM call and each tool call."""
    bash_timeout_s: float = 600.0
    """The default timeout of one bash tool call."""
    loop_repeats: int = 4
    """The same tool call with the same arguments this many times in a row is a loop."""


#: Files the worker never writes, whatever the story's scope; roles.yaml's
#: ``protected_files`` adds to them.
DEFAULT_PROTECTED = (".env", ".env.*", "*.pem", "*.key", "id_rsa*", ".git/**")
SANDBOX_MODES = ("auto", "bwrap", "none")


@dataclass(frozen=True)
class Safety:
    """What confines the worker's and the checks' commands (roles.yaml)."""

    sandbox: str = "auto"
    """auto: bubblewrap when it works, else none with a warning; bwrap: required; none."""
    sandbox_network: bool = False
    """Whether the worker's commands may reach the network (in the sandbox)."""
    verify_network: bool = False
    """Whether the verify commands may reach the network (in the sandbox)."""
    pass_env: tuple[str, ...] = ()
    """Names of hero's environment variables the commands may see beside the safe ones
    (``hero.runner.SAFE_NAMES``); a value holding a secret is dropped all the same."""
    protected_files: tuple[str, ...] = DEFAULT_PROTECTED
    allow_commands: tuple[str, ...] = ()
    deny_commands: tuple[str, ...] = ()
    model_verify: bool = True
    """Whether the verify commands a planner model wrote (a plan's stories) run at all: true,
    checked by allow_commands/deny_commands like the worker's commands; false, never run
    (default_verify runs in their place)."""
    limits: Limits = Limits()
    """What each sandboxed command may use (the ``limit_*`` keys; see hero.limits)."""


@dataclass(frozen=True)
class Budgets:
    """Spend limits per story and per round; None: no limit."""

    story_tokens: int | None = None
    story_cost_usd: float | None = None
    story_wall_s: float | None = None
    round_tokens: int | None = None
    round_cost_usd: float | None = None
    round_wall_s: float | None = None


@dataclass(frozen=True)
class LlmSettings:
    timeout_s: float = 600.0
    max_attempts: int = 6
    backoff_base_s: float = 2.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 120.0
    """The longest wait a server's Retry-After is honoured for; a longer ask waits this long."""


@dataclass(frozen=True)
class ContextSettings:
    """How a round's conversation is kept inside the model's context window (roles.yaml)."""

    condense_at: float = 0.75
    """context_condense_at: the share of the usable window (the window minus the output
    reserve) at which a round's history is condensed."""
    keep_turns: int = 6
    """context_keep_turns: the most recent worker turns whose tool results are kept whole
    while condensing older turns is enough."""
    window_default: int = 128_000
    """context_window_default: the window in tokens when a provider file gives none."""
    reserve_default: int = 4096
    """output_reserve_default: tokens kept free for the answer when a role sets no
    max_output_tokens."""


@dataclass(frozen=True)
class EngineSettings:
    """Where stories run (roles.yaml): in this process's threads (``local``), or on
    ``hero worker`` processes through Celery (``celery``, see hero.engine)."""

    kind: str = "local"
    broker_url: str = field(default="", repr=False)
    """Celery's broker (and result backend): env HERO_BROKER_URL, else config.local.yaml's
    broker_url, else roles.yaml's (which may not hold a password)."""
    state_url: str = field(default="", repr=False)
    """The Redis that holds hero's leases and the mirrored records: env HERO_STATE_URL, else
    config.local.yaml's, else roles.yaml's, else broker_url when that is a Redis URL."""
    target_remote: str = field(default="", repr=False)
    """A git URL every worker can reach: workers clone it and push story branches to it."""
    lease_s: float = 30.0
    """A running story's lease: renewed every third of it; a dead worker's story is sent
    again once it has expired for as long again."""
    queue: str = "hero"
    """engine_queue: the Celery queue, and the prefix of hero's keys in Redis."""
    visibility_timeout_s: float = 43200.0
    """broker_visibility_timeout_s: Redis's redelivery of a task taken but not acknowledged.
    hero acknowledges a story when a worker starts it, so it never applies to a running one."""
    key: str = field(default="", repr=False)
    """engine_key: the secret the coordinator and every worker share, that authenticates each
    story sent and everything a worker publishes (HMAC-SHA256, see hero.engine.seal): env
    HERO_ENGINE_KEY, else config.local.yaml's engine_key. Required with ``celery``."""

    @property
    def remote(self) -> bool:
        return self.kind == "celery"


@dataclass(frozen=True)
class GitHubLabels:
    """The labels hero puts on an issue while and after its story runs."""

    in_progress: str = "hero: in progress"
    done: str = "hero: done"
    failed: str = "hero: failed"


@dataclass(frozen=True)
class GitHubSettings:
    """GitHub issues as stories (``github:`` in roles.yaml, or ``hero github watch``).

    Defined here so that config (a record) need not import hero.github (the outside world);
    ``hero.github.settings`` re-exports it."""

    repo: str
    """OWNER/NAME of the repository whose issues become stories."""
    label: str
    """Open issues with this label are taken."""
    interval_s: float = 60.0
    """Seconds between two looks at the issues."""
    allowed_associations: tuple[str, ...] = ("OWNER", "MEMBER", "COLLABORATOR")
    """Whose issues are taken: the author's author_association (write access by default)."""
    labels: GitHubLabels = GitHubLabels()
    """The labels hero sets on the issue as its story runs and ends."""
    remote: str = "origin"
    """The target repository's git remote that story branches are pushed to."""
    api_url: str = GITHUB_API_URL
    """The REST API's base URL: env GITHUB_API_URL, else the block's api_url, else GitHub's."""
    token: str | None = field(default=None, repr=False)
    """env GITHUB_TOKEN, else config.local.yaml github_token."""
    verify: tuple[str, ...] = ()
    """verify of every story from an issue; () = config default_verify."""
    scope: tuple[str, ...] = ()
    """scope of every story from an issue; () = no scope."""


@dataclass(frozen=True)
class Config:
    home: Path
    target_repo: Path
    """The repository stories run on. A `hero worker` home (engine: celery) may name none:
    its clone of target_remote, ``<home>/worker/repo``, stands in."""
    target_base_ref: str | None = None
    max_retries: int = 3
    max_parallel: int = 2
    verify_timeout_ms: int = 120_000
    default_verify: tuple[str, ...] = ()
    worker_limits: WorkerLimits = WorkerLimits()
    llm: LlmSettings = LlmSettings()
    roles: Mapping[str, RoleConfig] = field(default_factory=dict)
    secrets: tuple[str, ...] = field(default=(), repr=False)
    key_env_names: tuple[str, ...] = ()
    safety: Safety = Safety()
    budgets: Budgets = Budgets()
    context: ContextSettings = ContextSettings()
    engine: EngineSettings = EngineSettings()
    github: GitHubSettings | None = None
    """The ``github:`` block of roles.yaml; None when there is none."""
    github_token: str | None = field(default=None, repr=False)
    """env GITHUB_TOKEN, else config.local.yaml github_token (also in ``secrets``)."""
    github_api_url: str = GITHUB_API_URL
    """env GITHUB_API_URL, else the github block's api_url, else https://api.github.com."""

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


def resolve_home(cli_home: str | None, *, env: Mapping[str, str] | None = None) -> Path:
    """The hero home: ``--home`` if given, else ``$HERO_HOME``, else the current directory."""
    env = os.environ if env is None else env
    chosen = cli_home or env.get("HERO_HOME") or None
    if chosen is None:
        return Path.cwd()
    return Path(chosen).expanduser().resolve()


def load_config(
    home: Path,
    roles: Iterable[str] = ("worker", "reviewer"),
    *,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Load and validate the home's configuration, resolving only the roles in ``roles``.

    ``env`` (default ``os.environ``) is where ``api_key_env`` variables are looked up.
    """
    wanted = tuple(dict.fromkeys(roles))
    for name in wanted:
        if name not in ROLE_NAMES:
            raise ValueError(f"unknown role {name!r}; expected one of {', '.join(ROLE_NAMES)}")
    env = os.environ if env is None else env
    secrets: list[str] = []
    try:
        return _load(Path(home), wanted, env, secrets)
    except ConfigError as exc:
        # Defence in depth: no message may carry a key, whatever path produced it.
        key, message = exc.key, exc.message
        for secret in sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True):
            key = key.replace(secret, "***")
            message = message.replace(secret, "***")
        raise ConfigError(exc.file, key, message) from None


# ----------------------------------------------------------------------------- loading


def _load(
    home: Path, wanted: tuple[str, ...], env: Mapping[str, str], secrets: list[str]
) -> Config:
    home = home.expanduser().resolve()
    if not home.is_dir():
        raise ConfigError(
            str(home),
            "home",
            "expected a hero home directory; found nothing there. Run `hero init` to create "
            "one, or pass --home DIR / set HERO_HOME",
        )
    if not (home / ROLES_FILE).exists():  # a FIFO or a directory: its reader says what it is
        where = "this home has no config/ directory" if not (home / "config").is_dir() else ""
        raise ConfigError(
            ROLES_FILE,
            "file",
            f"not found in {home}{'; ' + where if where else ''}. Run `hero init` to create "
            "a home here, or pass --home DIR / set HERO_HOME to an existing one",
        )
    data = _read_mapping(home, ROLES_FILE)
    _check_keys(data, ROLES_FILE_KEYS, ROLES_FILE, "key")
    r = _Reader(data, ROLES_FILE)

    # Local keys first, so that any later error can be scrubbed of them.
    local_keys = _read_local_keys(home)
    secrets.extend(v for v in local_keys.values() if v)
    github_token = (env.get("GITHUB_TOKEN") or "").strip() or _local_github_token(home)
    if github_token:
        secrets.append(github_token)

    target_repo = _target_repo(home, r)
    worker_limits = WorkerLimits(
        max_turns=r.integer("worker_max_turns", 100),
        max_tool_calls=r.integer("worker_max_tool_calls", 300),
        max_wall_s=r.number("worker_max_wall_s", 3600.0),
        bash_timeout_s=r.number("bash_timeout_s", 600.0),
        loop_repeats=r.integer("loop_repeats", 4, minimum=2),
    )
    llm = LlmSettings(
        timeout_s=r.number("llm_timeout_s", 600.0),
        max_attempts=r.integer("llm_max_attempts", 6),
        backoff_base_s=r.number("llm_backoff_base_s", 2.0, allow_zero=True),
        backoff_max_s=r.number("llm_backoff_max_s", 60.0, allow_zero=True),
        retry_after_max_s=r.number("llm_retry_after_max_s", 120.0),
    )
    if llm.backoff_max_s < llm.backoff_base_s:
        raise ConfigError(
            ROLES_FILE,
            "llm_backoff_max_s",
            f"expected a value >= llm_backoff_base_s ({llm.backoff_base_s:g}); "
            f"found {llm.backoff_max_s:g}",
        )

    role_blocks = {name: _role_block(data, name) for name in ROLE_NAMES}

    providers = _read_providers(home)
    key_env_names = tuple(dict.fromkeys(p.api_key_env for p in providers.values() if p.api_key_env))
    for name in key_env_names:
        if env.get(name):
            secrets.append(env[name])
    for provider in providers.values():
        for header, value in provider.headers.items():
            if value and _SENSITIVE_HEADER_RE.search(header):
                secrets.append(value)

    github = _github(data.get("github"), github_token, env)
    github_api_url = _github_api_url(github, env)

    context = ContextSettings(
        condense_at=r.fraction("context_condense_at", 0.75, above=0.1, at_most=0.95),
        keep_turns=r.integer("context_keep_turns", 6),
        window_default=r.integer("context_window_default", 128_000, minimum=1024),
        reserve_default=r.integer("output_reserve_default", 4096, minimum=256),
    )

    engine = _engine(r, home, env, secrets)

    loaded: dict[str, RoleConfig] = {}
    for name in wanted:
        block = role_blocks[name]
        if block is None:
            raise ConfigError(ROLES_FILE, name, _role_missing_message(name))
        loaded[name] = _resolve_role(name, block, providers, local_keys, env)

    config = Config(
        home=home,
        target_repo=target_repo,
        target_base_ref=r.string("target_base_ref"),
        max_retries=r.integer("max_retries", 3),
        max_parallel=r.integer("max_parallel", 2),
        verify_timeout_ms=r.integer("verify_timeout_ms", 120_000),
        default_verify=r.string_list("default_verify"),
        worker_limits=worker_limits,
        llm=llm,
        roles=loaded,
        # normalised once, here: a key with a blank around it is the same key
        secrets=tuple(dict.fromkeys(s.strip() for s in secrets if s and s.strip())),
        key_env_names=key_env_names,
        safety=_safety(r),
        budgets=Budgets(
            story_tokens=r.optional_integer("max_story_tokens"),
            story_cost_usd=r.optional_number("max_story_cost_usd"),
            story_wall_s=r.optional_number("max_story_wall_s"),
            round_tokens=r.optional_integer("max_round_tokens"),
            round_cost_usd=r.optional_number("max_round_cost_usd"),
            round_wall_s=r.optional_number("max_round_wall_s"),
        ),
        context=context,
        engine=engine,
        github=github,
        github_token=github_token,
        github_api_url=github_api_url,
    )
    for name in loaded:  # a cap that leaves no room for the conversation fails at start-up
        context_limits(config, name)
    return config


def _safety(r: _Reader) -> Safety:
    sandbox = r.data.get("sandbox")
    if sandbox is None:
        sandbox = "auto"
    if sandbox not in SANDBOX_MODES:
        hint = did_you_mean(str(sandbox), SANDBOX_MODES) if isinstance(sandbox, str) else ""
        raise r._error(
            "sandbox",
            f"expected one of {', '.join(SANDBOX_MODES)}{hint}; found {describe(sandbox)}",
        )
    return Safety(
        sandbox=sandbox,
        sandbox_network=r.boolean("sandbox_network", False),
        verify_network=r.boolean("verify_network", False),
        pass_env=_env_names(r, "pass_env"),
        protected_files=tuple(
            dict.fromkeys((*DEFAULT_PROTECTED, *r.string_list("protected_files")))
        ),
        allow_commands=_rules(r, "allow_commands"),
        deny_commands=_rules(r, "deny_commands"),
        model_verify=r.boolean("model_verify", True),
        limits=_limits(r),
    )


#: A name an environment variable can have.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_names(r: _Reader, key: str) -> tuple[str, ...]:
    """Names of environment variables (``pass_env``): never hero's own ``HERO_*``."""
    names = r.string_list(key)
    for name in names:
        if not _ENV_NAME.fullmatch(name):
            raise r._error(key, f"{name!r} is not the name of an environment variable")
        if name.startswith("HERO_"):
            raise r._error(key, f"{name} is hero's own: hero never passes a HERO_* variable on")
    return tuple(dict.fromkeys(names))


def _limits(r: _Reader) -> Limits:
    """The ``limit_*`` keys: whole numbers within each limit's bounds (hero.limits)."""
    defaults = Limits()
    values: dict[str, int] = {}
    for f in dataclasses.fields(Limits):
        low, high = bounds(f.name)
        default: int = getattr(defaults, f.name)
        values[f.name] = r.integer(setting(f.name), default, minimum=low, maximum=high)
    return Limits(**values)


def _engine(r: _Reader, home: Path, env: Mapping[str, str], secrets: list[str]) -> EngineSettings:
    """The engine settings; the URLs' passwords join ``secrets``."""
    kind = r.data.get("engine")
    if kind is None:
        kind = "local"
    if kind not in ENGINES:
        hint = did_you_mean(str(kind), ENGINES) if isinstance(kind, str) else ""
        raise r._error(
            "engine", f"expected one of {', '.join(ENGINES)}{hint}; found {describe(kind)}"
        )
    local = _read_mapping(home, LOCAL_FILE, secret=True) if (home / LOCAL_FILE).exists() else {}
    urls: dict[str, str] = {}
    for key, env_name in (("broker_url", "HERO_BROKER_URL"), ("state_url", "HERO_STATE_URL")):
        in_roles = r.string(key)
        if in_roles and _url_password(in_roles):
            raise r._error(
                key,
                f"holds a password; put the URL in {LOCAL_FILE} (`{key}: ...`) or in the "
                f"environment ({env_name}) instead, so that roles.yaml holds no secret",
            )
        value = local.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(LOCAL_FILE, key, f"expected a URL string; found {type_name(value)}")
        chosen = (env.get(env_name) or "").strip() or (value or "").strip() or in_roles or ""
        if chosen and not re.match(r"^[a-z][a-z0-9+.-]*://", chosen):
            raise ConfigError(ROLES_FILE, key, "expected a URL like redis://host:6379/0")
        password = _url_password(chosen)
        if password:
            secrets.append(password)
        urls[key] = chosen
    broker = urls["broker_url"]
    state = urls["state_url"] or (broker if broker.startswith(("redis://", "rediss://")) else "")
    queue = r.string("engine_queue") or "hero"
    if not _NAME_RE.match(queue):
        raise r._error(
            "engine_queue", f"expected letters, digits, '.', '_' or '-'; found {queue!r}"
        )
    secrets.extend(_url_credentials(r.string("target_remote") or ""))
    engine_key = _engine_key(r, local, env)
    if engine_key:
        secrets.append(engine_key)
    settings = EngineSettings(
        kind=kind,
        broker_url=broker,
        state_url=state,
        target_remote=r.string("target_remote") or "",
        lease_s=r.number("lease_s", 30.0),
        queue=queue,
        visibility_timeout_s=r.number("broker_visibility_timeout_s", 43200.0),
        key=engine_key,
    )
    if settings.remote:
        if not broker:
            raise r._error(
                "broker_url",
                "required with engine: celery; expected a URL like redis://host:6379/0 (here, in "
                f"{LOCAL_FILE} or in HERO_BROKER_URL)",
            )
        if not state.startswith(("redis://", "rediss://", "unix://")):
            raise r._error(
                "state_url",
                "required with engine: celery when broker_url is not a Redis URL; expected "
                "redis://host:6379/0 (hero keeps its leases and records there)",
            )
        if not settings.target_remote:
            raise r._error(
                "target_remote",
                "required with engine: celery; expected a git URL every worker can reach "
                "(a bare repository on a shared path, ssh://..., https://...)",
            )
        if not engine_key:
            raise ConfigError(
                LOCAL_FILE,
                "engine_key",
                "required with engine: celery: the secret that authenticates every story the "
                "coordinator sends and everything a worker publishes; make one with "
                f"{ENGINE_KEY_HOWTO} and put the same value in {LOCAL_FILE} "
                "(`engine_key: ...`) of the coordinator's and every worker's home, or in "
                "HERO_ENGINE_KEY",
            )
        for name, url in (("broker_url", broker), ("state_url", state)):
            problem = _tls_problem(url)
            if problem:
                raise r._error(name, problem)
    return settings


#: The shortest engine_key hero accepts (``secrets.token_hex(32)`` makes 64 characters).
ENGINE_KEY_MIN_CHARS = 32
ENGINE_KEY_HOWTO = '`python -c "import secrets; print(secrets.token_hex(32))"`'


def _engine_key(r: _Reader, local: Mapping[Any, Any], env: Mapping[str, str]) -> str:
    """engine_key: env HERO_ENGINE_KEY, else config.local.yaml's; never roles.yaml's."""
    if "engine_key" in r.data:
        raise r._error(
            "engine_key",
            f"is a secret; put it in {LOCAL_FILE} (`engine_key: ...`) or in the environment "
            "(HERO_ENGINE_KEY) instead, so that roles.yaml holds no secret",
        )
    value = local.get("engine_key")
    if value is not None and not isinstance(value, str):
        raise ConfigError(
            LOCAL_FILE, "engine_key", f"expected a string (quote it); found {type_name(value)}"
        )
    key = (env.get("HERO_ENGINE_KEY") or "").strip() or (value or "").strip()
    if key and len(key) < ENGINE_KEY_MIN_CHARS:
        raise ConfigError(
            LOCAL_FILE,
            "engine_key",
            f"expected at least {ENGINE_KEY_MIN_CHARS} characters (here or in HERO_ENGINE_KEY); "
            f"found {len(key)}. Make one with {ENGINE_KEY_HOWTO}",
        )
    return key


def _tls_problem(url: str) -> str | None:
    """Why a ``rediss://`` URL would talk TLS without checking the server, or None. (Kombu
    connects to a bare ``rediss://`` URL without verifying the certificate: hero asks it
    to, see hero.engine.app; a URL that says so itself is refused.)"""
    from urllib.parse import parse_qs, urlsplit

    if not url.startswith("rediss://"):
        return None
    try:
        query = parse_qs(urlsplit(url).query)
    except ValueError:
        return None
    wanted = [v.lower() for v in query.get("ssl_cert_reqs", [])]
    if any(v not in ("required", "cert_required") for v in wanted):
        return (
            "ssl_cert_reqs: expected required (or leave it out: hero checks the server's "
            "certificate); give a CA the server's certificate is signed by with "
            "?ssl_ca_certs=/path/to/ca.pem instead of turning the check off"
        )
    return None


def _url_credentials(url: str) -> list[str]:
    """The credentials of a git URL: its password (``https://user:TOKEN@host``), or a
    token given as the user of an http(s) URL (``https://TOKEN@github.com``)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        user, password = parts.username or "", parts.password or ""
    except ValueError:
        return []
    if password:
        return [password]
    if parts.scheme in ("http", "https") and len(user) >= 8:
        return [user]
    return []


def _url_password(url: str) -> str:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).password or ""
    except ValueError:
        return ""


def _rules(r: _Reader, key: str) -> tuple[str, ...]:
    """A command policy's rules: each must split into shell words."""
    import shlex

    rules = r.string_list(key)
    for i, rule in enumerate(rules, 1):
        try:
            words = shlex.split(rule)
        except ValueError as exc:
            raise r._error(key, f"rule {i} ({rule!r}) cannot be parsed: {exc}") from None
        if not words:
            raise r._error(key, f"rule {i} is empty; expected a command, e.g. 'git push'")
    return rules


def _github(block: Any, token: str | None, env: Mapping[str, str]) -> GitHubSettings | None:
    """The ``github:`` block of roles.yaml (None when absent); the token is not required
    here: the commands that talk to GitHub say so when it is missing."""
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ConfigError(
            ROLES_FILE,
            "github",
            "expected a mapping like `github: {repo: OWNER/NAME, label: hero}`; "
            f"found {describe(block)}",
        )
    if "token" in block or "github_token" in block:  # never echo it: it may be the token
        raise ConfigError(
            ROLES_FILE,
            "github.token",
            f"the GitHub token does not belong in {ROLES_FILE}: set GITHUB_TOKEN or put "
            f"`github_token: ...` in {LOCAL_FILE}",
        )
    _check_keys(block, GITHUB_KEYS, ROLES_FILE, "key", prefix="github.")
    r = _Reader(block, ROLES_FILE, prefix="github.")
    repo = r.string("repo")
    if repo is None or not GITHUB_REPO_RE.match(repo):
        raise ConfigError(
            ROLES_FILE,
            "github.repo",
            "expected the repository as OWNER/NAME (e.g. octo-org/app); "
            f"found {'nothing' if repo is None else describe(repo)}",
        )
    label = r.string("label")
    if label is None:
        raise ConfigError(
            ROLES_FILE,
            "github.label",
            "required; expected the label that marks issues for hero (e.g. hero); found nothing",
        )
    associations = tuple(a.upper() for a in r.string_list("allowed_associations"))
    for name in associations:
        if name not in GITHUB_ASSOCIATIONS:
            raise ConfigError(
                ROLES_FILE,
                "github.allowed_associations",
                f"expected names from {', '.join(GITHUB_ASSOCIATIONS)}"
                f"{did_you_mean(name, GITHUB_ASSOCIATIONS)}; found {describe(name)}",
            )
    labels = block.get("labels")
    if labels is None:
        labels = {}
    if not isinstance(labels, dict):
        raise ConfigError(
            ROLES_FILE,
            "github.labels",
            "expected a mapping like `labels: {in_progress: 'hero: in progress'}`; "
            f"found {describe(labels)}",
        )
    _check_keys(labels, GITHUB_LABEL_KEYS, ROLES_FILE, "key", prefix="github.labels.")
    lr = _Reader(labels, ROLES_FILE, prefix="github.labels.")
    default_labels = GitHubLabels()
    api_url = r.string("api_url")
    if api_url is not None and not re.match(r"^https?://[^\s/]+", api_url):
        raise ConfigError(
            ROLES_FILE, "github.api_url", f"expected an http(s):// URL; found {describe(api_url)}"
        )
    return GitHubSettings(
        repo=repo,
        label=label,
        interval_s=r.number("interval_s", 60.0),
        allowed_associations=associations or GitHubSettings.allowed_associations,
        labels=GitHubLabels(
            in_progress=lr.string("in_progress") or default_labels.in_progress,
            done=lr.string("done") or default_labels.done,
            failed=lr.string("failed") or default_labels.failed,
        ),
        remote=r.string("remote") or "origin",
        api_url=_github_api_url_from(api_url, env),
        token=token,
        verify=r.string_list("verify"),
        scope=r.string_list("scope"),
    )


def _github_api_url_from(block_url: str | None, env: Mapping[str, str]) -> str:
    chosen = (env.get("GITHUB_API_URL") or "").strip() or block_url or GITHUB_API_URL
    return chosen.rstrip("/")


def _github_api_url(github: GitHubSettings | None, env: Mapping[str, str]) -> str:
    return github.api_url if github is not None else _github_api_url_from(None, env)


def _local_github_token(home: Path) -> str | None:
    """config.local.yaml's ``github_token`` (None when the file or the key is absent)."""
    if not (home / LOCAL_FILE).exists():
        return None
    value = _read_mapping(home, LOCAL_FILE, secret=True).get("github_token")
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(
            LOCAL_FILE,
            "github_token",
            f"expected the GitHub token as a string (quote it); found {type_name(value)}",
        )
    return value.strip() or None


def _role_missing_message(name: str) -> str:
    return (
        f"role not configured; add a block like `{name}: {{provider: local, model: <model>}}` "
        "to config/roles.yaml (provider = a file name in config/providers/ without .yaml)"
    )


def _target_repo(home: Path, r: _Reader) -> Path:
    raw = r.data.get("target_repo")
    if raw is None and r.data.get("engine") == "celery" and r.data.get("target_remote"):
        # a `hero worker` home: its repository is its clone of target_remote (`hero watch`
        # refuses a home whose target_repo is no repository)
        return home / "worker" / "repo"
    if raw is None:
        raise ConfigError(
            ROLES_FILE,
            "target_repo",
            "required; expected the path of the git repository hero works on "
            "(absolute, or relative to the hero home); found nothing",
        )
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(
            ROLES_FILE, "target_repo", f"expected a path as a string; found {describe(raw)}"
        )
    path = Path(raw.strip()).expanduser()
    if not path.is_absolute():
        path = home / path
    path = path.resolve()
    if not path.exists():
        raise ConfigError(
            ROLES_FILE,
            "target_repo",
            f"expected an existing git repository; {path} does not exist "
            "(relative paths are relative to the hero home)",
        )
    if not path.is_dir():
        raise ConfigError(
            ROLES_FILE,
            "target_repo",
            f"expected a directory holding a git repository; {path} is a file",
        )
    if not (path / ".git").exists():
        raise ConfigError(
            ROLES_FILE,
            "target_repo",
            f"expected the root of a git repository; {path} has no .git "
            "(run `git init` there, or point target_repo at the repository root)",
        )
    return path


def _role_block(data: Mapping[Any, Any], name: str) -> dict[str, Any] | None:
    block = data.get(name)
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ConfigError(
            ROLES_FILE,
            name,
            f"expected a mapping like `{name}: {{provider: local}}`; found {describe(block)}",
        )
    _check_keys(block, ROLE_KEYS, ROLES_FILE, "key", prefix=f"{name}.")
    r = _Reader(block, ROLES_FILE, prefix=f"{name}.")
    provider = block.get("provider")
    if provider is None:
        raise ConfigError(
            ROLES_FILE,
            f"{name}.provider",
            "required; expected the name of a provider file in config/providers/ "
            "(without .yaml); found nothing",
        )
    if not isinstance(provider, str) or not _NAME_RE.match(provider):
        raise ConfigError(
            ROLES_FILE,
            f"{name}.provider",
            "expected a provider name (letters, digits, '.', '_', '-'), the file name of "
            f"config/providers/<name>.yaml; found {describe(provider)}",
        )
    return {
        "provider": provider,
        "model": r.string("model"),
        "reasoning_effort": r.string("reasoning_effort"),
        "max_output_tokens": r.optional_integer("max_output_tokens"),
    }


def _resolve_role(
    name: str,
    block: Mapping[str, Any],
    providers: Mapping[str, Provider],
    local_keys: Mapping[str, str],
    env: Mapping[str, str],
) -> RoleConfig:
    provider_name = block["provider"]
    provider = providers.get(provider_name)
    if provider is None:
        available = ", ".join(sorted(providers)) or "none"
        raise ConfigError(
            ROLES_FILE,
            f"{name}.provider",
            f"expected a provider with a file {PROVIDERS_DIR}/{provider_name}.yaml; "
            f"that file does not exist (available providers: {available})",
        )
    return RoleConfig(
        role=name,
        provider=provider,
        model=block["model"] or provider.default_model,
        reasoning_effort=block["reasoning_effort"] or provider.default_reasoning_effort,
        api_key=_api_key(provider, local_keys, env),
        max_output_tokens=block["max_output_tokens"],
    )


def _api_key(
    provider: Provider, local_keys: Mapping[str, str], env: Mapping[str, str]
) -> str | None:
    local = local_keys.get(provider.name)
    if local:
        return local
    if provider.api_key_env is None:
        return None
    value = env.get(provider.api_key_env)
    if value:
        return value
    raise ConfigError(
        f"{PROVIDERS_DIR}/{provider.name}.yaml",
        "api_key_env",
        f"environment variable {provider.api_key_env} is not set and {LOCAL_FILE} has no "
        f"keys.{provider.name}; set one of them (or remove api_key_env for a keyless endpoint)",
    )


def _read_local_keys(home: Path) -> dict[str, str]:
    if not (home / LOCAL_FILE).exists():
        return {}
    data = _read_mapping(home, LOCAL_FILE, secret=True)
    _check_keys(data, LOCAL_KEYS, LOCAL_FILE, "key")
    keys = data.get("keys")
    if keys is None:
        return {}
    if not isinstance(keys, dict):
        raise ConfigError(
            LOCAL_FILE,
            "keys",
            "expected a mapping of provider name -> API key, like `keys: {openai: sk-...}`; "
            f"found {type_name(keys)}",
        )
    out: dict[str, str] = {}
    for name, value in keys.items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigError(
                LOCAL_FILE,
                "keys",
                "expected provider names (file names in config/providers/ without .yaml) "
                f"as keys; found a key that is {type_name(name)} and not a provider name",
            )
        if value is None:
            continue
        if not isinstance(value, str):
            raise ConfigError(
                LOCAL_FILE,
                f"keys.{name}",
                f"expected the API key as a string (quote it); found {type_name(value)}",
            )
        if value.strip():
            out[name] = value.strip()
    return out


def _read_providers(home: Path) -> dict[str, Provider]:
    directory = home / PROVIDERS_DIR
    if not directory.is_dir():
        return {}
    providers: dict[str, Provider] = {}
    for path in sorted(directory.glob("*.yaml")):
        if path.exists():  # a FIFO or a device is refused by the reader, a dangling link skipped
            provider = _read_provider(home, path.stem)
            providers[provider.name] = provider
    return providers


def _read_provider(home: Path, stem: str) -> Provider:
    rel = f"{PROVIDERS_DIR}/{stem}.yaml"
    data = _read_mapping(home, rel)
    _check_keys(data, PROVIDER_KEYS, rel, "key")
    r = _Reader(data, rel)
    name = r.string("name")
    if name is not None and name != stem:
        raise ConfigError(
            rel, "name", f"expected {stem!r} (the file name without .yaml); found {name!r}"
        )
    if not _NAME_RE.match(stem):
        raise ConfigError(
            rel,
            "name",
            "expected a file name of letters, digits, '.', '_' or '-'; "
            f"found {stem!r}; rename the file",
        )
    base_url = r.string("base_url")
    if base_url is None:
        raise ConfigError(
            rel,
            "base_url",
            "required; expected the endpoint's base URL like https://api.openai.com/v1; "
            "found nothing",
        )
    if not re.match(r"^https?://[^\s/]+", base_url):
        raise ConfigError(
            rel,
            "base_url",
            f"expected an http:// or https:// URL; found {describe(base_url)}",
        )
    default_model = r.string("default_model")
    if default_model is None:
        raise ConfigError(
            rel,
            "default_model",
            "required; expected the model name used when a role sets no model; found nothing",
        )
    api_key_env = data.get("api_key_env")
    if api_key_env is not None:
        if not isinstance(api_key_env, str) or not _ENV_NAME_RE.match(api_key_env.strip()):
            raise ConfigError(
                rel,
                "api_key_env",
                "expected the NAME of an environment variable (like OPENAI_API_KEY); found "
                f"{type_name(api_key_env)} that is not a variable name. Put API keys "
                f"themselves in {LOCAL_FILE} under keys.{stem}",
            )
        api_key_env = api_key_env.strip()
        if _looks_like_secret(api_key_env):
            raise ConfigError(
                rel,
                "api_key_env",
                "expected the NAME of an environment variable (like OPENAI_API_KEY); found a "
                f"value that looks like an API key. Put API keys in {LOCAL_FILE} under "
                f"keys.{stem}",
            )
    insecure_tls = data.get("insecure_tls", False)
    if insecure_tls is None:
        insecure_tls = False
    if not isinstance(insecure_tls, bool):
        raise ConfigError(
            rel, "insecure_tls", f"expected true or false; found {describe(insecure_tls)}"
        )
    output_tokens_param = r.string("output_tokens_param") or "max_tokens"
    if output_tokens_param not in OUTPUT_TOKENS_PARAMS:
        raise ConfigError(
            rel,
            "output_tokens_param",
            f"expected one of {', '.join(OUTPUT_TOKENS_PARAMS)}"
            f"{did_you_mean(output_tokens_param, OUTPUT_TOKENS_PARAMS)}; "
            f"found {describe(output_tokens_param)}",
        )
    return Provider(
        name=stem,
        base_url=base_url.rstrip("/"),
        default_model=default_model,
        default_reasoning_effort=r.string("default_reasoning_effort"),
        api_key_env=api_key_env,
        insecure_tls=insecure_tls,
        headers=_headers(data.get("headers"), rel),
        input_usd_per_mtok=r.optional_number("input_usd_per_mtok"),
        output_usd_per_mtok=r.optional_number("output_usd_per_mtok"),
        context_window=r.optional_integer("context_window", minimum=1024),
        send_reasoning=r.boolean("send_reasoning", False),
        output_tokens_param=output_tokens_param,
    )


def _headers(value: Any, rel: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(
            rel,
            "headers",
            f"expected a mapping of header name -> value; found {type_name(value)}",
        )
    out: dict[str, str] = {}
    for name, header_value in value.items():
        if not isinstance(name, str) or not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", name):
            raise ConfigError(rel, "headers", f"expected HTTP header names; found {describe(name)}")
        if not isinstance(header_value, str):  # values may be secret: never show them
            raise ConfigError(
                rel,
                f"headers.{name}",
                f"expected a string value (quote it); found {type_name(header_value)}",
            )
        out[name] = header_value
    return out


def _looks_like_secret(name: str) -> bool:
    has_lower = any(c.islower() for c in name)
    has_upper = any(c.isupper() for c in name)
    has_digit = any(c.isdigit() for c in name)
    return len(name) >= 20 and has_lower and has_digit and (has_upper or "_" not in name)


# ----------------------------------------------------------------------------- yaml helpers


def _read_mapping(home: Path, rel: str, *, secret: bool = False) -> dict[Any, Any]:
    """Parse a YAML file that must hold a mapping (an empty file is an empty mapping).

    Read by :func:`hero.yamlio.read_file`: a regular file of at most MAX_CONFIG_BYTES,
    opened so that a FIFO never blocks start-up."""
    try:
        data = read_file(home / rel, limit=MAX_CONFIG_BYTES, what="YAML file")
    except OSError as exc:
        raise ConfigError(rel, "file", f"cannot read: {exc.strerror or exc}") from None
    except ValueProblem as exc:
        raise ConfigError(rel, "file", exc.message) from None
    try:
        text = decode_text(data, what="YAML file", secret=secret)
    except ValueProblem as exc:
        raise ConfigError(rel, "file", exc.message) from None
    try:
        loaded = load_yaml(text, secret=secret)
    except ValueProblem as exc:
        raise ConfigError(rel, "yaml", exc.message) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        found = type_name(loaded) if secret else describe(loaded)
        raise ConfigError(
            rel, "file", f"expected a mapping of keys at the top level; found {found}"
        )
    return loaded


def _check_keys(
    data: Mapping[Any, Any], known: tuple[str, ...], rel: str, what: str, prefix: str = ""
) -> None:
    for key in data:
        if key in known:
            continue
        name = str(key)
        extra = did_you_mean(name, known)
        if name in ("api_key", "key", "apikey", "token"):
            extra += f"; API keys belong in {LOCAL_FILE} under keys.<provider name>"
        raise ConfigError(
            rel, f"{prefix}{name}", f"unknown {what}{extra}; known keys: {', '.join(known)}"
        )


class _Reader:
    """Typed access to optional keys of a mapping, raising ConfigError on wrong types."""

    def __init__(self, data: Mapping[Any, Any], rel: str, prefix: str = "") -> None:
        self.data = data
        self.rel = rel
        self.prefix = prefix

    def _error(self, key: str, message: str) -> ConfigError:
        return ConfigError(self.rel, f"{self.prefix}{key}", message)

    def string(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self._error(key, f"expected a non-empty string; found {describe(value)}")
        return value.strip()

    def integer(
        self, key: str, default: int, *, minimum: int = 1, maximum: int | None = None
    ) -> int:
        value = self.data.get(key)
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < minimum
            or (maximum is not None and value > maximum)
        ):
            bound = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            raise self._error(
                key,
                f"expected a whole number {bound} (default {default}); found {describe(value)}",
            )
        return value

    def number(self, key: str, default: float, *, allow_zero: bool = False) -> float:
        value = self.data.get(key)
        if value is None:
            return default
        bound = ">= 0" if allow_zero else "> 0"
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or value != value  # NaN
            or value < 0
            or (value == 0 and not allow_zero)
            or value == float("inf")
        ):
            raise self._error(
                key, f"expected a number {bound} (default {default:g}); found {describe(value)}"
            )
        return float(value)

    def optional_number(self, key: str) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise self._error(key, f"expected a number >= 0 or null; found {describe(value)}")
        return float(value)

    def optional_integer(self, key: str, *, minimum: int = 1) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self._error(
                key, f"expected a whole number >= {minimum} or null; found {describe(value)}"
            )
        return value

    def fraction(self, key: str, default: float, *, above: float, at_most: float) -> float:
        """A number in (above, at_most], like 0.75."""
        value = self.data.get(key)
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not above < value <= at_most  # False for NaN too
        ):
            raise self._error(
                key,
                f"expected a fraction > {above:g} and <= {at_most:g} (default {default:g}); "
                f"found {describe(value)}",
            )
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._error(key, f"expected true or false; found {describe(value)}")
        return value

    def string_list(self, key: str) -> tuple[str, ...]:
        try:
            return string_list(self.data.get(key))
        except ValueProblem as exc:
            raise self._error(key, exc.message) from None
