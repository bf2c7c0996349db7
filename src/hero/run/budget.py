"""Budgets: how many tokens, dollars and seconds a story and each of its rounds may spend.

The one place budgets are checked is :meth:`Meter.check`, and it runs before every model
call (each worker turn and the reviewer's call) through :meth:`Meter.wrap`: a budget that
is used up stops the story before the call that would spend more, never after it.

What counts:

- tokens: prompt plus completion tokens, as the provider reports them; an answer without
  token counts is counted by hero's estimate of the request's and the answer's sizes
  (hero.llm.client), and the record says how much is estimated (``estimated_calls``,
  ``estimated_tokens``), so no call is free because its endpoint did not count it;
- cost: the provider's reported cost when its answer carries one (``usage.cost``), else
  the provider file's prices (see :class:`hero.llm.client.LlmClient`). A USD budget needs
  prices: a story whose worker or reviewer model has none is refused at its start
  (:func:`unpriced`, before any model call), and `hero doctor` and `hero run --dry-run`
  say so first;
- a story's spend adds up over all its runs (``usage`` in its run record is kept across
  runs, retries and fresh starts); its wall time is the sum of its finished rounds'
  durations, plus the time of the rounds cut short (by a budget, an error, Ctrl-C, a
  daemon's stop: up to the stop; by SIGKILL: up to the record's last save; kept in the
  record's ``cut_short_s`` and counted once, though the round is run again), plus the
  current round's time so far. Time between runs (a story waiting in the inbox, a
  stopped daemon) does not count;
- a round's spend is what its worker turns and its reviewer call spent; its wall time runs
  from the round's start.

A budget is used up when the spend reaches it: a story at 10000 tokens with
``max_story_tokens: 10000`` makes no further call.

Every answered call is in the story's run record before the next step runs (the meter's
``on_count``: hero.run.record saves then), so a run killed with SIGKILL while a tool runs
leaves none of its spend out of the record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hero.config.providers import RoleConfig
from hero.config.schema import PROVIDERS_DIR, ROLES_FILE
from hero.config.sections import Budgets
from hero.errors import HeroError
from hero.llm.client import Completion, Model
from hero.llm.usage import Usage
from hero.state import RunState
from hero.story.record import MODEL_ROLES


class BudgetExceeded(HeroError):
    """A budget is used up. ``str()`` is the reason for the run record and the user, e.g.
    ``budget exceeded: story tokens 12034 > max_story_tokens 10000``; ``key`` is the
    roles.yaml setting that tripped."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key


@dataclass(frozen=True)
class Spend:
    """What was spent: tokens (in + out), dollars, seconds."""

    tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0


def story_spend(state: RunState, *, now: float | None = None) -> Spend:
    """A story's spend as its run record holds it: its usage over every run, and the wall
    time of its finished rounds and of the rounds cut short (``cut_short_s``). A round
    still open in the record counts up to ``now`` (a story being run), else up to the
    record's last save (a run killed in its middle)."""
    usage = Usage.from_dict(state.usage)
    wall = sum(max(0.0, float(r.duration_s or 0.0)) for r in state.rounds)
    wall += max(0.0, float(state.cut_short_s or 0.0))
    wall += state.open_round_s(now if now is not None else float(state.updated_at or 0.0))
    return Spend(tokens=usage.tokens, cost_usd=usage.cost_usd, wall_s=wall)


def story_over(budgets: Budgets, spent: Spend) -> BudgetExceeded | None:
    """The first story budget that ``spent`` has used up, or None."""
    return _first_over(
        (
            ("max_story_tokens", "story tokens", spent.tokens, budgets.story_tokens),
            ("max_story_cost_usd", "story cost", spent.cost_usd, budgets.story_cost_usd),
            ("max_story_wall_s", "story wall time", spent.wall_s, budgets.story_wall_s),
        )
    )


