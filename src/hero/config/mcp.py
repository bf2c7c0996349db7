"""MCP servers as a home declares them: ``mcp_servers`` in config/roles.yaml, a mapping from a
server's name to ``{command: [argv...], env: {...}}`` (stdio) or ``{url: ...}`` (streamable
HTTP), with the secrets for each (env values, headers) from config.local.yaml's own
``mcp_servers`` merged over it. Checked here, once, with errors naming the file and the key;
what runs them is :mod:`hero.agent.mcp`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hero.config.schema import (
    ENV_NAME_RE,
    LOCAL_FILE,
    ROLES_FILE,
    SENSITIVE_HEADER_RE,
    ConfigError,
    UnknownKeyError,
    check_http_url,
)
from hero.yamlio import ValueProblem, describe, did_you_mean, type_name

#: A server's name: what its tools' names start with (``<server>__<tool>``, ``<server>.<tool>``).
SERVER_NAME_RE = re.compile(r"^[a-z0-9_-]{1,48}$")
#: A key of config.local.yaml an error shows (a word, as a name is; a token rarely is one).
_PLAIN_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,47}$")
#: HTTP header names.
_HEADER_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
#: The keys of one server in config/roles.yaml.
SERVER_KEYS = (
    "command",
    "env",
    "url",
    "headers",
    "network",
    "call_timeout_s",
    "start_timeout_s",
)
#: The keys of one server in config.local.yaml: its secrets.
LOCAL_SERVER_KEYS = ("env", "headers")
#: Seconds one tool call may take before it is an error and the server is stopped.
DEFAULT_CALL_TIMEOUT_S = 60.0
#: Seconds a server may take to start and list its tools.
DEFAULT_START_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 3600.0
#: What the settings page and the template say of a server's keys.
SERVER_KEYS_DOC = (
    "Each server: `command` (a list: the program and its arguments, run in the story's "
    "repository inside its sandbox) and `env` (a mapping of variables), or `url` (a "
    "streamable-HTTP endpoint) and `headers`; `network: true` lets a stdio server reach the "
    f"network (default false); `call_timeout_s` (default {DEFAULT_CALL_TIMEOUT_S:g}) and "
    f"`start_timeout_s` (default {DEFAULT_START_TIMEOUT_S:g}). Names: lower-case letters, "
    "digits, `-` and `_`, without `__`. See docs/tools.md."
)


@dataclass(frozen=True)
class McpServer:
    """One MCP server of the home."""

    name: str
    command: tuple[str, ...] = ()
    """A stdio server's program and arguments (empty for an HTTP server)."""
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """Variables set for a stdio server (config.local.yaml's over roles.yaml's)."""
    url: str = ""
    """An HTTP server's endpoint (empty for a stdio server)."""
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """Headers sent to an HTTP server."""
    network: bool = False
    """Whether a stdio server's sandbox has the network."""
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"


def read_mcp_servers(block: Any, local_block: Any, secrets: list[str]) -> tuple[McpServer, ...]:
    """The servers of roles.yaml's ``mcp_servers`` (``block``), config.local.yaml's
    (``local_block``) merged over them; every value from config.local.yaml, and every
    header value whose name looks sensitive, is added to ``secrets``."""
    if block is None and local_block is None:
        return ()
    servers = _mapping(block, ROLES_FILE, "mcp_servers", "server name -> {command: [...]}")
    local = _mapping(local_block, LOCAL_FILE, "mcp_servers", "server name -> {env: {...}}")
    for name in local:
        if name not in servers:
            extra = did_you_mean(str(name), [str(n) for n in servers])
            raise UnknownKeyError(
                LOCAL_FILE,
                f"mcp_servers.{_shown(name, LOCAL_FILE)}",
                f"no server of that name in {ROLES_FILE}'s mcp_servers{extra}; a server is "
                f"declared there (its command or url), and only its secrets here",
            )
    found = []
    for name, raw in servers.items():
        found.append(_server(name, raw, local.get(name), secrets))
    return tuple(found)


