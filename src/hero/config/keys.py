"""Keys and tokens: where a provider's key comes from, a placeholder copied instead of a secret, the
GitHub, serve and engine tokens, and the credentials in a URL. No function here ever puts a key
in an error's text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hero.config.home import Config
from hero.config.providers import Provider
from hero.config.schema import (
    ENGINE_KEY_HOWTO,
    ENGINE_KEY_MIN_CHARS,
    ENV_NAME_RE,
    LOCAL_FILE,
    NAME_RE,
    PLACEHOLDER_RE,
    PROVIDERS_DIR,
    SERVE_TOKEN_MIN_CHARS,
    ConfigError,
)
from hero.yamlio import (
    type_name,
)


def read_engine_key(local: Mapping[Any, Any], env: Mapping[str, str], notices: list[str]) -> str:
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


def tls_problem(url: str) -> str | None:
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


def url_credentials(url: str) -> list[str]:
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


def url_password(url: str) -> str:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).password or ""
    except ValueError:
        return ""


def read_local_github_token(local: Mapping[Any, Any], notices: list[str]) -> str | None:
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


def read_serve_token(
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


def provider_key(config: Config, provider: Provider) -> tuple[str | None, str]:
    """The API key of ``provider`` and where it came from, as a role on it would send it
    (``RoleConfig.api_key``, ``key_source``); ConfigError naming the provider file when its
    key is missing."""
    local_keys, env = config.key_sources
    return resolve_api_key(provider, local_keys, env)


def resolve_api_key(
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
    return bool(PLACEHOLDER_RE.search(value.strip()))


def _placeholder_notice(key: str, instead: str) -> str:
    """What loading says about a placeholder it set aside (never its value)."""
    return (
        f"{LOCAL_FILE}: {key}: holds a placeholder, not a key; ignored ({instead}). Put the "
        "real value there, or remove the line"
    )


def read_local_keys(local: Mapping[Any, Any], notices: list[str]) -> dict[str, str]:
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
        if not isinstance(name, str) or not NAME_RE.match(name):
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


def read_api_key_env(value: Any, rel: str, stem: str) -> str | None:
    """A provider's ``api_key_env``: the NAME of a variable, never (echoed) a key."""
    if value is None:
        return None
    if not isinstance(value, str) or not ENV_NAME_RE.match(value.strip()):
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


def _looks_like_secret(name: str) -> bool:
    has_lower = any(c.islower() for c in name)
    has_upper = any(c.isupper() for c in name)
    has_digit = any(c.isdigit() for c in name)
    return len(name) >= 20 and has_lower and has_digit and (has_upper or "_" not in name)
