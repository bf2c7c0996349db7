"""What model calls spent: one record for a call, a worker's turn, a run and a story.

The same ``Usage`` is what :class:`hero.llm.client.Completion` reports for one call, what the agent
loop adds up for a round's worker (``AgentResult.usage``), what the budget meter counts for a
run (``hero.run.budget.Meter``) and what the run record keeps over all of a story's runs
(``usage`` in ``runs/state/<id>.json``, written by :meth:`Usage.to_dict`).

A call whose answer carries no token counts (no ``usage``, as some gateways and streaming
servers send it, or one of zeros) is counted by hero's estimate of the request's and the
answer's sizes (:func:`estimate_request`, :func:`estimate_message`: the context window's own
estimate, hero.agent.window), so that token and cost budgets still hold; ``estimated_calls``
and ``estimated_tokens`` say how much of a record is such an estimate.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Characters per token of the estimate: about right for code and English (most
#: tokenizers give 3.5-4 for English), on the safe side.
CHARS_PER_TOKEN = 3
#: The framing every message costs beyond its text (role, separators).
MESSAGE_OVERHEAD = 4


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
    estimated_calls: int = 0
    """Of ``llm_calls``, those whose answer carried no token counts: their tokens are
    hero's estimate from the request's and the answer's sizes."""
    estimated_tokens: int = 0
    """Of ``tokens_in`` plus ``tokens_out``, those hero estimated (see ``estimated_calls``)."""

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
        self.estimated_calls += other.estimated_calls
        self.estimated_tokens += other.estimated_tokens

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
            "estimated_calls": self.estimated_calls,
            "estimated_tokens": self.estimated_tokens,
        }

    @classmethod
    def from_dict(cls, data: object) -> Usage:
        """The record in a run record's ``usage`` object, as the budgets count it: a missing,
        odd or negative value counts 0 (hero status shows such a file as unreadable); a
        record of an older hero has no ``estimated_*``: nothing in it was estimated."""
        if not isinstance(data, dict):
            return cls()
        return cls(
            tokens_in=_count(data.get("tokens_in")),
            tokens_out=_count(data.get("tokens_out")),
            llm_calls=_count(data.get("llm_calls")),
            cost_usd=_money(data.get("cost_usd")),
            tokens_cached=_count(data.get("tokens_cached")),
            estimated_calls=_count(data.get("estimated_calls")),
            estimated_tokens=_count(data.get("estimated_tokens")),
        )

    @property
    def estimated(self) -> bool:
        """Whether any of its tokens are hero's estimate rather than the provider's count."""
        return self.estimated_calls > 0


def estimate_text(text: str) -> int:
    """The tokens ``text`` takes, as hero estimates them (about CHARS_PER_TOKEN characters
    each, rounded up)."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def estimate_message(message: dict[str, Any]) -> int:
    """The tokens one chat message takes: its text, its tool calls, its reasoning."""
    size = MESSAGE_OVERHEAD
    content = message.get("content")
    if isinstance(content, str):
        size += estimate_text(content)
    elif content is not None:
        size += estimate_text(json.dumps(content))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        size += MESSAGE_OVERHEAD + estimate_text(
            str(fn.get("name", "")) + str(fn.get("arguments", ""))
        )
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        size += estimate_text(reasoning)
    return size


def estimate_tools(tools: Sequence[dict[str, Any]] | None) -> int:
    """The tokens a request's tool schemas take (0 without tools)."""
    return estimate_text(json.dumps(list(tools))) if tools else 0


def estimate_request(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
) -> int:
    """The prompt tokens of a request with ``messages`` and ``tools``, unscaled."""
    return sum(estimate_message(m) for m in messages) + estimate_tools(tools)


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def _money(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return max(0.0, float(value))
