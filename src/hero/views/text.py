"""Text helpers the terminal views share (``hero status``, ``hero logs``)."""

from __future__ import annotations

#: Columns a view's line may take.
WIDTH = 100


def cut(text: str, width: int = WIDTH) -> str:
    """``text`` if it fits in ``width`` characters, else its start and ``...`` in that width."""
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."
