"""Reading a hero home's configuration: config/roles.yaml, the provider files and
config.local.yaml, checked against the settings' declaration, into one :class:`~hero.config.home.Config`
(:func:`load_config`). Every problem raises :class:`~hero.config.schema.ConfigError` naming the
file and the key; no error text ever holds a key."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from hero.config.home import (
    GITHUB_KEYS,
    GITHUB_LABEL_KEYS,
    LOCAL_KEYS,
    PROVIDER_KEYS,
    ROLE_KEYS,
    ROLES_FILE_KEYS,
    Config,
    context_limits,
    github_label_settings,
    github_settings,
    provider_settings,
    roles_settings,
)
from hero.config.keys import (
    read_api_key_env,
    read_engine_key,
    read_local_github_token,
    read_local_keys,
    read_serve_token,
    resolve_api_key,
    tls_problem,
    url_credentials,
    url_password,
)
from hero.config.mcp import read_mcp_servers
from hero.config.project import ProjectSettings
from hero.config.providers import ROLE_SETTINGS, Provider, RoleConfig
from hero.config.schema import (
    ENGINE_KEY_HOWTO,
    GITHUB_API_URL,
    LOCAL_FILE,
    MAX_CONFIG_BYTES,
    NAME_RE,
    OPTIONAL_ROLES,
    PROVIDERS_DIR,
    ROLE_NAMES,
    ROLES_FILE,
    SENSITIVE_HEADER_RE,
    TARGET_REPO_PLACEHOLDER,
    ConfigError,
    UnknownKeyError,
    check_webhook_url,
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
from hero.config.settings import read_all, settings_of
from hero.config.tools import read_patterns
from hero.sandbox.limits import Limits
from hero.yamlio import (
    ValueProblem,
    decode_text,
    describe,
    did_you_mean,
    load_yaml,
    read_file,
    type_name,
)

R = TypeVar("R")


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
        raise type(exc)(exc.file, key, message) from None  # UnknownKeyError stays one


def worker_home(home: Path) -> bool:
    """Whether ``home`` is a `hero worker`'s, as docs/celery.md makes one: ``engine:
    celery`` with a target_remote in config/roles.yaml, and no target_repo of its own
    (none, or `hero init`'s placeholder naming no folder). False when the file cannot be
    read: loading it says why."""
    home = Path(home).expanduser().resolve()
    try:
        data = _read_mapping(home, ROLES_FILE)
    except ConfigError:
        return False
    if data.get("engine") != "celery" or not data.get("target_remote"):
        return False
    raw = data.get("target_repo")
    if raw is None:
        return True
    return raw == TARGET_REPO_PLACEHOLDER and not (home / raw).exists()


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
    local_keys = read_local_keys(local, notices)
    secrets.extend(v for v in local_keys.values() if v)
    github_token = (env.get("GITHUB_TOKEN") or "").strip() or read_local_github_token(
        local, notices
    )
    if github_token:
        secrets.append(github_token)
    serve_token = read_serve_token(local, env, notices)
    if serve_token:
        secrets.append(serve_token)
    providers = _read_providers(home)  # read early too: their keys are scrubbed
    key_env_names = tuple(dict.fromkeys(p.api_key_env for p in providers.values() if p.api_key_env))
    for name in key_env_names:
        if env.get(name):
            secrets.append(env[name])
    for provider in providers.values():
        for header, value in provider.headers.items():
            if value and SENSITIVE_HEADER_RE.search(header):
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
    mcp_servers = read_mcp_servers(data.get("mcp_servers"), local.get("mcp_servers"), secrets)
    servers = tuple(server.name for server in mcp_servers)
    for name, block in role_blocks.items():
        if block is not None:
            block["tools"] = read_patterns(data[name].get("tools"), role=name, servers=servers)

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
        project=_record(ProjectSettings, values),
        github=github,
        github_token=github_token,
        serve_token=serve_token,
        github_api_url=github.api_url if github is not None else _api_url_from(None, env),
        mcp_servers=mcp_servers,
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
        if in_roles and url_password(in_roles):
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
        password = url_password(chosen)
        if password:
            secrets.append(password)
        urls[s.attr] = chosen
    broker = urls["broker_url"]
    state = urls["state_url"] or (broker if broker.startswith(("redis://", "rediss://")) else "")
    secrets.extend(url_credentials(settings.target_remote))
    engine_key = read_engine_key(local, env, notices)
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
            problem = tls_problem(url)
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
    if webhook and url_password(webhook):
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
            webhook = check_webhook_url(in_local.strip())
        except ValueProblem as exc:
            raise ConfigError(LOCAL_FILE, "notify_webhook", exc.message) from None
        secrets.append(webhook)
    secrets.extend(url_credentials(webhook))
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
    if not isinstance(provider, str) or not NAME_RE.match(provider):
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
    key, source = resolve_api_key(provider, local_keys, env)
    return RoleConfig(
        role=name,
        provider=provider,
        model=block["model"] or provider.default_model,
        reasoning_effort=block["reasoning_effort"] or provider.default_reasoning_effort,
        api_key=key,
        max_output_tokens=block["max_output_tokens"],
        key_source=source,
        tools=block.get("tools"),
    )


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
    if not NAME_RE.match(stem):
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
            "api_key_env": read_api_key_env(values["api_key_env"], rel, stem),
            "headers": _headers(values["headers"], rel),
        }
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
    """UnknownKeyError for the first key of ``data`` not in ``known`` (the keys the
    declarations give: a setting declared on a record is known here without a list to
    edit), naming the file, the key with its path (``github.labels.foo``) and the nearest
    known key and, with none near or few known, every known key; a key of another file
    says which."""
    for key in data:
        if key in known:
            continue
        name = str(key)
        elsewhere = "" if prefix else _belongs_elsewhere(name, rel)
        hint = did_you_mean(name, known)
        listed = f"; known keys: {', '.join(known)}"
        # a small set is listed beside the nearest: "did you mean" may guess wrong
        extra = elsewhere or (hint + listed if hint and len(known) <= 8 else hint) or listed
        if name in ("api_key", "key", "keys", "apikey", "token"):
            extra += f"; API keys belong in {LOCAL_FILE} under keys.<provider name>"
        if rel == LOCAL_FILE and not (elsewhere or hint or _PLAIN_NAME_RE.match(name)):
            # config.local.yaml holds secrets: a key like no name may be one pasted as a key
            shown = f"(a key of {len(name)} characters, not shown: it may be a secret)"
        else:
            shown = name if len(name) <= _MAX_KEY_SHOWN else name[:_MAX_KEY_SHOWN] + "..."
        raise UnknownKeyError(rel, f"{prefix}{shown}", f"unknown {what}{extra}")


#: A key config.local.yaml shows when it knows it not: a word, like a setting's name (a
#: random token nearly always holds a digit or a capital).
_PLAIN_NAME_RE = re.compile(r"^[a-z][a-z_]{0,39}$")
#: The longest unknown key shown whole (YAML allows keys of 1024 characters).
_MAX_KEY_SHOWN = 80


def _belongs_elsewhere(name: str, rel: str) -> str:
    """``; it is a key of <file>`` when ``name`` is a top-level key of another config file."""
    here = f"{PROVIDERS_DIR}/<name>.yaml" if rel.startswith(PROVIDERS_DIR) else rel
    files = (
        (ROLES_FILE, ROLES_FILE_KEYS),
        (LOCAL_FILE, LOCAL_KEYS),
        (f"{PROVIDERS_DIR}/<name>.yaml", PROVIDER_KEYS),
    )
    for other, keys in files:
        if other != here and name in keys:
            return f"; it is a key of {other}: put it there"
    return ""