def round_over(budgets: Budgets, spent: Spend, round_no: int) -> BudgetExceeded | None:
    """The first round budget that round ``round_no``'s ``spent`` has used up, or None."""
    what = f"round {round_no}"
    return _first_over(
        (
            ("max_round_tokens", f"{what} tokens", spent.tokens, budgets.round_tokens),
            ("max_round_cost_usd", f"{what} cost", spent.cost_usd, budgets.round_cost_usd),
            ("max_round_wall_s", f"{what} wall time", spent.wall_s, budgets.round_wall_s),
        )
    )


#: A provider file's prices (hero.config.providers.Provider): what a USD budget counts by.
PRICES = ("input_usd_per_mtok", "output_usd_per_mtok")


@dataclass(frozen=True)
class Unpriced:
    """USD budgets that cannot hold: the models of ``roles`` have no prices to count by."""

    budgets: tuple[str, ...]
    """The USD budgets set, by their keys in config/roles.yaml."""
    roles: tuple[RoleConfig, ...]
    """The story's roles (the worker, the reviewer: those the meter counts) whose provider
    file lacks a price."""

    @property
    def problem(self) -> str:
        """``max_story_cost_usd is set, but the worker's model 'm' (provider 'local') has no
        input_usd_per_mtok or output_usd_per_mtok: hero cannot count the dollars it spends``."""
        same: dict[tuple[str, str, str, str], list[str]] = {}  # one model is said once
        for r in self.roles:
            missing = " or ".join(_missing(r))
            same.setdefault((r.provider.name, r.model, r.chosen_by, missing), []).append(r.role)
        models = "; ".join(
            " and ".join(f"the {role}'s" for role in roles)
            + f" model '{model}' (provider '{provider}'"
            + (f", chosen by {by}" if by else "")
            + f") has no {missing}"
            for (provider, model, by, missing), roles in same.items()
        )
        return (
            f"{_listed(self.budgets)} {'is' if len(self.budgets) == 1 else 'are'} set, but "
            f"{models}: hero cannot count the dollars it spends"
        )

    @property
    def fix(self) -> str:
        """Where to set the prices, or which budgets to take out."""
        files = sorted({f"{PROVIDERS_DIR}/{r.provider.name}.yaml" for r in self.roles})
        return (
            f"set {' and '.join(PRICES)} in {_listed(files)} (0 for a model that costs "
            f"nothing), or take {_listed(self.budgets)} out of {ROLES_FILE}"
        )

    def __str__(self) -> str:
        return f"{self.problem}. To run, {self.fix}"


def unpriced(budgets: Budgets, roles: Mapping[str, RoleConfig]) -> Unpriced | None:
    """Whether a USD budget is set while the model of a story's role in ``roles`` (a story's
    config's: its own ``model:`` applied) has no price in its provider file: such a budget
    would count nothing and never trip (a provider's reported cost cannot be known before
    its first answer). None when every USD budget can hold."""
    usd = tuple(b.key for b in budgets.each() if b.measure == "cost_usd" and b.limit is not None)
    if not usd:
        return None
    lacking = tuple(r for name in MODEL_ROLES if (r := roles.get(name)) and _missing(r))
    return Unpriced(usd, lacking) if lacking else None


def _missing(role: RoleConfig) -> list[str]:
    return [key for key in PRICES if getattr(role.provider, key) is None]


