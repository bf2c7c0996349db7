"""Tools given to the Worker model, and ``execute_tool``, the one way to run a tool call."""

# Layout: context (shared types), schemas (names and arguments: a contract), args (validation),
# paths (confinement to the worktree), text (shared text rules), files (read_file, write_file,
# edit_file, ls), search (grep, find), shell (bash), gitread (git_log, git_show); toolset (a
# role's selection of them and of external tools: the loop's one way to run a call). Modules import downwards only.

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from hero.agent.tools.args import parse_arguments
from hero.agent.tools.context import ToolContext, ToolError, ToolOutcome
from hero.agent.tools.files import tool_edit_file, tool_ls, tool_read_file, tool_write_file
from hero.agent.tools.gitread import tool_git_log, tool_git_show
from hero.agent.tools.paths import resolve_path, write_text_file
from hero.agent.tools.schemas import (
    HERO_TOOLS,
    READ_ONLY_TOOLS,
    SPEC_BY_NAME,
    TOOL_NAMES,
    tool_schemas,
)
from hero.agent.tools.scope import glob_to_regex
from hero.agent.tools.search import tool_find, tool_grep
from hero.agent.tools.shell import tool_bash
from hero.runner import truncate_middle

__all__ = [
    "HERO_TOOLS",
    "READ_ONLY_TOOLS",
    "TOOL_NAMES",
    "ToolContext",
    "ToolError",
    "ToolOutcome",
    "execute_tool",
    "glob_to_regex",
    "resolve_path",
    "tool_schemas",
    "write_text_file",
]

_HANDLERS: Mapping[str, Callable[..., ToolOutcome]] = MappingProxyType(
    {
        "bash": tool_bash,
        "read_file": tool_read_file,
        "write_file": tool_write_file,
        "edit_file": tool_edit_file,
        "grep": tool_grep,
        "find": tool_find,
        "ls": tool_ls,
        "git_log": tool_git_log,
        "git_show": tool_git_show,
    }
)


def execute_tool(ctx: ToolContext, name: str, raw_arguments: str | None) -> ToolOutcome:
    """Run one tool call. Never raises (other than KeyboardInterrupt / SystemExit): every
    problem becomes an ``is_error`` outcome whose text tells the model what to fix."""
    try:
        spec = SPEC_BY_NAME.get(name)
        if spec is None:
            return ToolOutcome(
                f"unknown tool '{name}'; available tools: {', '.join(HERO_TOOLS)}", is_error=True
            )
        args = parse_arguments(spec, raw_arguments)
        outcome = _HANDLERS[name](ctx, **args)
    except ToolError as exc:
        outcome = ToolOutcome(str(exc), is_error=True)
    except Exception as exc:  # noqa: BLE001 - the model must get a message, not a crash
        outcome = ToolOutcome(f"tool '{name}' failed: {type(exc).__name__}: {exc}", True)
    if len(outcome.content) > ctx.max_result_chars:
        return ToolOutcome(
            truncate_middle(outcome.content, ctx.max_result_chars),
            outcome.is_error,
            outcome.command_s,
        )
    return outcome
