"""Which tools each role has: the names a role's ``tools`` may list, its default, the checks.

A role's ``tools`` (config/roles.yaml) is a list of patterns: one of hero's tool names
(:data:`HERO_TOOLS`), ``<server>.<tool>`` for one tool of a configured MCP server, or
``<server>.*`` for all of them. A story's ``tools:`` may narrow its roles' lists, never
widen them (:func:`narrow`). The agent turns the patterns into the tools the model is
given (hero.agent.tools.toolset.select_tools); the tools themselves live in hero.agent.tools.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from hero.config.schema import ROLES_FILE, ConfigError

#: Every tool of hero's own (hero.agent.tools.schemas declares each; a test holds them equal).
HERO_TOOLS: tuple[str, ...] = (
    "bash",
    "read_file",
    "write_file",
    "edit_file",
    "grep",
    "find",
    "ls",
    "git_log",
    "git_show",
)
#: The worker's seven: its default (with every configured server's tools).
WORKER_TOOLS: tuple[str, ...] = HERO_TOOLS[:7]
#: The tools that change nothing: the reviewer's and the planner's default, and the only
#: hero tools those roles may list.
READ_ONLY_TOOLS: tuple[str, ...] = ("read_file", "ls", "grep", "find", "git_log", "git_show")
#: The roles that have tools, and each one's default when roles.yaml gives it none.
ROLE_DEFAULTS: dict[str, tuple[str, ...]] = {
    "worker": WORKER_TOOLS,
    "reviewer": READ_ONLY_TOOLS,
    "planner": READ_ONLY_TOOLS,
}
#: The roles that only look: none of their hero tools writes or runs a command.
LOOKING_ROLES = frozenset({"reviewer", "planner"})
#: ``<server>.*``: every tool the server offers.
ALL_OF_SERVER = "*"
DOC = (
    "The tools the role's model is given: hero's tool names, <server>.<tool> or "
    "<server>.* of an MCP server; [] = none (the reviewer then answers in one call, from "
    "the diff)."
)
SHOWN = (
    "the worker: its seven and every tool of every MCP server; the reviewer and the planner: "
    "read_file, ls, grep, find, git_log, git_show"
)


def default_patterns(role: str, servers: Iterable[str] = ()) -> tuple[str, ...]:
    """``role``'s tools when none are configured: the worker's seven plus ``<server>.*``
    for every configured server; the reviewer's and the planner's read-only set."""
    base = ROLE_DEFAULTS.get(role, ())
    if role == "worker":
        return (*base, *(f"{server}.{ALL_OF_SERVER}" for server in servers))
    return base


def role_patterns(
    configured: tuple[str, ...] | None, role: str, servers: Iterable[str]
) -> tuple[str, ...]:
    """The role's patterns: as configured, else its default."""
    return default_patterns(role, servers) if configured is None else configured


def read_patterns(
    raw: Any, *, role: str, servers: Collection[str], where: str = ROLES_FILE
) -> tuple[str, ...] | None:
    """A role block's ``tools`` value checked (:func:`check_patterns`); None when absent."""
    if raw is None:
        return None
    key = f"{role}.tools"
    if role not in ROLE_DEFAULTS:
        raise ConfigError(where, key, f"the {role} role uses no tools; remove the key")
    if not isinstance(raw, list) or not all(isinstance(p, str) and p.strip() for p in raw):
        raise ConfigError(
            where, key, f"expected a list of tool names, e.g. [read_file, grep]; found {raw!r}"
        )
    patterns = tuple(dict.fromkeys(p.strip() for p in raw))
    problem = pattern_problem(patterns, role=role, servers=servers)
    if problem:
        raise ConfigError(where, key, problem)
    return patterns


def check_patterns(
    patterns: Sequence[str], *, role: str, servers: Collection[str], where: str = ROLES_FILE
) -> None:
    """ConfigError (file ``where``, key ``<role>.tools``) for the first pattern that names
    no hero tool and no configured server, or a tool that writes for a looking role."""
    problem = pattern_problem(patterns, role=role, servers=servers)
    if problem:
        raise ConfigError(where, f"{role}.tools", problem)


def pattern_problem(patterns: Sequence[str], *, role: str, servers: Collection[str]) -> str:
    """What is wrong with the first bad pattern, "" when none is."""
    for pattern in patterns:
        server, dot, tool = pattern.partition(".")
        if dot:
            if not server or not tool or "." in tool:
                return f"{pattern!r} is no tool pattern; expected <server>.<tool> or <server>.*"
            if server not in servers:
                known = ", ".join(sorted(servers)) or "none configured (mcp_servers)"
                return (
                    f"{pattern!r} names the MCP server {server!r}, which is not configured"
                    f"{nearest(server, servers)}; servers: {known}"
                )
            continue
        if pattern not in HERO_TOOLS:
            return (
                f"unknown tool {pattern!r}{nearest(pattern, HERO_TOOLS)}; hero's tools: "
                f"{', '.join(HERO_TOOLS)}, or <server>.<tool> / <server>.* of an MCP server"
            )
        if role in LOOKING_ROLES and pattern not in READ_ONLY_TOOLS:
            return (
                f"{pattern!r} changes the repository or runs commands, and the {role} only "
                f"looks: its hero tools are among {', '.join(READ_ONLY_TOOLS)}"
            )
    return ""


def narrow(role: str, has: Sequence[str], wanted: Sequence[str]) -> str:
    """What in ``wanted`` (a story's list for ``role``) the role does not have (``has``,
    its patterns), "" when ``wanted`` only narrows: a hero tool must be in ``has``;
    ``<server>.<tool>`` needs it or ``<server>.*`` there; ``<server>.*`` needs itself."""
    for pattern in wanted:
        server, dot, tool = pattern.partition(".")
        if pattern in has or (dot and tool != ALL_OF_SERVER and f"{server}.*" in has):
            continue
        return (
            f"{pattern!r} is not among the {role}'s tools{nearest(pattern, has)} (a story "
            f"can only narrow them); the {role} has: {', '.join(has) or 'none'}"
        )
    return ""


def nearest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, "" when none is close."""
    import difflib  # a mistyped name only: off hero's start

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def configured_servers(config: object) -> tuple[str, ...]:
    """The names of the MCP servers ``config`` declares (``mcp_servers``), in order."""
    servers = getattr(config, "mcp_servers", None) or ()
    return tuple(str(getattr(server, "name", server)) for server in servers)
