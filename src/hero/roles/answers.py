"""Reading a model's JSON answer: the object it meant, wherever it put it."""

from __future__ import annotations

import json
import re
from typing import Any

#: A fenced code block (```json ... ``` or any language tag, or none), its text captured.
FENCE = re.compile(r"```[A-Za-z]*[ \t]*\n(.*?)```", re.DOTALL)


def find_object(text: str, key: str) -> dict[str, Any] | None:
    """The first JSON object with ``key`` in ``text``: inside a code fence first, else with
    prose around it (every ``{`` is tried as a start); None when there is none."""
    candidates = [m.group(1) for m in FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for start in (i for i, ch in enumerate(candidate) if ch == "{"):
            try:
                obj, _ = decoder.raw_decode(candidate, start)
            except ValueError:
                continue
            if isinstance(obj, dict) and key in obj:
                return obj
    return None
