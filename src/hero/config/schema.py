"""The shape of a hero home's configuration: its files, the roles, :class:`ConfigError`, the checks a
value passes beyond its type, and the sections of config/roles.yaml.

Layout (relative to the home directory)::

    config/roles.yaml              roles (worker, reviewer, planner, memory) and knobs; target_repo
    config/providers/<name>.yaml   one OpenAI-compatible endpoint per file
    config.local.yaml              optional, git-ignored: keys: {<provider name>: <key>},
                                   github_token: <token>

Every problem raises :class:`ConfigError`, whose text is one line
``<file>: <key>: <message>`` with the file shown relative to the home. Error text never
contains an API key value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from hero.config.settings import Section
from hero.errors import ConfigurationError
from hero.yamlio import (
    ValueProblem,
    describe,
    did_you_mean,
)

ROLE_NAMES = ("worker", "reviewer", "planner", "memory")
#: Roles that are off unless config/roles.yaml has their block: asked for and absent, they
#: are simply not loaded (``memory``: the model that distills a story's facts, docs/memory.md).
OPTIONAL_ROLES = frozenset({"memory"})
ROLES_FILE = "config/roles.yaml"
#: The target_repo `hero init` writes without --target-repo, for the user to change (a
#: `hero worker`'s home may keep it: the worker's clone of target_remote stands in).
TARGET_REPO_PLACEHOLDER = "../my-project"
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
#: What `hero watch` does with stories whose scopes overlap (hero.story.overlap).
OVERLAP_MODES = ("parallel", "serial")
#: How a story branch is brought up to date with its target before it reports (hero.run.keepup).
KEEP_UP_MODES = ("merge", "rebase", "off")
#: Whether the sandbox's limits use the cgroup controllers hero can write (``sandbox_cgroups``).
SANDBOX_CGROUPS = ("auto", "off")
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

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL_RE = re.compile(r"^https?://[^\s/]+")
SENSITIVE_HEADER_RE = re.compile(r"auth|key|token|secret|cookie", re.IGNORECASE)
#: A value copied from an example instead of a secret: ``<...>``, ``your-...``, ``changeme``,
#: ``replace-me``, ``placeholder``, or a prefix with only ``...``/``xxx``/``***`` after it.
PLACEHOLDER_RE = re.compile(
    r"^<.*>$|(?:^|[^a-z])your[-_ ]|change[-_ ]?me|replace[-_ ]?me|placeholder"
    r"|^(?:[a-z]+[-_])*(?:\.{3,}|x{3,}|\*{3,})$",
    re.IGNORECASE,
)


class ConfigError(ConfigurationError):
    """A configuration problem; ``str(e) == f"{file}: {key}: {message}"``, never a secret."""

    def __init__(self, file: str, key: str, message: str) -> None:
        self.file = str(file)
        self.key = str(key)
        self.message = " ".join(str(message).split())
        super().__init__(f"{self.file}: {self.key}: {self.message}")


class UnknownKeyError(ConfigError):
    """A key no declaration knows, in any config file (a typo, a setting of another file, a
    setting of another hero version): every command that reads the configuration stops on
    it, even one that goes on without a configuration it cannot read (``hero status``)."""


# ----------------------------------------------------------------------------- checks
# What the declarations below check beyond a value's type: each takes the typed value,
# returns it (perhaps normalised) or raises ValueProblem; the reader names file and key.


def check_http_url(url: str) -> str:
    if not _URL_RE.match(url):
        raise ValueProblem(f"expected an http:// or https:// URL; found {describe(url)}")
    return url.rstrip("/")


def check_api_url(url: str) -> str:
    if not _URL_RE.match(url):
        raise ValueProblem(f"expected an http(s):// URL; found {describe(url)}")
    return url


def check_env_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """Names of environment variables (``pass_env``): never hero's own ``HERO_*``."""
    for name in names:
        if not ENV_NAME_RE.match(name):
            raise ValueProblem(f"{name!r} is not the name of an environment variable")
        if name.startswith("HERO_"):
            raise ValueProblem(f"{name} is hero's own: hero never passes a HERO_* variable on")
    return tuple(dict.fromkeys(names))