def _server(name: Any, raw: Any, local_raw: Any, secrets: list[str]) -> McpServer:
    if not isinstance(name, str) or not SERVER_NAME_RE.match(name) or "__" in name:
        raise ConfigError(
            ROLES_FILE,
            f"mcp_servers.{name}",
            "expected a server name of lower-case letters, digits, - and _ (at most 48, "
            f"without __: it separates the server from the tool); found {describe(name)}",
        )
    key = f"mcp_servers.{name}"
    data = _mapping(raw, ROLES_FILE, key, "{command: [program, args...]} or {url: ...}")
    _known(data, SERVER_KEYS, ROLES_FILE, key)
    local = _mapping(local_raw, LOCAL_FILE, key, "{env: {...}, headers: {...}}")
    _known(local, LOCAL_SERVER_KEYS, LOCAL_FILE, key)
    has_command, has_url = "command" in data, "url" in data
    if has_command == has_url:
        raise ConfigError(
            ROLES_FILE,
            key,
            "expected exactly one of command (a stdio server: [program, args...]) or url (a "
            f"streamable-HTTP server); found {'both' if has_command else 'neither'}",
        )
    wrong = ("headers",) if has_command else ("env", "network")
    for k in wrong:
        if k in data or k in local:
            what = "an HTTP server's" if k == "headers" else "a stdio server's"
            raise ConfigError(ROLES_FILE, f"{key}.{k}", f"is {what} key; this server has none")
    env = {**_strings(data.get("env"), ROLES_FILE, f"{key}.env", ENV_NAME_RE)}
    local_env = _strings(local.get("env"), LOCAL_FILE, f"{key}.env", ENV_NAME_RE)
    headers = _strings(data.get("headers"), ROLES_FILE, f"{key}.headers", _HEADER_RE)
    local_headers = _strings(local.get("headers"), LOCAL_FILE, f"{key}.headers", _HEADER_RE)
    secrets.extend(v for v in (*local_env.values(), *local_headers.values()) if v)
    for h in headers:
        if SENSITIVE_HEADER_RE.search(h):
            raise ConfigError(
                ROLES_FILE,
                f"{key}.headers.{h}",
                f"looks like a secret; put it in {LOCAL_FILE} (`mcp_servers: {{{name}: "
                f"{{headers: {{{h}: ...}}}}}}`) instead, so that roles.yaml holds no secret",
            )
    env.update(local_env)
    headers.update(local_headers)
    return McpServer(
        name=name,
        command=_command(data["command"], key) if has_command else (),
        env=tuple(env.items()),
        url=_url(data["url"], key) if has_url else "",
        headers=tuple(headers.items()),
        network=_flag(data.get("network", False), f"{key}.network"),
        call_timeout_s=_seconds(data, "call_timeout_s", DEFAULT_CALL_TIMEOUT_S, key),
        start_timeout_s=_seconds(data, "start_timeout_s", DEFAULT_START_TIMEOUT_S, key),
    )


def _mapping(value: Any, rel: str, key: str, like: str) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        found = type_name(value) if rel == LOCAL_FILE else describe(value)
        raise ConfigError(rel, key, f"expected a mapping like {like}; found {found}")
    return value


def _known(data: Mapping[Any, Any], known: tuple[str, ...], rel: str, key: str) -> None:
    for k in data:
        if k not in known:
            extra = did_you_mean(str(k), known)
            raise UnknownKeyError(
                rel,
                f"{key}.{_shown(k, rel)}",
                f"unknown key{extra}; known keys: {', '.join(known)}",
            )


def _shown(name: Any, rel: str) -> str:
    """A key as an error shows it: in config.local.yaml, one like no name may be a secret
    pasted as a key, and is not shown."""
    text = str(name)
    if rel == LOCAL_FILE and not _PLAIN_NAME_RE.match(text):
        return f"(a key of {len(text)} characters, not shown: it may be a secret)"
    return text if len(text) <= 80 else text[:80] + "..."


def _strings(value: Any, rel: str, key: str, name_re: re.Pattern[str]) -> dict[str, str]:
    """A mapping of names (matching ``name_re``) to strings; a value is never shown (it
    may be a secret)."""
    data = _mapping(value, rel, key, "{NAME: value}")
    out: dict[str, str] = {}
    for name, item in data.items():
        if not isinstance(name, str) or not name_re.match(name):
            raise ConfigError(rel, key, f"expected names like TOKEN; found {describe(name)}")
        if not isinstance(item, str) or "\0" in item:
            raise ConfigError(
                rel, f"{key}.{name}", f"expected a string (quote it); found {type_name(item)}"
            )
        out[name] = item
    return out


def _command(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(
            ROLES_FILE,
            f"{key}.command",
            f"expected a list: the program and its arguments; found {describe(value)}",
        )
    for i, word in enumerate(value, 1):
        if not isinstance(word, str) or "\0" in word or (i == 1 and not word.strip()):
            raise ConfigError(
                ROLES_FILE,
                f"{key}.command",
                f"expected a list of strings, the first naming the program; item {i} is "
                f"{describe(word)}",
            )
    return tuple(value)


def _url(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(ROLES_FILE, f"{key}.url", f"expected a URL; found {describe(value)}")
    try:
        url = check_http_url(value.strip())
    except ValueProblem as exc:
        raise ConfigError(ROLES_FILE, f"{key}.url", exc.message) from None
    if "@" in url.split("/", 3)[2]:
        raise ConfigError(
            ROLES_FILE,
            f"{key}.url",
            f"holds a user or password; put credentials in {LOCAL_FILE} as headers",
        )
    return url


def _flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(ROLES_FILE, key, f"expected true or false; found {describe(value)}")
    return value


def _seconds(data: Mapping[Any, Any], name: str, default: float, key: str) -> float:
    value = data.get(name, default)
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise ConfigError(
            ROLES_FILE,
            f"{key}.{name}",
            f"expected seconds, a number > 0 and <= {MAX_TIMEOUT_S:g}; found {describe(value)}",
        )
    return float(value)
