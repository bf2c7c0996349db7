"""The contract given to the model: tool names, argument names and types, the OpenAI schemas."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from hero.agent.tools.files import READ_DEFAULT_LIMIT
from hero.agent.tools.gitread import LOG_DEFAULT
from hero.config.tools import READ_ONLY_TOOLS as READ_ONLY_TOOLS
from hero.config.tools import WORKER_TOOLS

OUTPUT_MODES = ("content", "files_with_matches", "count")  # grep's output_mode values


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # JSON schema type: string | integer | number | boolean
    required: bool = False
    description: str = ""
    enum: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    params: tuple[Param, ...]


_PATH = Param("path", "string", True)
SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "bash",
        "Run a shell command (sh -c) in the worktree root, no stdin. Returns exit code and output.",
        (
            Param("command", "string", True),
            Param("timeout_s", "number", description="seconds"),
        ),
    ),
    ToolSpec(
        "read_file",
        "Read a text file with line numbers. Paths are relative to the worktree root.",
        (
            _PATH,
            Param("offset", "integer", description="1-based first line"),
            Param("limit", "integer", description=f"max lines, default {READ_DEFAULT_LIMIT}"),
        ),
    ),
    ToolSpec(
        "write_file",
        "Create or overwrite a file (parent dirs created).",
        (_PATH, Param("content", "string", True)),
    ),
    ToolSpec(
        "edit_file",
        "Replace old_string with new_string in a file. old_string must match exactly once "
        "unless replace_all.",
        (
            _PATH,
            Param("old_string", "string", True),
            Param("new_string", "string", True),
            Param("replace_all", "boolean"),
        ),
    ),
    ToolSpec(
        "grep",
        "Regex search in files (respects .gitignore).",
        (
            Param("pattern", "string", True),
            Param("path", "string", description="file or dir"),
            Param("glob", "string", description="file filter, e.g. *.py"),
            Param("ignore_case", "boolean"),
            Param("output_mode", "string", enum=OUTPUT_MODES),
        ),
    ),
    ToolSpec(
        "find",
        "Find files by glob, e.g. **/*.py (*.md matches at any depth).",
        (Param("pattern", "string", True), Param("path", "string")),
    ),
    ToolSpec("ls", "List a directory.", (Param("path", "string"),)),
    ToolSpec(
        "git_log",
        "The repository's commit history from HEAD, newest first (read-only).",
        (
            Param("path", "string", description="only commits touching this file or dir"),
            Param("max_count", "integer", description=f"max commits, default {LOG_DEFAULT}"),
        ),
    ),
    ToolSpec(
        "git_show",
        "Show a commit (message and diff) or, as REV:PATH, a file as of a commit (read-only).",
        (
            Param("rev", "string", True, "a commit, branch or tag; or REV:PATH for a file"),
            Param("path", "string", description="only this file or dir of the commit's diff"),
        ),
    ),
)

#: hero's own tools, every one a role may list (hero.config.tools names them for the checks).
HERO_TOOLS: tuple[str, ...] = tuple(spec.name for spec in SPECS)
#: The worker's seven: its default list (hero.config.tools.ROLE_DEFAULTS).
TOOL_NAMES: tuple[str, ...] = WORKER_TOOLS
SPEC_BY_NAME: Mapping[str, ToolSpec] = MappingProxyType({s.name: s for s in SPECS})


def tool_schemas(names: Sequence[str] = TOOL_NAMES) -> list[dict[str, Any]]:
    """The OpenAI ``tools`` parameter for hero's tools ``names`` (default: the worker's
    seven), in hero's order (a fresh list each call)."""
    schemas: list[dict[str, Any]] = []
    for spec in SPECS:
        if spec.name not in names:
            continue
        props: dict[str, dict[str, Any]] = {}
        for p in spec.params:
            prop: dict[str, Any] = {"type": p.type}
            if p.enum:
                prop["enum"] = list(p.enum)
            if p.description:
                prop["description"] = p.description
            props[p.name] = prop
        schemas.append(
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": {
                        "type": "object",
                        "properties": props,
                        "required": [p.name for p in spec.params if p.required],
                    },
                },
            }
        )
    return schemas
