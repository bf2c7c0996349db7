"""Tools that are not hero's own: what an MCP server offers, as the agent loop sees it.

A role's tool list holds hero's tools by name and external ones by ``<server>.<tool>`` (or
``<server>.*``); the model sees an external tool as ``<server>__<tool>``. An external tool
is called with the model's raw JSON arguments and never raises: a server that dies, hangs or
answers garbage gives an ``is_error`` outcome that tells the model what went wrong. The
caller bounds, redacts and traces the outcome as it does for hero's own tools.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hero.agent.tools.context import ToolOutcome

#: Between a server's name and its tool's name in the name the model sees.
MODEL_NAME_SEPARATOR = "__"


def model_name(server: str, tool: str) -> str:
    """The name the model sees for ``tool`` of ``server``."""
    return f"{server}{MODEL_NAME_SEPARATOR}{tool}"


@dataclass(frozen=True)
class ExternalTool:
    server: str
    tool: str
    description: str
    #: The tool's JSON schema for its arguments (an object schema), as the server gave it.
    parameters: dict[str, Any]
    #: Runs the tool with the model's raw JSON arguments; never raises.
    call: Callable[[str | None], ToolOutcome]

    @property
    def name(self) -> str:
        """The name the model sees: ``<server>__<tool>``."""
        return model_name(self.server, self.tool)

    @property
    def qualified(self) -> str:
        """The name settings use: ``<server>.<tool>``."""
        return f"{self.server}.{self.tool}"

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }
