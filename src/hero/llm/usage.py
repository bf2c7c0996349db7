"""What model calls spent: one record for a call, a worker's turn, a run and a story.

The same ``Usage`` is what :class:`hero.llm.client.Completion` reports for one call, what the agent
loop adds up for a round's worker (``AgentResult.usage``), what the budget meter counts for a
run (``hero.run.budget.Meter``) and what the run record keeps over all of a story's runs
(``usage`` in ``runs/state/<id>.json``, written by :meth:`Usage.to_dict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass
class Usage:
    """Tokens, calls and dollars. The field order is the key order of ``usage`` in
    ``runs/state/<id>.json`` (a contract users' scripts read)."""

    tokens_in: int = 0
    """Prompt tokens, as the provider counts them."""
    tokens_out: int = 0
    """Completion tokens, as the provider counts them."""
    llm_calls: int = 0
    """Model calls that were answered (a failed attempt is no call)."""
    cost_usd: float = 0.0
    """The provider's reported cost, else priced from the provider file; 0 when unknown."""
    tokens_cached: int = 0
    """Of ``tokens_in``, those the provider read from its prompt cache."""

    @property
    def tokens(self) -> int:
        """What the token budgets count: prompt plus completion tokens."""
        return self.tokens_in + self.tokens_out

    def add(self, other: Usage) -> None:
        """Count ``other`` in this record."""
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.llm_calls += other.llm_calls
        self.cost_usd += other.cost_usd
        self.tokens_cached += other.tokens_cached

    def __add__(self, other: Usage) -> Usage:
        total = Usage()
        total.add(self)
        total.add(other)
        return total

    def to_dict(self) -> dict[str, Any]:
        """The record as ``runs/state/<id>.json`` holds it (cost rounded to a millionth)."""
        return {
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "llm_calls": self.llm_calls,
            "cost_usd": round(self.cost_usd, 6),
            "tokens_cached": self.tokens_cached,
        }

    @classmethod
    def from_dict(cls, data: object) -> Usage:
        """The record in a run record's ``usage`` object, as the budgets count it: a missing,
        odd or negative value counts 0 (hero status shows such a file as unreadable)."""
        if not isinstance(data, dict):
            return cls()
        return cls(
            tokens_in=_count(data.get("tokens_in")),
            tokens_out=_count(data.get("tokens_out")),
            llm_calls=_count(data.get("llm_calls")),
            cost_usd=_money(data.get("cost_usd")),
            tokens_cached=_count(data.get("tokens_cached")),
        )


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def _money(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return max(0.0, float(value))