def check_rules(rules: tuple[str, ...]) -> tuple[str, ...]:
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


def check_toolchain_dirs(dirs: tuple[str, ...]) -> tuple[str, ...]:
    """``toolchain_dirs``: absolute directories, or ``~/...`` (the user's home), never a
    home itself nor ``/`` (all of it would be shown); given as absolute paths."""
    import os

    found = []
    for raw in dirs:
        path = os.path.expanduser(raw) if raw.startswith("~/") else raw
        if not os.path.isabs(path):
            raise ValueProblem(f"{raw!r} is not an absolute path (nor ~/...)")
        path = os.path.normpath(path)
        if path in ("/", "/root", "/home", os.path.expanduser("~")):
            raise ValueProblem(f"{raw!r} is a whole home (or all of /): name a toolchain in it")
        found.append(path)
    return tuple(dict.fromkeys(found))


def with_builtin(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """``protected_files`` adds to the built-in list, never replaces it."""
    return tuple(dict.fromkeys((*DEFAULT_PROTECTED, *patterns)))


def check_queue_name(queue: str) -> str:
    if not NAME_RE.match(queue):
        raise ValueProblem(f"expected letters, digits, '.', '_' or '-'; found {queue!r}")
    return queue


def check_github_repo(repo: str) -> str:
    if not GITHUB_REPO_RE.match(repo):
        raise ValueProblem(
            f"expected the repository as OWNER/NAME (e.g. octo-org/app); found {describe(repo)}"
        )
    return repo


def check_associations(names: tuple[str, ...]) -> tuple[str, ...]:
    upper = tuple(name.upper() for name in names)
    for name in upper:
        if name not in GITHUB_ASSOCIATIONS:
            raise ValueProblem(
                f"expected names from {', '.join(GITHUB_ASSOCIATIONS)}"
                f"{did_you_mean(name, GITHUB_ASSOCIATIONS)}; found {describe(name)}"
            )
    return upper


def check_webhook_url(url: str) -> str:
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


def check_notify_events(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if name not in NOTIFY_EVENTS:
            raise ValueProblem(
                f"expected events from {', '.join(NOTIFY_EVENTS)}"
                f"{did_you_mean(name, NOTIFY_EVENTS)}; found {describe(name)}"
            )
    return tuple(dict.fromkeys(names))


def choices_of(
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
    Section(
        "project environment",
        "How the target repository's environment is made (its dependencies installed) before "
        "a story's commands run, and what hero's own commits leave out (docs/environment.md). "
        "Without setup, commands run with this machine's tools.",
    ),
    Section(
        "MCP servers",
        "Model Context Protocol servers whose tools the Worker may call (docs/tools.md): a "
        "stdio server runs inside the story's sandbox, with its network rules; an HTTP server "
        "is reached by hero itself at its URL alone. The model sees a tool as "
        "<server>__<tool>. Secrets for a server (an env value, a header) go in "
        "config.local.yaml under the same mcp_servers key, never here.",
    ),
)
TARGET_SECTION, ROUNDS_SECTION, SANDBOX_SECTION, LIMITS_SECTION, POLICY_SECTION = (
    s.title for s in ROLES_SECTIONS[:5]
)
BUDGETS_SECTION, GITHUB_SECTION, HOUSEKEEPING_SECTION, WORKER_SECTION, REQUESTS_SECTION = (
    s.title for s in ROLES_SECTIONS[5:10]
)
CONTEXT_SECTION, ENGINE_SECTION = (s.title for s in ROLES_SECTIONS[10:12])
ALERTS_SECTION = ROLES_SECTIONS[12].title
SERVE_SECTION = ROLES_SECTIONS[13].title
MEMORY_SECTION = ROLES_SECTIONS[14].title
PROJECT_SECTION = ROLES_SECTIONS[15].title
MCP_SECTION = ROLES_SECTIONS[16].title
#: The shortest serve_token hero accepts (``secrets.token_urlsafe(32)`` makes 43 characters).
SERVE_TOKEN_MIN_CHARS = 24
