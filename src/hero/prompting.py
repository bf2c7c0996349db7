"""Prompt templates: files in the package, overridable per home (``<home>/prompts/<name>``)."""

from __future__ import annotations

import re
from pathlib import Path

_PACKAGE_PROMPTS = Path(__file__).parent / "prompts"
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def load_template(name: str, home: Path | None = None) -> str:
    if home is not None:
        override = home / "prompts" / name
        if override.is_file():
            return override.read_text(encoding="utf-8")
    return (_PACKAGE_PROMPTS / name).read_text(encoding="utf-8")


def render(template: str, **values: object) -> str:
    """Fill ``{{name}}`` placeholders; an unknown placeholder is left as written."""
    return _PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))), template)