def _listed(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def settings(budgets: Budgets) -> dict[str, float | None]:
    """The budgets under their names in config/roles.yaml; None: no limit."""
    return {
        "max_story_tokens": budgets.story_tokens,
        "max_story_cost_usd": budgets.story_cost_usd,
        "max_story_wall_s": budgets.story_wall_s,
        "max_round_tokens": budgets.round_tokens,
        "max_round_cost_usd": budgets.round_cost_usd,
        "max_round_wall_s": budgets.round_wall_s,
    }


def format_spend(key: str, value: float) -> str:
    """A spend or a limit as people read it: ``12034``, ``$0.0123``, ``61.2 s``."""
    if key.endswith("_usd"):
        return f"${value:.4f}" if value < 100 else f"${value:,.2f}"
    if key.endswith("_wall_s"):
        return f"{value:.1f} s"
    return str(int(value))


class Meter:
    """The spend of one run of one story, checked against the budgets before every model
    call. Built once the run record is loaded (``state``: what earlier runs spent, and the
    finished rounds' durations); :meth:`start_round` at each round's start. Every call it
    lets through is counted in ``usage`` (this run's), and :meth:`spent` is what the run
    record keeps."""

    def __init__(
        self,
        budgets: Budgets,
        state: RunState,
        *,
        clock: Callable[[], float] = time.time,
        on_count: Callable[[], None] | None = None,
    ) -> None:
        self.budgets = budgets
        self._state = state
        self._clock = clock  # time.time: the clock of Round.started_at and duration_s
        self._on_count = on_count  # after each call counted: the record saves its spend
        self._before = Usage.from_dict(state.usage)  # what the runs before this one spent
        self.usage = Usage()  # what this run's calls spent
        self._round_no = 0
        self._round_started: float | None = None
        self._round = Usage()

    def start_round(self, round_no: int, started: float) -> None:
        """Round ``round_no`` started at ``started`` (``time.time()``): its spend starts at 0."""
        self._round_no = round_no
        self._round_started = started
        self._round = Usage()

    def spent(self) -> Usage:
        """The story's usage over all its runs, this run's calls so far included."""
        return self._before + self.usage

    def story(self) -> Spend:
        """The story's spend so far, this run's calls and current round included."""
        finished = sum(
            max(0.0, float(r.duration_s or 0.0))
            for r in self._state.rounds
            if self._round_started is None or r.round != self._round_no  # not twice
        ) + max(0.0, float(self._state.cut_short_s or 0.0))
        spent = self.spent()
        return Spend(spent.tokens, spent.cost_usd, finished + self._round_elapsed())

    def round(self) -> Spend:
        """The current round's spend so far."""
        return Spend(self._round.tokens, self._round.cost_usd, self._round_elapsed())

    def check(self) -> None:
        """Raise BudgetExceeded naming the first budget used up (story budgets first)."""
        if not _any_limit(self.budgets):
            return
        over = story_over(self.budgets, self.story())
        if over is None and self._round_started is not None:
            over = round_over(self.budgets, self.round(), self._round_no)
        if over is not None:
            raise over

    def add(self, completion: Completion) -> None:
        """Count a model call's answer, and tell ``on_count``."""
        usage = completion.usage
        self.usage.add(usage)
        self._round.add(usage)
        if self._on_count is not None:
            self._on_count()

    def wrap(self, model: Model) -> Metered:
        """``model``, checking the budgets before each call and counting each answer."""
        return Metered(model, self)

    def _round_elapsed(self) -> float:
        if self._round_started is None:
            return 0.0
        return max(0.0, self._clock() - self._round_started)


class Metered:
    """A model whose every call is checked against a :class:`Meter` first. Any other
    attribute is the wrapped model's (its ``usage``, its ``role`` with the context window
    and output cap), so a caller sizing its requests sees through the wrapper."""

    def __init__(self, model: Model, meter: Meter) -> None:
        self.model = model
        self.meter = meter

    def __getattr__(self, name: str) -> Any:
        if name in ("model", "meter"):  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.model, name)

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> Completion:
        self.meter.check()
        completion = self.model.complete(messages, tools)
        self.meter.add(completion)
        return completion


def _first_over(
    checks: Sequence[tuple[str, str, float, float | None]],
) -> BudgetExceeded | None:
    for key, what, spent, limit in checks:
        if limit is not None and spent >= limit:
            relation = ">" if spent > limit else ">="
            return BudgetExceeded(
                key,
                f"budget exceeded: {what} {format_spend(key, spent)} {relation} {key} {limit:g}",
            )
    return None


def _any_limit(budgets: Budgets) -> bool:
    return any(limit is not None for limit in settings(budgets).values())
