"""Configuration of a hero home: providers, roles, knobs and API keys.

Layout (relative to the home directory)::

    config/roles.yaml              roles (worker, reviewer, planner, memory) and knobs; target_repo
    config/providers/<name>.yaml   one OpenAI-compatible endpoint per file
    config.local.yaml              optional, git-ignored: keys: {<provider name>: <key>},
                                   github_token: <token>

Every setting is declared once, on the field of the record that holds it (``knob(...)``, see
:mod:`hero.settings`): its key, type, default, bounds, section and doc. Reading and checking
the files, the config/roles.yaml that ``hero init`` writes and docs/settings.md all derive
from that declaration (:func:`roles_settings`, :func:`provider_settings`,
:func:`local_settings`, :data:`ROLE_SETTINGS`).

Every problem raises :class:`ConfigError`, whose text is one line
``<file>: <key>: <message>`` with the file shown relative to the home. Error text never
contains an API key value.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from hero.errors import ConfigurationError
from hero.limits import Limits
from hero.settings import Section, Setting, declare, knob, read_all, settings_of
from hero.yamlio import (
    ValueProblem,
    decode_text,
    describe,
    did_you_mean,
    load_yaml,
    read_file,
    type_name,
)

ROLE_NAMES = ("worker", "reviewer", "planner", "memory")
#: Roles that are off unless config/roles.yaml has their block: asked for and absent, they
#: are simply not loaded (``memory``: the model that distills a story's facts, docs/memory.md).
OPTIONAL_ROLES = frozenset({"memory"})
ROLES_FILE = "config/roles.yaml"
PROVIDERS_DIR = "config/providers"
LOCAL_FILE = "config.local.yaml"
#: The largest config file hero reads: far more than any hand-written config needs.
MAX_CONFIG_BYTES = 1 << 20

#: The request fields a role's output cap may be sent as (OpenAI's reasoning models
#: refuse ``max_tokens``).
OUTPUT_TOKENS_PARAMS = ("max_tokens", "max_completion_tokens")
ENGINES = ("local", "celery")
#: What hero sends alerts on (``notify_events``): a story's end, a provider's breaker opening.
NOTIFY_EVENTS = ("story_end", "breaker_open")
SANDBOX_MODES = ("auto", "bwrap", "none")
#: Files the worker never writes, whatever the story's scope; roles.yaml's
#: ``protected_files`` adds to them.
DEFAULT_PROTECTED = (".env", ".env.*", "*.pem", "*.key", "id_rsa*", ".git/**")
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
#: The shortest engine_key hero accepts (``secrets.token_hex(32)`` makes 64 characters).
ENGINE_KEY_MIN_CHARS = 32
ENGINE_KEY_HOWTO = '`python -c "import secrets; print(secrets.token_hex(32))"`'

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL_RE = re.compile(r"^https?://[^\s/]+")
_SENSITIVE_HEADER_RE = re.compile(r"auth|key|token|secret|cookie", re.IGNORECASE)
#: A value copied from an example instead of a secret: ``<...>``, ``your-...``, ``changeme``,
#: ``replace-me``, ``placeholder``, or a prefix with only ``...``/``xxx``/``***`` after it.
_PLACEHOLDER_RE = re.compile(
    r"^<.*>$|(?:^|[^a-z])your[-_ ]|change[-_ ]?me|replace[-_ ]?me|placeholder"
    r"|^(?:[a-z]+[-_])*(?:\.{3,}|x{3,}|\*{3,})$",
    re.IGNORECASE,
)

R = TypeVar("R")


class ConfigError(ConfigurationError):
    """A configuration problem; ``str(e) == f"{file}: {key}: {message}"``, never a secret."""

    def __init__(self, file: str, key: str, message: str) -> None:
        self.file = str(file)
        self.key = str(key)
        self.message = " ".join(str(message).split())
        super().__init__(f"{self.file}: {self.key}: {self.message}")


# ----------------------------------------------------------------------------- checks
# What the declarations below check beyond a value's type: each takes the typed value,
# returns it (perhaps normalised) or raises ValueProblem; the reader names file and key.


def _http_url(url: str) -> str:
    if not _URL_RE.match(url):
        raise ValueProblem(f"expected an http:// or https:// URL; found {describe(url)}")
    return url.rstrip("/")


def _api_url(url: str) -> str:
    if not _URL_RE.match(url):
        raise ValueProblem(f"expected an http(s):// URL; found {describe(url)}")
    return url


def _env_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """Names of environment variables (``pass_env``): never hero's own ``HERO_*``."""
    for name in names:
        if not _ENV_NAME_RE.match(name):
            raise ValueProblem(f"{name!r} is not the name of an environment variable")
        if name.startswith("HERO_"):
            raise ValueProblem(f"{name} is hero's own: hero never passes a HERO_* variable on")
    return tuple(dict.fromkeys(names))


def _rules(rules: tuple[str, ...]) -> tuple[str, ...]:
    """A command policy's rules: each must split into shell words."""
    import shlex

    for i, rule in enumerate(rules, 1):
        try:
            words = shlex.split(rule)
        except ValueError as exc:
            raise ValueProblem(f"rule {i} ({rule!r}) cannot be parsed: {exc}") from None
        if not words:
            raise ValueProblem(f"rule {i} is empty; expected a command, e.g. 'git push'")
    return rules


