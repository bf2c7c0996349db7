"""A role's toolset: the hero tools and external tools its ``tools`` patterns select.

A role's ``tools`` (config/roles.yaml, narrowed by a story's ``tools:``) is a list of
patterns: a hero tool's name (``read_file``), ``<server>.<tool>`` for one tool of an
external (MCP) server, or ``<server>.*`` for every tool it offers. :func:`select_tools`
turns the patterns and the external tools on offer into a :class:`Toolset`: the schemas the
model is sent and the one way its calls are run. A call of a tool outside the set is an
"unknown tool" error for the model, never run, whatever hero or a server could do.

Unknown names are a configuration error naming the role and the nearest known name; a
pattern naming a server that is not configured is one too; a tool a configured server no
longer offers is a note (the server may change between runs), not a crash.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from hero.agent.tools import execute_tool
from hero.agent.tools.context import ToolContext, ToolOutcome
from hero.agent.tools.external import ExternalTool
from hero.agent.tools.schemas import HERO_TOOLS, TOOL_NAMES, tool_schemas
from hero.config.schema import ROLES_FILE
from hero.config.tools import ALL_OF_SERVER, check_patterns
from hero.runner import truncate_middle


@dataclass(frozen=True)
class Toolset:
    """The tools one role's model is given: hero's (by name) and external ones."""

    hero: tuple[str, ...] = TOOL_NAMES
    external: tuple[ExternalTool, ...] = ()
    #: what selecting said without failing: a listed tool its server no longer offers
    notes: tuple[str, ...] = ()
    _by_name: dict[str, ExternalTool] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_name.update({tool.name: tool for tool in self.external})

    def __bool__(self) -> bool:
        return bool(self.hero or self.external)

    def names(self) -> tuple[str, ...]:
        """Every name the model may call, hero's first."""
        return (*self.hero, *(tool.name for tool in self.external))

    def schemas(self) -> list[dict[str, Any]]:
        """The request's ``tools``: hero's in hero's order, then the external ones."""
        return [*tool_schemas(self.hero), *(tool.schema() for tool in self.external)]

    def execute(self, ctx: ToolContext, name: str, raw_arguments: str | None) -> ToolOutcome:
        """Run one call of a tool in the set; never raises. A name outside the set is an
        "unknown tool" error naming the tools there are. The result is cut to
        ``ctx.max_result_chars`` (the caller redacts and traces it)."""
        if name in self.hero:
            return execute_tool(ctx, name, raw_arguments)
        tool = self._by_name.get(name)
        if tool is None:
            available = ", ".join(self.names()) or "none"
            return ToolOutcome(f"unknown tool '{name}'; available tools: {available}", True)
        try:
            given: object = tool.call(raw_arguments)
        except Exception as exc:  # noqa: BLE001 - a call that raises anyway: the model is told
            given = ToolOutcome(f"tool '{name}' failed: {type(exc).__name__}: {exc}", True)
        if not isinstance(given, ToolOutcome) or not isinstance(given.content, str):
            return ToolOutcome(f"tool '{name}' gave no result hero can read", True)
        outcome = given
        if len(outcome.content) > ctx.max_result_chars:
            cut = truncate_middle(outcome.content, ctx.max_result_chars)
            return ToolOutcome(cut, outcome.is_error, outcome.command_s)
        return outcome


def select_tools(
    patterns: Sequence[str],
    external: Sequence[ExternalTool] = (),
    *,
    role: str = "worker",
    servers: Collection[str] | None = None,
    where: str = ROLES_FILE,
) -> Toolset:
    """The toolset ``patterns`` select from hero's tools and ``external``.

    ``servers``: the configured servers' names (None: those of ``external``). Raises
    ConfigError as hero.config.tools.check_patterns does (naming ``where`` and the role); a ``<server>.<tool>`` that server does not
    offer (now) is left out with a note."""
    offered: dict[str, list[ExternalTool]] = {}
    for tool in external:
        offered.setdefault(tool.server, []).append(tool)
    configured = set(offered) if servers is None else set(servers)
    check_patterns(patterns, role=role, servers=configured, where=where)
    hero = tuple(name for name in HERO_TOOLS if name in patterns)
    chosen: dict[str, ExternalTool] = {}
    notes: list[str] = []
    for pattern in patterns:
        server, dot, name = pattern.partition(".")
        if not dot:
            continue
        tools = offered.get(server, [])
        picked = [t for t in tools if name in (ALL_OF_SERVER, t.tool)]
        if not picked and name != ALL_OF_SERVER:
            notes.append(
                f"{role}: {pattern} is not offered by the server {server!r} (now); left out"
            )
        for tool in picked:
            chosen.setdefault(tool.name, tool)
    return Toolset(hero, tuple(chosen.values()), tuple(notes))
