"""Argument validation: a call's JSON checked against its spec, with errors the model can fix."""

from __future__ import annotations

import json
from collections.abc import Mapping

from hero.agent.tools.context import ToolError
from hero.agent.tools.schemas import ToolSpec


def _shape(spec: ToolSpec) -> str:
    parts = [f'"{p.name}"{"" if p.required else "?"}: {p.type}' for p in spec.params]
    return "{" + ", ".join(parts) + "}"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _coerce(value: object, type_: str) -> tuple[bool, object]:
    """(ok, value) for one argument against its JSON schema type."""
    if type_ == "string":
        return isinstance(value, str), value
    if type_ == "boolean":
        return isinstance(value, bool), value
    if isinstance(value, bool):
        return False, value
    if type_ == "integer":
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        return False, value
    if type_ == "number":
        return isinstance(value, int | float), value
    return False, value


#: How much of arguments that are no JSON a tool error quotes back to the model.
_ECHO_CHARS = 200


def parse_arguments(spec: ToolSpec, raw: str | Mapping[str, object] | None) -> dict[str, object]:
    """The keyword arguments for ``spec``'s handler; ToolError naming the expected shape."""
    expected = f"expected a JSON object {_shape(spec)}"
    if isinstance(raw, Mapping):  # already parsed (lenient for callers)
        data: object = dict(raw)
    elif raw is None or not raw.strip():
        data = {}
    else:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            # the history shows such a call with {} for its arguments (hero.llm.client's
            # assistant_message): say here what the model sent
            start = raw[:_ECHO_CHARS] + ("..." if len(raw) > _ECHO_CHARS else "")
            raise ToolError(
                f"tool '{spec.name}': arguments are not valid JSON ({exc}); received "
                f"{len(raw)} characters: {start!r}; {expected}"
            ) from None
    if not isinstance(data, dict):
        raise ToolError(
            f"tool '{spec.name}': arguments must be a JSON object, got {_json_type(data)}; "
            f"{expected}"
        )
    known = {p.name for p in spec.params}
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        names = ", ".join(f"'{k}'" for k in unknown)
        raise ToolError(f"tool '{spec.name}': unknown argument {names}; {expected}")
    args: dict[str, object] = {}
    for p in spec.params:
        value = data.get(p.name)
        if value is None:
            if p.required:
                raise ToolError(
                    f"tool '{spec.name}': missing required argument '{p.name}'; {expected}"
                )
            continue
        ok, value = _coerce(value, p.type)
        if not ok:
            raise ToolError(
                f"tool '{spec.name}': argument '{p.name}' must be {p.type}, got "
                f"{_json_type(value)}; {expected}"
            )
        if p.enum and value not in p.enum:
            raise ToolError(
                f"tool '{spec.name}': argument '{p.name}' must be one of "
                f"{', '.join(p.enum)}; got {value!r}"
            )
        args[p.name] = value
    return args