def _with_builtin(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """``protected_files`` adds to the built-in list, never replaces it."""
    return tuple(dict.fromkeys((*DEFAULT_PROTECTED, *patterns)))


def _queue_name(queue: str) -> str:
    if not _NAME_RE.match(queue):
        raise ValueProblem(f"expected letters, digits, '.', '_' or '-'; found {queue!r}")
    return queue


def _github_repo(repo: str) -> str:
    if not GITHUB_REPO_RE.match(repo):
        raise ValueProblem(
            f"expected the repository as OWNER/NAME (e.g. octo-org/app); found {describe(repo)}"
        )
    return repo


def _associations(names: tuple[str, ...]) -> tuple[str, ...]:
    upper = tuple(name.upper() for name in names)
    for name in upper:
        if name not in GITHUB_ASSOCIATIONS:
            raise ValueProblem(
                f"expected names from {', '.join(GITHUB_ASSOCIATIONS)}"
                f"{did_you_mean(name, GITHUB_ASSOCIATIONS)}; found {describe(name)}"
            )
    return upper


def _webhook_url(url: str) -> str:
    """An alert webhook: http(s) with a host. The URL is never echoed: it may hold a token."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        parts, host = None, None
    scheme = parts.scheme if parts is not None else ""
    if parts is None or scheme not in ("http", "https") or not host:
        shown = f"a URL of scheme {scheme!r}" if scheme else "no http(s) URL"
        raise ValueProblem(f"expected an http:// or https:// URL with a host; found {shown}")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise ValueProblem("expected a URL without spaces or control characters")
    return url


def _notify_events(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if name not in NOTIFY_EVENTS:
            raise ValueProblem(
                f"expected events from {', '.join(NOTIFY_EVENTS)}"
                f"{did_you_mean(name, NOTIFY_EVENTS)}; found {describe(name)}"
            )
    return tuple(dict.fromkeys(names))


def _choices(
    names: tuple[str, ...], docs: Mapping[str, str] | None = None
) -> tuple[tuple[str, str], ...]:
    """``choices`` of a Setting: each name with its line of doc."""
    return tuple((name, (docs or {}).get(name, "")) for name in names)


# ----------------------------------------------------------------------------- the settings
# Each setting on the field that holds it: key, default, doc (one line), then what more the
# template and the reference show. Types are the fields' annotations.

#: The sections of config/roles.yaml, in the order ``hero init`` writes them and
#: docs/settings.md lists them; every setting of the file names one.
ROLES_SECTIONS = (
    Section("target repository"),
    Section("rounds"),
    Section("sandbox"),
    Section(
        "sandbox limits",
        "What each command in the sandbox (a Worker's bash call, a verify command) may use, so "
        "that a fork bomb, a full /tmp or a runaway test ends that command and not the "
        "machine. A command that hits one fails, and the Worker is told which limit and which "
        "setting. Processes and memory are held by a cgroup where hero can make one (all the "
        "command's processes together), else by per-process rlimits; `hero` logs which at "
        "start. As root without a writable cgroup, the number of processes is not limited.",
    ),
    Section("what the worker may do"),
    Section(
        "budgets",
        "Spend limits per story and per round; null (the default) = no limit. They are "
        "checked before every model call (each worker turn and the reviewer's call): when one "
        "is used up, the story stops as `budget_exceeded` with its work committed on its "
        "branch, and the error names the budget. Raise it here and run `hero retry ID` to "
        "continue; `hero status` shows each story's spend against its budgets. A story's "
        "spend adds up over all its runs and retries.",
    ),
    Section(
        "GitHub issues",
        "Open issues with a label become stories inbox/gh-<number>.md, and their endings are "
        "reported on the issues (a pull request, comments, labels). `hero watch` does it in "
        "the same process when the github block is set; `hero github watch` does it alone. The "
        "token comes from GITHUB_TOKEN or `github_token:` in config.local.yaml, never from this "
        "file.",
    ),
    Section(
        "housekeeping",
        "What `hero watch` and `hero worker` remove by themselves, after a story ends and "
        "every housekeeping_interval_s: the repositories (worktrees/<id>) of finished stories "
        "(passed, gave_up, error, skipped, budget_exceeded; never a queued, running or "
        "interrupted one), and old run logs. A story's branch and its run record "
        "(runs/state/<id>.json) are kept, so `hero status` and `hero retry` still work: a "
        "retried story's repository is made again from its branch. `hero clean` does the same "
        "on demand (and deletes branches when asked).",
    ),
    Section("worker limits"),
    Section("model requests"),
    Section(
        "context window",
        "A Worker round's conversation never outgrows the model's context window (the provider "
        "file's context_window) minus the room kept for the answer (the role's "
        "max_output_tokens, else output_reserve_default). As it nears that limit hero condenses "
        "it: old tool results become a short note of what they were, then, if that is not "
        "enough, the oldest turns become one summary written by the model. The system prompt, "
        "the task and the reviewer's feedback are always kept; assistant messages are kept "
        "until a summary replaces them.",
    ),
    Section(
        "engine",
        "Where stories run: in this process's threads (local), or on `hero worker` processes "
        "on any number of machines through Celery and Redis (celery). The settings below the "
        "first matter with celery only.",
    ),
    Section(
        "alerts",
        "A command, a webhook or both that hero calls when a story ends (passed, gave_up, "
        "error, budget_exceeded, skipped) and when a model provider's circuit breaker opens: "
        "the event as one JSON object (docs/watch.md#alerts shows its fields), on the "
        "command's stdin and as the webhook's POST body. One attempt each, in the background, "
        "within notify_timeout_s; a failure is logged in one line and never stops a story or "
        "the daemon. No secret hero knows is ever sent.",
    ),
    Section(
        "status page",
        "`hero serve` (and `hero watch --serve ADDR`): a read-only web page of the stories, "
        "the queue and the daemon, with a JSON API (docs/serve.md). It listens on loopback by "
        "default; to listen elsewhere it needs serve_token (in config.local.yaml, or "
        "HERO_SERVE_TOKEN; never here), which every request must carry.",
    ),
    Section(
        "memory",
        "What stories on the target repository learned, kept for the stories after them "
        "(docs/memory.md): facts (a command, a convention, a failure, ...) and a recap of the "
        "last stories, in memory/<repository>.md in this home, a Markdown file you can read "
        "and edit (`hero memory`). No secret hero knows is ever stored.",
    ),
)
_TARGET, _ROUNDS, _SANDBOX, _LIMITS, _POLICY = (s.title for s in ROLES_SECTIONS[:5])
_BUDGETS, _GITHUB, _HOUSEKEEPING, _WORKER, _REQUESTS = (s.title for s in ROLES_SECTIONS[5:10])
_CONTEXT, _ENGINE = (s.title for s in ROLES_SECTIONS[10:12])
_ALERTS = ROLES_SECTIONS[12].title
_SERVE = ROLES_SECTIONS[13].title
_MEMORY = ROLES_SECTIONS[14].title
#: The shortest serve_token hero accepts (``secrets.token_urlsafe(32)`` makes 43 characters).
SERVE_TOKEN_MIN_CHARS = 24


@dataclass(frozen=True)
class Provider:
    """One OpenAI-compatible Chat Completions endpoint: config/providers/<name>.yaml."""

    name: str = field(
        metadata=declare("name", "Must equal the file name without .yaml.", shown="the file name")
    )
    base_url: str = field(
        metadata=declare(
            "base_url",
            "Base URL of the API: the part before /chat/completions.",
            required="expected the endpoint's base URL like https://api.openai.com/v1",
            check=_http_url,
        )
    )
    default_model: str = field(
        metadata=declare(
            "default_model",
            "Model used by a role that does not set `model:` in config/roles.yaml.",
            required="expected the model name used when a role sets no model",
        )
    )
    default_reasoning_effort: str | None = knob(
        "default_reasoning_effort",
        None,
        "Reasoning effort sent to the model (e.g. minimal, low, medium, high) when a role "
        "does not set `reasoning_effort:`; null: not sent (needed for non-reasoning models).",
    )
    api_key_env: str | None = knob(
        "api_key_env",
        None,
        "Name of the environment variable holding the API key; null: a keyless endpoint.",
        note="A key in config.local.yaml (keys: {<name>: ...}) takes precedence. Never put "
        "the key itself in this file.",
        type_doc="environment variable name or null",
        custom=True,  # its errors must never echo a key pasted in by mistake
    )
    insecure_tls: bool = knob(
        "insecure_tls",
        False,
        "true = do not verify the server's TLS certificate (self-signed gateways only).",
    )
    headers: Mapping[str, str] = field(
        default_factory=dict,
        metadata=declare(
            "headers",
            "Extra HTTP headers sent with every request, e.g. {OpenAI-Organization: org-...}.",
            type_doc="mapping of header name -> value",
            shown="{}",
            value="{}",
            custom=True,  # values may be secrets: never shown in an error
        ),
    )
    input_usd_per_mtok: float | None = knob(
        "input_usd_per_mtok",
        None,
        "Price of a million input tokens in US dollars, for cost reports; null = unknown.",
    )
    output_usd_per_mtok: float | None = knob(
        "output_usd_per_mtok",
        None,
        "Price of a million output tokens in US dollars, for cost reports; null = unknown.",
    )
    context_window: int | None = knob(
        "context_window",
        None,
        "The model's context window in tokens: a Worker round's conversation is condensed "
        "before it outgrows it.",
        note="null = context_window_default in config/roles.yaml.",
        minimum=1024,
    )
    send_reasoning: bool = knob(
        "send_reasoning",
        False,
        "true = send the reasoning text the model returns back with its message in later "
        "requests (some providers require it); false keeps it in the trace only.",
    )
    output_tokens_param: str = knob(
        "output_tokens_param",
        "max_tokens",
        "The request field a role's max_output_tokens is sent as.",
        choices=_choices(
            OUTPUT_TOKENS_PARAMS,
            {"max_completion_tokens": "OpenAI's reasoning models refuse max_tokens"},
        ),
    )


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
    key_source: str = ""
    """Where ``api_key`` came from, never the key: ``config.local.yaml: keys.<provider>``
    or ``$VARIABLE``; "" when no key is sent. A refused key's error names it."""
    chosen_by: str = ""
    """Who chose this model instead of config/roles.yaml: ``story field model`` (the story
    file), ``--model`` (`hero run`); "". A model the story chose that the provider refuses
    is the story's error, not an outage of the provider (see hero.llm)."""

    @property
    def context_window(self) -> int | None:
        """The provider's context window in tokens; None when its file gives none."""
        return self.provider.context_window


#: The keys of a role's block in config/roles.yaml (``worker: {provider: local}``); a
#: RoleConfig holds them resolved against the provider.
ROLE_SETTINGS = (
    Setting(
        "provider",
        "The provider: a file name in config/providers/, without .yaml.",
        type="str",
        required="expected the name of a provider file in config/providers/ (without .yaml)",
        custom=True,
    ),
    Setting(
        "model",
        "The model.",
        type="str | None",
        shown="the provider's default_model",
    ),
    Setting(
        "reasoning_effort",
        "The reasoning effort sent with each request (null = not sent).",
        type="str | None",
        shown="the provider's default_reasoning_effort",
    ),
    Setting(
        "max_output_tokens",
        "The cap on one answer's tokens, sent as the provider's output_tokens_param; less "
        "than half its context_window.",
        type="int | None",
        shown="not sent (output_reserve_default is kept free)",
    ),
)


@dataclass(frozen=True)
class WorkerLimits:
    """The worker's limits in one round: the agent loop's guardrails and the bash timeout."""

    max_turns: int = knob(
        "worker_max_turns", 100, "Model turns (requests) in one Worker round.", section=_WORKER
    )
    max_tool_calls: int = knob(
        "worker_max_tool_calls", 300, "Tool calls in one Worker round.", section=_WORKER
    )
    max_wall_s: float = knob(
        "worker_max_wall_s",
        3600.0,
        "Wall-clock limit of one Worker round, in seconds, checked before each model call "
        "and each tool call.",
        section=_WORKER,
    )
    bash_timeout_s: float = knob(
        "bash_timeout_s",
        600.0,
        "Default timeout of one bash tool call, in seconds (the model may ask for longer, "
        "within limits).",
        section=_WORKER,
    )
    loop_repeats: int = knob(
        "loop_repeats",
        4,
        "Identical consecutive tool calls that count as the Worker being stuck in a loop.",
        minimum=2,
        section=_WORKER,
    )
    max_tool_errors: int = knob(
        "worker_max_tool_errors",
        10,
        "Tool errors in a row that stop a Worker round (0: no limit).",
        note="A tool error is a call made wrongly: an unknown tool, arguments that are not "
        "JSON or do not fit the tool, or a call the tool refused (a path outside the "
        "worktree, a missing file, an edit whose old text is not found, a command the "
        "policy forbids). A bash command that exits non-zero is not one. Any other call "
        "resets the count.",
        minimum=0,
        section=_WORKER,
    )


@dataclass(frozen=True)
class Safety:
    """What confines the worker's and the checks' commands (roles.yaml)."""

    sandbox: str = knob(
        "sandbox",
        "auto",
        "Where the Worker's bash commands and the verify commands run:",
        choices=_choices(
            SANDBOX_MODES,
            {
                "auto": "bubblewrap (bwrap) when it works on this machine, else no sandbox, "
                "with a warning",
                "bwrap": "bubblewrap, required: without it a story ends in error before any "
                "command runs",
                "none": "no sandbox: commands run with your user's rights",
            },
        ),
        note="In the sandbox a command sees the system read-only, the story's worktree "
        "writable, the repository's git objects and refs but not its config or hooks, a "
        "private /tmp and HOME, only its own processes (all of them end with it), and not "
        "the hero home or your home. Needs the system package bubblewrap (apt-get install "
        "bubblewrap).",
        section=_SANDBOX,
    )
    sandbox_network: bool = knob(
        "sandbox_network",
        False,
        "Whether the Worker's commands may reach the network from the sandbox.",
        section=_SANDBOX,
    )
    verify_network: bool = knob(
        "verify_network",
        False,
        "Whether the verify commands may reach the network from the sandbox.",
        note="A test the Worker wrote runs in the checks, and with the network it could send "
        "what it reads anywhere. Set true for test suites that fetch dependencies.",
        section=_SANDBOX,
    )
    pass_env: tuple[str, ...] = knob(
        "pass_env",
        (),
        "Names of hero's environment variables the commands may see beside the safe ones.",
        note="The Worker's and the verify commands see of hero's environment only PATH, HOME, "
        "USER, the language and time zone (LANG, LC_*, TZ), TMPDIR, certificates (SSL_CERT_*) "
        "and toolchain homes (VIRTUAL_ENV, JAVA_HOME, GOPATH, CARGO_HOME, ...). A variable "
        "whose value holds a key or token hero knows is never passed on, nor any HERO_*.",
        check=_env_names,
        section=_SANDBOX,
    )
    protected_files: tuple[str, ...] = knob(
        "protected_files",
        DEFAULT_PROTECTED,
        "Files the Worker never changes, whatever a story's scope says: .gitignore-style globs.",
        note="`*.pem` and `.env` match at any depth, `secrets/` or `config/prod/**` from the "
        "repository's root. hero always protects .env, .env.*, *.pem, *.key, id_rsa* and "
        ".git/**; these add to them. write_file and edit_file refuse a protected file; a bash "
        "command that changes one has it put back (or deleted, if it is new) before its "
        "result reaches the Worker.",
        check=_with_builtin,
        value="[]",
        shown="[] (the built-in list only)",
        example='protected_files:\n  - secrets/\n  - "*.p12"\n  - config/production.yaml',
        section=_POLICY,
    )
    allow_commands: tuple[str, ...] = knob(
        "allow_commands",
        (),
        "Commands the Worker's bash tool may run; a non-empty list refuses every part of a "
        "command it does not name.",
        note="A rule is a command and its first words, matched as whole words on every part "
        "of the parsed command: `rm` refuses `make && rm -rf build`, `bash -c 'rm x'`, `sudo "
        "rm x`, `/bin/rm x`, but not `rmdir x` or `echo rm`. With an allow list, list `cd`, "
        "`echo`, ... too, and both a wrapper and what it wraps (`timeout` and `pytest`). A "
        "refused command is not run; the Worker is told the rule. The rules hold for the "
        "Worker's commands and the verify commands a planner model wrote (a plan's stories); "
        "verify commands you wrote run as written. A guard-rail against accidents, not a "
        "security boundary (a script the Worker writes, or `python -c`, is not looked into): "
        "the sandbox is that.",
        check=_rules,
        shown="[] (no policy)",
        example="allow_commands:\n  - git\n  - python\n  - pytest\n  - ls\n  - cat\n  - echo"
        "\n  - cd",
        section=_POLICY,
    )
    deny_commands: tuple[str, ...] = knob(
        "deny_commands",
        (),
        "Commands the Worker's bash tool must not run, as rules like allow_commands'; deny "
        "wins over allow.",
        check=_rules,
        shown="[] (no policy)",
        example="deny_commands:\n  - git push\n  - npm publish\n  - curl\n  - wget",
        section=_POLICY,
    )
    model_verify: bool = knob(
        "model_verify",
        True,
        "Whether the verify commands a planner model wrote (`hero plan`) run at all.",
        note="true: they run, checked by allow_commands and deny_commands (`hero plan` asks "
        "the planner again, and `hero run-plan` and `hero watch` refuse a story, when one "
        "breaks them); false: they never run, and default_verify runs in their place.",
        section=_POLICY,
    )
    limits: Limits = Limits()
    """What each sandboxed command may use (the ``limit_*`` keys; see hero.limits)."""


@dataclass(frozen=True)
class Budget:
    """One budget as hero checks it: its key, what it limits and its limit."""

    key: str
    """Its key in config/roles.yaml, ``max_<scope>_<measure>``: the name errors give."""
    scope: str
    """``story`` (all its runs together) or ``round``."""
    measure: str
    """What is counted: ``tokens``, ``cost_usd`` or ``wall_s`` (hero.budget.Spend's fields)."""
    limit: float | None
    """None: no limit."""


@dataclass(frozen=True)
class Budgets:
    """Spend limits per story and per round; None: no limit. The one table of budget
    names: each field's key is ``max_<field>``; :meth:`each` lists them as hero checks them."""

    story_tokens: int | None = knob(
        "max_story_tokens",
        None,
        "Tokens (prompt + completion) a story may spend in all.",
        shown="null (no limit)",
        section=_BUDGETS,
    )
    story_cost_usd: float | None = knob(
        "max_story_cost_usd",
        None,
        "Dollars a story may spend in all.",
        note="The provider's reported cost when it sends one, else the prices in its file "
        "(input_usd_per_mtok, output_usd_per_mtok); without either, cost is 0.",
        shown="null (no limit)",
        section=_BUDGETS,
    )
    story_wall_s: float | None = knob(
        "max_story_wall_s",
        None,
        "Seconds a story may spend in its rounds, all runs together, rounds cut short by a "
        "stop or a budget included (time between runs does not count).",
        shown="null (no limit)",
        section=_BUDGETS,
    )
    round_tokens: int | None = knob(
        "max_round_tokens",
        None,
        "Tokens one round (its worker turns and the reviewer's call) may spend.",
        shown="null (no limit)",
        section=_BUDGETS,
    )
    round_cost_usd: float | None = knob(
        "max_round_cost_usd",
        None,
        "Dollars one round may spend.",
        shown="null (no limit)",
        section=_BUDGETS,
    )
    round_wall_s: float | None = knob(
        "max_round_wall_s",
        None,
        "Seconds one round may take.",
        shown="null (no limit)",
        section=_BUDGETS,
    )

    def each(self) -> tuple[Budget, ...]:
        """Every budget, story budgets first, in declaration order."""
        out = []
        for s in settings_of(Budgets):
            scope, _, measure = s.attr.partition("_")
            out.append(Budget(s.key, scope, measure, getattr(self, s.attr)))
        return tuple(out)

    def named(self) -> dict[str, float | None]:
        """The budgets under their names in config/roles.yaml; None: no limit."""
        return {budget.key: budget.limit for budget in self.each()}


@dataclass(frozen=True)
class Housekeeping:
    """What the daemon and the workers remove by themselves (see hero.housekeeping); None:
    that rule is off. Nothing of an unfinished story is ever removed."""

    after_days: float | None = knob(
        "housekeeping_after_days",
        14.0,
        "Days after a story finished when its repository (worktrees/<id>) is removed.",
        note="0 removes it as soon as the story finishes; null keeps it (but for the two "
        "limits below).",
        minimum=0,
        shown="14; null (never by age)",
        section=_HOUSEKEEPING,
    )
    max_worktrees_mb: float | None = knob(
        "housekeeping_max_worktrees_mb",
        None,
        "Megabytes worktrees/ may take: over it, the repositories of finished stories are "
        "removed, the longest finished first, until it fits.",
        note="Measured as disk use (like du) by walking worktrees/ at each look: on a large "
        "tree, a longer housekeeping_interval_s.",
        minimum=0,
        shown="null (no limit)",
        section=_HOUSEKEEPING,
    )
    min_free_mb: float | None = knob(
        "housekeeping_min_free_mb",
        1024.0,
        "Megabytes to keep free on the disk of worktrees/: below it, the repositories of "
        "finished stories are removed, the longest finished first, until there is.",
        minimum=0,
        shown="1024; null (no check)",
        section=_HOUSEKEEPING,
    )
    logs_after_days: float | None = knob(
        "housekeeping_logs_after_days",
        30.0,
        "Days after a story finished when its run logs (runs/<id>/: round traces, check "
        "output) are removed; its run record is kept.",
        minimum=0,
        shown="30; null (kept)",
        section=_HOUSEKEEPING,
    )
    after_pr_merged: bool = knob(
        "housekeeping_after_pr_merged",
        True,
        "With the github block: a passed story's repository is removed once its pull "
        "request is merged, whatever its age.",
        section=_HOUSEKEEPING,
    )
    interval_s: float = knob(
        "housekeeping_interval_s",
        600.0,
        "Seconds between two looks of `hero watch` at the rules above, besides one after "
        "each story that ends.",
        section=_HOUSEKEEPING,
    )


@dataclass(frozen=True)
class LlmSettings:
    timeout_s: float = knob(
        "llm_timeout_s", 600.0, "Timeout of one model request, in seconds.", section=_REQUESTS
    )
    max_attempts: int = knob(
        "llm_max_attempts",
        6,
        "Attempts per model request on rate limits, timeouts and server errors.",
        section=_REQUESTS,
    )
    backoff_base_s: float = knob(
        "llm_backoff_base_s",
        2.0,
        "First wait between attempts, in seconds; it doubles after each failed attempt (a "
        "server's Retry-After is honoured).",
        minimum=0,
        section=_REQUESTS,
    )
    backoff_max_s: float = knob(
        "llm_backoff_max_s",
        60.0,
        "Longest backoff between attempts, in seconds, at least llm_backoff_base_s (a "
        "server's Retry-After is honoured up to llm_retry_after_max_s).",
        minimum=0,
        section=_REQUESTS,
    )
    retry_after_max_s: float = knob(
        "llm_retry_after_max_s",
        120.0,
        "Longest wait a server's Retry-After (on a 429 or 503) is honoured for, in seconds; "
        "on a longer ask hero waits this long, then tries again.",
        section=_REQUESTS,
    )
    outage_backoff_s: float = knob(
        "outage_backoff_s",
        30.0,
        "How long `hero watch` holds a provider's stories back after an outage (its attempts "
        "ran out on refused connections, timeouts, 5xx or 429), in seconds, before one story "
        "tries it again; it doubles after each try that fails, with jitter.",
        note="See docs/reliability.md (model outages).",
        section=_REQUESTS,
    )
    outage_backoff_max_s: float = knob(
        "outage_backoff_max_s",
        900.0,
        "Longest wait between two tries of a provider that is down, in seconds, at least "
        "outage_backoff_s.",
        section=_REQUESTS,
    )


@dataclass(frozen=True)
class ContextSettings:
    """How a round's conversation is kept inside the model's context window (roles.yaml)."""

    condense_at: float = knob(
        "context_condense_at",
        0.75,
        "The share of the usable window (the window minus the answer's room) at which a "
        "round's history is condensed.",
        above=0.1,
        maximum=0.95,
        section=_CONTEXT,
    )
    keep_turns: int = knob(
        "context_keep_turns",
        6,
        "The most recent Worker turns whose tool results are kept whole while eliding and "
        "summarizing older turns is enough (the last turn's are cut only as a last resort).",
        section=_CONTEXT,
    )
    window_default: int = knob(
        "context_window_default",
        128_000,
        "The context window in tokens assumed when a provider file gives no context_window.",
        minimum=1024,
        section=_CONTEXT,
    )
    reserve_default: int = knob(
        "output_reserve_default",
        4096,
        "Tokens kept free for the answer when a role sets no max_output_tokens (less than "
        "half the window).",
        minimum=256,
        section=_CONTEXT,
    )


@dataclass(frozen=True)
class EngineSettings:
    """Where stories run (roles.yaml): in this process's threads (``local``), or on
    ``hero worker`` processes through Celery (``celery``, see hero.engine)."""

    kind: str = knob(
        "engine",
        "local",
        "Where stories run:",
        choices=_choices(
            ENGINES,
            {
                "local": "in this process's threads",
                "celery": "on `hero worker` processes, sent through Celery (see hero.engine)",
            },
        ),
        written=False,  # shown commented out: the Celery steps set it (docs/celery.md)
        section=_ENGINE,
    )
    broker_url: str = knob(
        "broker_url",
        "",
        "Celery's broker (and result backend), like redis://host:6379/0.",
        note="In config/roles.yaml it may not hold a password: put such a URL in "
        "config.local.yaml or the environment.",
        env="HERO_BROKER_URL",
        local=True,
        written=False,
        example="redis://10.0.0.1:6379/0",
        shown="none",
        repr=False,
        section=_ENGINE,
    )
    state_url: str = knob(
        "state_url",
        "",
        "The Redis that holds hero's leases and the mirrored records.",
        note="Required when broker_url is not a Redis URL.",
        env="HERO_STATE_URL",
        local=True,
        written=False,
        example="redis://10.0.0.1:6379/1",
        shown="broker_url, when that is a Redis URL",
        repr=False,
        section=_ENGINE,
    )
    target_remote: str = knob(
        "target_remote",
        "",
        "A git URL every worker can reach: workers clone it and push story branches to it.",
        written=False,
        example="ssh://git@git.example/app.git",
        shown="none",
        repr=False,
        section=_ENGINE,
    )
    lease_s: float = knob(
        "lease_s",
        30.0,
        "A running story's lease, in seconds: renewed every third of it; a dead worker's "
        "story is sent again once it has expired for as long again.",
        section=_ENGINE,
    )
    queue: str = knob(
        "engine_queue",
        "hero",
        "The Celery queue, and the prefix of hero's keys in Redis.",
        check=_queue_name,
        section=_ENGINE,
    )
    visibility_timeout_s: float = knob(
        "broker_visibility_timeout_s",
        43200.0,
        "Redis's redelivery of a task taken but not acknowledged, in seconds.",
        note="hero acknowledges a story when a worker starts it, so it never applies to a "
        "running one.",
        section=_ENGINE,
    )
    key: str = knob(
        "engine_key",
        "",
        "The secret the coordinator and every worker share, that authenticates each story "
        "sent and everything a worker publishes (HMAC-SHA256, see hero.engine.seal).",
        note=f"At least {ENGINE_KEY_MIN_CHARS} characters; make one with {ENGINE_KEY_HOWTO}. "
        "Required with celery.",
        env="HERO_ENGINE_KEY",
        local=True,
        secret=True,
        shown="none",
        repr=False,
        section=_ENGINE,
    )

    @property
    def remote(self) -> bool:
        return self.kind == "celery"


@dataclass(frozen=True)
class NotifySettings:
    """Alerts (roles.yaml's notify_* keys): what hero runs or calls on an event (see
    hero.notify, which sends them)."""

    command: str | tuple[str, ...] = knob(
        "notify_command",
        (),
        "A command run on each event, with the event's JSON on its stdin and the event's "
        "name as its last argument.",
        note="A string runs in sh (the name is $1); a list is the program and its arguments, "
        "run as they are. It runs in the hero home with the safe environment of the Worker's "
        "commands (no key; pass_env adds names), within notify_timeout_s; its output goes to "
        "runs/notify.log, and what it leaves running is ended.",
        type_doc="string or list of strings",
        shown="none",
        custom=True,
        written=False,
        example="[notify-send, hero]",
        section=_ALERTS,
    )
    webhook: str = knob(
        "notify_webhook",
        "",
        "A URL the event's JSON is POSTed to (Content-Type: application/json).",
        note="One attempt per event, no redirects followed. A URL that carries a token (in "
        "its path or query, like a chat webhook's) belongs in config.local.yaml: from there "
        "the whole URL is a secret, and hero only ever shows its scheme and host; "
        "config/roles.yaml refuses one with a password (https://user:password@host).",
        check=_webhook_url,
        local=True,
        written=False,
        example="https://hooks.example.com/hero",
        shown="none",
        repr=False,
        section=_ALERTS,
    )
    events: tuple[str, ...] = knob(
        "notify_events",
        NOTIFY_EVENTS,
        "The events that are sent: story_end, breaker_open.",
        check=_notify_events,
        section=_ALERTS,
    )
    timeout_s: float = knob(
        "notify_timeout_s",
        10.0,
        "How long the command may run, and how long the webhook is waited for, in seconds.",
        maximum=600,
        section=_ALERTS,
    )

    @property
    def enabled(self) -> bool:
        """Whether anything is sent at all."""
        return bool(self.command or self.webhook) and bool(self.events)


@dataclass(frozen=True)
class MemorySettings:
    """A repository's memory (roles.yaml's memory keys; see hero.memory)."""

    enabled: bool = knob(
        "memory_enabled",
        True,
        "Whether stories learn facts about the target repository and later stories are "
        "told them; false: nothing is stored and prompts are as without memory.",
        note="On by default: what is learned without a model costs nothing and stays in "
        "this home, and a memory with nothing in it changes no prompt. A story turns it off "
        "for itself with `memory: false`. (The key `memory:` itself is kept for the model "
        "role that distills what a story learned.)",
        section=_MEMORY,
    )
    max_facts: int = knob(
        "memory_max_facts",
        200,
        "Facts kept per repository: over it, the least kept go first (an outside story's "
        "before a person's, seen once before seen often, older before newer; a person's "
        "always-on conventions last).",
        section=_MEMORY,
    )
    max_bytes: int = knob(
        "memory_max_bytes",
        65536,
        "Bytes the memory file of a repository may take: over it, facts go as above until it fits.",
        minimum=1024,
        section=_MEMORY,
    )
    recall_tokens: int = knob(
        "memory_recall_tokens",
        800,
        "Tokens (estimated as the context window estimates) the facts told to a round's "
        "worker may take: the always-on conventions, then the facts most relevant to the "
        "story, while they fit; 0: none.",
        minimum=0,
        section=_MEMORY,
    )
    recap_tokens: int = knob(
        "memory_recap_tokens",
        400,
        "Tokens the recap of the last stories told to the planner and the reviewer may "
        "take, newest story first; 0: none.",
        minimum=0,
        section=_MEMORY,
    )
    recap_stories: int = knob(
        "memory_recap_stories",
        5,
        "The last stories on the repository whose recap (status, rounds, what changed, what "
        "failed) is kept; 0: none.",
        minimum=0,
        section=_MEMORY,
    )


@dataclass(frozen=True)
class GitHubLabels:
    """The labels hero puts on an issue while and after its story runs."""

    in_progress: str = knob("in_progress", "hero: in progress", "While its story runs.")
    done: str = knob("done", "hero: done", "Once its story passed.")
    failed: str = knob("failed", "hero: failed", "Once its story gave up or failed.")


@dataclass(frozen=True)
class GitHubSettings:
    """GitHub issues as stories (``github:`` in roles.yaml, or ``hero github watch``).

    Defined here so that config (a record) need not import hero.github (the outside world);
    ``hero.github.settings`` re-exports it."""

    repo: str = field(
        metadata=declare(
            "repo",
            "OWNER/NAME of the repository whose issues become stories.",
            required="expected the repository as OWNER/NAME (e.g. octo-org/app)",
            check=_github_repo,
            value="OWNER/NAME",
        )
    )
    label: str = field(
        metadata=declare(
            "label",
            "Open issues with this label are taken.",
            required="expected the label that marks issues for hero (e.g. hero)",
            value="hero",
        )
    )
    interval_s: float = knob("interval_s", 60.0, "Seconds between two looks at the issues.")
    allowed_associations: tuple[str, ...] = knob(
        "allowed_associations",
        ("OWNER", "MEMBER", "COLLABORATOR"),
        "Whose issues are taken, by the author's author_association on GitHub; by default, "
        "people with write access.",
        note=f"Any of {', '.join(GITHUB_ASSOCIATIONS)}.",
        check=_associations,
    )
    labels: GitHubLabels = knob(
        "labels",
        GitHubLabels(),
        "The labels hero sets on the issue as its story runs and ends.",
        type_doc="mapping: in_progress, done, failed",
        shown="the three below",
        custom=True,
    )
    remote: str = knob(
        "remote", "origin", "The target repository's git remote story branches are pushed to."
    )
    cancel_when_closed: bool = knob(
        "cancel_when_closed",
        True,
        "true = a story whose issue is closed, or no longer has the label, is cancelled "
        "(status cancelled): a queued one is moved to cancelled/, a running one stops before "
        "its next step, and nothing (no pull request, no comment) is said on the issue; "
        "false = it runs and is reported as if the issue were open.",
    )
    api_url: str = knob(
        "api_url",
        GITHUB_API_URL,
        "The REST API's base URL; GitHub Enterprise: https://HOST/api/v3.",
        env="GITHUB_API_URL",
        check=_api_url,
    )
    token: str | None = field(default=None, repr=False)
    """env GITHUB_TOKEN, else config.local.yaml github_token."""
    verify: tuple[str, ...] = knob(
        "verify", (), "verify of every story from an issue.", shown="[] (default_verify)"
    )
    scope: tuple[str, ...] = knob(
        "scope", (), "scope of every story from an issue.", shown="[] (no scope)"
    )


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
            section=_TARGET,
        )
    )
    target_base_ref: str | None = knob(
        "target_base_ref",
        None,
        "Branch, tag or commit that story branches start from; null = the repository's "
        "current HEAD.",
        note="A story can override it with `base_ref:` in its frontmatter.",
        section=_TARGET,
    )
    max_retries: int = knob(
        "max_retries",
        3,
        "Retry budget per story: how many Worker -> Verifier -> Reviewer rounds hero runs "
        "before giving up on it.",
        note="A story can override it with `max_retries:` in its frontmatter.",
        section=_ROUNDS,
    )
    max_parallel: int = knob(
        "max_parallel",
        2,
        "Stories worked on at the same time, each in its own worktree.",
        note="With engine: celery, stories in flight across all workers: the sum of their "
        "--concurrency.",
        written=False,  # shown commented out: the Celery steps add it (docs/celery.md)
        section=_ROUNDS,
    )
    verify_timeout_ms: int = knob(
        "verify_timeout_ms",
        120_000,
        "Time limit for each verify command, in milliseconds.",
        shown="120000 (2 minutes)",
        section=_ROUNDS,
    )
    default_verify: tuple[str, ...] = knob(
        "default_verify",
        (),
        "Checks run after each Worker round for stories without `verify:` in their frontmatter.",
        note="Shell commands run in the worktree; all must exit 0.",
        shown="[] (no checks)",
        example="default_verify:\n  - ruff check .\n  - python -m pytest -q",
        section=_ROUNDS,
    )
    min_free_disk_mb: int = knob(
        "min_free_disk_mb",
        1024,
        "Free space, in MiB, the hero home's file system must have: `hero doctor` fails "
        "below it, and `hero watch` and `hero worker` do not start.",
        note="Worktrees, traces and checks' output fill it; 0 = not checked.",
        minimum=0,
        section=_ROUNDS,
    )
    worker_limits: WorkerLimits = WorkerLimits()
    llm: LlmSettings = LlmSettings()
    roles: Mapping[str, RoleConfig] = field(default_factory=dict)
    #: Every provider file of the home by name: a story may choose any of them (hero.models).
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
    github: GitHubSettings | None = knob(
        "github",
        None,
        "GitHub issues as stories: this block turns them on.",
        type_doc="mapping (below)",
        shown="none",
        custom=True,
        written=False,
        section=_GITHUB,
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
        section=_GITHUB,
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
        section=_SERVE,
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
    worker: bool = False,
) -> Config:
    """Load and validate the home's configuration, resolving only the roles in ``roles``.

    ``env`` (default ``os.environ``) is where ``api_key_env`` variables are looked up.
    ``worker``: the home of a ``hero worker``, whose ``target_repo`` is not read (its clone
    of target_remote stands in: a home ``hero init`` made, its placeholder left, serves).
    """
    wanted = tuple(dict.fromkeys(roles))
    for name in wanted:
        if name not in ROLE_NAMES:
            raise ValueError(f"unknown role {name!r}; expected one of {', '.join(ROLE_NAMES)}")
    env = os.environ if env is None else env
    secrets: list[str] = []
    try:
        return _load(Path(home), wanted, env, secrets, worker=worker)
    except ConfigError as exc:
        # Defence in depth: no message may carry a key, whatever path produced it.
        key, message = exc.key, exc.message
        for secret in sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True):
            key = key.replace(secret, "***")
            message = message.replace(secret, "***")
        raise ConfigError(exc.file, key, message) from None


# ----------------------------------------------------------------------------- loading


def _load(
    home: Path,
    wanted: tuple[str, ...],
    env: Mapping[str, str],
    secrets: list[str],
    *,
    worker: bool = False,
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

    # Local keys first, so that any later error can be scrubbed of them.
    local = _read_mapping(home, LOCAL_FILE, secret=True) if (home / LOCAL_FILE).exists() else {}
    _check_keys(local, LOCAL_KEYS, LOCAL_FILE, "key")
    notices: list[str] = []
    local_keys = _local_keys(local, notices)
    secrets.extend(v for v in local_keys.values() if v)
    github_token = (env.get("GITHUB_TOKEN") or "").strip() or _local_github_token(local, notices)
    if github_token:
        secrets.append(github_token)
    serve_token = _serve_token(local, env, notices)
    if serve_token:
        secrets.append(serve_token)
    providers = _read_providers(home)  # read early too: their keys are scrubbed
    key_env_names = tuple(dict.fromkeys(p.api_key_env for p in providers.values() if p.api_key_env))
    for name in key_env_names:
        if env.get(name):
            secrets.append(env[name])
    for provider in providers.values():
        for header, value in provider.headers.items():
            if value and _SENSITIVE_HEADER_RE.search(header):
                secrets.append(value)

    for s in roles_settings():  # a secret given here is refused, saying where it belongs
        if s.secret and s.key in data:
            raise ConfigError(
                ROLES_FILE,
                s.key,
                f"is a secret; put it in {LOCAL_FILE} (`{s.key}: ...`) or in the environment "
                f"({s.env}) instead, so that roles.yaml holds no secret",
            )

    # a worker's stories run in its clone of target_remote, whatever target_repo says
    target_repo = home / "worker" / "repo" if worker else _target_repo(home, data)
    values = read_all(
        (s for s in roles_settings() if not (s.custom or s.secret)), data, _error_in(ROLES_FILE)
    )
    llm = _record(LlmSettings, values)
    if llm.backoff_max_s < llm.backoff_base_s:
        raise ConfigError(
            ROLES_FILE,
            "llm_backoff_max_s",
            f"expected a value >= llm_backoff_base_s ({llm.backoff_base_s:g}); "
            f"found {llm.backoff_max_s:g}",
        )
    if llm.outage_backoff_max_s < llm.outage_backoff_s:
        raise ConfigError(
            ROLES_FILE,
            "outage_backoff_max_s",
            f"expected a value >= outage_backoff_s ({llm.outage_backoff_s:g}); "
            f"found {llm.outage_backoff_max_s:g}",
        )

    role_blocks = {name: _role_block(data, name) for name in ROLE_NAMES}

    github = _github(data.get("github"), github_token, env)
    engine = _engine(values, local, env, secrets, notices)
    notify = _notify(data, values, local, secrets)

    loaded: dict[str, RoleConfig] = {}
    for name in wanted:
        block = role_blocks[name]
        if block is None:
            if name in OPTIONAL_ROLES:
                continue
            raise ConfigError(ROLES_FILE, name, _role_missing_message(name))
        loaded[name] = _resolve_role(name, block, providers, local_keys, env)

    config = Config(
        home=home,
        target_repo=target_repo,
        **_fields(Config, values),
        worker_limits=_record(WorkerLimits, values),
        llm=llm,
        roles=loaded,
        providers=providers,
        key_sources=(local_keys, {n: env[n] for n in key_env_names if env.get(n)}),
        # normalised once, here: a key with a blank around it is the same key
        secrets=tuple(dict.fromkeys(s.strip() for s in secrets if s and s.strip())),
        key_env_names=key_env_names,
        notices=tuple(dict.fromkeys(notices)),
        safety=_record(Safety, values, limits=_record(Limits, values)),
        budgets=_record(Budgets, values),
        housekeeping=_record(Housekeeping, values),
        context=_record(ContextSettings, values),
        engine=engine,
        notify=notify,
        memory=_record(MemorySettings, values),
        github=github,
        github_token=github_token,
        serve_token=serve_token,
        github_api_url=github.api_url if github is not None else _api_url_from(None, env),
    )
    for name in loaded:  # a cap that leaves no room for the conversation fails at start-up
        context_limits(config, name)
    return config


def _error_in(rel: str, prefix: str = "") -> Callable[[str, str], ConfigError]:
    """How read_all's errors are made for the file ``rel`` (keys under ``prefix``)."""
    return lambda key, message: ConfigError(rel, f"{prefix}{key}", message)


def _fields(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``cls`` that hold plain settings, from ``values`` (by key)."""
    return {s.attr: values[s.key] for s in settings_of(cls) if s.key in values and not s.custom}


def _record(cls: type[R], values: Mapping[str, Any], **more: Any) -> R:
    """The settings record ``cls`` from ``values`` (by key)."""
    return cls(**_fields(cls, values), **more)


def _engine(
    values: Mapping[str, Any],
    local: Mapping[Any, Any],
    env: Mapping[str, str],
    secrets: list[str],
    notices: list[str],
) -> EngineSettings:
    """The engine settings; the URLs' passwords join ``secrets``."""
    settings = _record(EngineSettings, values)
    urls: dict[str, str] = {}
    for s in settings_of(EngineSettings):
        if not (s.local and not s.secret):
            continue
        in_roles = values[s.key]
        if in_roles and _url_password(in_roles):
            raise ConfigError(
                ROLES_FILE,
                s.key,
                f"holds a password; put the URL in {LOCAL_FILE} (`{s.key}: ...`) or in the "
                f"environment ({s.env}) instead, so that roles.yaml holds no secret",
            )
        value = local.get(s.key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(LOCAL_FILE, s.key, f"expected a URL string; found {type_name(value)}")
        chosen = (env.get(s.env) or "").strip() or (value or "").strip() or in_roles
        if chosen and not re.match(r"^[a-z][a-z0-9+.-]*://", chosen):
            raise ConfigError(ROLES_FILE, s.key, "expected a URL like redis://host:6379/0")
        password = _url_password(chosen)
        if password:
            secrets.append(password)
        urls[s.attr] = chosen
    broker = urls["broker_url"]
    state = urls["state_url"] or (broker if broker.startswith(("redis://", "rediss://")) else "")
    secrets.extend(_url_credentials(settings.target_remote))
    engine_key = _engine_key(local, env, notices)
    if engine_key:
        secrets.append(engine_key)
    settings = replace(settings, broker_url=broker, state_url=state, key=engine_key)
    if settings.remote:
        if not broker:
            raise ConfigError(
                ROLES_FILE,
                "broker_url",
                "required with engine: celery; expected a URL like redis://host:6379/0 (here, in "
                f"{LOCAL_FILE} or in HERO_BROKER_URL)",
            )
        if not state.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(
                ROLES_FILE,
                "state_url",
                "required with engine: celery when broker_url is not a Redis URL; expected "
                "redis://host:6379/0 (hero keeps its leases and records there)",
            )
        if not settings.target_remote:
            raise ConfigError(
                ROLES_FILE,
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
                raise ConfigError(ROLES_FILE, name, problem)
    return settings


def _notify(
    data: Mapping[Any, Any], values: Mapping[str, Any], local: Mapping[Any, Any], secrets: list[str]
) -> NotifySettings:
    """The alert settings. notify_webhook: config.local.yaml's wins, and is a secret whole
    (a chat webhook's token is its path); roles.yaml's may not hold a password."""
    command = _notify_command(data.get("notify_command"))
    webhook = values["notify_webhook"]
    if webhook and _url_password(webhook):
        raise ConfigError(
            ROLES_FILE,
            "notify_webhook",
            f"holds a password; put the URL in {LOCAL_FILE} (`notify_webhook: ...`) instead, "
            "so that roles.yaml holds no secret",
        )
    in_local = local.get("notify_webhook")
    if in_local is not None:
        if not isinstance(in_local, str) or not in_local.strip():
            raise ConfigError(
                LOCAL_FILE,
                "notify_webhook",
                f"expected a URL string (quote it); found {type_name(in_local)}",
            )
        try:
            webhook = _webhook_url(in_local.strip())
        except ValueProblem as exc:
            raise ConfigError(LOCAL_FILE, "notify_webhook", exc.message) from None
        secrets.append(webhook)
    secrets.extend(_url_credentials(webhook))
    return replace(_record(NotifySettings, values), command=command, webhook=webhook)


def _notify_command(value: Any) -> str | tuple[str, ...]:
    """notify_command: a non-empty string (run by sh) or a non-empty list of strings whose
    first names the program; absent: ()."""
    if value is None:
        return ()
    if isinstance(value, str):
        if not value.strip():
            raise ConfigError(
                ROLES_FILE, "notify_command", "expected a command; found an empty string"
            )
        if "\0" in value:
            raise ConfigError(ROLES_FILE, "notify_command", "expected a command without NUL")
        return value
    if not isinstance(value, list) or not value:
        raise ConfigError(
            ROLES_FILE,
            "notify_command",
            "expected a command as a string (run by sh) or a non-empty list of strings "
            f"(the program and its arguments); found {describe(value)}",
        )
    for i, word in enumerate(value, 1):
        if not isinstance(word, str) or "\0" in word or (i == 1 and not word.strip()):
            raise ConfigError(
                ROLES_FILE,
                "notify_command",
                f"expected a list of strings, the first naming the program; item {i} is "
                f"{describe(word)}",
            )
    return tuple(value)


def _engine_key(local: Mapping[Any, Any], env: Mapping[str, str], notices: list[str]) -> str:
    """engine_key: env HERO_ENGINE_KEY, else config.local.yaml's; never roles.yaml's."""
    value = local.get("engine_key")
    if value is not None and not isinstance(value, str):
        raise ConfigError(
            LOCAL_FILE, "engine_key", f"expected a string (quote it); found {type_name(value)}"
        )
    if value and is_placeholder(value):
        if not (env.get("HERO_ENGINE_KEY") or "").strip():
            notices.append(_placeholder_notice("engine_key", "as if no key were set"))
        value = None
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
    values = read_all(github_settings(), block, _error_in(ROLES_FILE, "github."))
    labels = values["labels"]
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
    label_values = read_all(
        github_label_settings(), labels, _error_in(ROLES_FILE, "github.labels.")
    )
    return GitHubSettings(
        **{
            **_fields(GitHubSettings, values),
            "labels": _record(GitHubLabels, label_values),
            "api_url": _api_url_from(values["api_url"], env),
            "token": token,
        }
    )


def _api_url_from(block_url: str | None, env: Mapping[str, str]) -> str:
    """env GITHUB_API_URL, else the github block's api_url, else GitHub's."""
    chosen = (env.get("GITHUB_API_URL") or "").strip() or block_url or GITHUB_API_URL
    return chosen.rstrip("/")


def _local_github_token(local: Mapping[Any, Any], notices: list[str]) -> str | None:
    """config.local.yaml's ``github_token`` (None when the file or the key is absent, or
    it holds a placeholder)."""
    value = local.get("github_token")
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(
            LOCAL_FILE,
            "github_token",
            f"expected the GitHub token as a string (quote it); found {type_name(value)}",
        )
    if value.strip() and is_placeholder(value):
        notices.append(_placeholder_notice("github_token", "as if no token were set"))
        return None
    return value.strip() or None


def _serve_token(
    local: Mapping[Any, Any], env: Mapping[str, str], notices: list[str]
) -> str | None:
    """serve_token: env HERO_SERVE_TOKEN, else config.local.yaml's; never roles.yaml's.
    None when neither is set (or the file holds a placeholder)."""
    value = local.get("serve_token")
    if value is not None and not isinstance(value, str):
        raise ConfigError(
            LOCAL_FILE, "serve_token", f"expected a string (quote it); found {type_name(value)}"
        )
    if value and is_placeholder(value):
        if not (env.get("HERO_SERVE_TOKEN") or "").strip():
            notices.append(_placeholder_notice("serve_token", "as if no token were set"))
        value = None
    token = (env.get("HERO_SERVE_TOKEN") or "").strip() or (value or "").strip()
    if token and len(token) < SERVE_TOKEN_MIN_CHARS:
        raise ConfigError(
            LOCAL_FILE,
            "serve_token",
            f"expected at least {SERVE_TOKEN_MIN_CHARS} characters (here or in "
            f"HERO_SERVE_TOKEN); found {len(token)}. Make one with "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`",
        )
    return token or None


def _role_missing_message(name: str) -> str:
    return (
        f"role not configured; add a block like `{name}: {{provider: local, model: <model>}}` "
        "to config/roles.yaml (provider = a file name in config/providers/ without .yaml)"
    )


def _target_repo(home: Path, data: Mapping[Any, Any]) -> Path:
    raw = data.get("target_repo")
    if raw is None and data.get("engine") == "celery" and data.get("target_remote"):
        # a `hero worker` home: its repository is its clone of target_remote (`hero watch`
        # refuses a home whose target_repo is no repository)
        return home / "worker" / "repo"
    if raw is None:
        setting = next(s for s in roles_settings() if s.key == "target_repo")
        raise ConfigError(ROLES_FILE, "target_repo", f"required; {setting.required}; found nothing")
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
    provider = block.get("provider")
    if provider is None:
        raise ConfigError(
            ROLES_FILE, f"{name}.provider", f"required; {ROLE_SETTINGS[0].required}; found nothing"
        )
    if not isinstance(provider, str) or not _NAME_RE.match(provider):
        raise ConfigError(
            ROLES_FILE,
            f"{name}.provider",
            "expected a provider name (letters, digits, '.', '_', '-'), the file name of "
            f"config/providers/<name>.yaml; found {describe(provider)}",
        )
    plain = (s for s in ROLE_SETTINGS if not s.custom)
    return {"provider": provider, **read_all(plain, block, _error_in(ROLES_FILE, f"{name}."))}


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
    key, source = _api_key(provider, local_keys, env)
    return RoleConfig(
        role=name,
        provider=provider,
        model=block["model"] or provider.default_model,
        reasoning_effort=block["reasoning_effort"] or provider.default_reasoning_effort,
        api_key=key,
        max_output_tokens=block["max_output_tokens"],
        key_source=source,
    )


def provider_key(config: Config, provider: Provider) -> tuple[str | None, str]:
    """The API key of ``provider`` and where it came from, as a role on it would send it
    (``RoleConfig.api_key``, ``key_source``); ConfigError naming the provider file when its
    key is missing."""
    local_keys, env = config.key_sources
    return _api_key(provider, local_keys, env)


def _api_key(
    provider: Provider, local_keys: Mapping[str, str], env: Mapping[str, str]
) -> tuple[str | None, str]:
    """The provider's key and where it came from (see RoleConfig.key_source)."""
    local = local_keys.get(provider.name)
    if local:
        return local, f"{LOCAL_FILE}: keys.{provider.name}"
    if provider.api_key_env is None:
        return None, ""
    value = env.get(provider.api_key_env)
    if value:
        return value, f"${provider.api_key_env}"
    has = (
        f"holds only a placeholder in keys.{provider.name}"
        if provider.name in local_keys
        else f"has no keys.{provider.name}"
    )
    raise ConfigError(
        f"{PROVIDERS_DIR}/{provider.name}.yaml",
        "api_key_env",
        f"environment variable {provider.api_key_env} is not set and {LOCAL_FILE} {has}; "
        "set one of them (or remove api_key_env for a keyless endpoint)",
    )


def is_placeholder(value: str) -> bool:
    """Whether a secret's value is clearly a stand-in copied from an example, not a key:
    ``sk-your-key-here``, ``<your key>``, ``changeme``, ``sk-...``, ``xxxx``. A real key is
    random, so none of these shapes is mistaken for one."""
    return bool(_PLACEHOLDER_RE.search(value.strip()))


def _placeholder_notice(key: str, instead: str) -> str:
    """What loading says about a placeholder it set aside (never its value)."""
    return (
        f"{LOCAL_FILE}: {key}: holds a placeholder, not a key; ignored ({instead}). Put the "
        "real value there, or remove the line"
    )


def _local_keys(local: Mapping[Any, Any], notices: list[str]) -> dict[str, str]:
    """config.local.yaml's ``keys``: provider name -> API key. A placeholder is "" (so the
    provider's api_key_env is used, as if the line were not there) and noticed."""
    keys = local.get("keys")
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
        if value.strip() and is_placeholder(value):
            out[name] = ""  # as if absent, but a missing key's error can say why
            notices.append(
                _placeholder_notice(f"keys.{name}", "the provider's api_key_env is used")
            )
        elif value.strip():
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
    values = read_all(provider_settings(), data, _error_in(rel))
    name = values["name"]
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
    return Provider(
        **{
            **values,
            "name": stem,
            "api_key_env": _api_key_env(values["api_key_env"], rel, stem),
            "headers": _headers(values["headers"], rel),
        }
    )


def _api_key_env(value: Any, rel: str, stem: str) -> str | None:
    """A provider's ``api_key_env``: the NAME of a variable, never (echoed) a key."""
    if value is None:
        return None
    if not isinstance(value, str) or not _ENV_NAME_RE.match(value.strip()):
        raise ConfigError(
            rel,
            "api_key_env",
            "expected the NAME of an environment variable (like OPENAI_API_KEY); found "
            f"{type_name(value)} that is not a variable name. Put API keys "
            f"themselves in {LOCAL_FILE} under keys.{stem}",
        )
    if _looks_like_secret(value.strip()):
        raise ConfigError(
            rel,
            "api_key_env",
            "expected the NAME of an environment variable (like OPENAI_API_KEY); found a "
            f"value that looks like an API key. Put API keys in {LOCAL_FILE} under "
            f"keys.{stem}",
        )
    return value.strip()


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
